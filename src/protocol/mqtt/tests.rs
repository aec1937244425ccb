//! Unit tests of the codec: round trips at every level, MQTT 5 packets
//! written out byte by byte after the spec's layouts, and refusals.

use bytes::{Bytes, BytesMut};

use super::*;

const MAX: usize = 1 << 20;

fn round_trip_at(p: Packet, level: u8) {
    let mut out = BytesMut::new();
    encode(&p, &mut out, level);
    let mut buf = out.clone();
    assert_eq!(
        decode(&mut buf, MAX, level).unwrap(),
        Some(p.clone()),
        "{out:?}"
    );
    assert!(buf.is_empty());
    // Split anywhere: "need more" until the last byte.
    for cut in 0..out.len() {
        let mut part = BytesMut::from(&out[..cut]);
        assert_eq!(decode(&mut part, MAX, level).unwrap(), None, "cut {cut}");
    }
}

fn round_trip(p: Packet) {
    round_trip_at(p, LEVEL_3_1_1);
}

/// Decodes `bytes` as one whole packet at `level`.
fn decode_one(bytes: &[u8], level: u8) -> Result<Packet, MqttError> {
    let mut buf = BytesMut::from(bytes);
    let p = decode(&mut buf, MAX, level)?.expect("a whole packet");
    assert!(buf.is_empty(), "left over: {buf:?}");
    Ok(p)
}

/// A packet with a one-byte remaining length: `first`, then `body`.
fn packet(first: u8, body: &[u8]) -> Vec<u8> {
    assert!(body.len() < 128);
    let mut v = vec![first, body.len() as u8];
    v.extend_from_slice(body);
    v
}

fn v3_connect() -> Connect {
    Connect {
        level: 4,
        client_id: "c1".into(),
        clean_session: false,
        keep_alive: 30,
        will: Some(Will {
            topic: "w".into(),
            payload: Bytes::from_static(b"bye"),
            qos: 1,
            retain: true,
            props: Properties::default(),
        }),
        username: Some("u".into()),
        password: Some(Bytes::from_static(b"p")),
        props: Properties::default(),
    }
}

fn publish(qos: u8, topic: &str, props: Properties) -> PublishPacket {
    PublishPacket {
        dup: qos > 0,
        qos,
        retain: true,
        topic: topic.into(),
        pid: (qos > 0).then_some(7),
        payload: Bytes::from(vec![0u8; 300]),
        props,
    }
}

#[test]
fn every_packet_round_trips_and_waits_for_its_last_byte() {
    round_trip(Packet::Connect(Box::new(v3_connect())));
    round_trip_at(
        Packet::Connect(Box::new(Connect {
            level: 3,
            ..v3_connect()
        })),
        LEVEL_3_1,
    );
    round_trip(Packet::connack(true, 0));
    round_trip(Packet::Publish(publish(2, "a/b", Properties::default())));
    round_trip(Packet::Publish(PublishPacket {
        dup: false,
        qos: 0,
        retain: false,
        topic: "t".into(),
        pid: None,
        payload: Bytes::new(),
        props: Properties::default(),
    }));
    for p in [
        Packet::puback(1),
        Packet::pubrec(2),
        Packet::pubrel(3),
        Packet::pubcomp(4),
        Packet::unsuback(5),
        Packet::PingReq,
        Packet::PingResp,
        Packet::disconnect(),
    ] {
        round_trip(p);
    }
    round_trip(Packet::subscribe(
        9,
        vec![("a/+".into(), 1), ("#".into(), 2)],
    ));
    round_trip(Packet::suback(9, vec![1, 0x80]));
    round_trip(Packet::unsubscribe(10, vec!["a/+".into()]));
}

#[test]
fn v3_bytes_leave_out_everything_mqtt5() {
    let props: Properties = PropertySet {
        reason_string: Some("why".into()),
        user_properties: vec![("k".into(), "v".into())],
        topic_alias: Some(3),
        ..PropertySet::default()
    }
    .into();
    let cases: Vec<(Packet, &[u8])> = vec![
        (
            Packet::PubAck(Ack {
                pid: 7,
                reason: reason::NOT_AUTHORIZED,
                props: props.clone(),
            }),
            &[0x40, 2, 0, 7],
        ),
        (
            Packet::ConnAck(ConnAck {
                session_present: true,
                code: 0,
                props: props.clone(),
            }),
            &[0x20, 2, 1, 0],
        ),
        (
            Packet::Disconnect(Reasoned {
                reason: reason::SESSION_TAKEN_OVER,
                props: props.clone(),
            }),
            &[0xe0, 0],
        ),
        (
            Packet::UnsubAck(UnsubAck {
                pid: 5,
                codes: vec![0x11],
                props: props.clone(),
            }),
            &[0xb0, 2, 0, 5],
        ),
        (
            Packet::Subscribe(Subscribe {
                pid: 1,
                filters: vec![(
                    "t".into(),
                    SubOptions {
                        qos: 1,
                        no_local: true,
                        retain_as_published: true,
                        retain_handling: 2,
                    },
                )],
                props: props.clone(),
            }),
            &[0x82, 6, 0, 1, 0, 1, b't', 1],
        ),
        (
            Packet::Publish(PublishPacket {
                dup: false,
                qos: 1,
                retain: false,
                topic: "t".into(),
                pid: Some(2),
                payload: Bytes::from_static(b"x"),
                props,
            }),
            &[0x32, 6, 0, 1, b't', 0, 2, b'x'],
        ),
    ];
    for (p, want) in cases {
        for level in [LEVEL_3_1, LEVEL_3_1_1] {
            let mut out = BytesMut::new();
            encode(&p, &mut out, level);
            assert_eq!(&out[..], want, "{p:?}");
        }
    }
}

#[test]
fn bad_input_is_an_error_not_a_panic() {
    let cases: &[&[u8]] = &[
        &[0x00, 0],                         // type 0
        &[0xf0, 0],                         // type 15 (AUTH) before MQTT 5
        &[0x36, 3, 0, 1, b'a'],             // QoS 3
        &[0x62 & 0xf0, 2, 0, 1],            // PUBREL without its flags
        &[0x30, 0xff, 0xff, 0xff, 0xff, 1], // length in 5 bytes
        &[0x82, 2, 0, 1],                   // SUBSCRIBE without filters
        &[0x40, 3, 0, 1, 9],                // PUBACK with a trailing byte
        &[0x32, 5, 0, 1, b'a', 0, 0],       // QoS 1 with packet id 0
    ];
    for c in cases {
        let mut buf = BytesMut::from(*c);
        assert!(decode(&mut buf, MAX, LEVEL_3_1_1).is_err(), "{c:?}");
    }
    for level in [LEVEL_3_1_1, LEVEL_5] {
        let mut big = BytesMut::from(&[0x30u8, 0x80, 0x80, 0x01][..]);
        assert_eq!(
            decode(&mut big, 1000, level),
            Err(MqttError::TooLarge(16384))
        );
    }
}

#[test]
fn unknown_levels_are_reported_for_refusal() {
    let mut buf = BytesMut::from(&[0x10u8, 10, 0, 4, b'M', b'Q', b'T', b'T', 6, 2, 0, 60][..]);
    match decode(&mut buf, MAX, LEVEL_3_1_1).unwrap() {
        Some(Packet::Connect(c)) => assert_eq!((c.level, c.client_id.as_str()), (6, "")),
        other => panic!("{other:?}"),
    }
}

// ---------------------------------------------------------------- MQTT 5

/// Every property a packet of `ctx`'s kind may carry, set.
fn full(ctx: &str) -> Properties {
    let users = vec![
        ("k".into(), "v".into()),
        ("k".into(), "v2".into()),
        ("é".into(), String::new()),
    ];
    let reason = Some("because".to_owned());
    match ctx {
        "connect" => PropertySet {
            session_expiry_interval: Some(3600),
            authentication_method: Some("SCRAM-SHA-1".into()),
            authentication_data: Some(Bytes::from_static(b"\x00\x01")),
            request_problem_information: Some(false),
            request_response_information: Some(true),
            receive_maximum: Some(20),
            topic_alias_maximum: Some(10),
            user_properties: users,
            maximum_packet_size: Some(1 << 16),
            ..PropertySet::default()
        }
        .into(),
        "connack" => PropertySet {
            session_expiry_interval: Some(0),
            assigned_client_identifier: Some("auto-1".into()),
            server_keep_alive: Some(30),
            authentication_method: Some("m".into()),
            authentication_data: Some(Bytes::from_static(b"d")),
            response_information: Some("resp/".into()),
            server_reference: Some("other:1883".into()),
            reason_string: reason,
            receive_maximum: Some(100),
            topic_alias_maximum: Some(0),
            maximum_qos: Some(1),
            retain_available: Some(true),
            user_properties: users,
            maximum_packet_size: Some(1 << 20),
            wildcard_subscription_available: Some(true),
            subscription_identifier_available: Some(false),
            shared_subscription_available: Some(true),
            ..PropertySet::default()
        }
        .into(),
        "publish" | "will" => PropertySet {
            payload_format_indicator: Some(true),
            message_expiry_interval: Some(60),
            content_type: Some("text/plain".into()),
            response_topic: Some("reply/here".into()),
            correlation_data: Some(Bytes::from_static(b"\xff\x00")),
            subscription_identifiers: if ctx == "publish" {
                vec![1, 128, 16_384, 268_435_455]
            } else {
                Vec::new()
            },
            topic_alias: (ctx == "publish").then_some(3),
            will_delay_interval: (ctx == "will").then_some(5),
            user_properties: users,
            ..PropertySet::default()
        }
        .into(),
        "subscribe" => PropertySet {
            subscription_identifiers: vec![268_435_455],
            user_properties: users,
            ..PropertySet::default()
        }
        .into(),
        "unsubscribe" => PropertySet {
            user_properties: users,
            ..PropertySet::default()
        }
        .into(),
        "disconnect" => PropertySet {
            session_expiry_interval: Some(10),
            server_reference: Some("elsewhere".into()),
            reason_string: reason,
            user_properties: users,
            ..PropertySet::default()
        }
        .into(),
        "auth" => PropertySet {
            authentication_method: Some("m".into()),
            authentication_data: Some(Bytes::from_static(b"d")),
            reason_string: reason,
            user_properties: users,
            ..PropertySet::default()
        }
        .into(),
        // Acks, SUBACK, UNSUBACK.
        _ => PropertySet {
            reason_string: reason,
            user_properties: users,
            ..PropertySet::default()
        }
        .into(),
    }
}

#[test]
fn every_v5_packet_round_trips_with_every_property_it_may_carry() {
    let v5 = |p| round_trip_at(p, LEVEL_5);
    v5(Packet::Connect(Box::new(Connect {
        level: 5,
        client_id: String::new(),
        clean_session: true,
        keep_alive: 0,
        will: Some(Will {
            props: full("will"),
            ..v3_connect().will.unwrap()
        }),
        username: None,
        password: Some(Bytes::from_static(b"pw without a user name")),
        props: full("connect"),
    })));
    v5(Packet::Connect(Box::new(Connect {
        level: 5,
        will: None,
        ..v3_connect()
    })));
    v5(Packet::ConnAck(ConnAck {
        session_present: true,
        code: 0,
        props: full("connack"),
    }));
    v5(Packet::ConnAck(ConnAck {
        session_present: false,
        code: reason::BAD_AUTHENTICATION_METHOD,
        props: Properties::default(),
    }));
    v5(Packet::Publish(publish(1, "a/b", full("publish"))));
    v5(Packet::Publish(publish(0, "", full("publish"))));
    v5(Packet::Publish(publish(2, "x", Properties::default())));
    for (reason, props) in [
        (0, Properties::default()),
        (0, full("ack")),
        (0x10, Properties::default()),
        (0x97, full("ack")),
    ] {
        let a = Ack {
            pid: 513,
            reason,
            props,
        };
        v5(Packet::PubAck(a.clone()));
        v5(Packet::PubRec(a.clone()));
        if reason == 0 {
            v5(Packet::PubRel(a.clone()));
            v5(Packet::PubComp(a));
        }
    }
    v5(Packet::PubRel(Ack {
        reason: reason::PACKET_IDENTIFIER_NOT_FOUND,
        props: full("ack"),
        ..Ack::new(1)
    }));
    v5(Packet::Subscribe(Subscribe {
        pid: 4,
        filters: vec![
            (
                "a/+".into(),
                SubOptions {
                    qos: 2,
                    no_local: true,
                    retain_as_published: true,
                    retain_handling: 2,
                },
            ),
            ("$share/g/#".into(), SubOptions::qos(0)),
        ],
        props: full("subscribe"),
    }));
    v5(Packet::SubAck(SubAck {
        pid: 4,
        codes: vec![2, 0x80, 0x8F, 0xA2],
        props: full("suback"),
    }));
    v5(Packet::Unsubscribe(Unsubscribe {
        pid: 5,
        filters: vec!["a".into(), "b/#".into()],
        props: full("unsubscribe"),
    }));
    v5(Packet::UnsubAck(UnsubAck {
        pid: 5,
        codes: vec![0, 0x11],
        props: full("unsuback"),
    }));
    v5(Packet::PingReq);
    v5(Packet::PingResp);
    for d in [
        Reasoned::default(),
        Reasoned {
            reason: reason::DISCONNECT_WITH_WILL,
            props: Properties::default(),
        },
        Reasoned {
            reason: reason::SERVER_SHUTTING_DOWN,
            props: full("disconnect"),
        },
        Reasoned::with_reason_string(reason::KEEP_ALIVE_TIMEOUT, "keep-alive timeout"),
    ] {
        v5(Packet::Disconnect(d));
    }
    v5(Packet::Auth(Reasoned::default()));
    v5(Packet::Auth(Reasoned {
        reason: reason::CONTINUE_AUTHENTICATION,
        props: full("auth"),
    }));
}

#[test]
fn properties_a_packet_may_not_carry_are_not_written() {
    let mut p = publish(1, "t", Properties::default());
    p.props.assigned_client_identifier = Some("x".into());
    p.props.reason_string = Some("x".into());
    let mut out = BytesMut::new();
    encode(&Packet::Publish(p.clone()), &mut out, LEVEL_5);
    p.props = Properties::default();
    assert_eq!(decode_one(&out, LEVEL_5).unwrap(), Packet::Publish(p));
    // SUBSCRIBE carries one subscription identifier.
    let mut s = Subscribe {
        pid: 1,
        filters: vec![("t".into(), SubOptions::qos(1))],
        props: PropertySet {
            subscription_identifiers: vec![1, 2],
            ..PropertySet::default()
        }
        .into(),
    };
    let mut out = BytesMut::new();
    encode(&Packet::Subscribe(s.clone()), &mut out, LEVEL_5);
    s.props.subscription_identifiers = vec![1];
    assert_eq!(decode_one(&out, LEVEL_5).unwrap(), Packet::Subscribe(s));
}

/// CONNECT (MQTT 5 §3.1) with properties, and a will with will properties.
#[test]
fn spec_layout_connect_with_properties_and_will() {
    #[rustfmt::skip]
    let body = [
        0, 4, b'M', b'Q', b'T', b'T', // protocol name
        5,                            // level
        0xEE,                         // user name, password, will retain, will QoS 1, will, clean start
        0, 60,                        // keep alive
        15,                           // property length
        0x11, 0, 0, 0, 0x78,          //   session expiry interval 120
        0x21, 0, 10,                  //   receive maximum 10
        0x26, 0, 1, b'k', 0, 1, b'v', //   user property k=v
        0, 3, b'c', b'i', b'd',       // client id
        14,                           // will property length
        0x18, 0, 0, 0, 5,             //   will delay interval 5
        0x01, 1,                      //   payload format indicator: UTF-8
        0x03, 0, 4, b't', b'e', b'x', b't', // content type
        0, 1, b'w',                   // will topic
        0, 3, b'b', b'y', b'e',       // will payload
        0, 1, b'u',                   // user name
        0, 2, b'p', b'w',             // password
    ];
    let got = decode_one(&packet(0x10, &body), LEVEL_3_1_1).unwrap();
    let want = Connect {
        level: 5,
        client_id: "cid".into(),
        clean_session: true,
        keep_alive: 60,
        will: Some(Will {
            topic: "w".into(),
            payload: Bytes::from_static(b"bye"),
            qos: 1,
            retain: true,
            props: PropertySet {
                will_delay_interval: Some(5),
                payload_format_indicator: Some(true),
                content_type: Some("text".into()),
                ..PropertySet::default()
            }
            .into(),
        }),
        username: Some("u".into()),
        password: Some(Bytes::from_static(b"pw")),
        props: PropertySet {
            session_expiry_interval: Some(120),
            receive_maximum: Some(10),
            user_properties: vec![("k".into(), "v".into())],
            ..PropertySet::default()
        }
        .into(),
    };
    assert_eq!(got, Packet::Connect(Box::new(want)));
    // The smallest MQTT 5 CONNECT, decoded whatever the connection's
    // level so far: the session still refuses level 5 by its CONNACK.
    let min = [
        0x10u8, 13, 0, 4, b'M', b'Q', b'T', b'T', 5, 2, 0, 60, 0, 0, 0,
    ];
    match decode_one(&min, LEVEL_3_1_1).unwrap() {
        Packet::Connect(c) => assert_eq!((c.level, c.props), (5, Properties::default())),
        other => panic!("{other:?}"),
    }
}

/// PUBLISH (§3.3) with a topic alias, two user properties and two
/// subscription identifiers, one of them in two bytes.
#[test]
fn spec_layout_publish_with_alias_user_properties_and_subscription_ids() {
    #[rustfmt::skip]
    let body = [
        0, 3, b'a', b'/', b'b',       // topic
        0, 7,                         // packet id
        22,                           // property length
        0x23, 0, 2,                   //   topic alias 2
        0x26, 0, 1, b'x', 0, 1, b'1', //   user property x=1
        0x26, 0, 1, b'x', 0, 1, b'2', //   user property x=2
        0x0B, 5,                      //   subscription identifier 5
        0x0B, 0x80, 0x01,             //   subscription identifier 128
        b'h', b'i',                   // payload
    ];
    let got = decode_one(&packet(0x3b, &body), LEVEL_5).unwrap();
    let want = PublishPacket {
        dup: true,
        qos: 1,
        retain: true,
        topic: "a/b".into(),
        pid: Some(7),
        payload: Bytes::from_static(b"hi"),
        props: PropertySet {
            topic_alias: Some(2),
            user_properties: vec![("x".into(), "1".into()), ("x".into(), "2".into())],
            subscription_identifiers: vec![5, 128],
            ..PropertySet::default()
        }
        .into(),
    };
    assert_eq!(got, Packet::Publish(want));
    // An empty topic stands for the alias's.
    let got = decode_one(&packet(0x30, &[0, 0, 3, 0x23, 0, 2, b'x']), LEVEL_5).unwrap();
    assert!(
        matches!(got, Packet::Publish(p) if p.topic.is_empty() && p.props.topic_alias == Some(2))
    );
    // The same bytes at 3.1.1 are a topic and a payload, no properties.
    let got = decode_one(&packet(0x30, &[0, 1, b't', 0]), LEVEL_3_1_1).unwrap();
    assert!(matches!(got, Packet::Publish(p) if p.payload[..] == [0]));
}

/// PUBACK (§3.4.2.1): remaining length 2 is success without properties,
/// 3 a reason code without properties, 4 an empty property block.
#[test]
fn spec_layout_puback_short_forms() {
    let ack = |reason, props| {
        Packet::PubAck(Ack {
            pid: 7,
            reason,
            props,
        })
    };
    let none = Properties::default;
    assert_eq!(decode_one(&[0x40, 2, 0, 7], LEVEL_5), Ok(ack(0, none())));
    assert_eq!(
        decode_one(&[0x40, 3, 0, 7, 0x10], LEVEL_5),
        Ok(ack(0x10, none()))
    );
    assert_eq!(
        decode_one(&[0x40, 4, 0, 7, 0x10, 0], LEVEL_5),
        Ok(ack(0x10, none()))
    );
    let with_reason = PropertySet {
        reason_string: Some("n".into()),
        ..PropertySet::default()
    }
    .into();
    assert_eq!(
        decode_one(&[0x40, 8, 0, 7, 0x87, 4, 0x1F, 0, 1, b'n'], LEVEL_5),
        Ok(ack(0x87, with_reason))
    );
    assert_eq!(decode_one(&[0x62, 2, 0, 1], LEVEL_5), Ok(Packet::pubrel(1)));
    assert_eq!(
        decode_one(&[0x70, 3, 0, 1, 0x92], LEVEL_5),
        Ok(Packet::PubComp(Ack {
            reason: 0x92,
            ..Ack::new(1)
        }))
    );
    // And the encoder writes the shortest form.
    for (p, want) in [
        (ack(0, none()), vec![0x40, 2, 0, 7]),
        (ack(0x10, none()), vec![0x40, 3, 0, 7, 0x10]),
    ] {
        let mut out = BytesMut::new();
        encode(&p, &mut out, LEVEL_5);
        assert_eq!(out.to_vec(), want);
    }
}

/// SUBSCRIBE (§3.8) with a subscription identifier and options.
#[test]
fn spec_layout_subscribe_with_options() {
    #[rustfmt::skip]
    let body = [
        0, 10,                   // packet id
        2, 0x0B, 42,             // properties: subscription identifier 42
        0, 3, b'a', b'/', b'+',  // filter
        0x2D,                    //   QoS 1, no local, retain as published, retain handling 2
        0, 1, b'b',              // filter
        0x02,                    //   QoS 2
    ];
    let got = decode_one(&packet(0x82, &body), LEVEL_5).unwrap();
    let want = Subscribe {
        pid: 10,
        filters: vec![
            (
                "a/+".into(),
                SubOptions {
                    qos: 1,
                    no_local: true,
                    retain_as_published: true,
                    retain_handling: 2,
                },
            ),
            ("b".into(), SubOptions::qos(2)),
        ],
        props: PropertySet {
            subscription_identifiers: vec![42],
            ..PropertySet::default()
        }
        .into(),
    };
    assert_eq!(got, Packet::Subscribe(want));
}

/// DISCONNECT (§3.14): no body, a reason code alone, or with properties.
#[test]
fn spec_layout_disconnect_with_reason() {
    assert_eq!(decode_one(&[0xe0, 0], LEVEL_5), Ok(Packet::disconnect()));
    assert_eq!(
        decode_one(&[0xe0, 1, 0x8E], LEVEL_5),
        Ok(Packet::Disconnect(Reasoned {
            reason: reason::SESSION_TAKEN_OVER,
            props: Properties::default(),
        }))
    );
    #[rustfmt::skip]
    let body = [
        0x04,                          // disconnect with will
        12,                            // property length
        0x11, 0, 0, 0, 10,             //   session expiry interval 10
        0x1F, 0, 4, b'b', b'y', b'e', b'!', // reason string
    ];
    assert_eq!(
        decode_one(&packet(0xe0, &body), LEVEL_5),
        Ok(Packet::Disconnect(Reasoned {
            reason: reason::DISCONNECT_WITH_WILL,
            props: PropertySet {
                session_expiry_interval: Some(10),
                reason_string: Some("bye!".into()),
                ..PropertySet::default()
            }
            .into(),
        }))
    );
    // At 3.1.1 a DISCONNECT has no body.
    assert!(decode_one(&[0xe0, 1, 0x8E], LEVEL_3_1_1).is_err());
}

#[test]
fn auth_is_decoded_at_level_5_only() {
    assert_eq!(
        decode_one(&[0xf0, 0], LEVEL_5),
        Ok(Packet::Auth(Reasoned::default()))
    );
    #[rustfmt::skip]
    let body = [0x18, 6, 0x15, 0, 1, b'm', 0x16, 0, 0];
    // Authentication data is binary: an empty one is fine, but a body
    // cut short is not.
    assert!(decode_one(&packet(0xf0, &body), LEVEL_5).is_err());
    #[rustfmt::skip]
    let body = [0x18, 7, 0x15, 0, 1, b'm', 0x16, 0, 0];
    assert!(matches!(
        decode_one(&packet(0xf0, &body), LEVEL_5),
        Ok(Packet::Auth(a)) if a.reason == reason::CONTINUE_AUTHENTICATION
            && a.props.authentication_method.as_deref() == Some("m")
    ));
    assert_eq!(
        decode_one(&[0xf0, 0], LEVEL_3_1_1),
        Err(MqttError::BadHeader(0xf0))
    );
}

fn refused(bytes: &[u8]) -> MqttError {
    decode_one(bytes, LEVEL_5).expect_err("refused")
}

#[test]
fn v5_refusals() {
    use property as id;
    // Duplicate property.
    assert_eq!(
        refused(&packet(0x30, &[0, 1, b't', 6, 0x23, 0, 1, 0x23, 0, 2])),
        MqttError::DuplicateProperty(id::TOPIC_ALIAS)
    );
    // A subscription identifier repeats in PUBLISH, not in SUBSCRIBE.
    assert_eq!(
        refused(&packet(0x82, &[0, 1, 4, 0x0B, 1, 0x0B, 2, 0, 1, b't', 0])),
        MqttError::DuplicateProperty(id::SUBSCRIPTION_IDENTIFIER)
    );
    // Not allowed in that packet.
    assert_eq!(
        refused(&[0x40, 7, 0, 1, 0, 3, 0x23, 0, 1]),
        MqttError::PropertyNotAllowed {
            property: id::TOPIC_ALIAS,
            packet: "PUBACK"
        }
    );
    let connect_with = |props: &[u8]| {
        let mut body = vec![0, 4, b'M', b'Q', b'T', b'T', 5, 2, 0, 0, props.len() as u8];
        body.extend_from_slice(props);
        body.extend_from_slice(&[0, 0]);
        packet(0x10, &body)
    };
    assert_eq!(
        refused(&connect_with(&[0x18, 0, 0, 0, 1])),
        MqttError::PropertyNotAllowed {
            property: id::WILL_DELAY_INTERVAL,
            packet: "CONNECT"
        }
    );
    assert_eq!(
        refused(&connect_with(&[0x7f, 0])),
        MqttError::UnknownProperty(0x7f)
    );
    assert_eq!(
        refused(&connect_with(&[0x21, 0, 0])),
        MqttError::BadPropertyValue {
            property: id::RECEIVE_MAXIMUM,
            why: "0 is not allowed"
        }
    );
    assert_eq!(
        refused(&connect_with(&[0x17, 2])),
        MqttError::BadPropertyValue {
            property: id::REQUEST_PROBLEM_INFORMATION,
            why: "not 0 or 1"
        }
    );
    assert!(matches!(
        refused(&connect_with(&[0x16, 0, 1, 9])),
        MqttError::ProtocolError(_)
    ));
    // Bad variable byte integers: five bytes, more bytes than needed, and
    // a subscription identifier of 0.
    assert_eq!(
        refused(&[0xe0, 6, 0, 0x80, 0x80, 0x80, 0x80, 0x01]),
        MqttError::BadVarInt
    );
    assert_eq!(refused(&[0xe0, 3, 0, 0x80, 0x00]), MqttError::BadVarInt);
    assert_eq!(
        refused(&packet(0x30, &[0, 1, b't', 3, 0x0B, 0x80, 0x00])),
        MqttError::BadVarInt
    );
    assert!(matches!(
        refused(&packet(0x30, &[0, 1, b't', 2, 0x0B, 0])),
        MqttError::BadPropertyValue { property: 0x0B, .. }
    ));
    // The remaining length too, at level 5 only.
    assert_eq!(refused(&[0xc0, 0x80, 0x00]), MqttError::BadLength);
    assert_eq!(
        decode_one(&[0xc0, 0x80, 0x00], LEVEL_3_1_1),
        Ok(Packet::PingReq)
    );
    // Bad UTF-8: invalid bytes, a surrogate, NUL.
    for s in [&[0xffu8][..], &[0xed, 0xa0, 0x80], &[b'a', 0]] {
        let mut body = vec![0, 1, 0x80, 3 + s.len() as u8, 0x1f, 0, s.len() as u8];
        body.extend_from_slice(s);
        assert!(
            matches!(refused(&packet(0x40, &body)), MqttError::Malformed(_)),
            "{s:?}"
        );
    }
    // Reserved bits: subscription options, retain handling 3, CONNECT.
    assert!(matches!(
        refused(&packet(0x82, &[0, 1, 0, 0, 1, b't', 0x40])),
        MqttError::Malformed(_)
    ));
    assert!(matches!(
        refused(&packet(0x82, &[0, 1, 0, 0, 1, b't', 0x30])),
        MqttError::ProtocolError(_)
    ));
    let mut reserved = connect_with(&[]);
    reserved[9] |= 1;
    assert!(matches!(refused(&reserved), MqttError::Malformed(_)));
    // Topic alias 0.
    assert_eq!(
        refused(&packet(0x30, &[0, 1, b't', 3, 0x23, 0, 0])),
        MqttError::TopicAliasZero
    );
    // Reason codes a packet may not carry.
    assert_eq!(
        refused(&[0x40, 3, 0, 1, 0x04]),
        MqttError::BadReasonCode {
            packet: "PUBACK",
            code: 0x04
        }
    );
    assert!(matches!(
        refused(&packet(0x90, &[0, 1, 0, 0x03])),
        MqttError::BadReasonCode { .. }
    ));
    // PUBLISH: an empty topic without an alias, DUP at QoS 0.
    assert!(matches!(
        refused(&packet(0x30, &[0, 0, 0])),
        MqttError::ProtocolError(_)
    ));
    assert!(matches!(
        refused(&packet(0x38, &[0, 1, b't', 0])),
        MqttError::ProtocolError(_)
    ));
    // A property block longer than the packet.
    assert!(matches!(refused(&[0xe0, 2, 0, 5]), MqttError::Malformed(_)));
}

#[test]
fn errors_carry_a_reason_code_and_a_message() {
    let e = MqttError::DuplicateProperty(property::TOPIC_ALIAS);
    assert_eq!(e.reason_code(), reason::PROTOCOL_ERROR);
    assert_eq!(e.to_string(), "property topic alias appears more than once");
    assert_eq!(
        MqttError::TopicAliasZero.reason_code(),
        reason::TOPIC_ALIAS_INVALID
    );
    assert_eq!(
        MqttError::TooLarge(9).reason_code(),
        reason::PACKET_TOO_LARGE
    );
    assert_eq!(MqttError::BadVarInt.reason_code(), reason::MALFORMED_PACKET);
    assert_eq!(
        MqttError::PropertyNotAllowed {
            property: property::TOPIC_ALIAS,
            packet: "PUBACK"
        }
        .to_string(),
        "property topic alias is not allowed in PUBACK"
    );
}

#[test]
fn v3_and_v5_codes_map_both_ways() {
    for code in 0..=5 {
        assert_eq!(connack::to_v3(connack::to_v5(code)), code);
    }
    assert_eq!(connack::to_v3(reason::BANNED), connack::NOT_AUTHORIZED);
    assert_eq!(connack::to_v3(reason::SERVER_BUSY), connack::UNAVAILABLE);
    assert_eq!(suback_to_v3(reason::GRANTED_QOS_2), 2);
    assert_eq!(suback_to_v3(reason::TOPIC_FILTER_INVALID), SUBACK_FAILURE);
}

/// Decoding from bytes that arrived whole takes packets off their front
/// without copying: a PUBLISH's payload is a view of those bytes, and a
/// packet cut at the end is left for the rest to follow.
#[test]
fn decoding_whole_bytes_leaves_payloads_where_they_arrived() {
    let publish = |payload: &'static [u8]| {
        Packet::Publish(PublishPacket {
            dup: false,
            qos: 0,
            retain: false,
            topic: "t".into(),
            pid: None,
            payload: Bytes::from_static(payload),
            props: Default::default(),
        })
    };
    let mut out = BytesMut::new();
    encode(&publish(b"first"), &mut out, LEVEL_3_1_1);
    encode(&publish(b"second"), &mut out, LEVEL_3_1_1);
    let whole_len = out.len();
    encode(&publish(b"cut"), &mut out, LEVEL_3_1_1);
    let arrived = out.freeze().slice(..whole_len + 3);
    let range = arrived.as_ptr_range();
    let mut rest = arrived.clone();
    for want in [&b"first"[..], b"second"] {
        match decode(&mut rest, MAX, LEVEL_3_1_1) {
            Ok(Some(Packet::Publish(p))) => {
                assert_eq!(&p.payload[..], want);
                assert!(range.contains(&p.payload.as_ptr()), "a view, not a copy");
            }
            other => panic!("expected a PUBLISH, got {other:?}"),
        }
    }
    assert_eq!(decode(&mut rest, MAX, LEVEL_3_1_1), Ok(None));
    assert_eq!(rest.len(), 3, "the cut packet's first bytes wait");
}
