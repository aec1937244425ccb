//! The binary's side of giving freed memory back: mimalloc's calls.
//!
//! mimalloc gives freed memory back to the system a second after it was
//! freed, at some thread's next call into it. Idle workers make no call,
//! so [`start`] hands the library `mi_collect` for its workers to run on
//! their own heaps once they fall quiet ([`wharf::set_worker_tidy`]); and
//! since the call that finds hundreds of megabytes due (after a
//! fan-out's queues drained) spends tens of milliseconds in the kernel,
//! which a worker's connections would wait out, a thread of its own
//! makes that call four times a second, so the purge happens there, off
//! the workers.

use std::sync::mpsc::{self, RecvTimeoutError, Sender};
use std::thread::JoinHandle;
use std::time::Duration;

/// How often the allocator is asked to purge what is due (its purge
/// delay is 1 s): often enough to come before the workers' own tidies.
const EVERY: Duration = Duration::from_millis(250);

/// The running purge thread; dropping it stops the thread and waits for
/// it.
pub(crate) struct AllocTidy {
    stop: Option<Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

/// Sets the workers' tidy and starts the purge thread (none if the thread
/// cannot be made: the broker runs as before, its memory coming back
/// with its next traffic).
pub(crate) fn start() -> AllocTidy {
    wharf::set_worker_tidy(|| {
        // SAFETY: mi_collect takes no pointers and may run on any thread
        // at any time; it collects the calling thread's heap.
        unsafe { libmimalloc_sys::mi_collect(false) }
    });
    let (stop, stopped) = mpsc::channel::<()>();
    let thread = std::thread::Builder::new()
        .name("wharf-alloc".into())
        .stack_size(64 * 1024)
        .spawn(move || {
            while let Err(RecvTimeoutError::Timeout) = stopped.recv_timeout(EVERY) {
                // SAFETY: mi_collect takes no pointers; it is safe to call
                // from any thread at any time.
                unsafe { libmimalloc_sys::mi_collect(false) };
            }
        })
        .map_err(|e| tracing::warn!("no allocator purge thread: {e}"))
        .ok();
    AllocTidy {
        stop: Some(stop),
        thread,
    }
}

impl Drop for AllocTidy {
    fn drop(&mut self) {
        drop(self.stop.take());
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}
