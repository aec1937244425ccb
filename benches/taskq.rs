//! The resource task queue against the alternatives it replaces, in one run:
//! a `std::sync::Mutex`, a `parking_lot::Mutex`, an actix actor
//! (`Addr::send(..).await`), and a tokio task fed by an mpsc channel with a
//! oneshot reply. One resource holds a counter and a bounded `VecDeque`.
//!
//! `cargo bench --bench taskq`, then `python3 benches/table.py` for the table
//! in benches/README.md.

use std::collections::VecDeque;
use std::future::Future;
use std::hint::black_box;
use std::pin::pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Barrier, mpsc};
use std::task::{Context, Poll, Waker};
use std::thread;
use std::time::{Duration, Instant};

use actix::prelude::*;
use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use wharf::taskq::{Lane, Scheduler, SchedulerConfig, TaskQueue};

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// The resource state every variant protects.
#[derive(Default)]
struct Res {
    count: u64,
    log: VecDeque<u64>,
}

impl Res {
    #[inline]
    fn op(&mut self) -> u64 {
        self.count += 1;
        self.log.push_back(self.count);
        if self.log.len() > 64 {
            self.log.pop_front();
        }
        self.count
    }
}

/// Polls once with a no-op waker; `None` if not complete yet.
fn poll_maybe<F: Future + Unpin>(fut: &mut F) -> Option<F::Output> {
    let mut cx = Context::from_waker(Waker::noop());
    match std::pin::Pin::new(fut).poll(&mut cx) {
        Poll::Ready(v) => Some(v),
        Poll::Pending => None,
    }
}

/// Polls a future once with a no-op waker: what `.await` costs on a future
/// that is already complete.
#[inline]
fn poll_ready<F: Future>(fut: F) -> F::Output {
    let mut cx = Context::from_waker(Waker::noop());
    match pin!(fut).poll(&mut cx) {
        Poll::Ready(v) => v,
        Poll::Pending => panic!("expected an inline completion"),
    }
}

// ---- actix actor -------------------------------------------------------

struct CounterActor {
    res: Res,
    done: Arc<AtomicU64>,
}

impl actix::Actor for CounterActor {
    type Context = actix::Context<Self>;
}

#[derive(Message)]
#[rtype(result = "u64")]
struct Op;

impl Handler<Op> for CounterActor {
    type Result = u64;
    fn handle(&mut self, _: Op, _: &mut Self::Context) -> u64 {
        let n = self.res.op();
        self.done.store(n, Ordering::Release);
        n
    }
}

// ---- tokio task + mpsc + oneshot ---------------------------------------

type Reply = tokio::sync::oneshot::Sender<u64>;

async fn tokio_resource(
    mut rx: tokio::sync::mpsc::UnboundedReceiver<Option<Reply>>,
    done: Arc<AtomicU64>,
) {
    let mut res = Res::default();
    while let Some(reply) = rx.recv().await {
        let n = res.op();
        done.store(n, Ordering::Release);
        if let Some(reply) = reply {
            let _ = reply.send(n);
        }
    }
}

fn wait_for(done: &AtomicU64, target: u64) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while done.load(Ordering::Acquire) < target {
        assert!(Instant::now() < deadline, "resource stalled");
        thread::yield_now();
    }
}

/// The scheduler under test: 2 workers and the default threshold and
/// quantum; `XW`, `XT` and `XQ` in the environment override workers,
/// capture threshold and quantum for exploring. The default depth bound
/// (100,000): a submitter refused as overloaded yields and retries, which
/// is the back-pressure a real caller applies.
fn config() -> SchedulerConfig {
    let env = |k: &str, d: usize| {
        std::env::var(k)
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(d)
    };
    SchedulerConfig {
        workers: env("XW", 2),
        capture_threshold: env("XT", 10),
        quantum: env("XQ", 64),
        ..SchedulerConfig::default()
    }
}

fn uncontended(c: &mut Criterion) {
    let mut g = c.benchmark_group("uncontended");
    g.throughput(Throughput::Elements(1));

    let scheduler = Scheduler::new(&config()).unwrap();
    let q = TaskQueue::new(Res::default(), &scheduler);
    g.bench_function("a_taskq_submit_await", |b| {
        b.iter(|| black_box(poll_ready(q.submit(|r: &mut Res| r.op())).unwrap()))
    });

    let m = std::sync::Mutex::new(Res::default());
    g.bench_function("b_std_mutex", |b| {
        b.iter(|| black_box(m.lock().unwrap().op()))
    });

    let pm = parking_lot::Mutex::new(Res::default());
    g.bench_function("b_parking_lot_mutex", |b| {
        b.iter(|| black_box(pm.lock().op()))
    });

    g.bench_function("c_actix_send_await", |b| {
        b.iter_custom(|iters| {
            actix_rt::System::new().block_on(async move {
                let addr = CounterActor {
                    res: Res::default(),
                    done: Arc::default(),
                }
                .start();
                let start = Instant::now();
                for _ in 0..iters {
                    black_box(addr.send(Op).await.unwrap());
                }
                start.elapsed()
            })
        })
    });

    g.bench_function("d_tokio_mpsc_oneshot", |b| {
        b.iter_custom(|iters| {
            let rt = tokio::runtime::Builder::new_current_thread()
                .build()
                .unwrap();
            rt.block_on(async move {
                let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
                tokio::spawn(tokio_resource(rx, Arc::default()));
                let start = Instant::now();
                for _ in 0..iters {
                    let (rtx, rrx) = tokio::sync::oneshot::channel();
                    tx.send(Some(rtx)).unwrap();
                    black_box(rrx.await.unwrap());
                }
                start.elapsed()
            })
        })
    });
    g.finish();
}

/// Two threads each submit `iters` operations without waiting for results;
/// the time is until the resource has applied all of them.
fn two_submitters(c: &mut Criterion) {
    let mut g = c.benchmark_group("two_submitters_fire_and_forget");
    g.throughput(Throughput::Elements(2));

    fn run_two(
        iters: u64,
        submit: impl Fn() + Send + Sync + 'static,
        wait_all: impl FnOnce(u64),
    ) -> Duration {
        let submit = Arc::new(submit);
        let barrier = Arc::new(Barrier::new(3));
        let threads: Vec<_> = (0..2)
            .map(|_| {
                let submit = submit.clone();
                let barrier = barrier.clone();
                thread::spawn(move || {
                    barrier.wait();
                    for _ in 0..iters {
                        submit();
                    }
                })
            })
            .collect();
        barrier.wait();
        let start = Instant::now();
        for t in threads {
            t.join().unwrap();
        }
        wait_all(2 * iters);
        start.elapsed()
    }

    let scheduler = Scheduler::new(&config()).unwrap();
    /// Waits until the queue has applied `n` operations, by submitting a
    /// reading task (it runs after every task already queued).
    fn wait_queue(q: &TaskQueue<Res>, n: u64) {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let mut fut = q.submit(|r: &mut Res| r.count);
            let count = loop {
                match poll_maybe(&mut fut) {
                    Some(c) => break c.unwrap(),
                    None => thread::yield_now(),
                }
            };
            if count >= n {
                return;
            }
            assert!(Instant::now() < deadline, "queue stalled at {count}/{n}");
            thread::yield_now();
        }
    }
    g.bench_function("a_taskq_submit", |b| {
        b.iter_custom(|iters| {
            let q = TaskQueue::new(Res::default(), &scheduler);
            let q2 = q.clone();
            run_two(
                iters,
                move || {
                    while let Some(Err(_)) = q2.submit(|r: &mut Res| r.op()).try_take() {
                        thread::yield_now();
                    }
                },
                |n| wait_queue(&q, n),
            )
        })
    });
    g.bench_function("a_taskq_execute", |b| {
        b.iter_custom(|iters| {
            let q = TaskQueue::new(Res::default(), &scheduler);
            let q2 = q.clone();
            run_two(
                iters,
                move || {
                    while q2
                        .execute(Lane::Normal, |r: &mut Res| {
                            r.op();
                        })
                        .is_err()
                    {
                        thread::yield_now();
                    }
                },
                |n| wait_queue(&q, n),
            )
        })
    });

    g.bench_function("b_std_mutex", |b| {
        b.iter_custom(|iters| {
            let m = Arc::new(std::sync::Mutex::new(Res::default()));
            let m2 = m.clone();
            run_two(
                iters,
                move || {
                    black_box(m2.lock().unwrap().op());
                },
                |n| assert_eq!(m.lock().unwrap().count, n),
            )
        })
    });

    g.bench_function("b_parking_lot_mutex", |b| {
        b.iter_custom(|iters| {
            let m = Arc::new(parking_lot::Mutex::new(Res::default()));
            let m2 = m.clone();
            run_two(
                iters,
                move || {
                    black_box(m2.lock().op());
                },
                |n| assert_eq!(m.lock().count, n),
            )
        })
    });

    g.bench_function("c_actix_do_send", |b| {
        b.iter_custom(|iters| {
            let done = Arc::new(AtomicU64::new(0));
            let (addr_tx, addr_rx) = mpsc::channel();
            let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
            let d = done.clone();
            let system = thread::spawn(move || {
                actix_rt::System::new().block_on(async move {
                    let addr = CounterActor {
                        res: Res::default(),
                        done: d,
                    }
                    .start();
                    addr_tx.send(addr).unwrap();
                    let _ = stop_rx.await;
                })
            });
            let addr: Addr<CounterActor> = addr_rx.recv().unwrap();
            let elapsed = run_two(iters, move || addr.do_send(Op), |n| wait_for(&done, n));
            let _ = stop_tx.send(());
            system.join().unwrap();
            elapsed
        })
    });

    g.bench_function("d_tokio_mpsc_task", |b| {
        b.iter_custom(|iters| {
            let done = Arc::new(AtomicU64::new(0));
            let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
            let d = done.clone();
            let runtime = thread::spawn(move || {
                let rt = tokio::runtime::Builder::new_current_thread()
                    .build()
                    .unwrap();
                rt.block_on(tokio_resource(rx, d));
            });
            let tx2 = tx.clone();
            let elapsed = run_two(
                iters,
                move || tx2.send(None).unwrap(),
                |n| wait_for(&done, n),
            );
            drop(tx);
            runtime.join().unwrap();
            elapsed
        })
    });
    g.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3))
        .sample_size(30);
    targets = uncontended, two_submitters
}
criterion_main!(benches);
