//! Fuzz targets, one per codec, bounded so that every `cargo test` runs
//! them (well under 30 s in debug): native JSON, native bincode, MQTT, and
//! WebSocket framing (actix-http's decoder, as the server uses it; the
//! round trip of our frame writer through it is a property test beside
//! the writer, in src/session/wsframe.rs).
//!
//! Each target replays a corpus, `tests/corpus/<codec>/` (plus, for the
//! native codecs, the golden frames of `proto/fixtures`), together with
//! every truncation and single-bit flip of each seed, then runs proptest
//! mutations of the seeds. A decode must return a value or a typed error,
//! never panic; what decodes must survive a round trip through the
//! encoder; and a native error for a JSON object with a u64 `rid` must
//! carry that `rid`. `PROPTEST_CASES` raises the case counts for a longer
//! run.

use std::fmt::Debug;
use std::path::{Path, PathBuf};

use actix_codec::Decoder;
use actix_http::ws::{Codec, Frame, Item};
use bytes::BytesMut;
use proptest::prelude::*;
use serde_json::Value;
use wharf::protocol::frame::ErrorCode;
use wharf::protocol::mqtt;
use wharf::protocol::{
    DecodeError, Format, decode_client, decode_server, encode_client, encode_server,
};

/// Largest WebSocket message the fuzzed decoder accepts.
const WS_MAX: usize = 64 * 1024;
/// Largest MQTT packet the fuzzed decoder accepts.
const MQTT_MAX: usize = 4096;
/// Leading bytes of a seed whose bits are flipped one at a time.
const FLIP_BYTES: usize = 160;

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// One seed file: `.hex` holds hex digits (whitespace and `#` comment
/// lines ignored), anything else is the bytes themselves.
fn read_seed(path: &Path) -> Vec<u8> {
    let raw = std::fs::read(path).unwrap_or_else(|e| panic!("{path:?}: {e}"));
    let is_hex = |p: &Path| p.to_string_lossy().ends_with(".hex");
    if !is_hex(path) {
        return raw;
    }
    let text = String::from_utf8(raw).unwrap();
    let digits: Vec<u8> = text
        .lines()
        .filter(|l| !l.trim_start().starts_with('#'))
        .flat_map(|l| l.bytes().filter(|b| !b.is_ascii_whitespace()))
        .collect();
    assert!(digits.len() % 2 == 0, "{path:?}: odd number of hex digits");
    digits
        .chunks(2)
        .map(|pair| {
            u8::from_str_radix(std::str::from_utf8(pair).unwrap(), 16)
                .unwrap_or_else(|e| panic!("{path:?}: {e}"))
        })
        .collect()
}

fn files(dir: &Path, keep: impl Fn(&Path) -> bool) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{dir:?}: {e}"))
        .map(|e| e.unwrap().path())
        .filter(|p| keep(p))
        .collect();
    out.sort();
    out
}

/// The seeds of one codec, named by their files.
fn seeds(codec: &str) -> Vec<(String, Vec<u8>)> {
    let mut paths = files(&root().join("tests/corpus").join(codec), |p| {
        !p.ends_with("README.md")
    });
    assert!(paths.len() >= 8, "corpus tests/corpus/{codec} is missing");
    let suffix = match codec {
        "native_json" => Some(".json"),
        "native_bincode" => Some(".bin.hex"),
        _ => None,
    };
    if let Some(suffix) = suffix {
        for kind in ["client", "server"] {
            let dir = root().join("proto/fixtures").join(kind);
            paths.extend(files(&dir, |p| p.to_string_lossy().ends_with(suffix)));
        }
    }
    paths
        .into_iter()
        .map(|p| (p.display().to_string(), read_seed(&p)))
        .collect()
}

/// A seed, its truncations (every length, or about 256 evenly spread for
/// a long seed), and each single-bit flip of its first [`FLIP_BYTES`]
/// bytes.
fn mutants(seed: &[u8]) -> impl Iterator<Item = Vec<u8>> + '_ {
    let step = (seed.len() / 256).max(1);
    let cuts = (0..=seed.len())
        .filter(move |n| n % step == 0 || *n == seed.len())
        .map(|n| seed[..n].to_vec());
    let flips = (0..seed.len().min(FLIP_BYTES) * 8).map(|bit| {
        let mut m = seed.to_vec();
        m[bit / 8] ^= 1 << (bit % 8);
        m
    });
    cuts.chain(flips)
}

/// Edits for proptest to apply to a seed.
#[derive(Debug, Clone)]
enum Edit {
    Flip(prop::sample::Index, u8),
    Set(prop::sample::Index, u8),
    Remove(prop::sample::Index, usize),
    Insert(prop::sample::Index, Vec<u8>),
    Repeat(prop::sample::Index, usize),
    Truncate(prop::sample::Index),
}

fn edit() -> impl Strategy<Value = Edit> {
    // Bytes that mean something to one of the codecs: varint markers,
    // length bytes, JSON punctuation, high bits.
    let special = prop_oneof![
        any::<u8>(),
        prop::sample::select(vec![
            0u8, 1, 0x7f, 0x80, 0xfb, 0xfc, 0xfd, 0xfe, 0xff, b'{', b'}', b'"', b'[', b':', b',',
        ]),
    ];
    prop_oneof![
        (any::<prop::sample::Index>(), 0u8..8).prop_map(|(i, b)| Edit::Flip(i, b)),
        (any::<prop::sample::Index>(), special.clone()).prop_map(|(i, v)| Edit::Set(i, v)),
        (any::<prop::sample::Index>(), 1usize..16).prop_map(|(i, n)| Edit::Remove(i, n)),
        (
            any::<prop::sample::Index>(),
            prop::collection::vec(special, 1..12)
        )
            .prop_map(|(i, v)| Edit::Insert(i, v)),
        (any::<prop::sample::Index>(), 1usize..32).prop_map(|(i, n)| Edit::Repeat(i, n)),
        any::<prop::sample::Index>().prop_map(Edit::Truncate),
    ]
}

fn apply(seed: &[u8], edits: &[Edit]) -> Vec<u8> {
    let mut m = seed.to_vec();
    for e in edits {
        let at = |i: &prop::sample::Index, len: usize| i.index(len + 1);
        match e {
            Edit::Flip(i, bit) if !m.is_empty() => {
                let at = i.index(m.len());
                m[at] ^= 1 << bit;
            }
            Edit::Set(i, v) if !m.is_empty() => {
                let at = i.index(m.len());
                m[at] = *v;
            }
            Edit::Remove(i, n) => {
                let from = at(i, m.len());
                let to = (from + n).min(m.len());
                m.drain(from..to);
            }
            Edit::Insert(i, bytes) => {
                let from = at(i, m.len());
                m.splice(from..from, bytes.iter().copied());
            }
            Edit::Repeat(i, n) => {
                let from = at(i, m.len());
                let to = (from + n).min(m.len());
                let piece = m[from..to].to_vec();
                m.splice(to..to, piece);
            }
            Edit::Truncate(i) => {
                let to = at(i, m.len());
                m.truncate(to);
            }
            _ => {}
        }
    }
    m
}

// ---------------------------------------------------------------- native

/// A refusal is typed and readable, with the code the format allows, and
/// keeps the `rid` of a JSON object.
fn check_refusal(format: Format, data: &[u8], e: &DecodeError) {
    assert!(!e.message.is_empty(), "an empty message for {data:?}");
    assert!(
        !e.message.contains(" { ") && !e.message.contains("Some("),
        "a Rust debug dump: {e}"
    );
    let allowed: &[ErrorCode] = match format {
        Format::Json => &[
            ErrorCode::Malformed,
            ErrorCode::UnknownOp,
            ErrorCode::MissingField,
            ErrorCode::InvalidField,
        ],
        Format::Bincode => &[
            ErrorCode::Malformed,
            ErrorCode::UnknownOp,
            ErrorCode::InvalidField,
        ],
    };
    assert!(allowed.contains(&e.code), "{format:?} {e}");
    if let Ok(Value::Object(map)) = serde_json::from_slice::<Value>(data) {
        if let Some(rid) = map.get("rid").and_then(Value::as_u64) {
            assert_eq!(e.rid, Some(rid), "{format:?} {e}: the rid was lost");
        }
    }
}

/// Whether `data` decoded; a decoded frame must survive a round trip, a
/// refusal must pass [`check_refusal`].
fn check_decoder<T: PartialEq + Debug>(
    format: Format,
    data: &[u8],
    decode: fn(Format, &[u8]) -> Result<T, DecodeError>,
    encode: fn(Format, &T) -> Vec<u8>,
) -> bool {
    match decode(format, data) {
        Ok(frame) => {
            let again = decode(format, &encode(format, &frame));
            assert_eq!(again.as_ref().ok(), Some(&frame), "{format:?} round trip");
            true
        }
        Err(e) => {
            check_refusal(format, data, &e);
            false
        }
    }
}

/// Whether `data` decoded as a client or a server frame.
fn check_native(format: Format, data: &[u8]) -> bool {
    let client = check_decoder(format, data, decode_client, encode_client);
    let server = check_decoder(format, data, decode_server, encode_server);
    client || server
}

/// Runs `check` on every mutant of every seed of `codec`, naming the
/// mutant that panics. `check` says whether the input was accepted; a
/// corpus whose mutants are all accepted or all refused explores nothing,
/// so both must occur.
fn replay(codec: &str, check: impl Fn(&[u8]) -> bool) {
    let (mut accepted, mut refused) = (0usize, 0usize);
    for (name, seed) in seeds(codec) {
        for m in mutants(&seed) {
            let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| check(&m)));
            match outcome {
                Ok(true) => accepted += 1,
                Ok(false) => refused += 1,
                Err(panic) => {
                    eprintln!("{name}: mutant {m:02x?}");
                    std::panic::resume_unwind(panic);
                }
            }
        }
    }
    assert!(
        accepted > 0 && refused > 0,
        "{codec}: {accepted} accepted, {refused} refused"
    );
}

#[test]
fn native_json_corpus_and_its_mutants() {
    replay("native_json", |m| check_native(Format::Json, m));
}

#[test]
fn native_bincode_corpus_and_its_mutants() {
    replay("native_bincode", |m| check_native(Format::Bincode, m));
}

/// Values that a field of the wrong kind might hold.
fn odd_values() -> Vec<Value> {
    serde_json::from_str(
        r#"[null, true, -1, 1.5, 18446744073709551616, "", "x", [], [1, "a"], {}, {"k": [null]}]"#,
    )
    .unwrap()
}

/// Every field of every JSON seed, removed or replaced by a value of each
/// other kind, with a `rid` added: whatever is refused keeps the `rid`.
#[test]
fn native_json_fields_of_every_kind_keep_the_rid() {
    for (name, seed) in seeds("native_json") {
        let Ok(Value::Object(map)) = serde_json::from_slice::<Value>(&seed) else {
            continue;
        };
        for key in map.keys().filter(|k| *k != "rid") {
            let mut variants = vec![None];
            variants.extend(odd_values().into_iter().map(Some));
            for v in variants {
                let mut m = map.clone();
                match v {
                    None => m.remove(key),
                    Some(v) => m.insert(key.clone(), v),
                };
                m.insert("rid".into(), Value::from(4242u64));
                let text = serde_json::to_vec(&m).unwrap();
                let outcome = std::panic::catch_unwind(|| check_native(Format::Json, &text));
                assert!(
                    outcome.is_ok(),
                    "{name}: {}",
                    String::from_utf8_lossy(&text)
                );
            }
        }
    }
}

// ------------------------------------------------------------------ MQTT

/// Packets decoded from `data` (all at once or `step` bytes at a time),
/// and whether the stream ended in an error.
fn mqtt_packets(data: &[u8], step: usize) -> (Vec<mqtt::Packet>, bool) {
    let mut buf = BytesMut::new();
    let mut out = Vec::new();
    for chunk in data.chunks(step.max(1)) {
        buf.extend_from_slice(chunk);
        loop {
            let before = buf.len();
            match mqtt::decode(&mut buf, MQTT_MAX, mqtt::LEVEL_3_1_1) {
                Ok(Some(p)) => {
                    let used = before - buf.len();
                    assert!(used > 0, "a packet from no bytes: {p:?}");
                    assert!(used <= MQTT_MAX + 5, "{used} bytes over the limit");
                    out.push(p);
                }
                Ok(None) => break,
                Err(_) => return (out, true),
            }
        }
    }
    (out, false)
}

/// Decoding never panics; each decoded packet encodes to bytes that decode
/// to it again. Whether a packet decoded.
fn check_mqtt(data: &[u8]) -> bool {
    let (packets, _) = mqtt_packets(data, data.len());
    let any = !packets.is_empty();
    for p in packets {
        let mut wire = BytesMut::new();
        mqtt::encode(&p, &mut wire, mqtt::LEVEL_3_1_1);
        let again = mqtt::decode(&mut wire, 1 << 20, mqtt::LEVEL_3_1_1);
        assert_eq!(again, Ok(Some(p)), "round trip");
        assert!(wire.is_empty());
    }
    any
}

#[test]
fn mqtt_corpus_and_its_mutants() {
    replay("mqtt", check_mqtt);
}

/// The decoder is incremental: bytes arriving one at a time give the same
/// packets, and the same error, as arriving at once.
#[test]
fn mqtt_corpus_decodes_the_same_byte_by_byte() {
    for (name, seed) in seeds("mqtt") {
        let cuts = (0..=seed.len()).map(|n| &seed[..n]);
        for m in cuts {
            assert_eq!(
                mqtt_packets(m, 1),
                mqtt_packets(m, m.len()),
                "{name}: {m:02x?}"
            );
        }
    }
}

// ------------------------------------------------------------- WebSocket

/// Runs actix-http's decoder over `data` as the server does (and as a
/// client would), until it needs more bytes or fails: no panic, and no
/// frame over the limit. Whether the server side read a frame.
fn check_ws(data: &[u8]) -> bool {
    let mut any = false;
    for client_mode in [false, true] {
        let mut codec = Codec::new().max_size(WS_MAX);
        if client_mode {
            codec = codec.client_mode();
        }
        let mut buf = BytesMut::from(data);
        for _ in 0..=data.len() {
            match codec.decode(&mut buf) {
                Ok(Some(frame)) => {
                    let len = match &frame {
                        Frame::Text(b) | Frame::Binary(b) | Frame::Ping(b) | Frame::Pong(b) => {
                            b.len()
                        }
                        Frame::Continuation(
                            Item::FirstText(b)
                            | Item::FirstBinary(b)
                            | Item::Continue(b)
                            | Item::Last(b),
                        ) => b.len(),
                        Frame::Close(_) => 0,
                    };
                    assert!(len <= WS_MAX, "a {len}-byte frame passed max_size");
                    any |= !client_mode;
                }
                Ok(None) | Err(_) => break,
            }
        }
    }
    any
}

#[test]
fn websocket_corpus_and_its_mutants() {
    replay("ws", check_ws);
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 1000, ..ProptestConfig::default() })]

    /// Mutated native seeds, in the format they were written for.
    #[test]
    fn native_mutants(json in any::<bool>(), pick in any::<prop::sample::Index>(), edits in prop::collection::vec(edit(), 1..6)) {
        let (codec, format) = if json { ("native_json", Format::Json) } else { ("native_bincode", Format::Bincode) };
        let all = seeds(codec);
        let (_, seed) = &all[pick.index(all.len())];
        check_native(format, &apply(seed, &edits));
    }

    /// Mutated MQTT streams.
    #[test]
    fn mqtt_mutants(pick in any::<prop::sample::Index>(), edits in prop::collection::vec(edit(), 1..6)) {
        let all = seeds("mqtt");
        let (_, seed) = &all[pick.index(all.len())];
        check_mqtt(&apply(seed, &edits));
    }

    /// Mutated WebSocket frames, and arbitrary bytes.
    #[test]
    fn websocket_mutants(pick in any::<prop::sample::Index>(), edits in prop::collection::vec(edit(), 1..6), noise in prop::collection::vec(any::<u8>(), 0..64)) {
        let all = seeds("ws");
        let (_, seed) = &all[pick.index(all.len())];
        check_ws(&apply(seed, &edits));
        check_ws(&noise);
    }
}
