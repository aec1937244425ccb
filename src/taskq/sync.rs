//! The few synchronisation primitives the claim protocol uses, swapped for
//! loom's under `--features loom` so the protocol can be model-checked.
//!
//! Production builds get std atomics, a `std::cell::UnsafeCell` wrapper and
//! crossbeam's lock-free `SegQueue` as a lane. Loom builds get loom's
//! atomics and cells (which detect concurrent access to the resource state)
//! and a loom mutex around a `VecDeque` as the lane: the lane is not what is
//! being checked, the counter-then-push protocol around it is.

#[cfg(feature = "loom")]
pub(crate) use loom::sync::atomic::{AtomicUsize, Ordering};
#[cfg(not(feature = "loom"))]
pub(crate) use std::sync::atomic::{AtomicUsize, Ordering};

/// An `UnsafeCell` with loom's closure-based access API, so the same code
/// compiles against both.
#[derive(Debug)]
pub(crate) struct Cell<T>(
    #[cfg(feature = "loom")] loom::cell::UnsafeCell<T>,
    #[cfg(not(feature = "loom"))] std::cell::UnsafeCell<T>,
);

impl<T> Cell<T> {
    pub(crate) fn new(value: T) -> Self {
        #[cfg(feature = "loom")]
        {
            Cell(loom::cell::UnsafeCell::new(value))
        }
        #[cfg(not(feature = "loom"))]
        {
            Cell(std::cell::UnsafeCell::new(value))
        }
    }

    /// Gives `f` a raw pointer to the value; the caller guarantees exclusive
    /// access for the duration (under loom, violations are reported).
    #[inline]
    pub(crate) fn with_mut<R>(&self, f: impl FnOnce(*mut T) -> R) -> R {
        #[cfg(feature = "loom")]
        {
            self.0.with_mut(f)
        }
        #[cfg(not(feature = "loom"))]
        {
            f(self.0.get())
        }
    }
}

/// A multi-producer lane of queued tasks. Pushes never block.
#[derive(Debug)]
pub(crate) struct LaneQueue<T> {
    #[cfg(not(feature = "loom"))]
    queue: crossbeam_queue::SegQueue<T>,
    #[cfg(feature = "loom")]
    queue: loom::sync::Mutex<std::collections::VecDeque<T>>,
}

impl<T> LaneQueue<T> {
    pub(crate) fn new() -> Self {
        LaneQueue {
            queue: Default::default(),
        }
    }

    #[inline]
    pub(crate) fn push(&self, value: T) {
        #[cfg(not(feature = "loom"))]
        self.queue.push(value);
        #[cfg(feature = "loom")]
        self.queue
            .lock()
            .expect("loom lane lock poisoned")
            .push_back(value);
    }

    #[inline]
    pub(crate) fn pop(&self) -> Option<T> {
        #[cfg(not(feature = "loom"))]
        {
            self.queue.pop()
        }
        #[cfg(feature = "loom")]
        {
            self.queue
                .lock()
                .expect("loom lane lock poisoned")
                .pop_front()
        }
    }
}

/// Waits a little for a task that has been counted but not yet pushed:
/// spins briefly, then yields the thread. Loom gets a plain yield so the
/// model explores the other thread instead of spinning forever.
#[derive(Default)]
pub(crate) struct Backoff {
    #[cfg(not(feature = "loom"))]
    inner: crossbeam_utils::Backoff,
}

impl Backoff {
    #[inline]
    pub(crate) fn snooze(&self) {
        #[cfg(not(feature = "loom"))]
        self.inner.snooze();
        #[cfg(feature = "loom")]
        loom::thread::yield_now();
    }
}
