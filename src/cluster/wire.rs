//! A published message's headers and flags as NATS headers, and back.
//!
//! The payload travels as it is, so that any NATS client can watch a
//! cluster's traffic (`nats sub 'wharf.t.>'`) or publish into it. The
//! message's flags are headers of their own, written only when they are
//! not the default: `Wharf-Retain: 1`, `Wharf-Priority: high`,
//! `Wharf-Qos: 1`; `Wharf-Node` names the node it was published on, and
//! `Wharf-Seq` numbers it among its process's publishes (`resend.rs`;
//! `Wharf-Resent: 1` marks a copy sent again after NATS was lost). A
//! Wharf header travels under its own name when NATS can carry it (a name
//! of printable ASCII without `:` that does not start with `Wharf-`, a
//! value without CR or LF); any other is one `Wharf-H` header holding
//! `name=value`, each side percent-escaped. The codec does no I/O.

use async_nats::HeaderMap;
use async_nats::header::HeaderName;

use crate::protocol::frame::{Headers, Priority};

/// Marks a retained message (`1`).
pub const RETAIN: &str = "Wharf-Retain";
/// The message's lane when not normal (`high`).
pub const PRIORITY: &str = "Wharf-Priority";
/// The MQTT quality of service the publisher asked for, when not 0.
pub const QOS: &str = "Wharf-Qos";
/// The node the message was published on.
pub const NODE: &str = "Wharf-Node";
/// A Wharf header NATS cannot carry under its own name.
pub const ESCAPED: &str = "Wharf-H";
/// `{epoch}.{seq}`: the sending process (a random 64-bit number, hex)
/// and the message's number among its publishes (decimal).
pub const SEQ: &str = "Wharf-Seq";
/// Marks a copy sent again after NATS was lost (`1`).
pub const RESENT: &str = "Wharf-Resent";

const NODE_NAME: HeaderName = HeaderName::from_static(NODE);
const RETAIN_NAME: HeaderName = HeaderName::from_static(RETAIN);
const PRIORITY_NAME: HeaderName = HeaderName::from_static(PRIORITY);
const QOS_NAME: HeaderName = HeaderName::from_static(QOS);
const SEQ_NAME: HeaderName = HeaderName::from_static(SEQ);
const RESENT_NAME: HeaderName = HeaderName::from_static(RESENT);

/// Where a message stands among its sending process's publishes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Seq {
    /// The process (random per process).
    pub epoch: u64,
    /// Its number, from 1.
    pub seq: u64,
}

/// A received message's headers as Wharf reads them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Decoded {
    /// Its Wharf headers.
    pub headers: Headers,
    /// Its flags.
    pub flags: Flags,
    /// Whether a node published it (`Wharf-Node`: a message from another
    /// NATS client has none).
    pub from_node: bool,
    /// Its number, when a node numbered it.
    pub seq: Option<Seq>,
    /// Sent again after NATS was lost.
    pub resent: bool,
}

/// What a message's flags are, besides its headers.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Flags {
    /// Keep as the topic's retained message.
    pub retain: bool,
    /// The lane at the subscribers.
    pub priority: Priority,
    /// The publisher's MQTT quality of service.
    pub qos: u8,
}

fn carried_as_is(name: &str, value: &str) -> bool {
    !name.is_empty()
        && name.bytes().all(|b| (33..=126).contains(&b) && b != b':')
        && !name
            .get(..6)
            .is_some_and(|p| p.eq_ignore_ascii_case("wharf-"))
        && !value.contains(['\r', '\n'])
}

fn escape(s: &str, out: &mut String) {
    for &b in s.as_bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
}

fn unescape(s: &str) -> Option<String> {
    let mut bytes = Vec::with_capacity(s.len());
    let b = s.as_bytes();
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' {
            let hex = std::str::from_utf8(b.get(i + 1..i + 3)?).ok()?;
            bytes.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            bytes.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8(bytes).ok()
}

/// The NATS headers of a message published on `node`.
pub fn encode(node: &str, headers: &Headers, flags: Flags) -> HeaderMap {
    let mut map = HeaderMap::new();
    map.insert(NODE_NAME, node);
    if flags.retain {
        map.insert(RETAIN_NAME, "1");
    }
    if flags.priority == Priority::High {
        map.insert(PRIORITY_NAME, "high");
    }
    if flags.qos > 0 {
        map.insert(QOS_NAME, flags.qos.to_string());
    }
    for (name, value) in headers {
        if carried_as_is(name, value) {
            map.insert(name.as_str(), value.as_str());
        } else {
            let mut both = String::with_capacity(name.len() + value.len() + 8);
            escape(name, &mut both);
            both.push('=');
            escape(value, &mut both);
            map.append(ESCAPED, both);
        }
    }
    map
}

/// Numbers a message: `epoch` is the sending process's, written in hex
/// once (`{epoch:x}.`); `resent` marks a copy sent again.
pub fn number(map: &mut HeaderMap, epoch: &str, seq: u64, resent: bool) {
    use std::fmt::Write;
    let mut v = String::with_capacity(epoch.len() + 20);
    v.push_str(epoch);
    let _ = write!(v, "{seq}");
    map.insert(SEQ_NAME, v);
    if resent {
        map.insert(RESENT_NAME, "1");
    }
}

/// `{epoch:x}.`, as [`number`] takes it.
pub fn epoch_prefix(epoch: u64) -> String {
    format!("{epoch:x}.")
}

fn parse_seq(v: &str) -> Option<Seq> {
    let (epoch, seq) = v.split_once('.')?;
    Some(Seq {
        epoch: u64::from_str_radix(epoch, 16).ok()?,
        seq: seq.parse().ok()?,
    })
}

/// A received message's Wharf headers, flags and number.
/// Headers from other NATS clients are taken as they are (the last value
/// of a repeated name); `Wharf-` headers that do not parse are left out.
pub fn decode(map: Option<&HeaderMap>) -> Decoded {
    let mut d = Decoded::default();
    let Some(map) = map else {
        return d;
    };
    let Decoded {
        headers,
        flags,
        from_node,
        seq,
        resent,
    } = &mut d;
    for (name, values) in map.iter() {
        let Ok(name) = std::str::from_utf8(name.as_ref()) else {
            continue;
        };
        let last = values.last().map(|v| v.as_str()).unwrap_or_default();
        match name {
            RETAIN => flags.retain = last == "1",
            PRIORITY => {
                if last == "high" {
                    flags.priority = Priority::High;
                }
            }
            QOS => flags.qos = last.parse::<u8>().unwrap_or(0).min(2),
            NODE => *from_node = true,
            SEQ => *seq = parse_seq(last),
            RESENT => *resent = last == "1",
            ESCAPED => {
                for v in values {
                    if let Some((n, v)) = v.as_str().split_once('=')
                        && let (Some(n), Some(v)) = (unescape(n), unescape(v))
                    {
                        headers.insert(n, v);
                    }
                }
            }
            _ if name.len() >= 6 && name[..6].eq_ignore_ascii_case("wharf-") => {}
            _ => {
                headers.insert(name.to_owned(), last.to_owned());
            }
        }
    }
    d
}

/// The first byte of a retained bucket value Wharf wrote (version 1).
const RETAINED_V1: u8 = 0x57;

/// A retained message as the value of its key in the retained bucket:
/// a version byte, a flags byte (bit 0: high priority, bits 1-2: QoS),
/// the headers as JSON after their length (u32, little-endian), then the
/// payload.
pub fn retained_value(payload: &[u8], headers: &Headers, flags: Flags) -> Vec<u8> {
    let json = serde_json::to_vec(headers).unwrap_or_default();
    let mut out = Vec::with_capacity(6 + json.len() + payload.len());
    out.push(RETAINED_V1);
    out.push(u8::from(flags.priority == Priority::High) | (flags.qos.min(2) << 1));
    out.extend_from_slice(&(json.len() as u32).to_le_bytes());
    out.extend_from_slice(&json);
    out.extend_from_slice(payload);
    out
}

/// The payload, headers and flags of a retained bucket value; `None` for
/// one Wharf did not write.
pub fn retained_decode(value: &bytes::Bytes) -> Option<(bytes::Bytes, Headers, Flags)> {
    if value.len() < 6 || value[0] != RETAINED_V1 {
        return None;
    }
    let bits = value[1];
    let len = u32::from_le_bytes(value[2..6].try_into().ok()?) as usize;
    let end = 6usize.checked_add(len)?;
    let headers: Headers = serde_json::from_slice(value.get(6..end)?).ok()?;
    let flags = Flags {
        retain: true,
        priority: if bits & 1 == 1 {
            Priority::High
        } else {
            Priority::Normal
        },
        qos: (bits >> 1) & 3,
    };
    Some((value.slice(end..), headers, flags))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn headers_and_flags_round_trip(
            headers in prop::collection::btree_map(".{0,12}", ".{0,12}", 0..6),
            retain in any::<bool>(),
            high in any::<bool>(),
            qos in 0u8..3,
            epoch in any::<u64>(),
            seq in any::<u64>(),
            resent in any::<bool>(),
        ) {
            let flags = Flags {
                retain,
                priority: if high { Priority::High } else { Priority::Normal },
                qos,
            };
            let mut map = encode("node-a", &headers, flags);
            number(&mut map, &epoch_prefix(epoch), seq, resent);
            let d = decode(Some(&map));
            prop_assert_eq!(d.headers, headers);
            prop_assert_eq!(d.flags, flags);
            prop_assert!(d.from_node);
            prop_assert_eq!(map.get(NODE).map(|v| v.as_str()), Some("node-a"));
            prop_assert_eq!(d.seq, Some(Seq { epoch, seq }));
            prop_assert_eq!(d.resent, resent);
        }
    }

    #[test]
    fn awkward_headers_are_escaped_and_plain_ones_are_not() {
        let headers = Headers::from([
            ("trace".to_owned(), "abc".to_owned()),
            ("with:colon".to_owned(), "v".to_owned()),
            ("Wharf-Retain".to_owned(), "1".to_owned()),
            ("line".to_owned(), "a\r\nb".to_owned()),
        ]);
        let map = encode("n", &headers, Flags::default());
        assert_eq!(map.get("trace").map(|v| v.as_str()), Some("abc"));
        assert!(map.get("with:colon").is_none());
        assert!(map.get(RETAIN).is_none(), "a user header is not a flag");
        assert_eq!(map.get_all(ESCAPED).count(), 3);
        let d = decode(Some(&map));
        assert_eq!(d.headers, headers);
        assert!(!d.flags.retain);
    }

    #[test]
    fn retained_values_round_trip_and_others_are_refused() {
        let headers = Headers::from([("k".to_owned(), "v\r\n".to_owned())]);
        let flags = Flags {
            retain: true,
            priority: Priority::High,
            qos: 1,
        };
        let v = bytes::Bytes::from(retained_value(b"21.5", &headers, flags));
        let (p, h, f) = retained_decode(&v).unwrap();
        assert_eq!((&p[..], h, f), (&b"21.5"[..], headers, flags));
        assert!(retained_decode(&bytes::Bytes::from_static(b"plain")).is_none());
        assert!(retained_decode(&bytes::Bytes::from_static(b"W\0\xff\xff\xff\xff")).is_none());
    }

    #[test]
    fn messages_from_other_clients() {
        assert_eq!(decode(None), Decoded::default());
        let mut map = HeaderMap::new();
        map.insert("k", "v");
        map.insert(QOS, "7");
        map.insert("Wharf-Unknown", "x");
        map.insert(SEQ, "not-a-number");
        let d = decode(Some(&map));
        assert_eq!(d.headers, Headers::from([("k".to_owned(), "v".to_owned())]));
        assert_eq!(d.flags.qos, 2);
        assert_eq!(d.seq, None, "a number that does not parse is none");
    }
}
