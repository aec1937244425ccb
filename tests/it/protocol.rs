//! The native codec: golden fixtures from proto/fixtures, round trips, and
//! property tests that feed it arbitrary input (it must never panic).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use proptest::prelude::*;
use wharf::protocol::frame::*;
use wharf::protocol::{Format, decode_client, decode_server, encode_client, encode_server};

fn fixtures(kind: &str) -> Vec<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("proto/fixtures")
        .join(kind);
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "json"))
        .collect();
    files.sort();
    assert!(files.len() >= 6, "fixtures missing in {dir:?}");
    files
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Each JSON fixture decodes; re-encoding it decodes to the same frame; its
/// bincode encoding matches the golden `.bin.hex` next to it and decodes to
/// the same frame. `WHARF_BLESS=1` rewrites the `.bin.hex` files.
fn check_golden<T: PartialEq + std::fmt::Debug>(
    kind: &str,
    decode: fn(Format, &[u8]) -> Result<T, wharf::protocol::DecodeError>,
    encode: fn(Format, &T) -> Vec<u8>,
) {
    let bless = std::env::var_os("WHARF_BLESS").is_some();
    for path in fixtures(kind) {
        let text = std::fs::read(&path).unwrap();
        let frame = decode(Format::Json, &text).unwrap_or_else(|e| panic!("{path:?}: {e}"));
        let again = decode(Format::Json, &encode(Format::Json, &frame)).unwrap();
        assert_eq!(again, frame, "{path:?} JSON round trip");
        let bin = encode(Format::Bincode, &frame);
        let golden = path.with_extension("bin.hex");
        if bless {
            std::fs::write(&golden, hex(&bin) + "\n").unwrap();
        }
        let want = std::fs::read_to_string(&golden).unwrap_or_else(|_| panic!("{golden:?}"));
        assert_eq!(
            hex(&bin),
            want.trim(),
            "{golden:?}: bincode encoding changed"
        );
        assert_eq!(
            decode(Format::Bincode, &bin).unwrap(),
            frame,
            "{path:?} bincode"
        );
    }
}

#[test]
fn client_fixtures_decode_and_match_their_golden_bincode() {
    check_golden("client", decode_client, encode_client);
}

#[test]
fn server_fixtures_decode_and_match_their_golden_bincode() {
    check_golden("server", decode_server, encode_server);
}

#[test]
fn base64_fixture_carries_binary_bytes() {
    let text = std::fs::read(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("proto/fixtures/client/publish_base64.json"),
    )
    .unwrap();
    match decode_client(Format::Json, &text).unwrap() {
        ClientFrame::Publish(p) => assert_eq!(p.payload, [0, 1, 2, 255]),
        other => panic!("{other:?}"),
    }
}

fn headers() -> impl Strategy<Value = Headers> {
    proptest::collection::btree_map(".{0,8}", ".{0,8}", 0..3)
}

fn client_frame() -> impl Strategy<Value = ClientFrame> {
    let opt_rid = proptest::option::of(any::<u64>());
    prop_oneof![
        (
            proptest::option::of(".{0,12}"),
            proptest::option::of(".{0,12}"),
            any::<u32>()
        )
            .prop_map(|(client_id, token, version)| ClientFrame::Hello(Hello {
                client_id,
                token,
                version
            })),
        (".{0,12}", ".{0,12}", opt_rid.clone()).prop_map(|(id, filter, rid)| {
            ClientFrame::Subscribe(Subscribe {
                id,
                filter,
                rid,
                durable: rid.is_some_and(|r| r % 2 == 0),
                prefetch: rid.map(|r| (r % 100) as u32),
                recover: rid
                    .filter(|r| r % 3 == 0)
                    .map(|r| wharf::protocol::frame::Recover {
                        epoch: format!("{r:x}"),
                        offset: r,
                    }),
            })
        }),
        (".{0,12}", opt_rid.clone())
            .prop_map(|(id, rid)| ClientFrame::Unsubscribe(Unsubscribe { id, rid })),
        (
            ".{0,12}",
            proptest::collection::vec(any::<u8>(), 0..64),
            headers(),
            any::<bool>(),
            any::<bool>(),
            opt_rid.clone()
        )
            .prop_map(|(topic, payload, headers, retain, high, rid)| {
                ClientFrame::Publish(PublishFrame {
                    topic,
                    payload,
                    headers,
                    retain,
                    priority: if high {
                        Priority::High
                    } else {
                        Priority::Normal
                    },
                    rid,
                })
            }),
        opt_rid.prop_map(|rid| ClientFrame::Ping(Ping { rid })),
        any::<bool>().prop_map(|drain| ClientFrame::Close(Close { drain })),
    ]
}

/// Arbitrary JSON objects shaped like frames: a known or unknown `op` and a
/// handful of fields with arbitrary values.
fn json_object() -> impl Strategy<Value = String> {
    let leaf = prop_oneof![
        Just(serde_json::Value::Null),
        any::<bool>().prop_map(serde_json::Value::from),
        any::<i64>().prop_map(serde_json::Value::from),
        any::<f64>().prop_map(|f| serde_json::json!(f)),
        ".{0,10}".prop_map(serde_json::Value::from),
    ];
    let value = leaf.prop_recursive(3, 16, 4, |inner| {
        prop_oneof![
            proptest::collection::vec(inner.clone(), 0..4).prop_map(serde_json::Value::from),
            proptest::collection::btree_map(".{0,6}", inner, 0..4)
                .prop_map(|m| serde_json::Value::Object(m.into_iter().collect())),
        ]
    });
    let op = prop_oneof![
        Just("hello"),
        Just("subscribe"),
        Just("unsubscribe"),
        Just("publish"),
        Just("ping"),
        Just("close"),
        Just("nope"),
    ];
    let field = prop_oneof![
        Just("topic"),
        Just("payload"),
        Just("encoding"),
        Just("id"),
        Just("filter"),
        Just("rid"),
        Just("headers"),
        Just("retain"),
        Just("priority"),
        Just("drain"),
        Just("client_id"),
        Just("version"),
    ];
    (op, proptest::collection::vec((field, value), 0..6)).prop_map(|(op, fields)| {
        let mut map: BTreeMap<String, serde_json::Value> = BTreeMap::new();
        map.insert("op".into(), op.into());
        for (k, v) in fields {
            map.insert(k.into(), v);
        }
        serde_json::to_string(&map).unwrap()
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2000, ..ProptestConfig::default() })]

    #[test]
    fn arbitrary_bytes_never_panic(data in proptest::collection::vec(any::<u8>(), 0..256)) {
        let _ = decode_client(Format::Json, &data);
        let _ = decode_client(Format::Bincode, &data);
        let _ = decode_server(Format::Json, &data);
        let _ = decode_server(Format::Bincode, &data);
    }

    #[test]
    fn arbitrary_json_objects_never_panic(text in json_object()) {
        let _ = decode_client(Format::Json, text.as_bytes());
    }

    #[test]
    fn client_frames_round_trip_in_both_formats(frame in client_frame()) {
        for format in [Format::Json, Format::Bincode] {
            let bytes = encode_client(format, &frame);
            prop_assert_eq!(decode_client(format, &bytes).unwrap(), frame.clone());
        }
    }
}

mod mqtt_codec {
    use bytes::{Bytes, BytesMut};
    use proptest::collection::vec;
    use proptest::option::of;
    use proptest::prelude::*;
    use proptest::sample::select;
    use wharf::protocol::mqtt::{
        Ack, ConnAck, Connect, LEVEL_3_1, LEVEL_3_1_1, LEVEL_5, Packet, Properties, PropertySet,
        PublishPacket, Reasoned, SubAck, SubOptions, Subscribe, UnsubAck, Unsubscribe, Will,
        decode, encode,
    };

    /// A UTF-8 string without NUL, with a character of two bytes.
    fn text() -> impl Strategy<Value = String> {
        "[a-z0-9/é +#$]{0,8}"
    }

    fn binary() -> impl Strategy<Value = Bytes> {
        vec(any::<u8>(), 0..8).prop_map(Bytes::from)
    }

    /// Properties with any field set, to any value the spec allows.
    fn properties() -> impl Strategy<Value = Properties> {
        let a = (
            of(any::<bool>()),
            of(any::<u32>()),
            of(text()),
            of(text()),
            of(binary()),
            vec(1u32..=268_435_455, 0..3),
            of(any::<u32>()),
            of(text()),
            of(any::<u16>()),
        );
        let b = (
            of(text()),
            of(binary()),
            of(any::<bool>()),
            of(any::<u32>()),
            of(any::<bool>()),
            of(text()),
            of(text()),
            of(text()),
            of(1u16..),
            of(any::<u16>()),
            of(1u16..),
            of(0u8..2),
        );
        let c = (
            of(any::<bool>()),
            vec((text(), text()), 0..3),
            of(1u32..),
            of(any::<bool>()),
            of(any::<bool>()),
            of(any::<bool>()),
        );
        (a, b, c).prop_map(|(a, b, c)| {
            PropertySet {
                payload_format_indicator: a.0,
                message_expiry_interval: a.1,
                content_type: a.2,
                response_topic: a.3,
                correlation_data: a.4,
                subscription_identifiers: a.5,
                session_expiry_interval: a.6,
                assigned_client_identifier: a.7,
                server_keep_alive: a.8,
                authentication_method: b.0,
                authentication_data: b.1,
                request_problem_information: b.2,
                will_delay_interval: b.3,
                request_response_information: b.4,
                response_information: b.5,
                server_reference: b.6,
                reason_string: b.7,
                receive_maximum: b.8,
                topic_alias_maximum: b.9,
                topic_alias: b.10,
                maximum_qos: b.11,
                retain_available: c.0,
                user_properties: c.1,
                maximum_packet_size: c.2,
                wildcard_subscription_available: c.3,
                subscription_identifier_available: c.4,
                shared_subscription_available: c.5,
            }
            .into()
        })
    }

    /// Keeps the properties MQTT 5 allows in `packet` (its table 2-4,
    /// written out again here rather than taken from the codec).
    fn only(p: Properties, packet: &str) -> Properties {
        let p: PropertySet = (*p).clone();
        let d = PropertySet {
            user_properties: p.user_properties.clone(),
            ..PropertySet::default()
        };
        let mut out = match packet {
            "CONNECT" => PropertySet {
                session_expiry_interval: p.session_expiry_interval,
                authentication_method: p.authentication_method,
                authentication_data: p.authentication_data,
                request_problem_information: p.request_problem_information,
                request_response_information: p.request_response_information,
                receive_maximum: p.receive_maximum,
                topic_alias_maximum: p.topic_alias_maximum,
                maximum_packet_size: p.maximum_packet_size,
                ..d
            },
            "CONNACK" => PropertySet {
                session_expiry_interval: p.session_expiry_interval,
                assigned_client_identifier: p.assigned_client_identifier,
                server_keep_alive: p.server_keep_alive,
                authentication_method: p.authentication_method,
                authentication_data: p.authentication_data,
                response_information: p.response_information,
                server_reference: p.server_reference,
                reason_string: p.reason_string,
                receive_maximum: p.receive_maximum,
                topic_alias_maximum: p.topic_alias_maximum,
                maximum_qos: p.maximum_qos,
                retain_available: p.retain_available,
                maximum_packet_size: p.maximum_packet_size,
                wildcard_subscription_available: p.wildcard_subscription_available,
                subscription_identifier_available: p.subscription_identifier_available,
                shared_subscription_available: p.shared_subscription_available,
                ..d
            },
            "PUBLISH" | "will" => PropertySet {
                payload_format_indicator: p.payload_format_indicator,
                message_expiry_interval: p.message_expiry_interval,
                content_type: p.content_type,
                response_topic: p.response_topic,
                correlation_data: p.correlation_data,
                subscription_identifiers: if packet == "PUBLISH" {
                    p.subscription_identifiers
                } else {
                    Vec::new()
                },
                topic_alias: p.topic_alias.filter(|_| packet == "PUBLISH"),
                will_delay_interval: p.will_delay_interval.filter(|_| packet == "will"),
                ..d
            },
            "SUBSCRIBE" => PropertySet {
                subscription_identifiers: p.subscription_identifiers.into_iter().take(1).collect(),
                ..d
            },
            "UNSUBSCRIBE" => d,
            "DISCONNECT" => PropertySet {
                session_expiry_interval: p.session_expiry_interval,
                server_reference: p.server_reference,
                reason_string: p.reason_string,
                ..d
            },
            "AUTH" => PropertySet {
                authentication_method: p.authentication_method,
                authentication_data: p.authentication_data,
                reason_string: p.reason_string,
                ..d
            },
            // Acks, SUBACK, UNSUBACK.
            _ => PropertySet {
                reason_string: p.reason_string,
                ..d
            },
        };
        if out.authentication_method.is_none() {
            out.authentication_data = None;
        }
        out.into()
    }

    fn props(packet: &'static str) -> impl Strategy<Value = Properties> {
        properties().prop_map(move |p| only(p, packet))
    }

    const CONNACK: &[u8] = &[
        0x00, 0x80, 0x81, 0x82, 0x83, 0x84, 0x85, 0x86, 0x87, 0x88, 0x89, 0x8A, 0x8C, 0x90, 0x95,
        0x97, 0x99, 0x9A, 0x9B, 0x9C, 0x9D, 0x9F,
    ];
    const PUBACK: &[u8] = &[0x00, 0x10, 0x80, 0x83, 0x87, 0x90, 0x91, 0x97, 0x99];
    const PUBREL: &[u8] = &[0x00, 0x92];
    const SUBACK: &[u8] = &[
        0x00, 0x01, 0x02, 0x80, 0x83, 0x87, 0x8F, 0x91, 0x97, 0x9E, 0xA1, 0xA2,
    ];
    const UNSUBACK: &[u8] = &[0x00, 0x11, 0x80, 0x83, 0x87, 0x8F, 0x91];
    const DISCONNECT: &[u8] = &[
        0x00, 0x04, 0x80, 0x81, 0x82, 0x83, 0x87, 0x89, 0x8B, 0x8D, 0x8E, 0x8F, 0x90, 0x93, 0x94,
        0x95, 0x96, 0x97, 0x98, 0x99, 0x9A, 0x9B, 0x9C, 0x9D, 0x9E, 0x9F, 0xA0, 0xA1, 0xA2,
    ];

    fn ack(codes: &'static [u8], packet: &'static str) -> impl Strategy<Value = Ack> {
        (any::<u16>(), select(codes), props(packet)).prop_map(|(pid, reason, props)| Ack {
            pid,
            reason,
            props,
        })
    }

    fn options() -> impl Strategy<Value = SubOptions> {
        (0u8..3, any::<bool>(), any::<bool>(), 0u8..3).prop_map(|(qos, nl, rap, rh)| SubOptions {
            qos,
            no_local: nl,
            retain_as_published: rap,
            retain_handling: rh,
        })
    }

    /// Any MQTT 5 packet the spec allows.
    fn v5_packet() -> impl Strategy<Value = Packet> {
        let will = (text(), binary(), 0u8..3, any::<bool>(), props("will")).prop_map(
            |(topic, payload, qos, retain, props)| Will {
                topic,
                payload,
                qos,
                retain,
                props,
            },
        );
        let connect = (
            text(),
            any::<bool>(),
            any::<u16>(),
            of(will),
            of(text()),
            of(binary()),
            props("CONNECT"),
        )
            .prop_map(
                |(client_id, clean_session, keep_alive, will, username, password, props)| {
                    Packet::Connect(Box::new(Connect {
                        level: LEVEL_5,
                        client_id,
                        clean_session,
                        keep_alive,
                        will,
                        username,
                        password,
                        props,
                    }))
                },
            );
        let connack =
            (any::<bool>(), select(CONNACK), props("CONNACK")).prop_map(|(sp, code, props)| {
                Packet::ConnAck(ConnAck {
                    session_present: sp && code == 0,
                    code,
                    props,
                })
            });
        let publish = (
            any::<bool>(),
            0u8..3,
            any::<bool>(),
            "[a-z/]{0,8}",
            1u16..,
            vec(any::<u8>(), 0..64),
            props("PUBLISH"),
        )
            .prop_map(|(dup, qos, retain, topic, pid, payload, mut props)| {
                if topic.is_empty() && props.topic_alias.is_none() {
                    props.topic_alias = Some(1);
                }
                Packet::Publish(PublishPacket {
                    dup: dup && qos > 0,
                    qos,
                    retain,
                    topic,
                    pid: (qos > 0).then_some(pid),
                    payload: Bytes::from(payload),
                    props,
                })
            });
        let subscribe = (1u16.., vec((text(), options()), 1..4), props("SUBSCRIBE")).prop_map(
            |(pid, filters, props)| {
                Packet::Subscribe(Subscribe {
                    pid,
                    filters,
                    props,
                })
            },
        );
        let suback = (any::<u16>(), vec(select(SUBACK), 0..4), props("SUBACK"))
            .prop_map(|(pid, codes, props)| Packet::SubAck(SubAck { pid, codes, props }));
        let unsubscribe =
            (1u16.., vec(text(), 1..4), props("UNSUBSCRIBE")).prop_map(|(pid, filters, props)| {
                Packet::Unsubscribe(Unsubscribe {
                    pid,
                    filters,
                    props,
                })
            });
        let unsuback = (any::<u16>(), vec(select(UNSUBACK), 0..4), props("UNSUBACK"))
            .prop_map(|(pid, codes, props)| Packet::UnsubAck(UnsubAck { pid, codes, props }));
        let disconnect = (select(DISCONNECT), props("DISCONNECT"))
            .prop_map(|(reason, props)| Packet::Disconnect(Reasoned { reason, props }));
        let auth = (select(&[0x00u8, 0x18, 0x19][..]), props("AUTH"))
            .prop_map(|(reason, props)| Packet::Auth(Reasoned { reason, props }));
        prop_oneof![
            connect,
            connack,
            publish,
            ack(PUBACK, "PUBACK").prop_map(Packet::PubAck),
            ack(PUBACK, "PUBREC").prop_map(Packet::PubRec),
            ack(PUBREL, "PUBREL").prop_map(Packet::PubRel),
            ack(PUBREL, "PUBCOMP").prop_map(Packet::PubComp),
            subscribe,
            suback,
            unsubscribe,
            unsuback,
            Just(Packet::PingReq),
            Just(Packet::PingResp),
            disconnect,
            auth,
        ]
    }

    /// Decodes `wire` arriving in pieces cut at `cuts`.
    fn decode_in_pieces(wire: &[u8], cuts: &[prop::sample::Index], level: u8) -> Vec<Packet> {
        let mut points: Vec<usize> = cuts.iter().map(|c| c.index(wire.len() + 1)).collect();
        points.sort_unstable();
        let mut buf = BytesMut::new();
        let mut got = Vec::new();
        let mut at = 0;
        for end in points.into_iter().chain(std::iter::once(wire.len())) {
            buf.extend_from_slice(&wire[at..end]);
            at = end;
            while let Some(p) = decode(&mut buf, 1 << 20, level).unwrap() {
                got.push(p);
            }
        }
        assert!(buf.is_empty());
        got
    }

    proptest! {
        /// Arbitrary bytes give packets, "need more", or an error: never a
        /// panic, and never a packet longer than the limit, at every level.
        #[test]
        fn arbitrary_bytes_never_panic(bytes in vec(any::<u8>(), 0..600)) {
            for level in [LEVEL_3_1, LEVEL_3_1_1, LEVEL_5] {
                let mut buf = BytesMut::from(&bytes[..]);
                for _ in 0..700 {
                    let before = buf.len();
                    match decode(&mut buf, 256, level) {
                        Ok(Some(_)) => prop_assert!(before - buf.len() <= 256 + 5),
                        Ok(None) | Err(_) => break,
                    }
                }
            }
        }

        /// A stream of publishes decodes the same however it is split.
        #[test]
        fn publishes_decode_the_same_split_anywhere(
            msgs in vec(
                ("[a-z/]{1,12}", vec(any::<u8>(), 0..200), 0u8..3, any::<bool>()),
                1..6,
            ),
            cuts in vec(any::<prop::sample::Index>(), 0..4),
        ) {
            let packets: Vec<Packet> = msgs
                .into_iter()
                .enumerate()
                .map(|(i, (topic, payload, qos, retain))| {
                    Packet::Publish(PublishPacket {
                        dup: false,
                        qos,
                        retain,
                        topic,
                        pid: (qos > 0).then_some(i as u16 + 1),
                        payload: Bytes::from(payload),
                        props: Properties::default(),
                    })
                })
                .collect();
            for level in [LEVEL_3_1_1, LEVEL_5] {
                let mut wire = BytesMut::new();
                for p in &packets {
                    encode(p, &mut wire, level);
                }
                prop_assert_eq!(&decode_in_pieces(&wire, &cuts, level), &packets);
            }
        }

        /// Any MQTT 5 packet, with any properties its packet may carry,
        /// decodes to itself at level 5, however the bytes are split.
        #[test]
        fn v5_packets_round_trip_split_anywhere(
            packets in vec(v5_packet(), 1..5),
            cuts in vec(any::<prop::sample::Index>(), 0..4),
        ) {
            let mut wire = BytesMut::new();
            for p in &packets {
                encode(p, &mut wire, LEVEL_5);
            }
            prop_assert_eq!(&decode_in_pieces(&wire, &cuts, LEVEL_5), &packets);
        }

        /// An MQTT 5 packet with one byte changed decodes without a panic;
        /// whatever it decodes to encodes to bytes that decode to it again.
        #[test]
        fn mutated_v5_packets_never_panic(
            p in v5_packet(),
            at in any::<prop::sample::Index>(),
            byte in any::<u8>(),
        ) {
            let mut wire = BytesMut::new();
            encode(&p, &mut wire, LEVEL_5);
            let i = at.index(wire.len());
            wire[i] = byte;
            let mut buf = wire.clone();
            if let Ok(Some(q)) = decode(&mut buf, 1 << 20, LEVEL_5) {
                let mut again = BytesMut::new();
                encode(&q, &mut again, LEVEL_5);
                prop_assert_eq!(decode(&mut again, 1 << 20, LEVEL_5), Ok(Some(q)));
                prop_assert!(again.is_empty());
            }
        }
    }
}
