//! The operator's tools over HTTP: browsing, purging and moving queue
//! messages (in memory, in flight and kept on disk, across a restart),
//! and listing, retrying and cancelling jobs.

use crate::common;

use std::collections::BTreeSet;
use std::time::Duration;

use common::{TestBroker, block_on, http};
use serde_json::{Value, json};
use wharf::client::{Client, ClientOptions};

const T: Duration = Duration::from_secs(10);
const ENTITY: &str = "0190a6f0-0000-7000-8000-00000000e001";

fn call(b: &TestBroker, method: &str, path: &str, body: &str) -> (u16, Value) {
    let (status, body) = http(b.addr, method, path, body);
    (status, serde_json::from_str(&body).unwrap_or(Value::Null))
}

fn ids(page: &Value) -> Vec<u64> {
    page["messages"]
        .as_array()
        .unwrap_or(&Vec::new())
        .iter()
        .map(|m| m["id"].as_u64().unwrap())
        .collect()
}

/// Every message of `queue` by browsing page after page.
fn browse_all(b: &TestBroker, queue: &str, limit: usize) -> Vec<Value> {
    let mut out = Vec::new();
    let mut from = 0;
    for _ in 0..100 {
        let (status, page) = call(
            b,
            "GET",
            &format!("/queues/{queue}/messages?from={from}&limit={limit}"),
            "",
        );
        assert_eq!(status, 200, "{page}");
        out.extend(page["messages"].as_array().unwrap().iter().cloned());
        match page["next"].as_u64() {
            Some(next) => from = next,
            None => return out,
        }
    }
    panic!("more than 100 pages");
}

#[test]
fn browse_move_and_purge_in_memory_in_flight_and_on_disk() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    // A window of 4: most of the 20 messages are kept on disk only.
    let tune = |c: &mut wharf::Config| c.queue_defaults.memory_window = 4;
    let b = TestBroker::start_in(&data, tune);
    block_on(async {
        let c = Client::connect(&b.ws_url(), ClientOptions::default())
            .await
            .unwrap();
        for i in 1..=20u8 {
            let payload = if i == 3 {
                vec![0xff, 0xfe, i]
            } else {
                format!("m{i}").into_bytes()
            };
            assert_eq!(c.enqueue("work", payload).await.unwrap(), u64::from(i));
        }
        let mut consumer = c.consume("work", 2).await.unwrap();
        let first = consumer.recv_timeout(T).await.unwrap();
        let second = consumer.recv_timeout(T).await.unwrap();
        assert_eq!((first.seq, second.seq), (1, 2));

        // Two pages cover all 20, each once, in id order, and say where
        // each message is.
        let (status, p1) = call(&b, "GET", "/queues/work/messages?limit=8", "");
        assert_eq!(status, 200, "{p1}");
        assert_eq!(ids(&p1), (1..=8).collect::<Vec<_>>());
        assert_eq!(p1["next"], 9);
        assert_eq!(p1["messages"][0]["state"], "in_flight");
        assert_eq!(p1["messages"][0]["deliveries"], 1);
        assert_eq!(p1["messages"][2]["state"], "ready");
        assert_eq!(p1["messages"][2]["payload_base64"], "//4D");
        assert!(p1["messages"][2].get("payload").is_none());
        assert_eq!(p1["messages"][3]["payload"], "m4");
        let all = browse_all(&b, "work", 7);
        let seen: Vec<u64> = all.iter().map(|m| m["id"].as_u64().unwrap()).collect();
        assert_eq!(seen, (1..=20).collect::<Vec<_>>());
        assert!(all.iter().any(|m| m["state"] == "on_disk"), "{all:?}");
        assert_eq!(all[19]["payload"], "m20");

        // Moves: one kept on disk, one in memory; in flight and unknown
        // ids are refused, as is a move to the queue itself.
        let (status, moved) = call(&b, "POST", "/queues/work/messages/18/move?to=parked", "");
        assert_eq!(status, 200, "{moved}");
        assert_eq!(moved, json!({"queue": "parked", "id": 1}));
        let (status, _) = call(&b, "POST", "/queues/work/messages/4/move?to=parked", "");
        assert_eq!(status, 200);
        for (path, want, code) in [
            ("/queues/work/messages/1/move?to=parked", 409, "conflict"),
            (
                "/queues/work/messages/18/move?to=parked",
                404,
                "unknown_message",
            ),
            (
                "/queues/work/messages/999/move?to=parked",
                404,
                "unknown_message",
            ),
            ("/queues/work/messages/5/move?to=work", 400, "invalid_field"),
            (
                "/queues/work/messages/x/move?to=parked",
                400,
                "invalid_field",
            ),
            (
                "/queues/nope/messages/1/move?to=parked",
                404,
                "unknown_queue",
            ),
        ] {
            let (status, body) = call(&b, "POST", path, "");
            assert_eq!(
                (status, body["error"]["code"].as_str()),
                (want, Some(code)),
                "{path}: {body}"
            );
        }
        let parked = browse_all(&b, "parked", 100);
        let parked: Vec<&str> = parked
            .iter()
            .map(|m| m["payload"].as_str().unwrap())
            .collect();
        assert_eq!(parked, ["m18", "m4"]);
        let left: BTreeSet<u64> = browse_all(&b, "work", 100)
            .iter()
            .map(|m| m["id"].as_u64().unwrap())
            .collect();
        assert!(!left.contains(&18) && !left.contains(&4) && left.len() == 18);

        // Purge: everything but the two in flight.
        let (status, purged) = call(&b, "DELETE", "/queues/work/messages", "");
        assert_eq!((status, purged), (200, json!({"purged": 16})));
        let (_, p) = call(&b, "GET", "/queues/work/messages", "");
        assert_eq!(ids(&p), [1, 2]);
        let (_, info) = call(&b, "GET", "/queues/work", "");
        assert_eq!(
            (info["depth"].as_u64(), info["in_flight"].as_u64()),
            (Some(0), Some(2))
        );
        assert_eq!(info["stats"]["purged"], 16);

        // New messages after the purge reach the consumer; no purged one
        // comes back.
        for i in 21..=23u8 {
            c.enqueue("work", format!("m{i}").into_bytes())
                .await
                .unwrap();
        }
        c.ack(consumer.id(), &[first.id, second.id]).await.unwrap();
        let next = consumer.recv_timeout(T).await.unwrap();
        assert_eq!((next.seq, next.payload.as_slice()), (21, &b"m21"[..]));
        c.ack(consumer.id(), &[next.id]).await.unwrap();
        let (_, p) = call(&b, "GET", "/queues/work/messages", "");
        assert_eq!(ids(&p), [22, 23]);
    });
    b.stop().unwrap();

    // On disk as in memory: the purged and moved messages are gone, the
    // moved ones are where they went.
    let b = TestBroker::start_in(&data, tune);
    let left: Vec<u64> = browse_all(&b, "work", 100)
        .iter()
        .map(|m| m["id"].as_u64().unwrap())
        .collect();
    assert_eq!(left, [22, 23]);
    let parked = browse_all(&b, "parked", 100);
    assert_eq!(parked.len(), 2, "{parked:?}");
    b.stop().unwrap();
}

#[test]
fn browse_limits_and_rights() {
    use wharf::config::auth::{Permissions, TokenConfig};
    let b = TestBroker::start(|c| {
        c.auth.tokens.push(TokenConfig {
            name: "reader".into(),
            token_sha256: wharf::auth::token_digest("reader-token"),
            allow: Permissions {
                enqueue: vec!["mine".into(), "theirs".into()],
                consume: vec!["mine".into()],
                ..Permissions::default()
            },
        });
    });
    let auth = "Authorization: Bearer reader-token\r\n";
    let req = |method: &str, path: &str| {
        let (status, _, body) = common::http_request(b.addr, method, path, auth, "x");
        (
            status,
            serde_json::from_str::<Value>(&body).unwrap_or(Value::Null),
        )
    };
    assert_eq!(req("POST", "/queues/mine/messages").0, 201);
    assert_eq!(req("POST", "/queues/theirs/messages").0, 201);
    // Who may consume a queue may browse it; purge and move are the
    // admin's.
    let (status, page) = req("GET", "/queues/mine/messages");
    assert_eq!((status, ids(&page)), (200, vec![1]));
    assert_eq!(req("GET", "/queues/theirs/messages").0, 403);
    assert_eq!(req("DELETE", "/queues/mine/messages").0, 403);
    assert_eq!(req("POST", "/queues/mine/messages/1/move?to=x").0, 403);
    assert_eq!(
        common::http_request(b.addr, "GET", "/queues/mine/messages", "", "").0,
        401
    );
    for bad in ["limit=0", "limit=1001", "from=x", "colour=red"] {
        let (status, body) = req("GET", &format!("/queues/mine/messages?{bad}"));
        assert_eq!(status, 400, "{bad}: {body}");
    }
}

fn job(b: &TestBroker, kind: &str) -> String {
    let (status, body) = call(
        b,
        "POST",
        "/jobs",
        &json!({"kind": kind, "entity_id": ENTITY, "data": {}}).to_string(),
    );
    assert_eq!(status, 201, "{body}");
    body["id"].as_str().unwrap().to_owned()
}

#[test]
fn jobs_list_retry_and_cancel() {
    let b = TestBroker::start(|c| {
        c.jobs.max_attempts = 1;
        c.jobs.backoff_ms = vec![0];
    });
    let a: Vec<String> = (0..3).map(|_| job(&b, "mail")).collect();
    let other = job(&b, "print");

    // Pages in enqueue order, filtered by kind and status.
    let (status, p1) = call(&b, "GET", "/jobs?kind=mail&limit=2", "");
    assert_eq!(status, 200, "{p1}");
    let listed: Vec<&str> = p1["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|j| j["id"].as_str().unwrap())
        .collect();
    assert_eq!(listed, [a[0].as_str(), a[1].as_str()]);
    let after = p1["next"].as_str().unwrap();
    let (_, p2) = call(&b, "GET", &format!("/jobs?kind=mail&after={after}"), "");
    assert_eq!(p2["jobs"][0]["id"], a[2].as_str());
    assert!(p2["next"].is_null(), "{p2}");
    let (_, all) = call(&b, "GET", "/jobs?status=queued", "");
    assert_eq!(all["jobs"].as_array().unwrap().len(), 4);

    // A job that runs out of attempts dies; a retry queues it again.
    let (_, w) = call(&b, "POST", "/workers", r#"{"kinds":["mail"]}"#);
    let worker = w["worker_id"].as_str().unwrap().to_owned();
    let (status, taken) = call(&b, "POST", &format!("/workers/{worker}/dequeue"), "");
    assert_eq!(status, 200, "{taken}");
    let id = taken["id"].as_str().unwrap().to_owned();
    assert_eq!(id, a[0]);
    let report = json!({"worker_id": worker, "token": taken["token"], "outcome": "failed", "error": "smtp down"});
    let (_, out) = call(
        &b,
        "POST",
        &format!("/jobs/{id}/outcome"),
        &report.to_string(),
    );
    assert_eq!(out["status"], "dead", "{out}");
    let (_, dead) = call(&b, "GET", "/jobs?status=dead", "");
    assert_eq!(dead["jobs"][0]["id"], id.as_str());
    let (status, retried) = call(&b, "POST", &format!("/jobs/{id}/retry"), "");
    assert_eq!(
        (status, retried["status"].as_str()),
        (200, Some("queued")),
        "{retried}"
    );
    assert_eq!(retried["attempt"], 0);

    // Cancel: a queued job never runs (the worker gets the next one, and
    // then the retried job, which went to the back); a running one's
    // outcome is refused as stale; a finished one cannot be cancelled;
    // retrying a queued one is a conflict.
    let (status, c1) = call(&b, "POST", &format!("/jobs/{}/cancel", a[1]), "");
    assert_eq!(
        (status, c1["status"].as_str()),
        (200, Some("cancelled")),
        "{c1}"
    );
    let (_, next) = call(&b, "POST", &format!("/workers/{worker}/dequeue"), "");
    assert_eq!(next["id"], a[2].as_str());
    let (status, again) = call(&b, "POST", &format!("/workers/{worker}/dequeue"), "");
    assert_eq!((status, again["id"].as_str()), (200, Some(id.as_str())));
    let (status, c2) = call(&b, "POST", &format!("/jobs/{id}/cancel"), "");
    assert_eq!((status, c2["status"].as_str()), (200, Some("cancelled")));
    let late = json!({"worker_id": worker, "token": again["token"], "outcome": "succeeded"});
    let (status, body) = call(
        &b,
        "POST",
        &format!("/jobs/{id}/outcome"),
        &late.to_string(),
    );
    assert_eq!(
        (status, body["error"]["code"].as_str()),
        (409, Some("stale_token"))
    );
    let (status, body) = call(&b, "POST", &format!("/jobs/{id}/cancel"), "");
    assert_eq!(
        (status, body["error"]["code"].as_str()),
        (409, Some("conflict"))
    );
    let (status, body) = call(&b, "POST", &format!("/jobs/{other}/retry"), "");
    assert_eq!(
        (status, body["error"]["code"].as_str()),
        (409, Some("conflict"))
    );
    let (_, cancelled) = call(&b, "GET", "/jobs?status=cancelled", "");
    assert_eq!(
        cancelled["jobs"].as_array().unwrap().len(),
        2,
        "{cancelled}"
    );
    for bad in ["status=lost", "after=nope", "limit=0", "limit=5000"] {
        let (status, body) = call(&b, "GET", &format!("/jobs?{bad}"), "");
        assert_eq!(status, 400, "{bad}: {body}");
    }
    let unknown = "0190a6f0-0000-7000-8000-000000000001";
    assert_eq!(
        call(&b, "POST", &format!("/jobs/{unknown}/cancel"), "").0,
        404
    );
}

#[test]
fn jobs_rights_for_listing_and_cancelling() {
    use wharf::config::auth::{Permissions, TokenConfig};
    let b = TestBroker::start(|c| {
        c.auth.tokens.push(TokenConfig {
            name: "mailer".into(),
            token_sha256: wharf::auth::token_digest("mailer-token"),
            allow: Permissions {
                enqueue_jobs: vec!["mail".into()],
                ..Permissions::default()
            },
        });
        c.auth.tokens.push(TokenConfig {
            name: "ops".into(),
            token_sha256: wharf::auth::token_digest("ops-token"),
            allow: Permissions::everything(),
        });
    });
    let as_ = |token: &str, method: &str, path: &str, body: &str| {
        let auth = format!("Authorization: Bearer {token}\r\n");
        let (status, _, body) = common::http_request(b.addr, method, path, &auth, body);
        (
            status,
            serde_json::from_str::<Value>(&body).unwrap_or(Value::Null),
        )
    };
    let mail = as_(
        "mailer-token",
        "POST",
        "/jobs",
        &json!({"kind": "mail", "entity_id": ENTITY, "data": 1}).to_string(),
    )
    .1["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let print = as_(
        "ops-token",
        "POST",
        "/jobs",
        &json!({"kind": "print", "entity_id": ENTITY, "data": 1}).to_string(),
    )
    .1["id"]
        .as_str()
        .unwrap()
        .to_owned();
    // The mailer lists and cancels only mail jobs; retry is the admin's.
    let (_, page) = as_("mailer-token", "GET", "/jobs", "");
    assert_eq!(page["jobs"].as_array().unwrap().len(), 1, "{page}");
    assert_eq!(
        as_("mailer-token", "POST", &format!("/jobs/{print}/cancel"), "").0,
        404
    );
    assert_eq!(
        as_("mailer-token", "POST", &format!("/jobs/{mail}/cancel"), "").0,
        200
    );
    assert_eq!(
        as_("mailer-token", "POST", &format!("/jobs/{mail}/retry"), "").0,
        403
    );
    assert_eq!(
        as_("ops-token", "POST", &format!("/jobs/{mail}/retry"), "").0,
        200
    );
    let (_, page) = as_("ops-token", "GET", "/jobs", "");
    assert_eq!(page["jobs"].as_array().unwrap().len(), 2, "{page}");
}
