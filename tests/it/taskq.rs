//! Behaviour of the resource task queue under real threads.

use crate::common;

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Barrier, mpsc};
use std::thread;
use std::time::Duration;

use common::{LONG, wait, wait_until};
use wharf::taskq::{Lane, Scheduler, SchedulerConfig, TaskError, TaskQueue};

fn scheduler(capture_threshold: usize, quantum: usize, workers: usize) -> Scheduler {
    Scheduler::new(&SchedulerConfig {
        capture_threshold,
        quantum,
        workers,
        ..SchedulerConfig::default()
    })
    .expect("scheduler starts")
}

fn thread_name() -> String {
    thread::current().name().unwrap_or("").to_owned()
}

/// Runs a task inline on a new thread that blocks inside the resource until
/// the returned sender fires (or is dropped). Returns once the task has
/// started, so the resource is busy; the join handle yields whether the
/// thread's `submit` returned.
fn hold<S: Send + 'static>(q: &TaskQueue<S>) -> (mpsc::Sender<()>, thread::JoinHandle<String>) {
    let (gate_tx, gate_rx) = mpsc::channel::<()>();
    let (started_tx, started_rx) = mpsc::channel::<()>();
    let q = q.clone();
    let handle = thread::Builder::new()
        .name("holder".into())
        .spawn(move || {
            let mut fut = q.submit(move |_| {
                started_tx.send(()).unwrap();
                let _ = gate_rx.recv_timeout(LONG);
                thread_name()
            });
            fut.try_take().expect("ran inline").expect("no panic")
        })
        .unwrap();
    started_rx.recv_timeout(LONG).expect("holder task started");
    (gate_tx, handle)
}

#[test]
fn idle_resource_runs_the_task_inline_on_the_submitter() {
    let s = scheduler(10, 64, 2);
    let q = TaskQueue::new(0u32, &s);
    let me = thread::current().id();
    let mut fut = q.submit(|n| {
        *n += 1;
        thread::current().id()
    });
    assert!(
        fut.is_complete(),
        "an idle resource completes the future at once"
    );
    assert_eq!(fut.try_take(), Some(Ok(me)));
    let stats = q.stats();
    assert_eq!(stats.inline_runs, 1);
    assert_eq!(stats.worker_runs, 0);
    assert_eq!(stats.depth, 0);
}

#[test]
fn many_submitters_exact_total_and_each_submitter_in_order() {
    const THREADS: usize = 4;
    const PER: usize = 5_000;
    let s = scheduler(3, 5, 2);
    let q = TaskQueue::new(Vec::<(usize, usize)>::with_capacity(THREADS * PER), &s);
    let barrier = Arc::new(Barrier::new(THREADS));
    // Start busy so that every submitter meets a queue at least once.
    let (gate, holder) = hold(&q);
    let handles: Vec<_> = (0..THREADS)
        .map(|t| {
            let q = q.clone();
            let barrier = barrier.clone();
            thread::spawn(move || {
                barrier.wait();
                let mut futures = Vec::with_capacity(PER);
                for i in 0..PER {
                    let fut = q.submit(move |log| {
                        log.push((t, i));
                        log.len()
                    });
                    // Await every 7th; drop the others (fire and forget).
                    if i % 7 == 0 {
                        futures.push(fut);
                    }
                }
                for fut in futures {
                    let pos = wait(fut, LONG).expect("completes").expect("no panic");
                    assert!((1..=THREADS * PER).contains(&pos));
                }
            })
        })
        .collect();
    assert!(wait_until(LONG, || q.stats().depth > THREADS));
    gate.send(()).unwrap();
    holder.join().unwrap();
    for h in handles {
        h.join().unwrap();
    }
    let log = wait(q.submit(|log| log.clone()), LONG).unwrap().unwrap();
    assert_eq!(log.len(), THREADS * PER, "every task ran exactly once");
    for t in 0..THREADS {
        let seqs: Vec<usize> = log
            .iter()
            .filter(|(w, _)| *w == t)
            .map(|(_, i)| *i)
            .collect();
        assert_eq!(
            seqs,
            (0..PER).collect::<Vec<_>>(),
            "submitter {t} out of order"
        );
    }
    let total = (THREADS * PER + 2) as u64;
    // Counters are written after a drain returns: wait for the last one.
    assert!(wait_until(LONG, || {
        let st = q.stats();
        st.inline_runs + st.worker_runs == total
    }));
    let st = q.stats();
    assert!(st.depth_high_water > 1, "the test never contended: {st:?}");
}

#[test]
fn exactly_one_thread_runs_a_resource_at_a_time() {
    const THREADS: usize = 4;
    const PER: usize = 20_000;
    struct State {
        inside: Arc<AtomicBool>,
        violations: usize,
        runs: usize,
    }
    let inside = Arc::new(AtomicBool::new(false));
    let s = scheduler(2, 3, 2);
    let q = TaskQueue::new(
        State {
            inside: inside.clone(),
            violations: 0,
            runs: 0,
        },
        &s,
    );
    // Start busy so that the hand-off path is certain to run.
    let (gate, holder) = hold(&q);
    let handles: Vec<_> = (0..THREADS)
        .map(|_| {
            let q = q.clone();
            thread::spawn(move || {
                for _ in 0..PER {
                    drop(q.submit(|st: &mut State| {
                        if st.inside.swap(true, Ordering::SeqCst) {
                            st.violations += 1;
                        }
                        for _ in 0..20 {
                            std::hint::spin_loop();
                        }
                        st.runs += 1;
                        st.inside.store(false, Ordering::SeqCst);
                    }));
                }
            })
        })
        .collect();
    assert!(wait_until(LONG, || q.stats().depth > THREADS));
    gate.send(()).unwrap();
    holder.join().unwrap();
    for h in handles {
        h.join().unwrap();
    }
    let (violations, runs) = wait(q.submit(|st| (st.violations, st.runs)), LONG)
        .unwrap()
        .unwrap();
    assert_eq!(
        violations, 0,
        "two threads were inside the resource at once"
    );
    assert_eq!(runs, THREADS * PER);
    // Counters are written just after the work they count: wait for them.
    assert!(
        wait_until(LONG, || q.stats().worker_runs > 0),
        "contention never reached the workers"
    );
    assert!(wait_until(LONG, || s.stats().handoffs > 0));
}

#[test]
fn past_the_threshold_a_worker_continues_while_the_submitter_returns() {
    let s = scheduler(4, 1000, 1);
    let q = TaskQueue::new(Vec::<(usize, String)>::new(), &s);
    let holder_returned = Arc::new(AtomicBool::new(false));
    let (gate, holder) = hold(&q);
    let returned = holder_returned.clone();
    let holder = thread::spawn(move || {
        let name = holder.join().unwrap();
        returned.store(true, Ordering::SeqCst);
        name
    });
    let mut futures = Vec::new();
    for i in 0..10 {
        let returned = holder_returned.clone();
        futures.push(q.submit(move |log| {
            // Task 7 runs only once the captured submitter is back in its
            // caller: proof that work continued elsewhere.
            let saw_return = i != 7 || wait_until(LONG, || returned.load(Ordering::SeqCst));
            log.push((i, thread_name()));
            saw_return
        }));
    }
    gate.send(()).unwrap();
    for (i, fut) in futures.into_iter().enumerate() {
        assert_eq!(wait(fut, LONG), Some(Ok(true)), "task {i}");
    }
    assert_eq!(holder.join().unwrap(), "holder");
    let log = wait(q.submit(|log| log.clone()), LONG).unwrap().unwrap();
    let order: Vec<usize> = log.iter().map(|(i, _)| *i).collect();
    assert_eq!(order, (0..10).collect::<Vec<_>>());
    for (i, name) in &log {
        if *i < 3 {
            assert_eq!(name, "holder", "task {i} is within the capture threshold");
        } else {
            assert!(name.starts_with("wharf-taskq-"), "task {i} ran on {name:?}");
        }
    }
    // Counters are written after a drain returns: wait for the last one.
    assert!(wait_until(LONG, || {
        let st = q.stats();
        st.inline_runs + st.worker_runs == 12
    }));
    let st = q.stats();
    assert_eq!(st.handoffs, 1);
    assert!(st.worker_runs >= 7, "{st:?}");
    assert!(st.inline_runs >= 4, "{st:?}");
}

#[test]
fn high_priority_tasks_overtake_queued_normal_ones() {
    let s = scheduler(100, 100, 1);
    let q = TaskQueue::new(Vec::<&'static str>::new(), &s);
    let (gate, holder) = hold(&q);
    let mut futures = Vec::new();
    for name in ["n0", "n1", "n2"] {
        futures.push(q.submit(move |log| log.push(name)));
    }
    futures.push(q.submit_high(|log| log.push("h0")));
    futures.push(q.submit_with(Lane::High, |log| log.push("h1")));
    futures.push(q.submit(|log| log.push("n3")));
    gate.send(()).unwrap();
    holder.join().unwrap();
    for fut in futures {
        wait(fut, LONG).unwrap().unwrap();
    }
    let log = wait(q.submit(|log| log.clone()), LONG).unwrap().unwrap();
    assert_eq!(log, ["h0", "h1", "n0", "n1", "n2", "n3"]);
}

#[test]
fn a_panicking_task_is_contained() {
    let s = scheduler(2, 2, 1);
    let q = TaskQueue::new(0u64, &s);

    // Inline.
    let mut fut = q.submit(|_: &mut u64| -> u64 { panic!("boom inline") });
    match fut.try_take() {
        Some(Err(TaskError::Panicked(msg))) => assert!(msg.contains("boom inline"), "{msg}"),
        other => panic!("expected a contained panic, got {other:?}"),
    }
    assert_eq!(
        wait(
            q.submit(|n| {
                *n += 1;
                *n
            }),
            LONG
        ),
        Some(Ok(1))
    );

    // Queued, run by a worker among other tasks.
    let (gate, holder) = hold(&q);
    let mut futures = Vec::new();
    for i in 0..10u64 {
        futures.push(q.submit(move |n| {
            if i == 5 {
                panic!("boom {i}");
            }
            *n += 1;
            *n
        }));
    }
    gate.send(()).unwrap();
    holder.join().unwrap();
    let results: Vec<_> = futures
        .into_iter()
        .map(|f| wait(f, LONG).expect("completes"))
        .collect();
    for (i, r) in results.iter().enumerate() {
        if i == 5 {
            assert_eq!(r, &Err(TaskError::Panicked("boom 5".into())));
        } else {
            assert!(r.is_ok(), "task {i}: {r:?}");
        }
    }
    assert_eq!(wait(q.submit(|n| *n), LONG), Some(Ok(10)));
    // Counters and depth are settled when the runner's drain returns.
    assert!(
        wait_until(LONG, || q.stats().panics == 2),
        "{:?}",
        q.stats()
    );
    assert!(wait_until(LONG, || q.stats().depth == 0), "{:?}", q.stats());
}

#[test]
fn a_worker_requeues_a_hot_resource_after_its_quantum() {
    // One worker, quantum 2. Resource X is handed off first with 40 tasks,
    // then Y with 5. With a quantum, Y finishes long before X; without one,
    // the worker would run all of X first.
    let s = scheduler(1, 2, 1);
    let seq = Arc::new(AtomicUsize::new(0));
    let x = TaskQueue::new(Vec::<usize>::new(), &s);
    let y = TaskQueue::new(Vec::<usize>::new(), &s);
    let (gate_x, holder_x) = hold(&x);
    let (gate_y, holder_y) = hold(&y);
    let x_on_worker = Arc::new(AtomicBool::new(false));
    for i in 0..40 {
        let seq = seq.clone();
        let y = y.clone();
        let x_on_worker = x_on_worker.clone();
        drop(x.submit(move |log| {
            if i == 0 {
                x_on_worker.store(true, Ordering::SeqCst);
            }
            if i == 1 {
                // Y must be in the run queue before X's first quantum ends.
                assert!(wait_until(LONG, || y.stats().handoffs == 1));
            }
            log.push(seq.fetch_add(1, Ordering::SeqCst));
        }));
    }
    for _ in 0..5 {
        let seq = seq.clone();
        drop(y.submit(move |log| log.push(seq.fetch_add(1, Ordering::SeqCst))));
    }
    gate_x.send(()).unwrap();
    holder_x.join().unwrap();
    assert!(wait_until(LONG, || x_on_worker.load(Ordering::SeqCst)));
    gate_y.send(()).unwrap();
    holder_y.join().unwrap();
    let xs = wait(x.submit(|l| l.clone()), LONG).unwrap().unwrap();
    let ys = wait(y.submit(|l| l.clone()), LONG).unwrap().unwrap();
    assert_eq!((xs.len(), ys.len()), (40, 5));
    let y_last = *ys.iter().max().unwrap();
    let x_last = *xs.iter().max().unwrap();
    assert!(
        y_last < 20,
        "Y waited behind X: Y's last ran at {y_last}, X's at {x_last}"
    );
    assert!(wait_until(LONG, || s.stats().requeues > 0));
}

#[test]
fn after_scheduler_shutdown_the_running_thread_drains_everything() {
    let mut s = scheduler(2, 2, 1);
    let q = TaskQueue::new(Vec::<String>::new(), &s);
    assert!(s.shutdown(Duration::from_secs(5)));
    let (gate, holder) = hold(&q);
    let futures: Vec<_> = (0..50)
        .map(|_| q.submit(|log| log.push(thread_name())))
        .collect();
    gate.send(()).unwrap();
    holder.join().unwrap();
    for fut in futures {
        wait(fut, LONG).unwrap().unwrap();
    }
    let log = wait(q.submit(|l| l.clone()), LONG).unwrap().unwrap();
    assert_eq!(log.len(), 50);
    assert!(
        log.iter().all(|n| n == "holder"),
        "no worker after shutdown"
    );
}

#[test]
fn dropped_futures_do_not_cancel_their_tasks() {
    let s = scheduler(1, 1, 1);
    let q = TaskQueue::new(0usize, &s);
    let (gate, holder) = hold(&q);
    for _ in 0..100 {
        drop(q.submit(|n| *n += 1));
    }
    gate.send(()).unwrap();
    holder.join().unwrap();
    assert_eq!(wait(q.submit(|n| *n), LONG), Some(Ok(100)));
}

#[test]
fn a_resource_past_max_depth_refuses_instead_of_queueing() {
    let s = Scheduler::new(&SchedulerConfig {
        max_depth: 5,
        workers: 1,
        ..SchedulerConfig::default()
    })
    .unwrap();
    let q = TaskQueue::new(0usize, &s);
    let (gate, holder) = hold(&q);
    // The holder's task counts as 1: four more fit.
    let accepted: Vec<_> = (0..4).map(|_| q.submit(|n| *n += 1)).collect();
    let mut refused = q.submit(|n| *n += 1);
    assert_eq!(
        refused.try_take(),
        Some(Err(TaskError::Overloaded { depth: 5 }))
    );
    assert_eq!(
        q.execute(Lane::High, |n| *n += 100),
        Err(TaskError::Overloaded { depth: 5 })
    );
    assert_eq!(q.stats().refused, 2);
    gate.send(()).unwrap();
    holder.join().unwrap();
    for fut in accepted {
        wait(fut, LONG).unwrap().unwrap();
    }
    // Drained: accepted again, and nothing refused ever ran.
    assert_eq!(q.execute(Lane::Normal, |n| *n += 1), Ok(()));
    assert_eq!(wait(q.submit(|n| *n), LONG), Some(Ok(5)));
}

#[test]
fn detached_tasks_run_in_order_with_submitted_ones() {
    let s = scheduler(2, 2, 1);
    let q = TaskQueue::new(Vec::<u32>::new(), &s);
    let (gate, holder) = hold(&q);
    for i in 0..20u32 {
        if i % 2 == 0 {
            q.execute(Lane::Normal, move |log| log.push(i)).unwrap();
        } else {
            drop(q.submit(move |log| log.push(i)));
        }
    }
    // A panicking detached task is contained and counted.
    q.execute(Lane::Normal, |_| panic!("detached boom"))
        .unwrap();
    gate.send(()).unwrap();
    holder.join().unwrap();
    let log = wait(q.submit(|l| l.clone()), LONG).unwrap().unwrap();
    assert_eq!(log, (0..20).collect::<Vec<_>>());
    assert!(wait_until(LONG, || q.stats().panics == 1));
}

#[test]
fn every_awaited_queued_task_wakes_its_waiter() {
    // Each submitter waits on each future in turn while other threads keep
    // the resource busy, so most futures are polled (and register a waker)
    // before their task runs. A lost wake-up would stall `wait` until its
    // deadline and fail the test.
    const THREADS: usize = 4;
    const PER: usize = 2_000;
    let s = scheduler(1, 4, 1);
    let q = TaskQueue::new(0u64, &s);
    // Start busy so that every submitter's first future is certainly
    // waited on before its task runs.
    let (gate, holder) = hold(&q);
    let handles: Vec<_> = (0..THREADS)
        .map(|_| {
            let q = q.clone();
            thread::spawn(move || {
                let mut polled_pending = 0;
                for _ in 0..PER {
                    let fut = q.submit(|n| {
                        for _ in 0..50 {
                            std::hint::spin_loop();
                        }
                        *n += 1;
                        *n
                    });
                    if !fut.is_complete() {
                        polled_pending += 1;
                    }
                    wait(fut, Duration::from_secs(10))
                        .expect("woken in time")
                        .expect("no panic");
                }
                polled_pending
            })
        })
        .collect();
    assert!(wait_until(LONG, || q.stats().depth > THREADS));
    gate.send(()).unwrap();
    holder.join().unwrap();
    let pending: usize = handles.into_iter().map(|h| h.join().unwrap()).sum();
    assert!(pending >= THREADS, "only {pending} futures were waited on");
    assert_eq!(
        wait(q.submit(|n| *n), LONG),
        Some(Ok((THREADS * PER) as u64))
    );
}

#[test]
fn a_closed_resource_runs_what_it_had_and_refuses_the_rest() {
    let s = scheduler(64, 16, 1);
    let q = TaskQueue::new((), &s);
    // What ran, in order (outside the state: a closed resource takes no
    // task to read it).
    let ran = Arc::new(std::sync::Mutex::new(Vec::new()));
    let record = |i: u32| {
        let ran = ran.clone();
        move |_: &mut ()| ran.lock().unwrap().push(i)
    };
    let (gate, holder) = hold(&q);
    // Queued behind the holder, in both lanes.
    let queued: Vec<_> = (1..=3).map(|i| q.submit(record(i))).collect();
    let high = q.submit_high(record(100));
    assert_eq!(q.execute(Lane::Normal, record(4)), Ok(()));
    let mut closed = q.close();
    assert!(q.is_closed());
    assert_eq!(closed.try_take(), None, "five tasks are still queued");
    // Refused at once, in every form, while the queued ones wait.
    let mut late = q.submit(record(99));
    assert_eq!(late.try_take(), Some(Err(TaskError::Closed)));
    assert_eq!(q.execute(Lane::High, record(98)), Err(TaskError::Closed));
    assert_eq!(q.stats().refused, 0, "a close is not an overload");
    gate.send(()).unwrap();
    holder.join().unwrap();
    assert_eq!(wait(closed, LONG), Some(Ok(())));
    for fut in queued {
        assert_eq!(wait(fut, LONG), Some(Ok(())));
    }
    assert_eq!(wait(high, LONG), Some(Ok(())));
    // Everything submitted before the close ran, high lane first, then in
    // submission order; nothing after it did.
    assert_eq!(*ran.lock().unwrap(), [100, 1, 2, 3, 4]);
    // A second close is harmless and resolves at once (nothing queued).
    assert_eq!(q.close().try_take(), Some(Ok(())));
    assert_eq!(ran.lock().unwrap().len(), 5);
}
