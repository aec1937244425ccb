//! Sessions: one per WebSocket connection. A session holds the client's
//! identity and subscriptions, answers its frames, and owns an outbound
//! queue ([`Outbound`]) that topics deliver into.
//!
//! [`Session::handle`] takes a decoded client frame and returns what the
//! connection must do next; replies go to the outbound queue. It never
//! touches the socket, so it is tested without one.

mod jobs;
mod manager;
pub mod mqtt;
mod outbound;
mod rate;
mod txn;
pub mod wsframe;

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use bytes::Bytes;
use uuid::Uuid;

pub use manager::{SessionInfo, Sessions};
pub use outbound::{
    CloseRequest, Lane, OutFrame, Outbound, OutboundStats, OutboundStream, PushError, encoding_slot,
};
pub use rate::{RateLimiter, Verdict};

// `Sink` for `Outbound::id`.
use crate::broker::{
    Broker, BrokerError, DURABLE_PREFETCH, DURABLE_PREFIX, Enqueue, Publish, Settle, Sink as _,
    Subscription, durable_queue_name,
};
use crate::config::SessionConfig;
use crate::protocol::codec::{self, Format};
use crate::protocol::frame::{
    ClientFrame, Enqueued, ErrorCode, ErrorFrame, Limits, PROTOCOL_VERSION, Receipt, ServerFrame,
    Welcome,
};
use crate::store::Durable;

/// What the connection does after a frame.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Next {
    /// Keep reading.
    Continue,
    /// Close the session (after draining the queue if `drain`).
    Close {
        /// Deliver queued frames first.
        drain: bool,
    },
}

/// One client's session.
pub struct Session {
    id: Uuid,
    client_id: String,
    broker: Broker,
    sessions: Sessions,
    out: Arc<Outbound>,
    config: SessionConfig,
    /// The session's subscriptions by id.
    subs: HashMap<String, Subscription>,
    /// The session's queue consumers by id (the same id space as `subs`).
    consumers: HashMap<String, Subscription>,
    /// Confirmations waiting for a durable write (receipts of enqueues and
    /// acks); past [`MAX_PENDING_CONFIRMS`] the session waits inline, so
    /// a client that pipelines is slowed instead of buffered without
    /// bound.
    pending: Arc<AtomicUsize>,
    /// Whether the client named itself in `hello` (durable subscriptions
    /// need a stable name).
    named: bool,
    /// Jobs and workers, when this endpoint serves them.
    jobs: Option<crate::broker::jobs::Jobs>,
    /// The open transaction, between `begin` and `commit` / `rollback`.
    txn: Option<txn::OpenTxn>,
    frames: u64,
}

/// Most confirmations one session may have waiting for the disk before
/// it stops reading frames until one completes.
pub const MAX_PENDING_CONFIRMS: usize = 4096;

/// What to send once a durable write completes.
enum Confirm {
    Enqueued { queue: String, seq: u64 },
    Receipt,
}

impl Session {
    /// A new session delivering through `out`, registered in `sessions`.
    pub fn new(
        broker: Broker,
        sessions: Sessions,
        out: Arc<Outbound>,
        config: SessionConfig,
    ) -> Self {
        let id = Uuid::now_v7();
        let client_id = format!("anon-{}", id.simple());
        sessions.insert(id, client_id.clone(), out.clone());
        Session {
            id,
            client_id,
            broker,
            sessions,
            out,
            config,
            subs: HashMap::new(),
            consumers: HashMap::new(),
            pending: Arc::new(AtomicUsize::new(0)),
            named: false,
            jobs: None,
            txn: None,
            frames: 0,
        }
    }

    /// Serves job and worker frames through `jobs`.
    pub fn with_jobs(mut self, jobs: crate::broker::jobs::Jobs) -> Self {
        self.jobs = Some(jobs);
        self
    }

    /// The server-chosen session id.
    pub fn id(&self) -> Uuid {
        self.id
    }

    /// The outbound queue.
    pub fn outbound(&self) -> &Arc<Outbound> {
        &self.out
    }

    fn reply(&self, format: Format, frame: ServerFrame) {
        // A closed session has no one to tell; a full one has its policy.
        let _ = self.out.push_frame(Lane::High, format, &frame);
    }

    /// Sends an `error` frame.
    pub fn error(
        &self,
        format: Format,
        code: ErrorCode,
        message: impl Into<String>,
        rid: Option<u64>,
    ) {
        self.reply(
            format,
            ServerFrame::Error(ErrorFrame {
                code,
                message: message.into(),
                rid,
            }),
        );
    }

    fn receipt(&self, format: Format, rid: Option<u64>) {
        if let Some(rid) = rid {
            self.reply(format, ServerFrame::Receipt(Receipt { rid }));
        }
    }

    fn broker_error(&self, format: Format, e: BrokerError, rid: Option<u64>) {
        self.error(format, e.code(), e.to_string(), rid);
    }

    /// Sends `confirm` once `durable` completes (an error frame if the
    /// write failed), without holding up the frames that follow, up to
    /// [`MAX_PENDING_CONFIRMS`] at once.
    async fn confirm_when_durable(
        &self,
        format: Format,
        rid: u64,
        durable: Durable,
        confirm: Confirm,
    ) {
        let out = self.out.clone();
        let send = move |result: Result<(), crate::store::CommitError>| {
            let frame = match (result, confirm) {
                (Ok(()), Confirm::Enqueued { queue, seq }) => {
                    ServerFrame::Enqueued(Enqueued { rid, queue, seq })
                }
                (Ok(()), Confirm::Receipt) => ServerFrame::Receipt(Receipt { rid }),
                (Err(e), _) => ServerFrame::Error(ErrorFrame {
                    code: ErrorCode::Internal,
                    message: format!("the write did not become durable: {e}"),
                    rid: Some(rid),
                }),
            };
            let _ = out.push_frame(Lane::High, format, &frame);
        };
        self.run_bounded(async move { send(durable.await) }).await;
    }

    /// Runs an answer that waits (for the disk, for a job) without holding
    /// up the frames that follow: spawned, up to [`MAX_PENDING_CONFIRMS`]
    /// at once, then inline, so a client that pipelines is slowed instead
    /// of buffered without bound.
    async fn run_bounded(&self, answer: impl std::future::Future<Output = ()> + 'static) {
        if self.pending.load(Ordering::Acquire) >= MAX_PENDING_CONFIRMS {
            answer.await;
            return;
        }
        self.pending.fetch_add(1, Ordering::AcqRel);
        let pending = self.pending.clone();
        actix_rt::spawn(async move {
            answer.await;
            pending.fetch_sub(1, Ordering::AcqRel);
        });
    }

    async fn subscribe_durable(&mut self, format: Format, s: crate::protocol::frame::Subscribe) {
        if !self.named {
            self.error(
                format,
                ErrorCode::InvalidField,
                "durable: a durable subscription needs the client id given in hello",
                s.rid,
            );
            return;
        }
        let name = match durable_queue_name(&self.client_id, &s.id) {
            Ok(n) => n,
            Err(e) => return self.error(format, ErrorCode::InvalidField, e.to_string(), s.rid),
        };
        let consumer = Subscription::new(
            self.out.clone(),
            &s.id,
            &name,
            Bytes::new(),
            encoding_slot(format),
        );
        let prefetch = s.prefetch.unwrap_or(DURABLE_PREFETCH);
        match self
            .broker
            .subscribe_durable(&self.client_id, &s.filter, consumer.clone(), prefetch)
            .await
        {
            Ok(()) => {
                self.consumers.insert(s.id, consumer);
                self.receipt(format, s.rid);
            }
            Err(e) => self.broker_error(format, e, s.rid),
        }
    }

    fn has_id(&self, id: &str) -> bool {
        self.subs.contains_key(id) || self.consumers.contains_key(id)
    }

    fn check_new_id(&self, format: Format, id: &str, rid: Option<u64>) -> bool {
        if self.has_id(id) {
            self.error(
                format,
                ErrorCode::DuplicateSubscription,
                format!("subscription id {id:?} is already in use"),
                rid,
            );
            return false;
        }
        if self.subs.len() + self.consumers.len() >= self.config.max_subscriptions {
            self.error(
                format,
                ErrorCode::TooManySubscriptions,
                format!(
                    "at most {} subscriptions and consumers per session",
                    self.config.max_subscriptions
                ),
                rid,
            );
            return false;
        }
        true
    }

    async fn settle(
        &self,
        format: Format,
        sub: &str,
        ids: Vec<u64>,
        how: Settle,
        rid: Option<u64>,
    ) {
        let Some(consumer) = self.consumers.get(sub) else {
            self.error(
                format,
                ErrorCode::UnknownSubscription,
                format!("no consumer {sub:?}"),
                rid,
            );
            return;
        };
        match self
            .broker
            .settle(&consumer.filter, self.out.id(), sub, ids, how)
            .await
        {
            Ok(Some(durable)) => {
                if let Some(rid) = rid {
                    self.confirm_when_durable(format, rid, durable, Confirm::Receipt)
                        .await;
                }
            }
            Ok(None) => self.receipt(format, rid),
            Err(e) => self.broker_error(format, e, rid),
        }
    }

    /// Why a payload of `len` bytes is refused, if it is.
    fn refuse_payload(&self, len: usize) -> Option<String> {
        (len > self.config.max_payload).then(|| {
            format!(
                "payload of {len} bytes is over the {}-byte limit",
                self.config.max_payload
            )
        })
    }

    /// Handles one decoded frame that arrived in `format`.
    pub async fn handle(&mut self, format: Format, frame: ClientFrame) -> Next {
        self.frames += 1;
        self.out.set_notice_format(format);
        let frame = match self.stage(format, frame).await {
            txn::Staged::Done(next) => return next,
            txn::Staged::Pass(frame) => frame,
        };
        match frame {
            ClientFrame::Hello(h) => {
                if self.frames > 1 {
                    self.error(
                        format,
                        ErrorCode::UnexpectedHello,
                        "hello must be the first frame",
                        None,
                    );
                    return Next::Continue;
                }
                if h.version != PROTOCOL_VERSION {
                    self.error(
                        format,
                        ErrorCode::UnsupportedVersion,
                        format!(
                            "this server speaks version {PROTOCOL_VERSION}, not {}",
                            h.version
                        ),
                        None,
                    );
                    return Next::Continue;
                }
                if let Some(client_id) = h.client_id {
                    self.named = true;
                    self.client_id = client_id;
                    self.sessions.set_client_id(self.id, self.client_id.clone());
                }
                self.reply(
                    format,
                    ServerFrame::Welcome(Welcome {
                        session: self.id.to_string(),
                        client_id: self.client_id.clone(),
                        version: PROTOCOL_VERSION,
                        limits: Limits {
                            max_frame: self.config.max_frame as u64,
                            max_payload: self.config.max_payload as u64,
                            outbound_limit: self.config.outbound_limit as u64,
                            rate_per_s: u64::from(self.config.rate_per_s),
                        },
                    }),
                );
            }
            ClientFrame::Subscribe(s) => {
                if let Err(e) = self.broker.topic_limits().check_filter(&s.filter) {
                    self.error(
                        format,
                        ErrorCode::InvalidFilter,
                        format!("filter: {e}"),
                        s.rid,
                    );
                    return Next::Continue;
                }
                if !self.check_new_id(format, &s.id, s.rid) {
                    return Next::Continue;
                }
                if s.durable {
                    self.subscribe_durable(format, s).await;
                    return Next::Continue;
                }
                let sub = Subscription::new(
                    self.out.clone(),
                    &s.id,
                    &s.filter,
                    codec::message_prefix(format, &s.id),
                    encoding_slot(format),
                );
                match self.broker.subscribe(sub.clone()).await {
                    Ok(()) => {
                        self.subs.insert(s.id, sub);
                        self.receipt(format, s.rid);
                    }
                    Err(e) => self.broker_error(format, e, s.rid),
                }
            }
            ClientFrame::Unsubscribe(u) if self.consumers.contains_key(&u.id) => {
                if let Some(c) = self.consumers.remove(&u.id) {
                    c.cancel();
                    let done = if c.filter.starts_with(DURABLE_PREFIX) {
                        // A durable subscription ends for good: its backlog
                        // goes with it.
                        self.broker
                            .unsubscribe_durable(&self.client_id, &u.id, self.out.id())
                            .await
                            .map(|_| ())
                    } else {
                        self.broker
                            .cancel_consumer(&c.filter, self.out.id(), &u.id)
                            .await
                    };
                    match done {
                        Ok(()) => self.receipt(format, u.rid),
                        Err(e) => self.broker_error(format, e, u.rid),
                    }
                }
            }
            ClientFrame::Unsubscribe(u) => match self.subs.remove(&u.id) {
                None => self.error(
                    format,
                    ErrorCode::UnknownSubscription,
                    format!("no subscription {:?}", u.id),
                    u.rid,
                ),
                Some(sub) => {
                    // Effective at once; the topics drop it as they can.
                    sub.cancel();
                    if let Err(e) = self
                        .broker
                        .unsubscribe(self.out.id(), &u.id, &sub.filter)
                        .await
                    {
                        tracing::debug!(sub = %u.id, "unsubscribe left for the topics to tidy: {e}");
                    }
                    self.receipt(format, u.rid);
                }
            },
            ClientFrame::Publish(p) => {
                if let Some(refusal) = self.refuse_payload(p.payload.len()) {
                    self.error(format, ErrorCode::PayloadTooLarge, refusal, p.rid);
                    return Next::Continue;
                }
                let msg = Publish {
                    topic: p.topic,
                    payload: Bytes::from(p.payload),
                    headers: p.headers,
                    retain: p.retain,
                    priority: p.priority,
                    qos: 0,
                };
                match self.broker.publish(msg).await {
                    Ok(_) => self.receipt(format, p.rid),
                    Err(e) => self.broker_error(format, e, p.rid),
                }
            }
            ClientFrame::Ping(p) => self.reply(format, ServerFrame::Pong(p)),
            ClientFrame::Enqueue(e) => {
                if let Some(refusal) = self.refuse_payload(e.payload.len()) {
                    self.error(format, ErrorCode::PayloadTooLarge, refusal, e.rid);
                    return Next::Continue;
                }
                let queue = e.queue.clone();
                let msg = Enqueue {
                    queue: e.queue,
                    payload: Bytes::from(e.payload),
                    headers: e.headers,
                    priority: e.priority,
                    ttl_ms: e.ttl_ms,
                };
                match self.broker.enqueue(msg).await {
                    Ok((seq, durable)) => match (e.rid, durable) {
                        (Some(rid), Some(d)) => {
                            self.confirm_when_durable(
                                format,
                                rid,
                                d,
                                Confirm::Enqueued { queue, seq },
                            )
                            .await;
                        }
                        (Some(rid), None) => {
                            self.reply(format, ServerFrame::Enqueued(Enqueued { rid, queue, seq }));
                        }
                        (None, _) => {}
                    },
                    Err(err) => self.broker_error(format, err, e.rid),
                }
            }
            ClientFrame::Consume(c) => {
                if let Err(e) = self.broker.topic_limits().check_topic(&c.queue) {
                    self.error(
                        format,
                        ErrorCode::InvalidField,
                        format!("queue: {e}"),
                        c.rid,
                    );
                    return Next::Continue;
                }
                if !self.check_new_id(format, &c.id, c.rid) {
                    return Next::Continue;
                }
                let sub = Subscription::new(
                    self.out.clone(),
                    &c.id,
                    &c.queue,
                    Bytes::new(),
                    encoding_slot(format),
                );
                match self.broker.consume(&c.queue, sub.clone(), c.prefetch).await {
                    Ok(()) => {
                        self.consumers.insert(c.id, sub);
                        self.receipt(format, c.rid);
                    }
                    Err(e) => self.broker_error(format, e, c.rid),
                }
            }
            ClientFrame::Begin(_) | ClientFrame::Commit(_) | ClientFrame::Rollback(_) => {
                // Handled by `stage` above.
            }
            frame @ (ClientFrame::JobEnqueue(_)
            | ClientFrame::JobStatus(_)
            | ClientFrame::WorkerRegister(_)
            | ClientFrame::WorkerPing(_)
            | ClientFrame::JobDequeue(_)
            | ClientFrame::JobOutcome(_)) => self.handle_job(format, frame).await,
            ClientFrame::Ack(a) => {
                self.settle(format, &a.sub, a.ids, Settle::Ack, a.rid).await;
            }
            ClientFrame::Nack(n) => {
                self.settle(format, &n.sub, n.ids, Settle::Nack(n.delay_ms), n.rid)
                    .await;
            }
            ClientFrame::Reject(r) => {
                self.settle(format, &r.sub, r.ids, Settle::Reject, r.rid)
                    .await;
            }
            ClientFrame::Touch(t) => {
                self.settle(format, &t.sub, t.ids, Settle::Touch(t.extend_ms), t.rid)
                    .await;
            }
            ClientFrame::Close(c) => return Next::Close { drain: c.drain },
        }
        Next::Continue
    }

    /// Ends the session: rolls back an open transaction, drops its
    /// subscriptions and leaves the registry.
    pub async fn end(mut self) {
        if let Some(txn) = self.txn.take() {
            self.roll_back(txn).await;
        }
        let sink = self.out.id();
        for (id, sub) in std::mem::take(&mut self.subs) {
            sub.cancel();
            let _ = self.broker.unsubscribe(sink, &id, &sub.filter).await;
        }
        // Unacknowledged deliveries go back to their queues at once.
        for (id, c) in std::mem::take(&mut self.consumers) {
            c.cancel();
            let _ = self.broker.cancel_consumer(&c.filter, sink, &id).await;
        }
        self.sessions.remove(self.id);
    }
}
