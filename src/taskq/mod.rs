//! The resource task queue: the way every topic and queue in Wharf owns and
//! changes its state. It knows nothing of messages.
//!
//! A [`TaskQueue<S>`] owns a state `S`. [`TaskQueue::submit`] hands it a
//! closure `FnOnce(&mut S) -> R` and returns a [`TaskFuture<R>`]:
//!
//! - if the resource is idle, the submitting thread runs the task at once,
//!   inline, and the future is already complete (two atomic operations, no
//!   allocation);
//! - if another thread is running the resource, the task is queued (one
//!   allocation) and the submitter returns at once without blocking;
//! - the running thread keeps draining queued tasks, in order, up to the
//!   capture threshold; past it, it hands the resource to a [`Scheduler`]
//!   worker and returns. Workers drain a `quantum` at a time, then requeue
//!   the resource behind the others.
//!
//! A resource holds at most `max_depth` counted tasks; past it submissions
//! fail at once with [`TaskError::Overloaded`], so no queue grows without
//! bound.
//!
//! [`TaskQueue::close`] ends a resource gracefully: what was submitted
//! before it still runs, in order, and every submission after it fails at
//! once with [`TaskError::Closed`]. The close is a flag beside the claim
//! protocol, checked where `max_depth` is, so it changes nothing in how a
//! resource is claimed or handed off.
//!
//! Exactly one thread runs a resource at a time, no lock is held while a task
//! runs, and within a lane tasks run in submission order. [`Lane::High`]
//! tasks run before queued normal ones.
//!
//! # Panics in tasks
//! A task that panics resolves its future to [`TaskError::Panicked`]; the
//! resource and its other tasks carry on. Whatever the task changed before
//! it panicked stays changed, so tasks must be atomic by construction:
//! validate everything first, then mutate.
//!
//! # Examples
//! ```
//! use wharf::taskq::{Scheduler, SchedulerConfig, TaskQueue};
//!
//! let scheduler = Scheduler::new(&SchedulerConfig::default()).unwrap();
//! let counter = TaskQueue::new(0u64, &scheduler);
//! let mut done = counter.submit(|n| {
//!     *n += 1;
//!     *n
//! });
//! // Idle resource: the task already ran on this thread.
//! assert_eq!(done.try_take(), Some(Ok(1)));
//! ```
//!
//! # Design notes
//!
//! ## The claim, in batches
//! The counter (`claim.rs`) is the number of tasks given to the resource
//! and not yet finished, the running one included. The holder, after a
//! task, subtracts what it ran; when the counter is not 0 it knows how many
//! tasks are counted and runs that many as a batch before subtracting
//! again: one atomic operation per batch, not per task. A counted task may
//! not be in its lane yet (its submitter is between the increment and the
//! push): the holder spins briefly, then yields, until it is, and it never
//! runs more tasks than were counted. The lanes are crossbeam `SegQueue`s
//! (`sync.rs`); high-lane tasks are popped first, and within a lane tasks
//! run in submission order. The state sits in a cell that only the holder
//! of a `Running` or `Pending` claim touches, which is what makes the core
//! `Sync`.
//!
//! ## Capture and hand-off
//! A submitting thread that holds the claim runs at most
//! `capture_threshold` tasks, its own included, then gives the claim up
//! (`Pending::hand_off`) and sends the resource to the scheduler's run
//! queue (`pool.rs`). A worker resumes the claim, runs up to `quantum`
//! tasks, and if work remains puts the resource at the back of the run
//! queue, so one hot resource cannot starve the others. After
//! `Scheduler::shutdown` a hand-off is refused and the thread holding the
//! claim drains the resource itself.
//!
//! ## Costs
//! A task run inline costs two atomic operations and no allocation. A
//! queued task is one allocation (`TaskCell` in `task.rs`: closure, result
//! slot and waker together); `execute` with a closure that captures
//! nothing allocates nothing. The run counters are written only by the
//! claim holder, with a plain load and store. `benches/taskq.rs` measures
//! the queue against a `std` and a `parking_lot` mutex, an actix actor and
//! a tokio task fed by a channel (results in benches/README.md).
//!
//! ## Bound and counters
//! The `max_depth` check comes before the increment, so submitters racing
//! past it may overshoot by their number. Per resource, `TaskQueue::stats`
//! counts inline runs, worker runs, hand-offs, panics, refusals, the depth
//! and its high-water mark; per scheduler, `Scheduler::stats` counts
//! hand-offs and requeues. A task submitted with `execute` that panics is
//! counted and logged, since nobody receives its error.
//!
//! ## Verification
//! `tests/it/taskq.rs` checks totals and per-submitter order under
//! contention, exclusivity, inline execution, hand-off past the threshold
//! while the submitter returns, priority, panics, the quantum, the depth
//! bound and shutdown. `loom_tests.rs` model-checks the claim protocol
//! (`--features loom`): loom's cells report any concurrent access to the
//! state, and the models catch both a missing wait for a counted but
//! invisible task and relaxed orderings on the counter.

mod claim;
mod pool;
mod sync;
mod task;

#[cfg(all(test, feature = "loom"))]
mod loom_tests;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};

pub use claim::Lane;
pub use pool::{
    Scheduler, SchedulerConfig, SchedulerConfigError, SchedulerError, SchedulerHandle,
    SchedulerStats,
};
pub use task::{TaskError, TaskFuture};

use claim::{Core, Entry, Pending};
use crossbeam_utils::CachePadded;
use pool::{PoolShared, Schedulable};
use task::{Job, JobRef, report_detached_panic, run_contained};

/// A resource: its state and its non-blocking task queue. Cheap to clone;
/// clones share the same resource.
pub struct TaskQueue<S> {
    inner: Arc<Inner<S>>,
}

impl<S> Clone for TaskQueue<S> {
    fn clone(&self) -> Self {
        TaskQueue {
            inner: self.inner.clone(),
        }
    }
}

/// A handle that does not keep the resource alive: for a resource that
/// must be able to submit to itself later (a callback it hands out)
/// without a reference cycle.
pub struct WeakTaskQueue<S> {
    inner: std::sync::Weak<Inner<S>>,
}

impl<S> Clone for WeakTaskQueue<S> {
    fn clone(&self) -> Self {
        WeakTaskQueue {
            inner: self.inner.clone(),
        }
    }
}

impl<S> WeakTaskQueue<S> {
    /// The resource, if it still exists.
    pub fn upgrade(&self) -> Option<TaskQueue<S>> {
        self.inner.upgrade().map(|inner| TaskQueue { inner })
    }
}

struct Inner<S> {
    core: Core<S, Job<S>>,
    pool: Arc<PoolShared>,
    counters: CachePadded<Counters>,
    /// On another line than `counters`: submitters touch these, and the
    /// runner writes `counters` on every task.
    submit_counters: CachePadded<SubmitCounters>,
}

/// Per-resource counters written only by the claim holder (one thread at a
/// time, ordered by the claim), so they are updated with a plain load and
/// store rather than a locked add.
#[derive(Default)]
struct Counters {
    inline_runs: AtomicU64,
    worker_runs: AtomicU64,
    panics: AtomicU64,
    handoffs: AtomicU64,
}

/// Per-resource counters submitters update (any thread).
#[derive(Default)]
struct SubmitCounters {
    high_water: AtomicUsize,
    refused: AtomicU64,
    /// Set once by [`TaskQueue::close`]; read by every admission (a line
    /// written once, so it stays shared in every reader's cache).
    closed: AtomicBool,
}

#[inline]
fn bump(counter: &AtomicU64, by: u64) {
    counter.store(
        counter.load(Ordering::Relaxed).wrapping_add(by),
        Ordering::Relaxed,
    );
}

/// A snapshot of one resource's counters, for metrics.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct QueueStats {
    /// Tasks run by a submitting thread (its own, or others' it drained).
    pub inline_runs: u64,
    /// Tasks run by a scheduler worker.
    pub worker_runs: u64,
    /// Tasks that panicked.
    pub panics: u64,
    /// Times the resource was handed to a worker past the capture threshold.
    pub handoffs: u64,
    /// Most tasks ever counted at once (running plus queued).
    pub depth_high_water: usize,
    /// Tasks counted now (running plus queued).
    pub depth: usize,
    /// Submissions refused because the resource was `max_depth` deep.
    pub refused: u64,
}

impl<S: Send + 'static> TaskQueue<S> {
    /// Creates a resource owning `state`, handing busy work to `scheduler`.
    pub fn new(state: S, scheduler: &SchedulerHandle) -> Self {
        TaskQueue {
            inner: Arc::new(Inner {
                core: Core::new(state),
                pool: scheduler.shared.clone(),
                counters: CachePadded::new(Counters::default()),
                submit_counters: CachePadded::new(SubmitCounters::default()),
            }),
        }
    }

    /// Submits a task in the normal lane. See the [module docs](self).
    #[inline]
    pub fn submit<F, R>(&self, f: F) -> TaskFuture<R>
    where
        F: FnOnce(&mut S) -> R + Send + 'static,
        R: Send + 'static,
    {
        self.submit_with(Lane::Normal, f)
    }

    /// Submits a task that runs ahead of queued normal tasks. It never
    /// interrupts the task that is running.
    #[inline]
    pub fn submit_high<F, R>(&self, f: F) -> TaskFuture<R>
    where
        F: FnOnce(&mut S) -> R + Send + 'static,
        R: Send + 'static,
    {
        self.submit_with(Lane::High, f)
    }

    /// Submits a task in the given lane.
    #[inline]
    pub fn submit_with<F, R>(&self, lane: Lane, f: F) -> TaskFuture<R>
    where
        F: FnOnce(&mut S) -> R + Send + 'static,
        R: Send + 'static,
    {
        if let Err(e) = self.inner.admit() {
            return TaskFuture::ready(Err(e));
        }
        match self.inner.core.enter() {
            Entry::Claimed(mut running) => {
                let result = running.with_state(|state| run_contained(state, f));
                self.inner.after_inline(running, result.is_err());
                TaskFuture::ready(result)
            }
            Entry::Busy { depth } => {
                let (job, future) = JobRef::new(f);
                self.inner.queue(depth, Job::Task(job), lane);
                future
            }
        }
    }

    /// Submits a fire-and-forget task: no future, no result slot, and no
    /// allocation for a closure that captures nothing. Cheaper than
    /// dropping the future of [`submit`](Self::submit) when nobody waits.
    /// A panic is counted and logged, since no one receives it.
    ///
    /// # Errors
    /// [`TaskError::Overloaded`] if the resource has `max_depth` tasks
    /// counted; the task is dropped without running.
    #[inline]
    pub fn execute<F>(&self, lane: Lane, f: F) -> Result<(), TaskError>
    where
        F: FnOnce(&mut S) + Send + 'static,
    {
        self.inner.admit()?;
        match self.inner.core.enter() {
            Entry::Claimed(mut running) => {
                let result = running.with_state(|state| run_contained(state, f));
                if let Err(e) = &result {
                    report_detached_panic(e);
                }
                self.inner.after_inline(running, result.is_err());
            }
            Entry::Busy { depth } => {
                self.inner.queue(depth, Job::Detached(Box::new(f)), lane);
            }
        }
        Ok(())
    }

    /// Closes the resource: tasks already submitted run, in their order,
    /// and every submission after `close` returns fails at once with
    /// [`TaskError::Closed`] (a submission racing with the close may still
    /// be taken, and then runs). The future resolves once every task
    /// queued before the close has run. Closing again is harmless.
    pub fn close(&self) -> TaskFuture<()> {
        self.inner
            .submit_counters
            .closed
            .store(true, Ordering::SeqCst);
        // A fence behind everything queued (the high lane runs first
        // anyway); it is not refused, being the close's own.
        match self.inner.core.enter() {
            Entry::Claimed(running) => {
                self.inner.after_inline(running, false);
                TaskFuture::ready(Ok(()))
            }
            Entry::Busy { depth } => {
                let (job, future) = JobRef::new(|_: &mut S| ());
                self.inner.queue(depth, Job::Task(job), Lane::Normal);
                future
            }
        }
    }

    /// Whether [`TaskQueue::close`] was called.
    pub fn is_closed(&self) -> bool {
        self.inner.submit_counters.closed.load(Ordering::Acquire)
    }

    /// A handle that does not keep the resource alive.
    pub fn downgrade(&self) -> WeakTaskQueue<S> {
        WeakTaskQueue {
            inner: Arc::downgrade(&self.inner),
        }
    }

    /// Whether two handles refer to the same resource.
    pub fn same(&self, other: &TaskQueue<S>) -> bool {
        Arc::ptr_eq(&self.inner, &other.inner)
    }

    /// A snapshot of this resource's counters.
    pub fn stats(&self) -> QueueStats {
        let c = &self.inner.counters;
        QueueStats {
            inline_runs: c.inline_runs.load(Ordering::Relaxed),
            worker_runs: c.worker_runs.load(Ordering::Relaxed),
            panics: c.panics.load(Ordering::Relaxed),
            handoffs: c.handoffs.load(Ordering::Relaxed),
            depth_high_water: self
                .inner
                .submit_counters
                .high_water
                .load(Ordering::Relaxed),
            depth: self.inner.core.depth(),
            refused: self.inner.submit_counters.refused.load(Ordering::Relaxed),
        }
    }
}

impl<S> std::fmt::Debug for TaskQueue<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TaskQueue")
            .field("depth", &self.inner.core.depth())
            .finish_non_exhaustive()
    }
}

impl<S: Send + 'static> Inner<S> {
    /// Refuses a submission to a resource already `max_depth` deep.
    #[inline]
    fn admit(&self) -> Result<(), TaskError> {
        if self.submit_counters.closed.load(Ordering::Relaxed) {
            return Err(TaskError::Closed);
        }
        let depth = self.core.depth();
        if depth >= self.pool.max_depth {
            self.submit_counters.refused.fetch_add(1, Ordering::Relaxed);
            Err(TaskError::Overloaded { depth })
        } else {
            Ok(())
        }
    }

    /// The submitter ran its task inline: count it, and drain what others
    /// queued meanwhile.
    #[inline]
    fn after_inline(self: &Arc<Self>, running: claim::Running<'_, S, Job<S>>, panicked: bool) {
        bump(&self.counters.inline_runs, 1);
        if panicked {
            bump(&self.counters.panics, 1);
        }
        if let Some(pending) = running.finish() {
            self.drain_captured(pending);
        }
    }

    /// Queues a job that `enter` counted as busy.
    #[inline]
    fn queue(&self, depth: usize, job: Job<S>, lane: Lane) {
        // Read first: a read-modify-write on every contended submission
        // would bounce the counters' cache line between submitters.
        let hw = &self.submit_counters.high_water;
        if depth > hw.load(Ordering::Relaxed) {
            hw.fetch_max(depth, Ordering::Relaxed);
        }
        self.core.push(job, lane);
    }

    /// Runs `budget` queued tasks under the claim; returns the claim if more
    /// remain. Keeps the run counters.
    #[inline]
    fn drain<'a>(
        &'a self,
        pending: Pending<'a, S, Job<S>>,
        budget: usize,
        on_worker: bool,
    ) -> Option<Pending<'a, S, Job<S>>> {
        let c = &self.counters;
        let runs = if on_worker {
            &c.worker_runs
        } else {
            &c.inline_runs
        };
        // Recorded per batch, before the batch's release: after the drain
        // the claim may already belong to another thread.
        let panics = std::cell::Cell::new(0);
        let (_, rest) = pending.drain(
            budget,
            |state, job| {
                if job.run(state) {
                    panics.set(panics.get() + 1);
                }
            },
            |batch| {
                bump(runs, batch as u64);
                if panics.get() > 0 {
                    bump(&c.panics, panics.replace(0));
                }
            },
        );
        rest
    }

    /// The submitting thread ran its own task and found others queued: drain
    /// up to the capture threshold, then hand the resource to a worker.
    fn drain_captured(self: &Arc<Self>, pending: Pending<'_, S, Job<S>>) {
        let budget = self.pool.capture_threshold.saturating_sub(1);
        let Some(pending) = self.drain(pending, budget, false) else {
            return;
        };
        pending.hand_off();
        bump(&self.counters.handoffs, 1);
        match self.pool.schedule(self.clone()) {
            Ok(()) => {
                self.pool.counters.handoffs.fetch_add(1, Ordering::Relaxed);
            }
            Err(_shut_down) => {
                // SAFETY: we gave the claim up just above and the pool did
                // not take it.
                let pending = unsafe { self.core.resume() };
                let rest = self.drain(pending, usize::MAX, false);
                debug_assert!(rest.is_none());
            }
        }
    }
}

impl<S: Send + 'static> Schedulable for Inner<S> {
    fn run_on_worker(self: Arc<Self>) {
        // SAFETY: a resource is in the run queue only after its claim holder
        // gave the claim up with `hand_off` and scheduled it, once.
        let pending = unsafe { self.core.resume() };
        let Some(pending) = self.drain(pending, self.pool.quantum, true) else {
            return;
        };
        pending.hand_off();
        match self.pool.schedule(self.clone()) {
            Ok(()) => {
                self.pool.counters.requeues.fetch_add(1, Ordering::Relaxed);
            }
            Err(_shut_down) => {
                // SAFETY: as above; the pool did not take the claim.
                let pending = unsafe { self.core.resume() };
                let rest = self.drain(pending, usize::MAX, true);
                debug_assert!(rest.is_none());
            }
        }
    }
}
