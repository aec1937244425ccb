//! A counter for the hot path: one cache-line-padded atomic per shard,
//! each thread adding to its own shard, so threads that publish at once
//! never contend on one cache line; a scrape sums the shards.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use crossbeam_utils::CachePadded;

/// Shards per counter: more than the threads that usually add at once
/// (I/O threads plus task-queue workers), a power of two.
const SHARDS: usize = 16;

static NEXT_SHARD: AtomicUsize = AtomicUsize::new(0);

thread_local! {
    /// This thread's shard, given out round robin on first use.
    static SHARD: usize = NEXT_SHARD.fetch_add(1, Ordering::Relaxed) % SHARDS;
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
        let i = SHARD.with(|s| *s);
        self.shards[i].fetch_add(n, Ordering::Relaxed);
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
        let threads: Vec<_> = (0..8)
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
        assert_eq!(c.get(), 80_005);
    }
}
