//! The queue resource against a plain model, driven by random sequences of
//! enqueues, consumers coming and going, settlements and clock steps.
//!
//! The queue runs memory only (no store writer) on a fake clock: every task
//! is given an explicit `now`. Its dead-letter queue is a real resource (a
//! task queue), read back after every step. Consumers are [`TestSink`]s
//! that log every delivery offered to them, in one log shared by all, so
//! that the model can replay each dispatch: which message had to come next
//! (priority order, expiry), to whom it may go (credit, blocked) and what
//! its delivery count must be. The consumer chosen is the queue's business;
//! everything else is checked against the model, and the queue's own state
//! (ready deques, delayed set, in-flight map, consumers, counters) is
//! compared with it after every step.

use std::cmp::Reverse;
use std::collections::BTreeSet;
use std::sync::{Mutex, OnceLock};
use std::task::{Context, Poll, Wake, Waker};
use std::time::{Duration, Instant};

use proptest::prelude::*;
use proptest::test_runner::{TestCaseError, TestError, TestRunner};

use super::*;
use crate::broker::{Published, Sink, next_sink_id};
use crate::taskq::{Scheduler, SchedulerConfig};

/// The queue under test.
const NAME: &str = "work";
/// Start of the fake clock (Unix ms).
const T0: u64 = 1_000_000;
/// The queue's minimum gap between two expiry scans of `tick`.
const SCAN_EVERY: u64 = 1000;

// ---------------------------------------------------------------------------
// Plumbing: a recording sink, the dead-letter queue, a tiny block_on.

/// One delivery offered to a sink, in the order the queue offered them.
#[derive(Debug, Clone)]
struct Attempt {
    sink: u64,
    sub: String,
    id: u64,
    seq: u64,
    priority: u8,
    deliveries: u32,
    expires_ms: u64,
    not_before_ms: u64,
    enqueued_ms: u64,
    payload: Bytes,
    outcome: Delivery,
}

type Log = Arc<Mutex<Vec<Attempt>>>;

/// A consumer's sink: `Closed` once disconnected, `Dropped` while full,
/// else `Queued`; logs every offer.
struct TestSink {
    id: u64,
    closed: AtomicBool,
    full: AtomicBool,
    log: Log,
}

impl TestSink {
    fn new(log: &Log) -> Arc<TestSink> {
        Arc::new(TestSink {
            id: next_sink_id(),
            closed: AtomicBool::new(false),
            full: AtomicBool::new(false),
            log: log.clone(),
        })
    }

    fn is_full(&self) -> bool {
        self.full.load(Ordering::Relaxed)
    }
}

impl Sink for TestSink {
    fn id(&self) -> u64 {
        self.id
    }

    fn deliver(&self, _sub: &Subscription, _msg: &Arc<Published>) -> Delivery {
        Delivery::Closed
    }

    fn is_closed(&self) -> bool {
        self.closed.load(Ordering::Relaxed)
    }

    fn deliver_queued(&self, sub: &Subscription, d: &QueuedDelivery<'_>) -> Delivery {
        assert_eq!(d.queue, NAME, "a delivery names the wrong queue");
        let outcome = if self.is_closed() {
            Delivery::Closed
        } else if self.is_full() {
            Delivery::Dropped
        } else {
            Delivery::Queued
        };
        self.log.lock().unwrap().push(Attempt {
            sink: self.id,
            sub: sub.id.to_string(),
            id: d.id,
            seq: d.message.seq,
            priority: d.message.priority,
            deliveries: d.message.deliveries,
            expires_ms: d.message.expires_ms,
            not_before_ms: d.message.not_before_ms,
            enqueued_ms: d.message.enqueued_ms,
            payload: d.message.payload.clone(),
            outcome,
        });
        outcome
    }
}

fn subscription(sink: &Arc<TestSink>, id: &str) -> Subscription {
    Subscription::new(sink.clone(), id, "", Bytes::new(), 0)
}

fn payload(seq: u64) -> Bytes {
    Bytes::from(format!("m{seq}"))
}

fn incoming(seq: u64, priority: u8, ttl_ms: Option<u64>) -> Incoming {
    let mut headers = Headers::new();
    headers.insert("n".into(), seq.to_string());
    Incoming::new(priority, headers, payload(seq), ttl_ms)
}

fn scheduler() -> &'static Scheduler {
    static S: OnceLock<Scheduler> = OnceLock::new();
    S.get_or_init(|| {
        Scheduler::new(&SchedulerConfig {
            workers: 1,
            ..SchedulerConfig::default()
        })
        .unwrap()
    })
}

/// A real dead-letter queue resource (which keeps everything it gets).
fn dead_letter_queue() -> QueueHandle {
    let shared = Arc::new(QueueShared::default());
    let opts = QueueOptions {
        max_deliveries: 0,
        ttl_ms: 0,
        max_length: u64::MAX,
        ..QueueOptions::default()
    };
    let state = QueueState::new(
        format!("{NAME}.dlq").into(),
        2,
        opts,
        None,
        None,
        shared.clone(),
    );
    QueueHandle {
        tq: TaskQueue::new(state, &scheduler().handle()),
        shared,
        id: 2,
    }
}

struct ThreadWaker(std::thread::Thread);

impl Wake for ThreadWaker {
    fn wake(self: Arc<Self>) {
        self.0.unpark();
    }
}

/// Polls `fut` on this thread until it completes (10 s at most).
fn block_on<F: Future>(fut: F) -> F::Output {
    let waker = Waker::from(Arc::new(ThreadWaker(std::thread::current())));
    let mut cx = Context::from_waker(&waker);
    let mut fut = std::pin::pin!(fut);
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if let Poll::Ready(v) = fut.as_mut().poll(&mut cx) {
            return v;
        }
        assert!(
            Instant::now() < deadline,
            "a dead-letter queue task never ran"
        );
        std::thread::park_timeout(Duration::from_millis(10));
    }
}

fn on_dlq<R: Send + 'static>(
    dlq: &QueueHandle,
    f: impl FnOnce(&mut QueueState) -> R + Send + 'static,
) -> R {
    block_on(dlq.tq.submit(f)).expect("dead-letter queue task")
}

fn take_log(log: &Log) -> VecDeque<Attempt> {
    std::mem::take(&mut *log.lock().unwrap()).into()
}

fn ready_seqs(q: &QueueState, p: usize) -> Vec<u64> {
    q.ready[p].iter().map(|m| m.seq).collect()
}

macro_rules! ensure {
    ($cond:expr, $($arg:tt)+) => {
        if !$cond {
            return Err(format!($($arg)+));
        }
    };
}

// ---------------------------------------------------------------------------
// The model.

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum St {
    Ready,
    Delayed,
    InFlight,
    Acked,
    /// In the dead-letter queue.
    Dead(DeadReason),
    /// Deleted unconsumed (expired with `expired = "drop"`, or no
    /// dead-letter queue).
    Discarded(DeadReason),
    /// Taken by `take_ready` and not put back (moved to another queue).
    Moved,
}

#[derive(Debug)]
struct MMsg {
    priority: u8,
    enqueued: u64,
    expires: u64,
    deliveries: u32,
    not_before: u64,
    st: St,
}

impl MMsg {
    fn expired(&self, now: u64) -> bool {
        self.expires > 0 && now >= self.expires
    }
}

#[derive(Debug)]
struct MFlight {
    seq: u64,
    cid: u64,
    deadline: u64,
}

#[derive(Debug)]
struct MCons {
    /// Index in the harness's sinks.
    sink: usize,
    sink_id: u64,
    sub: String,
    cid: u64,
    prefetch: u32,
    attached: bool,
    inflight: u32,
    blocked: bool,
    /// Its `Subscription` was cancelled (the session let go of it before
    /// the queue's cancel task).
    unsubscribed: bool,
}

impl MCons {
    fn eligible(&self) -> bool {
        self.attached && !self.blocked && !self.unsubscribed && self.inflight < self.prefetch
    }
}

struct Model {
    opts: QueueOptions,
    has_dlq: bool,
    msgs: BTreeMap<u64, MMsg>,
    /// Delivery order: highest priority first, then lowest seq.
    ready: BTreeSet<(Reverse<u8>, u64)>,
    /// (not before, seq).
    delayed: BTreeSet<(u64, u64)>,
    inflight: BTreeMap<u64, MFlight>,
    /// Every consumer ever attached, in attach order.
    cons: Vec<MCons>,
    next_seq: u64,
    next_cid: u64,
    next_delivery: u64,
    last_scan: u64,
    stats: QueueCounters,
    /// Delivery id -> seq, for every delivery ever made.
    delivered: BTreeMap<u64, u64>,
    /// What the sequence exercised (summed over all cases and checked, so
    /// that the generator cannot quietly stop reaching a path).
    cov: BTreeMap<&'static str, u64>,
}

impl Model {
    fn new(opts: QueueOptions, has_dlq: bool) -> Model {
        Model {
            opts,
            has_dlq,
            msgs: BTreeMap::new(),
            ready: BTreeSet::new(),
            delayed: BTreeSet::new(),
            inflight: BTreeMap::new(),
            cons: Vec::new(),
            next_seq: 1,
            next_cid: 1,
            next_delivery: 1,
            last_scan: 0,
            stats: QueueCounters::default(),
            delivered: BTreeMap::new(),
            cov: BTreeMap::new(),
        }
    }

    fn hit(&mut self, what: &'static str) {
        *self.cov.entry(what).or_default() += 1;
    }

    fn held(&self) -> usize {
        self.ready.len() + self.delayed.len() + self.inflight.len()
    }

    /// Messages held in memory that carry an expiry.
    fn expiring(&self) -> usize {
        self.msgs
            .values()
            .filter(|m| m.expires > 0 && matches!(m.st, St::Ready | St::Delayed | St::InFlight))
            .count()
    }

    /// Whether the broker's ticker has to visit the queue.
    fn busy(&self) -> bool {
        !self.inflight.is_empty()
            || !self.delayed.is_empty()
            || self.expiring() > 0
            || self.cons.iter().any(|c| c.attached && c.blocked)
    }

    fn attached(&self, sink_id: u64, sub: &str) -> Option<usize> {
        self.cons
            .iter()
            .position(|c| c.attached && c.sink_id == sink_id && c.sub == sub)
    }

    fn cons_by_cid(&mut self, cid: u64) -> Option<&mut MCons> {
        self.cons.iter_mut().find(|c| c.attached && c.cid == cid)
    }

    fn in_flight_of(&self, cid: u64) -> Vec<u64> {
        self.inflight
            .iter()
            .filter(|(_, f)| f.cid == cid)
            .map(|(&id, _)| id)
            .collect()
    }

    fn make_ready(&mut self, seq: u64) {
        let m = self.msgs.get_mut(&seq).unwrap();
        m.st = St::Ready;
        m.not_before = 0;
        let p = m.priority;
        self.ready.insert((Reverse(p), seq));
        if self
            .ready
            .range((Reverse(p), seq + 1)..=(Reverse(p), u64::MAX))
            .next()
            .is_some()
        {
            self.hit("back ahead of younger messages");
        }
    }

    fn enqueue(&mut self, priority: u8, ttl: Option<u64>, now: u64) -> Result<u64, QueueError> {
        if self.held() as u64 >= self.opts.max_length {
            self.hit("enqueue refused: full");
            self.stats.refused += 1;
            return Err(QueueError::Full(self.opts.max_length));
        }
        // The publisher's TTL, capped by the queue's.
        let ttl = match (ttl.filter(|&t| t > 0), self.opts.ttl_ms) {
            (Some(a), 0) => a,
            (Some(a), b) => a.min(b),
            (None, b) => b,
        };
        let seq = self.next_seq;
        self.next_seq += 1;
        self.stats.enqueued += 1;
        self.msgs.insert(
            seq,
            MMsg {
                priority: priority.min(9),
                enqueued: now,
                expires: if ttl > 0 { now + ttl } else { 0 },
                deliveries: 0,
                not_before: 0,
                st: St::Ready,
            },
        );
        self.make_ready(seq);
        Ok(seq)
    }

    fn dead_letter(&mut self, seq: u64, reason: DeadReason) {
        let drop = reason == DeadReason::Expired && self.opts.expired == ExpiredPolicy::Drop;
        let m = self.msgs.get_mut(&seq).unwrap();
        if drop || !self.has_dlq {
            m.st = St::Discarded(reason);
            self.stats.discarded += 1;
            self.hit("discarded");
        } else {
            m.st = St::Dead(reason);
            self.stats.dead_lettered += 1;
            self.hit(match reason {
                DeadReason::MaxDeliveries => "dead-lettered: max-deliveries",
                DeadReason::Rejected => "dead-lettered: rejected",
                DeadReason::Expired => "dead-lettered: expired",
            });
        }
    }

    /// A delivery came back (nack, ack timeout, consumer gone).
    fn give_back(&mut self, seq: u64, delay: Option<u64>, now: u64) {
        self.stats.returned += 1;
        let deliveries = self.msgs[&seq].deliveries;
        if self.opts.max_deliveries > 0 && deliveries >= self.opts.max_deliveries {
            self.dead_letter(seq, DeadReason::MaxDeliveries);
            return;
        }
        // The backoff schedule by delivery count, the last step repeating.
        let delay = delay.unwrap_or_else(|| {
            let steps = &self.opts.backoff_ms;
            let i = (deliveries as usize).saturating_sub(1);
            steps.get(i).or(steps.last()).copied().unwrap_or(0)
        });
        if delay > 0 {
            self.hit("returned with a delay");
            let nb = now + delay;
            let m = self.msgs.get_mut(&seq).unwrap();
            m.st = St::Delayed;
            m.not_before = nb;
            self.delayed.insert((nb, seq));
        } else {
            self.make_ready(seq);
        }
    }

    fn return_all_of(&mut self, cid: u64, now: u64) {
        for id in self.in_flight_of(cid) {
            let f = self.inflight.remove(&id).unwrap();
            self.give_back(f.seq, Some(0), now);
        }
    }

    /// Takes the next ready message in delivery order, dead-lettering the
    /// expired ones ahead of it.
    fn pop_ready(&mut self, now: u64) -> Option<u64> {
        while let Some((_, seq)) = self.ready.pop_first() {
            if self.msgs[&seq].expired(now) {
                self.hit("expired at dispatch");
                self.dead_letter(seq, DeadReason::Expired);
                continue;
            }
            return Some(seq);
        }
        None
    }

    /// Replays a dispatch against the deliveries the sinks saw.
    fn dispatch(
        &mut self,
        log: &mut VecDeque<Attempt>,
        sinks: &[Arc<TestSink>],
        now: u64,
    ) -> Result<(), String> {
        if !self.cons.iter().any(|c| c.attached) {
            return Ok(());
        }
        let mut closed = false;
        loop {
            if !self.cons.iter().any(MCons::eligible) {
                break;
            }
            let top = self.ready.first().map(|k| k.0);
            if self.ready.last().map(|k| k.0) != top {
                self.hit("offer among several priorities");
            }
            let Some(seq) = self.pop_ready(now) else {
                break;
            };
            let Some(a) = log.pop_front() else {
                return Err(format!(
                    "a consumer has credit and seq {seq} is ready, but nothing was offered"
                ));
            };
            let ci = self
                .attached(a.sink, &a.sub)
                .ok_or_else(|| format!("{a:?} went to a consumer that is not attached"))?;
            let m = &self.msgs[&seq];
            ensure!(
                a.seq == seq,
                "{a:?}: the next ready message (priority first, then seq) is seq {seq} (p{})",
                m.priority
            );
            ensure!(
                self.cons[ci].eligible(),
                "{a:?} went to a consumer without credit or blocked: {:?}",
                self.cons[ci]
            );
            ensure!(
                a.deliveries == m.deliveries + 1,
                "{a:?}: its count should be {}",
                m.deliveries + 1
            );
            ensure!(
                !m.expired(now),
                "{a:?}: delivered at {now}, expired at {}",
                m.expires
            );
            ensure!(
                a.priority == m.priority
                    && a.enqueued_ms == m.enqueued
                    && a.expires_ms == m.expires
                    && a.not_before_ms == 0
                    && a.payload == payload(seq),
                "{a:?}: not the message enqueued as seq {seq}: {m:?}"
            );
            ensure!(
                a.id == self.next_delivery,
                "{a:?}: the delivery id should be {}",
                self.next_delivery
            );
            match a.outcome {
                Delivery::Queued => {
                    self.hit(if a.deliveries > 1 {
                        "redelivered"
                    } else {
                        "delivered"
                    });
                    ensure!(
                        !self.delivered.contains_key(&a.id),
                        "{a:?}: delivery id reused"
                    );
                    self.next_delivery += 1;
                    self.stats.delivered += 1;
                    self.delivered.insert(a.id, seq);
                    let m = self.msgs.get_mut(&seq).unwrap();
                    m.deliveries += 1;
                    m.st = St::InFlight;
                    let c = &mut self.cons[ci];
                    c.inflight += 1;
                    ensure!(c.inflight <= c.prefetch, "over prefetch: {c:?}");
                    let cid = c.cid;
                    self.inflight.insert(
                        a.id,
                        MFlight {
                            seq,
                            cid,
                            deadline: now + self.opts.ack_timeout_ms,
                        },
                    );
                }
                Delivery::Dropped | Delivery::Closed => {
                    self.hit(if a.outcome == Delivery::Closed {
                        "offer to a closed sink"
                    } else {
                        "offer to a full sink"
                    });
                    self.make_ready(seq);
                    self.cons[ci].blocked = true;
                    closed |= a.outcome == Delivery::Closed;
                }
            }
        }
        if closed {
            let gone: Vec<u64> = self
                .cons
                .iter()
                .filter(|c| c.attached && (c.unsubscribed || sinks[c.sink].is_closed()))
                .map(|c| c.cid)
                .collect();
            for &cid in &gone {
                self.cons_by_cid(cid).unwrap().attached = false;
            }
            for cid in gone {
                if !self.in_flight_of(cid).is_empty() {
                    self.hit("closed consumer's deliveries returned");
                }
                self.return_all_of(cid, now);
            }
            self.dispatch(log, sinks, now)?;
        }
        Ok(())
    }

    /// `take_ready`: the first `max` ready messages in delivery order
    /// (expired or not).
    fn take_ready(&mut self, max: usize) -> Vec<u64> {
        let mut out = Vec::new();
        while out.len() < max {
            let Some((_, seq)) = self.ready.pop_first() else {
                break;
            };
            self.msgs.get_mut(&seq).unwrap().st = St::Moved;
            out.push(seq);
        }
        out
    }

    /// Checks that every id is in flight to this consumer.
    fn owned(&self, sink_id: u64, sub: &str, ids: &[u64]) -> Result<usize, QueueError> {
        let ci = self
            .attached(sink_id, sub)
            .ok_or(QueueError::UnknownConsumer)?;
        let cid = self.cons[ci].cid;
        let unknown: Vec<u64> = ids
            .iter()
            .copied()
            .filter(|id| self.inflight.get(id).is_none_or(|f| f.cid != cid))
            .collect();
        if unknown.is_empty() {
            Ok(ci)
        } else {
            Err(QueueError::UnknownDelivery(unknown))
        }
    }

    /// Settles `ids` of consumer `ci` (validated); returns the acked seqs.
    fn settle(&mut self, ci: usize, ids: &[u64], how: How, now: u64) -> Vec<u64> {
        let mut acked = Vec::new();
        if let How::Touch(extend) = how {
            let deadline = now + extend.unwrap_or(self.opts.ack_timeout_ms);
            for id in ids {
                self.inflight.get_mut(id).unwrap().deadline = deadline;
            }
            return acked;
        }
        for id in ids {
            let Some(f) = self.inflight.remove(id) else {
                continue; // a repeated id
            };
            let c = &mut self.cons[ci];
            c.inflight -= 1;
            c.blocked = false;
            match how {
                How::Ack => {
                    self.msgs.get_mut(&f.seq).unwrap().st = St::Acked;
                    self.stats.acked += 1;
                    acked.push(f.seq);
                }
                How::Nack(delay) => self.give_back(f.seq, delay, now),
                How::Reject => self.dead_letter(f.seq, DeadReason::Rejected),
                How::Touch(_) => unreachable!(),
            }
        }
        acked
    }

    /// Deadlines, as `tick` runs them (before its dispatch).
    fn tick(&mut self, now: u64) {
        for c in &mut self.cons {
            c.blocked = false;
        }
        let late: Vec<u64> = self
            .inflight
            .iter()
            .filter(|(_, f)| f.deadline <= now)
            .map(|(&id, _)| id)
            .collect();
        for id in late {
            self.hit("ack timeout");
            let f = self.inflight.remove(&id).unwrap();
            if let Some(c) = self.cons_by_cid(f.cid) {
                c.inflight -= 1;
            }
            self.give_back(f.seq, Some(0), now);
        }
        while let Some(&(nb, seq)) = self.delayed.first() {
            if nb > now {
                break;
            }
            self.delayed.pop_first();
            self.hit("delay over");
            self.make_ready(seq);
        }
        if self.expiring() > 0 && now >= self.last_scan + SCAN_EVERY {
            self.last_scan = now;
            let expired: Vec<(Reverse<u8>, u64)> = self
                .ready
                .iter()
                .filter(|(_, seq)| self.msgs[seq].expired(now))
                .copied()
                .collect();
            for k in expired {
                self.hit("expired by the scan");
                self.ready.remove(&k);
                self.dead_letter(k.1, DeadReason::Expired);
            }
        }
    }
}

// ---------------------------------------------------------------------------
// Random sequences.

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum How {
    Ack,
    Nack(Option<u64>),
    Reject,
    Touch(Option<u64>),
}

#[derive(Debug, Clone)]
enum Op {
    Enqueue {
        priority: u8,
        ttl: Option<u64>,
    },
    /// mode 0-1: a new sink; 2: another consumer on a live sink; 3: the key
    /// of a cancelled consumer again; 4: an attached consumer's key again
    /// (refused as a duplicate).
    Consume {
        prefetch: u32,
        pick: u8,
        mode: u8,
    },
    Cancel {
        pick: u8,
    },
    /// `Subscription::cancel` of an attached consumer (as a session does
    /// before the queue's cancel task), then maybe that task.
    Unsubscribe {
        pick: u8,
        cancel: bool,
    },
    Disconnect {
        pick: u8,
    },
    Full {
        pick: u8,
        on: bool,
    },
    /// Some of a consumer's own in-flight ids (`mask` picks which).
    Settle {
        pick: u8,
        how: How,
        mask: u8,
        repeat: bool,
    },
    /// Ids that are not the consumer's (kind 0: another's in flight; 1:
    /// settled already; 2: never issued; 3: from a cancelled consumer),
    /// maybe with one of its own: refused, nothing changes.
    Wrong {
        pick: u8,
        how: How,
        kind: u8,
        with_own: bool,
    },
    /// Advance the clock, then tick as the broker's ticker would (only if
    /// the queue says it needs it).
    Advance {
        ms: u64,
    },
    /// `take_ready(max)`: the messages wait outside (a redrive moving
    /// them) until `PutBack`.
    Take {
        max: u8,
    },
    /// `put_back` of the messages outside that `mask` picks (those the
    /// redrive could not place); the rest have left the queue.
    PutBack {
        mask: u8,
    },
}

#[derive(Debug, Clone)]
struct Cfg {
    ack_timeout_ms: u64,
    max_deliveries: u32,
    backoff_ms: Vec<u64>,
    ttl_ms: u64,
    drop_expired: bool,
    max_length: u64,
    dlq: bool,
}

impl Cfg {
    fn options(&self) -> QueueOptions {
        QueueOptions {
            ack_timeout_ms: self.ack_timeout_ms,
            max_deliveries: self.max_deliveries,
            dead_letter: String::new(),
            backoff_ms: self.backoff_ms.clone(),
            ttl_ms: self.ttl_ms,
            expired: if self.drop_expired {
                ExpiredPolicy::Drop
            } else {
                ExpiredPolicy::DeadLetter
            },
            max_length: self.max_length,
            memory_window: 10_000,
        }
    }
}

fn how_strategy() -> impl Strategy<Value = How> {
    prop_oneof![
        8 => Just(How::Ack),
        2 => Just(How::Nack(None)),
        1 => Just(How::Nack(Some(0))),
        2 => (1u64..3000).prop_map(|d| How::Nack(Some(d))),
        2 => Just(How::Reject),
        1 => Just(How::Touch(None)),
        1 => (0u64..5000).prop_map(|d| How::Touch(Some(d))),
    ]
}

fn op_strategy() -> impl Strategy<Value = Op> {
    let ttl = prop_oneof![
        6 => Just(None),
        1 => Just(Some(0u64)),
        3 => (200u64..6000).prop_map(Some),
    ];
    prop_oneof![
        24 => (prop_oneof![20 => 0u8..10, 1 => 10u8..=255], ttl)
            .prop_map(|(priority, ttl)| Op::Enqueue { priority, ttl }),
        6 => (1u32..=4, any::<u8>(), 0u8..5)
            .prop_map(|(prefetch, pick, mode)| Op::Consume { prefetch, pick, mode }),
        3 => any::<u8>().prop_map(|pick| Op::Cancel { pick }),
        1 => (any::<u8>(), any::<bool>()).prop_map(|(pick, cancel)| Op::Unsubscribe { pick, cancel }),
        2 => any::<u8>().prop_map(|pick| Op::Disconnect { pick }),
        3 => (any::<u8>(), any::<bool>()).prop_map(|(pick, on)| Op::Full { pick, on }),
        30 => (any::<u8>(), how_strategy(), any::<u8>(), prop::bool::weighted(0.1))
            .prop_map(|(pick, how, mask, repeat)| Op::Settle { pick, how, mask, repeat }),
        5 => (any::<u8>(), how_strategy(), 0u8..4, any::<bool>())
            .prop_map(|(pick, how, kind, with_own)| Op::Wrong { pick, how, kind, with_own }),
        20 => prop_oneof![3 => 0u64..300, 3 => 300u64..2000, 1 => 2000u64..10_000]
            .prop_map(|ms| Op::Advance { ms }),
        1 => (1u8..6).prop_map(|max| Op::Take { max }),
        1 => prop_oneof![Just(0u8), Just(0xff), any::<u8>()].prop_map(|mask| Op::PutBack { mask }),
    ]
}

fn cfg_strategy() -> impl Strategy<Value = Cfg> {
    (
        100u64..3000,
        0u32..=4,
        prop_oneof![
            Just(vec![]),
            Just(vec![200u64]),
            Just(vec![100u64, 1000, 5000]),
        ],
        prop_oneof![3 => Just(0u64), 1 => 1000u64..8000],
        prop::bool::weighted(0.3),
        prop_oneof![3 => Just(1_000_000u64), 1 => 3u64..25],
        prop::bool::weighted(0.85),
    )
        .prop_map(
            |(
                ack_timeout_ms,
                max_deliveries,
                backoff_ms,
                ttl_ms,
                drop_expired,
                max_length,
                dlq,
            )| {
                Cfg {
                    ack_timeout_ms,
                    max_deliveries,
                    backoff_ms,
                    ttl_ms,
                    drop_expired,
                    max_length,
                    dlq,
                }
            },
        )
}

// ---------------------------------------------------------------------------
// The harness: the queue, its model, and the checks between them.

struct Harness {
    q: QueueState,
    shared: Arc<QueueShared>,
    dlq: Option<QueueHandle>,
    log: Log,
    sinks: Vec<Arc<TestSink>>,
    m: Model,
    now: u64,
    /// Seqs found in the dead-letter queue so far.
    dlq_seen: BTreeSet<u64>,
    /// Times each seq was acked, from the ids of successful acks.
    acks: BTreeMap<u64, u32>,
    /// Messages taken out by `take_ready`, not yet put back.
    outside: Vec<StoredMessage>,
    /// Each model consumer's subscription.
    subs: Vec<Subscription>,
}

impl Harness {
    fn new(cfg: &Cfg) -> Harness {
        let shared = Arc::new(QueueShared::default());
        let dlq = cfg.dlq.then(dead_letter_queue);
        let q = QueueState::new(
            NAME.into(),
            1,
            cfg.options(),
            None,
            dlq.clone(),
            shared.clone(),
        );
        Harness {
            q,
            shared,
            dlq,
            log: Log::default(),
            sinks: Vec::new(),
            m: Model::new(cfg.options(), cfg.dlq),
            now: T0,
            dlq_seen: BTreeSet::new(),
            acks: BTreeMap::new(),
            outside: Vec::new(),
            subs: Vec::new(),
        }
    }

    /// Replays the dispatch that followed a task; every offer must be
    /// accounted for.
    fn replay_dispatch(&mut self) -> Result<(), String> {
        let mut log = take_log(&self.log);
        self.m.dispatch(&mut log, &self.sinks, self.now)?;
        ensure!(log.is_empty(), "offers the model did not expect: {log:?}");
        Ok(())
    }

    fn nothing_offered(&self) -> Result<(), String> {
        let log = take_log(&self.log);
        ensure!(log.is_empty(), "a refused task delivered: {log:?}");
        Ok(())
    }

    fn enqueue(&mut self, priority: u8, ttl: Option<u64>) -> Result<(), String> {
        let got = self
            .q
            .enqueue(incoming(self.m.next_seq, priority, ttl), self.now)
            .map(|(seq, durable)| {
                assert!(durable.is_none(), "no writer, no durable");
                seq
            });
        let want = self.m.enqueue(priority, ttl, self.now);
        ensure!(
            got == want,
            "enqueue p{priority} ttl {ttl:?}: got {got:?}, model {want:?}"
        );
        match got {
            Ok(_) => self.replay_dispatch(),
            Err(_) => self.nothing_offered(),
        }
    }

    fn consume(&mut self, sink: usize, sub: String, prefetch: u32) -> Result<(), String> {
        let sink_id = self.sinks[sink].id;
        let subscription = subscription(&self.sinks[sink], &sub);
        let got = self.q.consume(subscription.clone(), prefetch, self.now);
        let want = match self.m.attached(sink_id, &sub) {
            Some(_) => Err(QueueError::DuplicateConsumer),
            None => Ok(()),
        };
        ensure!(
            got == want,
            "consume {sink_id}/{sub}: got {got:?}, model {want:?}"
        );
        if got.is_err() {
            self.m.hit("consume refused: duplicate");
            return self.nothing_offered();
        }
        self.m.cons.push(MCons {
            sink,
            sink_id,
            sub,
            cid: self.m.next_cid,
            prefetch,
            attached: true,
            inflight: 0,
            blocked: false,
            unsubscribed: false,
        });
        self.subs.push(subscription);
        self.m.next_cid += 1;
        self.replay_dispatch()
    }

    fn new_sink(&mut self) -> usize {
        self.sinks.push(TestSink::new(&self.log));
        self.sinks.len() - 1
    }

    fn cancel(&mut self, sink_id: u64, sub: &str) -> Result<(), String> {
        let got = self.q.cancel(sink_id, sub, self.now);
        let ci = self.m.attached(sink_id, sub);
        let want = ci.map(|_| ()).ok_or(QueueError::UnknownConsumer);
        ensure!(
            got == want,
            "cancel {sink_id}/{sub}: got {got:?}, model {want:?}"
        );
        let Some(ci) = ci else {
            return self.nothing_offered();
        };
        self.m.cons[ci].attached = false;
        let cid = self.m.cons[ci].cid;
        self.m.return_all_of(cid, self.now);
        self.replay_dispatch()
    }

    fn settle(&mut self, sink_id: u64, sub: &str, ids: &[u64], how: How) -> Result<(), String> {
        let now = self.now;
        let got = match how {
            How::Ack => self.q.ack(sink_id, sub, ids, now).map(|d| {
                assert!(d.is_none(), "no writer, no durable");
            }),
            How::Nack(delay) => self.q.nack(sink_id, sub, ids, delay, now),
            How::Reject => self.q.reject(sink_id, sub, ids, now),
            How::Touch(extend) => self.q.touch(sink_id, sub, ids, extend, now),
        };
        let want = self.m.owned(sink_id, sub, ids);
        self.m.hit(match &want {
            Ok(_) => match how {
                How::Ack => "ack",
                How::Nack(_) => "nack",
                How::Reject => "reject",
                How::Touch(_) => "touch",
            },
            Err(QueueError::UnknownConsumer) => "settle refused: unknown consumer",
            Err(_) => "settle refused: unknown delivery",
        });
        ensure!(
            got == want.clone().map(|_| ()),
            "{how:?} {ids:?} by {sink_id}/{sub}: got {got:?}, model {want:?}"
        );
        let Ok(ci) = want else {
            return self.nothing_offered();
        };
        if how == How::Ack {
            let mut distinct = ids.to_vec();
            distinct.sort_unstable();
            distinct.dedup();
            for id in distinct {
                *self.acks.entry(self.m.delivered[&id]).or_default() += 1;
            }
        }
        let acked = self.m.settle(ci, ids, how, now);
        for seq in acked {
            ensure!(
                self.acks[&seq] == 1,
                "seq {seq} acked {} times",
                self.acks[&seq]
            );
        }
        if matches!(how, How::Touch(_)) {
            // Touch dispatches nothing.
            return self.nothing_offered();
        }
        self.replay_dispatch()
    }

    fn advance(&mut self, ms: u64) -> Result<(), String> {
        self.now += ms;
        // As the broker's ticker: only queues that ask for it.
        if self.shared.needs_tick.load(Ordering::Acquire) {
            self.q.tick(self.now);
            self.m.tick(self.now);
            self.replay_dispatch()
        } else {
            self.nothing_offered()
        }
    }

    fn live_sinks(&self) -> Vec<usize> {
        (0..self.sinks.len())
            .filter(|&s| !self.sinks[s].is_closed())
            .collect()
    }

    /// Attached consumers whose sink is still connected.
    fn active(&self) -> Vec<usize> {
        (0..self.m.cons.len())
            .filter(|&ci| self.m.cons[ci].attached && !self.sinks[self.m.cons[ci].sink].is_closed())
            .collect()
    }

    fn step(&mut self, op: &Op) -> Result<(), String> {
        match *op {
            Op::Enqueue { priority, ttl } => self.enqueue(priority, ttl)?,
            Op::Consume {
                prefetch,
                pick,
                mode,
            } => {
                let pick = usize::from(pick);
                let live = self.live_sinks();
                let cancelled: Vec<usize> = (0..self.m.cons.len())
                    .filter(|&ci| {
                        let c = &self.m.cons[ci];
                        !c.attached
                            && !self.sinks[c.sink].is_closed()
                            && self.m.attached(c.sink_id, &c.sub).is_none()
                    })
                    .collect();
                let attached: Vec<usize> = (0..self.m.cons.len())
                    .filter(|&ci| self.m.cons[ci].attached)
                    .collect();
                let n = self.m.cons.len();
                match mode {
                    2 if !live.is_empty() => {
                        let sink = live[pick % live.len()];
                        self.consume(sink, format!("c{n}"), prefetch)?;
                    }
                    3 if !cancelled.is_empty() => {
                        let c = &self.m.cons[cancelled[pick % cancelled.len()]];
                        let (sink, sub) = (c.sink, c.sub.clone());
                        self.consume(sink, sub, prefetch)?;
                    }
                    4 if !attached.is_empty() => {
                        let c = &self.m.cons[attached[pick % attached.len()]];
                        let (sink, sub) = (c.sink, c.sub.clone());
                        self.consume(sink, sub, prefetch)?;
                    }
                    _ => {
                        let sink = self.new_sink();
                        self.consume(sink, format!("c{n}"), prefetch)?;
                    }
                }
            }
            Op::Cancel { pick } => {
                if !self.m.cons.is_empty() {
                    // Attached or not (then refused).
                    let c = &self.m.cons[usize::from(pick) % self.m.cons.len()];
                    let (sink_id, sub) = (c.sink_id, c.sub.clone());
                    self.cancel(sink_id, &sub)?;
                }
            }
            Op::Unsubscribe { pick, cancel } => {
                let attached: Vec<usize> = (0..self.m.cons.len())
                    .filter(|&ci| self.m.cons[ci].attached)
                    .collect();
                if !attached.is_empty() {
                    let ci = attached[usize::from(pick) % attached.len()];
                    self.subs[ci].cancel();
                    self.m.cons[ci].unsubscribed = true;
                    self.m.hit("unsubscribed");
                    if cancel {
                        let (sink_id, sub) = (self.m.cons[ci].sink_id, self.m.cons[ci].sub.clone());
                        self.cancel(sink_id, &sub)?;
                    }
                }
            }
            Op::Disconnect { pick } => {
                let live = self.live_sinks();
                if !live.is_empty() {
                    let s = live[usize::from(pick) % live.len()];
                    self.sinks[s].closed.store(true, Ordering::Relaxed);
                }
            }
            Op::Full { pick, on } => {
                if !self.sinks.is_empty() {
                    let s = usize::from(pick) % self.sinks.len();
                    self.sinks[s].full.store(on, Ordering::Relaxed);
                }
            }
            Op::Settle {
                pick,
                how,
                mask,
                repeat,
            } => {
                let with_some: Vec<usize> = self
                    .active()
                    .into_iter()
                    .filter(|&ci| self.m.cons[ci].inflight > 0)
                    .collect();
                if !with_some.is_empty() {
                    let c = &self.m.cons[with_some[usize::from(pick) % with_some.len()]];
                    let mine = self.m.in_flight_of(c.cid);
                    let mut ids: Vec<u64> = mine
                        .iter()
                        .enumerate()
                        .filter(|(i, _)| mask & (1 << (i % 8)) != 0)
                        .map(|(_, &id)| id)
                        .collect();
                    if ids.is_empty() {
                        ids.push(mine[usize::from(mask) % mine.len()]);
                    }
                    if mask & 0x80 != 0 {
                        ids.reverse();
                    }
                    if repeat {
                        ids.push(ids[0]);
                    }
                    let (sink_id, sub) = (c.sink_id, c.sub.clone());
                    self.settle(sink_id, &sub, &ids, how)?;
                }
            }
            Op::Wrong {
                pick,
                how,
                kind,
                with_own,
            } => self.wrong(usize::from(pick), how, kind, with_own)?,
            Op::Advance { ms } => self.advance(ms)?,
            Op::Take { max } => self.take(usize::from(max))?,
            Op::PutBack { mask } => self.put_back(mask)?,
        }
        self.check()
    }

    /// Takes ready messages out (to move them elsewhere).
    fn take(&mut self, max: usize) -> Result<(), String> {
        let taken = self.q.take_ready(max);
        let want = self.m.take_ready(max);
        let got: Vec<u64> = taken.iter().map(|(x, _)| x.seq).collect();
        ensure!(
            got == want,
            "take_ready({max}): queue {got:?}, model {want:?}"
        );
        for (x, removal) in taken {
            let mm = &self.m.msgs[&x.seq];
            ensure!(
                removal.is_empty()
                    && x.deliveries == mm.deliveries
                    && x.priority == mm.priority
                    && x.enqueued_ms == mm.enqueued
                    && x.expires_ms == mm.expires
                    && x.not_before_ms == 0
                    && x.payload == payload(x.seq),
                "taken {x:?}, model {mm:?}"
            );
            self.outside.push(x);
        }
        self.nothing_offered()
    }

    /// Puts back some of the messages taken out; the others are gone.
    fn put_back(&mut self, mask: u8) -> Result<(), String> {
        let mut back = Vec::new();
        for (i, x) in std::mem::take(&mut self.outside).into_iter().enumerate() {
            if mask & (1 << (i % 8)) != 0 {
                self.m.hit("put back");
                back.push(x);
            } else {
                self.m.hit("moved away");
            }
        }
        for x in &back {
            self.m.make_ready(x.seq);
        }
        self.q.put_back(back, self.now);
        // Messages that are ready again go to consumers with credit.
        self.replay_dispatch()
    }

    /// Settles ids that are not the consumer's: refused, nothing changes.
    fn wrong(&mut self, pick: usize, how: How, kind: u8, with_own: bool) -> Result<(), String> {
        let active = self.active();
        let cancelled: Vec<usize> = (0..self.m.cons.len())
            .filter(|&ci| {
                let c = &self.m.cons[ci];
                !c.attached && self.m.attached(c.sink_id, &c.sub).is_none()
            })
            .collect();
        let (ci, expect_unknown_consumer) = if kind == 3 && !cancelled.is_empty() {
            (cancelled[pick % cancelled.len()], true)
        } else if !active.is_empty() {
            (active[pick % active.len()], false)
        } else {
            return Ok(());
        };
        let (sink_id, sub, cid) = {
            let c = &self.m.cons[ci];
            (c.sink_id, c.sub.clone(), c.cid)
        };
        let others: Vec<u64> = self
            .m
            .inflight
            .iter()
            .filter(|(_, f)| f.cid != cid)
            .map(|(&id, _)| id)
            .collect();
        let settled: Vec<u64> = self
            .m
            .delivered
            .keys()
            .copied()
            .filter(|id| !self.m.inflight.contains_key(id))
            .collect();
        let foreign = match kind {
            0 if !others.is_empty() => others[pick % others.len()],
            1 if !settled.is_empty() => settled[pick % settled.len()],
            3 if expect_unknown_consumer && !self.m.delivered.is_empty() => {
                // Whatever it had, it has no more.
                let ids: Vec<u64> = self.m.delivered.keys().copied().collect();
                ids[pick % ids.len()]
            }
            _ => self.m.next_delivery + (pick as u64 % 3),
        };
        let mut ids = vec![foreign];
        if with_own {
            if let Some(&own) = self.m.in_flight_of(cid).first() {
                if pick % 2 == 0 {
                    ids.insert(0, own);
                } else {
                    ids.push(own);
                }
            }
        }
        let before = self.q.info();
        let want = if expect_unknown_consumer {
            Err(QueueError::UnknownConsumer)
        } else {
            Err(QueueError::UnknownDelivery(vec![foreign]))
        };
        ensure!(
            self.m.owned(sink_id, &sub, &ids).map(|_| ()) == want,
            "test bug: {ids:?} are not foreign to {sink_id}/{sub}"
        );
        self.settle(sink_id, &sub, &ids, how)?;
        ensure!(
            self.q.info() == before,
            "a refused {how:?} changed the queue"
        );
        Ok(())
    }

    /// Compares the queue with the model, and the dead-letter queue with
    /// what the model dead-lettered.
    fn check(&mut self) -> Result<(), String> {
        let (q, m) = (&self.q, &self.m);
        // Ready: per priority, oldest first.
        for p in 0..PRIORITIES {
            let got = ready_seqs(q, p);
            let want: Vec<u64> = m
                .ready
                .iter()
                .filter(|(r, _)| usize::from(r.0) == p)
                .map(|&(_, s)| s)
                .collect();
            ensure!(got == want, "ready p{p}: queue {got:?}, model {want:?}");
            for x in &q.ready[p] {
                let mm = &m.msgs[&x.seq];
                ensure!(
                    usize::from(x.priority) == p
                        && x.enqueued_ms == mm.enqueued
                        && x.deliveries == mm.deliveries
                        && x.expires_ms == mm.expires
                        && x.not_before_ms == 0,
                    "ready {x:?}, model {mm:?}"
                );
            }
        }
        ensure!(
            q.ready_len == m.ready.len(),
            "ready_len {} vs {}",
            q.ready_len,
            m.ready.len()
        );
        // Delayed.
        let got: Vec<(u64, u64)> = q.delayed.keys().copied().collect();
        let want: Vec<(u64, u64)> = m.delayed.iter().copied().collect();
        ensure!(got == want, "delayed: queue {got:?}, model {want:?}");
        for (&(nb, seq), x) in &q.delayed {
            let mm = &m.msgs[&seq];
            ensure!(
                x.seq == seq && x.not_before_ms == nb && x.deliveries == mm.deliveries,
                "delayed {x:?}, model {mm:?}"
            );
        }
        // In flight.
        let got: BTreeMap<u64, (u64, u64, u64, u32)> = q
            .inflight
            .iter()
            .map(|(&id, f)| (id, (f.msg.seq, f.consumer, f.deadline_ms, f.msg.deliveries)))
            .collect();
        let want: BTreeMap<u64, (u64, u64, u64, u32)> = m
            .inflight
            .iter()
            .map(|(&id, f)| (id, (f.seq, f.cid, f.deadline, m.msgs[&f.seq].deliveries)))
            .collect();
        ensure!(
            got == want,
            "in flight (id: seq, consumer, deadline, count): queue {got:?}, model {want:?}"
        );
        let mut seqs: Vec<u64> = q.inflight.values().map(|f| f.msg.seq).collect();
        seqs.sort_unstable();
        let n = seqs.len();
        seqs.dedup();
        ensure!(seqs.len() == n, "a message is in flight twice: {got:?}");
        // Consumers.
        let got: Vec<(u64, u64, String, u32, u32, bool)> = q
            .consumers
            .iter()
            .map(|c| {
                let id = c.sub.id.to_string();
                (
                    c.cid,
                    c.sub.sink.id(),
                    id,
                    c.prefetch,
                    c.inflight,
                    c.blocked,
                )
            })
            .collect();
        let want: Vec<(u64, u64, String, u32, u32, bool)> = m
            .cons
            .iter()
            .filter(|c| c.attached)
            .map(|c| {
                (
                    c.cid,
                    c.sink_id,
                    c.sub.clone(),
                    c.prefetch,
                    c.inflight,
                    c.blocked,
                )
            })
            .collect();
        ensure!(
            got == want,
            "consumers (cid, sink, sub, prefetch, in flight, blocked): queue {got:?}, model {want:?}"
        );
        for c in &q.consumers {
            let n = q.inflight.values().filter(|f| f.consumer == c.cid).count();
            ensure!(
                n as u32 == c.inflight && c.inflight <= c.prefetch,
                "consumer {} has {n} in flight, counts {}, prefetch {}",
                c.cid,
                c.inflight,
                c.prefetch
            );
        }
        // Numbers.
        let info = q.info();
        ensure!(
            info.depth == (m.ready.len() + m.delayed.len()) as u64
                && info.ready == m.ready.len() as u64
                && info.delayed == m.delayed.len() as u64
                && info.on_disk == 0
                && info.in_flight == m.inflight.len() as u64
                && info.consumers == m.cons.iter().filter(|c| c.attached).count() as u64,
            "info {info:?}; model ready {} delayed {} in flight {}",
            m.ready.len(),
            m.delayed.len(),
            m.inflight.len()
        );
        // `moved` counts what take_ready took and put_back did not return.
        let mut want = m.stats;
        want.moved = m.msgs.values().filter(|mm| mm.st == St::Moved).count() as u64;
        ensure!(
            info.stats == want,
            "stats {:?}, model {:?}",
            info.stats,
            want
        );
        let (mut acked, mut dead, mut discarded, mut held, mut moved) = (0, 0, 0, 0, 0);
        for mm in m.msgs.values() {
            match mm.st {
                St::Acked => acked += 1,
                St::Dead(_) => dead += 1,
                St::Discarded(_) => discarded += 1,
                St::Moved => moved += 1,
                St::Ready | St::Delayed | St::InFlight => held += 1,
            }
        }
        let s = info.stats;
        ensure!(s.moved == moved, "moved {} vs model {moved}", s.moved);
        ensure!(
            s.acked + s.dead_lettered + s.discarded + moved + info.depth + info.in_flight
                == s.enqueued,
            "messages lost or invented: {info:?}, moved away {moved}"
        );
        ensure!(
            acked == s.acked
                && dead == s.dead_lettered
                && discarded == s.discarded
                && held == info.depth + info.in_flight,
            "model states acked {acked} dead {dead} discarded {discarded} held {held}; {info:?}"
        );
        ensure!(
            q.expiring == m.expiring(),
            "expiring {} vs {}",
            q.expiring,
            m.expiring()
        );
        // No stall: a consumer that may take a message never waits while
        // one is ready.
        let idle: Vec<u64> = q
            .consumers
            .iter()
            .filter(|c| !c.blocked && c.inflight < c.prefetch && !c.sub.is_cancelled())
            .map(|c| c.cid)
            .collect();
        ensure!(
            q.ready_len == 0 || idle.is_empty(),
            "consumers {idle:?} have credit but ready messages wait: {:?}",
            (0..PRIORITIES)
                .rev()
                .map(|p| ready_seqs(q, p))
                .collect::<Vec<_>>()
        );
        let needs_tick = self.shared.needs_tick.load(Ordering::Acquire);
        ensure!(
            needs_tick == m.busy(),
            "needs_tick {needs_tick}, model busy {}",
            m.busy()
        );
        // The dead-letter queue: exactly the model's dead-lettered set.
        if let Some(dlq) = &self.dlq {
            let arrived = on_dlq(dlq, |d| d.take_ready(usize::MAX));
            for (x, _) in arrived {
                let h = &x.headers;
                ensure!(
                    h.get(DEAD_LETTER_FROM).map(String::as_str) == Some(NAME),
                    "dead-lettered without its origin: {x:?}"
                );
                let seq: u64 = h
                    .get(DEAD_LETTER_SEQ)
                    .and_then(|s| s.parse().ok())
                    .ok_or_else(|| format!("dead-lettered without a seq: {x:?}"))?;
                let mm = m
                    .msgs
                    .get(&seq)
                    .ok_or_else(|| format!("invented dead letter: {x:?}"))?;
                let St::Dead(reason) = mm.st else {
                    return Err(format!("seq {seq} dead-lettered, model: {mm:?}; {x:?}"));
                };
                ensure!(self.dlq_seen.insert(seq), "seq {seq} dead-lettered twice");
                ensure!(
                    h.get(DEAD_LETTER_REASON).map(String::as_str) == Some(reason.as_str()),
                    "seq {seq} dead-lettered as {:?}, model: {reason:?}",
                    h.get(DEAD_LETTER_REASON)
                );
                ensure!(
                    h.get(DEAD_LETTER_DELIVERIES) == Some(&mm.deliveries.to_string())
                        && h.get("n") == Some(&seq.to_string())
                        && x.payload == payload(seq)
                        && x.priority == mm.priority
                        && x.enqueued_ms == mm.enqueued
                        && x.expires_ms == 0,
                    "seq {seq} dead-lettered altered: {x:?}, model {mm:?}"
                );
            }
            ensure!(
                self.dlq_seen.len() as u64 == dead,
                "the dead-letter queue got {} messages, the model dead-lettered {dead}",
                self.dlq_seen.len()
            );
            let dinfo = on_dlq(dlq, |d| d.info());
            ensure!(
                dinfo.stats.enqueued == dead && dinfo.depth == 0,
                "dead-letter queue {dinfo:?}, model dead-lettered {dead}"
            );
        }
        Ok(())
    }

    /// Everything left is consumed: every seq ends acked, dead-lettered or
    /// discarded.
    fn drain(&mut self) -> Result<(), String> {
        // What a redrive still holds has moved away.
        self.put_back(0)?;
        for s in &self.sinks {
            s.full.store(false, Ordering::Relaxed);
        }
        for ci in 0..self.m.cons.len() {
            if self.m.cons[ci].attached {
                let (sink_id, sub) = (self.m.cons[ci].sink_id, self.m.cons[ci].sub.clone());
                self.cancel(sink_id, &sub)?;
                self.check()?;
            }
        }
        let sink = self.new_sink();
        let sink_id = self.sinks[sink].id;
        self.consume(sink, "drain".into(), 10_000)?;
        self.check()?;
        for _ in 0..20 {
            if self.m.held() == 0 {
                break;
            }
            let ci = self.m.attached(sink_id, "drain").unwrap();
            let ids = self.m.in_flight_of(self.m.cons[ci].cid);
            if !ids.is_empty() {
                self.settle(sink_id, "drain", &ids, How::Ack)?;
                self.check()?;
            }
            // Past every delay, ack timeout and TTL.
            self.advance(60_000)?;
            self.check()?;
        }
        let info = self.q.info();
        ensure!(
            self.m.held() == 0 && info.depth == 0 && info.in_flight == 0,
            "the queue does not drain: {info:?}, model holds {}",
            self.m.held()
        );
        let s = info.stats;
        let moved = self.m.msgs.values().filter(|mm| mm.st == St::Moved).count() as u64;
        ensure!(
            s.acked + s.dead_lettered + s.discarded + moved == s.enqueued,
            "totals: {s:?}, moved away {moved}"
        );
        ensure!(
            s.enqueued == self.m.msgs.len() as u64,
            "enqueued {} vs {}",
            s.enqueued,
            self.m.msgs.len()
        );
        for (&seq, mm) in &self.m.msgs {
            match mm.st {
                St::Acked => ensure!(self.acks.get(&seq) == Some(&1), "seq {seq} acks"),
                St::Dead(_) => ensure!(self.dlq_seen.contains(&seq), "seq {seq} not in the DLQ"),
                St::Discarded(_) | St::Moved => {
                    ensure!(
                        !self.dlq_seen.contains(&seq),
                        "seq {seq} {:?} but in the DLQ",
                        mm.st
                    );
                }
                st => return Err(format!("seq {seq} still {st:?}")),
            }
            if !matches!(mm.st, St::Acked) {
                ensure!(
                    !self.acks.contains_key(&seq),
                    "seq {seq} acked and {:?}",
                    mm.st
                );
            }
        }
        Ok(())
    }
}

static COVERAGE: Mutex<BTreeMap<&str, u64>> = Mutex::new(BTreeMap::new());

fn run_case(cfg: &Cfg, ops: &[Op]) -> Result<(), String> {
    let mut h = Harness::new(cfg);
    for (i, op) in ops.iter().enumerate() {
        h.step(op)
            .map_err(|e| format!("step {i} ({op:?}) at {}: {e}", h.now))?;
    }
    h.drain().map_err(|e| format!("drain at {}: {e}", h.now))?;
    let mut cov = COVERAGE.lock().unwrap();
    for (k, n) in std::mem::take(&mut h.m.cov) {
        *cov.entry(k).or_default() += n;
    }
    Ok(())
}

#[test]
fn random_sequences_match_the_model() {
    let cases = std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(300);
    let config = ProptestConfig {
        cases,
        failure_persistence: None,
        ..ProptestConfig::default()
    };
    let mut runner = TestRunner::new(config);
    let strategy = (
        cfg_strategy(),
        prop::collection::vec(op_strategy(), 1..=200),
    );
    let result = runner.run(&strategy, |(cfg, ops)| {
        run_case(&cfg, &ops).map_err(TestCaseError::fail)
    });
    match result {
        Ok(()) => {}
        Err(TestError::Fail(reason, (cfg, ops))) => {
            panic!("{reason}\nminimal case:\n{cfg:#?}\n{ops:#?}")
        }
        Err(e) => panic!("{e}"),
    }
    let cov = COVERAGE.lock().unwrap();
    println!("{cases} sequences exercised: {cov:#?}");
    if cases >= 100 {
        for what in [
            "delivered",
            "redelivered",
            "offer among several priorities",
            "offer to a full sink",
            "offer to a closed sink",
            "closed consumer's deliveries returned",
            "back ahead of younger messages",
            "ack",
            "nack",
            "reject",
            "touch",
            "ack timeout",
            "returned with a delay",
            "delay over",
            "expired at dispatch",
            "expired by the scan",
            "dead-lettered: max-deliveries",
            "dead-lettered: rejected",
            "dead-lettered: expired",
            "discarded",
            "enqueue refused: full",
            "settle refused: unknown delivery",
            "settle refused: unknown consumer",
            "consume refused: duplicate",
            "put back",
            "moved away",
            "unsubscribed",
        ] {
            let n = cov.get(what).copied().unwrap_or(0);
            assert!(
                n >= 10,
                "the random sequences reached {what:?} only {n} times"
            );
        }
    }
}

// ---------------------------------------------------------------------------
// Focused tests.

fn plain_queue(opts: QueueOptions) -> QueueState {
    QueueState::new(NAME.into(), 1, opts, None, None, Arc::default())
}

#[test]
fn returned_messages_go_back_to_their_place_within_a_priority() {
    let log = Log::default();
    let mut q = plain_queue(QueueOptions {
        max_deliveries: 0,
        backoff_ms: vec![],
        ack_timeout_ms: 60_000,
        ..QueueOptions::default()
    });
    let t = T0;
    for seq in 1..=6 {
        assert_eq!(q.enqueue(incoming(seq, 3, None), t).unwrap().0, seq);
    }
    assert_eq!(q.enqueue(incoming(7, 1, None), t).unwrap().0, 7);

    // A takes 1-3 and leaves: they go back ahead of 4-6.
    let a = TestSink::new(&log);
    q.consume(subscription(&a, "a"), 3, t).unwrap();
    let got: Vec<u64> = take_log(&log).iter().map(|x| x.seq).collect();
    assert_eq!(got, [1, 2, 3]);
    q.cancel(a.id, "a", t).unwrap();
    assert_eq!(ready_seqs(&q, 3), [1, 2, 3, 4, 5, 6]);
    assert_eq!(ready_seqs(&q, 1), [7]);

    // B takes 1-6; 5 and 2 come back after 500 ms, 4 after 1000 ms, and
    // 1, 3, 6 (and 7, delivered meanwhile) at once when B leaves.
    let b = TestSink::new(&log);
    q.consume(subscription(&b, "b"), 6, t).unwrap();
    let got: Vec<(u64, u64)> = take_log(&log).iter().map(|x| (x.seq, x.id)).collect();
    assert_eq!(
        got.iter().map(|x| x.0).collect::<Vec<_>>(),
        [1, 2, 3, 4, 5, 6]
    );
    let id = |seq: u64| got.iter().find(|x| x.0 == seq).unwrap().1;
    q.nack(b.id, "b", &[id(5), id(2)], Some(500), t).unwrap();
    q.nack(b.id, "b", &[id(4)], Some(1000), t).unwrap();
    let got: Vec<u64> = take_log(&log).iter().map(|x| x.seq).collect();
    assert_eq!(got, [7]);
    q.cancel(b.id, "b", t).unwrap();
    assert_eq!(ready_seqs(&q, 3), [1, 3, 6]);
    assert_eq!(ready_seqs(&q, 1), [7]);
    q.tick(t + 500);
    assert_eq!(ready_seqs(&q, 3), [1, 2, 3, 5, 6]);
    q.tick(t + 1000);
    assert_eq!(ready_seqs(&q, 3), [1, 2, 3, 4, 5, 6]);
    assert_eq!(q.info().delayed, 0);

    // C gets them in order: priority 3 by seq, then priority 1.
    let c = TestSink::new(&log);
    q.consume(subscription(&c, "c"), 10, t + 1000).unwrap();
    let got: Vec<(u64, u32)> = take_log(&log)
        .iter()
        .map(|x| (x.seq, x.deliveries))
        .collect();
    assert_eq!(
        got,
        [(1, 3), (2, 3), (3, 3), (4, 2), (5, 2), (6, 2), (7, 2)]
    );
}

#[test]
fn enqueue_past_max_length_is_refused_and_changes_nothing() {
    let log = Log::default();
    let mut q = plain_queue(QueueOptions {
        max_length: 3,
        ..QueueOptions::default()
    });
    let t = T0;
    for seq in 1..=3 {
        assert_eq!(q.enqueue(incoming(seq, 0, None), t).unwrap().0, seq);
    }
    // In-flight messages count too.
    let a = TestSink::new(&log);
    q.consume(subscription(&a, "a"), 1, t).unwrap();
    let first = take_log(&log);
    assert_eq!(first.iter().map(|x| x.seq).collect::<Vec<_>>(), [1]);

    let before = q.info();
    for priority in [0, 9] {
        let err = q.enqueue(incoming(4, priority, Some(100)), t).map(|x| x.0);
        assert_eq!(err, Err(QueueError::Full(3)));
    }
    // Only the refusals are counted.
    let mut after = q.info();
    assert_eq!(after.stats.refused, before.stats.refused + 2);
    after.stats.refused = before.stats.refused;
    assert_eq!(after, before);
    assert_eq!(before.stats.enqueued, 3);
    assert_eq!((before.depth, before.in_flight), (2, 1));
    assert_eq!(ready_seqs(&q, 0), [2, 3]);
    assert_eq!(ready_seqs(&q, 9), Vec::<u64>::new());
    assert_eq!(q.expiring, 0);
    assert!(take_log(&log).is_empty());

    // Room again after an ack; the refused enqueues used up no seq.
    q.ack(a.id, "a", &[first[0].id], t).unwrap();
    assert_eq!(
        take_log(&log).iter().map(|x| x.seq).collect::<Vec<_>>(),
        [2]
    );
    assert_eq!(q.enqueue(incoming(4, 0, None), t).unwrap().0, 4);
    assert_eq!(
        q.enqueue(incoming(5, 0, None), t).map(|x| x.0),
        Err(QueueError::Full(3))
    );
}

/// A redrive puts back the messages it could not place (`take_ready`, then
/// `put_back`, two tasks). A consumer that attached in between, with credit
/// and nothing in flight, must get them: nothing else will wake the queue
/// (it does not even ask for a tick).
#[test]
fn put_back_messages_go_to_a_waiting_consumer() {
    let log = Log::default();
    let mut q = plain_queue(QueueOptions::default());
    q.enqueue(incoming(1, 0, None), T0).unwrap();
    let taken: Vec<StoredMessage> = q.take_ready(10).into_iter().map(|(m, _)| m).collect();
    assert_eq!(taken.len(), 1);
    let a = TestSink::new(&log);
    q.consume(subscription(&a, "a"), 1, T0).unwrap();
    assert!(take_log(&log).is_empty());
    q.put_back(taken, T0);
    let got: Vec<u64> = take_log(&log).iter().map(|x| x.seq).collect();
    assert_eq!(
        got,
        [1],
        "consumer with credit left waiting: {:?}, needs_tick {}",
        q.info(),
        q.shared.needs_tick.load(Ordering::Acquire)
    );
}
