//! Sessions: one per WebSocket connection. A session holds the client's
//! identity and subscriptions, answers its frames, and owns an outbound
//! queue ([`Outbound`]) that topics deliver into.
//!
//! [`Session::handle`] takes a decoded client frame and returns what the
//! connection must do next; replies go to the outbound queue. It never
//! touches the socket, so it is tested without one.
//!
//! # Design notes
//!
//! ## How a session ends
//! A session is closed by the client's `close` (drained or not), a
//! protocol violation (1002, 1009), the rate limit (1008, after the
//! `rate_limited` errors already queued), the idle timeout (1001), an
//! expired credential (4403, after an `unauthorized` error), an
//! administrator (1008), or shutdown (`Sessions::close_all`: drain, then
//! close with 1001). A draining close that the client does not read within
//! 10 s is cut short. When the read side ends, `Session::end` rolls back an open
//! transaction, cancels the subscriptions and the queue consumers (their
//! unacknowledged deliveries go back to their queues at once) and leaves
//! the registry; the writer sends what is queued and closes. A durable
//! subscription's consumer is cancelled like any other: its queue and
//! binding stay. Keep-alive: a WebSocket ping every `ping_interval_s`, and
//! any frame from the client counts as life.
//!
//! ## Answers that come later
//! A session confirms an `enqueue` (`enqueued`) and an `ack` (`receipt`)
//! only once the write is durable, without waiting in its read loop:
//! `confirm_when_durable` hands the `Durable` to the session's answer task
//! (`answers.rs`), which pushes the answer, or an `internal` error, when it
//! completes. A client that pipelines has its next frames handled at once,
//! and many of its writes share one group commit. Calls to a queue on
//! another node (`reply_later`) and job frames (`jobs.rs`) are answered the
//! same way. At `MAX_PENDING_CONFIRMS` (4,096) answers in flight the
//! session awaits the next one inline and reads no frame meanwhile: a
//! pipelining client is slowed, not buffered without bound. One task per
//! session runs all of them, not a task each: the store writer completes a
//! whole group from its own thread, and answers completed together then
//! leave in one `send` (benches/README.md, "Durable queues, 2026-11-25":
//! 1.1 `send` calls per message before, 0.07 after).
//!
//! ## Small futures
//! `Session::handle` boxes the futures of the rare operations (`hello`,
//! `refresh`, subscribing, consuming, `delete_queue`, transactions, jobs):
//! inline, the largest of them would size every frame's future (3.8 KB,
//! copied into its caller's on every frame). The hot ones (`publish`,
//! `enqueue`, the settles, `ping`) stay inline. A new operation off the
//! hot path is boxed too.
//!
//! ## Permissions and transactions
//! Every frame but `hello` and `refresh` passes `ops::permitted`
//! (`ops/permit.rs`) before anything else, so a frame a transaction stages
//! is checked when it is staged. `Session::stage` (`txn.rs`) sees every
//! frame while a transaction is open, and `begin`, `commit` and `rollback`
//! always; other frames skip it, so a publish outside a transaction pays
//! nothing for it.

mod answers;
mod jobs;
mod later;
mod manager;
pub mod mqtt;
mod ops;
mod outbound;
mod rate;
mod stamp;
mod sublist;
#[cfg(test)]
mod tests;
mod txn;

use std::collections::HashMap;
use std::sync::Arc;

use uuid::Uuid;

pub(crate) use jobs::may_see_job;
pub use later::{LATER_MAX, Later};
pub use manager::{SessionInfo, Sessions};
pub(crate) use outbound::WRITE_BATCH;
pub use outbound::{
    CloseRequest, Farewell, OutFrame, Outbound, OutboundStats, OutboundStream, PushError,
    encoding_slot,
};
pub use rate::{RateLimiter, Verdict};
pub use stamp::Stamp;

// `Sink` for `Outbound::id`.
use crate::broker::{Broker, BrokerError, Sink as _, Subscription};
use crate::config::SessionConfig;
use crate::protocol::codec::Format;
use crate::protocol::frame::{
    ClientFrame, Enqueued, ErrorCode, ErrorFrame, Priority, Receipt, ServerFrame,
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
    /// Close the session with `code` after what is queued (the `error`
    /// saying why): failed or missing authentication.
    Refused {
        /// The WebSocket close code.
        code: u16,
        /// The close reason.
        reason: &'static str,
    },
}

/// WebSocket close code for a session that failed or lacked
/// authentication (after an `unauthorized` error frame).
pub const CLOSE_UNAUTHORIZED: u16 = 4401;
/// WebSocket close code for a session whose credential expired without a
/// `refresh`.
pub const CLOSE_EXPIRED: u16 = 4403;

/// Close reasons the broker gives, written once: they go to clients in
/// close frames and logs, and MQTT 5 turns them into DISCONNECT reason
/// codes (`session/mqtt/v5.rs`).
pub mod close_reason {
    /// Shutdown (code 1001).
    pub const SHUTDOWN: &str = "server shutting down";
    /// A WebSocket session silent past its idle timeout (1001).
    pub const IDLE: &str = "idle timeout";
    /// An MQTT-over-TCP connection silent past 1.5 times its keep-alive
    /// (1001).
    pub const KEEP_ALIVE: &str = "keep-alive timeout";
    /// Far past the session's rate (1008).
    pub const RATE_LIMIT: &str = "rate limit exceeded";
    /// `POST /admin/sessions/{id}/close` (1008).
    pub const ADMIN: &str = "closed by an administrator";
}

/// One client's session.
pub struct Session {
    id: Uuid,
    client_id: String,
    broker: Broker,
    sessions: Sessions,
    out: Arc<Outbound>,
    config: Arc<SessionConfig>,
    /// The session's subscriptions by id.
    subs: sublist::SubList<sublist::ById>,
    /// The session's queue consumers by id (the same id space as `subs`).
    consumers: HashMap<String, Subscription>,
    /// Answers waiting for a durable write (receipts of enqueues and
    /// acks), another node or a job; past [`MAX_PENDING_CONFIRMS`] the
    /// session waits inline, so a client that pipelines is slowed instead
    /// of buffered without bound.
    answers: answers::Answers,
    /// Whether the client named itself in `hello` (durable subscriptions
    /// need a stable name).
    named: bool,
    /// Jobs and workers, when this endpoint serves them.
    jobs: Option<crate::broker::jobs::Jobs>,
    /// The open transaction, between `begin` and `commit` / `rollback`.
    /// Boxed: few sessions ever open one (~90 B less per connection).
    txn: Option<Box<txn::OpenTxn>>,
    /// Frames handled so far (`hello` is only accepted as the first).
    frames: u64,
    /// How credentials are checked (`hello.token`, `refresh`).
    auth: crate::auth::Auth,
    /// Who the session acts as; `None` until `hello` brings a token when
    /// the upgrade brought none and anonymous clients are not let in.
    principal: Option<crate::auth::Principal>,
    /// The client's address, for counting failed authentications.
    peer: Option<std::net::IpAddr>,
    /// Publish permission by topic, for principals whose publish rights
    /// are not simply `#`: a publish does not re-walk the filters.
    may_publish: crate::auth::PublishVerdicts,
    /// When the principal's credential expires, on the monotonic clock.
    expires_at: Option<std::time::Instant>,
    /// The key reloads seen ([`crate::auth::Auth::generation`]): when it
    /// moves, the session asks once whether its credential still holds.
    auth_seen: u32,
    /// Counted against its address until `hello` authenticates it
    /// (boxed: most sessions hold none).
    unproven: Option<Box<crate::auth::Unproven>>,
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
        config: impl Into<Arc<SessionConfig>>,
    ) -> Self {
        let id = Uuid::now_v7();
        let client_id = format!("anon-{}", id.simple());
        sessions.insert(id, "native", client_id.clone(), out.clone());
        let auth = crate::auth::Auth::open();
        Session {
            id,
            client_id,
            broker,
            sessions,
            out,
            config: config.into(),
            subs: Default::default(),
            consumers: HashMap::new(),
            answers: answers::Answers::new(MAX_PENDING_CONFIRMS),
            named: false,
            jobs: None,
            txn: None,
            frames: 0,
            principal: auth.anonymous(),
            auth,
            peer: None,
            may_publish: crate::auth::PublishVerdicts::default(),
            expires_at: None,
            auth_seen: 0,
            unproven: None,
        }
    }

    /// Checks credentials with `auth`; `principal` is who the upgrade's
    /// credentials proved (or the anonymous principal, or `None`: then
    /// `hello` must bring a token). `peer` is the client's address.
    pub fn with_auth(
        mut self,
        auth: crate::auth::Auth,
        principal: Option<crate::auth::Principal>,
        peer: Option<std::net::IpAddr>,
    ) -> Self {
        self.auth_seen = auth.generation();
        self.auth = auth;
        self.peer = peer;
        self.set_principal(principal);
        self
    }

    /// Holds `unproven` (the connection counted against its address)
    /// until `hello` authenticates it or the session ends.
    pub fn holding(mut self, unproven: Option<crate::auth::Unproven>) -> Self {
        if self.principal.is_none() {
            self.unproven = unproven.map(Box::new);
        }
        self
    }

    /// Whether a reload of the keys withdrew the one that verified the
    /// session's credential: then the client has been told
    /// (`unauthorized`) and the answer says how to close (4403). One
    /// atomic load unless the keys were reloaded since the last call;
    /// the read loops ask after each read (the client's pongs included),
    /// so a session is ended within a ping interval or keep-alive.
    pub fn revoked(&mut self) -> Option<(u16, &'static str)> {
        if !self
            .auth
            .withdrawn_since(&mut self.auth_seen, self.principal.as_ref())
        {
            return None;
        }
        let who = self.principal.as_ref().map(crate::auth::Principal::id);
        tracing::info!(target: "wharf::auth", principal = ?who, "ending a session: its token's key was withdrawn");
        self.error(
            self.out.notice_format(),
            ErrorCode::Unauthorized,
            "the key that signed the session's token was withdrawn (the JWKS was reloaded); \
             reconnect with a fresh token",
            None,
        );
        Some((CLOSE_EXPIRED, "credentials revoked"))
    }

    /// What rules see of this session's publishes.
    pub(crate) fn source(&self) -> crate::broker::Source<'_> {
        crate::broker::Source {
            ingress: crate::broker::Ingress::Native,
            client_id: Some(&self.client_id),
            principal: self.principal.as_ref().map(|p| p.name()),
        }
    }

    /// Who the session acts as, once known.
    pub fn principal(&self) -> Option<&crate::auth::Principal> {
        self.principal.as_ref()
    }

    fn set_principal(&mut self, principal: Option<crate::auth::Principal>) {
        if let Some(p) = &principal {
            self.sessions.set_principal(self.id, &p.id());
            self.unproven = None;
        }
        self.expires_at = match &principal {
            Some(p) => p.expires_at(),
            // No credentials yet: a `hello` must bring them in time.
            None => Some(
                std::time::Instant::now()
                    + std::time::Duration::from_secs(self.config.hello_timeout_s),
            ),
        };
        self.principal = principal;
        self.may_publish.clear();
    }

    /// The name the client's durable subscriptions are kept under: its
    /// client id within its principal's namespace.
    fn durable_owner(&self) -> String {
        match &self.principal {
            Some(p) => p.namespace(&self.client_id),
            None => self.client_id.clone(),
        }
    }

    /// When the session's credential expires (a JWT's `exp`): the
    /// connection is closed then unless a `refresh` moved it.
    pub fn expires_at(&self) -> Option<std::time::Instant> {
        self.expires_at
    }

    /// The credential expired, or none came in time: tells the client
    /// before the close, and says how to close (code, reason).
    pub fn expired(&self) -> (u16, &'static str) {
        let format = self.out.notice_format();
        if self.principal.is_none() {
            self.auth.deny(
                crate::auth::Denial::NoCredentialsInTime,
                crate::auth::Way::Native,
            );
            self.error(
                format,
                ErrorCode::Unauthorized,
                format!(
                    "no hello with credentials within {} s ([session] hello_timeout_s)",
                    self.config.hello_timeout_s
                ),
                None,
            );
            return (CLOSE_UNAUTHORIZED, "no credentials in time");
        }
        self.error(
            format,
            ErrorCode::Unauthorized,
            "the session's credential expired; reconnect with a fresh token",
            None,
        );
        (CLOSE_EXPIRED, "credentials expired")
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

    /// Queues a reply on the high lane, the one place every answer goes out.
    fn reply(&self, format: Format, frame: ServerFrame) {
        // A closed session has no one to tell; a full one has its policy.
        let _ = self.out.push_frame(Priority::High, format, &frame);
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

    /// Sends a `receipt` when the request carried a rid.
    fn receipt(&self, format: Format, rid: Option<u64>) {
        if let Some(rid) = rid {
            self.reply(format, ServerFrame::Receipt(Receipt { rid }));
        }
    }

    /// Sends a broker error as an `error` frame with its code.
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
            let _ = out.push_frame(Priority::High, format, &frame);
        };
        self.answers.run(async move { send(durable.await) }).await;
    }

    /// Sends the frame `answer` gives (an error frame for a refusal) once
    /// it completes, without holding up the frames that follow: a call to
    /// a queue on another node of the cluster.
    async fn reply_later(
        &self,
        format: Format,
        rid: u64,
        answer: impl std::future::Future<Output = Result<ServerFrame, BrokerError>> + 'static,
    ) {
        let out = self.out.clone();
        self.answers
            .run(async move {
                let frame = answer.await.unwrap_or_else(|e| {
                    ServerFrame::Error(ErrorFrame {
                        code: e.code(),
                        message: e.to_string(),
                        rid: Some(rid),
                    })
                });
                let _ = out.push_frame(Priority::High, format, &frame);
            })
            .await;
    }

    /// Whether `id` names a subscription or a consumer of this session.
    fn has_id(&self, id: &str) -> bool {
        self.subs.contains(id) || self.consumers.contains_key(id)
    }

    /// Whether `id` may start a new subscription or consumer; if not, the
    /// client has been sent the reason.
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

    /// Why a payload of `len` bytes is refused, if it is.
    fn refuse_payload(&self, len: usize) -> Option<String> {
        (len > self.config.max_payload).then(|| {
            format!(
                "payload of {len} bytes is over the {}-byte limit",
                self.config.max_payload
            )
        })
    }

    /// Tells the registry how many subscriptions and consumers the
    /// session holds (after a frame that may change them).
    fn report_counts(&self) {
        self.sessions
            .set_counts(self.id, self.subs.len(), self.consumers.len());
    }

    /// Handles one decoded frame that arrived in `format`.
    pub async fn handle(&mut self, format: Format, frame: ClientFrame) -> Next {
        self.frames += 1;
        self.out.set_notice_format(format);
        // The rare operations' futures are boxed: inline, the largest
        // of them sized this future (3.8 KB, copied into its caller's on
        // every frame); the hot ones (publish, enqueue, settle, ping)
        // stay inline.
        let frame = match frame {
            ClientFrame::Hello(h) => return Box::pin(ops::hello(self, format, h)).await,
            ClientFrame::Refresh(r) => return Box::pin(ops::refresh(self, format, r)).await,
            frame => frame,
        };
        if !ops::permitted(self, format, &frame) {
            return match self.principal {
                Some(_) => Next::Continue,
                None => Next::Refused {
                    code: CLOSE_UNAUTHORIZED,
                    reason: "authentication required",
                },
            };
        }
        let staged = self.txn.is_some()
            || matches!(
                frame,
                ClientFrame::Begin(_) | ClientFrame::Commit(_) | ClientFrame::Rollback(_)
            );
        let frame = if staged {
            match Box::pin(self.stage(format, frame)).await {
                txn::Staged::Done(next) => return next,
                txn::Staged::Pass(frame) => frame,
            }
        } else {
            frame
        };
        match frame {
            // Handled above.
            ClientFrame::Hello(_) | ClientFrame::Refresh(_) => {}
            ClientFrame::Subscribe(s) => {
                Box::pin(ops::subscribe(self, format, s)).await;
                self.report_counts();
            }
            ClientFrame::Unsubscribe(u) => {
                Box::pin(ops::unsubscribe(self, format, u)).await;
                self.report_counts();
            }
            ClientFrame::Publish(p) => ops::publish(self, format, p).await,
            ClientFrame::Ping(p) => ops::ping(self, format, p),
            ClientFrame::Enqueue(e) => ops::enqueue(self, format, e).await,
            ClientFrame::Consume(c) => {
                Box::pin(ops::consume(self, format, c)).await;
                self.report_counts();
            }
            ClientFrame::Ack(a) => ops::ack(self, format, a).await,
            ClientFrame::Nack(n) => ops::nack(self, format, n).await,
            ClientFrame::Reject(r) => ops::reject(self, format, r).await,
            ClientFrame::Touch(t) => ops::touch(self, format, t).await,
            ClientFrame::DeleteQueue(d) => Box::pin(ops::delete_queue(self, format, d)).await,
            ClientFrame::Presence(q) => ops::presence(self, format, q).await,
            ClientFrame::Close(c) => return ops::close(c),
            // Handled by `stage` above.
            ClientFrame::Begin(_) | ClientFrame::Commit(_) | ClientFrame::Rollback(_) => {}
            frame @ (ClientFrame::JobEnqueue(_)
            | ClientFrame::JobStatus(_)
            | ClientFrame::WorkerRegister(_)
            | ClientFrame::WorkerPing(_)
            | ClientFrame::JobDequeue(_)
            | ClientFrame::JobOutcome(_)) => Box::pin(self.handle_job(format, frame)).await,
        }
        Next::Continue
    }

    /// Ends the session: rolls back an open transaction, drops its
    /// subscriptions and leaves the registry.
    pub async fn end(mut self) {
        if let Some(txn) = self.txn.take() {
            self.roll_back(*txn).await;
        }
        let sink = self.out.id();
        for sub in self.subs.take_all() {
            sub.cancel();
            let _ = self.broker.unsubscribe(sink, &sub.id, &sub.filter).await;
        }
        // Unacknowledged deliveries go back to their queues at once.
        for (id, c) in std::mem::take(&mut self.consumers) {
            c.cancel();
            let _ = self
                .broker
                .queues()
                .cancel_consumer(&c.filter, sink, &id)
                .await;
        }
        self.sessions.remove(self.id);
    }
}
