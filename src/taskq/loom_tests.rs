//! Model checks of the claim protocol with loom: every interleaving of a few
//! submitters (bounded preemptions) must run each task exactly once, one at
//! a time, in each submitter's order, and leave the resource idle.
//!
//! Run with `cargo nextest run --features loom --lib loom_`.

use std::sync::Arc as StdArc;

use loom::sync::Arc;
use loom::thread;

use super::claim::{Core, Entry, Lane};

type Job = Box<dyn FnOnce(&mut Vec<(usize, usize)>) + Send>;
type TestCore = Core<Vec<(usize, usize)>, Job>;

/// Submits like `TaskQueue::submit`, but with no worker pool: the claim
/// holder drains until idle.
fn submit(core: &TestCore, lane: Lane, job: Job) {
    match core.enter() {
        Entry::Claimed(mut running) => {
            running.with_state(|s| job(s));
            if let Some(pending) = running.finish() {
                let (_, rest) = pending.drain(usize::MAX, |s, job| job(s), |_| {});
                assert!(rest.is_none(), "an unbounded drain ends idle");
            }
        }
        Entry::Busy { .. } => core.push(job, lane),
    }
}

/// Like `submit`, but the holder drains one task at a time and "hands off"
/// by giving the claim up and resuming it, as the pool path does.
fn submit_with_handoff(core: &TestCore, job: Job) {
    match core.enter() {
        Entry::Claimed(mut running) => {
            running.with_state(|s| job(s));
            let mut next = running.finish();
            while let Some(pending) = next {
                let (_, rest) = pending.drain(1, |s, job| job(s), |_| {});
                next = rest.map(|p| {
                    p.hand_off();
                    // SAFETY: given up just above, resumed once.
                    unsafe { core.resume() }
                });
            }
        }
        Entry::Busy { .. } => core.push(job, Lane::Normal),
    }
}

fn record(who: usize, seq: usize) -> Job {
    Box::new(move |log: &mut Vec<(usize, usize)>| log.push((who, seq)))
}

/// After all submitters joined: the resource is idle (we claim it inline)
/// and the log has every task once, each submitter's in order.
fn check_final(core: &TestCore, submitters: usize, per: usize) {
    let log = StdArc::new(std::sync::Mutex::new(Vec::new()));
    let out = log.clone();
    match core.enter() {
        Entry::Claimed(mut running) => {
            running.with_state(|s| *out.lock().unwrap() = s.clone());
            assert!(running.finish().is_none(), "nothing may be left queued");
        }
        Entry::Busy { depth } => panic!("resource still busy after joins (depth {depth})"),
    }
    let log = log.lock().unwrap().clone();
    assert_eq!(
        log.len(),
        submitters * per,
        "every task ran exactly once: {log:?}"
    );
    for who in 0..submitters {
        let seqs: Vec<usize> = log
            .iter()
            .filter(|(w, _)| *w == who)
            .map(|(_, s)| *s)
            .collect();
        assert_eq!(
            seqs,
            (0..per).collect::<Vec<_>>(),
            "submitter {who} order in {log:?}"
        );
    }
}

fn model(f: impl Fn() + Sync + Send + 'static) {
    let mut builder = loom::model::Builder::new();
    builder.preemption_bound = Some(3);
    builder.check(f);
}

#[test]
fn loom_two_submitters_keep_order_and_exclusivity() {
    model(|| {
        let core: Arc<TestCore> = Arc::new(Core::new(Vec::new()));
        let handles: Vec<_> = (0..2)
            .map(|who| {
                let core = core.clone();
                thread::spawn(move || {
                    for seq in 0..2 {
                        submit(&core, Lane::Normal, record(who, seq));
                    }
                })
            })
            .collect();
        for h in handles {
            h.join().unwrap();
        }
        check_final(&core, 2, 2);
    });
}

#[test]
fn loom_three_submitters_one_task_each() {
    model(|| {
        let core: Arc<TestCore> = Arc::new(Core::new(Vec::new()));
        let handles: Vec<_> = (0..3)
            .map(|who| {
                let core = core.clone();
                thread::spawn(move || submit(&core, Lane::Normal, record(who, 0)))
            })
            .collect();
        for h in handles {
            h.join().unwrap();
        }
        check_final(&core, 3, 1);
    });
}

#[test]
fn loom_handoff_keeps_the_claim() {
    model(|| {
        let core: Arc<TestCore> = Arc::new(Core::new(Vec::new()));
        let other = core.clone();
        let t = thread::spawn(move || {
            for seq in 0..2 {
                submit_with_handoff(&other, record(1, seq));
            }
        });
        for seq in 0..2 {
            submit_with_handoff(&core, record(0, seq));
        }
        t.join().unwrap();
        check_final(&core, 2, 2);
    });
}

#[test]
fn loom_high_lane_mixed_with_normal() {
    model(|| {
        let core: Arc<TestCore> = Arc::new(Core::new(Vec::new()));
        let other = core.clone();
        let t = thread::spawn(move || {
            submit(&other, Lane::High, record(1, 0));
            submit(&other, Lane::High, record(1, 1));
        });
        submit(&core, Lane::Normal, record(0, 0));
        submit(&core, Lane::Normal, record(0, 1));
        t.join().unwrap();
        check_final(&core, 2, 2);
    });
}
