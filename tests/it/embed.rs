//! The embedding API through the example app (examples/embedded.rs),
//! started on an ephemeral port: its own route publishes, its actor and a
//! WebSocket client both receive, a stopped actor is unsubscribed, and
//! shutting down leaves no broker thread running.

use crate::common;

#[path = "../../examples/embedded.rs"]
mod embedded;

use std::time::Duration;

use actix::prelude::*;
use common::{block_on, eventually, eventually_async, http, wait_until};
use wharf::client::{Client, ClientOptions};

fn broker_threads() -> Vec<String> {
    std::fs::read_dir("/proc/self/task")
        .unwrap()
        .filter_map(|t| std::fs::read_to_string(t.ok()?.path().join("comm")).ok())
        .map(|c| c.trim().to_owned())
        .filter(|c| c.starts_with("wharf-taskq") || c.starts_with("wharf-store"))
        .collect()
}

/// A broker with its store in `data` and one task-queue worker.
async fn small_wharf(data: std::path::PathBuf) -> wharf::Wharf {
    wharf::Wharf::builder()
        .data_dir(data)
        .workers(1)
        .start()
        .await
        .unwrap()
}

#[test]
fn dropping_the_last_handle_stops_the_broker() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    block_on(async move {
        let wharf = small_wharf(data).await;
        assert_eq!(wharf.config().scheduler.workers, 1);
        assert_eq!(wharf.enqueue("built", "x").await.unwrap(), 1);
        wharf.publish("a", "b").await.unwrap();
        // Threads name themselves once they run: wait for that.
        assert!(wait_until(Duration::from_secs(10), || !broker_threads().is_empty()));
        drop(wharf.clone());
        assert!(!broker_threads().is_empty(), "a clone keeps it running");
        drop(wharf);
    });
    assert!(
        wait_until(Duration::from_secs(10), || broker_threads().is_empty()),
        "threads left running: {:?}",
        broker_threads()
    );
}

#[test]
fn the_example_app_publishes_to_its_actor_and_to_websocket_clients() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = wharf::Config::default();
    config.store.data_dir = dir.path().join("data");
    config.scheduler.workers = 1;
    config.server.shutdown_timeout_s = 2;
    block_on(async move {
        let shop = embedded::start(config).await.unwrap();
        let (wharf, auditor, log) = (shop.wharf.clone(), shop.auditor.clone(), shop.log.clone());
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let routes = wharf.clone();
        let server = actix_web::HttpServer::new(move || {
            actix_web::App::new().configure(|cfg| embedded::app(cfg, &routes))
        })
        .workers(1)
        .disable_signals()
        .listen(listener)
        .unwrap()
        .run();
        let handle = server.handle();
        let server = actix_rt::spawn(server);

        // A WebSocket client on the mounted broker routes.
        let client = Client::connect(&format!("ws://{addr}/broker/ws"), ClientOptions::default())
            .await
            .unwrap();
        let mut orders = client.subscribe("orders/+").await.unwrap();

        // The app's own route publishes.
        let (status, body) = actix_web::rt::task::spawn_blocking(move || {
            http(addr, "POST", "/orders", "two coffees")
        })
        .await
        .unwrap();
        assert_eq!(status, 201, "{body}");
        let reply: serde_json::Value = serde_json::from_str(&body).unwrap();
        assert_eq!(reply["notified"], 2, "the actor and the WebSocket client");
        // The embedded worker ran the receipt job.
        let job: uuid::Uuid = reply["receipt_job"].as_str().unwrap().parse().unwrap();
        let succeeded = || async {
            wharf.jobs().status(job).await.unwrap().status
                == wharf::broker::jobs::JobStatus::Succeeded
        };
        assert!(
            eventually_async(Duration::from_secs(5), succeeded).await,
            "the receipt job did not succeed: {:?}",
            wharf.jobs().status(job).await
        );

        let m = orders.recv_timeout(Duration::from_secs(5)).await.unwrap();
        assert_eq!(m.payload, b"two coffees");
        assert!(
            eventually(Duration::from_secs(5), || !log.lock().unwrap().is_empty()).await,
            "the actor never logged the order"
        );
        assert_eq!(
            log.lock().unwrap().as_slice(),
            ["orders/new #1: two coffees"]
        );
        // The kitchen consumed the ticket from the queue and acked it.
        assert!(
            eventually(Duration::from_secs(5), || {
                !shop.prepared.lock().unwrap().is_empty()
            })
            .await,
            "the kitchen never prepared the ticket"
        );
        assert_eq!(
            shop.prepared.lock().unwrap().as_slice(),
            [("two coffees".to_owned(), 1)]
        );
        let q = wharf
            .broker()
            .queues()
            .queue_info("kitchen/tickets")
            .await
            .unwrap();
        assert_eq!((q.depth, q.in_flight, q.stats.acked), (0, 0, 1), "{q:?}");
        let (status, body) = actix_web::rt::task::spawn_blocking(move || {
            http(addr, "GET", "/broker/queues/kitchen/tickets", "")
        })
        .await
        .unwrap();
        assert_eq!(status, 200, "{body}");
        let (status, _) =
            actix_web::rt::task::spawn_blocking(move || http(addr, "GET", "/broker/health", ""))
                .await
                .unwrap();
        assert_eq!(status, 200);

        // An actor that stops is unsubscribed cleanly.
        assert_eq!(
            wharf.broker().topic_info("orders/new").await.map(|t| t.0),
            Some(2)
        );
        auditor.do_send(StopActor);
        assert!(
            eventually(Duration::from_secs(5), || !auditor.connected()).await,
            "the auditor did not stop"
        );
        wharf.publish("orders/new", "three teas").await.unwrap();
        assert_eq!(
            wharf.broker().topic_info("orders/new").await.map(|t| t.0),
            Some(1)
        );

        client.close(false).await.unwrap();
        handle.stop(true).await;
        let _ = server.await;
        wharf.shutdown().await.unwrap();
        drop(wharf);
        drop(shop);
    });
    assert!(
        wait_until(Duration::from_secs(10), || broker_threads().is_empty()),
        "threads left running: {:?}",
        broker_threads()
    );
}

/// Stops the example's actor from outside.
#[derive(Message)]
#[rtype(result = "()")]
struct StopActor;

impl Handler<StopActor> for embedded::Auditor {
    type Result = ();
    fn handle(&mut self, _: StopActor, ctx: &mut Self::Context) {
        ctx.stop();
    }
}

/// Counts what it is given: topic deliveries, and queue messages it acks.
struct Counter(std::sync::Arc<std::sync::atomic::AtomicUsize>);

impl Actor for Counter {
    type Context = Context<Self>;
}

impl Handler<wharf::Delivery> for Counter {
    type Result = ();
    fn handle(&mut self, _: wharf::Delivery, _: &mut Context<Self>) {
        self.0.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    }
}

impl Handler<wharf::QueueMessage> for Counter {
    type Result = ResponseFuture<()>;
    fn handle(&mut self, m: wharf::QueueMessage, _: &mut Context<Self>) -> Self::Result {
        let seen = self.0.clone();
        Box::pin(async move {
            if m.settler.ack().await.is_ok() {
                seen.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            }
        })
    }
}

/// The README's pattern: actors started inline, their `Addr` not kept,
/// live as long as their subscription and their consumer, and cancelling
/// both ends them without an error.
#[test]
fn actors_started_inline_live_as_long_as_their_subscription() {
    use std::sync::atomic::{AtomicUsize, Ordering};
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    block_on(async move {
        let wharf = small_wharf(data).await;
        let (heard, taken) = (
            std::sync::Arc::new(AtomicUsize::new(0)),
            std::sync::Arc::new(AtomicUsize::new(0)),
        );
        let sub = wharf
            .subscribe("inline/#", Counter(heard.clone()).start().recipient())
            .await
            .unwrap();
        let consumer = wharf
            .consume("inline-q", Counter(taken.clone()).start().recipient(), 1)
            .await
            .unwrap();
        // Give the actors' mailboxes a turn, as a real app does.
        actix_rt::task::yield_now().await;
        wharf.publish("inline/a", "x").await.unwrap();
        wharf.enqueue("inline-q", "y").await.unwrap();
        assert!(
            eventually(Duration::from_secs(10), || heard.load(Ordering::SeqCst)
                == 1
                && taken.load(Ordering::SeqCst) == 1)
            .await,
            "heard {} taken {}",
            heard.load(Ordering::SeqCst),
            taken.load(Ordering::SeqCst)
        );
        let q = wharf
            .broker()
            .queues()
            .queue_info("inline-q")
            .await
            .unwrap();
        assert_eq!((q.depth, q.in_flight, q.stats.acked), (0, 0, 1), "{q:?}");
        sub.cancel().await.unwrap();
        consumer.cancel().await.unwrap();
        wharf.publish("inline/b", "z").await.unwrap();
        wharf.shutdown().await.unwrap();
        assert_eq!(heard.load(Ordering::SeqCst), 1, "nothing after cancel");
    });
}
