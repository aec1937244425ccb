//! A histogram of fixed buckets kept in atomics, for events that happen
//! at most tens of thousands of times a second on one thread (a store
//! commit): recording is a few relaxed adds, no lock, and the scrape
//! reads the buckets. `GET /metrics` encodes it as an OpenMetrics
//! histogram.

use std::sync::atomic::{AtomicU64, Ordering};

/// A distribution of observations over fixed upper bounds.
#[derive(Debug)]
pub struct Histogram {
    bounds: &'static [f64],
    /// One more than `bounds`: the last counts what is above them all.
    counts: Box<[AtomicU64]>,
    /// The sum of observations, as f64 bits (one writer at a time in
    /// practice; a lost update under a race only blurs the sum).
    sum_bits: AtomicU64,
}

impl Histogram {
    /// A histogram over `bounds` (ascending upper bounds).
    pub fn new(bounds: &'static [f64]) -> Histogram {
        Histogram {
            bounds,
            counts: (0..=bounds.len()).map(|_| AtomicU64::new(0)).collect(),
            sum_bits: AtomicU64::new(0f64.to_bits()),
        }
    }

    /// Records one observation.
    pub fn observe(&self, v: f64) {
        let i = self.bounds.partition_point(|&b| b < v);
        self.counts[i].fetch_add(1, Ordering::Relaxed);
        let sum = f64::from_bits(self.sum_bits.load(Ordering::Relaxed)) + v;
        self.sum_bits.store(sum.to_bits(), Ordering::Relaxed);
    }

    /// (sum, count, buckets as (upper bound, count in that bucket alone)),
    /// the last bucket's bound being `f64::MAX`, which the OpenMetrics
    /// encoder writes as `+Inf`.
    pub fn read(&self) -> (f64, u64, Vec<(f64, u64)>) {
        let mut buckets = Vec::with_capacity(self.counts.len());
        let mut count = 0;
        for (i, c) in self.counts.iter().enumerate() {
            let n = c.load(Ordering::Relaxed);
            count += n;
            let bound = self.bounds.get(i).copied().unwrap_or(f64::MAX);
            buckets.push((bound, n));
        }
        (
            f64::from_bits(self.sum_bits.load(Ordering::Relaxed)),
            count,
            buckets,
        )
    }
}

/// What the store writer measures of its commits.
#[derive(Debug)]
pub struct StoreStats {
    /// Submissions (writes of one caller) per commit group.
    pub batch: Histogram,
    /// Seconds to make a group durable (flush and fsync).
    pub durable_seconds: Histogram,
}

impl Default for StoreStats {
    fn default() -> Self {
        StoreStats {
            batch: Histogram::new(&[
                1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0, 1024.0, 4096.0,
            ]),
            durable_seconds: Histogram::new(&[
                0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0,
            ]),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn observations_land_in_their_buckets() {
        let h = Histogram::new(&[1.0, 10.0]);
        for v in [0.5, 1.0, 2.0, 10.0, 11.0, 100.0] {
            h.observe(v);
        }
        let (sum, count, buckets) = h.read();
        assert_eq!(count, 6);
        assert!((sum - 124.5).abs() < 1e-9);
        assert_eq!(buckets, vec![(1.0, 2), (10.0, 2), (f64::MAX, 2)]);
    }
}
