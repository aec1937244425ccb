//! Queues and jobs homed on other nodes ([`home`](super::home)): calls
//! to a home (`{prefix}.home.{node}`, answered on
//! `{prefix}.reply.{caller}.{n}`), the home
//! serving them, and deliveries flowing back to consumers on the calling
//! node (`{prefix}.deliver.{node}`).
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

use bytes::Bytes;
use futures_util::StreamExt;
use parking_lot::Mutex;
use tokio::sync::mpsc::error::TrySendError;
use tokio::sync::{Semaphore, oneshot};

use super::home::{
    AdminOp, Answer, Call, Delivered, Homes, JOBS_HOME_KEY, JobCall, frame, unframe,
};
use super::{Cluster, Outbound, Shared};
use crate::broker::jobs::{JobError, JobFilter, Jobs};
use crate::broker::{
    Broker, BrokerError, DeliveryOutcome, Enqueue, Published, QueuedDelivery, Settlement, Sink,
    SubTag, Subscription, WeakBroker, next_sink_id,
};
use crate::protocol::frame::ErrorCode;
use crate::store::queues::StoredMessage;

/// How long a call waits for its home's answer (a dequeue waits this
/// much longer than its own wait).
pub const CALL_TIMEOUT: Duration = Duration::from_secs(15);
/// Calls a home serves at once; past it, callers are told it is
/// overloaded.
const MAX_CALLS: usize = 4096;
/// Consumers a node asks a home about in one `known` call at most.
const MAX_KNOWN: usize = 10_000;
/// Consumers on other nodes a home keeps at most.
const MAX_REMOTE_CONSUMERS: usize = 100_000;

/// The home side's record of a consumer on another node.
struct RemoteConsumer {
    queue: String,
    sink: Arc<RemoteSink>,
    id: String,
    since: Instant,
}

/// This node's consumer of a queue homed elsewhere.
struct Local {
    sub: Subscription,
    queue: String,
    /// The queue's home, its credit, and when it was attached (to check
    /// later that the home still has it).
    home: String,
    prefetch: u32,
    since: Instant,
}

/// This node's consumers of queues homed elsewhere, by token and by what
/// the session knows them as (queue, sink, consumer id).
#[derive(Default)]
struct LocalConsumers {
    by_token: HashMap<u64, Local>,
    by_sub: HashMap<(String, u64, String), u64>,
}

/// What the link keeps for queues and jobs homed anywhere.
pub(super) struct Remotes {
    /// Where queues live; set once the embedding broker read its config.
    homes: OnceLock<Homes>,
    /// The jobs resource this node serves when it is its home.
    jobs: OnceLock<Jobs>,
    /// Consumers on other nodes of this node's queues, by (node, token).
    remote: Mutex<HashMap<(String, u64), RemoteConsumer>>,
    /// This node's consumers of other nodes' queues.
    local: Mutex<LocalConsumers>,
    /// Calls being served.
    calls: Arc<Semaphore>,
    /// Calls being served that may wait long (long polls, drains).
    waits: Arc<Semaphore>,
    /// Set once the node's store is restored: calls are refused before.
    ready: AtomicBool,
    /// The next consumer token: starts from the clock so a node that
    /// restarts under the same name never reuses one a home still holds.
    next_token: AtomicU64,
    /// Calls sent, by number, waiting for their answers.
    waiting: Mutex<HashMap<u64, oneshot::Sender<async_nats::Message>>>,
    /// The next call's number.
    next_call: AtomicU64,
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

    /// Where the jobs resource lives.
    pub(super) fn jobs_home(&self) -> Option<String> {
        self.homes.get()?.home_of(JOBS_HOME_KEY).map(str::to_owned)
    }
}

/// A consumer on another node, as its queue here sees it: each delivery
/// goes to that node through the link's bounded publish buffer.
struct RemoteSink {
    id: u64,
    /// `{prefix}.deliver.{node}`.
    subject: String,
    token: u64,
    shared: Weak<Shared>,
    closed: AtomicBool,
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
        let out = Outbound {
            subject: self.subject.clone(),
            headers: None,
            payload: frame(&head, &m.payload),
            reply: None,
        };
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
    async fn answer(mut self, limit: Duration) -> Result<Answer, String> {
        let msg = match tokio::time::timeout(limit, &mut self.rx).await {
            Ok(Ok(msg)) => msg,
            Ok(Err(_)) => return Err("the link stopped".into()),
            Err(_) => return Err(format!("no answer within {} ms", limit.as_millis())),
        };
        if msg.status == Some(async_nats::StatusCode::NO_RESPONDERS) {
            return Err("no responders (the node is down, or not yet up)".into());
        }
        serde_json::from_slice(&msg.payload).map_err(|e| format!("an unreadable answer: {e}"))
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
fn answered(home: &str, r: Result<Answer, String>) -> Result<Answer, BrokerError> {
    match r {
        Err(reason) => Err(BrokerError::HomeUnreachable {
            home: home.to_owned(),
            reason,
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

    /// Serves jobs calls from other nodes with `jobs`, and, when the jobs
    /// resource lives on another node, makes `jobs` forward there.
    pub fn serve_jobs(&self, jobs: &Jobs) {
        let _ = self.shared.remotes.jobs.set(jobs.clone());
        if let Some(home) = self.home_elsewhere(JOBS_HOME_KEY) {
            jobs.set_home(std::sync::Arc::new(self.clone()), home);
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

    /// The node `queue` lives on, when that is not this one.
    pub(crate) fn home_elsewhere(&self, queue: &str) -> Option<String> {
        let home = self.shared.remotes.homes.get()?.home_of(queue)?;
        (home != self.shared.node).then(|| home.to_owned())
    }

    /// Sends `call` (with `payload`) to `home` and waits up to `limit`
    /// for its answer.
    async fn call(
        &self,
        home: &str,
        call: &Call,
        payload: &[u8],
        limit: Duration,
    ) -> Result<Answer, String> {
        self.send(home, call, payload)?.answer(limit).await
    }

    /// Sends `call` to `home` now, through the link's publish buffer (so
    /// in order with everything else this node sends), and returns what
    /// waits for the answer.
    fn send(&self, home: &str, call: &Call, payload: &[u8]) -> Result<Sent, String> {
        let s = &self.shared;
        let r = &s.remotes;
        let id = r.next_call.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = oneshot::channel();
        {
            let mut waiting = r.waiting.lock();
            if waiting.len() >= MAX_WAITING {
                return Err(format!(
                    "{MAX_WAITING} calls are waiting for answers already"
                ));
            }
            waiting.insert(id, tx);
        }
        let sent = Sent {
            id,
            rx,
            shared: Arc::downgrade(s),
        };
        let out = Outbound {
            subject: format!("{}.home.{home}", s.prefix),
            headers: None,
            payload: frame(call, payload),
            reply: Some(format!("{}.reply.{}.{id}", s.prefix, s.node)),
        };
        if s.outbound.try_send(out).is_err() {
            s.counters.dropped.fetch_add(1, Ordering::Relaxed);
            return Err("the link's buffer is full (NATS slow or away)".into());
        }
        Ok(sent)
    }

    /// Sends `call` to `home` without waiting for anything (through the
    /// bounded publish buffer: dropped and counted when it is full).
    fn tell(&self, home: &str, call: &Call, payload: &[u8]) {
        let s = &self.shared;
        let out = Outbound {
            subject: format!("{}.home.{home}", s.prefix),
            headers: None,
            payload: frame(call, payload),
            reply: None,
        };
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
        let unreachable = |reason| BrokerError::HomeUnreachable {
            home: home.to_owned(),
            reason,
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
            .map_err(|reason| BrokerError::HomeUnreachable {
                home: home.to_owned(),
                reason,
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
            if matches!(e, BrokerError::HomeUnreachable { .. }) {
                // It may have got there: undo it.
                self.tell(home, &self.cancel_call(queue, token), &[]);
            }
            return Err(e);
        }
        Ok(())
    }

    fn settle_call(&self, queue: &str, token: u64, ids: Vec<u64>, how: Settlement) -> Call {
        Call::Settle {
            queue: queue.to_owned(),
            node: self.shared.node.clone(),
            token,
            ids,
            how,
        }
    }

    fn cancel_call(&self, queue: &str, token: u64) -> Call {
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
            .map_err(|reason| JobError::Remote {
                code: ErrorCode::Overloaded,
                message: format!("the jobs resource's home node {home:?} did not answer: {reason}"),
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
            let _ = broker.cancel_consumer(&c.queue, c.sink.id, &c.id).await;
        }
        n
    }

    /// Asks each home whether it still has this node's consumers of its
    /// queues (a home that restarted, or that took this node for lost
    /// while NATS was away, has forgotten them, and they would wait for
    /// deliveries forever), and attaches the forgotten ones again.
    /// Returns how many.
    pub(crate) async fn check_consumers(&self) -> usize {
        let settled = Instant::now().checked_sub(CALL_TIMEOUT);
        let mut by_home: HashMap<String, Vec<u64>> = HashMap::new();
        for (token, l) in &self.shared.remotes.local.lock().by_token {
            // One still being attached is not asked about.
            if settled.is_some_and(|t| l.since <= t) {
                by_home.entry(l.home.clone()).or_default().push(*token);
            }
        }
        let mut again = 0;
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
                    _ => continue,
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
                            tracing::warn!(queue = %queue, home = %home, "cluster: cannot attach a consumer again: {e}")
                        }
                    }
                }
            }
        }
        again
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

/// Serves calls from other nodes and deliveries to this node's consumers
/// of their queues, until the link's runtime ends.
pub(super) async fn serve(
    shared: Arc<Shared>,
    broker: WeakBroker,
    mut calls: async_nats::Subscriber,
    mut deliveries: async_nats::Subscriber,
    mut replies: async_nats::Subscriber,
) {
    loop {
        tokio::select! {
            Some(msg) = calls.next() => {
                let reply = msg.reply.clone();
                let parsed = unframe::<Call>(&msg.payload);
                // Calls that may wait long (a dequeue's long poll, a
                // drain) have slots of their own, so they cannot take
                // every slot from enqueues and settles.
                let slots = match &parsed {
                    Ok((Call::Job { call: JobCall::Dequeue { wait_ms, .. } }, _)) if *wait_ms > 0 => {
                        &shared.remotes.waits
                    }
                    Ok((Call::Admin { op: AdminOp::Drain { wait_ms }, .. }, _)) if *wait_ms > 0 => {
                        &shared.remotes.waits
                    }
                    _ => &shared.remotes.calls,
                };
                let Ok(permit) = slots.clone().try_acquire_owned() else {
                    if let Some(reply) = reply {
                        let busy = Answer::Error {
                            code: ErrorCode::Overloaded,
                            message: format!("node {:?} serves {MAX_CALLS} calls of this kind already", shared.node),
                        };
                        let _ = shared.client.publish(reply, json(&busy)).await;
                    }
                    continue;
                };
                let (shared, broker) = (shared.clone(), broker.clone());
                tokio::spawn(async move {
                    let answer = match parsed {
                        Ok((call, payload)) => answer(&shared, &broker, call, payload).await,
                        Err(e) => refused(ErrorCode::Malformed, format!("not a call: {e}")),
                    };
                    if let Some(reply) = reply {
                        let _ = shared.client.publish(reply, json(&answer)).await;
                    } else if let Answer::Error { message, .. } = answer {
                        tracing::debug!("cluster: a call from another node was refused: {message}");
                    }
                    drop(permit);
                });
            }
            Some(msg) = deliveries.next() => deliver(&shared, &msg.payload),
            Some(msg) = replies.next() => {
                let id = msg.subject.rsplit('.').next().and_then(|t| t.parse::<u64>().ok());
                let waiting = id.and_then(|id| shared.remotes.waiting.lock().remove(&id));
                if let Some(tx) = waiting {
                    let _ = tx.send(msg);
                }
            }
            else => break,
        }
    }
}

fn json(answer: &Answer) -> Bytes {
    serde_json::to_vec(answer).unwrap_or_default().into()
}

fn refused(code: ErrorCode, message: impl Into<String>) -> Answer {
    Answer::Error {
        code,
        message: message.into(),
    }
}

fn broker_refused(e: &BrokerError) -> Answer {
    refused(e.code(), e.to_string())
}

/// What this node, as a home, answers to one call.
async fn answer(shared: &Arc<Shared>, broker: &WeakBroker, call: Call, payload: Bytes) -> Answer {
    if !shared.remotes.ready.load(Ordering::Acquire) {
        // Its store is not restored yet: nothing may touch the queues.
        return refused(
            ErrorCode::Overloaded,
            format!("node {:?} is starting", shared.node),
        );
    }
    if let Some(queue) = call.queue() {
        let home = shared.remotes.homes.get().and_then(|h| h.home_of(queue));
        if home != Some(shared.node.as_str()) {
            return refused(
                ErrorCode::Internal,
                format!(
                    "{queue:?} lives on {home:?} by node {:?}'s cluster.members, not here: \
                     the nodes' configurations differ",
                    shared.node
                ),
            );
        }
    }
    let Some(broker) = broker.upgrade() else {
        return refused(ErrorCode::Overloaded, "the node is stopping");
    };
    match call {
        Call::Enqueue {
            queue,
            priority,
            headers,
            ttl_ms,
        } => {
            let msg = Enqueue {
                queue,
                payload,
                headers,
                priority,
                ttl_ms,
            };
            match broker.enqueue_durable(msg).await {
                Ok(seq) => Answer::Seq { seq },
                Err(e) => broker_refused(&e),
            }
        }
        Call::Consume {
            queue,
            prefetch,
            node,
            token,
            id,
        } => {
            if shared.remotes.remote.lock().len() >= MAX_REMOTE_CONSUMERS {
                return refused(
                    ErrorCode::Overloaded,
                    format!(
                        "node {:?} serves {MAX_REMOTE_CONSUMERS} remote consumers already",
                        shared.node
                    ),
                );
            }
            let key = (node.clone(), token);
            let old = shared.remotes.remote.lock().remove(&key);
            if let Some(old) = old {
                old.sink.closed.store(true, Ordering::Release);
                let _ = broker
                    .cancel_consumer(&old.queue, old.sink.id, &old.id)
                    .await;
            }
            let sink = Arc::new(RemoteSink {
                id: next_sink_id(),
                subject: format!("{}.deliver.{node}", shared.prefix),
                token,
                shared: Arc::downgrade(shared),
                closed: AtomicBool::new(false),
            });
            let sub = Subscription::new(sink.clone(), &id, "", SubTag::None, None);
            // Recorded first: a settle may follow the first delivery
            // before this call's answer reaches the caller.
            shared.remotes.remote.lock().insert(
                key.clone(),
                RemoteConsumer {
                    queue: queue.clone(),
                    sink,
                    id,
                    since: Instant::now(),
                },
            );
            match broker.consume(&queue, sub, prefetch).await {
                Ok(()) => Answer::Ok,
                Err(e) => {
                    shared.remotes.remote.lock().remove(&key);
                    broker_refused(&e)
                }
            }
        }
        Call::Cancel { queue, node, token } => {
            let Some(c) = shared.remotes.remote.lock().remove(&(node, token)) else {
                return Answer::Ok;
            };
            c.sink.closed.store(true, Ordering::Release);
            let _ = queue;
            match broker.cancel_consumer(&c.queue, c.sink.id, &c.id).await {
                Ok(()) | Err(BrokerError::UnknownConsumer | BrokerError::UnknownQueue(_)) => {
                    Answer::Ok
                }
                Err(e) => broker_refused(&e),
            }
        }
        Call::Settle {
            queue,
            node,
            token,
            ids,
            how,
        } => {
            let found = shared
                .remotes
                .remote
                .lock()
                .get(&(node, token))
                .map(|c| (c.sink.id, c.id.clone()));
            let Some((sink, id)) = found else {
                return broker_refused(&BrokerError::UnknownConsumer);
            };
            match broker.settle(&queue, sink, &id, ids, how).await {
                Ok(Some(durable)) => match durable.await {
                    Ok(()) => Answer::Ok,
                    Err(e) => broker_refused(&BrokerError::Store(e)),
                },
                Ok(None) => Answer::Ok,
                Err(e) => broker_refused(&e),
            }
        }
        Call::Admin { queue, op } => admin_answer(&broker, &queue, op).await,
        Call::Known { node, tokens } => {
            if tokens.len() > MAX_KNOWN {
                return refused(
                    ErrorCode::InvalidField,
                    format!(
                        "{} tokens: ask about at most {MAX_KNOWN} at once",
                        tokens.len()
                    ),
                );
            }
            let remote = shared.remotes.remote.lock();
            let unknown: Vec<u64> = tokens
                .into_iter()
                .filter(|t| !remote.contains_key(&(node.clone(), *t)))
                .collect();
            Answer::Value {
                value: serde_json::to_value(unknown).unwrap_or_default(),
            }
        }
        Call::Job { call } => match shared.remotes.jobs.get() {
            Some(jobs) => job_answer(jobs, call).await,
            None => refused(ErrorCode::Internal, "this node serves no jobs"),
        },
    }
}

/// Runs an operator's call on a queue here, its home.
async fn admin_answer(broker: &Broker, queue: &str, op: AdminOp) -> Answer {
    fn value<T: serde::Serialize>(r: Result<T, BrokerError>) -> Answer {
        match r {
            Ok(v) => Answer::Value {
                value: serde_json::to_value(v).unwrap_or_default(),
            },
            Err(e) => broker_refused(&e),
        }
    }
    match op {
        AdminOp::Info => value(Ok(broker.queue_info(queue).await)),
        AdminOp::Purge => value(broker.purge_queue(queue).await),
        AdminOp::Delete => value(broker.delete_queue(queue).await),
        AdminOp::Drain { wait_ms } => {
            let wait = Duration::from_millis(wait_ms.min(crate::broker::MAX_DRAIN_WAIT_MS));
            value(broker.drain_queue(queue, wait).await)
        }
        AdminOp::Redrive { to } => value(broker.redrive(queue, to.as_deref()).await),
    }
}

/// Runs a jobs call here, the jobs resource's home.
async fn job_answer(jobs: &Jobs, call: JobCall) -> Answer {
    fn value<T: serde::Serialize>(r: Result<T, JobError>) -> Answer {
        match r {
            Ok(v) => Answer::Value {
                value: serde_json::to_value(v).unwrap_or_default(),
            },
            Err(e) => refused(e.code(), e.to_string()),
        }
    }
    match call {
        JobCall::Enqueue { new } => value(jobs.enqueue(new).await),
        JobCall::Status { id } => value(jobs.status(id).await),
        JobCall::List {
            status,
            kind,
            after,
            limit,
        } => {
            let filter = JobFilter {
                status,
                kind,
                after,
                limit,
            };
            value(jobs.list(filter, |_| true).await)
        }
        JobCall::Retry { id } => value(jobs.retry(id).await),
        JobCall::Cancel { id } => value(jobs.cancel(id).await),
        JobCall::Register { kinds } => value(jobs.register(kinds).await),
        JobCall::Ping { worker } => value(jobs.ping(worker).await),
        JobCall::Dequeue { worker, wait_ms } => {
            value(jobs.dequeue(worker, Duration::from_millis(wait_ms)).await)
        }
        JobCall::Outcome {
            id,
            worker,
            token,
            outcome,
            error,
        } => value(jobs.outcome(id, worker, token, outcome, error).await),
        JobCall::Info => value(jobs.info().await),
    }
}

/// A delivery from a queue's home to a consumer on this node.
fn deliver(shared: &Arc<Shared>, body: &Bytes) {
    let (d, payload) = match unframe::<Delivered>(body) {
        Ok(d) => d,
        Err(e) => {
            shared.counters.invalid.fetch_add(1, Ordering::Relaxed);
            tracing::debug!("cluster: an unreadable delivery: {e}");
            return;
        }
    };
    let local = shared
        .remotes
        .local
        .lock()
        .by_token
        .get(&d.token)
        .map(|l| l.sub.clone());
    let outcome = match &local {
        Some(sub) if !sub.is_cancelled() => {
            let message = StoredMessage {
                seq: d.seq,
                priority: d.priority,
                headers: d.headers,
                payload,
                enqueued_ms: d.enqueued_ms,
                expires_ms: d.expires_ms,
                deliveries: d.deliveries,
                not_before_ms: d.not_before_ms,
            };
            let delivery = QueuedDelivery {
                queue: &d.queue,
                id: d.id,
                message: &message,
            };
            sub.sink.deliver_queued(sub, &delivery)
        }
        _ => DeliveryOutcome::Closed,
    };
    match outcome {
        DeliveryOutcome::Queued => {}
        // Still in flight at the home: it comes back after its ack
        // timeout.
        DeliveryOutcome::Dropped => {
            tracing::debug!(queue = %d.queue, "cluster: a remote delivery was dropped by a slow consumer");
        }
        DeliveryOutcome::Closed => {
            {
                let mut l = shared.remotes.local.lock();
                if let Some(gone) = l.by_token.remove(&d.token) {
                    l.by_sub
                        .remove(&(gone.queue, gone.sub.sink.id(), gone.sub.id.to_string()));
                }
            }
            let cluster = Cluster {
                shared: shared.clone(),
            };
            let call = cluster.cancel_call(&d.queue, d.token);
            cluster.tell(&d.from, &call, &[]);
        }
    }
}
