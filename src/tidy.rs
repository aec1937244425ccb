//! Lets the allocator the program links give back what idle threads
//! freed.
//!
//! mimalloc (the `wharf` binary's allocator) returns freed memory to the
//! system only when the thread that owns it next calls into it. A worker
//! that goes quiet after a load (closed connections, drained queues, a
//! fan-out's outbound queues) would keep that memory until traffic came
//! again: an idle broker held 830 MB after a 1 -> 50 benchmark. The
//! library does not know the allocator; the binary hands it a function
//! ([`set_worker_tidy`]) that the server's workers run once a second and
//! the task queue's workers once each time they fall idle.

use std::sync::OnceLock;
use std::time::Duration;

/// How often the server's workers run the function.
const EVERY: Duration = Duration::from_secs(1);

static TIDY: OnceLock<fn()> = OnceLock::new();

/// Sets a function that gives back the calling thread's freed memory
/// (the `wharf` binary passes mimalloc's `mi_collect`): [`crate::serve`]'s
/// HTTP and MQTT workers run it once a second, the task queue's workers
/// when they fall idle. Without it nothing runs. The first call wins.
pub fn set_worker_tidy(tidy: fn()) {
    let _ = TIDY.set(tidy);
}

/// Runs the function on this thread, if one was set.
pub(crate) fn tidy() {
    if let Some(tidy) = TIDY.get() {
        tidy();
    }
}

/// Starts the once-a-second task on this server worker thread (once per
/// thread; called from the servers' per-worker factories). It ends with
/// the worker's runtime.
pub(crate) fn start_on_this_worker() {
    thread_local! {
        static STARTED: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
    }
    if TIDY.get().is_none() || STARTED.replace(true) {
        return;
    }
    actix_rt::spawn(async move {
        let mut every = actix_rt::time::interval(EVERY);
        loop {
            every.tick().await;
            tidy();
        }
    });
}
