//! The jobs resource survives its home (`[cluster] failover`): three
//! nodes on one `nats-server` with JetStream, the jobs' home a real
//! `wharf` binary killed with SIGKILL and never started again. Another
//! member takes the jobs' lease, installs the records from the journal
//! and serves them: every confirmed job is there, finished ones as they
//! finished, the one running at the dead home queued again (its attempt
//! kept), and a worker on another node that registers again works the
//! rest.

use crate::common;

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use common::{ChildBroker, LONG, TestBroker};
use serde_json::{Value, json};

use crate::cluster::{MEMBERS, Nats, as_member, status};
/// Jobs enqueued before the home dies.
const N: usize = 30;
/// Of them, finished before it dies.
const DONE: usize = 10;
const LEASE_MS: u64 = 2_000;

fn post(addr: SocketAddr, path: &str, body: Value) -> (u16, Value) {
    let (code, text) = common::http(addr, "POST", path, &body.to_string());
    (code, serde_json::from_str(&text).unwrap_or(Value::Null))
}

fn get(addr: SocketAddr, path: &str) -> (u16, Value) {
    let (code, text) = common::http(addr, "GET", path, "");
    (code, serde_json::from_str(&text).unwrap_or(Value::Null))
}

/// Calls `f` until it gives something or `within` passes (a bounded
/// poll: the cluster needs a lease to run out and a takeover).
fn until<T>(within: Duration, what: &str, mut f: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + within;
    loop {
        if let Some(t) = f() {
            return t;
        }
        assert!(Instant::now() < deadline, "not within {within:?}: {what}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The member the jobs are homed on first, and the other two.
fn jobs_home() -> (String, Vec<&'static str>) {
    let members: Vec<String> = MEMBERS.iter().map(|m| (*m).to_owned()).collect();
    let home = wharf::cluster::home::rendezvous(&members, "jobs")
        .expect("a home for the jobs")
        .to_owned();
    let others = MEMBERS.iter().copied().filter(|m| *m != home).collect();
    (home, others)
}

fn in_process(nats: &str, name: &str) -> TestBroker {
    let (nats, name) = (nats.to_owned(), name.to_owned());
    let node = TestBroker::start(move |c| {
        as_member(c, nats, name);
        c.cluster.failover = true;
        c.cluster.lease_ms = LEASE_MS;
    });
    status(&node);
    node
}

fn child(dir: &std::path::Path, nats: &str, name: &str) -> (ChildBroker, SocketAddr) {
    let config = dir.join("home.toml");
    let members: Vec<String> = MEMBERS.iter().map(|m| format!("\"{m}\"")).collect();
    std::fs::write(
        &config,
        format!(
            "[cluster]\nnats = [\"{nats}\"]\nnode = \"{name}\"\nmembers = [{}]\n\
             connect_timeout_ms = 2000\nfailover = true\nlease_ms = {LEASE_MS}\n",
            members.join(", ")
        ),
    )
    .expect("the home's config is written");
    let data = dir.join("home-data");
    let child = ChildBroker::serve_config(&config, &data);
    let addr = child.address();
    (child, addr)
}

/// A worker registered through `addr` for kind `resize`.
fn register(addr: SocketAddr) -> Option<String> {
    let (code, w) = post(addr, "/workers", json!({"kinds": ["resize"]}));
    (code == 201).then(|| w["worker_id"].as_str().map(str::to_owned))?
}

/// The worker's next job through `addr` (id, token), if one came.
fn dequeue(addr: SocketAddr, worker: &str) -> Result<Option<(String, u64)>, (u16, Value)> {
    let (code, job) = post(
        addr,
        &format!("/workers/{worker}/dequeue?wait_ms=1000"),
        json!({}),
    );
    match code {
        200 => Ok(Some((
            job["id"].as_str().unwrap_or_default().to_owned(),
            job["token"].as_u64().unwrap_or_default(),
        ))),
        204 => Ok(None),
        _ => Err((code, job)),
    }
}

fn succeed(addr: SocketAddr, worker: &str, id: &str, token: u64) -> (u16, Value) {
    post(
        addr,
        &format!("/jobs/{id}/outcome"),
        json!({"worker_id": worker, "token": token, "outcome": "succeeded"}),
    )
}

#[test]
fn the_jobs_whose_home_is_killed_are_served_by_another_member_with_every_confirmed_job() {
    let nats = Nats::start();
    let (home, others) = jobs_home();
    let dir = tempfile::tempdir().expect("a directory for the home");
    let (mut h, h_addr) = child(dir.path(), &nats.url(), &home);
    let (x, y) = (
        in_process(&nats.url(), others[0]),
        in_process(&nats.url(), others[1]),
    );

    // The home takes the jobs' lease at its first call (or sooner), and
    // the others read it.
    let (code, body) = get(h_addr, "/jobs?limit=1");
    assert_eq!(code, 200, "the home serves the jobs: {body}");
    for n in [&x, &y] {
        until(LONG, "the others know the jobs' home", || {
            let f = &status(n)["failover"];
            (status(n)["jobs_home"] == home.as_str() && f.is_object()).then_some(())
        });
    }
    // N jobs enqueued on x, confirmed by the home.
    let ids: Vec<String> = (0..N)
        .map(|i| {
            let (code, job) = post(
                x.addr,
                "/jobs",
                json!({
                    "kind": "resize",
                    "entity_id": "0190a6f0-0000-7000-8000-000000000001",
                    "data": {"n": i},
                }),
            );
            assert_eq!(code, 201, "enqueued on x: {job}");
            job["id"].as_str().expect("an id").to_owned()
        })
        .collect();
    assert_eq!(status(&x)["jobs_home"], home.as_str());
    // A worker on y finishes DONE jobs and holds one more, running.
    let worker = register(y.addr).expect("a worker registered through y");
    let mut finished = BTreeSet::new();
    while finished.len() < DONE {
        let (id, token) = dequeue(y.addr, &worker)
            .expect("a dequeue through y")
            .expect("a job for the worker");
        let (code, body) = succeed(y.addr, &worker, &id, token);
        assert_eq!(code, 200, "{body}");
        finished.insert(id);
    }
    let (running, running_token) = dequeue(y.addr, &worker)
        .expect("a dequeue through y")
        .expect("one more job");

    h.child.kill().expect("SIGKILL the jobs' home");
    assert!(!h.wait_exit(LONG).success(), "the home was killed");
    let killed = Instant::now();

    // The old worker is gone with its home; its outcome is refused.
    let new_worker = until(Duration::from_secs(30), "a worker registered again", || {
        register(y.addr)
    });
    let served = killed.elapsed();
    let (code, body) = succeed(y.addr, &worker, &running, running_token);
    assert!(
        (400..500).contains(&code),
        "the dead home's worker is not known at the new home: {code} {body}"
    );
    // Every unfinished job comes to the new worker, the one that was
    // running included, each once.
    let mut rest = BTreeSet::new();
    let deadline = Instant::now() + LONG;
    while rest.len() < N - DONE {
        assert!(
            Instant::now() < deadline,
            "{} of {} unfinished jobs after the failover; x: {}",
            rest.len(),
            N - DONE,
            status(&x)
        );
        match dequeue(y.addr, &new_worker) {
            Ok(Some((id, token))) => {
                assert!(!finished.contains(&id), "a finished job ran again: {id}");
                assert!(rest.insert(id.clone()), "a job handed out twice: {id}");
                let (code, body) = succeed(y.addr, &new_worker, &id, token);
                assert_eq!(code, 200, "{body}");
            }
            Ok(None) => {}
            Err((code, body)) => panic!("a dequeue after the failover: {code} {body}"),
        }
    }
    assert!(rest.contains(&running), "the job running at the dead home");
    // Every node sees every job succeeded, at its first attempt but the
    // one that was running: its second, or its first again when the
    // record of its assignment (written without waiting) had not
    // reached the journal.
    for id in &ids {
        let (code, job) = get(x.addr, &format!("/jobs/{id}"));
        assert_eq!(code, 200, "{job}");
        assert_eq!(job["status"], "succeeded", "{job}");
        let attempt = job["attempt"].as_u64().unwrap_or_default();
        if *id == running {
            assert!(attempt == 1 || attempt == 2, "{job}");
        } else {
            assert_eq!(attempt, 1, "{job}");
        }
    }
    let new_home = status(&x)["jobs_home"].as_str().map(str::to_owned);
    let holder = [&x, &y]
        .into_iter()
        .find(|n| Some(status(n)["node"].as_str().unwrap_or_default()) == new_home.as_deref())
        .expect("a survivor holds the jobs");
    let f = &status(holder)["failover"];
    assert!(
        f["leases"]
            .as_array()
            .is_some_and(|l| l.contains(&json!("jobs"))),
        "{f}"
    );
    // The jobs keep working: one enqueued on x now is worked through y.
    let (code, job) = post(
        x.addr,
        "/jobs",
        json!({"kind": "resize", "entity_id": "0190a6f0-0000-7000-8000-000000000002", "data": {}}),
    );
    assert_eq!(code, 201, "{job}");
    let (id, token) = until(LONG, "the job enqueued after the failover", || {
        dequeue(y.addr, &new_worker).ok().flatten()
    });
    assert_eq!(id, job["id"].as_str().unwrap_or_default());
    assert_eq!(succeed(y.addr, &new_worker, &id, token).0, 200);
    eprintln!(
        "jobs served again {served:?} after their home's death, at {}",
        new_home.unwrap_or_default()
    );
}

/// Failover turned on for a cluster whose jobs' home already holds jobs:
/// its first takeover starts the jobs' journal from its store (nothing is
/// lost), and when it stops it gives the lease up, so another member
/// serves every job at once, finished ones as they finished.
#[test]
fn turning_failover_on_keeps_the_jobs_and_a_stopping_home_hands_them_over() {
    let nats = Nats::start();
    let (home, others) = jobs_home();
    let data = tempfile::tempdir().expect("the home's store");
    let before = TestBroker::start_in(data.path(), |_| {});
    let ids: Vec<String> = (0..5)
        .map(|i| {
            let (code, job) = post(
                before.addr,
                "/jobs",
                json!({"kind": "resize", "entity_id": "0190a6f0-0000-7000-8000-000000000001", "data": {"n": i}}),
            );
            assert_eq!(code, 201, "{job}");
            job["id"].as_str().expect("an id").to_owned()
        })
        .collect();
    let worker = register(before.addr).expect("a worker");
    let (done, token) = dequeue(before.addr, &worker)
        .expect("a dequeue")
        .expect("a job");
    assert_eq!(succeed(before.addr, &worker, &done, token).0, 200);
    before.stop().expect("the node stops");

    let (nats_url, name) = (nats.url(), home.clone());
    let h = TestBroker::start_in(data.path(), move |c| {
        c.cluster.nats = vec![nats_url];
        c.cluster.node = name;
        c.cluster.connect_timeout_ms = 2_000;
        c.cluster.members = MEMBERS.iter().map(|m| (*m).to_owned()).collect();
        c.cluster.failover = true;
        c.cluster.lease_ms = 60_000;
    });
    status(&h);
    let x = in_process(&nats.url(), others[0]);
    // Every job, as the home's store held it, asked through another node.
    for id in &ids {
        let (code, job) = until(LONG, "the jobs served through x", || {
            let (code, job) = get(x.addr, &format!("/jobs/{id}"));
            (code == 200).then_some((code, job))
        });
        let want = if *id == done { "succeeded" } else { "queued" };
        assert_eq!((code, job["status"].as_str()), (200, Some(want)), "{job}");
    }
    assert!(
        status(&h)["failover"]["leases"]
            .as_array()
            .is_some_and(|l| l.contains(&json!("jobs"))),
        "the home holds the jobs' lease: {}",
        status(&h)
    );
    let stopped = Instant::now();
    h.stop().expect("the home stops");
    // A 60 s lease given up, not left to run out: x (or the third
    // member, not started, so x) serves the jobs well before.
    let worker = until(Duration::from_secs(20), "a worker registered at x", || {
        register(x.addr)
    });
    let mut left = BTreeSet::new();
    while left.len() < 4 {
        let (id, token) = until(LONG, "the queued jobs at the new home", || {
            dequeue(x.addr, &worker).ok().flatten()
        });
        assert_ne!(id, done, "a finished job ran again");
        assert!(left.insert(id.clone()), "a job handed out twice: {id}");
        assert_eq!(succeed(x.addr, &worker, &id, token).0, 200);
    }
    let taken = stopped.elapsed();
    assert!(
        taken < Duration::from_secs(30),
        "the stopping home gave the jobs' lease up: {taken:?}"
    );
    let (code, job) = get(x.addr, &format!("/jobs/{done}"));
    assert_eq!((code, job["status"].as_str()), (200, Some("succeeded")));
}
