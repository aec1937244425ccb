//! Jobs and workers over HTTP on loopback, with a plain HTTP client.

use crate::common;

use std::time::{Duration, Instant};

use common::{TestBroker, http};
use serde_json::{Value, json};

fn post(b: &TestBroker, path: &str, body: Value) -> (u16, Value) {
    let (status, text) = http(b.addr, "POST", path, &body.to_string());
    let v = if text.is_empty() {
        Value::Null
    } else {
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("{e}: {text}"))
    };
    (status, v)
}

fn get(b: &TestBroker, path: &str) -> (u16, Value) {
    let (status, text) = http(b.addr, "GET", path, "");
    (status, serde_json::from_str(&text).unwrap_or(Value::Null))
}

fn enqueue(b: &TestBroker, kind: &str, extra: Value) -> String {
    let mut body = json!({
        "kind": kind,
        "entity_id": "0190a6f0-0000-7000-8000-000000000001",
        "data": {"n": 1},
    });
    if let (Some(m), Some(e)) = (body.as_object_mut(), extra.as_object()) {
        m.extend(e.clone());
    }
    let (status, v) = post(b, "/jobs", body);
    assert_eq!(status, 201, "{v}");
    v["id"].as_str().unwrap().to_owned()
}

fn register(b: &TestBroker, kinds: &[&str]) -> String {
    let (status, v) = post(b, "/workers", json!({ "kinds": kinds }));
    assert_eq!(status, 201, "{v}");
    assert!(v["lease_ms"].as_u64().unwrap() > 0);
    v["worker_id"].as_str().unwrap().to_owned()
}

fn dequeue(b: &TestBroker, worker: &str, wait_ms: u64) -> (u16, Value) {
    post(
        b,
        &format!("/workers/{worker}/dequeue?wait_ms={wait_ms}"),
        json!({}),
    )
}

fn outcome(b: &TestBroker, job: &str, worker: &str, token: u64, what: &str) -> (u16, Value) {
    post(
        b,
        &format!("/jobs/{job}/outcome"),
        json!({"worker_id": worker, "token": token, "outcome": what, "error": "boom"}),
    )
}

#[test]
fn a_dead_workers_job_goes_to_the_other_and_its_late_outcome_is_refused() {
    // Long enough that w2's lease outlives the checks below on a loaded
    // machine; w1's runs out while w2 keeps pinging.
    let b = TestBroker::start(|c| c.jobs.worker_lease_ms = 3000);
    let job = enqueue(&b, "resize", json!({}));
    let (status, v) = get(&b, &format!("/jobs/{job}"));
    assert_eq!((status, v["status"].as_str()), (200, Some("queued")));
    let w1 = register(&b, &["resize"]);
    let w2 = register(&b, &[]);
    let (status, first) = dequeue(&b, &w1, 0);
    assert_eq!(status, 200, "{first}");
    assert_eq!(first["id"], job.as_str());
    assert_eq!(first["token"], 1);
    let (_, v) = get(&b, &format!("/jobs/{job}"));
    assert_eq!(v["status"], "running");
    assert_eq!(v["attempt"], 1);
    // Who runs it, and the token, are the worker's own: a status shows
    // neither, so nobody else can report its outcome.
    assert!(
        v.get("worker_id").is_none() && v.get("token").is_none(),
        "{v}"
    );
    // w2 keeps pinging and long-polls; w1 goes silent past its lease.
    let deadline = Instant::now() + Duration::from_secs(10);
    let second = loop {
        assert!(Instant::now() < deadline, "never handed over");
        let (_, p) = post(&b, &format!("/workers/{w2}/ping"), json!({}));
        assert_eq!(p["valid"], true);
        let (status, v) = dequeue(&b, &w2, 100);
        if status == 200 {
            break v;
        }
        assert_eq!(status, 204, "{v}");
    };
    assert_eq!(second["id"], job.as_str());
    assert_eq!(second["token"], 2, "attempt raised");
    // w1 comes back: invalid, and its outcome is refused with no change.
    let (_, p) = post(&b, &format!("/workers/{w1}/ping"), json!({}));
    assert_eq!(p["valid"], false);
    let (status, v) = outcome(&b, &job, &w1, 1, "succeeded");
    assert_eq!(status, 409, "{v}");
    assert_eq!(v["error"]["code"], "worker_expired");
    let (_, v) = get(&b, &format!("/jobs/{job}"));
    assert_eq!(
        (v["status"].as_str(), v["attempt"].as_u64()),
        (Some("running"), Some(2))
    );
    // A live worker that does not hold the job cannot report its outcome,
    // even with the right token.
    let w3 = register(&b, &[]);
    let (status, v) = outcome(&b, &job, &w3, 2, "succeeded");
    assert_eq!(
        (status, v["error"]["code"].as_str()),
        (409, Some("stale_token"))
    );
    // A stale token from the current worker is refused too.
    let (status, v) = outcome(&b, &job, &w2, 1, "succeeded");
    assert_eq!(
        (status, v["error"]["code"].as_str()),
        (409, Some("stale_token"))
    );
    let (status, v) = outcome(&b, &job, &w2, 2, "succeeded");
    assert_eq!((status, v["status"].as_str()), (200, Some("succeeded")));
    // Completed once: a second outcome is refused.
    let (status, _) = outcome(&b, &job, &w2, 2, "succeeded");
    assert_eq!(status, 409);
    let (_, v) = get(&b, &format!("/jobs/{job}"));
    assert_eq!(v["status"], "succeeded");
}

#[test]
fn an_execution_timeout_retries_per_policy_then_the_job_is_dead() {
    let b = TestBroker::start(|c| {
        c.jobs.kinds.push(wharf::config::JobKindConfig {
            name: "slow".into(),
            max_attempts: Some(2),
            backoff_ms: Some(vec![100]),
            timeout_ms: Some(200),
            retry_timed_out: Some(true),
        });
    });
    let job = enqueue(&b, "slow", json!({"priority": 3}));
    let w = register(&b, &["slow"]);
    let (status, v) = dequeue(&b, &w, 0);
    assert_eq!((status, v["token"].as_u64()), (200, Some(1)));
    assert_eq!(v["timeout_ms"], 200);
    // Wait for the timeout to end the attempt.
    assert!(common::wait_until(Duration::from_secs(5), || {
        get(&b, &format!("/jobs/{job}")).1["status"] != "running"
    }));
    let (_, v) = get(&b, &format!("/jobs/{job}"));
    assert!(v["status"] == "timed_out" || v["status"] == "queued", "{v}");
    let (status, v) = outcome(&b, &job, &w, 1, "succeeded");
    assert_eq!(status, 409, "a timed-out attempt's outcome is refused: {v}");
    let (status, v) = dequeue(&b, &w, 2000);
    assert_eq!(
        (status, v["token"].as_u64()),
        (200, Some(2)),
        "retried: {v}"
    );
    assert!(common::wait_until(Duration::from_secs(5), || {
        get(&b, &format!("/jobs/{job}")).1["status"] == "dead"
    }));
    let (_, v) = get(&b, &format!("/jobs/{job}"));
    assert_eq!(v["status"], "dead", "{v}");
    assert_eq!(v["error"], "execution timeout");
    let (status, _) = dequeue(&b, &w, 300);
    assert_eq!(status, 204, "not retried forever");
    // The dead job was copied to the dead-letter queue.
    assert!(common::wait_until(Duration::from_secs(5), || {
        get(&b, "/queues/jobs.dlq").1["depth"] == 1
    }));
}

#[test]
fn a_long_poll_returns_promptly_when_a_job_arrives() {
    let b = TestBroker::start(|_| {});
    let w = register(&b, &["mail"]);
    let addr = b.addr;
    let waiter = std::thread::spawn(move || {
        http(
            addr,
            "POST",
            &format!("/workers/{w}/dequeue?wait_ms=10000"),
            "",
        )
    });
    // The dequeue is parked: counted as waiting, with nothing handed yet.
    assert!(
        common::wait_until(Duration::from_secs(5), || {
            get(&b, "/admin/jobs").1["waiting"] == 1
        }),
        "the dequeue never parked: {}",
        get(&b, "/admin/jobs").1
    );
    let t0 = Instant::now();
    let other = enqueue(&b, "other", json!({}));
    let job = enqueue(&b, "mail", json!({}));
    let (status, text) = waiter.join().unwrap();
    let took = t0.elapsed();
    assert_eq!(status, 200, "{text}");
    assert!(text.contains(&job) && !text.contains(&other), "{text}");
    assert!(took < Duration::from_secs(3), "{took:?}");
    assert_eq!(get(&b, "/admin/jobs").1["waiting"], 0, "the waiter left");
}

#[test]
fn priorities_failures_and_bad_requests() {
    let b = TestBroker::start(|c| c.jobs.backoff_ms = vec![]);
    let low = enqueue(&b, "k", json!({"priority": 1}));
    let high = enqueue(&b, "k", json!({"priority": 8}));
    let w = register(&b, &["k"]);
    let (_, v) = dequeue(&b, &w, 0);
    assert_eq!(v["id"], high.as_str());
    let (status, v) = outcome(&b, &high, &w, 1, "failed");
    assert_eq!(
        (status, v["status"].as_str()),
        (200, Some("queued")),
        "retried at once"
    );
    let (_, v) = dequeue(&b, &w, 0);
    assert_eq!(
        (v["id"].as_str(), v["token"].as_u64()),
        (Some(high.as_str()), Some(2))
    );
    assert_eq!(v["error"], "boom");
    let (_, v) = dequeue(&b, &w, 0);
    assert_eq!(v["id"], low.as_str());
    for (path, body, code) in [
        ("/jobs", "{", "invalid_body"),
        (
            "/jobs",
            r#"{"kind":"k","entity_id":"nope"}"#,
            "invalid_body",
        ),
        (
            "/jobs",
            r#"{"kind":"","entity_id":"0190a6f0-0000-7000-8000-000000000001"}"#,
            "invalid_field",
        ),
        (
            "/jobs",
            r#"{"kind":"k","entity_id":"0190a6f0-0000-7000-8000-000000000001","priority":10}"#,
            "invalid_field",
        ),
        ("/jobs/not-a-uuid/outcome", "{}", "invalid_field"),
        ("/workers", r#"{"kinds":"x"}"#, "invalid_body"),
    ] {
        let (status, text) = http(b.addr, "POST", path, body);
        assert_eq!(status, 400, "{path} {body}: {text}");
        assert!(text.contains(code), "{path} {body}: {text}");
    }
    let (status, v) = get(&b, "/jobs/0190a6f0-0000-7000-8000-000000000009");
    assert_eq!(
        (status, v["error"]["code"].as_str()),
        (404, Some("unknown_job"))
    );
    let (status, v) = dequeue(&b, "0190a6f0-0000-7000-8000-000000000009", 0);
    assert_eq!(
        (status, v["error"]["code"].as_str()),
        (409, Some("worker_expired"))
    );
}

#[test]
fn jobs_survive_a_restart_and_running_ones_are_queued_again() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let b = TestBroker::start_in(&data, |_| {});
    let running = enqueue(&b, "k", json!({}));
    let queued = enqueue(&b, "k", json!({}));
    let done = enqueue(&b, "k", json!({"priority": 9}));
    let w = register(&b, &[]);
    let (_, v) = dequeue(&b, &w, 0);
    assert_eq!(v["id"], done.as_str());
    assert_eq!(outcome(&b, &done, &w, 1, "succeeded").0, 200);
    let (_, v) = dequeue(&b, &w, 0);
    assert_eq!(v["id"], running.as_str());
    b.stop().unwrap();
    let b = TestBroker::start_in(&data, |_| {});
    assert_eq!(get(&b, &format!("/jobs/{done}")).1["status"], "succeeded");
    let (_, v) = get(&b, &format!("/jobs/{running}"));
    assert_eq!(
        (v["status"].as_str(), v["attempt"].as_u64()),
        (Some("queued"), Some(1))
    );
    let w = register(&b, &[]);
    let (_, v) = dequeue(&b, &w, 0);
    assert_eq!(
        (v["id"].as_str(), v["token"].as_u64()),
        (Some(running.as_str()), Some(2))
    );
    let (_, v) = dequeue(&b, &w, 0);
    assert_eq!(v["id"], queued.as_str());
}

/// An embedded broker on a store in `dir`, retrying at once (no
/// backoff), with whatever `tune` changes.
async fn embedded(dir: &std::path::Path, tune: impl FnOnce(&mut wharf::Config)) -> wharf::Wharf {
    let mut config = wharf::Config::default();
    config.jobs.backoff_ms = vec![];
    tune(&mut config);
    wharf::Wharf::builder()
        .config(config)
        .data_dir(dir.join("data"))
        .start()
        .await
        .unwrap()
}

/// A job of `kind` with this execution timeout.
fn new(kind: &str, timeout_ms: Option<u64>) -> wharf::broker::jobs::NewJob {
    wharf::broker::jobs::NewJob {
        kind: kind.into(),
        entity_id: uuid::Uuid::now_v7(),
        data: json!({}),
        priority: 0,
        timeout_ms,
    }
}

#[test]
fn embedded_workers_retry_failures_and_time_out_slow_jobs() {
    use wharf::broker::jobs::JobStatus;
    let dir = tempfile::tempdir().unwrap();
    common::block_on(async move {
        let wharf = embedded(dir.path(), |c| {
            c.jobs.max_attempts = 2;
            c.jobs.retry_timed_out = true;
        })
        .await;
        let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let log = seen.clone();
        let workers = wharf
            .run_job_workers(vec!["flaky".into(), "slow".into()], 2, move |job| {
                log.lock().unwrap().push((job.kind.clone(), job.attempt));
                async move {
                    match (job.kind.as_str(), job.attempt) {
                        ("flaky", 1) => Err("first try fails".to_owned()),
                        ("slow", _) => {
                            actix_rt::time::sleep(Duration::from_secs(30)).await;
                            Ok(())
                        }
                        _ => Ok(()),
                    }
                }
            })
            .unwrap();
        let flaky = wharf.jobs().enqueue(new("flaky", None)).await.unwrap();
        let slow = wharf.jobs().enqueue(new("slow", Some(200))).await.unwrap();
        let t0 = Instant::now();
        loop {
            let f = wharf.jobs().status(flaky).await.unwrap();
            let s = wharf.jobs().status(slow).await.unwrap();
            if f.status == JobStatus::Succeeded && s.status == JobStatus::Dead {
                assert_eq!(f.attempt, 2);
                assert_eq!(f.error.as_deref(), Some("first try fails"));
                assert_eq!(s.attempt, 2, "retried once, then dead");
                assert_eq!(s.error.as_deref(), Some("execution timeout"));
                break;
            }
            assert!(t0.elapsed() < Duration::from_secs(15), "{f:?} {s:?}");
            actix_rt::time::sleep(Duration::from_millis(20)).await;
        }
        let mut runs = seen.lock().unwrap().clone();
        runs.sort();
        assert_eq!(
            runs,
            vec![
                ("flaky".to_owned(), 1),
                ("flaky".to_owned(), 2),
                ("slow".to_owned(), 1),
                ("slow".to_owned(), 2)
            ]
        );
        workers.stop();
        wharf.shutdown().await.unwrap();
    });
}

#[test]
fn a_panicking_embedded_handler_fails_its_job_and_is_made_anew() {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use wharf::broker::jobs::JobStatus;
    let dir = tempfile::tempdir().unwrap();
    common::block_on(async move {
        let wharf = embedded(dir.path(), |_| {}).await;
        // Each handler counts its own jobs and panics on every other
        // one: its second, fourth...; the factory counts the handlers.
        let made = std::sync::Arc::new(AtomicUsize::new(0));
        let counter = made.clone();
        let workers = wharf
            .run_job_worker_factory(vec!["fragile".into()], 1, move || {
                counter.fetch_add(1, Ordering::SeqCst);
                let mut runs = 0u32;
                move |job: wharf::broker::jobs::JobView| {
                    runs += 1;
                    let panics = runs % 2 == 0;
                    async move {
                        if panics {
                            panic!("fragile handler broke on {}", job.id);
                        }
                        Ok(())
                    }
                }
            })
            .unwrap();
        let mut ids = Vec::new();
        for _ in 0..4 {
            ids.push(wharf.jobs().enqueue(new("fragile", None)).await.unwrap());
        }
        // Every job succeeds in the end (a panicked attempt is a failure,
        // retried); the single worker carried on through the panics.
        let t0 = Instant::now();
        loop {
            let mut views = Vec::new();
            for id in &ids {
                views.push(wharf.jobs().status(*id).await.unwrap());
            }
            if views.iter().all(|v| v.status == JobStatus::Succeeded) {
                let retried: Vec<_> = views.iter().filter(|v| v.attempt > 1).collect();
                assert!(!retried.is_empty(), "some attempt panicked: {views:?}");
                for v in retried {
                    let e = v.error.as_deref().unwrap_or_default();
                    assert!(
                        e.starts_with("handler panicked: fragile handler broke"),
                        "{e}"
                    );
                }
                break;
            }
            assert!(t0.elapsed() < Duration::from_secs(15), "{views:?}");
            actix_rt::time::sleep(Duration::from_millis(20)).await;
        }
        assert!(
            made.load(Ordering::SeqCst) >= 2,
            "a new handler after a panic"
        );
        workers.stop();
        wharf.shutdown().await.unwrap();
    });
}

#[test]
fn jobs_over_websocket_work_like_over_http() {
    use wharf::broker::jobs::{JobStatus, NewJob, Outcome};
    use wharf::client::{Client, ClientError, ClientOptions};
    use wharf::protocol::frame::ErrorCode;
    let b = TestBroker::start(|_| {});
    common::block_on(async {
        let opts = ClientOptions {
            format: wharf::protocol::Format::Json,
            ..ClientOptions::default()
        };
        let c = Client::connect(&b.ws_url(), opts).await.unwrap();
        let (w, lease) = c.jobs().register_worker(&["ws"]).await.unwrap();
        assert!(lease > 0);
        // A dequeue that waits does not hold up other frames.
        let waiting = c.jobs().dequeue_job(w, Duration::from_secs(5));
        let enqueue = async {
            // Once the dequeue is parked, other frames still get answers.
            assert!(
                common::eventually(Duration::from_secs(5), || {
                    get(&b, "/admin/jobs").1["waiting"] == 1
                })
                .await,
                "the dequeue never parked"
            );
            c.ping().await.unwrap();
            c.jobs()
                .enqueue_job(NewJob {
                    kind: "ws".into(),
                    entity_id: uuid::Uuid::now_v7(),
                    data: json!({"to": "ada", "n": [1, 2]}),
                    priority: 2,
                    timeout_ms: None,
                })
                .await
                .unwrap()
        };
        let (job, id) = futures_util::future::join(waiting, enqueue).await;
        let job = job.unwrap().expect("the job");
        assert_eq!(job.id, id);
        assert_eq!(job.data, json!({"to": "ada", "n": [1, 2]}));
        assert_eq!(job.token, Some(1));
        assert!(c.jobs().ping_worker(w).await.unwrap());
        match c
            .jobs()
            .job_outcome(id, w, 7, Outcome::Succeeded, None)
            .await
        {
            Err(ClientError::Server { code, .. }) => assert_eq!(code, ErrorCode::StaleToken),
            other => panic!("expected stale_token, got {other:?}"),
        }
        let st = c
            .jobs()
            .job_outcome(id, w, 1, Outcome::Succeeded, None)
            .await
            .unwrap();
        assert_eq!(st, JobStatus::Succeeded);
        assert_eq!(
            c.jobs().job_status(id).await.unwrap().status,
            JobStatus::Succeeded
        );
        assert_eq!(c.jobs().dequeue_job(w, Duration::ZERO).await.unwrap(), None);
        match c.jobs().job_status(uuid::Uuid::now_v7()).await {
            Err(ClientError::Server { code, .. }) => assert_eq!(code, ErrorCode::UnknownJob),
            other => panic!("expected unknown_job, got {other:?}"),
        }
    });
}

/// A worker registered for some kinds never receives another kind's job,
/// whatever else is queued.
#[test]
fn a_worker_only_receives_the_kinds_it_registered_for() {
    let b = TestBroker::start(|_| {});
    let other = enqueue(&b, "other", json!({"priority": 9}));
    let mine = enqueue(&b, "mine", json!({}));
    let w = register(&b, &["mine"]);
    let (status, v) = dequeue(&b, &w, 0);
    assert_eq!(
        (status, v["id"].as_str()),
        (200, Some(mine.as_str())),
        "{v}"
    );
    let (status, v) = dequeue(&b, &w, 200);
    assert_eq!(status, 204, "the other kind's job is not handed out: {v}");
    let (_, v) = get(&b, &format!("/jobs/{other}"));
    assert_eq!(v["status"], "queued");
}
