//! Gives memory freed under load back to the system while the broker is
//! idle.
//!
//! mimalloc returns freed pages to the system ("purges" them) only after
//! a delay, and only when some thread next calls into the allocator. A
//! broker that goes quiet after a burst of traffic (a fan-out that filled
//! outbound queues, thousands of connections that closed) makes no such
//! call, so the freed memory stayed resident until the next traffic: an
//! idle broker held 830 MB after a 1 -> 50 benchmark, and 5,000 closed
//! WebSocket connections' memory came back only when their drain timers
//! fired, 10 s later. A thread of the binary's own asks mimalloc to
//! collect once a second; with nothing to purge that is a few atomic
//! reads. The library leaves the allocator to whoever embeds it.

use std::sync::mpsc::{self, RecvTimeoutError, Sender};
use std::thread::JoinHandle;
use std::time::Duration;

/// How often the allocator is asked to purge: its purge delay is 1 s.
const EVERY: Duration = Duration::from_secs(1);

/// The running purge thread; dropping it stops the thread and waits for
/// it.
pub(crate) struct AllocTidy {
    stop: Option<Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

/// Starts the purge thread (none if the thread cannot be made: the broker
/// runs as before, its memory coming back with its next traffic).
pub(crate) fn start() -> AllocTidy {
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
