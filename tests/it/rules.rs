//! Rules (`[[rules]]` and `Wharf::set_rules`) over real sockets: matchers
//! on topics with captures, headers, JSON fields, protocols and client
//! ids; the actions republish, enqueue, set_header, drop, dead_letter and
//! stop; rule loops; `GET /admin/rules` and `POST /admin/rules/reload`;
//! start-up validation of the binary; an embedding app's own matcher.

use crate::common;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use actix::prelude::*;
use bytes::Bytes;
use common::{ChildBroker, TestBroker, block_on, eventually, http, wait_until};
use serde_json::Value;
use wharf::client::mqtt::{MqttClient, MqttOptions};
use wharf::client::{Client, ClientOptions};
use wharf::protocol::frame::{Headers, Priority};
use wharf::rules::{Action, Context, Matcher, RuleDecl, Template, When};

const T: Duration = Duration::from_secs(10);

/// The `[[rules]]` of a TOML document.
fn rules(text: &str) -> Vec<RuleDecl> {
    let config = wharf::Config::from_toml(text).expect("the rules parse");
    wharf::rules::compile(&config.rules).expect("the rules compile");
    config.rules
}

async fn connect(b: &TestBroker, id: Option<&str>) -> Client {
    let options = ClientOptions {
        client_id: id.map(str::to_owned),
        ..ClientOptions::default()
    };
    Client::connect(&b.ws_url(), options)
        .await
        .expect("connect")
}

fn headers(pairs: &[(&str, &str)]) -> Headers {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect()
}

fn hdr<'h>(h: &'h Headers, name: &str) -> Option<&'h str> {
    h.get(name).map(String::as_str)
}

/// Publishes with headers and waits for the receipt.
async fn publish_h(c: &Client, topic: &str, payload: &str, h: &[(&str, &str)]) {
    c.publish_with(
        topic,
        payload.as_bytes().to_vec(),
        headers(h),
        false,
        Priority::Normal,
        true,
    )
    .await
    .expect("publish confirmed");
}

fn get(b: &TestBroker, path: &str) -> (u16, Value) {
    let (status, body) = http(b.addr, "GET", path, "");
    let v = serde_json::from_str(&body).unwrap_or(Value::String(body));
    (status, v)
}

/// A queue's depth, `None` when there is no such queue.
fn depth(b: &TestBroker, queue: &str) -> Option<u64> {
    match get(b, &format!("/queues/{queue}")) {
        (200, v) => v["depth"].as_u64(),
        (404, _) => None,
        (status, v) => panic!("GET /queues/{queue}: {status} {v}"),
    }
}

/// The messages of a queue, without consuming them.
fn browse(b: &TestBroker, queue: &str) -> Vec<Value> {
    let (status, v) = get(b, &format!("/queues/{queue}/messages"));
    assert_eq!(status, 200, "{v}");
    v["messages"].as_array().cloned().unwrap_or_default()
}

/// One rule of `GET /admin/rules` by name.
fn admin_rule(b: &TestBroker, name: &str) -> Value {
    let (status, v) = get(b, "/admin/rules");
    assert_eq!(status, 200, "{v}");
    v["rules"]
        .as_array()
        .and_then(|rs| rs.iter().find(|r| r["name"] == name))
        .cloned()
        .unwrap_or_else(|| panic!("no rule {name} in {v}"))
}

/// The string `key` of each item of an array.
fn each<'v>(items: &'v Value, key: &str) -> Vec<&'v str> {
    let items = items.as_array().map(Vec::as_slice).unwrap_or_default();
    items.iter().filter_map(|i| i[key].as_str()).collect()
}

async fn recv(
    sub: &mut wharf::client::Subscription,
    what: &str,
) -> wharf::protocol::frame::Message {
    sub.recv_timeout(T)
        .await
        .unwrap_or_else(|| panic!("no message: {what}"))
}

#[test]
fn republish_with_captures_and_a_header_set_from_them() {
    let b = TestBroker::start(|c| {
        c.rules = rules(
            r#"
            [[rules]]
            name = "tenant-orders"
            when = { topic = "tenants/+/orders/#" }
            then = [
                { set_header = "tenant", value = "{1}" },
                { set_header = "rest", value = "{2}" },
                { republish = "orders/{1}" },
            ]
            "#,
        );
    });
    block_on(async {
        let c = connect(&b, None).await;
        let mut copies = c.subscribe("orders/+").await.unwrap();
        let mut originals = c.subscribe("tenants/#").await.unwrap();
        publish_h(&c, "tenants/acme/orders/eu/7", "o-1", &[]).await;
        let m = recv(&mut copies, "the republished copy").await;
        assert_eq!(m.topic, "orders/acme");
        assert_eq!(m.payload, b"o-1");
        assert_eq!(hdr(&m.headers, "tenant"), Some("acme"));
        assert_eq!(hdr(&m.headers, "rest"), Some("eu/7"));
        let o = recv(&mut originals, "the original").await;
        assert_eq!(o.topic, "tenants/acme/orders/eu/7");
        assert_eq!(hdr(&o.headers, "tenant"), Some("acme"));
        // Another tenant goes to its own copy topic.
        publish_h(&c, "tenants/globex/orders/1", "o-2", &[]).await;
        let m = recv(&mut copies, "globex's copy").await;
        assert_eq!(
            (m.topic.as_str(), &m.payload[..]),
            ("orders/globex", &b"o-2"[..])
        );
        // A topic outside the filter is left alone.
        publish_h(&c, "tenants/acme/bills/1", "b", &[]).await;
        let o = recv(&mut originals, "o-2 original").await;
        assert_eq!(o.payload, b"o-2");
        let o = recv(&mut originals, "the bill").await;
        assert_eq!(o.topic, "tenants/acme/bills/1");
        assert!(o.headers.is_empty(), "{:?}", o.headers);
    });
    let r = admin_rule(&b, "tenant-orders");
    assert_eq!(r["hits"], 2, "{r}");
    assert_eq!(r["then"][2]["kind"], "republish", "{r}");
    assert_eq!(r["then"][2]["runs"], 2, "{r}");
    assert_eq!(r["then"][2]["failures"], 0, "{r}");
}

#[test]
fn captures_are_those_of_the_filter_that_matched() {
    // The first branch's topic filter matches "sensors/temp" but its header
    // test does not: the rule matches through the second branch, whose
    // only wildcard stands for "temp".
    let b = TestBroker::start(|c| {
        c.rules = rules(
            r#"
            [[rules]]
            name = "by-kind"
            when = { any = [
                { all = [ { topic = "+/temp" }, { header = "unit", equals = "F" } ] },
                { topic = "sensors/+" },
            ] }
            then = [ { republish = "kinds/{1}" } ]
            "#,
        );
    });
    block_on(async {
        let c = connect(&b, None).await;
        let mut kinds = c.subscribe("kinds/+").await.unwrap();
        publish_h(&c, "sensors/temp", "21", &[]).await;
        let m = recv(&mut kinds, "the copy").await;
        assert_eq!(
            m.topic, "kinds/temp",
            "captured from the filter that matched"
        );
    });
}

#[test]
fn drop_and_dead_letter() {
    let b = TestBroker::start(|c| {
        c.rules = rules(
            r#"
            [[rules]]
            name = "no-spam"
            when = { all = [ { topic = "chat/#" }, { header = "spam", exists = true } ] }
            then = [ { drop = true } ]

            [[rules]]
            name = "quarantine"
            when = { all = [ { topic = "chat/#" }, { header = "virus", one_of = ["yes", "maybe"] } ] }
            then = [ { dead_letter = "quarantined" } ]
            "#,
        );
    });
    block_on(async {
        let c = connect(&b, None).await;
        let mut chat = c.subscribe("chat/+").await.unwrap();
        publish_h(&c, "chat/room", "buy now", &[("spam", "1")]).await;
        publish_h(&c, "chat/room", "infected", &[("virus", "maybe")]).await;
        publish_h(&c, "chat/room", "clean", &[("virus", "no")]).await;
        let m = recv(&mut chat, "the normal message").await;
        assert_eq!(m.payload, b"clean", "dropped and dead-lettered come first?");
        assert_eq!(depth(&b, "quarantined"), Some(1));
        let msgs = browse(&b, "quarantined");
        assert_eq!(msgs.len(), 1, "{msgs:?}");
        assert_eq!(msgs[0]["payload"], "infected");
        let h = &msgs[0]["headers"];
        assert_eq!(h["rule"], "quarantine", "{h}");
        assert_eq!(h["dead-letter-topic"], "chat/room", "{h}");
        assert_eq!(h["virus"], "maybe", "{h}");
        // The dead letter can be consumed with its headers.
        let mut k = c.consume("quarantined", 1).await.unwrap();
        let d = k.recv_timeout(T).await.expect("the dead letter");
        assert_eq!(d.payload, b"infected");
        assert_eq!(hdr(&d.headers, "rule"), Some("quarantine"));
        c.ack(k.id(), &[d.id]).await.unwrap();
    });
    let r = admin_rule(&b, "no-spam");
    assert_eq!(
        (r["hits"].as_u64(), r["then"][0]["runs"].as_u64()),
        (Some(1), Some(1)),
        "{r}"
    );
    let r = admin_rule(&b, "quarantine");
    assert_eq!(r["hits"], 1, "{r}");
    assert_eq!(r["then"][0]["kind"], "dead_letter", "{r}");
}

#[test]
fn json_matchers_enqueue_with_priority() {
    let b = TestBroker::start(|c| {
        c.rules = rules(
            r#"
            [[rules]]
            name = "big"
            when = { all = [ { topic = "shop/orders" }, { json = "order.qty", gt = 3 } ] }
            then = [ { enqueue = "big-orders", priority = 7 } ]

            [[rules]]
            name = "rush"
            when = { all = [ { topic = "shop/#" }, { json = "order.kind", one_of = ["rush", "now"] } ] }
            then = [ { enqueue = "rush-orders", ttl_ms = 600000 } ]

            [[rules]]
            name = "large"
            when = { all = [ { topic = "shop/#" }, { payload_size = { ge = 60 } } ] }
            then = [ { enqueue = "large-orders" } ]

            [[rules]]
            name = "sku"
            when = { all = [ { topic = "shop/#" }, { json = "order.items.1.sku", regex = "^A-" } ] }
            then = [ { enqueue = "second-item-a" } ]
            "#,
        );
    });
    block_on(async {
        let c = connect(&b, None).await;
        for p in [
            r#"{"order":{"qty":5}}"#,
            r#"{"order":{"qty":1}}"#,
            r#"{"order":{"qty":"9"}}"#,
            "qty 9, not JSON",
            r#"{"order":{"qty":3}}"#,
            r#"{"order":{"qty":3.5,"kind":"rush"}}"#,
            r#"{"order":{"kind":"slow","items":[{"sku":"B-1"},{"sku":"A-2"}]}}"#,
            r#"{"order":{"items":[{"sku":"A-1"}]}}"#,
        ] {
            publish_h(&c, "shop/orders", p, &[]).await;
        }
    });
    assert!(wait_until(T, || depth(&b, "big-orders") == Some(2)));
    let big = browse(&b, "big-orders");
    let payloads: Vec<&str> = big.iter().map(|m| m["payload"].as_str().unwrap()).collect();
    assert_eq!(
        payloads,
        [
            r#"{"order":{"qty":5}}"#,
            r#"{"order":{"qty":3.5,"kind":"rush"}}"#
        ]
    );
    assert!(big.iter().all(|m| m["priority"] == 7), "{big:?}");
    let rush = browse(&b, "rush-orders");
    assert_eq!(rush.len(), 1, "{rush:?}");
    assert!(rush[0]["expires_ms"].as_u64().is_some(), "ttl_ms: {rush:?}");
    let sku = browse(&b, "second-item-a");
    assert_eq!(sku.len(), 1, "{sku:?}");
    assert!(sku[0]["payload"].as_str().unwrap().contains("B-1"));
    let large = browse(&b, "large-orders");
    assert_eq!(large.len(), 1, "{large:?}");
    assert!(large[0]["size"].as_u64().unwrap() >= 60, "{large:?}");
    assert_eq!(admin_rule(&b, "big")["hits"], 2);
}

#[test]
fn protocol_and_client_id_matchers() {
    let b = TestBroker::start(|c| {
        c.rules = rules(
            r#"
            [[rules]]
            name = "mqtt-only"
            when = { all = [ { topic = "t/#" }, { protocol = "mqtt" } ] }
            then = [ { republish = "from-mqtt" } ]

            [[rules]]
            name = "http-only"
            when = { all = [ { topic = "t/#" }, { protocol = ["http"] } ] }
            then = [ { republish = "from-http" } ]

            [[rules]]
            name = "bob"
            when = { all = [ { topic = "c/#" }, { client_id = "bob" } ] }
            then = [ { republish = "by/{client_id}" } ]

            [[rules]]
            name = "devices"
            when = { all = [ { topic = "c/#" }, { client_id = { regex = "^dev-" } } ] }
            then = [ { set_header = "device", value = "{client_id}" } ]
            "#,
        );
    });
    let addr = b.addr;
    block_on(async {
        let c = connect(&b, Some("watcher")).await;
        let mut from_mqtt = c.subscribe("from-mqtt").await.unwrap();
        let mut from_http = c.subscribe("from-http").await.unwrap();
        // HTTP and native publishes first: neither is MQTT.
        let (status, body) = http(addr, "POST", "/topics/t/x", "over http");
        assert_eq!(status, 202, "{body}");
        publish_h(&c, "t/n", "over native", &[]).await;
        let mut m = MqttClient::connect(
            &format!("ws://{addr}/mqtt"),
            MqttOptions {
                client_id: "mq-1".into(),
                ..MqttOptions::default()
            },
        )
        .await
        .unwrap();
        m.publish("t/m", Bytes::from_static(b"over mqtt"), 1, false)
            .await
            .unwrap();
        let got = recv(&mut from_mqtt, "the MQTT publish's copy").await;
        assert_eq!(got.payload, b"over mqtt", "only MQTT publishes are copied");
        let got = recv(&mut from_http, "the HTTP publish's copy").await;
        assert_eq!(got.payload, b"over http", "only HTTP publishes are copied");
        m.disconnect().await.unwrap();

        // Client ids: alice publishes first, then bob.
        let mut by = c.subscribe("by/#").await.unwrap();
        let mut all = c.subscribe("c/#").await.unwrap();
        let alice = connect(&b, Some("alice")).await;
        let bob = connect(&b, Some("bob")).await;
        let dev = connect(&b, Some("dev-42")).await;
        publish_h(&alice, "c/1", "alice", &[]).await;
        publish_h(&bob, "c/2", "bob", &[]).await;
        publish_h(&dev, "c/3", "dev", &[]).await;
        let got = recv(&mut by, "bob's copy").await;
        assert_eq!(
            (got.topic.as_str(), &got.payload[..]),
            ("by/bob", &b"bob"[..])
        );
        for (payload, device) in [("alice", None), ("bob", None), ("dev", Some("dev-42"))] {
            let got = recv(&mut all, payload).await;
            assert_eq!(got.payload, payload.as_bytes());
            assert_eq!(hdr(&got.headers, "device"), device);
        }
    });
    assert_eq!(admin_rule(&b, "mqtt-only")["hits"], 1);
    assert_eq!(admin_rule(&b, "http-only")["hits"], 1);
    assert_eq!(admin_rule(&b, "bob")["hits"], 1);
}

#[test]
fn stop_ends_the_chain_and_later_rules() {
    let b = TestBroker::start(|c| {
        c.rules = rules(
            r#"
            [[rules]]
            name = "halt"
            when = { all = [ { topic = "s/#" }, { header = "halt", exists = true } ] }
            then = [ { enqueue = "halted" }, { stop = true }, { enqueue = "after-stop" } ]

            [[rules]]
            name = "later"
            when = { topic = "s/#" }
            then = [ { remove_header = "secret" }, { enqueue = "later" } ]
            "#,
        );
    });
    block_on(async {
        let c = connect(&b, None).await;
        publish_h(&c, "s/1", "halted", &[("halt", "")]).await;
        publish_h(&c, "s/2", "goes on", &[("secret", "x"), ("kept", "y")]).await;
    });
    assert!(wait_until(T, || depth(&b, "later") == Some(1)));
    let later = browse(&b, "later");
    assert_eq!(later[0]["payload"], "goes on");
    assert_eq!(later[0]["headers"], serde_json::json!({"kept": "y"}));
    assert_eq!(depth(&b, "halted"), Some(1));
    assert_eq!(depth(&b, "after-stop"), None, "stop ends its own chain");
    let halt = admin_rule(&b, "halt");
    let runs: Vec<u64> = (0..3)
        .map(|i| halt["then"][i]["runs"].as_u64().unwrap())
        .collect();
    assert_eq!(runs, [1, 1, 0], "{halt}");
    assert_eq!(
        admin_rule(&b, "later")["hits"],
        1,
        "the halted one never got there"
    );
}

#[test]
fn a_rule_loop_is_cut_counted_and_the_broker_keeps_serving() {
    let b = TestBroker::start(|c| {
        c.rules = rules(
            r#"
            [[rules]]
            name = "loop"
            when = { topic = "loop/#" }
            then = [ { republish = "loop/more" } ]
            "#,
        );
    });
    block_on(async {
        let c = connect(&b, None).await;
        let mut more = c.subscribe("loop/more").await.unwrap();
        // The publish returns once every republish in the chain is done.
        publish_h(&c, "loop/start", "spin", &[]).await;
        assert_eq!(recv(&mut more, "a copy").await.payload, b"spin");
        // Still serving: a publish and a round trip.
        let mut other = c.subscribe("elsewhere").await.unwrap();
        publish_h(&c, "elsewhere", "ok", &[]).await;
        assert_eq!(recv(&mut other, "after the loop").await.payload, b"ok");
        c.ping().await.unwrap();
    });
    assert_eq!(http(b.addr, "GET", "/health", "").0, 200);
    let lp = admin_rule(&b, "loop");
    assert_eq!(lp["then"][0]["failures"], 1, "the refused republish: {lp}");
    // README: "copies go through the rules too, at most 8 republishes
    // deep": loop/start is republished to loop/more, that copy again, ...
    // eight times, and the ninth republish is refused.
    let (status, topics) = get(&b, "/admin/topics?filter=loop/%23");
    assert_eq!(status, 200, "{topics}");
    let copies = topics["topics"]
        .as_array()
        .and_then(|ts| ts.iter().find(|t| t["name"] == "loop/more"))
        .map(|t| t["published"].clone());
    let depth = u64::from(wharf::rules::MAX_DEPTH);
    assert_eq!(depth, 8, "the documented depth");
    assert_eq!(copies, Some(depth.into()), "republishes in a row: {topics}");
    assert_eq!(lp["hits"], depth + 1, "{lp}");
}

#[test]
fn a_negated_topic_does_not_limit_the_captures() {
    // Everything under a/ but a/b, queued by its second level: the only
    // filter a message can match through is a/+, with one wildcard.
    let text = r#"
        [[rules]]
        name = "all-but-b"
        when = { all = [ { topic = "a/+" }, { not = { topic = "a/b" } } ] }
        then = [ { enqueue = "q-{1}" } ]
    "#;
    let decls = wharf::Config::from_toml(text).unwrap().rules;
    if let Err(e) = wharf::rules::compile(&decls) {
        panic!("a valid rule is refused: {e}");
    }
    let b = TestBroker::start(|c| c.rules = decls);
    for topic in ["a/b", "a/c"] {
        let (status, body) = http(b.addr, "POST", &format!("/topics/{topic}"), "x");
        assert_eq!(status, 202, "{body}");
    }
    assert_eq!(depth(&b, "q-c"), Some(1));
    assert_eq!(depth(&b, "q-b"), None);
}

#[test]
fn a_transactions_publishes_meet_the_rules_at_commit() {
    let b = TestBroker::start(|c| {
        c.rules = rules(
            r#"
            [[rules]]
            name = "tx"
            when = { all = [ { topic = "txn/#" }, { client_id = "tx-client" }, { protocol = "native" } ] }
            then = [ { enqueue = "txn-copies" }, { republish = "txn-seen", retain = true } ]
            "#,
        );
    });
    block_on(async {
        let c = connect(&b, Some("tx-client")).await;
        c.begin().await.unwrap();
        publish_h(&c, "txn/a", "staged", &[]).await;
        assert_eq!(depth(&b, "txn-copies"), None, "not before the commit");
        c.commit().await.unwrap();
        assert_eq!(depth(&b, "txn-copies"), Some(1));
        // The retained copy is there for a subscriber that comes later.
        let late = connect(&b, None).await;
        let mut seen = late.subscribe("txn-seen").await.unwrap();
        let m = recv(&mut seen, "the retained copy").await;
        assert!(m.retained, "{m:?}");
        assert_eq!(m.payload, b"staged");
    });
}

const FIRST: &str = r#"
[[rules]]
name = "first"
when = { topic = "r/#" }
then = [ { set_header = "by", value = "first" }, { republish = "seen/{1}" } ]
"#;

const SECOND: &str = r#"
[[rules]]
name = "second"
when = { topic = "r/+" }
then = [ { enqueue = "second-{1}" } ]
"#;

const BAD: &str = r#"
[[rules]]
name = "fine"
then = [ { drop = true } ]

[[rules]]
name = "broken"
when = { topic = "r/+" }
then = [ { republish = "x/{2}" } ]
"#;

#[test]
fn admin_counts_and_reload_from_the_config_file() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("wharf.toml");
    std::fs::write(&file, FIRST).unwrap();
    let b = TestBroker::start(|c| {
        let loaded = wharf::Config::from_file(&file).unwrap();
        c.rules = loaded.rules;
        c.file = loaded.file;
    });
    block_on(async {
        let c = connect(&b, None).await;
        let mut seen = c.subscribe("seen/#").await.unwrap();
        publish_h(&c, "r/a", "1", &[]).await;
        publish_h(&c, "r/b/c", "2", &[]).await;
        publish_h(&c, "q/a", "3", &[]).await;
        let m = recv(&mut seen, "first copy").await;
        assert_eq!(
            (m.topic.as_str(), hdr(&m.headers, "by")),
            ("seen/a", Some("first"))
        );
        assert_eq!(recv(&mut seen, "second copy").await.topic, "seen/b/c");
    });
    let (status, v) = get(&b, "/admin/rules");
    assert_eq!(status, 200, "{v}");
    let rs = v["rules"].as_array().unwrap();
    assert_eq!(rs.len(), 1, "{v}");
    let r = &rs[0];
    assert_eq!(r["name"], "first");
    assert_eq!(r["from"], "config");
    assert!(r["when"].as_str().unwrap().contains("r/#"), "{r}");
    assert_eq!(r["hits"], 2, "{r}");
    assert_eq!(each(&r["then"], "kind"), ["set_header", "republish"]);
    assert_eq!(r["then"][0]["runs"], 2, "{r}");
    assert_eq!(r["then"][1]["runs"], 2, "{r}");
    assert!(
        r["then"][1]["does"].as_str().unwrap().contains("seen/{1}"),
        "{r}"
    );
    assert!(r["then"][1].get("forward").is_none(), "{r}");

    // A different rule: reloaded, it acts and the old one does not.
    std::fs::write(&file, SECOND).unwrap();
    let (status, body) = http(b.addr, "POST", "/admin/rules/reload", "");
    assert_eq!(status, 200, "{body}");
    let v: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(each(&v["rules"], "name"), ["second"], "{v}");
    assert_eq!(v["rules"][0]["hits"], 0, "{v}");
    block_on(async {
        let c = connect(&b, None).await;
        let mut seen = c.subscribe("seen/#").await.unwrap();
        publish_h(&c, "r/x", "after reload", &[]).await;
        assert_eq!(depth(&b, "second-x"), Some(1));
        // The old rule is gone: a message published straight to seen/z is
        // the first this subscription gets.
        publish_h(&c, "seen/z", "direct", &[]).await;
        assert_eq!(recv(&mut seen, "the direct one").await.payload, b"direct");
    });

    // A bad file: 422 naming the rule and the field; the old rules stay.
    std::fs::write(&file, BAD).unwrap();
    let (status, body) = http(b.addr, "POST", "/admin/rules/reload", "");
    assert_eq!(status, 422, "{body}");
    assert!(body.contains("invalid_config"), "{body}");
    assert!(
        body.contains("rules[1] (broken).then[0].republish"),
        "{body}"
    );
    let (_, v) = get(&b, "/admin/rules");
    assert_eq!(v["rules"].as_array().unwrap().len(), 1, "{v}");
    assert_eq!(v["rules"][0]["name"], "second", "{v}");
    block_on(async {
        let c = connect(&b, None).await;
        publish_h(&c, "r/x", "still second", &[]).await;
    });
    assert_eq!(depth(&b, "second-x"), Some(2), "the old rule still acts");
    // A file that is not even TOML: 422 too.
    std::fs::write(&file, "[[rules]\nname = ").unwrap();
    let (status, body) = http(b.addr, "POST", "/admin/rules/reload", "");
    assert_eq!(status, 422, "{body}");
    assert_eq!(admin_rule(&b, "second")["hits"], 2);

    // A broker started without a file has nothing to reload.
    let plain = TestBroker::start(|c| c.rules = rules(SECOND));
    let (status, body) = http(plain.addr, "POST", "/admin/rules/reload", "");
    assert_eq!(status, 409, "{body}");
    assert!(body.contains("no_config_file"), "{body}");
    assert_eq!(admin_rule(&plain, "second")["hits"], 0);
}

#[test]
fn serve_refuses_invalid_rules_naming_rule_and_field() {
    let dir = tempfile::tempdir().unwrap();
    let cases = [
        (
            "[[rules]]\nname = \"hook\"\nthen = [ { forward = { urls = [\"ftp://x\"] } } ]\n",
            "rules[0] (hook).then[0].forward.urls[0]",
        ),
        (
            "[[rules]]\nname = \"ok\"\nthen = [ { drop = true } ]\n\n\
             [[rules]]\nname = \"re\"\nwhen = { header = \"h\", regex = \"(\" }\nthen = [ { drop = true } ]\n",
            "rules[1] (re).when.regex",
        ),
    ];
    for (i, (text, key)) in cases.into_iter().enumerate() {
        let file = dir.path().join(format!("bad{i}.toml"));
        std::fs::write(&file, text).unwrap();
        let data = dir.path().join(format!("data{i}"));
        let (f, d) = (file.to_str().unwrap(), data.to_str().unwrap());
        let args = [
            "serve",
            "--config",
            f,
            "--bind",
            "127.0.0.1:0",
            "--data-dir",
            d,
        ];
        let mut child = ChildBroker::spawn(&args);
        let status = child.wait_exit(T);
        let stderr = child.stderr_rest();
        assert_eq!(status.code(), Some(2), "{stderr}");
        assert!(stderr.contains(key), "{key} in {stderr}");
    }
}

/// Messages whose payload starts with a prefix.
struct Prefix(&'static [u8]);

impl Matcher for Prefix {
    fn matches(&self, cx: &Context<'_>) -> bool {
        cx.payload.starts_with(self.0)
    }

    fn describe(&self) -> String {
        format!("payload starts with {:?}", String::from_utf8_lossy(self.0))
    }
}

type Log = Arc<Mutex<Vec<(String, String, Headers)>>>;

struct Collector(Log);

impl Actor for Collector {
    type Context = actix::Context<Collector>;
}

impl Handler<wharf::Delivery> for Collector {
    type Result = ();

    fn handle(&mut self, d: wharf::Delivery, _: &mut Self::Context) {
        let m = &d.message;
        self.0.lock().unwrap().push((
            m.topic.to_string(),
            String::from_utf8_lossy(&m.payload).into_owned(),
            m.headers.clone(),
        ));
    }
}

#[test]
fn an_embedding_app_adds_rules_with_its_own_matcher() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = wharf::Config::default();
    config.store.data_dir = dir.path().join("data");
    config.scheduler.workers = 1;
    config.server.shutdown_timeout_s = 2;
    config.rules = rules(
        r#"
        [[rules]]
        name = "stamp"
        when = { topic = "inbox" }
        then = [ { set_header = "stamped", value = "{topic}" } ]
        "#,
    );
    block_on(async move {
        let wharf = wharf::Wharf::start(config).await.unwrap();
        wharf.set_rules(vec![
            wharf::rules::Rule::when(When::all([
                When::topic("inbox"),
                When::custom(Prefix(b"urgent:")),
            ]))
            .then([
                Action::Republish {
                    topic: Template::parse("alerts").unwrap(),
                    retain: false,
                },
                Action::Enqueue {
                    queue: Template::parse("urgent-q").unwrap(),
                    priority: 9,
                    ttl_ms: None,
                },
            ])
            .named("urgent"),
        ]);
        let log = Log::default();
        let actor = Collector(log.clone()).start();
        let _sub = wharf.subscribe("alerts", actor.recipient()).await.unwrap();
        wharf.publish("inbox", "hello").await.unwrap();
        wharf.publish("inbox", "urgent: fire").await.unwrap();
        wharf.publish("other", "urgent: not here").await.unwrap();
        assert!(eventually(T, || !log.lock().unwrap().is_empty()).await);
        let (topic, payload, h) = log.lock().unwrap()[0].clone();
        assert_eq!(
            (topic.as_str(), payload.as_str()),
            ("alerts", "urgent: fire")
        );
        assert_eq!(
            h.get("stamped").map(String::as_str),
            Some("inbox"),
            "config rules run first"
        );
        let q = wharf
            .broker()
            .queues()
            .queue_info("urgent-q")
            .await
            .expect("the queue");
        assert_eq!(q.depth, 1);

        let report = wharf.rules().report();
        let names: Vec<(&str, &str)> = report.iter().map(|r| (r.name.as_str(), r.from)).collect();
        assert_eq!(names, [("stamp", "config"), ("urgent", "code")]);
        assert!(
            report[1].when.contains("payload starts with"),
            "{:?}",
            report[1].when
        );
        assert_eq!(report[1].hits, 1);
        assert_eq!(report[0].hits, 2);

        // Without the app's rules, urgent messages are no longer copied: a
        // marker published straight to alerts is the next delivery.
        wharf.set_rules(Vec::new());
        wharf.publish("inbox", "urgent: again").await.unwrap();
        wharf.publish("alerts", "marker").await.unwrap();
        assert!(eventually(T, || log.lock().unwrap().len() >= 2).await);
        assert_eq!(log.lock().unwrap()[1].1, "marker");
        assert_eq!(wharf.rules().report().len(), 1);
        wharf.shutdown().await.unwrap();
    });
}
