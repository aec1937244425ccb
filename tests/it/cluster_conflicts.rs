//! What a cluster must not do silently: lose what a node published while
//! NATS was away, let two processes share a node name, or home queues
//! differently because nodes list different members.

use crate::common;

use std::time::Duration;

use common::{LONG, TestBroker, block_on, eventually, http};

use crate::cluster::{Nats, client, drain, node, status, until_heard};

/// Whether `n`'s `GET /admin/cluster` lists the node `name`.
fn listed(n: &TestBroker, name: &str) -> bool {
    status(n)["peers"]
        .as_array()
        .is_some_and(|p| p.iter().any(|p| p["node"] == name))
}

/// NATS killed under two nodes; a publishes 200 numbered messages while
/// it is away (its own subscriber gets them at once); NATS comes back:
/// b's subscriber gets all 200, in order, once. (Before, a sent them the
/// moment it reconnected, before b had subscribed again, and NATS, which
/// keeps nothing for a subscriber that is not there, dropped them.)
#[test]
fn what_a_node_published_while_nats_was_away_reaches_the_others_when_it_is_back() {
    let mut nats = Nats::start();
    let (a, b) = (node(&nats.url(), "a"), node(&nats.url(), "b"));
    block_on(async {
        let (ca, cb) = (client(&a).await, client(&b).await);
        let mut on_a = ca.subscribe("away/#").await.unwrap();
        let mut on_b = cb.subscribe("away/#").await.unwrap();
        assert!(until_heard(&ca, "away/probe", &mut on_b).await, "before");
        // Both nodes heard each other say hello (a waits for b's after
        // NATS returns only if b was alive before).
        assert!(
            eventually(LONG, || status(&a)["peers"].to_string().contains("\"b\"")).await,
            "{}",
            status(&a)
        );
        // Past the warm-up, a sends b only what b listens to: what b
        // listened to before the outage is sent after it.
        assert!(
            eventually(LONG, || status(&a)["forwarding_all"] == false).await,
            "{}",
            status(&a)
        );
        drain(&mut on_a, Duration::from_millis(100)).await;
        drain(&mut on_b, Duration::from_millis(100)).await;
        nats.kill();
        assert!(
            eventually(LONG, || status(&a)["state"] != "connected").await,
            "a notices NATS is gone"
        );
        let sent: Vec<String> = (0..200).map(|i| format!("m{i}")).collect();
        for m in &sent {
            ca.publish("away/n", m.as_str()).await.unwrap();
        }
        assert_eq!(
            drain(&mut on_a, Duration::from_millis(300)).await,
            sent,
            "local"
        );
        nats.restart();
        let mut got = Vec::new();
        while got.len() < sent.len() {
            match on_b.recv_timeout(LONG).await {
                Some(m) => got.push(String::from_utf8_lossy(&m.payload).into_owned()),
                None => break,
            }
        }
        assert_eq!(
            got, sent,
            "what b received of a's publishes while NATS was away"
        );
    });
}

/// A node started with the name of one already running is refused: it
/// would serve the same queues' calls and deliveries.
#[test]
fn a_node_with_a_name_already_running_is_refused() {
    let nats = Nats::start();
    let a = node(&nats.url(), "a");
    // Up and serving (the HTTP answer comes once the node has started).
    assert_eq!(status(&a)["state"], "connected");
    let refused = node(&nats.url(), "a").stop().expect_err("a second \"a\"");
    let text = refused.to_string();
    assert!(
        text.contains("another running node is named \"a\""),
        "{text}"
    );
    // The first goes on.
    assert_eq!(status(&a)["state"], "connected");
}

/// Nodes that list different `[cluster] members` home queues differently;
/// each says so: `GET /admin/cluster` names the other and its members,
/// and `/metrics` counts the conflict.
#[test]
fn nodes_that_list_different_members_say_so() {
    let nats = Nats::start();
    let member = |name: &str, members: &[&str]| {
        let (url, name) = (nats.url(), name.to_owned());
        let members: Vec<String> = members.iter().map(|m| (*m).to_owned()).collect();
        TestBroker::start(move |c| {
            c.cluster.nats = vec![url];
            c.cluster.node = name;
            c.cluster.members = members;
            c.cluster.connect_timeout_ms = 2_000;
        })
    };
    let a = member("a", &["a", "b"]);
    let b = member("b", &["a", "b", "c"]);
    block_on(async {
        assert!(
            eventually(LONG, || status(&a)["other_members"]["b"]
                == serde_json::json!(["a", "b", "c"]))
            .await,
            "{}",
            status(&a)
        );
        assert!(
            eventually(LONG, || status(&b)["other_members"]["a"]
                == serde_json::json!(["a", "b"]))
            .await,
            "{}",
            status(&b)
        );
    });
    // The overview (the dashboard's and `wharf top`'s) counts it too.
    let (code, body) = http(a.addr, "GET", "/admin/overview", "");
    assert_eq!(code, 200, "{body}");
    let o: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(
        (
            &o["cluster"]["node"],
            &o["cluster"]["conflicts"],
            &o["cluster"]["connected"]
        ),
        (
            &serde_json::json!("a"),
            &serde_json::json!(1),
            &serde_json::json!(true)
        ),
        "{o}"
    );
    let (code, metrics) = http(a.addr, "GET", "/metrics", "");
    assert_eq!(code, 200);
    for line in [
        r#"wharf_cluster_conflicts{kind="members"} 1"#,
        r#"wharf_cluster_conflicts{kind="same_name"} 0"#,
        r#"wharf_cluster_connected 1"#,
    ] {
        assert!(
            metrics.lines().any(|l| l == line),
            "no {line:?} in\n{metrics}"
        );
    }
}

/// A node that stops says bye: the others stop listing it at once (a node
/// that vanishes without a word is listed as lost instead).
#[test]
fn a_node_that_stops_is_no_longer_listed() {
    let nats = Nats::start();
    let (a, b) = (node(&nats.url(), "a"), node(&nats.url(), "b"));
    block_on(async {
        assert!(eventually(LONG, || listed(&a, "b")).await, "{}", status(&a));
    });
    b.stop().unwrap();
    block_on(async {
        assert!(
            eventually(LONG, || !listed(&a, "b")).await,
            "{}",
            status(&a)
        );
    });
}

/// A call waiting on a home that stops (a worker's long poll on the jobs
/// resource's home) fails as soon as the home says bye, with an unknown
/// outcome, instead of sitting for its whole wait plus the call timeout.
#[test]
fn a_long_poll_on_a_home_that_stops_fails_at_once() {
    let nats = Nats::start();
    let member = |name: &str| {
        let (url, name) = (nats.url(), name.to_owned());
        TestBroker::start(move |c| {
            c.cluster.nats = vec![url];
            c.cluster.node = name;
            c.cluster.members = vec!["a".into(), "b".into()];
            c.cluster.connect_timeout_ms = 2_000;
        })
    };
    let (a, b) = (member("a"), member("b"));
    let home = status(&a)["jobs_home"].as_str().unwrap().to_owned();
    // The node that serves the worker is the one that is not the home.
    let (home_node, other) = if home == "a" { (a, b) } else { (b, a) };
    block_on(async {
        assert!(
            eventually(LONG, || status(&other)["peers"]
                .to_string()
                .contains(&format!("\"{home}\"")))
            .await,
            "{}",
            status(&other)
        );
        let c = client(&other).await;
        let (worker, _) = c.jobs().register_worker(&[]).await.unwrap();
        let started = std::time::Instant::now();
        let poll = c.jobs().dequeue_job(worker, Duration::from_secs(25));
        let stop = async {
            // Once the long poll is parked at the home.
            let parked = eventually(LONG, || {
                let (_, body) = http(home_node.addr, "GET", "/admin/jobs", "");
                body.contains(r#""waiting":1"#)
            })
            .await;
            assert!(
                parked,
                "{}",
                http(home_node.addr, "GET", "/admin/jobs", "").1
            );
            home_node.stop().unwrap();
        };
        let (polled, ()) = tokio::join!(poll, stop);
        let took = started.elapsed();
        match polled {
            Err(wharf::client::ClientError::Server { code, .. }) => {
                assert_eq!(code, wharf::protocol::ErrorCode::OutcomeUnknown);
            }
            other => panic!("a long poll on a stopped home: {other:?} after {took:?}"),
        }
        assert!(took < Duration::from_secs(10), "it waited {took:?}");
    });
}

/// A bye from another process using a node's name (an impostor that
/// stops) does not make the others drop the real node: byes carry the
/// process's instance, and one that is not the node's known instance is
/// ignored.
#[test]
fn a_bye_from_another_process_with_the_name_is_ignored() {
    let nats = Nats::start();
    let (a, b) = (node(&nats.url(), "a"), node(&nats.url(), "b"));
    block_on(async {
        assert!(eventually(LONG, || listed(&b, "a")).await, "{}", status(&b));
        let raw = async_nats::connect(nats.url()).await.unwrap();
        let hello = |node: &str, instance: &str| {
            serde_json::json!({"node": node, "instance": instance, "members": [], "ask": false})
                .to_string()
        };
        // A marker node, heard, so that its bye (sent after the fake one,
        // on the same connection, so handled after it) shows when b has
        // handled both.
        raw.publish("wharf.sys.hello", hello("marker", "m1").into())
            .await
            .unwrap();
        raw.flush().await.unwrap();
        assert!(
            eventually(LONG, || listed(&b, "marker")).await,
            "{}",
            status(&b)
        );
        raw.publish("wharf.sys.bye", hello("a", "an-impostor").into())
            .await
            .unwrap();
        raw.publish("wharf.sys.bye", hello("marker", "m1").into())
            .await
            .unwrap();
        raw.flush().await.unwrap();
        assert!(
            eventually(LONG, || !listed(&b, "marker")).await,
            "{}",
            status(&b)
        );
        assert!(listed(&b, "a"), "the real a was dropped: {}", status(&b));
    });
    drop(a);
}
