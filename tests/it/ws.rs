//! Topics over real WebSockets on loopback: the native protocol end to end.

use crate::common;

use std::time::{Duration, Instant};

use common::{TestBroker, block_on, http};
use wharf::client::{Client, ClientOptions};
use wharf::protocol::Format;
use wharf::protocol::frame::{Headers, Priority};

const T: Duration = Duration::from_secs(10);

fn opts(format: Format) -> ClientOptions {
    ClientOptions {
        format,
        ..ClientOptions::default()
    }
}

/// JSON for every `n`th client, bincode for the others: mixed sessions.
fn every_nth_json(i: usize, n: usize) -> Format {
    if i % n == 0 {
        Format::Json
    } else {
        Format::Bincode
    }
}

async fn connect(b: &TestBroker, format: Format) -> Client {
    Client::connect(&b.ws_url(), opts(format))
        .await
        .expect("connect")
}

#[test]
fn json_and_bincode_clients_interoperate_byte_for_byte() {
    let b = TestBroker::start(|_| {});
    block_on(async {
        let json = connect(&b, Format::Json).await;
        let bin = connect(&b, Format::Bincode).await;
        assert_ne!(json.welcome().session, bin.welcome().session);
        let mut at_json = json.subscribe("x/y").await.unwrap();
        let mut at_bin = bin.subscribe("x/y").await.unwrap();
        let payloads: [&[u8]; 3] = [b"hello", &[0, 159, 146, 150, 255], b""];
        for p in payloads {
            bin.publish_confirmed("x/y", p.to_vec()).await.unwrap();
            json.publish_confirmed("x/y", p.to_vec()).await.unwrap();
        }
        for p in payloads {
            for sub in [&mut at_json, &mut at_bin] {
                for _ in 0..2 {
                    let m = sub.recv_timeout(T).await.expect("a message");
                    assert_eq!(m.payload, p);
                    assert_eq!(m.topic, "x/y");
                }
            }
        }
    });
}

#[test]
fn wildcards_plus_and_hash() {
    let b = TestBroker::start(|_| {});
    block_on(async {
        let c = connect(&b, Format::Bincode).await;
        let mut plus = c.subscribe("home/+/temp").await.unwrap();
        let mut hash = c.subscribe("home/#").await.unwrap();
        let mut everything = c.subscribe("#").await.unwrap();
        for t in [
            "home/kitchen/temp",
            "home/kitchen/humidity",
            "home",
            "garden/temp",
            "$sys/x",
        ] {
            c.publish_confirmed(t, t.as_bytes().to_vec()).await.unwrap();
        }
        c.ping().await.unwrap();
        let drain = |s: &mut wharf::client::Subscription| {
            let mut v = Vec::new();
            while let Some(m) = s.try_recv() {
                v.push(m.topic);
            }
            v
        };
        assert_eq!(drain(&mut plus), ["home/kitchen/temp"]);
        assert_eq!(
            drain(&mut hash),
            ["home/kitchen/temp", "home/kitchen/humidity", "home"]
        );
        assert_eq!(
            drain(&mut everything),
            [
                "home/kitchen/temp",
                "home/kitchen/humidity",
                "home",
                "garden/temp"
            ],
            "# must not match $-topics"
        );
    });
}

#[test]
fn retained_message_reaches_late_subscribers_first_and_can_be_cleared() {
    let b = TestBroker::start(|_| {});
    block_on(async {
        let p = connect(&b, Format::Json).await;
        p.publish_retained("state/door", b"open".to_vec())
            .await
            .unwrap();
        let s = connect(&b, Format::Bincode).await;
        let mut sub = s.subscribe("state/+").await.unwrap();
        let first = sub.recv_timeout(T).await.unwrap();
        assert!(first.retained);
        assert_eq!(first.payload, b"open");
        p.publish_confirmed("state/door", b"closed".to_vec())
            .await
            .unwrap();
        let live = sub.recv_timeout(T).await.unwrap();
        assert!(!live.retained);
        assert!(live.seq > first.seq);
        // An empty retained publish clears it.
        p.publish_retained("state/door", Vec::new()).await.unwrap();
        let late = connect(&b, Format::Json).await;
        let mut late_sub = late.subscribe("state/door").await.unwrap();
        assert!(
            late_sub
                .recv_timeout(Duration::from_millis(200))
                .await
                .is_none()
        );
    });
}

#[test]
fn unsubscribe_stops_delivery() {
    let b = TestBroker::start(|_| {});
    block_on(async {
        let c = connect(&b, Format::Bincode).await;
        let sub = c.subscribe("u/1").await.unwrap();
        let mut keep = c.subscribe("u/#").await.unwrap();
        c.unsubscribe(sub).await.unwrap();
        c.publish_confirmed("u/1", b"x".to_vec()).await.unwrap();
        assert_eq!(keep.recv_timeout(T).await.unwrap().payload, b"x");
    });
}

#[test]
fn three_publishers_ten_subscribers_keep_per_publisher_order() {
    const PER: usize = 1000;
    let b = TestBroker::start(|_| {});
    block_on(async {
        let mut subs = Vec::new();
        let mut clients = Vec::new();
        for i in 0..10 {
            let c = connect(&b, every_nth_json(i, 2)).await;
            subs.push(c.subscribe("order/t").await.unwrap());
            clients.push(c);
        }
        let url = b.ws_url();
        let publishers: Vec<_> = (0..3)
            .map(|p| {
                let url = url.clone();
                std::thread::spawn(move || {
                    block_on(async move {
                        let c = Client::connect(&url, opts(Format::Bincode)).await.unwrap();
                        for i in 0..PER {
                            c.publish("order/t", format!("{p}:{i}").into_bytes())
                                .await
                                .unwrap();
                        }
                        c.ping().await.unwrap();
                    })
                })
            })
            .collect();
        for p in publishers {
            p.join().unwrap();
        }
        for sub in &mut subs {
            let mut next = [0usize; 3];
            for _ in 0..3 * PER {
                let m = sub.recv_timeout(T).await.expect("every message arrives");
                let text = String::from_utf8(m.payload).unwrap();
                let (p, i) = text.split_once(':').unwrap();
                let (p, i): (usize, usize) = (p.parse().unwrap(), i.parse().unwrap());
                assert_eq!(i, next[p], "publisher {p} out of order");
                next[p] += 1;
            }
            assert_eq!(next, [PER; 3]);
        }
    });
}

#[test]
fn two_hundred_subscribers_all_receive_every_message() {
    let b = TestBroker::start(|_| {});
    block_on(async {
        let mut conns = Vec::new();
        for i in 0..200 {
            let c = connect(&b, every_nth_json(i, 3)).await;
            let s = c.subscribe("fan/out").await.unwrap();
            conns.push((c, s));
        }
        let p = connect(&b, Format::Bincode).await;
        for i in 0..20u32 {
            p.publish_confirmed("fan/out", i.to_be_bytes().to_vec())
                .await
                .unwrap();
        }
        for (_, s) in &mut conns {
            for i in 0..20u32 {
                let m = s.recv_timeout(T).await.expect("delivered");
                assert_eq!(m.payload, i.to_be_bytes());
            }
        }
    });
}

/// A subscriber that never reads: the others get everything promptly, the
/// slow one is cut back to the outbound limit and told how many it lost,
/// and the broker's memory for it stays under the limit.
#[test]
fn a_subscriber_that_never_reads_does_not_hold_up_the_others() {
    const LIMIT: usize = 256 * 1024;
    const N: usize = 10_000;
    let b = TestBroker::start(|c| {
        c.session.outbound_limit = LIMIT;
        c.session.max_frame = 16 * 1024;
        c.session.max_payload = 16 * 1024;
    });
    // The reading subscriber runs on its own thread, as a real client would.
    let url = b.ws_url();
    let (ready_tx, ready_rx) = std::sync::mpsc::channel();
    let fast = std::thread::spawn(move || {
        block_on(async move {
            let fast = Client::connect(&url, opts(Format::Bincode)).await.unwrap();
            let mut sub = fast.subscribe("flood").await.unwrap();
            ready_tx.send(()).unwrap();
            let mut got = 0;
            while got < N {
                match sub.recv_timeout(Duration::from_secs(10)).await {
                    Some(_) => got += 1,
                    None => break,
                }
            }
            (got, fast.dropped())
        })
    });
    ready_rx.recv_timeout(T).unwrap();
    block_on(async {
        let slow = Client::connect(
            &b.ws_url(),
            ClientOptions {
                subscription_buffer: 1,
                ..opts(Format::Bincode)
            },
        )
        .await
        .unwrap();
        let mut slow_sub = slow.subscribe("flood").await.unwrap();
        let publisher = connect(&b, Format::Bincode).await;
        let payload = vec![7u8; 512];
        let started = Instant::now();
        for i in 0..N {
            if i % 100 == 99 {
                publisher
                    .publish_confirmed("flood", payload.clone())
                    .await
                    .unwrap();
            } else {
                publisher.publish("flood", payload.clone()).await.unwrap();
            }
        }
        publisher.ping().await.unwrap();
        let (fast_got, fast_dropped) = fast.join().unwrap();
        assert_eq!(
            (fast_got, fast_dropped),
            (N, 0),
            "the reading subscriber got every message"
        );
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "the flood took too long"
        );

        let (status, body) = http(b.addr, "GET", "/admin/sessions", "");
        assert_eq!(status, 200);
        let sessions: serde_json::Value = serde_json::from_str(&body).unwrap();
        for s in sessions.as_array().unwrap() {
            let pending = s["outbound"]["pending_bytes"].as_u64().unwrap() as usize;
            assert!(pending <= LIMIT, "a session holds {pending} bytes: {s}");
        }
        let dropped_total: u64 = sessions
            .as_array()
            .unwrap()
            .iter()
            .map(|s| s["outbound"]["dropped"].as_u64().unwrap())
            .sum();
        assert!(
            dropped_total > 0,
            "the slow session should have dropped messages"
        );

        // The slow client now reads: it gets what fitted and a dropped notice,
        // and every message is accounted for.
        let mut slow_got = 0;
        while slow_sub
            .recv_timeout(Duration::from_millis(500))
            .await
            .is_some()
        {
            slow_got += 1;
        }
        slow.ping().await.unwrap();
        assert!(slow_got < N, "slow got {slow_got}");
        assert!(slow.dropped() > 0, "the slow client was told about drops");
        assert_eq!(
            slow.dropped() as usize + slow_got,
            N,
            "every message is either delivered or counted as dropped"
        );
    });
}

#[test]
fn retained_messages_survive_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let b = TestBroker::start_in(&data, |_| {});
    block_on(async {
        let c = connect(&b, Format::Json).await;
        let mut h = Headers::new();
        h.insert("unit".into(), "C".into());
        for (topic, payload) in [("keep/a", "first"), ("keep/a", "last"), ("clear/b", "x")] {
            c.publish_with(
                topic,
                payload.into(),
                h.clone(),
                true,
                Priority::Normal,
                true,
            )
            .await
            .unwrap();
        }
        c.publish_retained("clear/b", Vec::new()).await.unwrap();
    });
    b.stop().expect("clean stop");

    let b = TestBroker::start_in(&data, |_| {});
    block_on(async {
        let c = connect(&b, Format::Bincode).await;
        let mut all = c.subscribe("#").await.unwrap();
        let m = all.recv_timeout(T).await.expect("the retained message");
        assert!(m.retained);
        assert_eq!(
            (m.topic.as_str(), &m.payload[..], m.seq),
            ("keep/a", &b"last"[..], 2)
        );
        assert_eq!(m.headers.get("unit").map(String::as_str), Some("C"));
        assert!(
            all.recv_timeout(Duration::from_millis(300)).await.is_none(),
            "clear/b was cleared"
        );
        // The topic's sequence continues after the restored message.
        c.publish_confirmed("keep/a", b"next".to_vec())
            .await
            .unwrap();
        assert_eq!(all.recv_timeout(T).await.unwrap().seq, 3);
    });
}
