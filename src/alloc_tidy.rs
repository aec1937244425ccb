//! The binary's side of giving freed memory back: mimalloc's calls.
//!
//! mimalloc gives freed memory back to the system a while after it was
//! freed (pages after its purge delay, whole arena ranges after ten
//! times that), at some thread's next call into it. Its default delay of
//! a second put the arenas' purge at ten seconds, so a broker whose
//! 10,000 connections had closed still held a third more than before
//! them ten seconds later; [`start`] sets 10 ms (a page freed is purged
//! 10 ms later, an arena range 100 ms after), which brings that to 7-12%
//! at 10,000 and 18,900 connections in most runs (two of about twenty:
//! 15% and 31%) with no throughput lost (benches/README.md; 100 ms left
//! 12-33% in most runs at 18,900; purging at once, delay 0, cost MQTT
//! over WebSocket ~10%). Idle workers make no call, so [`start`] hands the
//! library `mi_collect` for its workers to run on their own heaps once
//! they fall quiet ([`wharf::set_worker_tidy`]); and
//! since the call that finds hundreds of megabytes due (after a
//! fan-out's queues drained) spends tens of milliseconds in the kernel,
//! which a worker's connections would wait out, a thread of its own
//! makes that call four times a second, so the purge happens there, off
//! the workers.
//!
//! mimalloc frees a page only once every block in it is free, and it
//! extends a page's free list a few KiB at a time, never taking the
//! extension back. A burst of connections extends the pages that the
//! broker's long-lived objects keep to their full 64 KiB, and after the
//! burst each such page holds a few live blocks at its start and ~60 KiB
//! of free ones, resident for good: ~0.6 MiB in all, most of what a
//! broker kept after 5,000 connections closed (+4-5%). So the workers'
//! tidy also trims their pages (`src/alloc_trim.c`, [`trim_pages`]): the
//! free blocks past a page's last live one leave its free list and its
//! capacity, and their memory goes back with `madvise`; the page extends
//! again when it is next used. `WHARF_ALLOC_TRIM=0` turns it off.

use std::sync::mpsc::{self, RecvTimeoutError, Sender};
use std::thread::JoinHandle;
use std::time::Duration;

/// How often the allocator is asked to purge what is due (pages 10 ms
/// after they were freed, arena ranges 100 ms after): often enough to
/// come before the workers' own tidies.
const EVERY: Duration = Duration::from_millis(250);

/// mimalloc v3's `mi_option_purge_delay` (libmimalloc-sys names no
/// constant for it; the enum in v3's mimalloc.h).
const PURGE_DELAY: libmimalloc_sys::mi_option_t = 15;
/// v3's default for it (ms): finding it there says the index still names
/// that option.
const PURGE_DELAY_DEFAULT: std::os::raw::c_long = 1000;
/// Ours (ms): 10. At 100 (a page purged 100 ms after it was freed, an
/// arena range a second after) a broker whose 10,000 or 18,900
/// connections had closed still held 12-33% more than before them ten
/// seconds later in most runs; at 10, 7-12% in most runs (two of about
/// twenty: 15% and 31%), and no throughput lost; 0 purges on every free
/// and cost MQTT over WebSocket ~10% (benches/README.md, 2026-11-26).
const PURGE_DELAY_MS: std::os::raw::c_long = 10;

/// Shortens mimalloc's purge delay to [`PURGE_DELAY_MS`], unless the
/// environment set it (`MIMALLOC_PURGE_DELAY`) or the option is not
/// where v3 keeps it.
fn shorten_purge_delay() {
    if std::env::var_os("MIMALLOC_PURGE_DELAY").is_some() {
        return;
    }
    // SAFETY: mi_option_get and mi_option_set take an option index and a
    // value, no pointers; options may be read and set at any time.
    unsafe {
        if libmimalloc_sys::mi_option_get(PURGE_DELAY) == PURGE_DELAY_DEFAULT {
            libmimalloc_sys::mi_option_set(PURGE_DELAY, PURGE_DELAY_MS);
        }
    }
}

#[cfg(wharf_alloc_trim)]
unsafe extern "C" {
    /// src/alloc_trim.c: trims the calling thread's pages, returns the
    /// bytes given back.
    fn wharf_mi_trim_pages() -> usize;
    /// src/alloc_trim.c: whether the linked library lays its pages out as
    /// the trim reads them.
    fn wharf_mi_trim_check() -> bool;
}

/// Whether the workers' tidy trims pages: unless `WHARF_ALLOC_TRIM=0`
/// (a way back, should the trim ever be suspected).
static TRIM: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(true);

/// Whether the trim may run: the library the binary links lays its pages
/// out as src/alloc_trim.c reads them (a check of one allocation's page).
fn trim_fits() -> bool {
    #[cfg(wharf_alloc_trim)]
    {
        // SAFETY: allocates and frees one block on this thread, and reads
        // the page and heap it came from.
        if unsafe { wharf_mi_trim_check() } {
            return true;
        }
        tracing::warn!("mimalloc's pages are not laid out as the page trim reads them: no trim");
    }
    false
}

/// Gives back the free tail of each of this thread's pages past its last
/// live block (src/alloc_trim.c), once a whole OS page.
fn trim_pages() {
    if !TRIM.load(std::sync::atomic::Ordering::Relaxed) {
        return;
    }
    #[cfg(wharf_alloc_trim)]
    // SAFETY: it works on the calling thread's own heap, which allocates
    // nothing while it runs (this thread is in the call).
    unsafe {
        wharf_mi_trim_pages();
    }
}

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
    shorten_purge_delay();
    if std::env::var_os("WHARF_ALLOC_TRIM").is_some_and(|v| v == "0") || !trim_fits() {
        TRIM.store(false, std::sync::atomic::Ordering::Relaxed);
    }
    wharf::set_worker_tidy(|| {
        // SAFETY: mi_collect takes no pointers and may run on any thread
        // at any time; it collects the calling thread's heap.
        unsafe { libmimalloc_sys::mi_collect(false) };
        trim_pages();
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

#[cfg(test)]
mod tests {
    use super::*;

    /// The index this file uses still names v3's purge delay: its default
    /// is there (a mimalloc that moved it would fail here rather than
    /// have another option set), and it can be shortened.
    #[test]
    fn the_purge_delay_is_where_v3_keeps_it() {
        if std::env::var_os("MIMALLOC_PURGE_DELAY").is_some() {
            return;
        }
        // SAFETY: as in shorten_purge_delay.
        let before = unsafe { libmimalloc_sys::mi_option_get(PURGE_DELAY) };
        assert!(
            before == PURGE_DELAY_DEFAULT || before == PURGE_DELAY_MS,
            "option {PURGE_DELAY} is {before}"
        );
        shorten_purge_delay();
        // SAFETY: as above.
        assert_eq!(
            unsafe { libmimalloc_sys::mi_option_get(PURGE_DELAY) },
            PURGE_DELAY_MS
        );
    }

    /// Fills a block with a pattern its owner can check.
    #[cfg(wharf_alloc_trim)]
    fn block(len: usize, seed: usize) -> Vec<u8> {
        let mut v = Vec::with_capacity(len);
        v.extend((0..len).map(|i| (i ^ seed) as u8));
        v
    }

    #[cfg(wharf_alloc_trim)]
    fn intact(v: &[u8], seed: usize) -> bool {
        v.iter().enumerate().all(|(i, b)| *b == (i ^ seed) as u8)
    }

    /// The library the binary links is the one the trim reads.
    #[cfg(wharf_alloc_trim)]
    #[test]
    fn the_linked_mimalloc_is_laid_out_as_the_trim_reads_it() {
        assert!(trim_fits());
    }

    /// A burst extends a page that a few live blocks keep; the trim gives
    /// its free tail back, and the page serves (and extends) again after.
    #[cfg(wharf_alloc_trim)]
    #[test]
    fn a_burst_page_kept_by_a_few_blocks_gives_its_tail_back() {
        // A thread of its own: its heap holds only what this test makes.
        std::thread::spawn(|| {
            let kept: Vec<Vec<u8>> = (0..8).map(|i| block(48, i)).collect();
            let burst: Vec<Vec<u8>> = (0..20_000).map(|i| block(48, i)).collect();
            drop(burst);
            // SAFETY: this thread's own heap; it allocates nothing meanwhile.
            let given = unsafe { wharf_mi_trim_pages() };
            assert!(given >= 32 * 1024, "gave back {given} bytes");
            // SAFETY: as above; nothing is left to give back.
            assert_eq!(unsafe { wharf_mi_trim_pages() }, 0);
            let again: Vec<Vec<u8>> = (0..20_000).map(|i| block(48, i + 7)).collect();
            assert!(again.iter().enumerate().all(|(i, v)| intact(v, i + 7)));
            assert!(kept.iter().enumerate().all(|(i, v)| intact(v, i)));
        })
        .join()
        .expect("the trim thread");
    }

    /// Trims racing with frees from other threads and with the pages'
    /// reuse never hand out a block twice or lose one that is alive: every
    /// block keeps its pattern to the end.
    #[cfg(wharf_alloc_trim)]
    #[test]
    fn trims_among_cross_thread_frees_keep_every_live_block() {
        use std::sync::mpsc;
        const THREADS: usize = 3;
        const ROUNDS: usize = 40;
        let (senders, receivers): (Vec<_>, Vec<_>) = (0..THREADS)
            .map(|_| mpsc::channel::<(Vec<u8>, usize)>())
            .unzip();
        let mut workers = Vec::new();
        for (t, inbox) in receivers.into_iter().enumerate() {
            let next = senders[(t + 1) % THREADS].clone();
            workers.push(std::thread::spawn(move || {
                let mut kept = Vec::new();
                for round in 0..ROUNDS {
                    let mut burst = Vec::new();
                    for i in 0..3_000 {
                        let seed = t * 1_000_000 + round * 10_000 + i;
                        let v = block(1 + (i * 37) % 700, seed);
                        match i % 3 {
                            0 => {
                                let _ = next.send((v, seed));
                            }
                            1 if i % 300 == 1 => kept.push((v, seed)),
                            _ => burst.push((v, seed)),
                        }
                    }
                    // Free from the middle out, then take in what the
                    // neighbour freed here, checking each.
                    while let Some((v, seed)) = burst.pop() {
                        assert!(intact(&v, seed), "a burst block was overwritten");
                    }
                    while let Ok((v, seed)) = inbox.try_recv() {
                        assert!(intact(&v, seed), "a sent block was overwritten");
                    }
                    // SAFETY: this thread's own heap, between its own uses.
                    unsafe { wharf_mi_trim_pages() };
                    assert!(
                        kept.iter().all(|(v, s)| intact(v, *s)),
                        "a kept block was overwritten"
                    );
                }
                kept.len()
            }));
        }
        drop(senders);
        for w in workers {
            assert!(w.join().expect("a worker") > 0);
        }
    }
}
