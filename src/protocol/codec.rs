//! Encoding and decoding of native frames as JSON (WebSocket text frames)
//! and bincode (binary frames). Pure: bytes in, values out, no I/O.
//!
//! The hot path, a `message` to many subscribers, is split in two: a
//! per-subscription prefix computed once at subscribe time, and a body
//! encoded once per publish and format. Prefix followed by body is exactly
//! the encoding of the whole frame (a test holds both codecs to that).

use bytes::Bytes;
use serde::Serialize;

pub use super::decode_error::{DecodeError, MAX_DECODE_BYTES};
use super::decode_error::{Tagged, bincode_error, json_error, leading_tag};
use super::frame::{ClientFrame, Encoding, ErrorCode, Headers, ServerFrame, payload_to_json};

/// The two encodings of the native protocol.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Format {
    /// JSON in WebSocket text frames.
    Json,
    /// bincode in WebSocket binary frames.
    Bincode,
}

fn bincode_config() -> impl bincode::config::Config {
    bincode::config::standard().with_limit::<MAX_DECODE_BYTES>()
}

/// Decodes a client frame.
///
/// # Errors
/// A [`DecodeError`] whose code says what was wrong.
pub fn decode_client(format: Format, data: &[u8]) -> Result<ClientFrame, DecodeError> {
    if format == Format::Bincode
        && let Some(publish) = decode_publish(data)
    {
        return Ok(ClientFrame::Publish(publish));
    }
    decode(format, data)
}

/// Index of `ClientFrame::Publish` in declaration order (bincode's tag).
const PUBLISH_VARIANT: u32 = 3;

/// A whole bincode `publish` frame, read by hand: the broker's hot path
/// (bincode's derive spent ~9% of a 1 -> 1 broker's samples in it).
/// `None` for anything else, and for anything it would not decode the
/// same: [`decode`] then decodes it, or says what is wrong with it.
fn decode_publish(data: &[u8]) -> Option<super::frame::PublishFrame> {
    let mut r = Bin::frame(data, PUBLISH_VARIANT)?;
    let topic = r.str()?;
    let payload = r.bytes()?;
    r.no_headers()?;
    let retain = r.bool()?;
    let priority = match r.tag()? {
        0 => super::frame::Priority::Normal,
        1 => super::frame::Priority::High,
        _ => return None,
    };
    let rid = match r.0 {
        [0] => None,
        [1, ..] => {
            r.0 = &r.0[1..];
            let rid = r.varint()?;
            r.0.is_empty().then_some(Some(rid))?
        }
        _ => return None,
    };
    Some(super::frame::PublishFrame {
        topic: topic.to_owned(),
        payload: payload.to_vec(),
        headers: Headers::new(),
        retain,
        priority,
        rid,
    })
}

/// Decodes a server frame (for clients).
///
/// # Errors
/// A [`DecodeError`] whose code says what was wrong.
pub fn decode_server(format: Format, data: &[u8]) -> Result<ServerFrame, DecodeError> {
    decode(format, data)
}

fn decode<T>(format: Format, data: &[u8]) -> Result<T, DecodeError>
where
    T: serde::de::DeserializeOwned + bincode::Decode<()> + Tagged,
{
    match format {
        Format::Json => {
            // serde's messages for a top-level array or scalar read like a
            // field error; a frame that is not an object is malformed.
            if data.iter().find(|b| !b.is_ascii_whitespace()) != Some(&b'{') {
                return Err(DecodeError {
                    code: ErrorCode::Malformed,
                    message: "a JSON frame must be an object with an \"op\" field".into(),
                    rid: None,
                });
            }
            serde_json::from_slice(data).map_err(|e| json_error::<T>(data, e))
        }
        Format::Bincode => match bincode::decode_from_slice::<T, _>(data, bincode_config()) {
            Ok((frame, used)) if used == data.len() => Ok(frame),
            Ok((frame, used)) => {
                let op = leading_tag(data)
                    .and_then(|tag| T::OPS.get(tag as usize))
                    .unwrap_or(&"frame");
                Err(DecodeError {
                    code: ErrorCode::Malformed,
                    message: format!("{op}: {} trailing bytes after the frame", data.len() - used),
                    rid: frame.rid(),
                })
            }
            Err(e) => Err(bincode_error::<T>(data, e)),
        },
    }
}

/// Encodes a client frame.
pub fn encode_client(format: Format, frame: &ClientFrame) -> Vec<u8> {
    encode(format, frame)
}

/// Encodes a server frame.
pub fn encode_server(format: Format, frame: &ServerFrame) -> Vec<u8> {
    encode(format, frame)
}

fn encode<T: Serialize + bincode::Encode>(format: Format, frame: &T) -> Vec<u8> {
    match format {
        // Serialising these types to a Vec cannot fail: every map key is
        // a string and no Serialize impl returns an error.
        Format::Json => serde_json::to_vec(frame).unwrap_or_default(),
        Format::Bincode => bincode::encode_to_vec(frame, bincode_config()).unwrap_or_default(),
    }
}

/// The start of every `message` frame for one subscription: computed once,
/// when the subscription is made.
pub fn message_prefix(format: Format, sub: &str) -> Bytes {
    match format {
        Format::Json => {
            let mut out = Vec::with_capacity(24 + sub.len());
            out.extend_from_slice(br#"{"op":"message","sub":"#);
            // A &str always serialises.
            serde_json::to_writer(&mut out, sub).unwrap_or_default();
            out.push(b',');
            out.into()
        }
        Format::Bincode => {
            // The variant index of ServerFrame::Message, then the `sub` field.
            let mut out =
                bincode::encode_to_vec(MESSAGE_VARIANT, bincode_config()).unwrap_or_default();
            out.extend(bincode::encode_to_vec(sub, bincode_config()).unwrap_or_default());
            out.into()
        }
    }
}

/// Index of `ServerFrame::Message` in declaration order (bincode's tag).
const MESSAGE_VARIANT: u32 = 1;

/// The rest of a `message` frame, shared by every subscriber of one publish.
pub fn message_body(
    format: Format,
    topic: &str,
    seq: u64,
    payload: &[u8],
    headers: &Headers,
    retained: bool,
) -> Bytes {
    match format {
        Format::Json => {
            #[derive(Serialize)]
            struct Body<'a> {
                topic: &'a str,
                seq: u64,
                payload: &'a str,
                #[serde(skip_serializing_if = "is_utf8")]
                encoding: Encoding,
                #[serde(skip_serializing_if = "Headers::is_empty")]
                headers: &'a Headers,
                #[serde(skip_serializing_if = "std::ops::Not::not")]
                retained: bool,
            }
            fn is_utf8(e: &Encoding) -> bool {
                *e == Encoding::Utf8
            }
            let (text, encoding) = payload_to_json(payload);
            let body = Body {
                topic,
                seq,
                payload: &text,
                encoding,
                headers,
                retained,
            };
            let mut out = serde_json::to_vec(&body).unwrap_or_default();
            // Drop the object's opening brace: the prefix opened it.
            out.remove(0);
            out.into()
        }
        Format::Bincode => {
            #[derive(bincode::Encode)]
            struct Body<'a> {
                topic: &'a str,
                seq: u64,
                payload: &'a [u8],
                headers: &'a Headers,
                retained: bool,
            }
            bincode::encode_to_vec(
                Body {
                    topic,
                    seq,
                    payload,
                    headers,
                    retained,
                },
                bincode_config(),
            )
            .unwrap_or_default()
            .into()
        }
    }
}

/// A bincode `message` frame's fields, borrowed from the frame: what a
/// client needs to route a delivery before it copies anything. Only
/// messages without headers are read this way (see [`decode_message`]).
#[derive(Debug, PartialEq, Eq)]
pub struct MessageRef<'a> {
    /// The subscription this delivery is for.
    pub sub: &'a str,
    /// The topic it was published to.
    pub topic: &'a str,
    /// The topic's publish sequence number.
    pub seq: u64,
    /// The payload bytes.
    pub payload: &'a [u8],
    /// Whether this is the retained message.
    pub retained: bool,
}

impl MessageRef<'_> {
    /// The owned message, as [`decode_server`] would have made it.
    pub fn to_message(&self) -> super::frame::Message {
        super::frame::Message {
            sub: self.sub.to_owned(),
            topic: self.topic.to_owned(),
            seq: self.seq,
            payload: self.payload.to_vec(),
            headers: Headers::new(),
            retained: self.retained,
        }
    }
}

/// Decodes a bincode `message` frame without copying it: the subscriber's
/// hot path, the mirror of [`message_prefix`] and [`message_body`].
/// `None` for any other frame, for a message with headers, and for one
/// that does not decode whole; [`decode_server`] then reads it or says
/// what is wrong with it.
///
/// Read by hand rather than by bincode's derive: the derive spent ~540
/// instructions a frame (length claims, an empty map's decode) against
/// ~2,200 for the whole of a subscriber's delivery (callgrind of
/// `wharf-bench`'s 1 -> 50).
pub fn decode_message(data: &[u8]) -> Option<MessageRef<'_>> {
    let mut r = Bin::frame(data, MESSAGE_VARIANT)?;
    let sub = r.str()?;
    let topic = r.str()?;
    let seq = r.varint()?;
    let payload = r.bytes()?;
    r.no_headers()?;
    let retained = r.bool()?;
    if !r.0.is_empty() {
        return None;
    }
    Some(MessageRef {
        sub,
        topic,
        seq,
        payload,
        retained,
    })
}

/// A reader of bincode's standard encoding (little-endian varints,
/// length-prefixed bytes), for [`decode_message`] and [`decode_publish`].
struct Bin<'a>(&'a [u8]);

impl<'a> Bin<'a> {
    /// A reader past the tag of a frame of `variant`; `None` for another
    /// frame, or one larger than bincode's limit (which the reader does
    /// not count).
    fn frame(data: &'a [u8], variant: u32) -> Option<Bin<'a>> {
        if data.len() > MAX_DECODE_BYTES {
            return None;
        }
        let mut r = Bin(data);
        (r.tag()? == variant).then_some(r)
    }

    /// A varint: one byte below 251, else a marker and 2, 4 or 8 bytes.
    fn varint(&mut self) -> Option<u64> {
        let (&first, rest) = self.0.split_first()?;
        let (value, rest) = match first {
            0..=250 => (u64::from(first), rest),
            251 => {
                let (b, rest) = rest.split_first_chunk::<2>()?;
                (u64::from(u16::from_le_bytes(*b)), rest)
            }
            252 => {
                let (b, rest) = rest.split_first_chunk::<4>()?;
                (u64::from(u32::from_le_bytes(*b)), rest)
            }
            253 => {
                let (b, rest) = rest.split_first_chunk::<8>()?;
                (u64::from_le_bytes(*b), rest)
            }
            _ => return None,
        };
        self.0 = rest;
        Some(value)
    }

    fn bytes(&mut self) -> Option<&'a [u8]> {
        let len = usize::try_from(self.varint()?).ok()?;
        let (bytes, rest) = self.0.split_at_checked(len)?;
        self.0 = rest;
        Some(bytes)
    }

    fn str(&mut self) -> Option<&'a str> {
        std::str::from_utf8(self.bytes()?).ok()
    }

    /// A bool: 0 or 1, nothing else.
    fn bool(&mut self) -> Option<bool> {
        let (&b, rest) = self.0.split_first()?;
        self.0 = rest;
        match b {
            0 => Some(false),
            1 => Some(true),
            _ => None,
        }
    }

    /// An enum's tag: a varint of at most 32 bits, as bincode reads one.
    fn tag(&mut self) -> Option<u32> {
        match self.0.first()? {
            253.. => None,
            _ => u32::try_from(self.varint()?).ok(),
        }
    }

    /// The empty headers map (one byte, the common case). Frames with
    /// headers are left to bincode's decode of the whole frame, which
    /// counts their entries against its size limit with the rest of it.
    fn no_headers(&mut self) -> Option<()> {
        let [0, rest @ ..] = self.0 else {
            return None;
        };
        self.0 = rest;
        Some(())
    }
}

/// Index of `ServerFrame::Delivery` in declaration order (bincode's tag).
const DELIVERY_VARIANT: u32 = 6;

/// A queue delivery's fields, borrowed from the queue's message.
#[derive(Debug, Clone, Copy)]
pub struct DeliveryRef<'a> {
    /// The consumer id.
    pub sub: &'a str,
    /// The queue.
    pub queue: &'a str,
    /// Delivery id.
    pub id: u64,
    /// The message's id in its queue.
    pub seq: u64,
    /// Deliveries so far, this one included.
    pub count: u32,
    /// Priority.
    pub priority: u8,
    /// Payload.
    pub payload: &'a [u8],
    /// Headers.
    pub headers: &'a Headers,
}

/// The encoding of a `delivery` frame, written from borrowed fields: the
/// same bytes as `encode_server(format, &ServerFrame::Delivery(..))`
/// without copying the payload or headers into an owned frame first.
pub fn delivery_frame(format: Format, d: &DeliveryRef<'_>) -> Vec<u8> {
    match format {
        Format::Json => {
            #[derive(Serialize)]
            struct Frame<'a> {
                op: &'static str,
                sub: &'a str,
                queue: &'a str,
                id: u64,
                seq: u64,
                count: u32,
                #[serde(skip_serializing_if = "is_zero")]
                priority: u8,
                payload: &'a str,
                #[serde(skip_serializing_if = "is_utf8")]
                encoding: Encoding,
                #[serde(skip_serializing_if = "Headers::is_empty")]
                headers: &'a Headers,
            }
            fn is_utf8(e: &Encoding) -> bool {
                *e == Encoding::Utf8
            }
            fn is_zero(p: &u8) -> bool {
                *p == 0
            }
            let (text, encoding) = payload_to_json(d.payload);
            serde_json::to_vec(&Frame {
                op: "delivery",
                sub: d.sub,
                queue: d.queue,
                id: d.id,
                seq: d.seq,
                count: d.count,
                priority: d.priority,
                payload: &text,
                encoding,
                headers: d.headers,
            })
            .unwrap_or_default()
        }
        Format::Bincode => {
            #[derive(bincode::Encode)]
            struct Frame<'a> {
                variant: u32,
                sub: &'a str,
                queue: &'a str,
                id: u64,
                seq: u64,
                count: u32,
                priority: u8,
                payload: &'a [u8],
                headers: &'a Headers,
            }
            bincode::encode_to_vec(
                Frame {
                    variant: DELIVERY_VARIANT,
                    sub: d.sub,
                    queue: d.queue,
                    id: d.id,
                    seq: d.seq,
                    count: d.count,
                    priority: d.priority,
                    payload: d.payload,
                    headers: d.headers,
                },
                bincode_config(),
            )
            .unwrap_or_default()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::frame::*;

    #[test]
    fn a_delivery_written_from_borrowed_fields_is_the_whole_frame() {
        let mut headers = Headers::new();
        headers.insert("k".into(), "v".into());
        for (payload, headers, priority) in [
            (&b"text"[..], headers.clone(), 7u8),
            (&[0u8, 255, 1][..], Headers::new(), 0),
        ] {
            let owned = QueueDelivery {
                sub: "c1".into(),
                queue: "q/a".into(),
                id: 300,
                seq: 70_000,
                count: 2,
                priority,
                payload: payload.to_vec(),
                headers: headers.clone(),
            };
            let borrowed = DeliveryRef {
                sub: "c1",
                queue: "q/a",
                id: 300,
                seq: 70_000,
                count: 2,
                priority,
                payload,
                headers: &headers,
            };
            for format in [Format::Json, Format::Bincode] {
                assert_eq!(
                    delivery_frame(format, &borrowed),
                    encode_server(format, &ServerFrame::Delivery(owned.clone())),
                    "{format:?}"
                );
            }
        }
    }

    fn message(payload: &[u8], headers: Headers, retained: bool) -> Message {
        Message {
            sub: "s\"1".into(),
            topic: "a/b".into(),
            seq: 300,
            payload: payload.to_vec(),
            headers,
            retained,
        }
    }

    #[test]
    fn prefix_and_body_are_the_whole_message_frame() {
        let mut h = Headers::new();
        h.insert("k".into(), "v".into());
        for format in [Format::Json, Format::Bincode] {
            for m in [
                message(b"hello", Headers::new(), false),
                message(&[0xff, 0, 1], h.clone(), true),
                message(b"", h.clone(), false),
            ] {
                let mut parts = message_prefix(format, &m.sub).to_vec();
                parts.extend_from_slice(&message_body(
                    format, &m.topic, m.seq, &m.payload, &m.headers, m.retained,
                ));
                let frame = ServerFrame::Message(m.clone());
                assert_eq!(decode_server(format, &parts).unwrap(), frame, "{format:?}");
                if format == Format::Bincode {
                    assert_eq!(parts, encode_server(format, &frame));
                }
            }
        }
    }

    /// Frames near `frame`: cut short, lengthened, each of its first and
    /// last bytes below 251 written as bincode's wider varints (2, 4 and
    /// 8 bytes after a marker), and 2,000 one-byte changes.
    fn neighbours(frame: &[u8]) -> Vec<Vec<u8>> {
        let mut out = vec![frame[..frame.len() - 1].to_vec(), [frame, &[0]].concat()];
        let ends = (0..frame.len().min(64)).chain(frame.len().saturating_sub(16)..frame.len());
        for at in ends {
            let b = frame[at];
            if b < 251 {
                for wide in [
                    &[251, b, 0][..],
                    &[252, b, 0, 0, 0],
                    &[253, b, 0, 0, 0, 0, 0, 0, 0],
                ] {
                    out.push([&frame[..at], wide, &frame[at + 1..]].concat());
                }
            }
        }
        let mut seed = 0x9e37_79b9_7f4a_7c15_u64;
        for _ in 0..2_000 {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            let mut m = frame.to_vec();
            let at = (seed as usize) % m.len().min(64);
            m[at] = (seed >> 32) as u8;
            out.push(m);
        }
        out
    }

    /// The hand reader `ours` reads `frame` when it has no headers, and
    /// never reads a neighbour of it other than bincode (`theirs`) does.
    fn agrees<F: PartialEq + std::fmt::Debug>(
        frame: &[u8],
        headers: bool,
        ours: impl Fn(&[u8]) -> Option<F>,
        theirs: impl Fn(&[u8]) -> Option<F>,
    ) {
        assert_eq!(ours(frame).is_some(), !headers, "{frame:?}");
        for v in neighbours(frame) {
            if let Some(read) = ours(&v) {
                assert_eq!(Some(read), theirs(&v), "{v:?}");
            }
        }
    }

    #[test]
    fn a_publish_read_by_hand_is_what_bincode_reads() {
        let mut h = Headers::new();
        h.insert("k".into(), "v".into());
        let publishes = [
            PublishFrame {
                topic: "a/b".into(),
                payload: b"hello".to_vec(),
                headers: Headers::new(),
                retain: false,
                priority: Priority::Normal,
                rid: None,
            },
            PublishFrame {
                topic: "ü/ß".into(),
                payload: vec![9; 70_000],
                headers: Headers::new(),
                retain: true,
                priority: Priority::High,
                rid: Some(u64::MAX),
            },
            PublishFrame {
                topic: String::new(),
                payload: Vec::new(),
                headers: h,
                retain: false,
                priority: Priority::Normal,
                rid: Some(300),
            },
        ];
        for p in publishes {
            let frame = encode_client(Format::Bincode, &ClientFrame::Publish(p.clone()));
            agrees(
                &frame,
                !p.headers.is_empty(),
                decode_publish,
                |v| match decode::<ClientFrame>(Format::Bincode, v) {
                    Ok(ClientFrame::Publish(p)) => Some(p),
                    _ => None,
                },
            );
            if p.headers.is_empty() {
                assert_eq!(decode_publish(&frame), Some(p));
            }
        }
        // Headers whose entries pass bincode's limit with the rest of
        // the frame (48 bytes counted per entry): bincode refuses it, and
        // so is it not read by hand.
        let with_entries = |n: u32| {
            let mut f = vec![PUBLISH_VARIANT as u8, 1, b't', 251, 0x30, 0x75];
            f.extend(std::iter::repeat_n(0u8, 30_000));
            f.push(252);
            f.extend(n.to_le_bytes());
            f.extend(std::iter::repeat_n(0u8, 2 * n as usize));
            f.extend([0, 0, 0]);
            f
        };
        assert!(decode::<ClientFrame>(Format::Bincode, &with_entries(1_000)).is_ok());
        let many = with_entries(349_000);
        assert!(decode::<ClientFrame>(Format::Bincode, &many).is_err());
        assert_eq!(decode_publish(&many), None);
        // Other frames are left to bincode.
        let ping = encode_client(Format::Bincode, &ClientFrame::Ping(Ping { rid: Some(1) }));
        assert_eq!(decode_publish(&ping), None);
    }

    #[test]
    fn a_borrowed_message_decodes_as_the_owned_one() {
        let mut h = Headers::new();
        h.insert("k".into(), "v".into());
        for m in [
            message(b"hello", Headers::new(), false),
            message(&[0xff, 0, 1], h.clone(), true),
            message(b"", h, false),
            message(&[7; 300], Headers::new(), false),
            // Every varint width: 2, 4 and 8 bytes after the marker.
            Message {
                seq: 70_000,
                ..message(&[1; 70_000], Headers::new(), true)
            },
            Message {
                seq: u64::MAX,
                ..message(b"x", Headers::new(), false)
            },
        ] {
            let frame = encode_server(Format::Bincode, &ServerFrame::Message(m.clone()));
            agrees(
                &frame,
                !m.headers.is_empty(),
                |v| decode_message(v).map(|r| r.to_message()),
                |v| match decode_server(Format::Bincode, v) {
                    Ok(ServerFrame::Message(m)) => Some(m),
                    _ => None,
                },
            );
            if m.headers.is_empty() {
                assert_eq!(decode_message(&frame).map(|r| r.to_message()), Some(m));
            }
        }
        // Other frames are not messages.
        let pong = encode_server(Format::Bincode, &ServerFrame::Pong(Ping { rid: Some(1) }));
        assert_eq!(decode_message(&pong), None);
        assert_eq!(decode_message(&[]), None);
        // A tag written as a 64-bit varint: bincode reads tags as 32-bit.
        let frame = encode_server(
            Format::Bincode,
            &ServerFrame::Message(message(b"x", Headers::new(), false)),
        );
        let wide = [&[253, 1, 0, 0, 0, 0, 0, 0, 0][..], &frame[1..]].concat();
        assert!(decode_server(Format::Bincode, &wide).is_err());
        assert_eq!(decode_message(&wide), None);
    }

    #[test]
    fn json_error_codes() {
        let cases: &[(&str, ErrorCode)] = &[
            ("{", ErrorCode::Malformed),
            ("not json", ErrorCode::Malformed),
            ("42", ErrorCode::Malformed),
            (r#"{"topic":"a"}"#, ErrorCode::MissingField),
            (r#"{"op":"jump"}"#, ErrorCode::UnknownOp),
            (r#"{"op":"publish","payload":"x"}"#, ErrorCode::MissingField),
            (
                r#"{"op":"publish","topic":5,"payload":"x"}"#,
                ErrorCode::InvalidField,
            ),
            (
                r#"{"op":"publish","topic":"a","payload":"x","priority":"max"}"#,
                ErrorCode::InvalidField,
            ),
            (
                r#"{"op":"publish","topic":"a","payload":"%%","encoding":"base64"}"#,
                ErrorCode::InvalidField,
            ),
            (
                r#"{"op":"subscribe","id":"1","filter":"a","color":"red"}"#,
                ErrorCode::InvalidField,
            ),
        ];
        for (text, code) in cases {
            let err = decode_client(Format::Json, text.as_bytes()).unwrap_err();
            assert_eq!(err.code, *code, "{text}: {err}");
        }
    }

    #[test]
    fn bincode_error_codes() {
        assert_eq!(
            decode_client(Format::Bincode, &[]).unwrap_err().code,
            ErrorCode::Malformed
        );
        assert_eq!(
            decode_client(Format::Bincode, &[99]).unwrap_err().code,
            ErrorCode::UnknownOp
        );
        let mut ok = encode_client(Format::Bincode, &ClientFrame::Ping(Ping { rid: Some(1) }));
        ok.push(0);
        assert_eq!(
            decode_client(Format::Bincode, &ok).unwrap_err().code,
            ErrorCode::Malformed
        );
        // A length prefix claiming far more than the limit is refused
        // without allocating it.
        let huge = [3u8, 0xfd, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x0f, 0x00];
        assert!(decode_client(Format::Bincode, &huge).is_err());
    }
}
