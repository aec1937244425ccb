//! A queue's state and the tasks that change it. Everything here runs
//! inside the queue's task queue: one task at a time, never blocking, and
//! every disk write handed to the store writer.
//!
//! A message is in exactly one place: `ready` (in memory, per priority,
//! oldest first), `delayed` (waiting for its not-before time), `inflight`
//! (delivered, waiting for an ack), or on disk only (`spilled`, past the
//! memory window). Tasks validate first and mutate last, so a refused
//! request changes nothing.
//!
//! # Design notes
//!
//! Enqueue writes the message's `qmsg` record through the store writer and
//! returns its `Durable` (the caller confirms once it completes; consumers
//! may have the message before). Past `memory_window` ready messages, or
//! when its priority has messages on disk already (to keep their order), a
//! new message is written and only counted (`spilled`). Dispatch takes
//! consumers round robin from the one after the last served, among those
//! with credit, not blocked and not cancelled; the deliveries' `qdel`
//! records go to the writer in one detached submission, best effort. A
//! `Dropped` delivery stays here and blocks its consumer until it settles
//! something or the tick; a `Closed` sink's consumer goes, and its
//! deliveries come back. `ack` is all or nothing, deletes the records in
//! one submission and returns its `Durable`. Dead-lettering hands the
//! message, with the deletes of its records here, to the dead-letter
//! queue's enqueue task, whose put joins them in one `qmsg` batch; if that
//! queue refuses, nothing is written and the message is back here at the
//! next start. A priority with messages on disk that runs low in memory
//! (under a quarter of the window) is refilled by one `WriterHandle::read`
//! at a time, answered by a high-lane task through a `WeakTaskQueue` (a
//! strong handle would keep the queue alive); a purge raises the refill
//! epoch, so a read asked before it is dropped. `pop_ready` stops at a
//! priority whose messages wait on disk, so no lower one overtakes them.
//! `after` sets `needs_tick` while anything has a deadline; the tick also
//! scans for expiry, at most once a second.

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use bytes::Bytes;

use super::sink::{DeliveryOutcome, QueuedDelivery, Subscription};
use crate::config::{ExpiredPolicy, QueueOptions};
use crate::protocol::frame::Headers;
use crate::store::queues::{
    self as records, MESSAGES_TREE, PRIORITIES, StoredMessage, decode_message,
};
use crate::store::{Durable, ReadResult, SubmitError, Write, WriterHandle};
use crate::taskq::{Lane, TaskQueue, WeakTaskQueue};

/// Header naming why a message was dead-lettered: `max-deliveries`,
/// `rejected` or `expired`.
pub const DEAD_LETTER_REASON: &str = "dead-letter-reason";
/// Header naming the queue a dead-lettered message came from.
pub const DEAD_LETTER_FROM: &str = "dead-letter-from";
/// Header with the message's seq in the queue it came from.
pub const DEAD_LETTER_SEQ: &str = "dead-letter-seq";
/// Header with the message's delivery count when it was dead-lettered.
pub const DEAD_LETTER_DELIVERIES: &str = "dead-letter-deliveries";

/// Messages read back from disk at least at a time (even past the window,
/// so that a high priority waiting on disk is never starved by a window
/// full of lower ones).
const REFILL_MIN: usize = 64;

pub(crate) type QueueTq = TaskQueue<QueueState>;

/// A queue resource as the registry keeps it.
#[derive(Clone)]
pub(crate) struct QueueHandle {
    pub(crate) tq: QueueTq,
    pub(crate) shared: Arc<QueueShared>,
    /// Its id in the store's keys.
    pub(crate) id: u32,
}

/// What others may read without a task.
#[derive(Debug, Default)]
pub(crate) struct QueueShared {
    /// Set while the queue has deadlines to watch (in-flight deliveries,
    /// delayed or expiring messages, a refill to retry): the broker's
    /// ticker only visits such queues.
    pub(crate) needs_tick: AtomicBool,
    /// A refill's answer could not be handed to the queue (overloaded):
    /// the next tick asks again.
    pub(crate) refill_lost: AtomicBool,
    /// Set when a draining queue has nothing left (waiting, in flight or
    /// being committed): the ticker removes it.
    pub(crate) drained: AtomicBool,
}

/// The current time in Unix milliseconds (stored with messages, so it must
/// survive a restart: not a monotonic clock).
pub fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// The delay of a backoff schedule (ms) after `n` attempts: step `n - 1`,
/// the last step repeating; 0 for an empty schedule.
pub(crate) fn backoff_delay(steps: &[u64], n: u32) -> u64 {
    let i = (n as usize).saturating_sub(1);
    steps.get(i).or(steps.last()).copied().unwrap_or(0)
}

/// Why a queue operation was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum QueueError {
    /// `max_length` messages are held already.
    Full(u64),
    /// These delivery ids are not in flight to this consumer.
    UnknownDelivery(Vec<u64>),
    /// The consumer id is in use on this queue.
    DuplicateConsumer,
    /// No such consumer on this queue.
    UnknownConsumer,
    /// The store writer refused the write.
    Store(SubmitError),
    /// The queue was deleted.
    Deleted,
    /// The queue is draining before its removal: no enqueues.
    Draining,
}

/// A message to enqueue.
#[derive(Debug)]
pub(crate) struct Incoming {
    pub(crate) priority: u8,
    pub(crate) headers: Headers,
    pub(crate) payload: Bytes,
    /// Time to live asked for by the publisher (capped by the queue's).
    pub(crate) ttl_ms: Option<u64>,
    /// When it was first enqueued, for a message moved between queues.
    pub(crate) enqueued_ms: Option<u64>,
    /// Writes that must commit in the same batch (the delete of the copy
    /// this one replaces, for a move).
    pub(crate) with: Vec<Write>,
}

impl Incoming {
    /// A fresh message.
    pub(crate) fn new(priority: u8, headers: Headers, payload: Bytes, ttl_ms: Option<u64>) -> Self {
        Incoming {
            priority,
            headers,
            payload,
            ttl_ms,
            enqueued_ms: None,
            with: Vec::new(),
        }
    }
}

/// A queue's numbers, for the admin API.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct QueueInfo {
    /// The queue's name.
    pub name: String,
    /// Messages waiting (ready, delayed, and on disk past the window).
    pub depth: u64,
    /// Of which ready now.
    pub ready: u64,
    /// Of which waiting for a redelivery delay.
    pub delayed: u64,
    /// Of which kept only on disk.
    pub on_disk: u64,
    /// Delivered and not yet acknowledged.
    pub in_flight: u64,
    /// Consumers attached.
    pub consumers: u64,
    /// The dead-letter queue's name, if it has one.
    pub dead_letter: Option<String>,
    /// Messages the dead-letter queue holds (filled in by the broker).
    pub dead_letter_depth: Option<u64>,
    /// When the oldest message waiting in memory (ready or delayed) was
    /// first enqueued (Unix ms); `None` when none waits in memory.
    pub oldest_enqueued_ms: Option<u64>,
    /// Draining before its removal: it takes no more messages.
    pub draining: bool,
    /// Counters since start.
    pub stats: QueueCounters,
}

/// Counters of one queue since start.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct QueueCounters {
    /// Messages enqueued.
    pub enqueued: u64,
    /// Deliveries made (redeliveries included).
    pub delivered: u64,
    /// Messages acknowledged.
    pub acked: u64,
    /// Deliveries that came back (nack, timeout, consumer gone).
    pub returned: u64,
    /// Of which nacked by their consumer.
    pub nacked: u64,
    /// Of which not acked within the ack timeout.
    pub timed_out: u64,
    /// Deliveries of messages delivered before (included in `delivered`).
    pub redelivered: u64,
    /// Messages moved to the dead-letter queue.
    pub dead_lettered: u64,
    /// Messages deleted unconsumed (expired with `expired = "drop"`, or
    /// dead-lettered without a dead-letter queue).
    pub discarded: u64,
    /// Messages taken away to another queue (a redrive or a move).
    pub moved: u64,
    /// Messages deleted by purges.
    pub purged: u64,
    /// Enqueues refused because the queue was full (for a queue bound to
    /// topics, or a durable subscription: topic messages not kept).
    pub refused: u64,
}

struct Inflight {
    msg: StoredMessage,
    consumer: u64,
    deadline_ms: u64,
    /// A transaction committing its ack: neither timed out nor given back
    /// until the commit applies or aborts.
    locked: Option<u64>,
}

struct Consumer {
    cid: u64,
    sub: Subscription,
    prefetch: u32,
    inflight: u32,
    /// Its sink refused a delivery (outbound full): skipped until it acks.
    blocked: bool,
}

/// Why a message leaves for the dead-letter queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum DeadReason {
    MaxDeliveries,
    Rejected,
    Expired,
}

impl DeadReason {
    fn as_str(self) -> &'static str {
        match self {
            DeadReason::MaxDeliveries => "max-deliveries",
            DeadReason::Rejected => "rejected",
            DeadReason::Expired => "expired",
        }
    }
}

/// The state a queue resource owns.
pub(crate) struct QueueState {
    name: Arc<str>,
    id: u32,
    opts: QueueOptions,
    ready: [VecDeque<StoredMessage>; PRIORITIES],
    ready_len: usize,
    /// Per priority: messages on disk only, with seq above `loaded_upto`.
    spilled: [u64; PRIORITIES],
    loaded_upto: [u64; PRIORITIES],
    /// Seqs loaded at start out of order (delivered before the restart,
    /// past the window): a refill that reads them again skips them.
    loaded_extra: HashSet<u64>,
    refilling: bool,
    /// Raised by a purge: the answer of a refill read asked for before it
    /// is ignored (it may hold purged messages).
    refill_epoch: u64,
    delayed: BTreeMap<(u64, u64), StoredMessage>,
    inflight: HashMap<u64, Inflight>,
    consumers: Vec<Consumer>,
    rr: usize,
    next_cid: u64,
    next_seq: u64,
    next_delivery: u64,
    /// Messages in memory that carry an expiry.
    expiring: usize,
    last_expiry_scan: u64,
    writer: Option<WriterHandle>,
    dlq: Option<QueueHandle>,
    /// Its own handle (weak: no cycle), for the store writer's answers to
    /// refill reads.
    me: Option<WeakTaskQueue<QueueState>>,
    shared: Arc<QueueShared>,
    stats: QueueCounters,
    deleted: bool,
    /// Draining before removal: enqueues are refused, consumers carry on.
    draining: bool,
    /// Enqueues prepared by committing transactions, not yet visible.
    prepared: HashMap<u64, Vec<StoredMessage>>,
    /// Message ids taken lately (`dedupe.rs`), once one came.
    dedupe: Option<Box<dedupe::Dedupe>>,
}

impl QueueState {
    pub(crate) fn new(
        name: Arc<str>,
        id: u32,
        opts: QueueOptions,
        writer: Option<WriterHandle>,
        dlq: Option<QueueHandle>,
        shared: Arc<QueueShared>,
    ) -> Self {
        QueueState {
            name,
            id,
            opts,
            ready: Default::default(),
            ready_len: 0,
            spilled: [0; PRIORITIES],
            loaded_upto: [0; PRIORITIES],
            loaded_extra: HashSet::new(),
            refilling: false,
            refill_epoch: 0,
            delayed: BTreeMap::new(),
            inflight: HashMap::new(),
            consumers: Vec::new(),
            rr: 0,
            next_cid: 1,
            next_seq: 1,
            next_delivery: 1,
            expiring: 0,
            last_expiry_scan: 0,
            writer,
            dlq,
            me: None,
            shared,
            stats: QueueCounters::default(),
            deleted: false,
            draining: false,
            prepared: HashMap::new(),
            dedupe: None,
        }
    }

    /// Gives the queue its own handle (right after creation).
    pub(crate) fn set_handle(&mut self, me: &QueueHandle) {
        self.me = Some(me.tq.downgrade());
    }

    /// Installs what the store held at start.
    pub(crate) fn restore(
        &mut self,
        messages: Vec<StoredMessage>,
        spilled: [u64; PRIORITIES],
        loaded_upto: [u64; PRIORITIES],
        next_seq: u64,
    ) {
        self.next_seq = self.next_seq.max(next_seq);
        self.spilled = spilled;
        self.loaded_upto = loaded_upto;
        for m in messages {
            let p = usize::from(m.priority.min(9));
            if m.seq > self.loaded_upto[p] {
                self.loaded_extra.insert(m.seq);
            }
            self.remember_id(&m, now_ms());
            self.hold(m);
        }
        self.after();
    }

    fn holds(&self) -> u64 {
        (self.ready_len + self.delayed.len() + self.inflight.len()) as u64
            + self.spilled.iter().sum::<u64>()
    }

    /// Adds a message: persisted (with `m.with` in the same batch), then
    /// held in memory or, past the window, left on disk. Returns its seq
    /// and, with a store, when it is durable.
    pub(crate) fn enqueue(
        &mut self,
        mut m: Incoming,
        now: u64,
    ) -> Result<(u64, Option<Durable>), QueueError> {
        if self.deleted {
            return Err(QueueError::Deleted);
        }
        if self.draining {
            return Err(QueueError::Draining);
        }
        if let Some(answer) = self.repeat_of(&m, now) {
            return answer;
        }
        if self.holds() >= self.opts.max_length {
            self.stats.refused += 1;
            return Err(QueueError::Full(self.opts.max_length));
        }
        let with = std::mem::take(&mut m.with);
        let msg = self.stamp(m, now);
        let durable = match &self.writer {
            Some(w) => {
                let mut writes = Vec::with_capacity(1 + with.len());
                writes.push(records::put_message(self.id, &msg));
                writes.extend(with);
                Some(w.submit(writes).map_err(QueueError::Store)?)
            }
            None => None,
        };
        self.next_seq += 1;
        self.stats.enqueued += 1;
        let seq = msg.seq;
        self.remember_id(&msg, now);
        self.admit(msg);
        self.dispatch(now);
        self.after();
        Ok((seq, durable))
    }

    /// The stored form of an incoming message, with the next seq (which
    /// the caller consumes by incrementing `next_seq`) and its expiry.
    fn stamp(&self, m: Incoming, now: u64) -> StoredMessage {
        let ttl = match (m.ttl_ms.filter(|&t| t > 0), self.opts.ttl_ms) {
            (Some(a), 0) => a,
            (Some(a), b) => a.min(b),
            (None, b) => b,
        };
        let expires_ms = if ttl > 0 { now.saturating_add(ttl) } else { 0 };
        StoredMessage {
            seq: self.next_seq,
            priority: m.priority.min(9),
            headers: m.headers,
            payload: m.payload,
            enqueued_ms: m.enqueued_ms.unwrap_or(now),
            expires_ms,
            deliveries: 0,
            not_before_ms: 0,
        }
    }

    /// Puts a message in memory: ready, or delayed if not due.
    fn hold(&mut self, m: StoredMessage) {
        if m.expires_ms > 0 {
            self.expiring += 1;
        }
        if m.not_before_ms > 0 {
            self.delayed.insert((m.not_before_ms, m.seq), m);
            return;
        }
        let q = &mut self.ready[usize::from(m.priority.min(9))];
        // Returned messages go back to their place: order is by seq.
        let at = match q.back() {
            Some(last) if last.seq > m.seq => q.partition_point(|x| x.seq < m.seq),
            _ => q.len(),
        };
        q.insert(at, m);
        self.ready_len += 1;
    }

    fn unhold(&mut self, m: &StoredMessage) {
        if m.expires_ms > 0 {
            self.expiring = self.expiring.saturating_sub(1);
        }
    }

    /// Adds a consumer with `prefetch` credit and delivers what it can take.
    pub(crate) fn consume(
        &mut self,
        sub: Subscription,
        prefetch: u32,
        now: u64,
    ) -> Result<(), QueueError> {
        if self.deleted {
            return Err(QueueError::Deleted);
        }
        if self.consumer_index(sub.sink.id(), &sub.id).is_some() {
            return Err(QueueError::DuplicateConsumer);
        }
        let cid = self.next_cid;
        self.next_cid += 1;
        self.consumers.push(Consumer {
            cid,
            sub,
            prefetch: prefetch.max(1),
            inflight: 0,
            blocked: false,
        });
        self.dispatch(now);
        self.after();
        Ok(())
    }

    fn consumer_index(&self, sink: u64, id: &str) -> Option<usize> {
        self.consumers
            .iter()
            .position(|c| c.sub.sink.id() == sink && &*c.sub.id == id)
    }

    /// Removes a consumer; its unacknowledged deliveries come back at once.
    pub(crate) fn cancel(&mut self, sink: u64, id: &str, now: u64) -> Result<(), QueueError> {
        let i = self
            .consumer_index(sink, id)
            .ok_or(QueueError::UnknownConsumer)?;
        let c = self.consumers.remove(i);
        self.return_all_of(c.cid, now);
        self.dispatch(now);
        self.after();
        Ok(())
    }

    fn return_all_of(&mut self, cid: u64, now: u64) {
        let ids: Vec<u64> = self
            .inflight
            .iter()
            .filter(|(_, f)| f.consumer == cid && f.locked.is_none())
            .map(|(&id, _)| id)
            .collect();
        for id in ids {
            if let Some(f) = self.inflight.remove(&id) {
                self.unhold(&f.msg);
                self.give_back(f.msg, Some(0), now);
            }
        }
    }

    /// The next consumer with credit, round robin from the one after the
    /// last that was given a message (the turn moves only with a
    /// delivery, so a dispatch that finds no message skips nobody).
    fn next_consumer(&self) -> Option<usize> {
        let n = self.consumers.len();
        (0..n).map(|k| (self.rr + k) % n).find(|&i| {
            let c = &self.consumers[i];
            !c.blocked && c.inflight < c.prefetch && !c.sub.is_cancelled()
        })
    }

    /// The highest-priority ready message, dead-lettering expired ones on
    /// the way. Stops (returns `None`) at a priority whose messages wait
    /// on disk, so a lower priority never jumps ahead of them.
    fn pop_ready(&mut self, now: u64) -> Option<StoredMessage> {
        for p in (0..PRIORITIES).rev() {
            loop {
                let Some(m) = self.ready[p].pop_front() else {
                    if self.spilled[p] > 0 {
                        self.request_refill();
                        return None;
                    }
                    break;
                };
                self.ready_len -= 1;
                if m.expires_ms > 0 && now >= m.expires_ms {
                    self.unhold(&m);
                    self.dead_letter(m, DeadReason::Expired);
                    continue;
                }
                return Some(m);
            }
        }
        None
    }

    /// Hands ready messages to consumers with credit.
    fn dispatch(&mut self, now: u64) {
        if self.consumers.is_empty() || self.deleted {
            self.request_refill();
            return;
        }
        let mut closed = false;
        // Delivery counts of this dispatch, written in one submission.
        let mut counts = Vec::new();
        while let Some(ci) = self.next_consumer() {
            let Some(mut m) = self.pop_ready(now) else {
                break;
            };
            m.deliveries = m.deliveries.saturating_add(1);

            let id = self.next_delivery;
            let c = &self.consumers[ci];
            let outcome = c.sub.sink.deliver_queued(
                &c.sub,
                &QueuedDelivery {
                    queue: &self.name,
                    id,
                    message: &m,
                },
            );
            match outcome {
                DeliveryOutcome::Queued | DeliveryOutcome::Crowded => {
                    self.rr = (ci + 1) % self.consumers.len();
                    self.next_delivery += 1;
                    self.stats.delivered += 1;
                    if m.deliveries > 1 {
                        self.stats.redelivered += 1;
                    }
                    if self.writer.is_some() {
                        counts.push(records::put_deliveries(self.id, &m));
                    }
                    let c = &mut self.consumers[ci];
                    c.inflight += 1;
                    let cid = c.cid;
                    self.inflight.insert(
                        id,
                        Inflight {
                            msg: m,
                            consumer: cid,
                            deadline_ms: now.saturating_add(self.opts.ack_timeout_ms),
                            locked: None,
                        },
                    );
                }
                DeliveryOutcome::Dropped => {
                    m.deliveries -= 1;
                    self.unhold(&m);
                    self.hold(m);
                    self.consumers[ci].blocked = true;
                }
                DeliveryOutcome::Closed => {
                    m.deliveries -= 1;
                    self.unhold(&m);
                    self.hold(m);
                    self.consumers[ci].blocked = true;
                    closed = true;
                }
            }
        }
        if let (Some(w), false) = (&self.writer, counts.is_empty()) {
            // Best effort: a lost count only undercounts.
            let _ = w.submit_detached(counts);
        }
        if closed {
            let gone: Vec<u64> = self
                .consumers
                .iter()
                .filter(|c| c.sub.is_cancelled() || c.sub.sink.is_closed())
                .map(|c| c.cid)
                .collect();
            self.consumers
                .retain(|c| !(c.sub.is_cancelled() || c.sub.sink.is_closed()));
            self.rr = 0;
            for cid in gone {
                self.return_all_of(cid, now);
            }
            if !self.consumers.is_empty() {
                self.dispatch(now);
            }
        }
        self.request_refill();
    }

    /// Deadlines: expired ack timeouts come back, delayed messages whose
    /// time has come become ready, expired messages leave.
    pub(crate) fn tick(&mut self, now: u64) {
        if self.shared.refill_lost.swap(false, Ordering::AcqRel) {
            self.refilling = false;
        }
        // A consumer whose outbound queue was full gets another offer.
        for c in &mut self.consumers {
            c.blocked = false;
        }
        let late: Vec<u64> = self
            .inflight
            .iter()
            .filter(|(_, f)| f.deadline_ms <= now && f.locked.is_none())
            .map(|(&id, _)| id)
            .collect();
        for id in late {
            if let Some(f) = self.inflight.remove(&id) {
                if let Some(c) = self.consumers.iter_mut().find(|c| c.cid == f.consumer) {
                    c.inflight = c.inflight.saturating_sub(1);
                    c.blocked = false;
                }
                self.stats.timed_out += 1;
                self.unhold(&f.msg);
                self.give_back(f.msg, Some(0), now);
            }
        }
        while let Some(entry) = self.delayed.first_entry() {
            if entry.key().0 > now {
                break;
            }
            let mut m = entry.remove();
            m.not_before_ms = 0;
            self.unhold(&m);
            self.hold(m);
        }
        if self.expiring > 0 && now >= self.last_expiry_scan.saturating_add(1000) {
            self.last_expiry_scan = now;
            for p in 0..PRIORITIES {
                let q = std::mem::take(&mut self.ready[p]);
                let mut keep = VecDeque::with_capacity(q.len());
                for m in q {
                    if m.expires_ms > 0 && now >= m.expires_ms {
                        self.ready_len -= 1;
                        self.unhold(&m);
                        self.dead_letter(m, DeadReason::Expired);
                    } else {
                        keep.push_back(m);
                    }
                }
                self.ready[p] = keep;
            }
        }
        self.dispatch(now);
        self.after();
    }

    /// Updates what the ticker reads.
    fn after(&self) {
        if self.draining && self.is_drained() {
            self.shared.drained.store(true, Ordering::Release);
        }
        let busy = !self.inflight.is_empty()
            || !self.delayed.is_empty()
            || self.expiring > 0
            || self.consumers.iter().any(|c| c.blocked)
            || self.shared.refill_lost.load(Ordering::Acquire);
        self.shared.needs_tick.store(busy, Ordering::Release);
    }

    /// Starts draining before removal: enqueues are refused from now on,
    /// consumers take and settle what is left. Returns whether nothing is
    /// left already.
    pub(crate) fn start_drain(&mut self) -> bool {
        self.draining = true;
        self.after();
        self.is_drained()
    }

    /// Nothing waiting, in flight or being committed.
    fn is_drained(&self) -> bool {
        self.ready_len == 0
            && self.delayed.is_empty()
            && self.inflight.is_empty()
            && self.spilled.iter().all(|n| *n == 0)
            && self.prepared.is_empty()
    }

    /// The queue's numbers.
    pub(crate) fn info(&self) -> QueueInfo {
        let on_disk: u64 = self.spilled.iter().sum();
        QueueInfo {
            name: self.name.to_string(),
            depth: self.ready_len as u64 + self.delayed.len() as u64 + on_disk,
            ready: self.ready_len as u64,
            delayed: self.delayed.len() as u64,
            on_disk,
            in_flight: self.inflight.len() as u64,
            consumers: self.consumers.len() as u64,
            dead_letter: None,
            dead_letter_depth: None,
            oldest_enqueued_ms: self.oldest_enqueued(),
            draining: self.draining,
            stats: self.stats,
        }
    }

    /// The first enqueue time of the oldest message waiting in memory: the
    /// head of each priority (oldest first there) and the delayed ones.
    fn oldest_enqueued(&self) -> Option<u64> {
        let heads = self.ready.iter().filter_map(|q| q.front());
        heads
            .chain(self.delayed.values())
            .map(|m| m.enqueued_ms)
            .min()
    }

    /// Deletes the queue: every message, on disk too. Consumers are
    /// dropped; later tasks are refused with `Deleted`.
    pub(crate) fn delete(&mut self, name: &str) -> Result<Option<Durable>, QueueError> {
        // The deletes go first: refused, they leave the queue whole.
        let durable = match &self.writer {
            Some(w) => Some(
                w.submit(records::delete_queue(name, self.id).into())
                    .map_err(QueueError::Store)?,
            ),
            None => None,
        };
        self.deleted = true;
        self.consumers.clear();
        self.inflight.clear();
        self.delayed.clear();
        self.ready = Default::default();
        self.ready_len = 0;
        self.spilled = [0; PRIORITIES];
        self.expiring = 0;
        self.me = None;
        self.dlq = None;
        self.after();
        Ok(durable)
    }
}

mod admin;
mod dedupe;
pub use dedupe::MSG_ID_HEADER;
mod install;
mod refill;
mod settle;
mod txn;

pub use admin::MessageState;
pub(crate) use admin::{BrowseSnapshot, Taken};
pub(crate) use txn::StagedAck;

#[cfg(test)]
mod tests;
