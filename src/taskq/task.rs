//! A queued task and the future of its result, in one allocation.
//!
//! A task that runs inline never comes here: its result is returned in a
//! ready [`TaskFuture`]. A task that has to wait is boxed once as a
//! `TaskCell` holding the closure, the result slot and the waker; the lane
//! holds it as a [`JobRef`] and the caller's future as a `Completion`.

use std::any::Any;
use std::cell::UnsafeCell;
use std::future::Future;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU8, Ordering};
use std::task::{Context, Poll, Waker};

/// Why a task produced no value. Expected outcomes of a task are its `R`;
/// these are failures of the task itself.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TaskError {
    /// The task panicked. The resource keeps running; whatever the task
    /// changed in the state before panicking stays changed, which is why
    /// tasks validate first and mutate last.
    #[error("task panicked: {0}")]
    Panicked(String),
    /// The task was dropped without running, because its queue was torn
    /// down (a scheduler shut down while the resource still had work).
    #[error("task cancelled before it ran")]
    Cancelled,
    /// The resource already had `max_depth` tasks counted; the task was not
    /// queued. The caller should slow down or fail its own request.
    #[error("resource overloaded: {depth} tasks already queued")]
    Overloaded {
        /// Tasks counted when the submission was refused.
        depth: usize,
    },
    /// The resource was closed ([`crate::taskq::TaskQueue::close`]): it
    /// runs what it had and takes nothing new.
    #[error("resource closed")]
    Closed,
}

/// Runs `f` on `state`, turning a panic into [`TaskError::Panicked`].
#[inline]
pub(crate) fn run_contained<S, R>(
    state: &mut S,
    f: impl FnOnce(&mut S) -> R,
) -> Result<R, TaskError> {
    catch_unwind(AssertUnwindSafe(|| f(state))).map_err(|p| TaskError::Panicked(panic_text(&*p)))
}

fn panic_text(payload: &(dyn Any + Send)) -> String {
    if let Some(s) = payload.downcast_ref::<&str>() {
        (*s).to_owned()
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else {
        "non-string panic payload".to_owned()
    }
}

/// The job side of a queued task, as the lane sees it.
pub(crate) trait Runnable<S>: Send + Sync {
    /// Runs the task on the state and completes its future. Returns whether
    /// it panicked. Called at most once, by the claim holder.
    fn run(&self, state: &mut S) -> bool;
    /// Completes the future with [`TaskError::Cancelled`] if the task never
    /// ran.
    fn cancel(&self);
}

/// The caller's side of a queued task: polls for its result.
trait Completion<R>: Send + Sync {
    fn poll_result(&self, cx: &mut Context<'_>) -> Poll<Result<R, TaskError>>;
}

// The completion protocol between the runner (which completes once) and
// the future (which polls, one poll at a time):
//
//   EMPTY --future stores a waker--> REGISTERING --> WAITING
//   any state --runner: swap--> DONE
//
// The runner writes the value, then swaps in DONE; if it replaced WAITING
// it takes the waker and wakes it. The future writes the waker only between
// its own CAS to REGISTERING and its CAS to WAITING; if the second CAS
// fails the runner finished meanwhile (and did not touch the waker), so the
// future takes the value itself. One atomic read-modify-write on the
// runner's side, none on the future's when it was never polled.
const EMPTY: u8 = 0;
const REGISTERING: u8 = 1;
const WAITING: u8 = 2;
const DONE: u8 = 3;

struct TaskCell<F, R> {
    /// Taken exactly once, by whichever of `run` / `cancel` comes first;
    /// both are only called through the unique `JobRef`.
    func: UnsafeCell<Option<F>>,
    /// Written once before `state` becomes DONE; read only by the future
    /// after it observes DONE.
    value: UnsafeCell<Option<Result<R, TaskError>>>,
    /// Written by the future only while it holds REGISTERING; taken by the
    /// runner only when its swap replaced WAITING.
    waker: UnsafeCell<Option<Waker>>,
    state: AtomicU8,
}

// SAFETY: `func` is only touched through the single `JobRef` (one thread at a
// time); `value` is written before the AcqRel swap to DONE and read after an
// Acquire load of DONE by the single future; `waker` is handed between the
// future and the runner by the state protocol above. F and R cross threads,
// hence the `Send` bounds.
unsafe impl<F: Send, R: Send> Sync for TaskCell<F, R> {}

impl<F, R> TaskCell<F, R> {
    fn complete(&self, result: Result<R, TaskError>) {
        // SAFETY: only the JobRef owner completes, once, before DONE is set;
        // the future does not read `value` until it sees DONE.
        unsafe { *self.value.get() = Some(result) };
        if self.state.swap(DONE, Ordering::AcqRel) == WAITING {
            // SAFETY: WAITING means the future finished writing the waker
            // and will not touch it again (its CAS from WAITING now fails).
            if let Some(waker) = unsafe { (*self.waker.get()).take() } {
                waker.wake();
            }
        }
    }

    fn take_func(&self) -> Option<F> {
        // SAFETY: called only through the unique JobRef (see `func`).
        unsafe { (*self.func.get()).take() }
    }
}

impl<S, F, R> Runnable<S> for TaskCell<F, R>
where
    F: FnOnce(&mut S) -> R + Send,
    R: Send,
{
    fn run(&self, state: &mut S) -> bool {
        let Some(f) = self.take_func() else {
            return false;
        };
        let result = run_contained(state, f);
        let panicked = result.is_err();
        self.complete(result);
        panicked
    }

    fn cancel(&self) {
        if let Some(f) = self.take_func() {
            drop(f);
            self.complete(Err(TaskError::Cancelled));
        }
    }
}

impl<F: Send, R: Send> Completion<R> for TaskCell<F, R> {
    fn poll_result(&self, cx: &mut Context<'_>) -> Poll<Result<R, TaskError>> {
        let take = || {
            // SAFETY: DONE was observed with Acquire, so the write is
            // visible and finished; only this (single) future reads it.
            unsafe { (*self.value.get()).take() }.unwrap_or(Err(TaskError::Cancelled))
        };
        let seen = self.state.load(Ordering::Acquire);
        if seen == DONE {
            return Poll::Ready(take());
        }
        if self
            .state
            .compare_exchange(seen, REGISTERING, Ordering::Acquire, Ordering::Acquire)
            .is_err()
        {
            // Only the runner changes the state behind our back: to DONE.
            return Poll::Ready(take());
        }
        // SAFETY: REGISTERING is ours; the runner's swap will not touch the
        // waker unless it replaces WAITING.
        unsafe {
            let slot = &mut *self.waker.get();
            match slot {
                Some(w) if w.will_wake(cx.waker()) => {}
                _ => *slot = Some(cx.waker().clone()),
            }
        }
        match self
            .state
            .compare_exchange(REGISTERING, WAITING, Ordering::AcqRel, Ordering::Acquire)
        {
            Ok(_) => Poll::Pending,
            Err(_) => Poll::Ready(take()),
        }
    }
}

/// What a lane holds: a task whose caller awaits a result, or a detached
/// one (from [`TaskQueue::execute`](super::TaskQueue::execute)) whose
/// closure is boxed alone, with no result slot or waker.
pub(crate) enum Job<S> {
    /// A task with a [`TaskFuture`].
    Task(JobRef<S>),
    /// A fire-and-forget task. Zero-sized closures are not even allocated.
    Detached(Box<dyn FnOnce(&mut S) + Send>),
}

impl<S> Job<S> {
    /// Runs the job; returns whether it panicked.
    #[inline]
    pub(crate) fn run(self, state: &mut S) -> bool {
        match self {
            Job::Task(task) => task.run(state),
            Job::Detached(f) => match run_contained(state, f) {
                Ok(()) => false,
                Err(e) => {
                    report_detached_panic(&e);
                    true
                }
            },
        }
    }
}

/// A detached task has no future to carry its panic, so it is logged.
pub(crate) fn report_detached_panic(e: &TaskError) {
    tracing::error!("detached task: {e}");
}

/// The unique handle a lane holds on a queued task. Dropping it without
/// running the task cancels the task, so its future never hangs.
pub(crate) struct JobRef<S>(Arc<dyn Runnable<S>>);

impl<S> JobRef<S> {
    /// Boxes `f` into one allocation shared by the job and its future.
    pub(crate) fn new<F, R>(f: F) -> (JobRef<S>, TaskFuture<R>)
    where
        F: FnOnce(&mut S) -> R + Send + 'static,
        R: Send + 'static,
        S: 'static,
    {
        let cell = Arc::new(TaskCell {
            func: UnsafeCell::new(Some(f)),
            value: UnsafeCell::new(None),
            waker: UnsafeCell::new(None),
            state: AtomicU8::new(EMPTY),
        });
        let future = TaskFuture {
            inner: FutureState::Waiting(cell.clone()),
        };
        (JobRef(cell), future)
    }

    /// Runs the task; returns whether it panicked.
    #[inline]
    pub(crate) fn run(self, state: &mut S) -> bool {
        self.0.run(state)
        // Drop then sees the closure gone and does nothing.
    }
}

impl<S> Drop for JobRef<S> {
    fn drop(&mut self) {
        self.0.cancel();
    }
}

/// The result of a submitted task, as a `Future`.
///
/// It is already complete when the task ran inline on the submitting thread.
/// Dropping it neither cancels nor leaks the task: the task still runs and
/// its result is dropped.
#[must_use = "a TaskFuture does nothing when polled late, but its result is lost if dropped"]
pub struct TaskFuture<R> {
    inner: FutureState<R>,
}

enum FutureState<R> {
    Ready(Option<Result<R, TaskError>>),
    Waiting(Arc<dyn Completion<R>>),
}

impl<R> TaskFuture<R> {
    /// A future that is complete from the start (the task ran inline).
    #[inline]
    pub(crate) fn ready(result: Result<R, TaskError>) -> Self {
        TaskFuture {
            inner: FutureState::Ready(Some(result)),
        }
    }

    /// Whether the task has completed, without taking the result.
    pub fn is_complete(&self) -> bool {
        match &self.inner {
            FutureState::Ready(r) => r.is_some(),
            FutureState::Waiting(_) => false,
        }
    }

    /// Takes the result if the task already ran inline, without a waker.
    /// Cheaper than polling on the inline path; `None` means "await it".
    #[inline]
    pub fn try_take(&mut self) -> Option<Result<R, TaskError>> {
        match &mut self.inner {
            FutureState::Ready(r) => r.take(),
            FutureState::Waiting(_) => None,
        }
    }
}

// The future never pins its result in place: it only moves `R` out by value.
impl<R> Unpin for TaskFuture<R> {}

impl<R> Future for TaskFuture<R> {
    type Output = Result<R, TaskError>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match &mut self.inner {
            FutureState::Ready(r) => Poll::Ready(r.take().unwrap_or(Err(TaskError::Cancelled))),
            FutureState::Waiting(c) => match c.poll_result(cx) {
                Poll::Ready(r) => {
                    self.inner = FutureState::Ready(None);
                    Poll::Ready(r)
                }
                Poll::Pending => Poll::Pending,
            },
        }
    }
}

impl<R> std::fmt::Debug for TaskFuture<R> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TaskFuture")
            .field("complete", &self.is_complete())
            .finish()
    }
}
