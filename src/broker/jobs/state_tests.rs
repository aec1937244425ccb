//! Unit tests of [`JobsState`]'s tasks without sockets or a task queue:
//! each test calls the tasks directly with a fake clock (`now` in ms).

use std::sync::{Arc, Mutex};

use tokio::sync::oneshot;
use uuid::Uuid;

use super::state::JobsState;
use super::{JobError, JobStatus, NewJob, Outcome};
use crate::config::{JobKindConfig, JobsConfig};

/// A state without a store, and the ids `on_dead` was called with.
fn state(cfg: JobsConfig) -> (JobsState, Arc<Mutex<Vec<Uuid>>>) {
    let dead = Arc::new(Mutex::new(Vec::new()));
    let seen = dead.clone();
    let on_dead = Box::new(move |j: &super::JobRecord| {
        if let Ok(mut d) = seen.lock() {
            d.push(j.id);
        }
    });
    (JobsState::new(cfg, None, on_dead), dead)
}

fn job(kind: &str) -> NewJob {
    NewJob {
        kind: kind.into(),
        entity_id: Uuid::nil(),
        data: serde_json::json!({"n": 1}),
        priority: 0,
        timeout_ms: None,
    }
}

fn enqueue(s: &mut JobsState, new: NewJob, now: u64) -> Uuid {
    let (id, durable) = s.enqueue(new, now).expect("enqueue");
    assert!(durable.is_none(), "no store, nothing to await");
    id
}

fn status(s: &JobsState, id: Uuid) -> JobStatus {
    s.status(id).expect("job exists").status
}

#[test]
fn enqueue_dequeue_outcome_succeeded() {
    let (mut s, dead) = state(JobsConfig::default());
    let id = enqueue(&mut s, job("email"), 1_000);
    assert_eq!(status(&s, id), JobStatus::Queued);
    let (worker, lease) = s
        .register(vec!["email".into()], "anonymous".into(), 1_000)
        .expect("register");
    assert_eq!(lease, 30_000);

    let got = s
        .dequeue(worker, None, 0, 1_010)
        .expect("dequeue")
        .expect("a job");
    assert_eq!(got.id, id);
    assert_eq!(got.status, JobStatus::Running);
    assert_eq!((got.attempt, got.token), (1, Some(1)));
    assert_eq!(got.worker_id, Some(worker));
    assert_eq!(got.started_ms, Some(1_010));
    assert_eq!(s.counts().running, 1);

    let (st, durable) = s
        .outcome(id, worker, 1, Outcome::Succeeded, None, 1_020)
        .expect("outcome");
    assert!(durable.is_none());
    assert_eq!(st, JobStatus::Succeeded);
    assert_eq!(status(&s, id), JobStatus::Succeeded);
    assert_eq!(s.counts().running, 0);
    assert!(dead.lock().expect("lock").is_empty());
}

#[test]
fn a_worker_of_other_kinds_gets_nothing() {
    let (mut s, _) = state(JobsConfig::default());
    enqueue(&mut s, job("email"), 0);
    let (worker, _) = s
        .register(vec!["sms".into()], "anonymous".into(), 0)
        .expect("register");
    assert_eq!(s.dequeue(worker, None, 0, 1).expect("dequeue"), None);
}

#[test]
fn a_parked_dequeue_gets_the_next_job() {
    let (mut s, _) = state(JobsConfig::default());
    let (worker, _) = s
        .register(Vec::new(), "anonymous".into(), 0)
        .expect("register");
    let (tx, mut rx) = oneshot::channel();
    assert_eq!(
        s.dequeue(worker, Some(tx), 5_000, 0).expect("dequeue"),
        None
    );
    assert_eq!(s.counts().waiting, 1);
    let id = enqueue(&mut s, job("email"), 10);
    let got = rx.try_recv().expect("handed to the waiter");
    assert_eq!((got.id, got.token), (id, Some(1)));
    assert_eq!(s.counts().waiting, 0);
}

#[test]
fn an_expired_lease_requeues_the_running_job_keeping_its_attempt() {
    let cfg = JobsConfig {
        worker_lease_ms: 1_000,
        ..JobsConfig::default()
    };
    let (mut s, _) = state(cfg);
    let id = enqueue(&mut s, job("email"), 0);
    let (w1, _) = s
        .register(Vec::new(), "anonymous".into(), 0)
        .expect("register");
    s.dequeue(w1, None, 0, 0).expect("dequeue").expect("a job");

    // Still valid one ms before the lease ends.
    s.tick(999);
    assert_eq!(status(&s, id), JobStatus::Running);
    s.tick(1_000);
    let view = s.status(id).expect("job");
    assert_eq!(view.status, JobStatus::Queued);
    assert_eq!(view.attempt, 1, "a lost lease is not an attempt's end");
    assert_eq!(view.worker_id, None);
    assert_eq!(s.counts().workers, 0);

    // The expired worker is refused; a new one gets the next attempt.
    assert_eq!(
        s.outcome(id, w1, 1, Outcome::Succeeded, None, 1_001).err(),
        Some(JobError::WorkerExpired)
    );
    assert!(!s.ping(w1, 1_001));
    let (w2, _) = s
        .register(Vec::new(), "anonymous".into(), 1_001)
        .expect("register");
    let got = s
        .dequeue(w2, None, 0, 1_002)
        .expect("dequeue")
        .expect("a job");
    assert_eq!((got.id, got.attempt, got.token), (id, 2, Some(2)));
}

#[test]
fn a_ping_keeps_the_lease() {
    let cfg = JobsConfig {
        worker_lease_ms: 1_000,
        ..JobsConfig::default()
    };
    let (mut s, _) = state(cfg);
    let (w, _) = s
        .register(Vec::new(), "anonymous".into(), 0)
        .expect("register");
    assert!(s.ping(w, 900));
    s.tick(1_500);
    assert!(s.is_valid(w, 1_500));
    assert!(!s.is_valid(w, 1_900));
}

#[test]
fn an_outcome_with_a_stale_token_is_refused_and_changes_nothing() {
    let (mut s, _) = state(JobsConfig::default());
    let id = enqueue(&mut s, job("email"), 0);
    let (w, _) = s
        .register(Vec::new(), "anonymous".into(), 0)
        .expect("register");
    let (other, _) = s
        .register(Vec::new(), "anonymous".into(), 0)
        .expect("register");
    s.dequeue(w, None, 0, 1).expect("dequeue").expect("a job");

    let stale = JobError::StaleToken {
        current: 1,
        status: JobStatus::Running,
    };
    assert_eq!(
        s.outcome(id, w, 2, Outcome::Succeeded, None, 2).err(),
        Some(stale.clone())
    );
    assert_eq!(
        s.outcome(id, other, 1, Outcome::Failed, None, 2).err(),
        Some(stale)
    );
    assert_eq!(
        s.outcome(Uuid::nil(), w, 1, Outcome::Succeeded, None, 2)
            .err(),
        Some(JobError::UnknownJob)
    );
    let view = s.status(id).expect("job");
    assert_eq!((view.status, view.attempt), (JobStatus::Running, 1));

    // The right token is taken once; a second outcome is stale.
    s.outcome(id, w, 1, Outcome::Succeeded, None, 3)
        .expect("outcome");
    assert_eq!(
        s.outcome(id, w, 1, Outcome::Failed, None, 4).err(),
        Some(JobError::StaleToken {
            current: 1,
            status: JobStatus::Succeeded,
        })
    );
}

#[test]
fn a_timed_out_attempt_retries_while_attempts_remain_then_dies() {
    let cfg = JobsConfig {
        kinds: vec![JobKindConfig {
            name: "email".into(),
            max_attempts: Some(2),
            backoff_ms: Some(vec![500]),
            timeout_ms: Some(100),
            retry_timed_out: Some(true),
        }],
        ..JobsConfig::default()
    };
    let (mut s, dead) = state(cfg);
    let id = enqueue(&mut s, job("email"), 0);
    assert_eq!(s.status(id).expect("job").timeout_ms, Some(100));
    let (w, _) = s
        .register(Vec::new(), "anonymous".into(), 0)
        .expect("register");
    s.dequeue(w, None, 0, 0).expect("dequeue").expect("a job");

    // Attempt 1 of 2 times out: retried after the backoff.
    s.tick(99);
    assert_eq!(status(&s, id), JobStatus::Running);
    s.tick(100);
    let view = s.status(id).expect("job");
    assert_eq!(view.status, JobStatus::TimedOut);
    assert_eq!(view.retry_at_ms, Some(600));
    assert_eq!(view.error.as_deref(), Some("execution timeout"));
    assert_eq!(s.dequeue(w, None, 0, 101).expect("dequeue"), None);
    // The worker's late outcome for that attempt is stale.
    assert!(matches!(
        s.outcome(id, w, 1, Outcome::Succeeded, None, 102),
        Err(JobError::StaleToken { .. })
    ));
    s.tick(600);
    assert_eq!(status(&s, id), JobStatus::Queued);

    // Attempt 2 of 2 times out: dead, and on_dead runs.
    let got = s.dequeue(w, None, 0, 600).expect("dequeue").expect("a job");
    assert_eq!(got.token, Some(2));
    assert!(dead.lock().expect("lock").is_empty());
    s.tick(700);
    assert_eq!(status(&s, id), JobStatus::Dead);
    assert_eq!(*dead.lock().expect("lock"), vec![id]);
}

#[test]
fn a_reported_failure_retries_then_dies() {
    let cfg = JobsConfig {
        max_attempts: 2,
        backoff_ms: Vec::new(),
        retry_timed_out: true,
        ..JobsConfig::default()
    };
    let (mut s, dead) = state(cfg);
    let id = enqueue(&mut s, job("email"), 0);
    let (w, _) = s
        .register(Vec::new(), "anonymous".into(), 0)
        .expect("register");
    s.dequeue(w, None, 0, 1).expect("dequeue").expect("a job");
    let err = Some("smtp".to_owned());
    // No backoff: queued again at once.
    let (st, _) = s
        .outcome(id, w, 1, Outcome::TimedOut, err.clone(), 2)
        .expect("outcome");
    assert_eq!(st, JobStatus::Queued);
    s.dequeue(w, None, 0, 3).expect("dequeue").expect("a job");
    let (st, _) = s
        .outcome(id, w, 2, Outcome::Failed, err, 4)
        .expect("outcome");
    assert_eq!(st, JobStatus::Dead);
    assert_eq!(s.status(id).expect("job").error.as_deref(), Some("smtp"));
    assert_eq!(*dead.lock().expect("lock"), vec![id]);
}

#[test]
fn a_timed_out_job_ends_timed_out_unless_its_kind_retries_timeouts() {
    let cfg = JobsConfig {
        timeout_ms: 100,
        kinds: vec![JobKindConfig {
            name: "retried".into(),
            retry_timed_out: Some(true),
            ..JobKindConfig::default()
        }],
        ..JobsConfig::default()
    };
    let (mut s, dead) = state(cfg);
    let reported = enqueue(&mut s, job("email"), 0);
    let expired = enqueue(&mut s, job("email"), 0);
    let retried = enqueue(&mut s, job("retried"), 0);
    let (w, _) = s
        .register(Vec::new(), "anonymous".into(), 0)
        .expect("register");
    for _ in 0..3 {
        s.dequeue(w, None, 0, 0).expect("dequeue").expect("a job");
    }
    // The worker reports a timeout: final, not dead, nothing to retry.
    let (st, _) = s
        .outcome(reported, w, 1, Outcome::TimedOut, None, 10)
        .expect("outcome");
    assert_eq!(st, JobStatus::TimedOut);
    // The execution timeout: the same; the kind that opts in waits for
    // its retry.
    s.tick(100);
    let view = s.status(expired).expect("job");
    assert_eq!((view.status, view.retry_at_ms), (JobStatus::TimedOut, None));
    let view = s.status(retried).expect("job");
    assert_eq!(view.status, JobStatus::TimedOut);
    assert!(view.retry_at_ms.is_some());
    assert!(dead.lock().expect("lock").is_empty());
    s.tick(100_000);
    assert_eq!(status(&s, reported), JobStatus::TimedOut);
    assert_eq!(status(&s, retried), JobStatus::Queued);
    // A final timed-out job cannot be cancelled; an operator's retry
    // queues it again with fresh attempts.
    assert!(matches!(
        s.cancel(reported, 100_001),
        Err(JobError::Conflict(_))
    ));
    s.retry(reported, 100_002).expect("retry");
    let view = s.status(reported).expect("job");
    assert_eq!((view.status, view.attempt), (JobStatus::Queued, 0));
}

#[test]
fn finished_jobs_go_after_their_retention() {
    let cfg = JobsConfig {
        retention_s: 10,
        ..JobsConfig::default()
    };
    let (mut s, _) = state(cfg);
    let id = enqueue(&mut s, job("email"), 0);
    let (w, _) = s
        .register(Vec::new(), "anonymous".into(), 0)
        .expect("register");
    s.dequeue(w, None, 0, 0).expect("dequeue").expect("a job");
    s.outcome(id, w, 1, Outcome::Succeeded, None, 1_000)
        .expect("outcome");
    s.tick(10_999);
    assert!(s.status(id).is_some());
    s.tick(11_000);
    assert!(s.status(id).is_none());
}

#[test]
fn a_worker_answers_only_to_the_principal_that_registered_it() {
    let (mut s, _) = state(JobsConfig::default());
    let (w, _) = s
        .register(Vec::new(), "token:billing".into(), 0)
        .expect("register");
    assert_eq!(s.check_owner(w, "token:billing"), Ok(()));
    assert_eq!(
        s.check_owner(w, "jwt:billing"),
        Err(JobError::NotYourWorker)
    );
    // An unknown worker is the operation's to refuse (worker_expired).
    assert_eq!(s.check_owner(Uuid::nil(), "jwt:billing"), Ok(()));
}

#[test]
fn jobs_taken_over_forget_what_was_here_and_requeue_what_was_running() {
    let (mut s, _) = state(JobsConfig::default());
    let stale = enqueue(&mut s, job("email"), 1_000);
    let (worker, _) = s
        .register(vec![], "anonymous".into(), 1_000)
        .expect("register");
    let (tx, mut parked) = oneshot::channel();
    assert!(
        s.dequeue(worker, None, 0, 1_001)
            .expect("dequeue")
            .is_some()
    );
    assert!(
        s.dequeue(worker, Some(tx), 5_000, 1_002)
            .expect("park")
            .is_none()
    );
    // The records another node's journal holds: one running there.
    let id = Uuid::now_v7();
    let record: super::JobRecord = serde_json::from_value(serde_json::json!({
        "id": id, "kind": "email", "entity_id": Uuid::nil(), "data": {},
        "priority": 0, "timeout_ms": null, "status": "running", "attempt": 2,
        "worker": Uuid::now_v7(), "started_ms": 900, "created_ms": 800,
        "updated_ms": 900, "error": null, "retry_at_ms": null
    }))
    .expect("a record");
    s.reset();
    s.restore(vec![record], 2_000);
    assert!(s.status(stale).is_none(), "what was here is gone");
    assert!(
        matches!(parked.try_recv(), Err(oneshot::error::TryRecvError::Closed)),
        "the parked dequeue ended"
    );
    assert!(!s.is_valid(worker, 2_000), "workers register again");
    let view = s.status(id).expect("the installed job");
    assert_eq!((view.status, view.attempt), (JobStatus::Queued, 2));
    assert_eq!(s.counts().ready, 1);
}
