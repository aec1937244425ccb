//! JetStream's own work queue, driven directly over NATS, beside Wharf's
//! durable queues in the same run: the same shape as
//! `queues::round_trip_between` (4 publishers with a window of
//! confirmations in flight, 2 consumers acking in batches of 100, 64 B).
//! Spoken through JetStream's JSON API on a core NATS client (as the
//! broker's cluster link does), so no JetStream client version is
//! involved: publishes are requests answered with a PubAck, consumers
//! pull batches from a durable pull consumer and ack each message (a work
//! queue takes explicit acks only), not waiting for the acks.

use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use serde_json::json;

use super::{Args, Row};

const STREAM: &str = "WHARFBENCH";
const SUBJECT: &str = "wharfbench.q";
const CONSUMER: &str = "workers";

async fn connect(url: &str) -> async_nats::Client {
    async_nats::ConnectOptions::new()
        .request_timeout(Some(Duration::from_secs(30)))
        .connect(url)
        .await
        .expect("the bench connects to NATS")
}

async fn api(client: &async_nats::Client, subject: String, body: serde_json::Value) {
    let reply = client
        .request(subject.clone(), body.to_string().into())
        .await
        .unwrap_or_else(|e| panic!("{subject}: {e}"));
    let v: serde_json::Value = serde_json::from_slice(&reply.payload).expect("JSON");
    if v.get("error").is_some() {
        panic!("{subject}: {v}");
    }
}

/// Makes the work-queue stream (R `replicas`) and its consumer afresh.
async fn setup(url: &str, replicas: usize) {
    let c = connect(url).await;
    let _ = c
        .request(format!("$JS.API.STREAM.DELETE.{STREAM}"), "".into())
        .await;
    api(
        &c,
        format!("$JS.API.STREAM.CREATE.{STREAM}"),
        json!({
            "name": STREAM, "subjects": [SUBJECT], "retention": "workqueue",
            "storage": "file", "num_replicas": replicas, "discard": "old",
            "max_msgs": -1, "max_bytes": -1, "max_age": 0, "max_consumers": -1,
            "duplicate_window": 120_000_000_000u64,
        }),
    )
    .await;
    // A replicated stream takes a moment to elect its leader.
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let r = c
            .request(format!("$JS.API.STREAM.INFO.{STREAM}"), "".into())
            .await;
        let led = r.ok().and_then(|m| {
            let v: serde_json::Value = serde_json::from_slice(&m.payload).ok()?;
            Some(v.get("cluster").is_none() || v["cluster"]["leader"].as_str().is_some())
        });
        if led == Some(true) || Instant::now() > deadline {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    api(
        &c,
        format!("$JS.API.CONSUMER.DURABLE.CREATE.{STREAM}.{CONSUMER}"),
        json!({
            "stream_name": STREAM,
            "config": {
                "durable_name": CONSUMER, "ack_policy": "explicit", "deliver_policy": "all",
                "max_ack_pending": 20_000, "ack_wait": 30_000_000_000u64,
                "num_replicas": 0,
            }
        }),
    )
    .await;
}

async fn publish(url: String, n: usize, window: usize) {
    let c = connect(&url).await;
    let payload = bytes::Bytes::from(vec![0x5au8; 64]);
    let mut waits = VecDeque::with_capacity(window);
    for _ in 0..n {
        if waits.len() >= window {
            let w: tokio::task::JoinHandle<_> = waits.pop_front().expect("a wait");
            w.await.expect("publish task");
        }
        let (c, p) = (c.clone(), payload.clone());
        waits.push_back(tokio::spawn(async move {
            let ack = c.request(SUBJECT, p).await.expect("a PubAck");
            assert!(
                !ack.payload.starts_with(b"{\"error"),
                "JetStream refused a publish: {:?}",
                ack.payload
            );
        }));
    }
    for w in waits {
        w.await.expect("publish task");
    }
}

async fn consume(url: String, total: usize, done: Arc<AtomicUsize>) {
    let c = connect(&url).await;
    let inbox = c.new_inbox();
    let mut sub = c.subscribe(inbox.clone()).await.expect("subscribe");
    let next = format!("$JS.API.CONSUMER.MSG.NEXT.{STREAM}.{CONSUMER}");
    let batch = 1000;
    while done.load(Ordering::Relaxed) < total {
        c.publish_with_reply(
            next.clone(),
            inbox.clone(),
            json!({"batch": batch, "expires": 500_000_000u64})
                .to_string()
                .into(),
        )
        .await
        .expect("pull");
        let mut got = 0;
        while got < batch {
            let Ok(Some(m)) = tokio::time::timeout(Duration::from_secs(2), sub.next()).await else {
                break;
            };
            // A status (no messages, timeout) ends the pull.
            if m.status.is_some() {
                break;
            }
            got += 1;
            // A work queue takes explicit acks only: one per message, not
            // waited for (as NATS clients ack).
            if let Some(r) = m.reply {
                c.publish(r, "+ACK".into()).await.expect("ack");
            }
        }
        done.fetch_add(got, Ordering::Relaxed);
    }
    let _ = c.flush().await;
}

/// The end-to-end scenario on JetStream at `url` with `replicas`; the row
/// and the rate (msg/s).
pub(crate) fn work_queue(args: &Args, url: &str, replicas: usize) -> (Row, f64) {
    run(args, url, replicas, 4, 2)
}

/// Confirmed publishes alone (no consumer) from 8 publishers, on
/// JetStream at `url` with `replicas`: the shape of Wharf's "durable
/// enqueue, 8 publishers" row.
pub(crate) fn confirmed_publishes(args: &Args, url: &str, replicas: usize) -> (Row, f64) {
    run(args, url, replicas, 8, 0)
}

fn run(args: &Args, url: &str, replicas: usize, publishers: usize, consumers: usize) -> (Row, f64) {
    let _bar = crate::progress::scenario(format!(
        "JetStream R{replicas}, {publishers} publishers, {consumers} consumers"
    ));
    let per = args.queue_messages;
    let total = per * publishers;
    let runtime = || {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("a runtime")
    };
    runtime().block_on(setup(url, replicas));
    let cpu = crate::Cpu::start(None);
    let start = Instant::now();
    let done = Arc::new(AtomicUsize::new(0));
    // A thread each, as the Wharf scenarios run their clients.
    let mut threads = Vec::new();
    for _ in 0..consumers {
        let (url, done) = (url.to_owned(), done.clone());
        threads.push(std::thread::spawn(move || {
            runtime().block_on(consume(url, total, done));
        }));
    }
    for _ in 0..publishers {
        let (url, window) = (url.to_owned(), args.durable_window.max(1));
        threads.push(std::thread::spawn(move || {
            runtime().block_on(publish(url, per, window));
        }));
    }
    for t in threads {
        t.join().expect("a bench thread");
    }
    let rate = total as f64 / start.elapsed().as_secs_f64();
    let (scenario, result) = if consumers == 0 {
        (
            format!(
                "JetStream R{replicas} confirmed publishes, {publishers} publishers x {} in \
                 flight, 64 B",
                args.durable_window
            ),
            format!("{rate:.0} confirmed msg/s"),
        )
    } else {
        (
            format!(
                "JetStream R{replicas} work queue, {publishers} publishers x {} in flight, \
                 {consumers} consumers (pull 1000, an ack per message), 64 B",
                args.durable_window
            ),
            format!("{rate:.0} msg/s end to end"),
        )
    };
    let row = Row {
        scenario,
        result,
        gen_cores: cpu.cores().0,
        broker_cores: None,
    };
    (row, rate)
}
