//! What counting costs on the publish path: one `Metrics::publish` (the
//! counters a publish adds to) against a single shared `AtomicU64` and
//! against nothing, single-threaded and with two threads adding at once.
//!
//! `cargo bench --bench counters`

use std::hint::black_box;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use criterion::{Criterion, criterion_group, criterion_main};
use wharf::metrics::Metrics;

fn single(c: &mut Criterion) {
    let mut g = c.benchmark_group("count one publish, 1 thread");
    let m = Metrics::default();
    g.bench_function("Metrics::publish (sharded)", |b| {
        b.iter(|| m.publish(black_box(1), black_box(0)))
    });
    let a = AtomicU64::new(0);
    g.bench_function("one shared AtomicU64", |b| {
        b.iter(|| a.fetch_add(black_box(1), Ordering::Relaxed))
    });
    g.bench_function("nothing", |b| b.iter(|| black_box(1u64)));
    g.finish();
}

/// Two threads counting `iters` publishes each; the time of one thread.
fn two_threads(iters: u64, add: Arc<dyn Fn() + Send + Sync>) -> Duration {
    let other = {
        let add = add.clone();
        std::thread::spawn(move || {
            for _ in 0..iters {
                add();
            }
        })
    };
    let start = Instant::now();
    for _ in 0..iters {
        add();
    }
    let took = start.elapsed();
    let _ = other.join();
    took
}

fn contended(c: &mut Criterion) {
    let mut g = c.benchmark_group("count one publish, 2 threads");
    let m = Arc::new(Metrics::default());
    g.bench_function("Metrics::publish (sharded)", |b| {
        let m = m.clone();
        b.iter_custom(|iters| {
            let m = m.clone();
            two_threads(iters, Arc::new(move || m.publish(1, 0)))
        })
    });
    let a = Arc::new([AtomicU64::new(0), AtomicU64::new(0)]);
    g.bench_function("shared AtomicU64s", |b| {
        let a = a.clone();
        b.iter_custom(|iters| {
            let a = a.clone();
            two_threads(
                iters,
                Arc::new(move || {
                    a[0].fetch_add(1, Ordering::Relaxed);
                    a[1].fetch_add(1, Ordering::Relaxed);
                }),
            )
        })
    });
    g.finish();
}

criterion_group!(benches, single, contended);
criterion_main!(benches);
