//! Queues and jobs homed on other nodes ([`home`](super::home)), the
//! caller's side: calls to a home (`{prefix}.home.{node}`, answered on
//! `{prefix}.reply.{caller}.{n}`) and the consumers this node has at
//! other homes. The home's side (serving the calls, and deliveries
//! flowing back to consumers on the calling node, `{prefix}.deliver.{node}`)
//! is `serve.rs`.
//!
//! A consumer on node C of a queue homed on B is, on B, an ordinary
//! consumer whose sink ([`RemoteSink`]) sends each delivery to C through
//! the link's bounded publish buffer; on C it is a number (token) that
//! leads to the session's own subscription. Settling names the token, so
//! B finds its consumer. A home forgets the consumers of a node it has not
//! heard for [`LOST_AFTER`](super::LOST_AFTER) (their deliveries go back
//! to the queue), and a node that receives a delivery for a consumer it
//! no longer has cancels it at the home.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock, Weak};
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use tokio::sync::mpsc::error::TrySendError;
use tokio::sync::{Semaphore, oneshot};

use super::home::{AdminOp, Answer, Call, Delivered, Homes, JOBS_HOME_KEY, JobCall, frame};
use super::{CallError, Cluster, Outbound, Shared};
use crate::broker::jobs::{JobError, Jobs};
use crate::broker::{
    Broker, BrokerError, DeliveryOutcome, Enqueue, Published, QueuedDelivery, Settlement, Sink,
    Subscription,
};
use crate::protocol::frame::ErrorCode;

/// How long a call waits for its home's answer (a dequeue waits this
/// much longer than its own wait).
pub const CALL_TIMEOUT: Duration = Duration::from_secs(15);
/// Calls a home serves at once; past it, callers are told it is
/// overloaded.
pub(super) const MAX_CALLS: usize = 4096;
/// Consumers a node asks a home about in one `known` call at most.
pub(super) const MAX_KNOWN: usize = 10_000;
/// Consumers on other nodes a home keeps at most.
pub(super) const MAX_REMOTE_CONSUMERS: usize = 100_000;

/// The home side's record of a consumer on another node.
pub(super) struct RemoteConsumer {
    pub(super) queue: String,
    pub(super) sink: Arc<RemoteSink>,
    pub(super) id: String,
    pub(super) since: Instant,
}

/// A call waiting for its answer: the node it went to, and where the
/// answer goes.
pub(super) type Waiting = (Arc<str>, oneshot::Sender<async_nats::Message>);

/// This node's consumer of a queue homed elsewhere.
pub(super) struct Local {
    pub(super) sub: Subscription,
    pub(super) queue: String,
    /// The queue's home, its credit, and when it was attached (to check
    /// later that the home still has it).
    pub(super) home: String,
    pub(super) prefetch: u32,
    pub(super) since: Instant,
}

/// This node's consumers of queues homed elsewhere, by token and by what
/// the session knows them as (queue, sink, consumer id).
#[derive(Default)]
pub(super) struct LocalConsumers {
    pub(super) by_token: HashMap<u64, Local>,
    pub(super) by_sub: HashMap<(String, u64, String), u64>,
}

/// What the link keeps for queues and jobs homed anywhere.
pub(super) struct Remotes {
    /// Where queues live; set once the embedding broker read its config.
    pub(super) homes: OnceLock<Homes>,
    /// The jobs resource this node serves when it is its home.
    pub(super) jobs: OnceLock<Jobs>,
    /// Consumers on other nodes of this node's queues, by (node, token).
    pub(super) remote: Mutex<HashMap<(String, u64), RemoteConsumer>>,
    /// This node's consumers of other nodes' queues.
    pub(super) local: Mutex<LocalConsumers>,
    /// Calls being served.
    pub(super) calls: Arc<Semaphore>,
    /// Calls being served that may wait long (long polls, drains).
    pub(super) waits: Arc<Semaphore>,
    /// Set once the node's store is restored: calls are refused before.
    pub(super) ready: AtomicBool,
    /// The next consumer token: starts from the clock so a node that
    /// restarts under the same name never reuses one a home still holds.
    pub(super) next_token: AtomicU64,
    /// Calls sent, by number, waiting for their answers, with the node
    /// each went to (so that a node gone fails its calls at once).
    pub(super) waiting: Mutex<HashMap<u64, Waiting>>,
    /// The next call's number.
    pub(super) next_call: AtomicU64,
}

impl Remotes {
    pub(super) fn new() -> Remotes {
        Remotes {
            homes: OnceLock::new(),
            jobs: OnceLock::new(),
            remote: Mutex::default(),
            local: Mutex::default(),
            calls: Arc::new(Semaphore::new(MAX_CALLS)),
            waits: Arc::new(Semaphore::new(MAX_CALLS)),
            ready: AtomicBool::new(false),
            next_token: AtomicU64::new(crate::broker::now_ms() << 16),
            waiting: Mutex::default(),
            // From the clock too: late answers to a predecessor's calls
            // (same node name, same reply subjects) match none of these.
            next_call: AtomicU64::new(crate::broker::now_ms() << 16),
        }
    }

    /// `[cluster] members`.
    pub(super) fn members(&self) -> Vec<String> {
        self.homes
            .get()
            .map(|h| h.members().to_vec())
            .unwrap_or_default()
    }
}

/// A consumer on another node, as its queue here sees it: each delivery
/// goes to that node through the link's bounded publish buffer.
pub(super) struct RemoteSink {
    pub(super) id: u64,
    /// `{prefix}.deliver.{node}`.
    pub(super) subject: String,
    pub(super) token: u64,
    pub(super) shared: Weak<Shared>,
    pub(super) closed: AtomicBool,
}

impl Sink for RemoteSink {
    fn id(&self) -> u64 {
        self.id
    }

    fn deliver(&self, _: &Subscription, _: &Arc<Published>) -> DeliveryOutcome {
        DeliveryOutcome::Closed
    }

    fn is_closed(&self) -> bool {
        self.closed.load(Ordering::Acquire)
    }

    fn deliver_queued(&self, _: &Subscription, d: &QueuedDelivery<'_>) -> DeliveryOutcome {
        if self.is_closed() {
            return DeliveryOutcome::Closed;
        }
        let Some(shared) = self.shared.upgrade() else {
            return DeliveryOutcome::Closed;
        };
        let m = d.message;
        let head = Delivered {
            token: self.token,
            from: shared.node.clone(),
            queue: d.queue.to_owned(),
            id: d.id,
            seq: m.seq,
            priority: m.priority,
            headers: m.headers.clone(),
            enqueued_ms: m.enqueued_ms,
            expires_ms: m.expires_ms,
            deliveries: m.deliveries,
            not_before_ms: m.not_before_ms,
        };
        let out = Outbound::once(self.subject.clone(), frame(&head, &m.payload), None);
        match shared.outbound.try_send(out) {
            Ok(()) => DeliveryOutcome::Queued,
            // The queue keeps it and tries again once the consumer acks.
            Err(TrySendError::Full(_)) => DeliveryOutcome::Dropped,
            Err(TrySendError::Closed(_)) => DeliveryOutcome::Closed,
        }
    }
}

pub use crate::broker::hooks::Answering;

/// Calls waiting for answers at most (then calls are refused as
/// overloaded).
const MAX_WAITING: usize = 65_536;

/// A call sent, waiting for its answer; forgotten when dropped.
pub(crate) struct Sent {
    id: u64,
    rx: oneshot::Receiver<async_nats::Message>,
    shared: Weak<Shared>,
}

impl Sent {
    /// The answer, or why there is none within `limit`.
    async fn answer(mut self, limit: Duration) -> Result<Answer, CallError> {
        let msg = match tokio::time::timeout(limit, &mut self.rx).await {
            Ok(Ok(msg)) => msg,
            // Failed by `fail_waiting_for` (the home went) or
            // `fail_waiting` (the link stopped), after it was sent.
            Ok(Err(_)) => return Err(CallError::LinkStopped),
            Err(_) => return Err(CallError::Timeout(limit.as_millis())),
        };
        if msg.status == Some(async_nats::StatusCode::NO_RESPONDERS) {
            return Err(CallError::NoResponders);
        }
        serde_json::from_slice(&msg.payload).map_err(|e| CallError::Unreadable(e.to_string()))
    }
}

impl Drop for Sent {
    fn drop(&mut self) {
        if let Some(s) = self.shared.upgrade() {
            s.remotes.waiting.lock().remove(&self.id);
        }
    }
}

/// A home's answer as the broker's error, naming the home when it did
/// not answer.
fn answered(home: &str, r: Result<Answer, CallError>) -> Result<Answer, BrokerError> {
    match r {
        // Sent, and no answer: it may have been done there.
        Err(CallError::Timeout(ms)) => Err(BrokerError::HomeSilent {
            home: home.to_owned(),
            why: format!("within {ms} ms"),
        }),
        Err(CallError::LinkStopped) => Err(BrokerError::HomeSilent {
            home: home.to_owned(),
            why: "before it went, or this node's link stopped".into(),
        }),
        Err(e) => Err(BrokerError::HomeUnreachable {
            home: home.to_owned(),
            reason: e.to_string(),
        }),
        Ok(Answer::Error { code, message }) => Err(BrokerError::Remote { code, message }),
        Ok(a) => Ok(a),
    }
}

impl Cluster {
    /// Sets where queues and the jobs resource live (once, before the
    /// broker serves).
    pub fn set_homes(&self, homes: Homes) {
        let _ = self.shared.remotes.homes.set(homes);
    }

    /// Serves jobs calls from other nodes with `jobs`, and, when the
    /// nodes share one jobs resource (`members`), makes `jobs` ask where
    /// it lives before each operation and send it there.
    pub fn serve_jobs(&self, jobs: &Jobs) {
        let _ = self.shared.remotes.jobs.set(jobs.clone());
        if self.home_of(JOBS_HOME_KEY).is_some() {
            jobs.set_home(std::sync::Arc::new(self.clone()));
        }
    }

    /// Starts serving calls from other nodes to this node's queues and
    /// jobs: once its store is restored.
    pub fn serve_calls(&self) {
        self.shared.remotes.ready.store(true, Ordering::Release);
    }

    /// Fails every call still waiting for an answer (the link stopped).
    pub(super) fn fail_waiting(&self) {
        self.shared.remotes.waiting.lock().clear();
    }

    /// Fails at once the calls waiting for an answer from `home`, which
    /// stopped or was lost (not heard for ten seconds), rather than at
    /// their deadline: a long poll on it does not sit for its whole wait
    /// plus the call timeout. Each gets an unknown outcome (it may have
    /// been carried out before the home went). Returns how many.
    pub(super) fn fail_waiting_for(&self, home: &str) -> usize {
        let mut waiting = self.shared.remotes.waiting.lock();
        let before = waiting.len();
        waiting.retain(|_, (to, _)| &**to != home);
        before - waiting.len()
    }

    /// The node `queue` lives on (this one or another); `None` when
    /// every node keeps its own (no `members`).
    pub(crate) fn home_of(&self, queue: &str) -> Option<String> {
        if let Some((_, node)) = self.shared.failover_home(queue) {
            return Some(node);
        }
        Some(self.shared.remotes.homes.get()?.home_of(queue)?.to_owned())
    }

    /// The node `queue` lives on, when that is not this one.
    pub(crate) fn home_elsewhere(&self, queue: &str) -> Option<String> {
        if self.shared.served_here(queue) {
            // The common case on a home: no allocation, one lookup.
            return None;
        }
        if let Some((_, node)) = self.shared.failover_home(queue) {
            // Another node, or this one not having taken it over yet
            // (the call takes it over first: `here.rs`).
            return Some(node);
        }
        let home = self.shared.remotes.homes.get()?.home_of(queue)?;
        (home != self.shared.node).then(|| home.to_owned())
    }

    /// Sends `call` (with `payload`) to `home` and waits up to `limit`
    /// for its answer.
    pub(super) async fn call(
        &self,
        home: &str,
        call: &Call,
        payload: &[u8],
        limit: Duration,
    ) -> Result<Answer, CallError> {
        self.send(home, call, payload)?.answer(limit).await
    }

    /// Sends `call` to `home` now, through the link's publish buffer (so
    /// in order with everything else this node sends), and returns what
    /// waits for the answer.
    fn send(&self, home: &str, call: &Call, payload: &[u8]) -> Result<Sent, CallError> {
        let s = &self.shared;
        let r = &s.remotes;
        let id = r.next_call.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = oneshot::channel();
        {
            let mut waiting = r.waiting.lock();
            if waiting.len() >= MAX_WAITING {
                return Err(CallError::TooManyWaiting(MAX_WAITING));
            }
            waiting.insert(id, (home.into(), tx));
        }
        let sent = Sent {
            id,
            rx,
            shared: Arc::downgrade(s),
        };
        let out = Outbound::once(
            format!("{}.home.{home}", s.prefix),
            frame(call, payload),
            Some(format!("{}.reply.{}.{id}", s.prefix, s.node)),
        );
        if s.outbound.try_send(out).is_err() {
            s.counters.dropped.fetch_add(1, Ordering::Relaxed);
            return Err(CallError::BufferFull);
        }
        Ok(sent)
    }

    /// Sends `call` to `home` without waiting for anything (through the
    /// bounded publish buffer: dropped and counted when it is full).
    pub(super) fn tell(&self, home: &str, call: &Call, payload: &[u8]) {
        let s = &self.shared;
        let out = Outbound::once(
            format!("{}.home.{home}", s.prefix),
            frame(call, payload),
            None,
        );
        if s.outbound.try_send(out).is_err() {
            s.counters.dropped.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Sends an enqueue to `home` now (in order with this node's other
    /// calls); the future answers with its seq once it is durable there.
    pub(crate) fn enqueue_sent(
        &self,
        home: &str,
        msg: Enqueue,
    ) -> Result<Answering<u64>, BrokerError> {
        let call = Call::Enqueue {
            queue: msg.queue,
            priority: msg.priority,
            headers: msg.headers,
            ttl_ms: msg.ttl_ms,
        };
        let unreachable = |e: CallError| BrokerError::HomeUnreachable {
            home: home.to_owned(),
            reason: e.to_string(),
        };
        let sent = self.send(home, &call, &msg.payload).map_err(unreachable)?;
        let home = home.to_owned();
        Ok(Box::pin(async move {
            match answered(&home, sent.answer(CALL_TIMEOUT).await)? {
                Answer::Seq { seq } => Ok(seq),
                other => Err(unexpected(&home, &other)),
            }
        }))
    }

    /// Sends a settle to `home` now (in order with this node's other
    /// calls); the future answers once it is done there (an ack's deletes
    /// durable).
    pub(crate) fn settle_sent(
        &self,
        home: &str,
        queue: &str,
        sink: u64,
        id: &str,
        ids: Vec<u64>,
        how: Settlement,
    ) -> Result<Answering<()>, BrokerError> {
        let token = self
            .token_of(queue, sink, id)
            .ok_or(BrokerError::UnknownConsumer)?;
        let call = self.settle_call(queue, token, ids, how);
        let sent = self
            .send(home, &call, &[])
            .map_err(|e| BrokerError::HomeUnreachable {
                home: home.to_owned(),
                reason: e.to_string(),
            })?;
        let home = home.to_owned();
        Ok(Box::pin(async move {
            answered(&home, sent.answer(CALL_TIMEOUT).await).map(|_| ())
        }))
    }

    /// Enqueues on `home` without waiting.
    pub(crate) fn enqueue_detached_at(&self, home: &str, msg: Enqueue) {
        let call = Call::Enqueue {
            queue: msg.queue,
            priority: msg.priority,
            headers: msg.headers,
            ttl_ms: msg.ttl_ms,
        };
        self.tell(home, &call, &msg.payload);
    }

    /// Attaches `sub` as a consumer of `queue` on `home`; its deliveries
    /// come back to this node and go to `sub`'s sink.
    pub(crate) async fn consume_at(
        &self,
        home: &str,
        queue: &str,
        sub: Subscription,
        prefetch: u32,
    ) -> Result<(), BrokerError> {
        let r = &self.shared.remotes;
        let token = r.next_token.fetch_add(1, Ordering::Relaxed);
        let key = (queue.to_owned(), sub.sink.id(), sub.id.to_string());
        let id = sub.id.to_string();
        {
            let mut local = r.local.lock();
            if local.by_sub.contains_key(&key) {
                return Err(BrokerError::DuplicateConsumer);
            }
            local.by_sub.insert(key.clone(), token);
            local.by_token.insert(
                token,
                Local {
                    sub,
                    queue: queue.to_owned(),
                    home: home.to_owned(),
                    prefetch,
                    since: Instant::now(),
                },
            );
        }
        let call = Call::Consume {
            queue: queue.to_owned(),
            prefetch,
            node: self.shared.node.clone(),
            token,
            id,
        };
        let result = answered(home, self.call(home, &call, &[], CALL_TIMEOUT).await);
        if let Err(e) = result {
            let mut local = r.local.lock();
            local.by_sub.remove(&key);
            local.by_token.remove(&token);
            drop(local);
            if matches!(
                e,
                BrokerError::HomeUnreachable { .. } | BrokerError::HomeSilent { .. }
            ) {
                // It may have got there: undo it.
                self.tell(home, &self.cancel_call(queue, token), &[]);
            }
            return Err(e);
        }
        Ok(())
    }

    pub(super) fn settle_call(
        &self,
        queue: &str,
        token: u64,
        ids: Vec<u64>,
        how: Settlement,
    ) -> Call {
        Call::Settle {
            queue: queue.to_owned(),
            node: self.shared.node.clone(),
            token,
            ids,
            how,
        }
    }

    pub(super) fn cancel_call(&self, queue: &str, token: u64) -> Call {
        Call::Cancel {
            queue: queue.to_owned(),
            node: self.shared.node.clone(),
            token,
        }
    }

    /// This node's token for a consumer of a queue homed elsewhere.
    fn token_of(&self, queue: &str, sink: u64, id: &str) -> Option<u64> {
        let key = (queue.to_owned(), sink, id.to_owned());
        self.shared.remotes.local.lock().by_sub.get(&key).copied()
    }

    /// Detaches a consumer of a queue on `home`.
    pub(crate) async fn cancel_at(
        &self,
        home: &str,
        queue: &str,
        sink: u64,
        id: &str,
    ) -> Result<(), BrokerError> {
        let key = (queue.to_owned(), sink, id.to_owned());
        let token = {
            let mut local = self.shared.remotes.local.lock();
            let token = local
                .by_sub
                .remove(&key)
                .ok_or(BrokerError::UnknownConsumer)?;
            local.by_token.remove(&token);
            token
        };
        let call = self.cancel_call(queue, token);
        answered(home, self.call(home, &call, &[], CALL_TIMEOUT).await).map(|_| ())
    }

    /// Settles without waiting.
    pub(crate) fn settle_detached_at(
        &self,
        home: &str,
        queue: &str,
        sink: u64,
        id: &str,
        ids: Vec<u64>,
        how: Settlement,
    ) {
        let Some(token) = self.token_of(queue, sink, id) else {
            return;
        };
        let call = self.settle_call(queue, token, ids, how);
        self.tell(home, &call, &[]);
    }

    /// An operator's call on a queue on `home`: its reply as JSON.
    pub(crate) async fn admin_at(
        &self,
        home: &str,
        queue: &str,
        op: AdminOp,
    ) -> Result<serde_json::Value, BrokerError> {
        let limit = match &op {
            AdminOp::Drain { wait_ms } => CALL_TIMEOUT + Duration::from_millis(*wait_ms),
            _ => CALL_TIMEOUT,
        };
        let call = Call::Admin {
            queue: queue.to_owned(),
            op,
        };
        match answered(home, self.call(home, &call, &[], limit).await)? {
            Answer::Value { value } => Ok(value),
            other => Err(unexpected(home, &other)),
        }
    }

    /// A jobs call on `home`: its reply as JSON.
    pub(crate) async fn job_call(
        &self,
        home: &str,
        call: JobCall,
        limit: Duration,
    ) -> Result<serde_json::Value, JobError> {
        let answer = self
            .call(home, &Call::Job { call }, &[], limit)
            .await
            .map_err(|reason| match reason {
                // Sent, and no answer: a job enqueued again may exist twice.
                CallError::Timeout(_) | CallError::LinkStopped => JobError::Remote {
                    code: ErrorCode::OutcomeUnknown,
                    message: format!(
                        "the jobs resource's home node {home:?} did not answer ({reason}): \
                         the request may or may not have been carried out there"
                    ),
                },
                reason => JobError::Remote {
                    code: ErrorCode::Overloaded,
                    message: format!(
                        "the jobs resource's home node {home:?} did not answer: {reason}"
                    ),
                },
            })?;
        match answer {
            Answer::Value { value } => Ok(value),
            Answer::Error { code, message } => Err(JobError::Remote { code, message }),
            other => Err(JobError::Remote {
                code: ErrorCode::Internal,
                message: format!("an unexpected answer from node {home:?}: {other:?}"),
            }),
        }
    }

    /// Forgets the consumers of nodes not heard for a while (their
    /// deliveries go back to their queues); returns how many.
    pub(crate) async fn forget_lost_consumers(&self, broker: &Broker) -> usize {
        let now = Instant::now();
        let peers = self.shared.peers.lock().clone();
        self.detach(broker, |(node, _), c| {
            let heard = peers.get(node).copied().unwrap_or(c.since).max(c.since);
            now.saturating_duration_since(heard) > super::LOST_AFTER
        })
        .await
    }

    /// Detaches the consumers of the nodes `gone` names (a node that said
    /// it stops); returns how many.
    pub(super) async fn detach_consumers_of(
        &self,
        broker: &Broker,
        gone: impl Fn(&str) -> bool,
    ) -> usize {
        self.detach(broker, |(node, _), _| gone(node)).await
    }

    /// Takes out the consumers on other nodes that `which` picks and
    /// detaches them from their queues (their deliveries go back).
    async fn detach(
        &self,
        broker: &Broker,
        which: impl Fn(&(String, u64), &RemoteConsumer) -> bool,
    ) -> usize {
        let lost: Vec<((String, u64), RemoteConsumer)> = {
            let mut remote = self.shared.remotes.remote.lock();
            let picked: Vec<(String, u64)> = remote
                .iter()
                .filter(|(k, c)| which(k, c))
                .map(|(k, _)| k.clone())
                .collect();
            picked
                .iter()
                .filter_map(|k| remote.remove_entry(k))
                .collect()
        };
        let n = lost.len();
        for ((node, _), c) in lost {
            tracing::info!(queue = %c.queue, node = %node, "cluster: a lost node's consumer is detached");
            c.sink.closed.store(true, Ordering::Release);
            let _ = broker
                .queues()
                .cancel_consumer(&c.queue, c.sink.id, &c.id)
                .await;
        }
        n
    }

    /// Asks each home whether it still has this node's consumers of its
    /// queues (a home that restarted, or that took this node for lost
    /// while NATS was away, has forgotten them, and they would wait for
    /// deliveries forever), and attaches the forgotten ones again.
    /// Returns how many.
    pub(crate) async fn check_consumers(&self) -> usize {
        // One still being attached is not asked about.
        let settled = Instant::now().checked_sub(CALL_TIMEOUT);
        self.check_consumers_where(|l| settled.is_some_and(|t| l.since <= t))
            .await
            .0
    }

    /// [`Cluster::check_consumers`] for the consumers homed on `home`
    /// attached before `restarted`: when `home` was heard as a new
    /// process, which knows none of them, they are attached again at
    /// once rather than at the next check. (An attach sent before then
    /// went to the old process, so none is in flight to the new one.)
    /// Tried every half second while the home is still starting (its
    /// store being restored), for up to [`CALL_TIMEOUT`].
    pub(super) async fn check_consumers_of(&self, home: &str, restarted: Instant) -> usize {
        let mut again = 0;
        let deadline = Instant::now() + CALL_TIMEOUT;
        loop {
            let (n, failed) = self
                .check_consumers_where(|l| l.home == home && l.since < restarted)
                .await;
            again += n;
            if failed == 0 || Instant::now() >= deadline {
                return again;
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    }

    /// Asks the homes about the consumers `pick` chooses and attaches the
    /// forgotten ones again: (attached again, calls that failed).
    async fn check_consumers_where(&self, pick: impl Fn(&Local) -> bool) -> (usize, usize) {
        let mut by_home: HashMap<String, Vec<u64>> = HashMap::new();
        for (token, l) in &self.shared.remotes.local.lock().by_token {
            if pick(l) {
                by_home.entry(l.home.clone()).or_default().push(*token);
            }
        }
        let (mut again, mut failed) = (0, 0);
        for (home, tokens) in by_home {
            for chunk in tokens.chunks(MAX_KNOWN) {
                let call = Call::Known {
                    node: self.shared.node.clone(),
                    tokens: chunk.to_vec(),
                };
                let unknown: Vec<u64> = match self.call(&home, &call, &[], CALL_TIMEOUT).await {
                    Ok(Answer::Value { value }) => {
                        serde_json::from_value(value).unwrap_or_default()
                    }
                    _ => {
                        failed += 1;
                        continue;
                    }
                };
                for token in unknown {
                    let found = self
                        .shared
                        .remotes
                        .local
                        .lock()
                        .by_token
                        .get(&token)
                        .map(|l| (l.queue.clone(), l.prefetch, l.sub.id.to_string()));
                    let Some((queue, prefetch, id)) = found else {
                        continue;
                    };
                    let call = Call::Consume {
                        queue: queue.clone(),
                        prefetch,
                        node: self.shared.node.clone(),
                        token,
                        id,
                    };
                    match answered(&home, self.call(&home, &call, &[], CALL_TIMEOUT).await) {
                        Ok(_) => {
                            again += 1;
                            tracing::info!(queue = %queue, home = %home, "cluster: a consumer the home had forgotten is attached again");
                        }
                        Err(e) => {
                            failed += 1;
                            tracing::warn!(queue = %queue, home = %home, "cluster: cannot attach a consumer again: {e}")
                        }
                    }
                }
            }
        }
        (again, failed)
    }

    /// Consumers on other nodes of this node's queues, and this node's
    /// consumers of other nodes' queues.
    pub(crate) fn consumer_counts(&self) -> (usize, usize) {
        let r = &self.shared.remotes;
        (r.remote.lock().len(), r.local.lock().by_token.len())
    }
}

fn unexpected(home: &str, answer: &Answer) -> BrokerError {
    BrokerError::Remote {
        code: ErrorCode::Internal,
        message: format!("an unexpected answer from node {home:?}: {answer:?}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A call that never reached the home is safe to send again
    /// (`overloaded`); one that reached it and got no answer may have been
    /// carried out (`outcome_unknown`).
    #[test]
    fn silence_after_sending_is_an_unknown_outcome_not_overload() {
        let code = |r| answered("b", r).map(|_| ()).unwrap_err().code();
        assert_eq!(
            code(Err(CallError::Timeout(15_000))),
            ErrorCode::OutcomeUnknown
        );
        assert_eq!(code(Err(CallError::LinkStopped)), ErrorCode::OutcomeUnknown);
        for not_sent in [
            CallError::NoResponders,
            CallError::BufferFull,
            CallError::TooManyWaiting(1),
        ] {
            assert_eq!(code(Err(not_sent)), ErrorCode::Overloaded);
        }
        let e = answered("b", Err(CallError::Timeout(15_000)))
            .map(|_| ())
            .unwrap_err();
        assert!(e.to_string().contains("same msg-id"), "{e}");
    }
}
