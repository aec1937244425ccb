//! Wharf inside an Actix web app of your own: the app keeps its routes,
//! mounts the broker under `/broker`, publishes and enqueues from one of
//! its handlers, has one of its own actors subscribed to a topic and
//! another consuming a queue with acks, and runs an embedded job worker
//! that prints a receipt for each order.
//!
//! `cargo run -p wharf-examples --example embedded`, then:
//!
//! ```text
//! curl -X POST localhost:8080/orders -d 'two coffees'     # the app's own route
//! websocat ws://localhost:8080/broker/ws                  # the broker's WebSocket
//! curl localhost:8080/broker/health
//! curl localhost:8080/broker/queues/kitchen/tickets           # the queue
//! ```
#![allow(dead_code)] // tests/it/embed.rs includes this file as a module

use std::sync::{Arc, Mutex};

use actix::prelude::*;
use actix_web::{HttpResponse, web};
use wharf::broker::jobs::NewJob;
use wharf::{Config, Delivery, JobWorkers, QueueMessage, Wharf};

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

/// The app's other actor: works through the kitchen's queue, one ticket
/// at a time, and acknowledges each once it is done.
pub struct Kitchen {
    /// Tickets prepared, with their delivery count.
    pub done: Arc<Mutex<Vec<(String, u32)>>>,
}

impl Actor for Kitchen {
    type Context = Context<Self>;
}

impl Handler<QueueMessage> for Kitchen {
    type Result = ResponseFuture<()>;

    fn handle(&mut self, m: QueueMessage, _: &mut Self::Context) -> Self::Result {
        let done = self.done.clone();
        Box::pin(async move {
            let ticket = String::from_utf8_lossy(&m.payload).into_owned();
            println!("kitchen: preparing {ticket} (delivery {})", m.count);
            // The ack returns once the queue's delete is on disk; if it
            // fails the ticket comes back after the ack timeout.
            match m.settler.ack().await {
                Ok(()) => {
                    if let Ok(mut d) = done.lock() {
                        d.push((ticket, m.count));
                    }
                }
                Err(e) => eprintln!("kitchen: ack failed: {e}"),
            }
        })
    }
}

/// The app's own handler, publishing and enqueueing through the embedded
/// broker.
async fn place_order(wharf: web::Data<Wharf>, body: web::Bytes) -> HttpResponse {
    // The ticket must not be lost: enqueue returns once it is on disk.
    if let Err(e) = wharf.enqueue("kitchen/tickets", body.clone()).await {
        return HttpResponse::ServiceUnavailable().json(serde_json::json!({
            "error": {"code": "broker", "message": e.to_string()}
        }));
    }
    let receipt = wharf
        .jobs()
        .enqueue(NewJob {
            kind: "receipt".into(),
            entity_id: uuid::Uuid::now_v7(),
            data: serde_json::json!({ "order": String::from_utf8_lossy(&body) }),
            priority: 0,
            timeout_ms: Some(10_000),
        })
        .await;
    let receipt = match receipt {
        Ok(id) => id,
        Err(e) => {
            return HttpResponse::ServiceUnavailable().json(serde_json::json!({
                "error": {"code": "jobs", "message": e.to_string()}
            }));
        }
    };
    match wharf.publish("orders/new", body).await {
        Ok(outcome) => HttpResponse::Created().json(serde_json::json!({
            "order": outcome.seq,
            "notified": outcome.delivered,
            "receipt_job": receipt,
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

/// The running example: the broker and the app's two actors.
pub struct Shop {
    /// The embedded broker.
    pub wharf: Wharf,
    /// Subscribed to `orders/#`.
    pub auditor: Addr<Auditor>,
    /// What the auditor saw.
    pub log: Arc<Mutex<Vec<String>>>,
    /// Consuming `kitchen/tickets`.
    pub kitchen: Addr<Kitchen>,
    /// What the kitchen prepared.
    pub prepared: Arc<Mutex<Vec<(String, u32)>>>,
    /// The embedded workers printing receipts.
    pub receipts: JobWorkers,
}

/// Starts the broker, subscribes the auditor to every order topic and
/// makes the kitchen a consumer of the tickets queue.
pub async fn start(config: Config) -> Result<Shop, Box<dyn std::error::Error>> {
    let wharf = Wharf::start(config).await?;
    let log = Arc::new(Mutex::new(Vec::new()));
    let auditor = Auditor { log: log.clone() }.start();
    wharf
        .subscribe("orders/#", auditor.clone().recipient())
        .await?;
    let prepared = Arc::new(Mutex::new(Vec::new()));
    let kitchen = Kitchen {
        done: prepared.clone(),
    }
    .start();
    wharf
        .consume("kitchen/tickets", kitchen.clone().recipient(), 1)
        .await?;
    // Receipts are jobs, run by two workers inside this process.
    let receipts = wharf.run_job_workers(vec!["receipt".into()], 2, |job| async move {
        println!(
            "receipt for {} (attempt {})",
            job.data["order"], job.attempt
        );
        Ok(())
    })?;
    Ok(Shop {
        receipts,
        wharf,
        auditor,
        log,
        kitchen,
        prepared,
    })
}

#[actix_web::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    tracing_subscriber::fmt().with_env_filter("info").init();
    let mut config = Config::default();
    config.store.data_dir = std::env::temp_dir().join("wharf-embedded-example");
    let shop = start(config).await?;
    let wharf = shop.wharf.clone();
    let routes = wharf.clone();
    println!("listening on http://127.0.0.1:8080 (Ctrl-C to stop)");
    actix_web::HttpServer::new(move || actix_web::App::new().configure(|cfg| app(cfg, &routes)))
        .bind("127.0.0.1:8080")?
        .run()
        .await?;
    wharf.shutdown().await?;
    Ok(())
}
