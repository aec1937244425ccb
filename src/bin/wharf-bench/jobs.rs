//! Jobs end to end over HTTP: enqueuers POST /jobs while external workers
//! (each a thread with its own keep-alive connection) dequeue and report
//! outcomes; returns jobs/s from the first enqueue to the last outcome.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use super::{Args, Cpu, Row};

/// A keep-alive HTTP/1.1 connection speaking JSON.
pub(crate) struct Http {
    addr: SocketAddr,
    reader: BufReader<TcpStream>,
}

impl Http {
    pub(crate) fn connect(addr: SocketAddr) -> Http {
        let stream = TcpStream::connect(addr).expect("connect");
        stream.set_nodelay(true).expect("nodelay");
        stream
            .set_read_timeout(Some(Duration::from_secs(30)))
            .expect("timeout");
        Http {
            addr,
            reader: BufReader::new(stream),
        }
    }

    /// POSTs `body` to `path`; the status and the body.
    pub(crate) fn post(&mut self, path: &str, body: &str) -> (u16, String) {
        let req = format!(
            "POST {path} HTTP/1.1\r\nHost: {}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
            self.addr,
            body.len()
        );
        self.reader
            .get_mut()
            .write_all(req.as_bytes())
            .expect("write request");
        let mut line = String::new();
        self.reader.read_line(&mut line).expect("status line");
        let status = line
            .split_whitespace()
            .nth(1)
            .and_then(|s| s.parse().ok())
            .expect("status");
        let mut len = 0;
        loop {
            line.clear();
            self.reader.read_line(&mut line).expect("header");
            if line == "\r\n" || line.is_empty() {
                break;
            }
            if let Some((k, v)) = line.split_once(':') {
                if k.eq_ignore_ascii_case("content-length") {
                    len = v.trim().parse().unwrap_or(0);
                }
            }
        }
        let mut body = vec![0; len];
        self.reader.read_exact(&mut body).expect("body");
        (status, String::from_utf8_lossy(&body).into_owned())
    }
}

fn field<'a>(json: &'a serde_json::Value, key: &str) -> &'a str {
    json[key].as_str().unwrap_or_default()
}

/// `total` jobs through `workers` external HTTP workers, with 8
/// enqueuers; returns jobs/s end to end.
pub(crate) fn end_to_end(args: &Args, url: &str, workers: usize, total: usize) -> Row {
    let _bar = crate::progress::scenario(format!("{total} jobs, {workers} worker(s)"));
    let addr: SocketAddr = url
        .trim_start_matches("ws://")
        .trim_end_matches("/ws")
        .parse()
        .expect("broker address");
    let done = Arc::new(AtomicUsize::new(0));
    let kind = format!("bench{workers}");
    let cpu = Cpu::start(args.pid);
    let start = Instant::now();
    let worker_threads: Vec<_> = (0..workers)
        .map(|_| {
            let (done, kind) = (done.clone(), kind.clone());
            std::thread::spawn(move || {
                let mut http = Http::connect(addr);
                let (status, body) = http.post("/workers", &format!(r#"{{"kinds":["{kind}"]}}"#));
                assert_eq!(status, 201, "{body}");
                let reg: serde_json::Value = serde_json::from_str(&body).expect("json");
                let worker = field(&reg, "worker_id").to_owned();
                let dequeue = format!("/workers/{worker}/dequeue?wait_ms=200");
                while done.load(Ordering::Relaxed) < total {
                    let (status, body) = http.post(&dequeue, "");
                    if status == 204 {
                        continue;
                    }
                    assert_eq!(status, 200, "{body}");
                    let job: serde_json::Value = serde_json::from_str(&body).expect("json");
                    let outcome = format!(
                        r#"{{"worker_id":"{worker}","token":{},"outcome":"succeeded"}}"#,
                        job["token"]
                    );
                    let (status, body) =
                        http.post(&format!("/jobs/{}/outcome", field(&job, "id")), &outcome);
                    assert_eq!(status, 200, "{body}");
                    done.fetch_add(1, Ordering::Relaxed);
                }
            })
        })
        .collect();
    let enqueuers = 8;
    let enqueue_threads: Vec<_> = (0..enqueuers)
        .map(|i| {
            let kind = kind.clone();
            std::thread::spawn(move || {
                let mut http = Http::connect(addr);
                let n = total / enqueuers + usize::from(i < total % enqueuers);
                for _ in 0..n {
                    let body = format!(
                        r#"{{"kind":"{kind}","entity_id":"0190a6f0-0000-7000-8000-000000000001","data":{{"i":{i}}}}}"#
                    );
                    let (status, body) = http.post("/jobs", &body);
                    assert_eq!(status, 201, "{body}");
                }
            })
        })
        .collect();
    finish(
        enqueue_threads,
        worker_threads,
        (cpu, start),
        total,
        format!("jobs end to end over HTTP: 8 enqueuers, {workers} worker(s), {total} jobs"),
    )
}

/// Waits for a jobs scenario's threads; its row: jobs/s from `start`.
fn finish(
    enqueuers: Vec<std::thread::JoinHandle<()>>,
    workers: Vec<std::thread::JoinHandle<()>>,
    (cpu, start): (Cpu, Instant),
    total: usize,
    scenario: String,
) -> Row {
    for t in enqueuers {
        t.join().expect("enqueuer");
    }
    for t in workers {
        t.join().expect("worker");
    }
    let elapsed = start.elapsed();
    let (gen_cores, broker_cores) = cpu.cores();
    Row {
        scenario,
        result: format!("{:.0} jobs/s", total as f64 / elapsed.as_secs_f64()),
        gen_cores,
        broker_cores,
    }
}

/// `total` jobs end to end over the native protocol (the Rust client):
/// 8 enqueuers keeping 32 enqueues in flight each, and `workers` workers,
/// each a connection running `lanes` dequeue-then-outcome loops at once
/// (a worker that handles several jobs at a time); jobs/s from the first
/// enqueue to the last outcome. Every enqueue and outcome waits for its
/// durable write.
pub(crate) fn native_end_to_end(
    args: &Args,
    url: &str,
    workers: usize,
    lanes: usize,
    total: usize,
) -> Row {
    use futures_util::StreamExt as _;
    use wharf::client::Client;
    use wharf::protocol::jobs::{NewJob, Outcome};

    let _bar = crate::progress::scenario(format!(
        "{total} jobs, {workers} native worker(s) x {lanes}"
    ));
    let done = Arc::new(AtomicUsize::new(0));
    let kind = format!("native{workers}x{lanes}");
    let cpu = Cpu::start(args.pid);
    let start = Instant::now();
    let worker_threads: Vec<_> = (0..workers)
        .map(|_| {
            let (done, kind, url, opts) = (
                done.clone(),
                kind.clone(),
                url.to_owned(),
                super::options(args),
            );
            std::thread::spawn(move || {
                actix_rt::System::new().block_on(async move {
                    let c = Client::connect(&url, opts).await.expect("worker connects");
                    let (worker, _) = c.jobs().register_worker(&[&kind]).await.expect("register");
                    let c = &c;
                    let lane = |_| {
                        let done = done.clone();
                        async move {
                            while done.load(Ordering::Relaxed) < total {
                                let Some(job) = c
                                    .jobs()
                                    .dequeue_job(worker, Duration::from_millis(200))
                                    .await
                                    .expect("dequeue")
                                else {
                                    continue;
                                };
                                let token = job.token.expect("a dequeued job has a token");
                                c.jobs()
                                    .job_outcome(job.id, worker, token, Outcome::Succeeded, None)
                                    .await
                                    .expect("outcome");
                                done.fetch_add(1, Ordering::Relaxed);
                            }
                        }
                    };
                    futures_util::future::join_all((0..lanes).map(lane)).await;
                })
            })
        })
        .collect();
    let enqueuers = 8;
    let enqueue_threads: Vec<_> = (0..enqueuers)
        .map(|i| {
            let (kind, url, opts) = (kind.clone(), url.to_owned(), super::options(args));
            std::thread::spawn(move || {
                actix_rt::System::new().block_on(async move {
                    let c = Client::connect(&url, opts)
                        .await
                        .expect("enqueuer connects");
                    let n = total / enqueuers + usize::from(i < total % enqueuers);
                    let entity = uuid::Uuid::now_v7();
                    futures_util::stream::iter(0..n)
                        .map(|j| {
                            let c = &c;
                            let job = NewJob {
                                kind: kind.clone(),
                                entity_id: entity,
                                data: serde_json::json!({ "i": i, "j": j }),
                                priority: 0,
                                timeout_ms: None,
                            };
                            async move { c.jobs().enqueue_job(job).await.expect("enqueue job") }
                        })
                        .buffer_unordered(32)
                        .for_each(|_| async {})
                        .await;
                })
            })
        })
        .collect();
    finish(
        enqueue_threads,
        worker_threads,
        (cpu, start),
        total,
        format!(
            "jobs end to end over the native protocol: 8 enqueuers x 32 in flight, \
             {workers} worker(s) x {lanes} jobs at a time, {total} jobs"
        ),
    )
}
