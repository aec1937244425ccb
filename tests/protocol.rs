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
                ClientFrame::Publish(Publish {
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
    use proptest::prelude::*;
    use wharf::protocol::mqtt::{Packet, Publish, decode, encode};

    proptest! {
        /// Arbitrary bytes give packets, "need more", or an error: never a
        /// panic, and never a packet longer than the limit.
        #[test]
        fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..600)) {
            let mut buf = BytesMut::from(&bytes[..]);
            for _ in 0..700 {
                match decode(&mut buf, 256) {
                    Ok(Some(_)) => {}
                    Ok(None) | Err(_) => break,
                }
            }
        }

        /// A stream of publishes decodes the same however it is split.
        #[test]
        fn publishes_decode_the_same_split_anywhere(
            msgs in proptest::collection::vec(
                ("[a-z/]{1,12}", proptest::collection::vec(any::<u8>(), 0..200), 0u8..3, any::<bool>()),
                1..6,
            ),
            cuts in proptest::collection::vec(any::<prop::sample::Index>(), 0..4),
        ) {
            let packets: Vec<Packet> = msgs
                .into_iter()
                .enumerate()
                .map(|(i, (topic, payload, qos, retain))| {
                    Packet::Publish(Publish {
                        dup: false,
                        qos,
                        retain,
                        topic,
                        pid: (qos > 0).then_some(i as u16 + 1),
                        payload: Bytes::from(payload),
                    })
                })
                .collect();
            let mut wire = BytesMut::new();
            for p in &packets {
                encode(p, &mut wire);
            }
            let mut points: Vec<usize> = cuts.iter().map(|c| c.index(wire.len() + 1)).collect();
            points.sort_unstable();
            let mut buf = BytesMut::new();
            let mut got = Vec::new();
            let mut at = 0;
            for end in points.into_iter().chain(std::iter::once(wire.len())) {
                buf.extend_from_slice(&wire[at..end]);
                at = end;
                while let Some(p) = decode(&mut buf, 1 << 20).unwrap() {
                    got.push(p);
                }
            }
            prop_assert_eq!(got, packets);
        }
    }
}
