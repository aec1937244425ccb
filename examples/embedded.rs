//! Wharf inside an Actix web app of your own: the app keeps its routes,
//! mounts the broker under `/broker`, publishes from one of its handlers,
//! and has one of its own actors subscribed to a topic.
//!
//! `cargo run --example embedded`, then:
//!
//! ```text
//! curl -X POST localhost:8080/orders -d 'two coffees'     # the app's own route
//! websocat ws://localhost:8080/broker/ws                  # the broker's WebSocket
//! curl localhost:8080/broker/health
//! ```
//!
//! (Consuming a queue with acks comes with durable queues.)
#![allow(dead_code)] // tests/embed.rs includes this file as a module

use std::sync::{Arc, Mutex};

use actix::prelude::*;
use actix_web::{HttpResponse, web};
use wharf::{Config, Delivery, Wharf};

/// The app's own actor: keeps an audit log of every order published.
pub struct Auditor {
    /// What it saw, for whoever wants to look (the test does).
    pub log: Arc<Mutex<Vec<String>>>,
}

impl Actor for Auditor {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Self::Context) {
        // Deliveries are try_send: give the mailbox room for bursts.
        ctx.set_mailbox_capacity(1024);
    }
}

impl Handler<Delivery> for Auditor {
    type Result = ();

    fn handle(&mut self, d: Delivery, _: &mut Self::Context) {
        let line = format!(
            "{} #{}: {}",
            d.message.topic,
            d.message.seq,
            String::from_utf8_lossy(&d.message.payload)
        );
        println!("audit: {line}");
        if let Ok(mut log) = self.log.lock() {
            log.push(line);
        }
    }
}

/// The app's own handler, publishing through the embedded broker.
async fn place_order(wharf: web::Data<Wharf>, body: web::Bytes) -> HttpResponse {
    match wharf.publish("orders/new", body).await {
        Ok(outcome) => HttpResponse::Created().json(serde_json::json!({
            "order": outcome.seq,
            "notified": outcome.delivered,
        })),
        Err(e) => HttpResponse::ServiceUnavailable().json(serde_json::json!({
            "error": {"code": "broker", "message": e.to_string()}
        })),
    }
}

/// The app: its own routes plus the broker's under `/broker`.
pub fn app(cfg: &mut web::ServiceConfig, wharf: &Wharf) {
    cfg.app_data(web::Data::new(wharf.clone()))
        .route("/", web::get().to(|| async { "my shop" }))
        .route("/orders", web::post().to(place_order))
        .service(web::scope("/broker").configure(wharf.configure()));
}

/// Starts the broker and subscribes the auditor to every order topic.
pub async fn start(
    config: Config,
) -> Result<(Wharf, Addr<Auditor>, Arc<Mutex<Vec<String>>>), Box<dyn std::error::Error>> {
    let wharf = Wharf::start(config).await?;
    let log = Arc::new(Mutex::new(Vec::new()));
    let auditor = Auditor { log: log.clone() }.start();
    wharf
        .subscribe("orders/#", auditor.clone().recipient())
        .await?;
    Ok((wharf, auditor, log))
}

#[actix_web::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    tracing_subscriber::fmt().with_env_filter("info").init();
    let mut config = Config::default();
    config.store.data_dir = std::env::temp_dir().join("wharf-embedded-example");
    let (wharf, _auditor, _log) = start(config).await?;
    let routes = wharf.clone();
    println!("listening on http://127.0.0.1:8080 (Ctrl-C to stop)");
    actix_web::HttpServer::new(move || actix_web::App::new().configure(|cfg| app(cfg, &routes)))
        .bind("127.0.0.1:8080")?
        .run()
        .await?;
    wharf.shutdown().await?;
    Ok(())
}
