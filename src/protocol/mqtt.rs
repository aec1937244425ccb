//! MQTT 3.1.1 (and 3.1) packets: a pure, incremental codec. Bytes in,
//! packets out, no I/O; every length is checked against the input and a
//! configurable maximum, so arbitrary input yields a packet, "need more",
//! or an error, never a panic (property tests hold it to that).
//!
//! Protocol level 5 (MQTT 5) is recognised in CONNECT and reported as
//! [`Connect::level`] so the server can refuse it with the right CONNACK.

use bytes::{Buf, BufMut, Bytes, BytesMut};

/// CONNACK return codes (MQTT 3.1.1 section 3.2.2.3).
pub mod connack {
    /// Connection accepted.
    pub const ACCEPTED: u8 = 0;
    /// The server does not support the protocol level asked for.
    pub const BAD_PROTOCOL: u8 = 1;
    /// The client id is not allowed.
    pub const BAD_CLIENT_ID: u8 = 2;
    /// The server cannot take the connection now.
    pub const UNAVAILABLE: u8 = 3;
    /// Bad user name or password.
    pub const BAD_CREDENTIALS: u8 = 4;
    /// Not authorised.
    pub const NOT_AUTHORIZED: u8 = 5;
}

/// SUBACK code of a refused subscription.
pub const SUBACK_FAILURE: u8 = 0x80;

/// A will message, published if the client goes away without DISCONNECT.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Will {
    /// Topic.
    pub topic: String,
    /// Payload.
    pub payload: Bytes,
    /// QoS 0-2.
    pub qos: u8,
    /// Publish it retained.
    pub retain: bool,
}

/// CONNECT.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Connect {
    /// Protocol level: 3 (MQTT 3.1), 4 (3.1.1), 5 (MQTT 5, refused).
    pub level: u8,
    /// Client identifier (may be empty with a clean session).
    pub client_id: String,
    /// Start afresh (and forget the session at disconnect).
    pub clean_session: bool,
    /// Keep-alive in seconds (0: none).
    pub keep_alive: u16,
    /// Will message.
    pub will: Option<Will>,
    /// User name.
    pub username: Option<String>,
    /// Password.
    pub password: Option<Bytes>,
}

/// PUBLISH.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Publish {
    /// A redelivery.
    pub dup: bool,
    /// QoS 0-2.
    pub qos: u8,
    /// Retain.
    pub retain: bool,
    /// Topic name.
    pub topic: String,
    /// Packet id (QoS 1 and 2 only).
    pub pid: Option<u16>,
    /// Payload.
    pub payload: Bytes,
}

/// A control packet.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Packet {
    /// CONNECT.
    Connect(Connect),
    /// CONNACK.
    ConnAck {
        /// The server kept a session for this client.
        session_present: bool,
        /// Return code ([`connack`]).
        code: u8,
    },
    /// PUBLISH.
    Publish(Publish),
    /// PUBACK (QoS 1).
    PubAck(u16),
    /// PUBREC (QoS 2, step 1).
    PubRec(u16),
    /// PUBREL (QoS 2, step 2).
    PubRel(u16),
    /// PUBCOMP (QoS 2, step 3).
    PubComp(u16),
    /// SUBSCRIBE: packet id, (filter, requested QoS) pairs.
    Subscribe(u16, Vec<(String, u8)>),
    /// SUBACK: packet id, granted QoS (or 0x80) per filter.
    SubAck(u16, Vec<u8>),
    /// UNSUBSCRIBE: packet id, filters.
    Unsubscribe(u16, Vec<String>),
    /// UNSUBACK.
    UnsubAck(u16),
    /// PINGREQ.
    PingReq,
    /// PINGRESP.
    PingResp,
    /// DISCONNECT.
    Disconnect,
}

/// Why bytes are not an MQTT packet. Any of these ends the connection.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MqttError {
    /// The remaining length is encoded in more than four bytes.
    #[error("malformed remaining length")]
    BadLength,
    /// The packet is larger than allowed.
    #[error("packet of {0} bytes is over the limit")]
    TooLarge(usize),
    /// The packet type or its flags are invalid.
    #[error("invalid packet type or flags: {0:#04x}")]
    BadHeader(u8),
    /// The packet's content is invalid.
    #[error("malformed packet: {0}")]
    Malformed(&'static str),
}

fn malformed(what: &'static str) -> MqttError {
    MqttError::Malformed(what)
}

/// Reads one packet from the front of `buf` if it holds a whole one
/// (consuming it); `Ok(None)` if more bytes are needed.
///
/// # Errors
/// [`MqttError`]: the stream cannot continue.
pub fn decode(buf: &mut BytesMut, max_packet: usize) -> Result<Option<Packet>, MqttError> {
    let Some(&first) = buf.first() else {
        return Ok(None);
    };
    // Refuse a bad first byte at once rather than waiting for the body
    // its length announces: on a raw TCP stream, bytes that are not MQTT
    // (an HTTP request, say) would otherwise hold the connection open.
    check_first(first)?;
    let mut len: usize = 0;
    let mut shift = 0;
    let mut header = 1;
    loop {
        let Some(&b) = buf.get(header) else {
            return Ok(None);
        };
        len |= usize::from(b & 0x7f) << shift;
        header += 1;
        if b & 0x80 == 0 {
            break;
        }
        shift += 7;
        if header > 4 {
            return Err(MqttError::BadLength);
        }
    }
    if len > max_packet {
        return Err(MqttError::TooLarge(len));
    }
    if buf.len() < header + len {
        return Ok(None);
    }
    let first = buf[0];
    buf.advance(header);
    let body = buf.split_to(len).freeze();
    parse(first, body).map(Some)
}

struct Reader(Bytes);

impl Reader {
    fn u8(&mut self) -> Result<u8, MqttError> {
        if self.0.is_empty() {
            return Err(malformed("truncated"));
        }
        Ok(self.0.get_u8())
    }

    fn u16(&mut self) -> Result<u16, MqttError> {
        if self.0.len() < 2 {
            return Err(malformed("truncated"));
        }
        Ok(self.0.get_u16())
    }

    fn bytes(&mut self) -> Result<Bytes, MqttError> {
        let n = usize::from(self.u16()?);
        if self.0.len() < n {
            return Err(malformed("truncated string"));
        }
        Ok(self.0.split_to(n))
    }

    fn string(&mut self) -> Result<String, MqttError> {
        let b = self.bytes()?;
        let s = std::str::from_utf8(&b).map_err(|_| malformed("string is not UTF-8"))?;
        if s.contains('\0') {
            return Err(malformed("string contains NUL"));
        }
        Ok(s.to_owned())
    }

    fn done(&self) -> Result<(), MqttError> {
        if self.0.is_empty() {
            Ok(())
        } else {
            Err(malformed("trailing bytes"))
        }
    }
}

/// Whether a fixed header's first byte is a packet type with the flags
/// MQTT 3.1.1 requires of it (§2.2.2).
fn check_first(first: u8) -> Result<(), MqttError> {
    let flags = first & 0x0f;
    let ok = match first >> 4 {
        // PUBLISH: any flags but QoS 3.
        3 => (flags >> 1) & 3 != 3,
        // PUBREL, SUBSCRIBE, UNSUBSCRIBE.
        6 | 8 | 10 => flags == 0b0010,
        1 | 2 | 4 | 5 | 7 | 9 | 11 | 12 | 13 | 14 => flags == 0,
        _ => false,
    };
    if ok {
        Ok(())
    } else {
        Err(MqttError::BadHeader(first))
    }
}

fn parse(first: u8, body: Bytes) -> Result<Packet, MqttError> {
    let kind = first >> 4;
    let flags = first & 0x0f;
    let mut r = Reader(body);
    let fixed = |want: u8| {
        if flags == want {
            Ok(())
        } else {
            Err(MqttError::BadHeader(first))
        }
    };
    let packet = match kind {
        1 => {
            fixed(0)?;
            Packet::Connect(parse_connect(&mut r)?)
        }
        2 => {
            fixed(0)?;
            let ack = r.u8()?;
            if ack > 1 {
                return Err(malformed("connack flags"));
            }
            Packet::ConnAck {
                session_present: ack == 1,
                code: r.u8()?,
            }
        }
        3 => {
            let qos = (flags >> 1) & 3;
            if qos == 3 {
                return Err(MqttError::BadHeader(first));
            }
            let topic = r.string()?;
            let pid = if qos > 0 {
                let pid = r.u16()?;
                if pid == 0 {
                    return Err(malformed("packet id 0"));
                }
                Some(pid)
            } else {
                None
            };
            let payload = std::mem::take(&mut r.0);
            return Ok(Packet::Publish(Publish {
                dup: flags & 8 != 0,
                qos,
                retain: flags & 1 != 0,
                topic,
                pid,
                payload,
            }));
        }
        4 | 5 | 7 | 11 => {
            fixed(0)?;
            let pid = r.u16()?;
            match kind {
                4 => Packet::PubAck(pid),
                5 => Packet::PubRec(pid),
                7 => Packet::PubComp(pid),
                _ => Packet::UnsubAck(pid),
            }
        }
        6 => {
            fixed(2)?;
            Packet::PubRel(r.u16()?)
        }
        8 => {
            fixed(2)?;
            let pid = r.u16()?;
            let mut filters = Vec::new();
            while !r.0.is_empty() {
                let f = r.string()?;
                let qos = r.u8()?;
                if qos > 2 {
                    return Err(malformed("requested QoS above 2"));
                }
                filters.push((f, qos));
            }
            if filters.is_empty() {
                return Err(malformed("SUBSCRIBE without filters"));
            }
            Packet::Subscribe(pid, filters)
        }
        9 => {
            fixed(0)?;
            let pid = r.u16()?;
            let codes = std::mem::take(&mut r.0).to_vec();
            Packet::SubAck(pid, codes)
        }
        10 => {
            fixed(2)?;
            let pid = r.u16()?;
            let mut filters = Vec::new();
            while !r.0.is_empty() {
                filters.push(r.string()?);
            }
            if filters.is_empty() {
                return Err(malformed("UNSUBSCRIBE without filters"));
            }
            Packet::Unsubscribe(pid, filters)
        }
        12 => {
            fixed(0)?;
            Packet::PingReq
        }
        13 => {
            fixed(0)?;
            Packet::PingResp
        }
        14 => {
            fixed(0)?;
            Packet::Disconnect
        }
        _ => return Err(MqttError::BadHeader(first)),
    };
    r.done()?;
    Ok(packet)
}

fn parse_connect(r: &mut Reader) -> Result<Connect, MqttError> {
    let name = r.bytes()?;
    let level = r.u8()?;
    let known = matches!((&name[..], level), (b"MQTT", 4 | 5) | (b"MQIsdp", 3));
    if !known {
        if &name[..] == b"MQTT" || &name[..] == b"MQIsdp" {
            // A level we do not speak: the caller refuses it with CONNACK 1.
            r.0.clear();
            return Ok(Connect {
                level,
                client_id: String::new(),
                clean_session: true,
                keep_alive: 0,
                will: None,
                username: None,
                password: None,
            });
        }
        return Err(malformed("unknown protocol name"));
    }
    let flags = r.u8()?;
    if flags & 1 != 0 {
        return Err(malformed("reserved connect flag set"));
    }
    let keep_alive = r.u16()?;
    if level == 5 {
        // MQTT 5: properties follow; the caller refuses the level anyway.
        r.0.clear();
        return Ok(Connect {
            level,
            client_id: String::new(),
            clean_session: true,
            keep_alive,
            will: None,
            username: None,
            password: None,
        });
    }
    let client_id = r.string()?;
    let will = if flags & 0x04 != 0 {
        let qos = (flags >> 3) & 3;
        if qos == 3 {
            return Err(malformed("will QoS 3"));
        }
        Some(Will {
            topic: r.string()?,
            payload: r.bytes()?,
            qos,
            retain: flags & 0x20 != 0,
        })
    } else {
        if flags & 0x38 != 0 {
            return Err(malformed("will QoS or retain without a will"));
        }
        None
    };
    let username = if flags & 0x80 != 0 {
        Some(r.string()?)
    } else {
        None
    };
    let password = if flags & 0x40 != 0 {
        Some(r.bytes()?)
    } else {
        None
    };
    r.done()?;
    Ok(Connect {
        level,
        client_id,
        clean_session: flags & 0x02 != 0,
        keep_alive,
        will,
        username,
        password,
    })
}

fn put_len(out: &mut BytesMut, mut len: usize) {
    loop {
        let mut b = (len % 128) as u8;
        len /= 128;
        if len > 0 {
            b |= 0x80;
        }
        out.put_u8(b);
        if len == 0 {
            break;
        }
    }
}

fn put_str(out: &mut BytesMut, s: &[u8]) {
    let n = s.len().min(usize::from(u16::MAX));
    out.put_u16(n as u16);
    out.put_slice(&s[..n]);
}

/// The encoded length of a string field.
fn str_len(s: &[u8]) -> usize {
    2 + s.len().min(usize::from(u16::MAX))
}

/// Writes a PUBLISH header and topic (everything but the payload), so the
/// payload can be sent as a shared buffer after it.
pub fn publish_head(out: &mut BytesMut, p: &Publish) {
    let first = 0x30 | (u8::from(p.dup) << 3) | ((p.qos & 3) << 1) | u8::from(p.retain);
    let len = str_len(p.topic.as_bytes()) + if p.qos > 0 { 2 } else { 0 } + p.payload.len();
    out.put_u8(first);
    put_len(out, len);
    put_str(out, p.topic.as_bytes());
    if p.qos > 0 {
        out.put_u16(p.pid.unwrap_or(1));
    }
}

/// Appends the encoding of `p` to `out`.
pub fn encode(p: &Packet, out: &mut BytesMut) {
    match p {
        Packet::Connect(c) => {
            let name: &[u8] = if c.level == 3 { b"MQIsdp" } else { b"MQTT" };
            let mut flags = 0u8;
            if c.clean_session {
                flags |= 0x02;
            }
            let mut len = str_len(name) + 4 + str_len(c.client_id.as_bytes());
            if let Some(w) = &c.will {
                flags |= 0x04 | ((w.qos & 3) << 3) | (u8::from(w.retain) << 5);
                len += str_len(w.topic.as_bytes()) + str_len(&w.payload);
            }
            if let Some(u) = &c.username {
                flags |= 0x80;
                len += str_len(u.as_bytes());
            }
            if let Some(pw) = &c.password {
                flags |= 0x40;
                len += str_len(pw);
            }
            out.put_u8(0x10);
            put_len(out, len);
            put_str(out, name);
            out.put_u8(c.level);
            out.put_u8(flags);
            out.put_u16(c.keep_alive);
            put_str(out, c.client_id.as_bytes());
            if let Some(w) = &c.will {
                put_str(out, w.topic.as_bytes());
                put_str(out, &w.payload);
            }
            if let Some(u) = &c.username {
                put_str(out, u.as_bytes());
            }
            if let Some(pw) = &c.password {
                put_str(out, pw);
            }
        }
        Packet::ConnAck {
            session_present,
            code,
        } => out.put_slice(&[0x20, 2, u8::from(*session_present), *code]),
        Packet::Publish(p) => {
            publish_head(out, p);
            out.put_slice(&p.payload);
        }
        Packet::PubAck(pid) => ack(out, 0x40, *pid),
        Packet::PubRec(pid) => ack(out, 0x50, *pid),
        Packet::PubRel(pid) => ack(out, 0x62, *pid),
        Packet::PubComp(pid) => ack(out, 0x70, *pid),
        Packet::UnsubAck(pid) => ack(out, 0xb0, *pid),
        Packet::Subscribe(pid, filters) => {
            let len = 2 + filters
                .iter()
                .map(|(f, _)| str_len(f.as_bytes()) + 1)
                .sum::<usize>();
            out.put_u8(0x82);
            put_len(out, len);
            out.put_u16(*pid);
            for (f, q) in filters {
                put_str(out, f.as_bytes());
                out.put_u8(*q);
            }
        }
        Packet::SubAck(pid, codes) => {
            out.put_u8(0x90);
            put_len(out, 2 + codes.len());
            out.put_u16(*pid);
            out.put_slice(codes);
        }
        Packet::Unsubscribe(pid, filters) => {
            let len = 2 + filters.iter().map(|f| str_len(f.as_bytes())).sum::<usize>();
            out.put_u8(0xa2);
            put_len(out, len);
            out.put_u16(*pid);
            for f in filters {
                put_str(out, f.as_bytes());
            }
        }
        Packet::PingReq => out.put_slice(&[0xc0, 0]),
        Packet::PingResp => out.put_slice(&[0xd0, 0]),
        Packet::Disconnect => out.put_slice(&[0xe0, 0]),
    }
}

fn ack(out: &mut BytesMut, first: u8, pid: u16) {
    out.put_u8(first);
    out.put_u8(2);
    out.put_u16(pid);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn round_trip(p: Packet) {
        let mut out = BytesMut::new();
        encode(&p, &mut out);
        let mut buf = out.clone();
        assert_eq!(
            decode(&mut buf, 1 << 20).unwrap(),
            Some(p.clone()),
            "{out:?}"
        );
        assert!(buf.is_empty());
        // Split anywhere: "need more" until the last byte.
        for cut in 0..out.len() {
            let mut part = BytesMut::from(&out[..cut]);
            assert_eq!(decode(&mut part, 1 << 20).unwrap(), None, "cut {cut}");
        }
    }

    #[test]
    fn every_packet_round_trips_and_waits_for_its_last_byte() {
        round_trip(Packet::Connect(Connect {
            level: 4,
            client_id: "c1".into(),
            clean_session: false,
            keep_alive: 30,
            will: Some(Will {
                topic: "w".into(),
                payload: Bytes::from_static(b"bye"),
                qos: 1,
                retain: true,
            }),
            username: Some("u".into()),
            password: Some(Bytes::from_static(b"p")),
        }));
        round_trip(Packet::ConnAck {
            session_present: true,
            code: 0,
        });
        round_trip(Packet::Publish(Publish {
            dup: true,
            qos: 2,
            retain: true,
            topic: "a/b".into(),
            pid: Some(7),
            payload: Bytes::from(vec![0u8; 300]),
        }));
        round_trip(Packet::Publish(Publish {
            dup: false,
            qos: 0,
            retain: false,
            topic: "t".into(),
            pid: None,
            payload: Bytes::new(),
        }));
        for p in [
            Packet::PubAck(1),
            Packet::PubRec(2),
            Packet::PubRel(3),
            Packet::PubComp(4),
            Packet::UnsubAck(5),
            Packet::PingReq,
            Packet::PingResp,
            Packet::Disconnect,
        ] {
            round_trip(p);
        }
        round_trip(Packet::Subscribe(
            9,
            vec![("a/+".into(), 1), ("#".into(), 2)],
        ));
        round_trip(Packet::SubAck(9, vec![1, 0x80]));
        round_trip(Packet::Unsubscribe(10, vec!["a/+".into()]));
    }

    #[test]
    fn bad_input_is_an_error_not_a_panic() {
        let cases: &[&[u8]] = &[
            &[0x00, 0],                         // type 0
            &[0xf0, 0],                         // type 15
            &[0x36, 3, 0, 1, b'a'],             // QoS 3
            &[0x62 & 0xf0, 2, 0, 1],            // PUBREL without its flags
            &[0x30, 0xff, 0xff, 0xff, 0xff, 1], // length in 5 bytes
            &[0x82, 2, 0, 1],                   // SUBSCRIBE without filters
            &[0x40, 3, 0, 1, 9],                // PUBACK with a trailing byte
            &[0x32, 5, 0, 1, b'a', 0, 0],       // QoS 1 with packet id 0
        ];
        for c in cases {
            let mut buf = BytesMut::from(*c);
            assert!(decode(&mut buf, 1 << 20).is_err(), "{c:?}");
        }
        let mut big = BytesMut::from(&[0x30u8, 0x80, 0x80, 0x01][..]);
        assert_eq!(decode(&mut big, 1000), Err(MqttError::TooLarge(16384)));
    }

    #[test]
    fn mqtt5_and_unknown_levels_are_reported_for_refusal() {
        // With properties and a payload after the variable header.
        let mut buf = BytesMut::from(
            &[
                0x10u8, 15, 0, 4, b'M', b'Q', b'T', b'T', 5, 2, 0, 60, 0, 0, 2, b'i', b'd',
            ][..],
        );
        match decode(&mut buf, 1 << 20).unwrap() {
            Some(Packet::Connect(c)) => assert_eq!(c.level, 5),
            other => panic!("{other:?}"),
        }
    }
}
