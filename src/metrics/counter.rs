//! A counter for the hot path: one cache-line-padded atomic per shard.
//! The first [`OWNED`] threads that count each own a shard, which only
//! they write, so adding is a plain load and store (no locked
//! instruction, no shared cache line); later threads share the last
//! shard with an atomic add. A scrape sums the shards.

use std::cell::Cell;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use crossbeam_utils::CachePadded;

/// Shards per counter: the owned ones and one shared.
const SHARDS: usize = 64;
/// Threads that get a shard of their own (I/O threads, task-queue
/// workers, the blocking pool's first threads).
pub const OWNED: usize = SHARDS - 1;

static NEXT_SHARD: AtomicUsize = AtomicUsize::new(0);

thread_local! {
    /// This thread's shard, given out round robin on first use
    /// (`usize::MAX` until then; a const initializer keeps the lookup a
    /// plain thread-local read).
    static SHARD: Cell<usize> = const { Cell::new(usize::MAX) };
}

/// This thread's shard: look it up once when adding to several counters.
#[inline]
pub fn shard() -> usize {
    SHARD.with(|s| {
        let i = s.get();
        if i < SHARDS {
            return i;
        }
        // Handed out once each; past OWNED every thread shares the last.
        let i = NEXT_SHARD.fetch_add(1, Ordering::Relaxed).min(OWNED);
        s.set(i);
        i
    })
}

/// A monotonically increasing count, cheap to add to from many threads.
#[derive(Debug)]
pub struct Counter {
    shards: Box<[CachePadded<AtomicU64>; SHARDS]>,
}

impl Default for Counter {
    fn default() -> Self {
        Counter {
            shards: Box::new(std::array::from_fn(|_| CachePadded::new(AtomicU64::new(0)))),
        }
    }
}

impl Counter {
    /// Adds `n` on this thread's shard.
    #[inline]
    pub fn add(&self, n: u64) {
        self.add_at(shard(), n);
    }

    /// Adds `n` on shard `i`, which must come from [`shard`] on this
    /// thread.
    #[inline]
    pub fn add_at(&self, i: usize, n: u64) {
        match self.shards.get(i) {
            // Only this thread writes an owned shard: no read-modify-write
            // needed, and readers see whole values (atomic load, store).
            Some(owned) if i < OWNED => {
                owned.store(
                    owned.load(Ordering::Relaxed).wrapping_add(n),
                    Ordering::Relaxed,
                );
            }
            _ => {
                self.shards[OWNED].fetch_add(n, Ordering::Relaxed);
            }
        }
    }

    /// The sum of every shard (a scrape's read; not a snapshot of one
    /// instant, which Prometheus counters do not need).
    pub fn get(&self) -> u64 {
        self.shards
            .iter()
            .map(|s| s.load(Ordering::Relaxed))
            .fold(0u64, u64::wrapping_add)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn adds_from_many_threads_sum_exactly() {
        let c = std::sync::Arc::new(Counter::default());
        // More threads than owned shards: the rest share one.
        let threads: Vec<_> = (0..OWNED + 8)
            .map(|_| {
                let c = c.clone();
                std::thread::spawn(move || {
                    for _ in 0..10_000 {
                        c.add(1);
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        c.add(5);
        assert_eq!(c.get(), (OWNED as u64 + 8) * 10_000 + 5);
    }
}
