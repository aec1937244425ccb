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
//!
//! This file holds the plumbing (the recording sink, the dead-letter queue,
//! a tiny `block_on`); `model.rs` the model, `harness.rs` the queue beside
//! it and the checks between them, `ops.rs` the random sequences and the
//! test that runs them, `focused.rs` tests of single paths.

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
    outcome: DeliveryOutcome,
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

    fn deliver(&self, _sub: &Subscription, _msg: &Arc<Published>) -> DeliveryOutcome {
        DeliveryOutcome::Closed
    }

    fn is_closed(&self) -> bool {
        self.closed.load(Ordering::Relaxed)
    }

    fn deliver_queued(&self, sub: &Subscription, d: &QueuedDelivery<'_>) -> DeliveryOutcome {
        assert_eq!(d.queue, NAME, "a delivery names the wrong queue");
        let outcome = if self.is_closed() {
            DeliveryOutcome::Closed
        } else if self.is_full() {
            DeliveryOutcome::Dropped
        } else {
            DeliveryOutcome::Queued
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
    Subscription::new(sink.clone(), id, "", crate::broker::SubTag::None, None)
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

mod focused;
mod harness;
mod model;
mod ops;

use harness::Harness;
use model::{MCons, Model, St};
use ops::{Cfg, How, Op};
