//! A QoS 1 subscriber that falls behind, over real sockets: by default
//! (`[mqtt] slow_subscriber = "hold"`) its publishers are held back (no
//! PUBACK, nothing more read) once `max_inflight` deliveries to it are
//! unacknowledged, and nothing they were told was accepted is lost; a
//! subscriber that keeps a publisher waiting past `hold_timeout_ms` is
//! disconnected; `"drop"` drops (and counts) what is past the mark
//! instead. Two clients publishing to each other do not hold each other
//! for good, and a fast subscriber at full speed under the default
//! configuration is neither closed nor loses a message.

use crate::common::raw_mqtt::{self, Raw};
use crate::common::{self, TestBroker, block_on};

use std::time::Duration;

use bytes::Bytes;
use wharf::client::mqtt::{MqttClient, MqttOptions};
use wharf::protocol::mqtt::{Packet, PublishPacket};

const WAIT: Duration = Duration::from_secs(20);

fn broker(tune: impl FnOnce(&mut wharf::config::MqttConfig)) -> TestBroker {
    TestBroker::start_tcp(|c| tune(&mut c.mqtt))
}

fn publish(topic: &str, i: usize, pid: u16) -> Packet {
    Packet::Publish(PublishPacket {
        dup: false,
        qos: 1,
        retain: false,
        topic: topic.into(),
        pid: Some(pid),
        payload: Bytes::from(format!("m{i}")),
        props: Default::default(),
    })
}

/// A subscriber of `topic` at QoS 1 on `b`'s TCP listener.
fn subscriber(b: &TestBroker, id: &str, topic: &str) -> Raw {
    let (mut raw, code) = Raw::connect(b.mqtt_addr.unwrap(), raw_mqtt::hello_at(4, id));
    assert_eq!(code, 0);
    raw.send(&Packet::subscribe(1, vec![(topic.into(), 1)]));
    match raw.recv() {
        Some(Packet::SubAck(a)) => assert_eq!(a.codes, vec![1]),
        other => panic!("expected SUBACK, got {other:?}"),
    }
    raw
}

/// An MQTT 5 subscriber of `topic` at QoS 1, its CONNECT's properties
/// set by `props`.
fn v5_subscriber(
    b: &TestBroker,
    id: &str,
    topic: &str,
    props: impl FnOnce(&mut wharf::protocol::mqtt::PropertySet),
) -> Raw {
    let mut hello = raw_mqtt::hello_at(5, id);
    props(&mut hello.props);
    let (mut raw, code) = Raw::connect(b.mqtt_addr.unwrap(), hello);
    assert_eq!(code, 0);
    raw.send(&Packet::subscribe(1, vec![(topic.into(), 1)]));
    assert!(matches!(raw.recv(), Some(Packet::SubAck(_))));
    raw
}

/// Reads `n` PUBLISHes (acking each when `ack`); their payloads.
fn take(r: &mut Raw, n: usize, ack: bool) -> Vec<String> {
    r.take_publishes(n, ack)
        .into_iter()
        .map(|(p, _)| String::from_utf8_lossy(&p).into_owned())
        .collect()
}

/// Reads PUBACKs until `n` arrived; their packet ids.
fn pubacks(r: &mut Raw, n: usize) -> Vec<u16> {
    let mut ids = Vec::new();
    while ids.len() < n {
        match r.recv() {
            Some(Packet::PubAck(a)) => ids.push(a.pid),
            Some(_) => {}
            None => panic!("closed after {} of {n} PUBACKs", ids.len()),
        }
    }
    ids
}

/// Deliveries dropped by the slow-consumer policy so far.
fn dropped(b: &TestBroker) -> f64 {
    common::metric(
        b,
        r#"wharf_deliveries_dropped_total{reason="slow_consumer"}"#,
    )
}

fn expected(range: std::ops::Range<usize>) -> Vec<String> {
    range.map(|i| format!("m{i}")).collect()
}

/// The publisher's 100 messages go out in one write; the subscriber reads
/// without acknowledging. The broker takes 20 (the mark), holds the
/// publisher on the 20th (its PUBACK, and everything after it, waits), and
/// the subscriber gets no more. Once it acknowledges, the rest flow: all
/// 100 delivered in order, all 100 acknowledged to the publisher.
#[test]
fn a_subscriber_behind_holds_its_publisher_back_and_loses_nothing() {
    let b = broker(|m| m.max_inflight = 20);
    let mut sub = subscriber(&b, "slow-sub", "slow/t");
    let (mut publ, code) = Raw::connect(b.mqtt_addr.unwrap(), raw_mqtt::hello_at(4, "fast-pub"));
    assert_eq!(code, 0);
    let mut batch = bytes::BytesMut::new();
    for i in 0..100 {
        wharf::protocol::mqtt::encode(&publish("slow/t", i, i as u16 + 1), &mut batch, 4);
    }
    std::io::Write::write_all(&mut publ.stream, &batch).unwrap();

    assert_eq!(take(&mut sub, 20, false), expected(0..20));
    assert!(
        common::wait_until(WAIT, || common::metric(
            &b,
            "wharf_mqtt_publishes_held_total"
        ) >= 1.0),
        "the publisher was never held"
    );
    // Held: the 20 in flight are all it has, and 19 PUBACKs all the
    // publisher has (the 20th waits for the subscriber).
    let before_pong = sub.until_pong();
    assert!(
        !before_pong.iter().any(|p| matches!(p, Packet::Publish(_))),
        "deliveries past the mark: {before_pong:?}"
    );
    assert_eq!(pubacks(&mut publ, 19), (1..=19).collect::<Vec<u16>>());

    // Caught up: everything flows, in order, none lost.
    for pid in 1..=20u16 {
        sub.send(&Packet::puback(pid));
    }
    assert_eq!(take(&mut sub, 80, true), expected(20..100));
    assert_eq!(pubacks(&mut publ, 81), (20..=100).collect::<Vec<u16>>());
    assert_eq!(
        common::metric(&b, "wharf_mqtt_subscribers_expelled_total"),
        0.0
    );
    assert_eq!(dropped(&b), 0.0);
}

/// A subscriber that never acknowledges keeps its publisher waiting only
/// for `hold_timeout_ms`: then it is disconnected (counted) and the
/// publisher goes on, every message acknowledged.
#[test]
fn a_subscriber_that_never_acknowledges_is_disconnected_after_the_hold_timeout() {
    let b = broker(|m| {
        m.max_inflight = 5;
        m.hold_timeout_ms = 300;
    });
    let mut sub = subscriber(&b, "stuck-sub", "stuck/t");
    let (mut publ, _) = Raw::connect(b.mqtt_addr.unwrap(), raw_mqtt::hello_at(4, "stuck-pub"));
    for i in 0..20 {
        publ.send(&publish("stuck/t", i, i as u16 + 1));
    }
    assert_eq!(pubacks(&mut publ, 20), (1..=20).collect::<Vec<u16>>());
    assert_eq!(take(&mut sub, 5, false), expected(0..5));
    // What was queued before the close may still come; then the end.
    loop {
        match sub.recv() {
            Some(Packet::Publish(_)) => {}
            None => break,
            Some(other) => panic!("unexpected {other:?}"),
        }
    }
    assert_eq!(
        common::metric(&b, "wharf_mqtt_subscribers_expelled_total"),
        1.0
    );
}

/// `slow_subscriber = "drop"`: the publisher is never held; deliveries
/// past the mark are dropped and counted.
#[test]
fn the_drop_policy_never_holds_a_publisher_and_counts_what_it_drops() {
    let b = broker(|m| {
        m.max_inflight = 5;
        m.slow_subscriber = wharf::config::SlowSubscriber::Drop;
    });
    let mut sub = subscriber(&b, "drop-sub", "drop/t");
    let (mut publ, _) = Raw::connect(b.mqtt_addr.unwrap(), raw_mqtt::hello_at(4, "drop-pub"));
    for i in 0..20 {
        publ.send(&publish("drop/t", i, i as u16 + 1));
    }
    assert_eq!(pubacks(&mut publ, 20), (1..=20).collect::<Vec<u16>>());
    let got = sub.until_pong();
    let payloads: Vec<_> = got
        .iter()
        .filter_map(|p| match p {
            Packet::Publish(p) => Some(String::from_utf8_lossy(&p.payload).into_owned()),
            _ => None,
        })
        .collect();
    assert_eq!(payloads, expected(0..5));
    assert_eq!(dropped(&b), 15.0);
    assert_eq!(common::metric(&b, "wharf_mqtt_publishes_held_total"), 0.0);
}

/// Two clients each subscribed to the other's topic publish to each other
/// at once, with a small mark and a hold timeout far past the test's
/// deadline: a held publisher that falls behind as a subscriber stops
/// waiting (it must read its own acknowledgements), so neither holds the
/// other for good, nobody is disconnected and nothing is lost.
#[test]
fn two_clients_publishing_to_each_other_do_not_hold_each_other_for_good() {
    let b = broker(|m| {
        m.max_inflight = 10;
        m.hold_timeout_ms = 600_000;
    });
    let url = format!("mqtt://{}", b.mqtt_addr.unwrap());
    block_on(async {
        let opts = |id: &str| MqttOptions {
            client_id: id.into(),
            timeout: WAIT,
            ..MqttOptions::default()
        };
        let mut a = MqttClient::connect(&url, opts("cycle-a")).await.unwrap();
        let mut c = MqttClient::connect(&url, opts("cycle-c")).await.unwrap();
        assert_eq!(a.subscribe("cycle/to-a", 1).await.unwrap(), 1);
        assert_eq!(c.subscribe("cycle/to-c", 1).await.unwrap(), 1);
        let payloads: Vec<Bytes> = (0..2000).map(|i| Bytes::from(format!("m{i}"))).collect();
        // Each publishes with a window of 500 and, while it waits for
        // its PUBACKs, takes (and acknowledges) the other's messages;
        // then it goes on taking them until it has all 2,000 (a client
        // that stopped reading would hold the other, rightly).
        let run = |client: &'static str, mut me: MqttClient, to: &'static str| {
            let payloads = payloads.clone();
            async move {
                me.publish_qos1_pipelined(to, &payloads, 500)
                    .await
                    .unwrap_or_else(|e| panic!("{client} publishing: {e}"));
                let mut got = Vec::new();
                while got.len() < 2000 {
                    match actix_rt::time::timeout(WAIT, me.recv()).await {
                        Ok(Ok(p)) => got.push(String::from_utf8_lossy(&p.payload).into_owned()),
                        other => panic!("{client}: after {}: {other:?}", got.len()),
                    }
                }
                assert_eq!(got, expected(0..2000), "{client}");
            }
        };
        tokio::join!(run("a", a, "cycle/to-c"), run("c", c, "cycle/to-a"));
    });
    assert_eq!(
        common::metric(&b, "wharf_mqtt_subscribers_expelled_total"),
        0.0
    );
}

/// At full speed with the default configuration (and its default
/// session rate), a subscriber that keeps up loses nothing and is not
/// closed: 1 -> 1 and 1 -> 50, over WebSocket and TCP.
#[test]
fn at_full_speed_with_the_defaults_nothing_is_lost_and_nobody_closed() {
    let b = TestBroker::start_tcp(|_| {});
    for url in [
        format!("ws://{}/mqtt", b.addr),
        format!("mqtt://{}", b.mqtt_addr.unwrap()),
    ] {
        for (subs, n) in [(1usize, 30_000usize), (50, 1_000)] {
            block_on(async {
                let opts = |id: String| MqttOptions {
                    client_id: id,
                    timeout: WAIT,
                    ..MqttOptions::default()
                };
                let mut receivers = Vec::new();
                for i in 0..subs {
                    let mut s = MqttClient::connect(&url, opts(format!("full-sub-{i}")))
                        .await
                        .unwrap();
                    assert_eq!(s.subscribe("full/t", 1).await.unwrap(), 1);
                    receivers.push(s);
                }
                let mut publ = MqttClient::connect(&url, opts("full-pub".into()))
                    .await
                    .unwrap();
                let payloads: Vec<Bytes> = (0..n).map(|i| Bytes::from(format!("m{i}"))).collect();
                let publish = async {
                    publ.publish_qos1_pipelined("full/t", &payloads, 3000)
                        .await
                        .unwrap();
                };
                let url = &url;
                let receive = futures_util::future::join_all(receivers.iter_mut().enumerate().map(
                    |(i, s)| async move {
                        let mut got = 0;
                        while got < n {
                            match actix_rt::time::timeout(WAIT, s.recv()).await {
                                Ok(Ok(p)) => {
                                    assert_eq!(p.payload, format!("m{got}").as_bytes());
                                    got += 1;
                                }
                                other => {
                                    panic!("{url} 1 -> {subs}: sub {i} after {got}: {other:?}")
                                }
                            }
                        }
                    },
                ));
                tokio::join!(publish, receive);
            });
        }
    }
    assert_eq!(
        common::metric(&b, "wharf_mqtt_subscribers_expelled_total"),
        0.0
    );
    assert_eq!(dropped(&b), 0.0);
}

/// An MQTT 5 subscriber with a receive maximum of 10: what waits for its
/// room counts, so its publisher is held at 510 (10 in flight and 500
/// waiting) before the waiting room (1,000) could overflow, and all 1,200
/// messages arrive in order once it acknowledges. Before, the 190 past
/// the waiting room were dropped.
#[test]
fn an_mqtt5_subscribers_receive_maximum_counts_toward_the_hold() {
    let b = TestBroker::start_tcp(|_| {});
    let addr = b.mqtt_addr.unwrap();
    let mut sub = v5_subscriber(&b, "rm5-sub", "rm5/t", |p| p.receive_maximum = Some(10));
    let (mut publ, _) = Raw::connect(addr, raw_mqtt::hello_at(4, "rm5-pub"));
    let mut batch = bytes::BytesMut::new();
    for i in 0..1200 {
        wharf::protocol::mqtt::encode(&publish("rm5/t", i, i as u16 + 1), &mut batch, 4);
    }
    std::io::Write::write_all(&mut publ.stream, &batch).unwrap();
    assert!(
        common::wait_until(WAIT, || common::metric(
            &b,
            "wharf_mqtt_publishes_held_total"
        ) >= 1.0),
        "the publisher was never held"
    );
    assert_eq!(pubacks(&mut publ, 509), (1..=509).collect::<Vec<u16>>());
    // Acknowledging as it reads, the subscriber gets every one.
    assert_eq!(take(&mut sub, 1200, true), expected(0..1200));
    assert_eq!(pubacks(&mut publ, 691), (510..=1200).collect::<Vec<u16>>());
    assert_eq!(dropped(&b), 0.0);
}

/// An MQTT 5 client with a receive maximum of 1 and a maximum packet size
/// of 100 B: a delivery too large for it, released from the waiting room
/// by an acknowledgement, is dropped (as if sent) and the next one goes
/// out in its place. Before, the release stopped at it, and what waited
/// behind it had nothing left to move it: no delivery in flight, no
/// acknowledgement to come.
#[test]
fn an_mqtt5_delivery_too_large_for_the_client_does_not_stop_those_behind_it() {
    let b = TestBroker::start_tcp(|_| {});
    let addr = b.mqtt_addr.unwrap();
    let mut sub = v5_subscriber(&b, "big-sub", "big/t", |p| {
        p.receive_maximum = Some(1);
        p.maximum_packet_size = Some(100);
    });
    let (mut publ, _) = Raw::connect(addr, raw_mqtt::hello_at(4, "big-pub"));
    let big = Packet::Publish(PublishPacket {
        dup: false,
        qos: 1,
        retain: false,
        topic: "big/t".into(),
        pid: Some(2),
        payload: Bytes::from(vec![b'x'; 200]),
        props: Default::default(),
    });
    publ.send(&publish("big/t", 1, 1));
    publ.send(&big);
    publ.send(&publish("big/t", 3, 3));
    publ.send(&publish("big/t", 4, 4));
    assert_eq!(pubacks(&mut publ, 4), vec![1, 2, 3, 4]);
    // One at a time, each acknowledged; the large one never comes.
    assert_eq!(take(&mut sub, 3, true), ["m1", "m3", "m4"]);
}

/// A subscriber's deliveries from a queue (a shared subscription here,
/// with its own credit) do not count toward `max_inflight`: 20 of them
/// left unacknowledged do not hold its topic deliveries' publisher past
/// what the topic deliveries themselves ask (before, the publisher
/// waited for acknowledgements that were never coming).
#[test]
fn queue_deliveries_in_flight_do_not_hold_topic_publishers() {
    let b = broker(|m| {
        m.max_inflight = 5;
        m.hold_timeout_ms = 600_000;
    });
    let addr = b.mqtt_addr.unwrap();
    let (mut sub, _) = Raw::connect(addr, raw_mqtt::hello_at(4, "mixed-sub"));
    sub.send(&Packet::subscribe(
        1,
        vec![("$share/g/mixed/q".into(), 1), ("mixed/t".into(), 1)],
    ));
    assert!(matches!(sub.recv(), Some(Packet::SubAck(_))));
    let (mut publ, _) = Raw::connect(addr, raw_mqtt::hello_at(4, "mixed-pub"));
    for i in 0..20 {
        publ.send(&publish("mixed/q", i, i as u16 + 1));
    }
    assert_eq!(pubacks(&mut publ, 20).len(), 20);
    // The 20 queue deliveries arrive and stay unacknowledged.
    let mut queued = 0;
    while queued < 20 {
        match sub.recv() {
            Some(Packet::Publish(p)) if p.topic == "mixed/q" => queued += 1,
            Some(_) => {}
            None => panic!("closed after {queued} queue deliveries"),
        }
    }
    for i in 0..20 {
        publ.send(&publish("mixed/t", i, i as u16 + 21));
    }
    // Held at most briefly by its own 5 topic deliveries in flight (they
    // are acknowledged as they come), never for the queue's 20.
    assert_eq!(take(&mut sub, 20, true), expected(0..20));
    assert_eq!(pubacks(&mut publ, 20).len(), 20);
    assert_eq!(
        common::metric(&b, "wharf_mqtt_subscribers_expelled_total"),
        0.0
    );
}
