//! Queue scenarios: durable enqueues with receipts (1 and 8 publishers,
//! 64 B and 4 KiB), enqueue + consume + ack end to end, and the time a
//! broker with a million stored messages takes to be ready again.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use wharf::client::{Client, EnqueueOptions};

use wharf::store::compact::dir_size;

use super::{Args, Cpu, Row, options, spawn_broker_in};

/// Every queue scenario against the broker at `url`, whose store flushes
/// per `flush` (for the labels).
pub(crate) fn scenarios(args: &Args, url: &str, flush: &str) -> Vec<Row> {
    if args.round_trip_only {
        return vec![round_trip(args, url, flush)];
    }
    vec![
        enqueue(args, url, 1, 64, flush),
        enqueue(args, url, 8, 64, flush),
        enqueue(args, url, 1, 4096, flush),
        enqueue(args, url, 8, 4096, flush),
        round_trip(args, url, flush),
    ]
}

/// `publishers` clients enqueue `queue_messages` each, keeping
/// `durable_window` unconfirmed at a time; returns confirmed msg/s.
pub(crate) fn enqueue(args: &Args, url: &str, publishers: usize, size: usize, flush: &str) -> Row {
    let queue = format!("bench/enqueue/{publishers}/{size}");
    let _bar = crate::progress::scenario(format!(
        "durable enqueue, flush = {flush}, {publishers} publisher(s), {size} B"
    ));
    let cpu = Cpu::start(args.pid);
    let start = Instant::now();
    let n = args.queue_messages;
    let sent = run_publishers(args, url, &queue, publishers, n, size);
    let elapsed = start.elapsed();
    let (gen_cores, broker_cores) = cpu.cores();
    Row {
        scenario: format!(
            "durable enqueue, flush = {flush}, {publishers} publisher(s) x {} in flight, {size} B",
            args.durable_window
        ),
        result: format!("{:.0} confirmed msg/s", sent as f64 / elapsed.as_secs_f64()),
        gen_cores,
        broker_cores,
    }
}

/// Starts `publishers` threads that each enqueue `n` messages with
/// receipts (a window in flight) and waits for them; returns the total.
fn run_publishers(
    args: &Args,
    url: &str,
    queue: &str,
    publishers: usize,
    n: usize,
    size: usize,
) -> usize {
    let window = args.durable_window.max(1);
    let threads: Vec<_> = (0..publishers)
        .map(|_| {
            let (url, opts, queue) = (url.to_owned(), options(args), queue.to_owned());
            std::thread::spawn(move || {
                actix_rt::System::new().block_on(async move {
                    let c = Client::connect(&url, opts)
                        .await
                        .expect("publisher connects");
                    let payload = vec![0x5au8; size];
                    type Wait = std::pin::Pin<
                        Box<
                            dyn std::future::Future<
                                    Output = Result<u64, wharf::client::ClientError>,
                                >,
                        >,
                    >;
                    let mut waits: std::collections::VecDeque<Wait> =
                        std::collections::VecDeque::new();
                    for _ in 0..n {
                        if waits.len() >= window {
                            let w = waits.pop_front().expect("a wait");
                            w.await.expect("durable enqueue");
                        }
                        let w = c
                            .enqueue_pipelined(&queue, payload.clone(), EnqueueOptions::default())
                            .await
                            .expect("enqueue");
                        waits.push_back(Box::pin(w));
                    }
                    for w in waits {
                        w.await.expect("durable enqueue");
                    }
                })
            })
        })
        .collect();
    for t in threads {
        t.join().expect("publisher thread");
    }
    n * publishers
}

/// 4 publishers enqueue while 2 consumers (prefetch 500) take and ack
/// (acks batched, not awaited); returns consumed msg/s end to end.
fn round_trip(args: &Args, url: &str, flush: &str) -> Row {
    round_trip_between(args, url, url, "bench/roundtrip", flush)
}

/// [`round_trip`] with the publishers on `url` and the consumers on
/// `consumer_url` (nodes of a cluster), on `queue`.
pub(crate) fn round_trip_between(
    args: &Args,
    url: &str,
    consumer_url: &str,
    queue: &'static str,
    flush: &str,
) -> Row {
    let _bar = crate::progress::scenario(format!("queue round trip, flush = {flush}"));
    let (publishers, consumers) = (4, 2);
    let total = args.queue_messages * publishers;
    let cpu = Cpu::start(args.pid);
    let start = Instant::now();
    let per_consumer = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let consumer_threads: Vec<_> = (0..consumers)
        .map(|_| {
            let (url, opts, done) = (consumer_url.to_owned(), options(args), per_consumer.clone());
            std::thread::spawn(move || {
                actix_rt::System::new().block_on(async move {
                    use std::sync::atomic::Ordering;
                    let c = Client::connect(&url, opts)
                        .await
                        .expect("consumer connects");
                    let mut k = c.consume(queue, 500).await.expect("consume");
                    let mut ids = Vec::with_capacity(100);
                    while done.load(Ordering::Relaxed) < total {
                        let Some(d) = k.recv_timeout(Duration::from_millis(200)).await else {
                            continue;
                        };
                        ids.push(d.id);
                        while ids.len() < 100 {
                            match k.try_recv() {
                                Some(d) => ids.push(d.id),
                                None => break,
                            }
                        }
                        done.fetch_add(ids.len(), Ordering::Relaxed);
                        c.ack_nowait(k.id(), &ids).await.expect("ack");
                        ids.clear();
                    }
                    c.ping().await.expect("ping");
                })
            })
        })
        .collect();
    run_publishers(args, url, queue, publishers, args.queue_messages, 64);
    for t in consumer_threads {
        t.join().expect("consumer thread");
    }
    let elapsed = start.elapsed();
    let (gen_cores, broker_cores) = cpu.cores();
    Row {
        scenario: format!(
            "enqueue + consume + ack, flush = {flush}, {publishers} publishers, {consumers} consumers (prefetch 500), 64 B"
        ),
        result: format!(
            "{:.0} msg/s end to end",
            total as f64 / elapsed.as_secs_f64()
        ),
        gen_cores,
        broker_cores,
    }
}

/// Fills a queue with `restart_messages` 64-byte messages, stops the
/// broker, starts it again and reports the time until it listens (queues
/// restored) and until the first delivery.
pub(crate) fn restart(args: &Args) -> Option<Row> {
    let dir = std::env::temp_dir().join(format!("wharf-bench-{}-restart", std::process::id()));
    let _bar = crate::progress::scenario(format!(
        "restart with {} stored messages",
        args.restart_messages
    ));
    let _ = std::fs::remove_dir_all(&dir);
    let extra = "[store]\nflush = \"interval\"\n";
    let (broker, url) = spawn_broker_in(args, &dir, extra);
    let per = args.restart_messages.div_ceil(8);
    let mut fill = args.clone();
    fill.durable_window = 256;
    let t0 = Instant::now();
    let stored = run_publishers(&fill, &url, "bench/restart", 8, per, 64);
    let census = store_jobs(&url, args.restart_jobs);
    let filled = t0.elapsed();
    broker.stop_keeping_data();
    let t1 = Instant::now();
    let (broker, url) = spawn_broker_in(args, &dir, extra);
    let listening = t1.elapsed();
    let first = actix_rt::System::new().block_on(async {
        let c = Client::connect(&url, options(args)).await.expect("connect");
        let mut k = c.consume("bench/restart", 100).await.expect("consume");
        k.recv_timeout(Duration::from_secs(30))
            .await
            .expect("a delivery");
        t1.elapsed()
    });
    drop(broker);
    Some(Row {
        scenario: format!(
            "restart with {stored} stored messages and {} jobs ({} queued, {} running, \
             {} succeeded, {} failed; filled in {:.1} s)",
            census.queued + census.running + census.succeeded + census.failed,
            census.queued,
            census.running,
            census.succeeded,
            census.failed,
            filled.as_secs_f64()
        ),
        result: format!(
            "listening after {:.2} s, first delivery after {:.2} s",
            listening.as_secs_f64(),
            first.as_secs_f64()
        ),
        gen_cores: 0.0,
        broker_cores: None,
    })
}

/// Jobs in each state a restart finds, as [`store_jobs`] leaves them.
#[derive(Debug, Default, Clone, Copy)]
struct JobCensus {
    queued: usize,
    running: usize,
    succeeded: usize,
    failed: usize,
}

/// Enqueues `n` jobs over HTTP (8 keep-alive connections) on the broker
/// at `url`, then has 8 workers take 60% of them: of those, half succeed,
/// a sixth fail (and wait for a retry) and the rest stay running. Returns
/// how many of each were stored.
fn store_jobs(url: &str, n: usize) -> JobCensus {
    let addr: std::net::SocketAddr = url
        .trim_start_matches("ws://")
        .trim_end_matches("/ws")
        .parse()
        .expect("broker address");
    let stored = enqueue_jobs(addr, n);
    let take = stored * 6 / 10;
    let taken = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let threads: Vec<_> = (0..8)
        .map(|_| {
            let taken = taken.clone();
            std::thread::spawn(move || {
                let mut http = crate::jobs::Http::connect(addr);
                let (status, body) = http.post("/workers", r#"{"kinds":["restart"]}"#);
                assert_eq!(status, 201, "{body}");
                let reg: serde_json::Value = serde_json::from_str(&body).expect("json");
                let worker = reg["worker_id"].as_str().unwrap_or_default().to_owned();
                let dequeue = format!("/workers/{worker}/dequeue?wait_ms=0");
                let mut census = JobCensus::default();
                loop {
                    let k = taken.fetch_add(1, Ordering::Relaxed);
                    if k >= take {
                        return census;
                    }
                    let (status, body) = http.post(&dequeue, "");
                    if status != 200 {
                        return census;
                    }
                    let job: serde_json::Value = serde_json::from_str(&body).expect("json");
                    let outcome = match k % 6 {
                        0..=2 => "succeeded",
                        3 => "failed",
                        _ => {
                            census.running += 1;
                            continue;
                        }
                    };
                    let report = format!(
                        r#"{{"worker_id":"{worker}","token":{},"outcome":"{outcome}"}}"#,
                        job["token"]
                    );
                    let id = job["id"].as_str().unwrap_or_default();
                    let (status, body) = http.post(&format!("/jobs/{id}/outcome"), &report);
                    assert_eq!(status, 200, "{body}");
                    if outcome == "succeeded" {
                        census.succeeded += 1;
                    } else {
                        census.failed += 1;
                    }
                }
            })
        })
        .collect();
    let mut census = JobCensus::default();
    for t in threads {
        let c = t.join().unwrap_or_default();
        census.running += c.running;
        census.succeeded += c.succeeded;
        census.failed += c.failed;
    }
    census.queued = stored - census.running - census.succeeded - census.failed;
    census
}

/// Enqueues `n` jobs of kind "restart" over HTTP (8 keep-alive
/// connections); returns how many were stored.
fn enqueue_jobs(addr: std::net::SocketAddr, n: usize) -> usize {
    let threads: Vec<_> = (0..8)
        .map(|t| {
            std::thread::spawn(move || {
                let mut http = crate::jobs::Http::connect(addr);
                let mut stored = 0;
                for i in (t..n).step_by(8) {
                    let body = format!(
                        r#"{{"kind":"restart","entity_id":"0190a6f0-0000-7000-8000-000000000001","data":{{"i":{i}}}}}"#
                    );
                    if http.post("/jobs", &body).0 == 201 {
                        stored += 1;
                    }
                }
                stored
            })
        })
        .collect();
    threads.into_iter().map(|t| t.join().unwrap_or(0)).sum()
}

/// Disk use of a queue's store: after `messages` 64-byte enqueues, after
/// draining them (consume + ack), and after a restart (sled reclaims
/// deleted space lazily).
pub(crate) fn drain_disk(args: &Args, messages: usize) -> Row {
    let dir = std::env::temp_dir().join(format!("wharf-bench-{}-disk", std::process::id()));
    let _bar = crate::progress::scenario(format!("draining {messages} messages from disk"));
    let _ = std::fs::remove_dir_all(&dir);
    let (broker, url) = spawn_broker_in(args, &dir, "");
    let mut fill = args.clone();
    fill.durable_window = 256;
    run_publishers(&fill, &url, "bench/disk", 4, messages.div_ceil(4), 64);
    let full = dir_size(&dir.join("data"));
    // The full store compacted by `wharf store compact`, broker stopped.
    broker.stop_keeping_data();
    let status = std::process::Command::new(super::broker_exe(args))
        .args(["store", "compact", "--data-dir"])
        .arg(dir.join("data"))
        .stdout(std::process::Stdio::null())
        .status()
        .expect("wharf store compact runs");
    assert!(status.success(), "wharf store compact failed");
    let compacted = dir_size(&dir.join("data"));
    let (broker, url) = spawn_broker_in(args, &dir, "");
    actix_rt::System::new().block_on(async {
        let c = Client::connect(&url, options(args)).await.expect("connect");
        let mut k = c.consume("bench/disk", 1000).await.expect("consume");
        let mut left = messages.div_ceil(4) * 4;
        let mut ids = Vec::new();
        while left > 0 {
            let d = k
                .recv_timeout(Duration::from_secs(30))
                .await
                .expect("a delivery");
            ids.push(d.id);
            while let Some(d) = k.try_recv() {
                ids.push(d.id);
            }
            left = left.saturating_sub(ids.len());
            for chunk in ids.chunks(1000) {
                c.ack(k.id(), chunk).await.expect("ack");
            }
            ids.clear();
        }
    });
    let drained = dir_size(&dir.join("data"));
    broker.stop_keeping_data();
    let (broker, _) = spawn_broker_in(args, &dir, "");
    let restarted = dir_size(&dir.join("data"));
    drop(broker);
    let mib = |b: u64| b as f64 / (1024.0 * 1024.0);
    Row {
        scenario: format!("disk use, {messages} x 64 B enqueued then drained"),
        result: format!(
            "{:.1} MiB full ({:.0} B per message), {:.1} MiB compacted ({:.0} B per message), \
             {:.1} MiB after the drain, {:.1} MiB after a restart",
            mib(full),
            full as f64 / messages as f64,
            mib(compacted),
            compacted as f64 / messages as f64,
            mib(drained),
            mib(restarted)
        ),
        gen_cores: 0.0,
        broker_cores: None,
    }
}
