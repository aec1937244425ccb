//! Decode failures turned into errors a client can act on: the request id
//! recovered when the frame carried one, the operation and the field named,
//! and bincode's failures told as sentences. Pure, and only on the error
//! path: a frame that decodes never pays for any of it.
//!
//! JSON: `ClientFrame` is an internally tagged enum, so serde's own error
//! says neither which field was wrong nor (for a missing field) which
//! operation it belonged to. On failure the text is parsed again as a
//! [`serde_json::Value`], its `rid` read, its `op` looked up in
//! [`Tagged::OPS`], and the variant's struct deserialized alone with
//! `serde_path_to_error`, which names the field.
//!
//! bincode: the leading varint (the variant tag) is read here to name the
//! operation, and each `bincode::error::DecodeError` becomes a sentence.

use serde::de::DeserializeOwned;
use serde_json::Value;

use super::frame::{self, ClientFrame, ErrorCode, ServerFrame};
use super::jobs;

/// Largest frame the bincode decoder will allocate for; `max_frame` may not
/// exceed it.
pub const MAX_DECODE_BYTES: usize = 16 << 20;

/// A frame that could not be decoded, with the error code to answer.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}: {message}", code.as_str())]
pub struct DecodeError {
    /// The `error` frame's code.
    pub code: ErrorCode,
    /// Detail for people: the operation and the field when known.
    pub message: String,
    /// The request id of the refused frame, when it carried one that could
    /// be read (JSON objects; bincode frames that decoded but had trailing
    /// bytes).
    pub rid: Option<u64>,
}

/// What `serde_path_to_error` reports: serde's error and the field's path.
pub(crate) type PathError = serde_path_to_error::Error<serde_json::Error>;

/// A frame enum whose variants are named by `op` in JSON and tagged by
/// their declaration index in bincode.
pub(crate) trait Tagged: Sized {
    /// The enum's name as bincode's derive reports it.
    const NAME: &'static str;
    /// Operation names in declaration order: `OPS[tag]` is the variant
    /// bincode tags `tag`.
    const OPS: &'static [&'static str];
    /// Deserializes the struct of the variant named `op` from `fields` (the
    /// object without its `op`), keeping the path of a failure; `None` when
    /// no variant is named `op`.
    fn check_variant(op: &str, fields: Value) -> Option<Result<(), PathError>>;
    /// The request id the frame carries, if any.
    fn rid(&self) -> Option<u64>;
}

fn check<T: DeserializeOwned>(fields: Value) -> Option<Result<(), PathError>> {
    Some(serde_path_to_error::deserialize::<_, T>(fields).map(drop))
}

impl Tagged for ClientFrame {
    const NAME: &'static str = "ClientFrame";
    const OPS: &'static [&'static str] = &[
        "hello",
        "subscribe",
        "unsubscribe",
        "publish",
        "ping",
        "close",
        "enqueue",
        "consume",
        "ack",
        "nack",
        "reject",
        "touch",
        "job_enqueue",
        "job_status",
        "worker_register",
        "worker_ping",
        "job_dequeue",
        "job_outcome",
        "begin",
        "commit",
        "rollback",
        "refresh",
        "delete_queue",
        "presence",
    ];

    fn check_variant(op: &str, fields: Value) -> Option<Result<(), PathError>> {
        match op {
            "hello" => check::<frame::Hello>(fields),
            "subscribe" => check::<frame::Subscribe>(fields),
            "unsubscribe" => check::<frame::Unsubscribe>(fields),
            "publish" => check::<frame::PublishFrame>(fields),
            "ping" => check::<frame::Ping>(fields),
            "close" => check::<frame::Close>(fields),
            "enqueue" => check::<frame::EnqueueFrame>(fields),
            "consume" => check::<frame::Consume>(fields),
            "ack" | "reject" => check::<frame::Settle>(fields),
            "nack" => check::<frame::Nack>(fields),
            "touch" => check::<frame::Touch>(fields),
            "job_enqueue" => check::<jobs::JobEnqueue>(fields),
            "job_status" => check::<jobs::JobStatusQuery>(fields),
            "worker_register" => check::<jobs::WorkerRegister>(fields),
            "worker_ping" => check::<jobs::WorkerPing>(fields),
            "job_dequeue" => check::<jobs::JobDequeue>(fields),
            "job_outcome" => check::<jobs::JobOutcome>(fields),
            "begin" | "commit" | "rollback" => check::<frame::Txn>(fields),
            "refresh" => check::<frame::Refresh>(fields),
            "delete_queue" => check::<frame::DeleteQueue>(fields),
            "presence" => check::<frame::PresenceQuery>(fields),
            _ => None,
        }
    }

    fn rid(&self) -> Option<u64> {
        ClientFrame::rid(self)
    }
}

impl Tagged for ServerFrame {
    const NAME: &'static str = "ServerFrame";
    const OPS: &'static [&'static str] = &[
        "welcome",
        "message",
        "receipt",
        "error",
        "pong",
        "dropped",
        "delivery",
        "enqueued",
        "job_reply",
        "draining",
        "ended",
        "subscribed",
        "presence",
    ];

    fn check_variant(op: &str, fields: Value) -> Option<Result<(), PathError>> {
        match op {
            "welcome" => check::<frame::Welcome>(fields),
            "message" => check::<frame::Message>(fields),
            "receipt" => check::<frame::Receipt>(fields),
            "error" => check::<frame::ErrorFrame>(fields),
            "pong" => check::<frame::Ping>(fields),
            "dropped" => check::<frame::Dropped>(fields),
            "delivery" => check::<frame::QueueDelivery>(fields),
            "enqueued" => check::<frame::Enqueued>(fields),
            "job_reply" => check::<jobs::JobReply>(fields),
            "draining" => check::<frame::Draining>(fields),
            "ended" => check::<frame::Ended>(fields),
            "subscribed" => check::<frame::Subscribed>(fields),
            "presence" => check::<frame::PresenceReply>(fields),
            _ => None,
        }
    }

    fn rid(&self) -> Option<u64> {
        ServerFrame::rid(self)
    }
}

fn error(code: ErrorCode, message: String, rid: Option<u64>) -> DecodeError {
    DecodeError { code, message, rid }
}

/// The `rid` of a JSON object, when it is a u64.
fn rid_of(map: &serde_json::Map<String, Value>) -> Option<u64> {
    map.get("rid").and_then(Value::as_u64)
}

/// The error for a JSON frame `data` that serde refused with `e`.
pub(crate) fn json_error<T: Tagged>(data: &[u8], e: serde_json::Error) -> DecodeError {
    let Ok(Value::Object(mut map)) = serde_json::from_slice::<Value>(data) else {
        // Not JSON at all (the caller has checked it opens an object).
        return error(ErrorCode::Malformed, e.to_string(), None);
    };
    let rid = rid_of(&map);
    let op = match map.remove("op") {
        Some(Value::String(op)) => op,
        None => {
            return error(
                ErrorCode::MissingField,
                "missing field `op` (the operation)".into(),
                rid,
            );
        }
        Some(other) => {
            return error(
                ErrorCode::InvalidField,
                format!(
                    "op: {}, expected a string naming an operation",
                    kind(&other)
                ),
                rid,
            );
        }
    };
    match T::check_variant(&op, Value::Object(map)) {
        None => error(
            ErrorCode::UnknownOp,
            format!("unknown op `{op}`, expected one of {}", ops_list(T::OPS)),
            rid,
        ),
        Some(Err(pe)) => {
            let path = pe.path().to_string();
            let at_root = pe.path().iter().next().is_none();
            let inner = pe.into_inner().to_string();
            let code = if inner.starts_with("missing field") {
                ErrorCode::MissingField
            } else {
                ErrorCode::InvalidField
            };
            // An unknown field's path is the field itself: name the op.
            let message = if at_root || inner.starts_with("unknown field") {
                format!("{op}: {inner}")
            } else {
                format!("{path}: {inner}")
            };
            error(code, message, rid)
        }
        // The object decodes as a value but not from the text: a
        // duplicate field is the one known case.
        Some(Ok(())) => error(ErrorCode::InvalidField, format!("{op}: {e}"), rid),
    }
}

/// A JSON value's kind, as serde words it ("invalid type: integer `5`").
fn kind(v: &Value) -> String {
    match v {
        Value::Null => "invalid type: null".into(),
        Value::Bool(b) => format!("invalid type: boolean `{b}`"),
        Value::Number(n) => format!("invalid type: number `{n}`"),
        Value::String(_) => "invalid type: string".into(),
        Value::Array(_) => "invalid type: array".into(),
        Value::Object(_) => "invalid type: object".into(),
    }
}

fn ops_list(ops: &[&str]) -> String {
    ops.iter()
        .map(|op| format!("`{op}`"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The variant tag a bincode frame opens with (bincode's varint `u32`),
/// if it is complete and fits.
pub(crate) fn leading_tag(data: &[u8]) -> Option<u32> {
    match *data.first()? {
        b @ 0..=250 => Some(u32::from(b)),
        251 => Some(u32::from(u16::from_le_bytes(
            data.get(1..3)?.try_into().ok()?,
        ))),
        252 => Some(u32::from_le_bytes(data.get(1..5)?.try_into().ok()?)),
        _ => None,
    }
}

/// The error for a bincode frame `data` that bincode refused with `e`.
pub(crate) fn bincode_error<T: Tagged>(data: &[u8], e: bincode::error::DecodeError) -> DecodeError {
    use bincode::error::DecodeError as E;
    if data.iter().find(|b| !b.is_ascii_whitespace()) == Some(&b'{') {
        if let Ok(Value::Object(map)) = serde_json::from_slice::<Value>(data) {
            return error(
                ErrorCode::Malformed,
                "this binary frame holds JSON; send JSON in text frames \
                 (binary frames are bincode)"
                    .into(),
                rid_of(&map),
            );
        }
    }
    if data.is_empty() {
        return error(
            ErrorCode::Malformed,
            "the binary frame is empty: it names no operation".into(),
            None,
        );
    }
    let op = leading_tag(data).and_then(|tag| T::OPS.get(tag as usize));
    let (code, sentence) = match e {
        E::UnexpectedVariant {
            type_name, found, ..
        } if type_name == T::NAME => {
            return error(
                ErrorCode::UnknownOp,
                format!(
                    "no operation has tag {found} (tags run from 0 to {})",
                    T::OPS.len() - 1
                ),
                None,
            );
        }
        E::UnexpectedVariant {
            type_name, found, ..
        } => (
            ErrorCode::InvalidField,
            format!("a {type_name} field has tag {found}, which names no value"),
        ),
        E::Utf8 { inner } => (
            ErrorCode::InvalidField,
            format!("a string is not valid UTF-8 ({inner})"),
        ),
        E::InvalidCharEncoding(_) => (
            ErrorCode::InvalidField,
            "a character is not valid UTF-8".into(),
        ),
        E::InvalidBooleanValue(b) => (
            ErrorCode::InvalidField,
            format!("a boolean byte is {b} (it must be 0 or 1)"),
        ),
        E::NonZeroTypeIsZero { .. } => (
            ErrorCode::InvalidField,
            "an integer that may not be zero is zero".into(),
        ),
        E::UnexpectedEnd { additional } => (
            ErrorCode::Malformed,
            format!("the frame ends early: at least {additional} more bytes expected"),
        ),
        E::Io { additional, .. } => (
            ErrorCode::Malformed,
            format!("the frame ends early: at least {additional} more bytes expected"),
        ),
        E::LimitExceeded => (
            ErrorCode::Malformed,
            format!("the frame announces more than {MAX_DECODE_BYTES} bytes"),
        ),
        E::InvalidIntegerType { expected, found } => (
            ErrorCode::Malformed,
            format!(
                "an integer is encoded as {} where {} is expected",
                format!("{found:?}").to_lowercase(),
                format!("{expected:?}").to_lowercase()
            ),
        ),
        E::OutsideUsizeRange(n) => (
            ErrorCode::Malformed,
            format!("a length of {n} is out of range"),
        ),
        E::ArrayLengthMismatch { required, found } => (
            ErrorCode::Malformed,
            format!("an array holds {found} items where {required} are expected"),
        ),
        E::Other(text) => (ErrorCode::Malformed, text.into()),
        E::OtherString(text) => (ErrorCode::Malformed, text),
        // Kinds of value no frame holds (durations, times, C strings),
        // and variants bincode may add.
        _ => (
            ErrorCode::Malformed,
            "the frame is not valid bincode for any operation".into(),
        ),
    };
    let message = match op {
        Some(op) => format!("{op}: {sentence}"),
        None => sentence,
    };
    error(code, message, None)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::codec::{Format, decode_client, decode_server, encode_client};
    use crate::protocol::frame::{Ping, PublishFrame};

    /// The variant names serde knows, read from its "unknown variant"
    /// message (declaration order).
    fn serde_variants<T: DeserializeOwned + std::fmt::Debug>() -> Vec<String> {
        let err = serde_json::from_str::<T>(r#"{"op":"\u0000"}"#).unwrap_err();
        let text = err.to_string();
        let list = text
            .split("expected one of ")
            .nth(1)
            .unwrap_or_else(|| panic!("{text}"));
        list.split(", ")
            .map(|s| s.split('`').nth(1).unwrap().to_string())
            .collect()
    }

    fn every_op_is_handled<T: Tagged + DeserializeOwned + std::fmt::Debug>() {
        let variants = serde_variants::<T>();
        assert_eq!(variants, T::OPS, "{}::OPS is out of date", T::NAME);
        for op in T::OPS {
            assert!(
                T::check_variant(op, Value::Object(Default::default())).is_some(),
                "{op} is not handled by check_variant"
            );
        }
        assert!(T::check_variant("nope", Value::Null).is_none());
    }

    #[test]
    fn every_client_op_is_listed_and_handled() {
        every_op_is_handled::<ClientFrame>();
    }

    #[test]
    fn every_server_op_is_listed_and_handled() {
        every_op_is_handled::<ServerFrame>();
    }

    /// Every fixture names its op in JSON; its bincode encoding must open
    /// with the tag `OPS` gives that name.
    fn tags_agree_with_the_encoder<T>(
        kind: &str,
        decode: fn(Format, &[u8]) -> T,
        encode: fn(&T) -> Vec<u8>,
    ) where
        T: Tagged,
    {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("proto/fixtures")
            .join(kind);
        let mut seen = std::collections::BTreeSet::new();
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.extension().is_none_or(|e| e != "json") {
                continue;
            }
            let text = std::fs::read(&path).unwrap();
            let op = serde_json::from_slice::<Value>(&text).unwrap()["op"]
                .as_str()
                .unwrap()
                .to_string();
            let bin = encode(&decode(Format::Json, &text));
            let tag = leading_tag(&bin).unwrap() as usize;
            assert_eq!(T::OPS[tag], op, "{path:?}");
            seen.insert(op);
        }
        let all: std::collections::BTreeSet<String> =
            T::OPS.iter().map(|s| s.to_string()).collect();
        assert_eq!(seen, all, "every op needs a fixture in {dir:?}");
    }

    #[test]
    fn op_tags_agree_with_the_bincode_encoder() {
        tags_agree_with_the_encoder::<ClientFrame>(
            "client",
            |f, d| decode_client(f, d).unwrap(),
            |fr| encode_client(Format::Bincode, fr),
        );
        tags_agree_with_the_encoder::<ServerFrame>(
            "server",
            |f, d| decode_server(f, d).unwrap(),
            |fr| crate::protocol::codec::encode_server(Format::Bincode, fr),
        );
    }

    #[test]
    fn leading_tags_read_bincode_varints() {
        for tag in [0u32, 20, 250, 251, 300, 65_535, 65_536, u32::MAX] {
            let bytes = bincode::encode_to_vec(tag, bincode::config::standard()).unwrap();
            assert_eq!(leading_tag(&bytes), Some(tag));
            assert_eq!(leading_tag(&bytes[..bytes.len() - 1]), None);
        }
        assert_eq!(leading_tag(&[253, 0, 0, 0, 0, 0, 0, 0, 0]), None);
    }

    fn json(text: &str) -> DecodeError {
        decode_client(Format::Json, text.as_bytes()).unwrap_err()
    }

    #[test]
    fn json_errors_carry_the_rid_and_name_the_field() {
        let e = json(r#"{"op":"publish","payload":"x","rid":4}"#);
        assert_eq!(
            (e.code, e.message.as_str(), e.rid),
            (
                ErrorCode::MissingField,
                "publish: missing field `topic`",
                Some(4)
            )
        );
        let e = json(r#"{"op":"nope","rid":3}"#);
        assert_eq!((e.code, e.rid), (ErrorCode::UnknownOp, Some(3)));
        assert!(
            e.message
                .starts_with("unknown op `nope`, expected one of `hello`")
        );
        let e = json(r#"{"op":"publish","topic":5,"payload":"x","rid":7}"#);
        assert_eq!(
            (e.code, e.message.as_str(), e.rid),
            (
                ErrorCode::InvalidField,
                "topic: invalid type: integer `5`, expected a string",
                Some(7)
            )
        );
        let e = json(r#"{"op":"publish","topic":"a","payload":"x","priority":"max","rid":8}"#);
        assert_eq!((e.code, e.rid), (ErrorCode::InvalidField, Some(8)));
        assert!(
            e.message.starts_with("priority: unknown variant `max`"),
            "{e}"
        );
        let e = json(r#"{"op":"ack","sub":"c","ids":[1,"x"],"rid":9}"#);
        assert!(e.message.starts_with("ids[1]: invalid type: string"), "{e}");
        let e = json(r#"{"op":"subscribe","id":"1","filter":"a","color":"red","rid":1}"#);
        assert_eq!((e.code, e.rid), (ErrorCode::InvalidField, Some(1)));
        assert!(
            e.message.starts_with("subscribe: unknown field `color`"),
            "{e}"
        );
        let e = json(r#"{"op":"publish","topic":"a","payload":"%%","encoding":"base64","rid":2}"#);
        assert_eq!((e.code, e.rid), (ErrorCode::InvalidField, Some(2)));
        assert!(
            e.message
                .starts_with("publish: payload is not valid base64"),
            "{e}"
        );
        let e = json(r#"{"payload":"x","rid":5}"#);
        assert_eq!((e.code, e.rid), (ErrorCode::MissingField, Some(5)));
        let e = json(r#"{"op":5,"rid":6}"#);
        assert_eq!((e.code, e.rid), (ErrorCode::InvalidField, Some(6)));
        assert!(e.message.starts_with("op: "), "{e}");
        let e = json(r#"{"op":"job_status","id":"x","rid":"r"}"#);
        assert_eq!((e.code, e.rid), (ErrorCode::InvalidField, None));
        assert!(e.message.starts_with("rid: invalid type: string"), "{e}");
        let e = json(r#"{"op":"ping","rid":11,"rid":12}"#);
        assert_eq!((e.code, e.rid), (ErrorCode::InvalidField, Some(12)));
        let e = json(r#"{"op":"ping","rid":1"#);
        assert_eq!((e.code, e.rid), (ErrorCode::Malformed, None));
    }

    fn bin(bytes: &[u8]) -> DecodeError {
        decode_client(Format::Bincode, bytes).unwrap_err()
    }

    #[test]
    fn bincode_errors_are_sentences_naming_the_op() {
        let e = bin(&[99]);
        assert_eq!(e.code, ErrorCode::UnknownOp);
        assert_eq!(e.message, "no operation has tag 99 (tags run from 0 to 23)");
        let e = bin(&[]);
        assert_eq!(e.code, ErrorCode::Malformed);
        assert!(e.message.contains("empty"), "{e}");
        let publish = encode_client(
            Format::Bincode,
            &ClientFrame::Publish(PublishFrame {
                topic: "t".into(),
                payload: b"x".to_vec(),
                headers: Default::default(),
                retain: false,
                priority: Default::default(),
                rid: Some(3),
            }),
        );
        let e = bin(&publish[..4]);
        assert_eq!(e.code, ErrorCode::Malformed);
        assert!(
            e.message.starts_with("publish: the frame ends early"),
            "{e}"
        );
        // topic "t" is [1, b't']; make it invalid UTF-8.
        let mut bad = publish.clone();
        bad[2] = 0xff;
        let e = bin(&bad);
        assert_eq!(e.code, ErrorCode::InvalidField);
        assert!(
            e.message
                .starts_with("publish: a string is not valid UTF-8"),
            "{e}"
        );
        // retain is the byte after an empty headers map.
        let mut bad = publish.clone();
        bad[6] = 7;
        let e = bin(&bad);
        assert_eq!(
            e.message,
            "publish: a boolean byte is 7 (it must be 0 or 1)"
        );
        let mut bad = publish.clone();
        bad[7] = 9;
        let e = bin(&bad);
        assert_eq!(e.code, ErrorCode::InvalidField);
        assert!(
            e.message.starts_with("publish: a Priority field has tag 9"),
            "{e}"
        );
        // A topic length far past the limit.
        let huge = [3u8, 0xfd, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x0f, 0x00];
        let e = bin(&huge);
        assert!(
            e.message
                .starts_with("publish: the frame announces more than"),
            "{e}"
        );
        let mut trailing =
            encode_client(Format::Bincode, &ClientFrame::Ping(Ping { rid: Some(5) }));
        trailing.push(0);
        let e = bin(&trailing);
        assert_eq!((e.code, e.rid), (ErrorCode::Malformed, Some(5)));
        assert_eq!(e.message, "ping: 1 trailing bytes after the frame");
        for e in [bin(&[99]), bin(&publish[..4]), bin(&huge)] {
            assert!(!e.message.contains('{'), "a debug dump: {e}");
        }
    }

    #[test]
    fn json_in_a_binary_frame_is_named_and_keeps_its_rid() {
        let e = bin(br#" {"op":"publish","topic":"t","payload":"x","rid":12}"#);
        assert_eq!((e.code, e.rid), (ErrorCode::Malformed, Some(12)));
        assert!(e.message.starts_with("this binary frame holds JSON"), "{e}");
    }
}
