//! The `forward` action: messages handed to HTTP backends. Each forward
//! has a bounded buffer split into lanes (`in_flight` of them, each
//! sending one request at a time), so at most `in_flight` requests are
//! out at once. A publisher's messages always take the same lane (picked
//! by its client id, or the topic for publishers without one), so a
//! publisher's order holds through the forward. Backends are taken round
//! robin; one that fails `fail_after` times in a row is skipped for
//! `skip_s`. A failed request is retried with exponential backoff; a
//! message no backend took (or that found the buffer full) goes to the
//! dead-letter queue, if one is set, else it is counted dropped.
//!
//! Lanes run on a thread of their own (an actix system), started at the
//! first forwarded message, and end once the forward is replaced (a
//! reload: they first send what they hold) or the broker stops (they
//! dead-letter what they hold without sending it).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use bytes::Bytes;
use parking_lot::RwLock;
use serde::Serialize;
use tokio::sync::mpsc;

use super::matcher::Context;
use crate::broker::{Enqueue, WeakBroker};

/// How a forward's HTTP method is chosen.
#[derive(Debug, Clone, PartialEq)]
pub enum MethodChoice {
    /// Always this one.
    Fixed(String),
    /// From a JSON field of the payload (a path), mapped by the table
    /// (`add` -> `POST`); a value the table lacks takes `default`, or
    /// dead-letters the message when there is none.
    FromField {
        /// The field's path.
        path: Vec<String>,
        /// Field value -> method.
        map: Vec<(String, String)>,
        /// The method for other values.
        default: Option<String>,
    },
}

/// A forward's settings (`{ forward = { ... } }` in a rule's `then`).
#[derive(Debug, Clone, PartialEq)]
pub struct ForwardSpec {
    /// Backend URLs (http or https), taken round robin.
    pub urls: Vec<String>,
    /// The method.
    pub method: MethodChoice,
    /// Message headers copied onto the request (`None`: all of them).
    pub headers: Option<Vec<String>>,
    /// One request's time limit.
    pub timeout: Duration,
    /// Retries after the first attempt.
    pub retries: u32,
    /// The first retry's delay; each next one doubles it (up to 30 s).
    pub backoff: Duration,
    /// Failures in a row after which a backend is skipped.
    pub fail_after: u32,
    /// How long a failing backend is skipped.
    pub skip: Duration,
    /// Where messages no backend took go.
    pub dead_letter: Option<String>,
    /// Requests out at once (lanes).
    pub in_flight: usize,
    /// Messages waiting, over all lanes.
    pub buffer: usize,
}

impl Default for ForwardSpec {
    fn default() -> Self {
        ForwardSpec {
            urls: Vec::new(),
            method: MethodChoice::Fixed("POST".into()),
            headers: None,
            timeout: Duration::from_secs(5),
            retries: 3,
            backoff: Duration::from_millis(100),
            fail_after: 3,
            skip: Duration::from_secs(10),
            dead_letter: None,
            in_flight: 8,
            buffer: 10_000,
        }
    }
}

/// One message on its way to a backend.
struct Job {
    method: String,
    topic: String,
    body: Bytes,
    headers: Vec<(String, String)>,
    rule: String,
}

struct Backend {
    url: String,
    /// Failures in a row.
    failing: AtomicU32,
    /// Skipped until then (ms since the Unix epoch).
    down_until: AtomicU64,
    requests: AtomicU64,
    failures: AtomicU64,
}

/// What the lanes and the forward share.
struct Shared {
    spec: ForwardSpec,
    backends: Vec<Backend>,
    next: AtomicUsize,
    /// Lanes still running.
    live: AtomicUsize,
    buffered: AtomicUsize,
    forwarded: AtomicU64,
    retried: AtomicU64,
    dead_lettered: AtomicU64,
    dropped: AtomicU64,
}

enum Lanes {
    NotStarted,
    Running(Vec<mpsc::Sender<Job>>),
    Closed,
}

/// A forward to HTTP backends, with its lanes and counters.
pub struct Forward {
    shared: Arc<Shared>,
    lanes: RwLock<Lanes>,
}

impl std::fmt::Debug for Forward {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.describe())
    }
}

/// A forward's state in `GET /admin/rules`.
#[derive(Debug, Clone, Serialize)]
pub struct ForwardReport {
    /// Each backend.
    pub backends: Vec<BackendReport>,
    /// Messages waiting for a lane.
    pub buffered: usize,
    /// Messages a backend took.
    pub forwarded: u64,
    /// Attempts made again.
    pub retried: u64,
    /// Messages sent to the dead-letter queue.
    pub dead_lettered: u64,
    /// Messages lost: no backend took them and there is no dead-letter
    /// queue, or it refused them.
    pub dropped: u64,
}

/// One backend in a [`ForwardReport`].
#[derive(Debug, Clone, Serialize)]
pub struct BackendReport {
    /// Its URL.
    pub url: String,
    /// Whether it is being skipped after failures.
    pub down: bool,
    /// Requests sent to it.
    pub requests: u64,
    /// Requests that failed (errors, timeouts, 5xx and 429 answers).
    pub failures: u64,
}

fn now_ms() -> u64 {
    crate::broker::now_ms()
}

impl Shared {
    /// The next backend not being skipped, round robin.
    fn pick(&self) -> Option<&Backend> {
        let n = self.backends.len();
        let start = self.next.fetch_add(1, Ordering::Relaxed);
        let now = now_ms();
        (0..n)
            .map(|k| &self.backends[(start + k) % n])
            .find(|b| b.down_until.load(Ordering::Relaxed) <= now)
    }

    fn failed(&self, b: &Backend) {
        b.failures.fetch_add(1, Ordering::Relaxed);
        let n = b.failing.fetch_add(1, Ordering::Relaxed) + 1;
        if n >= self.spec.fail_after {
            let until = now_ms() + self.spec.skip.as_millis() as u64;
            b.down_until.store(until, Ordering::Relaxed);
            b.failing.store(0, Ordering::Relaxed);
            tracing::warn!(url = %b.url, "forward backend failed {n} times in a row: skipped for {:?}", self.spec.skip);
        }
    }

    fn backoff(&self, attempt: u32) -> Duration {
        let d = self.spec.backoff.saturating_mul(1 << attempt.min(16));
        d.min(Duration::from_secs(30))
    }
}

impl Forward {
    /// A forward with `spec`'s settings; its lanes start with the first
    /// message.
    pub fn new(spec: ForwardSpec) -> Forward {
        let backends = spec
            .urls
            .iter()
            .map(|u| Backend {
                url: u.clone(),
                failing: AtomicU32::new(0),
                down_until: AtomicU64::new(0),
                requests: AtomicU64::new(0),
                failures: AtomicU64::new(0),
            })
            .collect();
        Forward {
            shared: Arc::new(Shared {
                spec,
                backends,
                next: AtomicUsize::new(0),
                live: AtomicUsize::new(0),
                buffered: AtomicUsize::new(0),
                forwarded: AtomicU64::new(0),
                retried: AtomicU64::new(0),
                dead_lettered: AtomicU64::new(0),
                dropped: AtomicU64::new(0),
            }),
            lanes: RwLock::new(Lanes::NotStarted),
        }
    }

    /// In words, for `GET /admin/rules`.
    pub fn describe(&self) -> String {
        let s = &self.shared.spec;
        let method = match &s.method {
            MethodChoice::Fixed(m) => m.clone(),
            MethodChoice::FromField { path, .. } => format!("method by {}", path.join(".")),
        };
        format!("forward ({method}) to {}", s.urls.join(", "))
    }

    /// Counters and backends.
    pub fn report(&self) -> ForwardReport {
        let s = &self.shared;
        let now = now_ms();
        ForwardReport {
            backends: s
                .backends
                .iter()
                .map(|b| BackendReport {
                    url: b.url.clone(),
                    down: b.down_until.load(Ordering::Relaxed) > now,
                    requests: b.requests.load(Ordering::Relaxed),
                    failures: b.failures.load(Ordering::Relaxed),
                })
                .collect(),
            buffered: s.buffered.load(Ordering::Relaxed),
            forwarded: s.forwarded.load(Ordering::Relaxed),
            retried: s.retried.load(Ordering::Relaxed),
            dead_lettered: s.dead_lettered.load(Ordering::Relaxed),
            dropped: s.dropped.load(Ordering::Relaxed),
        }
    }

    /// The method for this message, or why there is none.
    fn method(&self, cx: &Context<'_>) -> Result<String, String> {
        match &self.shared.spec.method {
            MethodChoice::Fixed(m) => Ok(m.clone()),
            MethodChoice::FromField { path, map, default } => {
                let value = cx
                    .json()
                    .and_then(|j| super::matcher::lookup(j, path))
                    .and_then(|v| v.as_str());
                value
                    .and_then(|value| map.iter().find(|(k, _)| k == value))
                    .map(|(_, m)| m.clone())
                    .or_else(|| default.clone())
                    .ok_or_else(|| format!("no method for {} = {value:?}", path.join(".")))
            }
        }
    }

    /// Hands the message to a lane (never waits). Refused when there is
    /// no method for it or the buffer is full: the caller then hands it
    /// to [`Forward::give_up`].
    pub(super) fn send(
        &self,
        cx: &Context<'_>,
        broker: &crate::broker::Broker,
        stopping: &Arc<AtomicBool>,
        rule: &str,
    ) -> Result<(), Box<Refused>> {
        let spec = &self.shared.spec;
        let headers = cx
            .headers
            .iter()
            .filter(|(k, _)| spec.headers.as_ref().is_none_or(|h| h.contains(k)))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        let mut job = Job {
            method: String::new(),
            topic: cx.topic.to_owned(),
            body: Bytes::copy_from_slice(cx.payload),
            headers,
            rule: rule.to_owned(),
        };
        job.method = match self.method(cx) {
            Ok(m) => m,
            Err(why) => return Err(Box::new(Refused(job, why))),
        };
        let key = cx.source.client_id.unwrap_or(cx.topic);
        if matches!(*self.lanes.read(), Lanes::NotStarted) {
            self.start(broker.downgrade(), stopping.clone());
        }
        let lanes = self.lanes.read();
        let Lanes::Running(senders) = &*lanes else {
            return Err(Box::new(Refused(job, "the forward is closed".into())));
        };
        let lane = &senders[lane_of(key, senders.len())];
        self.shared.buffered.fetch_add(1, Ordering::Relaxed);
        match lane.try_send(job) {
            Ok(()) => Ok(()),
            Err(e) => {
                self.shared.buffered.fetch_sub(1, Ordering::Relaxed);
                let job = match e {
                    mpsc::error::TrySendError::Full(j) | mpsc::error::TrySendError::Closed(j) => j,
                };
                Err(Box::new(Refused(
                    job,
                    "the forward's buffer is full".into(),
                )))
            }
        }
    }

    /// A message [`Forward::send`] refused: to the dead-letter queue, or
    /// counted dropped.
    pub(super) async fn give_up(&self, broker: &crate::broker::Broker, refused: Box<Refused>) {
        give_up(&self.shared, broker, refused.0, &refused.1).await;
    }

    fn start(&self, broker: WeakBroker, stopping: Arc<AtomicBool>) {
        let mut lanes = self.lanes.write();
        if !matches!(*lanes, Lanes::NotStarted) {
            return;
        }
        let n = self.shared.spec.in_flight.max(1);
        let per_lane = (self.shared.spec.buffer / n).max(1);
        let mut senders = Vec::with_capacity(n);
        let mut receivers = Vec::with_capacity(n);
        for _ in 0..n {
            let (tx, rx) = mpsc::channel(per_lane);
            senders.push(tx);
            receivers.push(rx);
        }
        self.shared.live.store(n, Ordering::Release);
        let shared = self.shared.clone();
        let spawned = std::thread::Builder::new()
            .name("wharf-forward".into())
            .spawn(move || {
                actix_rt::System::new().block_on(async move {
                    let lanes: Vec<_> = receivers
                        .into_iter()
                        .map(|rx| {
                            actix_rt::spawn(lane(
                                shared.clone(),
                                rx,
                                broker.clone(),
                                stopping.clone(),
                            ))
                        })
                        .collect();
                    for l in lanes {
                        let _ = l.await;
                    }
                });
            });
        match spawned {
            Ok(_) => *lanes = Lanes::Running(senders),
            Err(e) => {
                tracing::error!("cannot start a forward's thread: {e}");
                self.shared.live.store(0, Ordering::Release);
                *lanes = Lanes::Closed;
            }
        }
    }

    /// Stops taking messages; the lanes send (or, at shutdown,
    /// dead-letter) what they hold and end.
    pub(super) fn close(&self) {
        *self.lanes.write() = Lanes::Closed;
    }

    /// Whether every lane has ended (or none started).
    pub(super) fn finished(&self) -> bool {
        self.shared.live.load(Ordering::Acquire) == 0
    }
}

impl Drop for Forward {
    fn drop(&mut self) {
        self.close();
    }
}

fn lane_of(key: &str, lanes: usize) -> usize {
    use std::hash::{BuildHasher, Hasher};
    let mut h = foldhash::fast::FixedState::with_seed(7).build_hasher();
    h.write(key.as_bytes());
    (h.finish() % lanes as u64) as usize
}

/// A message a forward could not take, and why.
pub(super) struct Refused(Job, String);

/// A message no backend will take: to the dead-letter queue (counted
/// dropped if it refuses), or counted dropped.
async fn give_up(shared: &Shared, broker: &crate::broker::Broker, job: Job, why: &str) {
    let Some(queue) = &shared.spec.dead_letter else {
        shared.dropped.fetch_add(1, Ordering::Relaxed);
        tracing::warn!(rule = %job.rule, topic = %job.topic, "forward dropped a message: {why}");
        return;
    };
    let mut headers: crate::protocol::frame::Headers = job.headers.into_iter().collect();
    headers.insert("rule".into(), job.rule.clone());
    headers.insert("dead-letter-topic".into(), job.topic);
    headers.insert("forward-error".into(), why.to_owned());
    let put = broker
        .queues()
        .enqueue_durable(Enqueue {
            queue: queue.clone(),
            payload: job.body,
            headers,
            priority: 0,
            ttl_ms: None,
        })
        .await;
    match put {
        Ok(_) => shared.dead_lettered.fetch_add(1, Ordering::Relaxed),
        Err(e) => {
            tracing::warn!(rule = %job.rule, queue = %queue, "forward dropped a message ({why}): its dead-letter queue refused it: {e}");
            shared.dropped.fetch_add(1, Ordering::Relaxed)
        }
    };
}

/// One lane: sends its messages one at a time, in order.
async fn lane(
    shared: Arc<Shared>,
    mut rx: mpsc::Receiver<Job>,
    broker: WeakBroker,
    stopping: Arc<AtomicBool>,
) {
    let client = awc::Client::builder()
        .timeout(shared.spec.timeout)
        .disable_redirects()
        .finish();
    while let Some(job) = rx.recv().await {
        shared.buffered.fetch_sub(1, Ordering::Relaxed);
        let mut attempt = 0;
        let outcome = loop {
            if stopping.load(Ordering::Acquire) {
                break Err("the broker stopped before a backend took it".to_owned());
            }
            let tried = match shared.pick() {
                Some(b) => {
                    b.requests.fetch_add(1, Ordering::Relaxed);
                    match request(&client, b, &job).await {
                        Ok(()) => {
                            b.failing.store(0, Ordering::Relaxed);
                            break Ok(());
                        }
                        Err(Failure::Refused(why)) => break Err(why),
                        Err(Failure::Retry(why)) => {
                            shared.failed(b);
                            why
                        }
                    }
                }
                None => "every backend is being skipped after failures".to_owned(),
            };
            if attempt >= shared.spec.retries {
                break Err(tried);
            }
            attempt += 1;
            shared.retried.fetch_add(1, Ordering::Relaxed);
            let wait = shared.backoff(attempt - 1);
            // Wakes early at shutdown.
            let deadline = tokio::time::Instant::now() + wait;
            while tokio::time::Instant::now() < deadline && !stopping.load(Ordering::Acquire) {
                tokio::time::sleep_until(
                    deadline.min(tokio::time::Instant::now() + Duration::from_millis(50)),
                )
                .await;
            }
        };
        match outcome {
            Ok(()) => {
                shared.forwarded.fetch_add(1, Ordering::Relaxed);
            }
            Err(why) => match broker.upgrade() {
                Some(b) => give_up(&shared, &b, job, &why).await,
                None => {
                    shared.dropped.fetch_add(1, Ordering::Relaxed);
                }
            },
        }
    }
    shared.live.fetch_sub(1, Ordering::AcqRel);
}

/// Request headers a message header never sets: the connection's own,
/// and Wharf's.
const RESERVED: &[&str] = &[
    "host",
    "content-length",
    "transfer-encoding",
    "connection",
    "upgrade",
    "te",
    "trailer",
    "keep-alive",
    "proxy-connection",
    "x-wharf-topic",
];

enum Failure {
    /// Worth another try (another backend, later).
    Retry(String),
    /// The backend answered that it will not take it (4xx other than
    /// 408 and 429): not retried.
    Refused(String),
}

async fn request(client: &awc::Client, b: &Backend, job: &Job) -> Result<(), Failure> {
    let method = awc::http::Method::from_bytes(job.method.as_bytes())
        .map_err(|e| Failure::Refused(format!("method {}: {e}", job.method)))?;
    let mut req = client.request(method, &b.url);
    for (k, v) in &job.headers {
        if let (Ok(name), Ok(value)) = (
            awc::http::header::HeaderName::from_bytes(k.as_bytes()),
            awc::http::header::HeaderValue::from_str(v),
        ) && !RESERVED.contains(&name.as_str())
        {
            req = req.insert_header((name, value));
        }
    }
    // Last, so no message header stands in for it.
    req = req.insert_header(("x-wharf-topic", job.topic.as_str()));
    let mut resp = req
        .send_body(job.body.clone())
        .await
        .map_err(|e| Failure::Retry(format!("{}: {e}", b.url)))?;
    // Read (and drop) the answer so the connection can be used again.
    let _ = resp.body().limit(64 * 1024).await;
    let status = resp.status();
    if status.is_success() {
        Ok(())
    } else if status.is_server_error()
        || status == awc::http::StatusCode::TOO_MANY_REQUESTS
        || status == awc::http::StatusCode::REQUEST_TIMEOUT
    {
        Err(Failure::Retry(format!("{}: {status}", b.url)))
    } else {
        Err(Failure::Refused(format!("{}: {status}", b.url)))
    }
}
