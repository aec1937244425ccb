//! Interest-based forwarding, over real sockets and a real nats-server:
//! once past its warm-up a node sends a publish to NATS only when
//! another node listens to a matching filter, and a subscribe anywhere
//! is heard by a publish on any node right after it returns.

use std::time::Duration;

use crate::cluster::{Nats, client, drain, node, status};
use crate::common::proxy::Proxy;
use crate::common::{LONG, TestBroker, block_on, eventually};

/// Past `b`'s warm-up, with every node's filters known there.
async fn settled(b: &TestBroker) {
    assert!(
        eventually(LONG, || status(b)["forwarding_all"] == false).await,
        "{}",
        status(b)
    );
}

/// A node as [`node`] makes it, with `also` changed in its config.
fn node_with(nats: &Nats, name: &str, also: impl FnOnce(&mut wharf::Config)) -> TestBroker {
    let (url, name) = (nats.url(), name.to_owned());
    TestBroker::start(move |c| {
        c.cluster.nats = vec![url];
        c.cluster.node = name;
        c.cluster.connect_timeout_ms = 2_000;
        also(c);
    })
}

fn count(b: &TestBroker, key: &str) -> u64 {
    status(b)[key].as_u64().unwrap_or_default()
}

/// Clients of `a` and `b`, `b`'s subscribed to `{prefix}/#`, once both
/// nodes are past their warm-up and a publish on `a` reaches `b` (what
/// that took is drained).
async fn b_hears_a(
    a: &TestBroker,
    b: &TestBroker,
    prefix: &str,
) -> (
    wharf::client::Client,
    wharf::client::Client,
    wharf::client::Subscription,
) {
    let (ca, cb) = (client(a).await, client(b).await);
    let mut on_b = cb.subscribe(&format!("{prefix}/#")).await.unwrap();
    settled(a).await;
    settled(b).await;
    assert!(
        crate::cluster::until_heard(&ca, &format!("{prefix}/probe"), &mut on_b).await,
        "b hears a"
    );
    drain(&mut on_b, Duration::from_millis(100)).await;
    (ca, cb, on_b)
}

#[test]
fn past_its_warm_up_a_node_sends_only_what_another_node_wants() {
    let nats = Nats::start();
    let (a, b, c) = (
        node(&nats.url(), "a"),
        node(&nats.url(), "b"),
        node(&nats.url(), "c"),
    );
    block_on(async {
        let (ca, cb, cc) = (client(&a).await, client(&b).await, client(&c).await);
        settled(&a).await;
        // A subscribe on b, then at once a publish on a: heard, every
        // time (the subscribe returns once a took the filter).
        for i in 0..20 {
            let mut sub = cb.subscribe(&format!("fresh/{i}/+")).await.unwrap();
            ca.publish(&format!("fresh/{i}/x"), format!("m{i}"))
                .await
                .unwrap();
            let got = sub.recv_timeout(LONG).await.map(|m| m.payload);
            assert_eq!(
                got.as_deref(),
                Some(format!("m{i}").as_bytes()),
                "filter {i}"
            );
        }
        assert_eq!(
            status(&a)["peer_filters"]["b"],
            20,
            "a knows b's filters: {}",
            status(&a)
        );
        // Topics nobody elsewhere reads stay on a.
        let (forwarded, skipped) = (count(&a, "forwarded"), count(&a, "not_wanted"));
        let mut here = ca.subscribe("lonely/#").await.unwrap();
        for i in 0..100 {
            ca.publish("lonely/topic", format!("{i}")).await.unwrap();
        }
        assert_eq!(
            drain(&mut here, Duration::from_millis(200)).await.len(),
            100
        );
        assert_eq!(count(&a, "not_wanted") - skipped, 100, "{}", status(&a));
        assert_eq!(count(&a, "forwarded"), forwarded, "{}", status(&a));
        // A wildcard subscription on c makes them wanted.
        let mut all = cc.subscribe("#").await.unwrap();
        ca.publish("lonely/topic", "now wanted").await.unwrap();
        let got = all.recv_timeout(LONG).await.map(|m| m.payload);
        assert_eq!(got.as_deref(), Some(&b"now wanted"[..]));
        assert!(
            eventually(LONG, || count(&a, "forwarded") == forwarded + 1).await,
            "{}",
            status(&a)
        );
        // The metric says it too.
        let (code, metrics) = crate::common::http(a.addr, "GET", "/metrics", "");
        assert_eq!(code, 200);
        assert!(
            metrics.contains("wharf_cluster_messages_total{outcome=\"not_wanted\"} 100"),
            "{metrics}"
        );
        assert!(
            metrics.contains("wharf_cluster_forwarding_all 0"),
            "{metrics}"
        );
    });
}

/// A node that restarts starts from no filter at the others; a node
/// older than the exchange (its hello says no version) has every publish
/// sent, since what it wants is not known.
#[test]
fn a_restarted_node_is_heard_again_and_an_older_node_gets_everything() {
    let nats = Nats::start();
    let (a, b) = (node(&nats.url(), "a"), node(&nats.url(), "b"));
    block_on(async {
        let ca = client(&a).await;
        {
            let cb = client(&b).await;
            let _kept = cb.subscribe("before/restart").await.unwrap();
            settled(&a).await;
            assert_eq!(status(&a)["peer_filters"]["b"], 1, "{}", status(&a));
        }
        b.stop().unwrap();
        // b said bye: a forgets its filters.
        assert!(
            eventually(LONG, || status(&a)["peer_filters"].get("b").is_none()).await,
            "{}",
            status(&a)
        );
        let b = node(&nats.url(), "b");
        let cb = client(&b).await;
        let mut sub = cb.subscribe("after/restart").await.unwrap();
        ca.publish("after/restart", "hello again").await.unwrap();
        let got = sub.recv_timeout(LONG).await.map(|m| m.payload);
        assert_eq!(got.as_deref(), Some(&b"hello again"[..]));
        settled(&a).await;
        let skipped = count(&a, "not_wanted");
        ca.publish("before/restart", "nobody").await.unwrap();
        assert!(
            eventually(LONG, || count(&a, "not_wanted") == skipped + 1).await,
            "{}",
            status(&a)
        );

        // An older node says hello without a version.
        let raw = async_nats::connect(nats.url()).await.unwrap();
        let hello =
            serde_json::json!({"node": "old", "instance": "o1", "members": [], "ask": false});
        raw.publish("wharf.sys.hello", hello.to_string().into())
            .await
            .unwrap();
        raw.flush().await.unwrap();
        assert!(
            eventually(LONG, || status(&a)["forwarding_all"] == true).await,
            "{}",
            status(&a)
        );
        let forwarded = count(&a, "forwarded");
        ca.publish("before/restart", "for the old node")
            .await
            .unwrap();
        assert!(
            eventually(LONG, || count(&a, "forwarded") == forwarded + 1).await,
            "{}",
            status(&a)
        );
    });
}

/// A subscribe returns only once every node heard lately that tells its
/// filters has taken the new filter: a node (here a raw NATS client
/// speaking the exchange) that has not acknowledged it holds the
/// subscribe back; its acknowledgement lets it go.
#[test]
fn a_subscribe_waits_until_the_other_nodes_took_its_filter() {
    let nats = Nats::start();
    // A long confirm timeout: the subscribe ends by the acknowledgement,
    // not by giving up.
    let b = node_with(&nats, "b", |c| c.cluster.connect_timeout_ms = 60_000);
    block_on(async {
        let raw = async_nats::connect(nats.url()).await.unwrap();
        let mut said = raw.subscribe("wharf.sys.interest").await.unwrap();
        // b's link is up (it joins in the background) once it says hello.
        let mut hellos = raw.subscribe("wharf.sys.hello").await.unwrap();
        tokio::time::timeout(LONG, futures_util::StreamExt::next(&mut hellos))
            .await
            .expect("b says hello");
        let hello = serde_json::json!({
            "node": "x", "instance": "x1", "members": [], "ask": false, "interest": 0
        });
        raw.publish("wharf.sys.hello", hello.to_string().into())
            .await
            .unwrap();
        raw.flush().await.unwrap();
        assert!(
            eventually(LONG, || status(&b)["peers"].to_string().contains("\"x\"")).await,
            "{}",
            status(&b)
        );
        let cb = client(&b).await;
        let done = std::rc::Rc::new(std::cell::Cell::new(false));
        let subscribing = {
            let done = done.clone();
            actix_rt::spawn(async move {
                let sub = cb.subscribe("waits/here").await;
                done.set(true);
                (cb, sub)
            })
        };
        let change = loop {
            let m = tokio::time::timeout(LONG, futures_util::StreamExt::next(&mut said))
                .await
                .expect("b tells its new filter")
                .unwrap();
            let v: serde_json::Value = serde_json::from_slice(&m.payload).unwrap();
            if v["add"].to_string().contains("waits/here") {
                break (v, m.reply.expect("a change asks for an acknowledgement"));
            }
        };
        let (v, reply) = change;
        assert_eq!(v["node"], "b", "{v}");
        // Not acknowledged yet: the subscribe waits.
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert!(
            !done.get(),
            "the subscribe returned before x took the filter"
        );
        let ack = serde_json::json!({"node": "x", "version": v["version"]});
        raw.publish(reply, ack.to_string().into()).await.unwrap();
        let (_cb, sub) = tokio::time::timeout(LONG, subscribing)
            .await
            .expect("the acknowledgement lets the subscribe return")
            .unwrap();
        sub.unwrap();
    });
}

/// 4,000 publishes on node a at 400 a second while NATS is killed with
/// SIGKILL for about three seconds and started again, both nodes past
/// their warm-up (a sends b only what b listens to): b receives all
/// 4,000, in order, once.
#[test]
fn publishes_at_400_a_second_across_a_nats_kill_all_reach_the_other_node_in_order() {
    let mut nats = Nats::start();
    let (a, b) = (node(&nats.url(), "a"), node(&nats.url(), "b"));
    block_on(async {
        let (ca, _cb, mut on_b) = b_hears_a(&a, &b, "steady").await;
        let sent = std::rc::Rc::new(std::cell::Cell::new(0usize));
        let publisher = {
            let sent = sent.clone();
            actix_rt::spawn(async move {
                let mut every = tokio::time::interval(Duration::from_micros(2_500));
                for i in 0..4_000 {
                    every.tick().await;
                    ca.publish("steady/n", format!("{i}")).await.unwrap();
                    sent.set(i + 1);
                }
                ca
            })
        };
        assert!(eventually(LONG, || sent.get() >= 1_000).await);
        nats.kill();
        assert!(
            eventually(LONG, || status(&a)["state"] != "connected").await,
            "a notices NATS is gone"
        );
        assert!(eventually(LONG, || sent.get() >= 2_200).await);
        nats.restart();
        let _ca = tokio::time::timeout(LONG, publisher)
            .await
            .expect("the publisher ends")
            .unwrap();
        let mut got = Vec::with_capacity(4_000);
        while got.len() < 4_000 {
            match on_b.recv_timeout(LONG).await {
                Some(m) => got.push(String::from_utf8_lossy(&m.payload).into_owned()),
                None => break,
            }
        }
        let want: Vec<String> = (0..4_000).map(|i| i.to_string()).collect();
        let lost = want.len() - got.len();
        let had: std::collections::HashSet<&String> = got.iter().collect();
        let missing: Vec<&String> = want.iter().filter(|w| !had.contains(w)).take(5).collect();
        assert_eq!(
            got,
            want,
            "b got {} of 4,000 ({lost} lost: {missing:?}); a: {}; b: {}",
            got.len(),
            status(&a),
            status(&b)
        );
        let s = status(&a);
        assert_eq!(
            (s["dropped"].as_u64(), s["failed"].as_u64()),
            (Some(0), Some(0)),
            "{s}"
        );
    });
}

/// What node a wrote to NATS just before NATS died is not lost: a proxy
/// between a and NATS swallows what a sends (as a server killed with its
/// socket full takes it), then cuts a off. Once a is back on NATS, b gets
/// every message, in order, once: those swallowed are sent again, and
/// the copies b already had are dropped.
#[test]
fn what_a_dying_nats_swallowed_is_sent_again_and_had_once() {
    let nats = Nats::start();
    let port: u16 = nats.url().rsplit(':').next().unwrap().parse().unwrap();
    let proxy = Proxy::start(port);
    let (a, b) = (node(&proxy.url(), "a"), node(&nats.url(), "b"));
    block_on(async {
        let (ca, _cb, mut on_b) = b_hears_a(&a, &b, "swallow").await;
        let mut want = Vec::new();
        for i in 0..10 {
            let m = format!("before{i}");
            ca.publish("swallow/n", m.clone()).await.unwrap();
            want.push(m);
        }
        let mut got = Vec::new();
        while got.len() < 10 {
            let m = on_b.recv_timeout(LONG).await.expect("b hears a before");
            got.push(String::from_utf8_lossy(&m.payload).into_owned());
        }
        proxy.swallow();
        for i in 0..50 {
            let m = format!("swallowed{i}-");
            ca.publish("swallow/n", m.clone()).await.unwrap();
            want.push(m);
        }
        assert!(
            eventually(LONG, || proxy.swallowed(b"swallowed49-")).await,
            "a wrote them all to its connection"
        );
        let connects = status(&a)["connects"].as_u64().unwrap();
        proxy.cut();
        proxy.heal();
        assert!(
            eventually(LONG, || {
                let s = status(&a);
                s["state"] == "connected" && s["connects"].as_u64() > Some(connects)
            })
            .await,
            "a is back on NATS: {}",
            status(&a)
        );
        for i in 0..10 {
            let m = format!("after{i}");
            ca.publish("swallow/n", m.clone()).await.unwrap();
            want.push(m);
        }
        while got.len() < want.len() {
            match on_b.recv_timeout(LONG).await {
                Some(m) => got.push(String::from_utf8_lossy(&m.payload).into_owned()),
                None => break,
            }
        }
        got.extend(drain(&mut on_b, Duration::from_millis(300)).await);
        assert_eq!(got, want, "b got {} of {}", got.len(), want.len());
        let (sa, sb) = (status(&a), status(&b));
        assert!(sa["resent"].as_u64() >= Some(50), "{sa}");
        assert!(
            sb["repeats"].as_u64() >= Some(10),
            "b dropped what it had: {sb}"
        );
    });
}

/// `[cluster] forward_all = true`: every publish goes to NATS, wanted or
/// not, for NATS clients that read `wharf.t.>` themselves (here a raw
/// one, which no node knows of).
#[test]
fn forward_all_sends_every_publish_for_nats_clients_of_their_own() {
    let nats = Nats::start();
    let a = node_with(&nats, "a", |c| c.cluster.forward_all = true);
    let b = node(&nats.url(), "b");
    block_on(async {
        let raw = async_nats::connect(nats.url()).await.unwrap();
        let mut tap = raw.subscribe("wharf.t.>").await.unwrap();
        raw.flush().await.unwrap();
        let ca = client(&a).await;
        // b is past its warm-up and knows a's filters (none): it sends
        // nothing; a sends everything.
        settled(&b).await;
        assert!(
            eventually(LONG, || status(&a)["peer_filters"]["b"] == 0).await,
            "{}",
            status(&a)
        );
        assert_eq!(status(&a)["forwarding_all"], true);
        ca.publish("nobody/listens", "tapped").await.unwrap();
        let m = tokio::time::timeout(LONG, futures_util::StreamExt::next(&mut tap))
            .await
            .expect("the raw client hears a's publish")
            .unwrap();
        assert_eq!(m.subject.as_str(), "wharf.t.nobody.listens");
        assert_eq!(&m.payload[..], b"tapped");
        assert_eq!(count(&a, "not_wanted"), 0, "{}", status(&a));
        let cb = client(&b).await;
        cb.publish("nobody/listens", "kept on b").await.unwrap();
        assert!(
            eventually(LONG, || count(&b, "not_wanted") == 1).await,
            "{}",
            status(&b)
        );
    });
}
