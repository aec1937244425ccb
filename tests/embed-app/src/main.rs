//! The README's "Embedding" app, as an app outside this repository builds
//! it: `scripts/embed-check` copies this file into a fresh package under
//! `target/` whose only link to Wharf is `wharf = { path = ... }` (no
//! `[patch]`), builds and runs it, and checks over HTTP that it serves
//! `/broker/health`, publishes and consumes. Two changes from the README:
//! the data directory is the first argument and the app listens on a free
//! port, which it prints, so that runs never collide.

use actix::prelude::*;
use actix_web::{App, HttpServer, web};
use wharf::{Config, Delivery, QueueMessage, Wharf};

struct Auditor;
impl Actor for Auditor {
    type Context = Context<Self>;
}
impl Handler<Delivery> for Auditor {
    type Result = ();
    fn handle(&mut self, d: Delivery, _: &mut Context<Self>) {
        println!(
            "audited {} #{}: {}",
            d.message.topic,
            d.message.seq,
            String::from_utf8_lossy(&d.message.payload)
        );
    }
}

struct Kitchen;
impl Actor for Kitchen {
    type Context = Context<Self>;
}
impl Handler<QueueMessage> for Kitchen {
    type Result = ResponseFuture<()>;
    fn handle(&mut self, m: QueueMessage, _: &mut Context<Self>) -> Self::Result {
        Box::pin(async move {
            let ticket = String::from_utf8_lossy(&m.payload).into_owned();
            match m.settler.ack().await {
                Ok(()) => println!("prepared {ticket} (delivery {})", m.count),
                Err(e) => println!("ack failed: {e}"),
            }
        })
    }
}

#[actix_web::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut config = Config::default();
    if let Some(dir) = std::env::args_os().nth(1) {
        config.store.data_dir = dir.into();
    }
    let wharf = Wharf::start(config).await?;
    wharf.subscribe("orders/#", Auditor.start().recipient()).await?;
    let kitchen = wharf.consume("kitchen/tickets", Kitchen.start().recipient(), 1).await?;
    let app = wharf.clone();
    let server = HttpServer::new(move || {
        App::new()
            .service(web::scope("/broker").configure(app.configure()))
            .app_data(web::Data::new(app.clone()))
            .route(
                "/orders",
                web::post().to(|w: web::Data<Wharf>, body: web::Bytes| async move {
                    w.enqueue("kitchen/tickets", body.clone())
                        .await
                        .map_err(actix_web::error::ErrorServiceUnavailable)?;
                    w.publish("orders/new", body)
                        .await
                        .map(|o| format!("order {}", o.seq))
                        .map_err(actix_web::error::ErrorServiceUnavailable)
                }),
            )
    })
    .workers(1)
    .bind("127.0.0.1:0")?;
    for addr in server.addrs() {
        println!("listening on {addr}");
    }
    server.run().await?;
    kitchen.cancel().await?;
    wharf.shutdown().await?;
    println!("stopped");
    Ok(())
}
