//! Decoding whole packets at a connection's level: the fixed header (type,
//! flags, remaining length bounded before waiting for the body), then the
//! packet's variable header and payload by the rules of 3.1.1 or of MQTT 5.

use bytes::{Buf, Bytes, BytesMut};

use super::properties::{Ctx, Properties};
use super::wire::Reader;
use super::{
    Ack, ConnAck, Connect, LEVEL_3_1, LEVEL_3_1_1, LEVEL_5, MqttError, Packet, PublishPacket,
    Reasoned, SubAck, SubOptions, Subscribe, UnsubAck, Unsubscribe, Will, is_v5, malformed, reason,
};

/// What packets are decoded from: a connection's own buffer
/// (`BytesMut`), or bytes that arrived whole (`Bytes`: a WebSocket
/// message, a read), whose packets' payloads are then views of them, not
/// copies.
pub trait PacketBuf: std::ops::Deref<Target = [u8]> + Buf {
    /// The first `len` bytes, taken off the front.
    fn take_front(&mut self, len: usize) -> Bytes;
}

impl PacketBuf for BytesMut {
    fn take_front(&mut self, len: usize) -> Bytes {
        self.split_to(len).freeze()
    }
}

impl PacketBuf for Bytes {
    fn take_front(&mut self, len: usize) -> Bytes {
        self.split_to(len)
    }
}

/// Reads one packet from the front of `buf` if it holds a whole one
/// (consuming it); `Ok(None)` if more bytes are needed. `level` is the
/// connection's protocol level, which decides how every packet but CONNECT
/// (which carries its own) is read: 5 for MQTT 5, anything else 3.1.1.
///
/// # Errors
/// [`MqttError`]: the stream cannot continue.
pub fn decode<B: PacketBuf>(
    buf: &mut B,
    max_packet: usize,
    level: u8,
) -> Result<Option<Packet>, MqttError> {
    let Some(&first) = buf.first() else {
        return Ok(None);
    };
    // Refuse a bad first byte at once rather than waiting for the body
    // its length announces: on a raw TCP stream, bytes that are not MQTT
    // (an HTTP request, say) would otherwise hold the connection open.
    check_first(first, level)?;
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
            // MQTT 5 requires the shortest encoding (MQTT-1.5.5-1).
            if is_v5(level) && b == 0 && header > 2 {
                return Err(MqttError::BadLength);
            }
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
    let body = buf.take_front(len);
    parse(first, Reader(body), level).map(Some)
}

/// Whether a fixed header's first byte is a packet type with the flags
/// MQTT requires of it (3.1.1 §2.2.2, MQTT 5 §2.1.3); AUTH (15) exists
/// only at level 5.
fn check_first(first: u8, level: u8) -> Result<(), MqttError> {
    let flags = first & 0x0f;
    let ok = match first >> 4 {
        // PUBLISH: any flags but QoS 3.
        3 => (flags >> 1) & 3 != 3,
        // PUBREL, SUBSCRIBE, UNSUBSCRIBE.
        6 | 8 | 10 => flags == 0b0010,
        1 | 2 | 4 | 5 | 7 | 9 | 11 | 12 | 13 | 14 => flags == 0,
        15 => is_v5(level) && flags == 0,
        _ => false,
    };
    if ok {
        Ok(())
    } else {
        Err(MqttError::BadHeader(first))
    }
}

/// A reason code, refused unless the packet type may carry it.
fn reason_code(r: &mut Reader, kind: u8, ctx: Ctx) -> Result<u8, MqttError> {
    let code = r.u8()?;
    if reason::allowed(kind, code) {
        Ok(code)
    } else {
        Err(MqttError::BadReasonCode {
            packet: ctx.name(),
            code,
        })
    }
}

/// A packet id that must not be 0 (MQTT-2.2.1-3).
fn nonzero_pid(r: &mut Reader) -> Result<u16, MqttError> {
    match r.u16()? {
        0 => Err(malformed("packet id 0")),
        pid => Ok(pid),
    }
}

/// PUBACK, PUBREC, PUBREL, PUBCOMP (MQTT 5 §3.4.2): the reason code and
/// the properties may be left out, from the end (remaining length 2 or 3).
fn parse_ack(r: &mut Reader, kind: u8, ctx: Ctx, v5: bool) -> Result<Ack, MqttError> {
    let mut ack = Ack::new(r.u16()?);
    if v5 && !r.is_empty() {
        ack.reason = reason_code(r, kind, ctx)?;
        if !r.is_empty() {
            ack.props = Properties::read(r, ctx)?;
        }
    }
    Ok(ack)
}

/// DISCONNECT or AUTH at level 5: remaining length 0 is success without
/// properties, 1 a reason code without properties.
fn parse_reasoned(r: &mut Reader, kind: u8, ctx: Ctx) -> Result<Reasoned, MqttError> {
    let mut out = Reasoned::default();
    if !r.is_empty() {
        out.reason = reason_code(r, kind, ctx)?;
        if !r.is_empty() {
            out.props = Properties::read(r, ctx)?;
        }
    }
    Ok(out)
}

fn parse(first: u8, mut r: Reader, level: u8) -> Result<Packet, MqttError> {
    let kind = first >> 4;
    let flags = first & 0x0f;
    let v5 = is_v5(level);
    let r = &mut r;
    let packet = match kind {
        1 => Packet::Connect(Box::new(parse_connect(r)?)),
        2 => {
            let ack = r.u8()?;
            if ack > 1 {
                return Err(malformed("connack flags"));
            }
            let session_present = ack == 1;
            if v5 {
                let code = reason_code(r, kind, Ctx::ConnAck)?;
                if session_present && code != reason::SUCCESS {
                    return Err(MqttError::ProtocolError(
                        "session present with a refusing CONNACK",
                    ));
                }
                Packet::ConnAck(ConnAck {
                    session_present,
                    code,
                    props: Properties::read(r, Ctx::ConnAck)?,
                })
            } else {
                Packet::connack(session_present, r.u8()?)
            }
        }
        3 => return parse_publish(flags, r, v5).map(Packet::Publish),
        4 => Packet::PubAck(parse_ack(r, kind, Ctx::PubAck, v5)?),
        5 => Packet::PubRec(parse_ack(r, kind, Ctx::PubRec, v5)?),
        6 => Packet::PubRel(parse_ack(r, kind, Ctx::PubRel, v5)?),
        7 => Packet::PubComp(parse_ack(r, kind, Ctx::PubComp, v5)?),
        8 => {
            let (pid, props) = if v5 {
                (nonzero_pid(r)?, Properties::read(r, Ctx::Subscribe)?)
            } else {
                (r.u16()?, Properties::default())
            };
            let mut filters = Vec::new();
            while !r.is_empty() {
                let f = r.string()?;
                let o = r.u8()?;
                let opts = if v5 {
                    if o & 0xc0 != 0 {
                        return Err(malformed("reserved subscription option bits set"));
                    }
                    let retain_handling = (o >> 4) & 3;
                    if retain_handling == 3 {
                        return Err(MqttError::ProtocolError("retain handling 3"));
                    }
                    SubOptions {
                        qos: o & 3,
                        no_local: o & 0x04 != 0,
                        retain_as_published: o & 0x08 != 0,
                        retain_handling,
                    }
                } else {
                    SubOptions::qos(o)
                };
                if opts.qos > 2 {
                    return Err(malformed("requested QoS above 2"));
                }
                filters.push((f, opts));
            }
            if filters.is_empty() {
                return Err(malformed("SUBSCRIBE without filters"));
            }
            Packet::Subscribe(Subscribe {
                pid,
                filters,
                props,
            })
        }
        9 => {
            let pid = r.u16()?;
            let props = if v5 {
                Properties::read(r, Ctx::SubAck)?
            } else {
                Properties::default()
            };
            let codes = r.rest().to_vec();
            if v5 {
                if let Some(&code) = codes.iter().find(|&&c| !reason::allowed(kind, c)) {
                    return Err(MqttError::BadReasonCode {
                        packet: "SUBACK",
                        code,
                    });
                }
            }
            Packet::SubAck(SubAck { pid, codes, props })
        }
        10 => {
            let (pid, props) = if v5 {
                (nonzero_pid(r)?, Properties::read(r, Ctx::Unsubscribe)?)
            } else {
                (r.u16()?, Properties::default())
            };
            let mut filters = Vec::new();
            while !r.is_empty() {
                filters.push(r.string()?);
            }
            if filters.is_empty() {
                return Err(malformed("UNSUBSCRIBE without filters"));
            }
            Packet::Unsubscribe(Unsubscribe {
                pid,
                filters,
                props,
            })
        }
        11 => {
            let pid = r.u16()?;
            if v5 {
                let props = Properties::read(r, Ctx::UnsubAck)?;
                let codes = r.rest().to_vec();
                if let Some(&code) = codes.iter().find(|&&c| !reason::allowed(kind, c)) {
                    return Err(MqttError::BadReasonCode {
                        packet: "UNSUBACK",
                        code,
                    });
                }
                Packet::UnsubAck(UnsubAck { pid, codes, props })
            } else {
                Packet::unsuback(pid)
            }
        }
        12 => Packet::PingReq,
        13 => Packet::PingResp,
        14 if v5 => Packet::Disconnect(parse_reasoned(r, kind, Ctx::Disconnect)?),
        14 => Packet::disconnect(),
        15 => Packet::Auth(parse_reasoned(r, kind, Ctx::Auth)?),
        _ => return Err(MqttError::BadHeader(first)),
    };
    r.done()?;
    Ok(packet)
}

fn parse_publish(flags: u8, r: &mut Reader, v5: bool) -> Result<PublishPacket, MqttError> {
    let qos = (flags >> 1) & 3;
    let dup = flags & 8 != 0;
    let topic = r.string()?;
    let pid = if qos > 0 { Some(nonzero_pid(r)?) } else { None };
    let props = if v5 {
        if qos == 0 && dup {
            return Err(MqttError::ProtocolError("DUP set on a QoS 0 PUBLISH"));
        }
        let props = Properties::read(r, Ctx::Publish)?;
        if topic.is_empty() && props.topic_alias.is_none() {
            return Err(MqttError::ProtocolError(
                "empty topic name without a topic alias",
            ));
        }
        props
    } else {
        Properties::default()
    };
    Ok(PublishPacket {
        dup,
        qos,
        retain: flags & 1 != 0,
        topic,
        pid,
        payload: r.rest(),
        props,
    })
}

fn parse_connect(r: &mut Reader) -> Result<Connect, MqttError> {
    let name = r.bytes()?;
    let level = r.u8()?;
    let known = matches!(
        (&name[..], level),
        (b"MQTT", LEVEL_3_1_1 | LEVEL_5) | (b"MQIsdp", LEVEL_3_1)
    );
    if !known {
        if &name[..] == b"MQTT" || &name[..] == b"MQIsdp" {
            // A level we do not speak: the caller refuses it with CONNACK 1.
            r.rest();
            return Ok(Connect {
                level,
                client_id: String::new(),
                clean_session: true,
                keep_alive: 0,
                will: None,
                username: None,
                password: None,
                props: Properties::default(),
            });
        }
        return Err(malformed("unknown protocol name"));
    }
    let v5 = is_v5(level);
    let flags = r.u8()?;
    if flags & 1 != 0 {
        return Err(malformed("reserved connect flag set"));
    }
    let keep_alive = r.u16()?;
    let props = if v5 {
        Properties::read(r, Ctx::Connect)?
    } else {
        Properties::default()
    };
    let client_id = r.string()?;
    let will = if flags & 0x04 != 0 {
        let qos = (flags >> 3) & 3;
        if qos == 3 {
            return Err(malformed("will QoS 3"));
        }
        let props = if v5 {
            Properties::read(r, Ctx::Will)?
        } else {
            Properties::default()
        };
        Some(Will {
            topic: r.string()?,
            payload: r.bytes()?,
            qos,
            retain: flags & 0x20 != 0,
            props,
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
        props,
    })
}
