//! MQTT 5 sessions over TCP, driven packet by packet with a raw client on
//! the crate's codec: CONNACK properties, reason codes on every ack,
//! properties carried as headers to native clients and back, topic aliases
//! both ways, subscription options and identifiers, message and session
//! expiry, the will delay, the client's receive maximum and maximum packet
//! size, and the server's DISCONNECT reasons. Clients nobody here wrote
//! (Paho, MQTT.js, mosquitto) speak MQTT 5 to Wharf in tests/it/mqtt.rs and
//! tests/it/mqtt_tcp.rs.

use crate::common;

use std::time::{Duration, Instant};

use bytes::Bytes;
use common::raw_mqtt::{self, Raw};
use common::{TestBroker, block_on, http};
use wharf::client::{Client, ClientOptions};
use wharf::protocol::frame::{Headers, Priority};
use wharf::protocol::mqtt::{
    self, Connect, Packet, PropertySet, PublishPacket, SubOptions, Subscribe, Will, reason,
};

fn hello(id: &str) -> Connect {
    raw_mqtt::hello_at(mqtt::LEVEL_5, id)
}

fn with(c: Connect, props: PropertySet) -> Connect {
    Connect {
        props: props.into(),
        ..c
    }
}

fn publish(topic: &str, payload: &[u8], qos: u8, pid: Option<u16>, props: PropertySet) -> Packet {
    Packet::Publish(PublishPacket {
        dup: false,
        qos,
        retain: false,
        topic: topic.into(),
        pid,
        payload: Bytes::copy_from_slice(payload),
        props: props.into(),
    })
}

fn subscribe(pid: u16, filter: &str, o: SubOptions, id: Option<u32>) -> Packet {
    Packet::Subscribe(Subscribe {
        pid,
        filters: vec![(filter.into(), o)],
        props: PropertySet {
            subscription_identifiers: id.into_iter().collect(),
            ..PropertySet::default()
        }
        .into(),
    })
}

fn expect_publish(r: &mut Raw) -> PublishPacket {
    match r.recv() {
        Some(Packet::Publish(p)) => p,
        other => panic!("expected a PUBLISH, got {other:?}"),
    }
}

fn suback(r: &mut Raw) -> Vec<u8> {
    match r.recv() {
        Some(Packet::SubAck(a)) => a.codes,
        other => panic!("expected SUBACK, got {other:?}"),
    }
}

fn ack_reason(p: Option<Packet>) -> u8 {
    match p {
        Some(Packet::PubAck(a) | Packet::PubRec(a) | Packet::PubComp(a) | Packet::PubRel(a)) => {
            a.reason
        }
        other => panic!("expected an ack, got {other:?}"),
    }
}

/// The DISCONNECT the server sends before closing, and that it closes.
fn disconnect_reason(r: &mut Raw) -> u8 {
    match r.recv() {
        Some(Packet::Disconnect(d)) => {
            assert_eq!(r.recv(), None, "closed after DISCONNECT");
            d.reason
        }
        other => panic!("expected DISCONNECT, got {other:?}"),
    }
}

#[test]
fn connack_says_what_the_server_offers_and_refusals_say_why() {
    let b = TestBroker::start_tcp(|_| {});
    let addr = b.mqtt_addr.unwrap();
    let (_c, ack) = Raw::connack(addr, hello(""));
    assert_eq!(ack.code, reason::SUCCESS);
    assert_eq!(ack.props.topic_alias_maximum, Some(64));
    let max_frame = wharf::Config::default().session.max_frame;
    assert_eq!(ack.props.maximum_packet_size, Some(max_frame as u32));
    let assigned = ack.props.assigned_client_identifier.clone().unwrap();
    assert!(assigned.starts_with("anon-"), "{assigned}");
    // Enhanced authentication is refused with its own reason code.
    let auth = with(
        hello("enhanced"),
        PropertySet {
            authentication_method: Some("SCRAM-SHA-1".into()),
            ..PropertySet::default()
        },
    );
    let (mut r, ack) = Raw::connack(addr, auth);
    assert_eq!(ack.code, reason::BAD_AUTHENTICATION_METHOD);
    assert!(ack.props.reason_string.is_some());
    assert_eq!(r.recv(), None, "closed after a refusing CONNACK");
    // Level 3.1.1 on the same listener is unchanged.
    let v3 = Connect {
        level: mqtt::LEVEL_3_1_1,
        ..hello("old")
    };
    let (mut old, code) = Raw::connect(addr, v3);
    assert_eq!(code, 0);
    old.send(&Packet::PingReq);
    assert_eq!(old.recv(), Some(Packet::PingResp));
}

#[test]
fn acks_carry_reason_codes() {
    let b = TestBroker::start_tcp(|_| {});
    let addr = b.mqtt_addr.unwrap();
    let (mut c, _) = Raw::connect(addr, hello("acks"));
    let none = PropertySet::default;
    c.send(&publish("nobody/here", b"x", 1, Some(1), none()));
    assert_eq!(ack_reason(c.recv()), reason::NO_MATCHING_SUBSCRIBERS);
    c.send(&subscribe(2, "a/#/b", SubOptions::qos(1), None));
    assert_eq!(suback(&mut c), [reason::TOPIC_FILTER_INVALID]);
    c.send(&subscribe(3, "acks/t", SubOptions::qos(2), None));
    assert_eq!(suback(&mut c), [reason::GRANTED_QOS_2]);
    c.send(&publish("acks/t", b"y", 2, Some(4), none()));
    let mut got = Vec::new();
    for _ in 0..2 {
        match c.recv() {
            Some(Packet::PubRec(a)) => got.push(("rec", a.pid, a.reason)),
            Some(Packet::Publish(p)) => got.push(("pub", 0, p.qos)),
            other => panic!("unexpected {other:?}"),
        }
    }
    got.sort();
    assert_eq!(got, [("pub", 0, 2), ("rec", 4, reason::SUCCESS)]);
    // A PUBREL for a packet id never seen: PUBCOMP says so.
    c.send(&Packet::pubrel(99));
    assert_eq!(ack_reason(c.recv()), reason::PACKET_IDENTIFIER_NOT_FOUND);
    c.send(&Packet::unsubscribe(
        5,
        vec!["acks/t".into(), "never".into()],
    ));
    match c.recv() {
        Some(Packet::UnsubAck(a)) => {
            assert_eq!(a.codes, [reason::SUCCESS, reason::NO_SUBSCRIPTION_EXISTED]);
        }
        other => panic!("expected UNSUBACK, got {other:?}"),
    }
}

#[test]
fn properties_travel_as_headers_to_native_clients_and_back() {
    let b = TestBroker::start_tcp(|_| {});
    let addr = b.mqtt_addr.unwrap();
    let ws = b.ws_url();
    block_on(async move {
        let native = Client::connect(&ws, ClientOptions::default())
            .await
            .unwrap();
        let mut sub = native.subscribe("props/#").await.unwrap();
        let (mut p5, _) = Raw::connect(addr, hello("props-pub"));
        let props = PropertySet {
            user_properties: vec![("tenant".into(), "acme".into())],
            content_type: Some("application/json".into()),
            response_topic: Some("props/replies".into()),
            correlation_data: Some(Bytes::from_static(&[1, 2, 3])),
            payload_format_indicator: Some(true),
            ..PropertySet::default()
        };
        p5.send(&publish("props/req", b"{}", 1, Some(1), props.clone()));
        assert_eq!(ack_reason(p5.recv()), reason::SUCCESS);
        let m = sub.recv_timeout(Duration::from_secs(10)).await.unwrap();
        assert_eq!(m.headers["tenant"], "acme");
        assert_eq!(m.headers["content-type"], "application/json");
        assert_eq!(m.headers["response-topic"], "props/replies");
        assert_eq!(m.headers["correlation-data"], "AQID");
        assert_eq!(m.headers["payload-format"], "utf-8");
        // A native publish with headers reaches an MQTT 5 subscriber as
        // the same properties.
        let (mut s5, _) = Raw::connect(addr, hello("props-sub"));
        s5.send(&subscribe(1, "props/replies", SubOptions::qos(0), None));
        assert_eq!(suback(&mut s5), [0]);
        let mut h = Headers::new();
        for (k, v) in [
            ("tenant", "acme"),
            ("content-type", "application/json"),
            ("correlation-data", "AQID"),
        ] {
            h.insert(k.into(), v.into());
        }
        native
            .publish_with(
                "props/replies",
                b"ok".to_vec(),
                h,
                false,
                Priority::Normal,
                true,
            )
            .await
            .unwrap();
        let p = expect_publish(&mut s5);
        assert_eq!(&p.payload[..], b"ok");
        assert_eq!(p.props.user_properties, [("tenant".into(), "acme".into())]);
        assert_eq!(p.props.content_type.as_deref(), Some("application/json"));
        assert_eq!(p.props.correlation_data.as_deref(), Some(&[1u8, 2, 3][..]));
        // A payload that is not the UTF-8 its indicator claims is refused.
        p5.send(&publish(
            "props/req",
            &[0xff, 0xfe],
            1,
            Some(2),
            PropertySet {
                payload_format_indicator: Some(true),
                ..PropertySet::default()
            },
        ));
        assert_eq!(ack_reason(p5.recv()), reason::PAYLOAD_FORMAT_INVALID);
    });
}

#[test]
fn topic_aliases_work_both_ways_and_a_bad_one_ends_the_connection() {
    let b = TestBroker::start_tcp(|_| {});
    let addr = b.mqtt_addr.unwrap();
    let aliases = PropertySet {
        topic_alias_maximum: Some(1),
        ..PropertySet::default()
    };
    let (mut sub, _) = Raw::connect(addr, with(hello("alias-sub"), aliases));
    sub.send(&subscribe(1, "alias/#", SubOptions::qos(0), None));
    assert_eq!(suback(&mut sub), [0]);
    let (mut publ, _) = Raw::connect(addr, hello("alias-pub"));
    let alias = |a| PropertySet {
        topic_alias: Some(a),
        ..PropertySet::default()
    };
    // The publisher sets alias 3, then sends by alias alone.
    publ.send(&publish("alias/one", b"1", 1, Some(1), alias(3)));
    assert_eq!(ack_reason(publ.recv()), reason::SUCCESS);
    publ.send(&publish("", b"2", 1, Some(2), alias(3)));
    assert_eq!(ack_reason(publ.recv()), reason::SUCCESS);
    publ.send(&publish(
        "alias/two",
        b"3",
        1,
        Some(3),
        PropertySet::default(),
    ));
    assert_eq!(ack_reason(publ.recv()), reason::SUCCESS);
    // The subscriber accepts one alias: the server gives it to the first
    // topic, then sends that topic by alias alone; the other by name.
    let got: Vec<(String, Option<u16>, Bytes)> = (0..3)
        .map(|_| {
            let p = expect_publish(&mut sub);
            (p.topic.clone(), p.props.topic_alias, p.payload)
        })
        .collect();
    assert_eq!(
        got,
        [
            ("alias/one".into(), Some(1), Bytes::from_static(b"1")),
            (String::new(), Some(1), Bytes::from_static(b"2")),
            ("alias/two".into(), None, Bytes::from_static(b"3")),
        ]
    );
    // An alias never set, and one over the maximum, end the connection.
    publ.send(&publish("", b"x", 0, None, alias(9)));
    assert_eq!(disconnect_reason(&mut publ), reason::PROTOCOL_ERROR);
    let (mut over, _) = Raw::connect(addr, hello("alias-over"));
    over.send(&publish("alias/x", b"x", 0, None, alias(65)));
    assert_eq!(disconnect_reason(&mut over), reason::TOPIC_ALIAS_INVALID);
    // Only those connections.
    sub.send(&Packet::PingReq);
    assert_eq!(sub.recv(), Some(Packet::PingResp));
}

#[test]
fn subscription_options_and_identifiers_shape_deliveries() {
    let b = TestBroker::start_tcp(|_| {});
    let addr = b.mqtt_addr.unwrap();
    let (mut me, _) = Raw::connect(addr, hello("opts-me"));
    let (mut other, _) = Raw::connect(addr, hello("opts-other"));
    let no_local = SubOptions {
        no_local: true,
        ..SubOptions::qos(0)
    };
    me.send(&subscribe(1, "opts/local", no_local, Some(7)));
    assert_eq!(suback(&mut me), [0]);
    me.send(&publish(
        "opts/local",
        b"mine",
        0,
        None,
        PropertySet::default(),
    ));
    other.send(&publish(
        "opts/local",
        b"theirs",
        0,
        None,
        PropertySet::default(),
    ));
    // Ordered after the other client's publish: the PUBACK of a QoS 1
    // publish comes once it was delivered.
    other.send(&publish(
        "opts/sync",
        b"",
        1,
        Some(1),
        PropertySet::default(),
    ));
    assert!(matches!(other.recv(), Some(Packet::PubAck(_))));
    let got = me.until_pong();
    let payloads: Vec<(Bytes, Vec<u32>)> = got
        .into_iter()
        .map(|p| match p {
            Packet::Publish(p) => (p.payload, p.props.subscription_identifiers.clone()),
            other => panic!("unexpected {other:?}"),
        })
        .collect();
    assert_eq!(payloads, [(Bytes::from_static(b"theirs"), vec![7])]);

    // Retained messages: retain handling 0 sends them at every
    // subscribe, 1 only to a new subscription, 2 never; retain as
    // published keeps the flag on live messages.
    let mut retained = publish("opts/kept", b"kept", 1, Some(2), PropertySet::default());
    if let Packet::Publish(p) = &mut retained {
        p.retain = true;
    }
    other.send(&retained);
    assert!(matches!(other.recv(), Some(Packet::PubAck(_))));
    let rh = |h: u8, rap: bool| SubOptions {
        retain_handling: h,
        retain_as_published: rap,
        ..SubOptions::qos(0)
    };
    let (mut s, _) = Raw::connect(addr, hello("opts-retain"));
    let kept = |s: &mut Raw, pid, o| {
        s.send(&subscribe(pid, "opts/kept", o, None));
        // The retained message may come before or after the SUBACK.
        s.until_pong()
            .into_iter()
            .filter(|p| matches!(p, Packet::Publish(p) if p.retain))
            .count()
    };
    assert_eq!(kept(&mut s, 1, rh(2, false)), 0, "retain handling 2");
    s.send(&Packet::unsubscribe(2, vec!["opts/kept".into()]));
    assert!(matches!(s.recv(), Some(Packet::UnsubAck(_))));
    assert_eq!(kept(&mut s, 3, rh(1, false)), 1, "1, new subscription");
    assert_eq!(kept(&mut s, 4, rh(1, false)), 0, "1, existing");
    assert_eq!(kept(&mut s, 5, rh(0, true)), 1, "0, every time");
    other.send(&retained);
    let p = expect_publish(&mut s);
    assert!(p.retain, "retain as published keeps the flag");
    let (mut plain, _) = Raw::connect(addr, hello("opts-plain"));
    assert_eq!(kept(&mut plain, 1, rh(2, false)), 0);
    other.send(&retained);
    assert!(!expect_publish(&mut plain).retain, "cleared without it");
}

#[test]
fn expired_messages_are_not_delivered() {
    let b = TestBroker::start_tcp(|_| {});
    let addr = b.mqtt_addr.unwrap();
    let (mut publ, _) = Raw::connect(addr, hello("exp-pub"));
    let mut p = publish(
        "exp/kept",
        b"short-lived",
        1,
        Some(1),
        PropertySet {
            message_expiry_interval: Some(1),
            ..PropertySet::default()
        },
    );
    if let Packet::Publish(p) = &mut p {
        p.retain = true;
    }
    let sent = Instant::now();
    publ.send(&p);
    assert!(matches!(publ.recv(), Some(Packet::PubAck(_))));
    let (mut s, _) = Raw::connect(addr, hello("exp-sub"));
    s.send(&subscribe(1, "exp/kept", SubOptions::qos(1), None));
    // The retained message may come before or after the SUBACK.
    let mut got = s.until_pong();
    got.retain(|p| !matches!(p, Packet::SubAck(_)));
    let Some(Packet::Publish(m)) = got.pop() else {
        panic!("expected the retained message");
    };
    if sent.elapsed() < Duration::from_millis(900) {
        assert_eq!(m.props.message_expiry_interval, Some(1), "seconds left");
    }
    s.send(&Packet::puback(m.pid.unwrap()));
    // Once the second is over, new subscribers get nothing.
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut pid = 2;
    loop {
        let (mut late, _) = Raw::connect(addr, hello("exp-late"));
        late.send(&subscribe(pid, "exp/kept", SubOptions::qos(1), None));
        let got = late.until_pong();
        if got.iter().all(|p| matches!(p, Packet::SubAck(_))) {
            assert!(sent.elapsed() >= Duration::from_secs(1), "expired early");
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the retained message never expired"
        );
        pid += 1;
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The names of the durable subscription queues the broker holds.
fn durable_queues(b: &TestBroker) -> Vec<String> {
    let (status, body) = http(b.addr, "GET", "/queues", "");
    assert_eq!(status, 200, "{body}");
    let list: Vec<serde_json::Value> = serde_json::from_str(&body).unwrap();
    list.iter()
        .filter_map(|q| q["name"].as_str().map(str::to_owned))
        .filter(|n| n.starts_with("$durable/"))
        .collect()
}

#[test]
fn session_expiry_keeps_a_session_for_its_interval() {
    let b = TestBroker::start_tcp(|_| {});
    let addr = b.mqtt_addr.unwrap();
    let keep = |secs| PropertySet {
        session_expiry_interval: Some(secs),
        ..PropertySet::default()
    };
    let (mut s, ack) = Raw::connack(addr, with(hello("exp-session"), keep(60)));
    assert!(!ack.session_present);
    s.send(&subscribe(1, "sess/t", SubOptions::qos(1), None));
    assert_eq!(suback(&mut s), [1]);
    s.send(&Packet::disconnect());
    assert_eq!(s.recv(), None);
    let (mut publ, _) = Raw::connect(addr, hello("sess-pub"));
    publ.send(&publish(
        "sess/t",
        b"while away",
        1,
        Some(1),
        PropertySet::default(),
    ));
    assert_eq!(ack_reason(publ.recv()), reason::SUCCESS);
    // Back without a clean start, with an expiry of 1 s from now on.
    let resume = Connect {
        clean_session: false,
        ..with(hello("exp-session"), keep(1))
    };
    let (mut s, ack) = Raw::connack(addr, resume);
    assert!(ack.session_present);
    let m = expect_publish(&mut s);
    assert_eq!(&m.payload[..], b"while away");
    s.send(&Packet::puback(m.pid.unwrap()));
    s.send(&Packet::disconnect());
    assert_eq!(s.recv(), None);
    assert_eq!(durable_queues(&b).len(), 1, "kept while the interval runs");
    assert!(
        common::wait_until(Duration::from_secs(10), || durable_queues(&b).is_empty()),
        "the session expired"
    );
    // A kept session without subscriptions is still a session.
    let (mut s, _) = Raw::connack(addr, with(hello("exp-empty"), keep(60)));
    s.send(&Packet::disconnect());
    assert_eq!(s.recv(), None);
    let resume = Connect {
        clean_session: false,
        ..with(hello("exp-empty"), keep(60))
    };
    let (_s, ack) = Raw::connack(addr, resume);
    assert!(ack.session_present, "MQTT-3.2.2-2");
    // An expiry of 0 (the default) ends the session with the connection.
    let (mut s, _) = Raw::connack(addr, with(hello("exp-zero"), keep(0)));
    s.send(&subscribe(1, "sess/t", SubOptions::qos(1), None));
    assert_eq!(suback(&mut s), [1]);
    s.send(&Packet::disconnect());
    assert_eq!(s.recv(), None);
    let resume = Connect {
        clean_session: false,
        ..hello("exp-zero")
    };
    let (_s, ack) = Raw::connack(addr, resume);
    assert!(!ack.session_present);
}

#[test]
fn a_will_waits_for_its_delay_and_a_returning_client_cancels_it() {
    let b = TestBroker::start_tcp(|_| {});
    let addr = b.mqtt_addr.unwrap();
    let (mut watcher, _) = Raw::connect(addr, hello("will-watch"));
    watcher.send(&subscribe(1, "wills/#", SubOptions::qos(0), None));
    assert_eq!(suback(&mut watcher), [0]);
    let will = |delay| Connect {
        will: Some(Will {
            topic: "wills/late".into(),
            payload: Bytes::from_static(b"gone"),
            qos: 0,
            retain: false,
            props: PropertySet {
                will_delay_interval: Some(delay),
                user_properties: vec![("why".into(), "test".into())],
                ..PropertySet::default()
            }
            .into(),
        }),
        props: PropertySet {
            session_expiry_interval: Some(30),
            ..PropertySet::default()
        }
        .into(),
        ..hello("will-client")
    };
    let (c, _) = Raw::connect(addr, will(1));
    let dropped = Instant::now();
    drop(c);
    let p = expect_publish(&mut watcher);
    let waited = dropped.elapsed();
    assert_eq!(p.topic, "wills/late");
    assert_eq!(p.props.user_properties, [("why".into(), "test".into())]);
    assert!(
        waited >= Duration::from_millis(900),
        "sent after {waited:?}"
    );
    // Back before the delay is over: no will.
    let (c, _) = Raw::connect(addr, will(2));
    drop(c);
    let (back, _) = Raw::connect(
        addr,
        Connect {
            clean_session: false,
            ..hello("will-client")
        },
    );
    // Past the delay (2 s), nothing but PINGRESPs: a will would come
    // before the PINGRESP of a later PINGREQ. Each PINGRESP is waited for
    // up to `raw_mqtt::T`: a loaded machine can hold one well past the
    // 200 ms between PINGREQs.
    let quiet_until = Instant::now() + Duration::from_secs(3);
    while Instant::now() < quiet_until {
        let before = watcher.until_pong();
        assert!(before.is_empty(), "only PINGRESP, no will: {before:?}");
        std::thread::sleep(Duration::from_millis(200));
    }
    drop(back);
    // Back with a clean start: that ends the old session, so its will
    // (delay 30 s) goes out now.
    let (c, _) = Raw::connect(addr, will(30));
    drop(c);
    let reconnected = Instant::now();
    let (_fresh, _) = Raw::connect(addr, hello("will-client"));
    let p = expect_publish(&mut watcher);
    assert_eq!(p.topic, "wills/late");
    assert!(reconnected.elapsed() < Duration::from_secs(10));
}

#[test]
fn the_clients_receive_maximum_and_packet_size_bound_what_it_gets() {
    let b = TestBroker::start_tcp(|_| {});
    let addr = b.mqtt_addr.unwrap();
    let limits = PropertySet {
        receive_maximum: Some(2),
        maximum_packet_size: Some(200),
        ..PropertySet::default()
    };
    let (mut s, _) = Raw::connect(addr, with(hello("rm-sub"), limits));
    s.send(&subscribe(1, "rm/t", SubOptions::qos(1), None));
    assert_eq!(suback(&mut s), [1]);
    let (mut publ, _) = Raw::connect(addr, hello("rm-pub"));
    publ.send(&publish(
        "rm/t",
        &[b'x'; 400],
        0,
        None,
        PropertySet::default(),
    ));
    for i in 0..5u16 {
        publ.send(&publish(
            "rm/t",
            &[b'0' + i as u8],
            1,
            Some(i + 1),
            PropertySet::default(),
        ));
        assert!(matches!(publ.recv(), Some(Packet::PubAck(_))));
    }
    // Two in flight at most; the 400-byte one never comes (over 200).
    let first = s.until_pong();
    let pids: Vec<u16> = first
        .iter()
        .map(|p| match p {
            Packet::Publish(p) => {
                assert_eq!(p.payload.len(), 1, "the large one is not sent");
                p.pid.unwrap()
            }
            other => panic!("unexpected {other:?}"),
        })
        .collect();
    assert_eq!(pids.len(), 2, "{first:?}");
    let mut payloads: Vec<u8> = first
        .iter()
        .map(|p| match p {
            Packet::Publish(p) => p.payload[0],
            _ => 0,
        })
        .collect();
    // Each PUBACK lets one more through, in order.
    for pid in pids {
        s.send(&Packet::puback(pid));
    }
    while payloads.len() < 5 {
        let p = expect_publish(&mut s);
        payloads.push(p.payload[0]);
        s.send(&Packet::puback(p.pid.unwrap()));
    }
    assert_eq!(payloads, b"01234");
}

#[test]
fn the_server_says_why_it_disconnects() {
    let b = TestBroker::start_tcp(|_| {});
    let addr = b.mqtt_addr.unwrap();
    // Taken over by a new connection with the same client id.
    let (mut first, _) = Raw::connect(addr, hello("twice"));
    let (mut second, _) = Raw::connect(addr, hello("twice"));
    assert_eq!(disconnect_reason(&mut first), reason::SESSION_TAKEN_OVER);
    second.send(&Packet::PingReq);
    assert_eq!(second.recv(), Some(Packet::PingResp));
    // Silent past one and a half keep-alives.
    let (mut silent, _) = Raw::connect(
        addr,
        Connect {
            keep_alive: 1,
            ..hello("silent5")
        },
    );
    assert_eq!(disconnect_reason(&mut silent), reason::KEEP_ALIVE_TIMEOUT);
    // AUTH without enhanced authentication, and a malformed packet.
    let (mut auth, _) = Raw::connect(addr, hello("auth5"));
    auth.send(&Packet::Auth(mqtt::Reasoned {
        reason: reason::CONTINUE_AUTHENTICATION,
        props: Default::default(),
    }));
    assert_eq!(disconnect_reason(&mut auth), reason::PROTOCOL_ERROR);
    let (mut bad, _) = Raw::connect(addr, hello("bad5"));
    // PUBACK with an unknown property (0x7f).
    std::io::Write::write_all(&mut bad.stream, &[0x40, 5, 0, 1, 0x00, 1, 0x7f]).unwrap();
    assert_eq!(disconnect_reason(&mut bad), reason::MALFORMED_PACKET);
    // A client DISCONNECT gets no DISCONNECT back.
    second.send(&Packet::disconnect());
    assert_eq!(second.recv(), None);
}

#[test]
fn messages_on_a_topic_with_history_carry_their_position() {
    let b = TestBroker::start_tcp(|c| {
        c.history.push(wharf::config::HistoryDecl {
            filter: "chat/#".into(),
            size: 10,
            ttl_s: 0,
        })
    });
    let addr = b.mqtt_addr.unwrap();
    let (mut s5, _) = Raw::connect(addr, hello("history-sub"));
    s5.send(&subscribe(1, "#", SubOptions::qos(0), None));
    assert_eq!(suback(&mut s5), [0]);
    for topic in ["chat/a", "chat/a", "plain/b"] {
        // A publisher's own headers of those names do not pass for the
        // broker's (on the topic with history).
        let spoof = if topic == "chat/a" {
            "x-wharf-wharf-offset: 999\r\n"
        } else {
            ""
        };
        let (code, _, body) =
            common::http_request(b.addr, "POST", &format!("/topics/{topic}"), spoof, "x");
        assert_eq!(code, 202, "{body}");
    }
    let (_, body) = http(b.addr, "GET", "/topics/chat/a/history", "");
    let epoch = serde_json::from_str::<serde_json::Value>(&body).unwrap()["epoch"]
        .as_str()
        .unwrap()
        .to_owned();
    for offset in ["1", "2"] {
        let p = expect_publish(&mut s5);
        assert_eq!(p.topic, "chat/a");
        assert_eq!(
            p.props.user_properties,
            [
                ("wharf-offset".into(), offset.into()),
                ("wharf-epoch".into(), epoch.clone())
            ]
        );
    }
    // A topic without history: no position.
    let p = expect_publish(&mut s5);
    assert_eq!(p.topic, "plain/b");
    assert!(p.props.user_properties.is_empty());
}
