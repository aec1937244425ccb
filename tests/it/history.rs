//! Topic history over real sockets: offsets and an epoch kept across a
//! restart, `GET /topics/{t}/history`, a native `subscribe` that
//! recovers what it missed with no gap and no duplicate, the answers when
//! it cannot, a new epoch after a crash, Server-Sent Events resumed from
//! `Last-Event-ID`, and `[[history]]` re-read on SIGHUP.

use crate::common::{self, ChildBroker, TestBroker, block_on, http, http_request};
use crate::sse::{open, until};

use std::net::SocketAddr;
use std::time::Duration;

use wharf::client::{Client, ClientOptions};
use wharf::config::HistoryDecl;
use wharf::config::auth::{Permissions, TokenConfig};
use wharf::protocol::Format;
use wharf::protocol::frame::ErrorCode;

const T: Duration = Duration::from_secs(10);

fn chat(size: usize) -> impl FnOnce(&mut wharf::Config) {
    move |c| {
        c.history.push(HistoryDecl {
            filter: "chat/#".into(),
            size,
            ttl_s: 0,
        })
    }
}

fn json(body: &str) -> serde_json::Value {
    serde_json::from_str(body).unwrap_or_else(|e| panic!("{e}: {body}"))
}

/// `GET /topics/{topic}/history?since=..`: (epoch, offsets, payloads).
fn history(addr: SocketAddr, topic: &str, since: u64) -> (String, Vec<u64>, Vec<String>) {
    let (code, body) = http(
        addr,
        "GET",
        &format!("/topics/{topic}/history?since={since}"),
        "",
    );
    assert_eq!(code, 200, "{body}");
    let v = json(&body);
    let messages = v["messages"].as_array().unwrap();
    (
        v["epoch"].as_str().unwrap().to_owned(),
        messages
            .iter()
            .map(|m| m["offset"].as_u64().unwrap())
            .collect(),
        messages
            .iter()
            .map(|m| m["payload"].as_str().unwrap().to_owned())
            .collect(),
    )
}

fn publish(addr: SocketAddr, topic: &str, payload: &str) {
    let (code, body) = http(addr, "POST", &format!("/topics/{topic}"), payload);
    assert_eq!(code, 202, "{body}");
}

async fn connect(b: &TestBroker) -> Client {
    Client::connect(
        &b.ws_url(),
        ClientOptions {
            format: Format::Bincode,
            ..ClientOptions::default()
        },
    )
    .await
    .expect("connect")
}

#[test]
fn history_survives_a_restart_and_a_subscriber_recovers_exactly_what_it_missed() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let b = TestBroker::start_in(&data, chat(100));
    // Nobody subscribes: the topic keeps its messages all the same.
    for i in 1..=10 {
        publish(b.addr, "chat/room1", &format!("m{i}"));
    }
    let (epoch, offsets, payloads) = history(b.addr, "chat/room1", 0);
    assert_eq!(offsets, (1..=10).collect::<Vec<_>>());
    assert_eq!(payloads[0], "m1");
    assert_eq!(epoch.len(), 12, "{epoch}");
    b.stop().expect("clean stop");

    let b = TestBroker::start_in(&data, chat(100));
    let (again, offsets, payloads) = history(b.addr, "chat/room1", 5);
    assert_eq!(again, epoch, "a clean restart keeps the epoch");
    assert_eq!(offsets, vec![6, 7, 8, 9, 10]);
    assert_eq!(payloads, ["m6", "m7", "m8", "m9", "m10"]);
    block_on(async {
        let c = connect(&b).await;
        let (mut sub, answer) = c
            .subscribe_recovering("chat/room1", Some((&epoch, 5)))
            .await
            .unwrap();
        assert!(answer.recovered, "{answer:?}");
        assert_eq!((answer.replayed, answer.offset), (5, 10));
        assert_eq!(answer.epoch, epoch);
        let mut got = Vec::new();
        for _ in 0..5 {
            let m = sub.recv_timeout(T).await.expect("a missed message");
            got.push((m.seq, String::from_utf8(m.payload).unwrap()));
        }
        assert_eq!(
            got,
            (6..=10).map(|i| (i, format!("m{i}"))).collect::<Vec<_>>()
        );
        // Then the live ones, numbered on.
        c.publish_confirmed("chat/room1", b"live".to_vec())
            .await
            .unwrap();
        let m = sub.recv_timeout(T).await.expect("the live message");
        assert_eq!((m.seq, &m.payload[..]), (11, &b"live"[..]));
        assert!(
            sub.recv_timeout(Duration::from_millis(300)).await.is_none(),
            "nothing twice"
        );
    });
}

#[test]
fn recovery_joins_live_publishes_with_no_gap_and_no_duplicate() {
    let b = TestBroker::start(chat(10_000));
    let addr = b.addr;
    block_on(async {
        let c = connect(&b).await;
        for i in 1..=100u32 {
            c.publish_confirmed("chat/busy", i.to_string().into_bytes())
                .await
                .unwrap();
        }
        let (epoch, _, _) = history(addr, "chat/busy", 100);
        // A publisher keeps going while the subscriber recovers from 50.
        let publisher = std::thread::spawn(move || {
            for i in 101..=400 {
                publish(addr, "chat/busy", &i.to_string());
            }
        });
        let (mut sub, answer) = c
            .subscribe_recovering("chat/busy", Some((&epoch, 50)))
            .await
            .unwrap();
        assert!(answer.recovered, "{answer:?}");
        let mut want = 51u64;
        while want <= 400 {
            let m = sub.recv_timeout(T).await.expect("every message, in order");
            assert_eq!(m.seq, want, "no gap, no duplicate");
            assert_eq!(m.payload, want.to_string().into_bytes());
            want += 1;
        }
        publisher.join().unwrap();
        assert!(sub.recv_timeout(Duration::from_millis(300)).await.is_none());
    });
}

#[test]
fn a_position_that_cannot_be_recovered_is_answered_recovered_false_with_why() {
    let b = TestBroker::start(chat(3));
    for i in 1..=10 {
        publish(b.addr, "chat/small", &format!("m{i}"));
    }
    let (epoch, offsets, _) = history(b.addr, "chat/small", 0);
    assert_eq!(offsets, vec![8, 9, 10], "size 3 keeps the last three");
    block_on(async {
        let c = connect(&b).await;
        let cases = [
            (Some(("000000000000", 9)), "reset"),
            (Some((epoch.as_str(), 2)), "no longer kept"),
            (Some((epoch.as_str(), 99)), "ahead"),
            (None, "no position"),
        ];
        for (latest, (position, why)) in (10..).zip(cases) {
            let (mut sub, answer) = c
                .subscribe_recovering("chat/small", position)
                .await
                .unwrap();
            assert!(!answer.recovered, "{position:?}: {answer:?}");
            assert_eq!(
                (answer.epoch.as_str(), answer.offset),
                (epoch.as_str(), latest)
            );
            let reason = answer.reason.clone().unwrap_or_default();
            assert!(reason.contains(why), "{position:?}: {reason}");
            assert_eq!(answer.replayed, 0);
            // Subscribed all the same: live messages arrive.
            c.publish_confirmed("chat/small", b"live".to_vec())
                .await
                .unwrap();
            let m = sub.recv_timeout(T).await.expect("a live message");
            assert_eq!(&m.payload[..], b"live");
        }
        // The last position in the window recovers nothing, and is true.
        let (_, answer) = c
            .subscribe_recovering("chat/small", Some((&epoch, 14)))
            .await
            .unwrap();
        assert!(answer.recovered && answer.replayed == 0, "{answer:?}");
        // A topic without history: false, no epoch.
        let (_, answer) = c
            .subscribe_recovering("other/t", Some(("x", 1)))
            .await
            .unwrap();
        assert!(!answer.recovered && answer.epoch.is_empty(), "{answer:?}");
        // A filter cannot be recovered.
        match c.subscribe_recovering("chat/#", None).await {
            Err(wharf::client::ClientError::Server { code, .. }) => {
                assert_eq!(code, ErrorCode::InvalidField)
            }
            Err(other) => panic!("{other:?}"),
            Ok(_) => panic!("a filter was recovered"),
        }
    });
}

#[test]
fn the_history_route_answers_its_errors_and_checks_the_subscribe_right() {
    let b = TestBroker::start(|c| {
        chat(5)(c);
        c.auth.anonymous = Some(false);
        c.auth.tokens.push(TokenConfig {
            name: "reader".into(),
            token_sha256: wharf::auth::token_digest("reader-token"),
            allow: Permissions {
                subscribe: vec!["chat/lobby".into()],
                publish: vec!["#".into()],
                ..Permissions::default()
            },
        });
    });
    let bearer = "Authorization: Bearer reader-token\r\n";
    let get = |path: &str, extra: &str| {
        let (code, _, body) = http_request(b.addr, "GET", path, extra, "");
        (code, body)
    };
    let (code, body) = get("/topics/chat/lobby/history", "");
    assert_eq!(code, 401, "{body}");
    let (code, body) = get("/topics/chat/secret/history", bearer);
    assert_eq!(code, 403, "{body}");
    let (code, body) = get("/topics/news/a/history", bearer);
    assert_eq!(code, 403, "{body}");
    let (code, body) = get("/topics/chat/lobby/history?limit=0", bearer);
    assert_eq!(
        (code, json(&body)["error"]["code"].as_str()),
        (400, Some("invalid_field")),
        "{body}"
    );
    let (code, body) = get("/topics/chat/lobby/history?since=x", bearer);
    assert_eq!(code, 400, "{body}");
    let (code, body) = get("/topics/chat/lobby/history", bearer);
    assert_eq!(code, 200, "{body}");
    let v = json(&body);
    assert_eq!(
        (v["offset"].as_u64(), v["complete"].as_bool()),
        (Some(0), Some(true))
    );
    // A topic no entry covers.
    let b2 = TestBroker::start(chat(5));
    let (code, body) = http(b2.addr, "GET", "/topics/news/a/history", "");
    assert_eq!(
        (code, json(&body)["error"]["code"].as_str()),
        (404, Some("no_history")),
        "{body}"
    );
    // Binary payloads come as base64; a POST to ".../history" publishes
    // to the topic of that name.
    let (code, _, body) = http_request(b.addr, "POST", "/topics/chat/lobby/history", bearer, "x");
    assert_eq!(code, 202, "{body}");
    assert_eq!(json(&body)["topic"], "chat/lobby/history");
}

#[test]
fn a_crash_gives_the_topics_a_new_epoch() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let file = dir.path().join("wharf.toml");
    std::fs::write(&file, "[[history]]\nfilter = \"chat/#\"\nsize = 50\n").unwrap();
    let args = |data: &str| {
        vec![
            "serve".to_owned(),
            "--config".into(),
            file.to_str().unwrap().into(),
            "--bind".into(),
            "127.0.0.1:0".into(),
            "--data-dir".into(),
            data.into(),
        ]
    };
    let data_s = data.to_str().unwrap().to_owned();
    let argv = args(&data_s);
    let argv: Vec<&str> = argv.iter().map(String::as_str).collect();
    let mut child = ChildBroker::spawn(&argv);
    let addr = child.address();
    for i in 1..=5 {
        publish(addr, "chat/crash", &format!("m{i}"));
    }
    let (before, _, _) = history(addr, "chat/crash", 0);
    // Written to the store (once a second) before the crash.
    assert!(
        common::wait_until(T, || {
            http(addr, "GET", "/metrics", "")
                .1
                .contains("wharf_history_written_total 5")
        }),
        "the history reaches the store"
    );
    // The counter moves when the writes are handed to the store writer;
    // a retained publish is answered once it is durable, and the writer
    // applies and syncs in order, so the history is on disk after it.
    let (code, body) = http(addr, "POST", "/topics/flush/marker?retain=true", "m");
    assert_eq!(code, 202, "{body}");
    child.signal("KILL");
    child.wait_exit(T);

    let mut child = ChildBroker::spawn(&argv);
    let addr = child.address();
    let (after, offsets, _) = history(addr, "chat/crash", 0);
    assert_ne!(after, before, "an unclean stop renews the epoch");
    assert_eq!(offsets, vec![1, 2, 3, 4, 5], "what was written is kept");
    // Offsets go on after what was kept, never back.
    publish(addr, "chat/crash", "next");
    let (_, again, _) = history(addr, "chat/crash", 0);
    assert_eq!(again.last().copied(), Some(6));
    child.signal("TERM");
    assert!(child.wait_exit(T).success());
    // A clean stop after it keeps the new epoch.
    let mut child = ChildBroker::spawn(&argv);
    let (kept, _, _) = history(child.address(), "chat/crash", 0);
    assert_eq!(kept, after);
    child.signal("TERM");
    child.wait_exit(T);
}

#[test]
fn an_event_stream_resumes_from_its_last_event_id() {
    let b = TestBroker::start(chat(100));
    for i in 1..=3 {
        publish(b.addr, "chat/sse", &format!("m{i}"));
    }
    let (epoch, _, _) = history(b.addr, "chat/sse", 0);
    // A first stream: ids carry the position.
    let (mut first, _) = open(b.addr, "/sse?topic=chat/sse", "");
    publish(b.addr, "chat/sse", "m4");
    let text = until(&mut first, "m4");
    assert!(
        text.contains(&format!("id: chat/sse@4:{epoch}\n")),
        "{text}"
    );
    drop(first);
    publish(b.addr, "chat/sse", "m5");
    // The browser reconnects with the last id it saw.
    let (mut again, _) = open(
        b.addr,
        "/sse?topic=chat/sse",
        &format!("Last-Event-ID: chat/sse@2:{epoch}\r\n"),
    );
    let text = until(&mut again, "m5");
    let recovery = text.find("event: recovery").expect("a recovery event");
    assert!(text[recovery..].contains("\"recovered\":true"), "{text}");
    let at = |m: &str| {
        text.find(&format!("\"payload\":\"{m}\""))
            .unwrap_or(usize::MAX)
    };
    assert!(
        recovery < at("m3") && at("m3") < at("m4") && at("m4") < at("m5"),
        "{text}"
    );
    assert!(!text.contains("\"m2\""), "{text}");
    // Another epoch: told, not replayed.
    let (mut stale, _) = open(
        b.addr,
        "/sse?topic=chat/sse",
        "Last-Event-ID: chat/sse@2:000000000000\r\n",
    );
    let text = until(&mut stale, "\"recovered\":false");
    assert!(text.contains("history was reset"), "{text}");
}

#[test]
fn history_entries_are_reread_on_sighup() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("wharf.toml");
    std::fs::write(&file, "").unwrap();
    let path = file.clone();
    let b = TestBroker::start(move |c| c.file = Some(path));
    publish(b.addr, "live/a", "before");
    let (code, body) = http(b.addr, "GET", "/topics/live/a/history", "");
    assert_eq!(code, 404, "{body}");
    std::fs::write(&file, "[[history]]\nfilter = \"live/#\"\nsize = 10\n").unwrap();
    b.reload();
    assert!(
        common::wait_until(T, || {
            http(b.addr, "GET", "/topics/live/a/history", "").0 == 200
        }),
        "the entry applies after the reload"
    );
    publish(b.addr, "live/a", "after");
    let (_, _, payloads) = history(b.addr, "live/a", 0);
    assert_eq!(payloads, ["after"], "history starts with the entry");
}

#[test]
fn in_a_cluster_each_node_keeps_its_own_history_and_another_nodes_position_is_not_recovered() {
    let nats = crate::cluster::Nats::start();
    let with_chat = |name: &'static str| {
        let url = nats.url();
        TestBroker::start(move |c| {
            chat(100)(c);
            c.cluster.nats = vec![url];
            c.cluster.node = name.into();
            c.cluster.connect_timeout_ms = 2_000;
        })
    };
    let (a, b) = (with_chat("a"), with_chat("b"));
    block_on(async {
        // b hears chat/x from the other nodes once it has a subscriber.
        let on_b = connect(&b).await;
        let mut live = on_b.subscribe("chat/x").await.unwrap();
        for i in 1..=3 {
            publish(a.addr, "chat/x", &format!("m{i}"));
        }
        for _ in 0..3 {
            live.recv_timeout(T).await.expect("a's messages reach b");
        }
        let (epoch_a, offsets_a, _) = history(a.addr, "chat/x", 0);
        let (epoch_b, offsets_b, payloads_b) = history(b.addr, "chat/x", 0);
        assert_eq!(offsets_a, vec![1, 2, 3]);
        assert_eq!(
            (offsets_b, payloads_b),
            (vec![1, 2, 3], vec!["m1".into(), "m2".into(), "m3".into()])
        );
        assert_ne!(epoch_a, epoch_b, "each node has its own epochs");
        // A position from node a is not taken for one on b.
        let (_, answer) = on_b
            .subscribe_recovering("chat/x", Some((&epoch_a, 1)))
            .await
            .unwrap();
        assert!(!answer.recovered, "{answer:?}");
        let (mut again, answer) = on_b
            .subscribe_recovering("chat/x", Some((&epoch_b, 1)))
            .await
            .unwrap();
        assert!(answer.recovered && answer.replayed == 2, "{answer:?}");
        assert_eq!(again.recv_timeout(T).await.unwrap().seq, 2);
    });
}

#[test]
fn a_topic_whose_history_expired_is_swept_and_starts_a_new_epoch() {
    let b = TestBroker::start(|c| {
        c.topics.idle_timeout_s = 1;
        c.history.push(HistoryDecl {
            filter: "chat/#".into(),
            size: 10,
            ttl_s: 1,
        });
    });
    publish(b.addr, "chat/brief", "m1");
    let (epoch, offsets, _) = history(b.addr, "chat/brief", 0);
    assert_eq!(offsets, vec![1]);
    // The message expires, then an idle sweep takes the topic (and its
    // records): nothing is kept, and the epoch is gone with it.
    assert!(
        common::wait_until(Duration::from_secs(15), || {
            history(b.addr, "chat/brief", 0).0.is_empty()
        }),
        "the expired topic is swept"
    );
    publish(b.addr, "chat/brief", "m2");
    let (again, offsets, _) = history(b.addr, "chat/brief", 0);
    assert_ne!(again, epoch, "a topic made again starts a new epoch");
    assert_eq!(offsets, vec![1]);
}
