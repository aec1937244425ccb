//! Lets the allocator the program links give back what idle threads
//! freed.
//!
//! mimalloc (the `wharf` binary's allocator) returns freed memory to the
//! system only when the thread that owns it next calls into it. A worker
//! that goes quiet after a load (closed connections, drained queues, a
//! fan-out's outbound queues) would keep that memory until traffic came
//! again: an idle broker held 830 MB after a 1 -> 50 benchmark. The
//! library does not know the allocator; the binary hands it a function
//! ([`set_worker_tidy`]) that the server's workers and the task queue's
//! run once each time they fall idle (a second without traffic). Only
//! then: giving back hundreds of megabytes takes the kernel tens of
//! milliseconds, which a busy worker's connections would wait out (run
//! every second regardless, it put 20-40 ms stalls into a 1,000 msg/s
//! latency run).

use std::cell::Cell;
use std::sync::OnceLock;
use std::time::Duration;

/// How often a server worker looks at its traffic.
const EVERY: Duration = Duration::from_secs(1);
/// Quiet seconds in which a worker tidies after traffic: mimalloc purges
/// pages some time after they were freed (its purge delay), at its next
/// call.
const QUIET_TIDIES: u8 = 10;

static TIDY: OnceLock<fn()> = OnceLock::new();

/// Sets a function that gives back the calling thread's freed memory
/// (the `wharf` binary passes mimalloc's `mi_collect`): [`crate::serve`]'s
/// HTTP and MQTT workers and the task queue's workers run it when they
/// fall idle. Without it nothing runs. The first call wins.
pub fn set_worker_tidy(tidy: fn()) {
    let _ = TIDY.set(tidy);
}

/// Runs the function on this thread, if one was set.
pub(crate) fn tidy() {
    if let Some(tidy) = TIDY.get() {
        tidy();
    }
}

thread_local! {
    /// Connection reads and writes on this thread, counted so that its
    /// tidy task can tell a quiet second from a busy one.
    static TRAFFIC: Cell<u64> = const { Cell::new(0) };
}

/// Counts traffic on this thread (a connection read or wrote): its tidy
/// task waits for a second without any.
pub(crate) fn traffic() {
    TRAFFIC.set(TRAFFIC.get().wrapping_add(1));
}

/// Starts the tidy task on this server worker thread (once per thread;
/// called from the servers' per-worker factories): once a second it
/// looks at the thread's traffic, and after traffic runs the function in
/// each of the next [`QUIET_TIDIES`] seconds without any (the allocator
/// frees pages at the first and gives them to the system at a later one,
/// once its purge delay has passed). It ends with the worker's runtime.
pub(crate) fn start_on_this_worker() {
    thread_local! {
        static STARTED: Cell<bool> = const { Cell::new(false) };
    }
    if TIDY.get().is_none() || STARTED.replace(true) {
        return;
    }
    actix_rt::spawn(async move {
        let mut every = actix_rt::time::interval(EVERY);
        let mut seen = TRAFFIC.get();
        let mut left = 0;
        loop {
            every.tick().await;
            let now = TRAFFIC.get();
            if now != seen {
                seen = now;
                left = QUIET_TIDIES;
            } else if left > 0 {
                tidy();
                left -= 1;
            }
        }
    });
}
