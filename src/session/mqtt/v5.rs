//! What MQTT 5 adds to a session, apart from the packet flow: message
//! properties carried as Wharf headers (so native and HTTP clients see what
//! an MQTT 5 publisher set, and MQTT 5 subscribers see native headers as
//! user properties), message expiry, and the reason code a server
//! DISCONNECT gives for each way a connection is closed.
//!
//! Headers and properties:
//!
//! | MQTT 5 property | Wharf header |
//! |---|---|
//! | user property `k: v` | `k: v` (a repeated name keeps its last value) |
//! | content type | `content-type` |
//! | response topic | `response-topic` |
//! | correlation data | `correlation-data`, base64 |
//! | payload format indicator 1 | `payload-format: utf-8` |
//! | message expiry interval | `expires-at`, Unix milliseconds |

use base64::Engine as _;

use crate::broker::{ORIGIN_HEADER, QOS_HEADER, RETAIN_HEADER, TOPIC_HEADER, now_ms};
use crate::protocol::frame::Headers;
use crate::protocol::mqtt::{Properties, PropertySet, reason};
use crate::session::{CLOSE_EXPIRED, CLOSE_UNAUTHORIZED, close_reason};

/// Why an older connection is closed when a CONNECT takes its client id
/// over (the start of the reason, for a clean start too).
pub(crate) const TAKEN_OVER: &str = "session taken over by a new connection";

/// Why an older connection is closed when a CONNECT with clean start
/// takes its client id over.
pub(crate) const TAKEN_OVER_CLEAN: &str =
    "session taken over by a new connection with a clean start";

/// Header carrying MQTT 5's content type.
pub const CONTENT_TYPE: &str = "content-type";
/// Header carrying MQTT 5's response topic.
pub const RESPONSE_TOPIC: &str = "response-topic";
/// Header carrying MQTT 5's correlation data, base64 (standard, padded).
pub const CORRELATION_DATA: &str = "correlation-data";
/// Header saying the payload is UTF-8 (`utf-8`), MQTT 5's payload format
/// indicator.
pub const PAYLOAD_FORMAT: &str = "payload-format";
/// Header carrying when the message expires, in Unix milliseconds: MQTT
/// 5's message expiry interval made absolute at publish time.
pub const EXPIRES_AT: &str = "expires-at";

/// The headers an MQTT 5 publish (or will) with `props` carries.
pub(super) fn headers_of(props: &PropertySet) -> Headers {
    let mut h = Headers::new();
    for (k, v) in &props.user_properties {
        h.insert(k.clone(), v.clone());
    }
    if let Some(v) = &props.content_type {
        h.insert(CONTENT_TYPE.into(), v.clone());
    }
    if let Some(v) = &props.response_topic {
        h.insert(RESPONSE_TOPIC.into(), v.clone());
    }
    if let Some(v) = &props.correlation_data {
        h.insert(
            CORRELATION_DATA.into(),
            base64::engine::general_purpose::STANDARD.encode(v),
        );
    }
    if props.payload_format_indicator == Some(true) {
        h.insert(PAYLOAD_FORMAT.into(), "utf-8".into());
    }
    if let Some(secs) = props.message_expiry_interval {
        let at = now_ms().saturating_add(u64::from(secs) * 1000);
        h.insert(EXPIRES_AT.into(), at.to_string());
    }
    h
}

/// When a message with `headers` expires (Unix ms), if it does.
fn expires_at(headers: &Headers) -> Option<u64> {
    if headers.is_empty() {
        return None;
    }
    headers.get(EXPIRES_AT).and_then(|v| v.parse().ok())
}

/// Whether a message with `headers` is past its expiry.
pub(super) fn expired(headers: &Headers) -> bool {
    expires_at(headers).is_some_and(|at| now_ms() >= at)
}

/// The user property that carries a message's offset in its topic's
/// history (`[[history]]`) to an MQTT 5 subscriber.
pub const OFFSET_PROPERTY: &str = "wharf-offset";
/// The user property that carries the topic's history epoch with it.
pub const EPOCH_PROPERTY: &str = "wharf-epoch";

/// The PUBLISH properties an MQTT 5 subscriber gets for a message with
/// `headers`: `None` if it has expired (it is not sent then). The internal
/// headers of durable subscriptions are left out.
pub(super) fn message_props(headers: &Headers) -> Option<Properties> {
    if headers.is_empty() {
        return Some(Properties::default());
    }
    let mut p = Properties::default();
    for (k, v) in headers {
        match k.as_str() {
            CONTENT_TYPE => p.content_type = Some(v.clone()),
            RESPONSE_TOPIC => p.response_topic = Some(v.clone()),
            CORRELATION_DATA => match base64::engine::general_purpose::STANDARD.decode(v) {
                Ok(b) => p.correlation_data = Some(b.into()),
                Err(_) => p.user_properties.push((k.clone(), v.clone())),
            },
            PAYLOAD_FORMAT if v == "utf-8" => p.payload_format_indicator = Some(true),
            EXPIRES_AT => match v.parse::<u64>() {
                Ok(at) => {
                    let now = now_ms();
                    if now >= at {
                        return None;
                    }
                    // What is left, rounded up: never 0 while alive.
                    let secs = (at - now).div_ceil(1000);
                    p.message_expiry_interval = Some(u32::try_from(secs).unwrap_or(u32::MAX));
                }
                Err(_) => p.user_properties.push((k.clone(), v.clone())),
            },
            TOPIC_HEADER | QOS_HEADER | RETAIN_HEADER | ORIGIN_HEADER => {}
            _ => p.user_properties.push((k.clone(), v.clone())),
        }
    }
    Some(p)
}

/// The DISCONNECT reason code for a connection closed with WebSocket
/// close `code` and `why` (the broker's [`close_reason`]s, and a takeover's
/// [`TAKEN_OVER`]).
pub(super) fn disconnect_reason(code: u16, why: &str) -> u8 {
    match code {
        1000 if why.starts_with(TAKEN_OVER) => reason::SESSION_TAKEN_OVER,
        1000 => reason::NORMAL_DISCONNECTION,
        1001 if why == close_reason::KEEP_ALIVE || why == close_reason::IDLE => {
            reason::KEEP_ALIVE_TIMEOUT
        }
        1001 => reason::SERVER_SHUTTING_DOWN,
        1002 => reason::PROTOCOL_ERROR,
        1003 | 1007 => reason::MALFORMED_PACKET,
        1008 if why == close_reason::ADMIN => reason::ADMINISTRATIVE_ACTION,
        1008 if why == close_reason::RATE_LIMIT => reason::MESSAGE_RATE_TOO_HIGH,
        1008 => reason::QUOTA_EXCEEDED,
        1009 => reason::PACKET_TOO_LARGE,
        CLOSE_UNAUTHORIZED | CLOSE_EXPIRED => reason::NOT_AUTHORIZED,
        _ => reason::UNSPECIFIED_ERROR,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn properties_round_trip_through_headers() {
        let mut p = PropertySet {
            content_type: Some("application/json".into()),
            response_topic: Some("replies/1".into()),
            correlation_data: Some(bytes::Bytes::from_static(&[0, 1, 255])),
            payload_format_indicator: Some(true),
            message_expiry_interval: Some(60),
            user_properties: vec![("a".into(), "1".into()), ("b".into(), "2".into())],
            ..PropertySet::default()
        };
        let h = headers_of(&p);
        assert_eq!(h["a"], "1");
        assert_eq!(h[CORRELATION_DATA], "AAH/");
        let back = message_props(&h).expect("not expired");
        assert!(matches!(back.message_expiry_interval, Some(59..=60)));
        p.message_expiry_interval = back.message_expiry_interval;
        assert_eq!(*back, p);
    }

    #[test]
    fn expired_messages_have_no_properties() {
        let mut h = Headers::new();
        h.insert(EXPIRES_AT.into(), (now_ms() - 1).to_string());
        assert!(expired(&h));
        assert!(message_props(&h).is_none());
        h.insert(EXPIRES_AT.into(), "soon".into());
        assert!(!expired(&h));
        assert_eq!(message_props(&h).map(|p| p.user_properties.len()), Some(1));
    }

    #[test]
    fn internal_headers_stay_inside() {
        let mut h = Headers::new();
        h.insert(TOPIC_HEADER.into(), "t".into());
        h.insert(QOS_HEADER.into(), "1".into());
        assert!(message_props(&h).is_some_and(|p| p.is_empty()));
    }

    #[test]
    fn close_codes_become_reason_codes() {
        let r = disconnect_reason(1000, "session taken over by a new connection");
        assert_eq!(r, reason::SESSION_TAKEN_OVER);
        assert_eq!(
            disconnect_reason(1001, "keep-alive timeout"),
            reason::KEEP_ALIVE_TIMEOUT
        );
        assert_eq!(
            disconnect_reason(1001, "idle timeout"),
            reason::KEEP_ALIVE_TIMEOUT
        );
        assert_eq!(
            disconnect_reason(1001, "server shutting down"),
            reason::SERVER_SHUTTING_DOWN
        );
        assert_eq!(
            disconnect_reason(1008, "closed by an administrator"),
            reason::ADMINISTRATIVE_ACTION
        );
        assert_eq!(
            disconnect_reason(1008, "rate limit exceeded"),
            reason::MESSAGE_RATE_TOO_HIGH
        );
        assert_eq!(
            disconnect_reason(1008, "slow consumer: more than 10 bytes"),
            reason::QUOTA_EXCEEDED
        );
        assert_eq!(disconnect_reason(1009, "x"), reason::PACKET_TOO_LARGE);
        assert_eq!(disconnect_reason(4403, "x"), reason::NOT_AUTHORIZED);
    }
}
