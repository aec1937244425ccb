//! The claim protocol: who runs a resource, and when it goes idle.
//!
//! One counter says how many tasks the resource has been given and not yet
//! finished, the running one included. A submitter increments it *first*:
//! if it was 0, the submitter now holds the claim and runs its task inline
//! (the task is never queued); otherwise it pushes the task onto a lane and
//! leaves. The claim holder, after each task, decrements the counter: if that
//! brings it to 0 the resource is idle and the claim is released; if not,
//! at least one more task has been counted, so it pops one (waiting briefly
//! if the submitter has counted it but not finished pushing it) and runs it.
//!
//! Count-then-push is what keeps a submitter's tasks in order: when a
//! submitter sees the counter at 0, every task it pushed before has been
//! counted and therefore run. The holder never runs more tasks than were
//! counted. Push-then-count would let the holder pop a task that is not yet
//! counted, reach 0 early, and let the same submitter's next task run inline
//! ahead of an earlier one still in the lane.
//!
//! The types below make the claim a value: [`Running`] while the holder runs
//! its own inline task, [`Pending`] while it holds the claim with at least one
//! counted task not yet run. Only code holding one of them touches the state.

use std::marker::PhantomData;

use crossbeam_utils::CachePadded;

use super::sync::{AtomicUsize, Backoff, Cell, LaneQueue, Ordering};

/// Which lane a queued task waits in. High-priority tasks are popped before
/// normal ones but never interrupt the running task.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lane {
    /// The ordinary lane: FIFO with every other normal task.
    Normal,
    /// Runs ahead of queued normal tasks (FIFO among high tasks).
    High,
}

/// A resource's state, its claim counter and its two lanes of queued jobs.
pub(crate) struct Core<S, J> {
    /// On a cache line of its own: every contended submission writes it,
    /// and the state (written by every task) must not share its line.
    count: CachePadded<AtomicUsize>,
    high: LaneQueue<J>,
    normal: LaneQueue<J>,
    state: Cell<S>,
}

// SAFETY: the state is only reached through `Running`/`Pending`, which exist
// on one thread at a time (the claim), and lanes are thread-safe queues.
// Handing the state between threads requires `S: Send`; jobs cross threads.
unsafe impl<S: Send, J: Send> Sync for Core<S, J> {}
// SAFETY: as above; the core owns an `S` and `J`s, which are `Send`.
unsafe impl<S: Send, J: Send> Send for Core<S, J> {}

/// What a submitter got from [`Core::enter`].
pub(crate) enum Entry<'a, S, J> {
    /// The resource was idle: the caller holds the claim and must run its
    /// task now through [`Running::with_state`], then call [`Running::finish`].
    Claimed(Running<'a, S, J>),
    /// The resource is busy: the task has been counted, and the caller must
    /// [`Core::push`] it at once. `depth` is the number of counted tasks,
    /// this one included.
    Busy { depth: usize },
}

/// The claim, held while running a task that was never queued.
#[must_use = "the claim must be finished or the resource wedges"]
pub(crate) struct Running<'a, S, J> {
    core: &'a Core<S, J>,
    _not_send: PhantomData<*const ()>,
}

/// The claim, held with at least one counted task not yet run.
#[must_use = "a pending claim must be drained or handed off"]
pub(crate) struct Pending<'a, S, J> {
    core: &'a Core<S, J>,
    /// Counted tasks known not to have run yet (at least 1). The holder may
    /// run this many before it must look at the counter again, so the
    /// counter is decremented once per batch, not once per task.
    known: usize,
    _not_send: PhantomData<*const ()>,
}

impl<S, J> Core<S, J> {
    pub(crate) fn new(state: S) -> Self {
        Core {
            count: CachePadded::new(AtomicUsize::new(0)),
            high: LaneQueue::new(),
            normal: LaneQueue::new(),
            state: Cell::new(state),
        }
    }

    /// Counts one task. Either the caller now holds the claim (the resource
    /// was idle), or it must push the task without delay.
    #[inline]
    pub(crate) fn enter(&self) -> Entry<'_, S, J> {
        // AcqRel: acquiring the previous holder's release of the state
        // (when we see 0), and publishing our earlier pushes to the holder.
        let prev = self.count.fetch_add(1, Ordering::AcqRel);
        if prev == 0 {
            Entry::Claimed(Running {
                core: self,
                _not_send: PhantomData,
            })
        } else {
            Entry::Busy { depth: prev + 1 }
        }
    }

    /// Queues a task that [`Core::enter`] counted as `Busy`.
    #[inline]
    pub(crate) fn push(&self, job: J, lane: Lane) {
        match lane {
            Lane::High => self.high.push(job),
            Lane::Normal => self.normal.push(job),
        }
    }

    /// Releases `n` finished tasks; returns the claim if more are counted.
    #[inline]
    fn finish(&self, n: usize) -> Option<Pending<'_, S, J>> {
        // AcqRel: releasing our state writes to the next holder (who sees
        // the counter reach 0 then count up), and acquiring the pushes of
        // the tasks we are about to pop.
        let prev = self.count.fetch_sub(n, Ordering::AcqRel);
        if prev == n {
            None
        } else {
            Some(Pending {
                core: self,
                known: prev - n,
                _not_send: PhantomData,
            })
        }
    }

    /// Pops a counted task, waiting for its submitter to finish pushing it.
    /// Only called with a `Pending` claim, so such a task exists.
    #[inline]
    fn pop_counted(&self) -> J {
        if let Some(job) = self.high.pop().or_else(|| self.normal.pop()) {
            return job;
        }
        let backoff = Backoff::default();
        loop {
            backoff.snooze();
            if let Some(job) = self.high.pop().or_else(|| self.normal.pop()) {
                return job;
            }
        }
    }

    /// Re-creates a claim that was handed to another thread with
    /// [`Pending::hand_off`].
    ///
    /// # Safety
    /// The caller must own a claim previously given up by `hand_off` on this
    /// core, and must not resume it twice.
    pub(crate) unsafe fn resume(&self) -> Pending<'_, S, J> {
        Pending {
            core: self,
            // A handed-off claim always has at least one counted task.
            known: 1,
            _not_send: PhantomData,
        }
    }

    /// Number of counted tasks not yet finished (the running one included).
    pub(crate) fn depth(&self) -> usize {
        self.count.load(Ordering::Relaxed)
    }
}

impl<'a, S, J> Running<'a, S, J> {
    /// Runs `f` on the state. Exclusive: the claim is held.
    #[inline]
    pub(crate) fn with_state<R>(&mut self, f: impl FnOnce(&mut S) -> R) -> R {
        // SAFETY: holding the claim means no other thread touches the state;
        // `&mut self` means no other borrow of it from this thread.
        self.core.state.with_mut(|state| f(unsafe { &mut *state }))
    }

    /// Ends the inline task; returns the claim if other tasks are waiting.
    #[inline]
    pub(crate) fn finish(self) -> Option<Pending<'a, S, J>> {
        self.core.finish(1)
    }
}

impl<'a, S, J> Pending<'a, S, J> {
    /// Runs up to `budget` (at least 1) queued tasks in lane order with
    /// `run`. Returns how many ran, and the claim if tasks remain counted
    /// after the budget. Tasks run in batches of those already counted; the
    /// counter is decremented once per batch.
    ///
    /// `settle(n)` is called after each batch of `n` tasks, while the claim
    /// is still held, so whatever it records is ordered before the next
    /// holder's records.
    pub(crate) fn drain(
        self,
        budget: usize,
        mut run: impl FnMut(&mut S, J),
        mut settle: impl FnMut(usize),
    ) -> (usize, Option<Pending<'a, S, J>>) {
        let core = self.core;
        let mut known = self.known;
        let mut ran = 0;
        loop {
            let batch = known.min(budget.saturating_sub(ran).max(1));
            for _ in 0..batch {
                let job = core.pop_counted();
                // SAFETY: the claim is held (we are a `Pending`), so access
                // to the state is exclusive.
                core.state
                    .with_mut(|state| run(unsafe { &mut *state }, job));
            }
            ran += batch;
            settle(batch);
            match core.finish(batch) {
                None => return (ran, None),
                Some(next) if ran >= budget => return (ran, Some(next)),
                Some(next) => known = next.known,
            }
        }
    }

    /// Hands the claim off: this thread stops running the resource so that
    /// another (a worker) can [`Core::resume`] it; the claim itself stays
    /// held (the counter is untouched).
    pub(crate) fn hand_off(self) {
        // `Pending` has no destructor: consuming it is all it takes.
        let Pending { .. } = self;
    }
}
