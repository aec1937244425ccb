//! The broker's queues: a registry of queue resources by name, the
//! operations on them, and the ticker that drives their deadlines. The
//! bindings that copy topic messages into queues, and durable
//! subscriptions, are in `durable.rs`.
//!
//! A queue is created by its `[[queues]]` declaration, or on first use
//! (enqueue or consume) with `[queue_defaults]`. Creating a queue also
//! creates its dead-letter queue (`<name>.dlq` unless configured), an
//! ordinary queue without a dead-letter queue of its own.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use super::calls::{Enqueue, MAX_PREFETCH, Settlement};
use super::durable::{DURABLE_PREFIX, StoredMeta};
use super::hooks::{AdminOp, Answering, Remote, admin_at};
use super::queue::{Incoming, QueueError, QueueHandle, QueueInfo, QueueShared, QueueState, now_ms};
use super::sink::Subscription;
use super::{Broker, BrokerError, Queues};
use crate::config::{QueueDecl, QueueOptions};
use crate::routing;
use crate::store::queues::{self as records, LoadedQueues};
use crate::store::replica::JOBS_ID;
use crate::store::{Durable, SubmitError};
use crate::taskq::{Lane, TaskQueue};

/// Suffix of dead-letter queues' default names.
pub const DLQ_SUFFIX: &str = ".dlq";

/// Most delivery ids in one ack, nack, reject or touch.
pub const MAX_IDS: usize = 10_000;

/// Messages moved per step of a redrive.
const REDRIVE_BATCH: usize = 1000;

/// The queues part of the registry.
#[derive(Default)]
pub(crate) struct QueueRegistry {
    pub(super) queues: HashMap<Arc<str>, QueueHandle>,
    defaults: QueueOptions,
    declared: HashMap<String, QueueOptions>,
    next_id: u32,
    /// Topic subscriptions that copy messages into queues, by queue.
    pub(super) binds: HashMap<String, Vec<Subscription>>,
}

/// Longest a draining delete may hold its request (HTTP or native)
/// before it answers with what is left.
pub const MAX_DRAIN_WAIT_MS: u64 = 60_000;

/// What [`Queues::drain_queue`](crate::broker::Queues::drain_queue) did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum Drain {
    /// The queue was empty, or emptied in time, and is removed.
    Removed,
    /// Still draining: removed once these are consumed and settled.
    Draining {
        /// Messages waiting.
        waiting: u64,
        /// Messages delivered and not yet settled.
        in_flight: u64,
    },
    /// No such queue.
    NotFound,
}

impl From<QueueError> for BrokerError {
    fn from(e: QueueError) -> Self {
        match e {
            QueueError::Full(n) => BrokerError::QueueFull(n),
            QueueError::UnknownDelivery(ids) => BrokerError::UnknownDelivery(ids),
            QueueError::DuplicateConsumer => BrokerError::DuplicateConsumer,
            QueueError::UnknownConsumer => BrokerError::UnknownConsumer,
            QueueError::Store(e) => BrokerError::StoreBusy(e),
            QueueError::Deleted => BrokerError::Contended,
            QueueError::Draining => BrokerError::QueueDraining,
        }
    }
}

fn is_dlq_name(name: &str) -> bool {
    name.ends_with(DLQ_SUFFIX)
}

/// The dead-letter queue of `name`: configured, or `<name>.dlq`; none for
/// dead-letter queues and durable subscriptions.
pub(super) fn dead_letter_name(reg: &QueueRegistry, name: &str) -> Option<String> {
    if is_dlq_name(name) || name.starts_with(DURABLE_PREFIX) || super::shared::is_shared(name) {
        return None;
    }
    let configured = match reg.declared.get(name) {
        Some(o) => &o.dead_letter,
        None => &reg.defaults.dead_letter,
    };
    Some(if configured.is_empty() {
        format!("{name}{DLQ_SUFFIX}")
    } else {
        configured.clone()
    })
}

impl Queues<'_> {
    /// Sets the options of queues: `defaults` for queues created on first
    /// use, and each declaration's own. Call before queues are created.
    pub fn configure_queues(self, defaults: QueueOptions, declared: &[QueueDecl]) {
        let mut reg = self.queue_registry();
        reg.declared = declared
            .iter()
            .map(|d| (d.name.clone(), d.options(&defaults)))
            .collect();
        reg.defaults = defaults;
    }
    /// Re-creates the queues the store holds, with their windows of
    /// messages, and deletes orphaned records. Call before serving.
    ///
    /// # Errors
    /// A queue refusing the restore task.
    pub async fn restore_queues(self, loaded: LoadedQueues) -> Result<usize, BrokerError> {
        if !loaded.orphans.is_empty() {
            if let Some(w) = &self.inner.writer {
                let _ = w.submit_detached(loaded.orphans);
            }
        }
        let mut messages = 0;
        let stored: Vec<_> = loaded
            .queues
            .into_iter()
            .filter(|q| {
                // What the store holds is restored even past lowered limits.
                let valid = routing::TopicLimits::WIDEST.check_topic(&q.name).is_ok();
                if !valid {
                    tracing::warn!(queue = %q.name, "skipping a stored queue with an invalid name");
                }
                valid
            })
            .collect();
        let handles: Vec<_> = {
            let mut reg = self.queue_registry();
            // Stored ids first, so that new queues (dead-letter queues
            // created along the way) never take one.
            reg.next_id = stored
                .iter()
                .map(|q| q.id.saturating_add(1))
                .max()
                .unwrap_or(0)
                .max(reg.next_id);
            stored
                .into_iter()
                .map(|q| {
                    let h = self.create_queue(&mut reg, &q.name, Some(q.id));
                    (h, q)
                })
                .collect()
        };
        let mut rebind = Vec::new();
        for (h, q) in handles {
            messages += q.messages.len() as u64 + q.spilled.iter().sum::<u64>();
            if !q.meta.is_empty() {
                match serde_json::from_slice::<StoredMeta>(&q.meta) {
                    Ok(meta) => rebind.push((q.name.clone(), h.clone(), meta.bind)),
                    Err(e) => {
                        tracing::warn!(queue = %q.name, "ignoring unreadable queue metadata: {e}")
                    }
                }
            }
            h.tq.submit(move |s| s.restore(q.messages, q.spilled, q.loaded_upto, q.next_seq))
                .await?;
        }
        // Durable subscriptions keep collecting while their clients are
        // away, from the moment the broker serves again.
        for (name, handle, filters) in rebind {
            self.bind(&name, &handle, &filters).await?;
        }
        Ok(messages as usize)
    }
    /// Settles deliveries without waiting (not even for the task): for
    /// sinks, which run inside queue tasks and must not block. A refusal
    /// is logged; an unacknowledged delivery then times out as usual.
    pub fn settle_detached(self, queue: &str, sink: u64, id: &str, ids: Vec<u64>, how: Settlement) {
        if let Some((remote, home)) = self.home_elsewhere(queue) {
            remote.settle_detached(&home, queue, sink, id, ids, how);
            return;
        }
        let Ok(Some(q)) = self.queue(queue, false) else {
            return;
        };
        let id: Arc<str> = id.into();
        let sent = q.tq.execute(Lane::Normal, move |q| {
            let now = now_ms();
            let result = match how {
                Settlement::Ack => q.ack(sink, &id, &ids, now).map(|_| ()),
                Settlement::Nack(delay) => q.nack(sink, &id, &ids, delay, now),
                Settlement::Reject => q.reject(sink, &id, &ids, now),
                Settlement::Touch(ms) => q.touch(sink, &id, &ids, ms, now),
            };
            if let Err(e) = result {
                tracing::debug!("detached settle refused: {e:?}");
            }
        });
        if let Err(e) = sent {
            tracing::warn!("detached settle not queued: {e}");
        }
    }
    /// Puts a message on a queue (created on first use). Returns its seq
    /// once the task has run, and with a store the [`Durable`] that
    /// completes when it is on disk: a publisher is told the message is
    /// safe only after awaiting it.
    ///
    /// # Errors
    /// An invalid name or priority, a full queue, an overloaded queue or
    /// store writer.
    pub async fn enqueue(self, msg: Enqueue) -> Result<(u64, Option<Durable>), BrokerError> {
        let msg = match self.enqueue_elsewhere(msg) {
            Err(local) => local,
            // Answered once durable there.
            Ok(sent) => return Ok((sent?.await?, None)),
        };
        if msg.priority > 9 {
            return Err(BrokerError::InvalidPriority(msg.priority));
        }
        let queue = self
            .queue(&msg.queue, true)?
            .ok_or(BrokerError::Contended)?;
        let incoming = Incoming::new(msg.priority, msg.headers, msg.payload, msg.ttl_ms);
        Ok(queue
            .tq
            .submit(move |q| q.enqueue(incoming, now_ms()))
            .await??)
    }
    /// For a queue homed on another node: sends the enqueue there now, in
    /// order with this node's other calls, and gives what answers with its
    /// seq once durable there, so a session can go on to its next frame;
    /// gives the message back for a queue of this node's.
    ///
    /// # Errors
    /// As [`Queues::enqueue`](crate::broker::Queues::enqueue) (inside: what the home says).
    pub fn enqueue_elsewhere(
        self,
        msg: Enqueue,
    ) -> Result<Result<Answering<u64>, BrokerError>, Enqueue> {
        let Some((remote, home)) = self.home_elsewhere(&msg.queue) else {
            return Err(msg);
        };
        if msg.priority > 9 {
            return Ok(Err(BrokerError::InvalidPriority(msg.priority)));
        }
        if let Err(e) = self.check_topic(&msg.queue) {
            return Ok(Err(e));
        }
        Ok(remote.enqueue_sent(&home, msg))
    }
    /// For a queue homed on another node: sends the settle there now and
    /// gives what answers once it is done there; gives `ids` back for a
    /// queue of this node's.
    ///
    /// # Errors
    /// As [`Queues::settle`](crate::broker::Queues::settle) (inside).
    pub fn settle_elsewhere(
        self,
        queue: &str,
        sink: u64,
        id: &str,
        ids: Vec<u64>,
        how: Settlement,
    ) -> Result<Result<Answering<()>, BrokerError>, Vec<u64>> {
        let Some((remote, home)) = self.home_elsewhere(queue) else {
            return Err(ids);
        };
        if ids.is_empty() || ids.len() > MAX_IDS {
            return Ok(Err(BrokerError::InvalidIds(ids.len())));
        }
        Ok(remote.settle_sent(&home, queue, sink, id, ids, how))
    }
    /// Puts a message on a queue without waiting for anything (not even
    /// the task): for callers inside other resources' tasks, which must
    /// not block. Failures are logged.
    pub fn enqueue_detached(self, msg: Enqueue) {
        if let Some((remote, home)) = self.home_elsewhere(&msg.queue) {
            remote.enqueue_detached(&home, msg);
            return;
        }
        let queue = match self.queue(&msg.queue, true) {
            Ok(Some(q)) => q,
            Ok(None) => return,
            Err(e) => {
                tracing::error!(queue = %msg.queue, "cannot enqueue: {e}");
                return;
            }
        };
        let name = msg.queue;
        let incoming = Incoming::new(msg.priority.min(9), msg.headers, msg.payload, msg.ttl_ms);
        let sent = queue.tq.execute(Lane::Normal, move |q| {
            if let Err(e) = q.enqueue(incoming, now_ms()) {
                tracing::error!(queue = %name, "enqueue refused: {e:?}");
            }
        });
        if let Err(e) = sent {
            tracing::error!("enqueue refused: {e}");
        }
    }
    /// [`Queues::enqueue`](crate::broker::Queues::enqueue), then waits until the message is durable.
    ///
    /// # Errors
    /// As [`Queues::enqueue`](crate::broker::Queues::enqueue), or the store failing the write.
    pub async fn enqueue_durable(self, msg: Enqueue) -> Result<u64, BrokerError> {
        let (seq, durable) = self.enqueue(msg).await?;
        if let Some(d) = durable {
            d.await.map_err(BrokerError::Store)?;
        }
        Ok(seq)
    }
    /// Attaches `sub` (its `filter` is ignored) as a consumer of `queue`
    /// (created on first use) with `prefetch` credit.
    ///
    /// # Errors
    /// An invalid name or prefetch, a duplicate consumer, an overloaded
    /// queue.
    pub async fn consume(
        self,
        queue: &str,
        sub: Subscription,
        prefetch: u32,
    ) -> Result<(), BrokerError> {
        if prefetch == 0 || prefetch > MAX_PREFETCH {
            return Err(BrokerError::InvalidPrefetch(prefetch));
        }
        if let Some((remote, home)) = self.home_elsewhere(queue) {
            self.check_topic(queue)?;
            return remote.consume(&home, queue, sub, prefetch).await;
        }
        let q = self.queue(queue, true)?.ok_or(BrokerError::Contended)?;
        Ok(q.tq
            .submit(move |q| q.consume(sub, prefetch, now_ms()))
            .await??)
    }
    /// Detaches a consumer; its unacknowledged deliveries go back to the
    /// queue at once.
    ///
    /// # Errors
    /// An unknown queue or consumer, an overloaded queue.
    pub async fn cancel_consumer(
        self,
        queue: &str,
        sink: u64,
        id: &str,
    ) -> Result<(), BrokerError> {
        if let Some((remote, home)) = self.home_elsewhere(queue) {
            return remote.cancel(&home, queue, sink, id).await;
        }
        let q = self
            .queue(queue, false)?
            .ok_or_else(|| BrokerError::UnknownQueue(queue.to_owned()))?;
        let id: Arc<str> = id.into();
        // High lane: a disconnect returns deliveries ahead of queued work.
        Ok(q.tq
            .submit_high(move |q| q.cancel(sink, &id, now_ms()))
            .await??)
    }
    /// Settles deliveries of consumer `id` of `sink` on `queue`: all of
    /// `ids` or none. An ack returns the [`Durable`] of the deletes.
    ///
    /// # Errors
    /// An unknown queue, consumer or delivery, or an overloaded queue.
    pub async fn settle(
        self,
        queue: &str,
        sink: u64,
        id: &str,
        ids: Vec<u64>,
        how: Settlement,
    ) -> Result<Option<Durable>, BrokerError> {
        let ids = match self.settle_elsewhere(queue, sink, id, ids, how) {
            Err(local) => local,
            // Answered once an ack's deletes are durable there.
            Ok(sent) => return sent?.await.map(|()| None),
        };
        if ids.is_empty() || ids.len() > MAX_IDS {
            return Err(BrokerError::InvalidIds(ids.len()));
        }
        let q = self
            .queue(queue, false)?
            .ok_or_else(|| BrokerError::UnknownQueue(queue.to_owned()))?;
        let id: Arc<str> = id.into();
        Ok(q.tq
            .submit(move |q| {
                let now = now_ms();
                match how {
                    Settlement::Ack => q.ack(sink, &id, &ids, now),
                    Settlement::Nack(delay) => q.nack(sink, &id, &ids, delay, now).map(|()| None),
                    Settlement::Reject => q.reject(sink, &id, &ids, now).map(|()| None),
                    Settlement::Touch(ms) => q.touch(sink, &id, &ids, ms, now).map(|()| None),
                }
            })
            .await??)
    }
    /// A queue's numbers (with its dead-letter queue's depth), if it
    /// exists.
    pub async fn queue_info(self, name: &str) -> Option<QueueInfo> {
        self.queue_info_or_why(name).await.unwrap_or_else(|e| {
            tracing::warn!(queue = name, "cluster: {e}");
            None
        })
    }
    /// [`Queues::queue_info`](crate::broker::Queues::queue_info), saying why when the queue's home (another
    /// node) did not answer, so an API can tell "busy" from "no queue".
    ///
    /// # Errors
    /// The home's refusal, or its silence.
    pub async fn queue_info_or_why(self, name: &str) -> Result<Option<QueueInfo>, BrokerError> {
        if let Some((remote, home)) = self.home_elsewhere(name) {
            return admin_at::<Option<QueueInfo>>(&*remote, &home, name, AdminOp::Info).await;
        }
        Ok(self.local_queue_info(name).await)
    }
    /// Names of the queues that exist.
    pub fn queue_names(self) -> Vec<String> {
        let mut names: Vec<String> = self
            .inner
            .queues
            .read()
            .queues
            .keys()
            .map(|k| k.to_string())
            .collect();
        names.sort();
        names
    }
    /// Moves the ready messages of a dead-letter queue back to the queues
    /// they came from (their `dead-letter-from` header), or to `to` if
    /// given, with their delivery count reset. Each move is one store
    /// batch. Returns how many moved; messages still on disk move as they
    /// are read back (call again until it returns 0).
    ///
    /// # Errors
    /// An unknown queue, or a target refusing messages (those stay).
    pub async fn redrive(self, dlq: &str, to: Option<&str>) -> Result<u64, BrokerError> {
        if let Some(target) = to
            && self.home_elsewhere(dlq).map(|(_, h)| h)
                != self.home_elsewhere(target).map(|(_, h)| h)
        {
            return Err(BrokerError::Invalid(format!(
                "{target:?} lives on another node than {dlq:?}: redrive moves messages within one node"
            )));
        }
        if let Some((remote, home)) = self.home_elsewhere(dlq) {
            let op = AdminOp::Redrive {
                to: to.map(str::to_owned),
            };
            return admin_at(&*remote, &home, dlq, op).await;
        }
        let source = self
            .queue(dlq, false)?
            .ok_or_else(|| BrokerError::UnknownQueue(dlq.to_owned()))?;
        let mut moved = 0u64;
        loop {
            let batch = source.tq.submit(|q| q.take_ready(REDRIVE_BATCH)).await?;
            if batch.is_empty() {
                return Ok(moved);
            }
            let mut failed = Vec::new();
            let mut first_error = None;
            for (m, removal) in batch {
                let target = to
                    .map(str::to_owned)
                    .or_else(|| m.headers.get(super::queue::DEAD_LETTER_FROM).cloned());
                let Some(target) = target.filter(|t| t != dlq) else {
                    failed.push(m);
                    first_error.get_or_insert(BrokerError::UnknownQueue(
                        "(no dead-letter-from header)".into(),
                    ));
                    continue;
                };
                let queue = match self.queue(&target, true) {
                    Ok(Some(q)) => q,
                    Ok(None) => continue,
                    Err(e) => {
                        failed.push(m);
                        first_error.get_or_insert(e);
                        continue;
                    }
                };
                let mut headers = m.headers.clone();
                for h in [
                    super::queue::DEAD_LETTER_REASON,
                    super::queue::DEAD_LETTER_FROM,
                    super::queue::DEAD_LETTER_SEQ,
                    super::queue::DEAD_LETTER_DELIVERIES,
                ] {
                    headers.remove(h);
                }
                let incoming = Incoming {
                    priority: m.priority,
                    headers,
                    payload: m.payload.clone(),
                    ttl_ms: None,
                    enqueued_ms: Some(m.enqueued_ms),
                    with: removal,
                };
                match queue
                    .tq
                    .submit(move |q| q.enqueue(incoming, now_ms()))
                    .await
                {
                    Ok(Ok(_)) => moved += 1,
                    Ok(Err(e)) => {
                        failed.push(m);
                        first_error.get_or_insert(e.into());
                    }
                    Err(e) => {
                        failed.push(m);
                        first_error.get_or_insert(e.into());
                    }
                }
            }
            if !failed.is_empty() {
                let _ = source
                    .tq
                    .submit(move |q| q.put_back(failed, now_ms()))
                    .await;
            }
            if let Some(e) = first_error {
                return Err(e);
            }
        }
    }
    /// Deletes a queue and every message it holds (not its dead-letter
    /// queue). Returns whether it existed.
    ///
    /// # Errors
    /// The queue refusing the task, or the store failing the deletes.
    pub async fn delete_queue(self, name: &str) -> Result<bool, BrokerError> {
        if let Some((remote, home)) = self.home_elsewhere(name) {
            return admin_at(&*remote, &home, name, AdminOp::Delete).await;
        }
        let Some(q) = self.queue(name, false)? else {
            return Ok(false);
        };
        let owned: Arc<str> = name.into();
        // The queue refuses everything once the task has run; only then
        // does the registry forget it (a refused task leaves it whole).
        let durable = q.tq.submit_high(move |s| s.delete(&owned)).await??;
        // Topic messages stop being copied into it.
        self.unbind(name).await;
        let forgot = {
            let mut reg = self.queue_registry();
            let ours = reg.queues.get(name).is_some_and(|h| h.tq.same(&q.tq));
            if ours {
                reg.queues.remove(name);
            }
            ours
        };
        if forgot {
            self.retire(&q.tq.stats());
        }
        if let Some(d) = durable {
            d.await.map_err(BrokerError::Store)?;
        }
        Ok(true)
    }
    /// Removes a queue once its consumers have taken and settled what it
    /// holds: from now on it refuses enqueues (and topic messages stop
    /// being copied into it), consumers carry on (a nacked message comes
    /// back to them), and once nothing is waiting or in flight it is
    /// deleted, by this call if that happens within `wait`, else by the
    /// ticker ([`Queues::tick_queues`](crate::broker::Queues::tick_queues)) when it does. Draining is not
    /// persisted: after a restart the queue is an ordinary queue again.
    ///
    /// # Errors
    /// The queue refusing the task, or the store failing the deletes.
    pub async fn drain_queue(self, name: &str, wait: Duration) -> Result<Drain, BrokerError> {
        if let Some((remote, home)) = self.home_elsewhere(name) {
            let op = AdminOp::Drain {
                wait_ms: u64::try_from(wait.as_millis()).unwrap_or(u64::MAX),
            };
            return admin_at(&*remote, &home, name, op).await;
        }
        let Some(q) = self.queue(name, false)? else {
            return Ok(Drain::NotFound);
        };
        let mut empty = q.tq.submit_high(QueueState::start_drain).await?;
        self.unbind(name).await;
        let deadline = tokio::time::Instant::now() + wait;
        while !empty && tokio::time::Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(20).min(wait)).await;
            empty = q.shared.drained.load(Ordering::Acquire);
        }
        if empty {
            q.shared.drained.store(false, Ordering::Release);
            self.delete_queue(name).await?;
            return Ok(Drain::Removed);
        }
        let left = q.tq.submit_high(|s| s.info()).await?;
        Ok(Drain::Draining {
            waiting: left.depth,
            in_flight: left.in_flight,
        })
    }
    /// Runs the deadline task of every queue that has deadlines to watch,
    /// and removes draining queues that have emptied (on the caller's
    /// actix system). The server calls it every
    /// [`QUEUE_TICK`](super::QUEUE_TICK).
    pub fn tick_queues(self) {
        let (busy, drained): (Vec<QueueHandle>, Vec<String>) = {
            let reg = self.inner.queues.read();
            let busy = reg
                .queues
                .values()
                .filter(|q| q.shared.needs_tick.load(Ordering::Acquire))
                .cloned()
                .collect();
            let drained = reg
                .queues
                .iter()
                .filter(|(_, q)| q.shared.drained.swap(false, Ordering::AcqRel))
                .map(|(n, _)| n.to_string())
                .collect();
            (busy, drained)
        };
        for name in drained {
            let broker = Broker::clone(&self);
            actix_rt::spawn(async move {
                match broker.queues().delete_queue(&name).await {
                    Ok(_) => tracing::info!(queue = %name, "drained queue removed"),
                    Err(e) => {
                        tracing::warn!(queue = %name, "a drained queue could not be removed: {e}")
                    }
                }
            });
        }
        for q in busy {
            if let Err(e) = q.tq.execute(Lane::High, |s| s.tick(now_ms())) {
                tracing::debug!("queue tick postponed: {e}");
            }
        }
    }
}

impl Broker {
    pub(super) fn queue_registry(&self) -> parking_lot::RwLockWriteGuard<'_, QueueRegistry> {
        self.inner.queues.write()
    }
    /// The options a queue named `name` gets.
    fn options_for(reg: &QueueRegistry, name: &str) -> QueueOptions {
        match reg.declared.get(name) {
            Some(o) => o.clone(),
            None => reg.defaults.clone(),
        }
    }
    /// The queue `name`, created with its dead-letter queue if `create`.
    pub(super) fn queue(
        &self,
        name: &str,
        create: bool,
    ) -> Result<Option<QueueHandle>, BrokerError> {
        if let Some(q) = self.inner.queues.read().queues.get(name) {
            return Ok(Some(q.clone()));
        }
        if !create {
            return Ok(None);
        }
        self.check_topic(name)?;
        let mut reg = self.queue_registry();
        Ok(Some(self.create_queue(&mut reg, name, None)))
    }
    /// Creates `name` (and its dead-letter queue) under the registry lock,
    /// or returns the existing one. `id` is the stored id when restoring.
    fn create_queue(&self, reg: &mut QueueRegistry, name: &str, id: Option<u32>) -> QueueHandle {
        if let Some(q) = reg.queues.get(name) {
            return q.clone();
        }
        let mut opts = Self::options_for(reg, name);
        let dlq = match dead_letter_name(reg, name) {
            Some(dlq_name) if dlq_name != name => Some(self.create_queue(reg, &dlq_name, None)),
            Some(_) => None,
            None => {
                // A dead-letter queue keeps what it is given; a durable or
                // shared subscription redelivers until a subscriber acks.
                opts.max_deliveries = 0;
                None
            }
        };
        // A shared subscription's group lives in memory only: it ends
        // with its last member, and a restart ends every member.
        let writer = if super::shared::is_shared(name) {
            None
        } else {
            self.inner.writer.clone()
        };
        let id = match id {
            Some(id) => id,
            None => {
                let id = reg.next_id;
                // Never the id the job records replicate under.
                reg.next_id = reg.next_id.saturating_add(1).min(JOBS_ID - 1);
                if let Some(w) = &writer {
                    // Ordered before any of its messages by the writer.
                    if let Err(e) = w.submit(vec![records::put_queue(name, id, b"")]) {
                        tracing::error!(queue = name, "recording the new queue failed: {e}");
                    }
                }
                id
            }
        };
        reg.next_id = reg.next_id.max(id.saturating_add(1)).min(JOBS_ID - 1);
        let shared = Arc::new(QueueShared::default());
        let name: Arc<str> = name.into();
        let tq = TaskQueue::new(
            QueueState::new(name.clone(), id, opts, writer, dlq, shared.clone()),
            &self.inner.scheduler,
        );
        let handle = QueueHandle { tq, shared, id };
        let me = handle.clone();
        if handle
            .tq
            .execute(Lane::High, move |q| q.set_handle(&me))
            .is_err()
        {
            tracing::error!(queue = %name, "a new queue could not take its own handle");
        }
        reg.queues.insert(name, handle.clone());
        handle
    }
    /// The cluster and the node `queue` lives on, when that is another
    /// node: queue calls are then sent there.
    pub(crate) fn home_elsewhere(&self, queue: &str) -> Option<(Arc<dyn Remote>, String)> {
        let remote = self.remote()?;
        let home = remote.home_elsewhere(queue)?;
        Some((remote.clone(), home))
    }
    /// This node's own queue `name`'s numbers (whatever its home).
    pub(crate) async fn local_queue_info(&self, name: &str) -> Option<QueueInfo> {
        let q = self.queue(name, false).ok()??;
        let mut info = q.tq.submit(|q| q.info()).await.ok()?;
        let dlq_name = {
            let reg = self.inner.queues.read();
            dead_letter_name(&reg, name)
        };
        if let Some(dlq_name) = dlq_name {
            if let Some(dlq) = self.queue(&dlq_name, false).ok().flatten() {
                info.dead_letter_depth = dlq.tq.submit(|q| q.info().depth).await.ok();
            }
            info.dead_letter = Some(dlq_name);
        }
        Some(info)
    }
}

impl From<SubmitError> for BrokerError {
    fn from(e: SubmitError) -> Self {
        BrokerError::StoreBusy(e)
    }
}
