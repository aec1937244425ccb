//! Encoding whole packets at a connection's level. At levels 3 and 4 the
//! bytes are exactly MQTT 3.1.1's (reason codes, properties and
//! subscription options other than QoS are left out); at level 5 each
//! packet is written in its shortest form (an ack's reason code and
//! properties left out when they are success and none).

use bytes::{BufMut, BytesMut};

use super::properties::{Ctx, Properties};
use super::wire::{put_len, put_str, str_len, var_int_len};
use super::{Ack, Packet, PublishPacket, Reasoned, is_v5, reason};

/// The length of a property block (property length and properties).
fn props_len(p: &Properties, ctx: Ctx) -> (usize, usize) {
    let inner = p.len(ctx);
    (inner, var_int_len(inner) + inner)
}

/// Writes a PUBLISH header, topic and (at level 5) properties: everything
/// but the payload, so the payload can be sent as a shared buffer after it.
pub fn publish_head(out: &mut BytesMut, p: &PublishPacket, level: u8) {
    let first = 0x30 | (u8::from(p.dup) << 3) | ((p.qos & 3) << 1) | u8::from(p.retain);
    let (inner, props) = if is_v5(level) {
        props_len(&p.props, Ctx::Publish)
    } else {
        (0, 0)
    };
    let len = str_len(p.topic.as_bytes()) + if p.qos > 0 { 2 } else { 0 } + props + p.payload.len();
    out.put_u8(first);
    put_len(out, len);
    put_str(out, p.topic.as_bytes());
    if p.qos > 0 {
        out.put_u16(p.pid.unwrap_or(1));
    }
    if is_v5(level) {
        p.props.write(Ctx::Publish, inner, out);
    }
}

/// Appends the encoding of `p` to `out`. `level` is the connection's
/// protocol level (5 for MQTT 5, anything else 3.1.1); CONNECT is written
/// at its own [`Connect::level`](super::Connect::level), and AUTH always in
/// the MQTT 5 form, the only one it has.
pub fn encode(p: &Packet, out: &mut BytesMut, level: u8) {
    let v5 = is_v5(level);
    match p {
        Packet::Connect(c) => {
            let v5 = is_v5(c.level);
            let name: &[u8] = if c.level == 3 { b"MQIsdp" } else { b"MQTT" };
            let mut flags = 0u8;
            if c.clean_session {
                flags |= 0x02;
            }
            let (inner, props) = if v5 {
                props_len(&c.props, Ctx::Connect)
            } else {
                (0, 0)
            };
            let mut will_inner = 0;
            let mut len = str_len(name) + 4 + props + str_len(c.client_id.as_bytes());
            if let Some(w) = &c.will {
                flags |= 0x04 | ((w.qos & 3) << 3) | (u8::from(w.retain) << 5);
                len += str_len(w.topic.as_bytes()) + str_len(&w.payload);
                if v5 {
                    let (i, n) = props_len(&w.props, Ctx::Will);
                    will_inner = i;
                    len += n;
                }
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
            if v5 {
                c.props.write(Ctx::Connect, inner, out);
            }
            put_str(out, c.client_id.as_bytes());
            if let Some(w) = &c.will {
                if v5 {
                    w.props.write(Ctx::Will, will_inner, out);
                }
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
        Packet::ConnAck(a) => {
            let sp = u8::from(a.session_present);
            if v5 {
                let (inner, props) = props_len(&a.props, Ctx::ConnAck);
                out.put_u8(0x20);
                put_len(out, 2 + props);
                out.put_slice(&[sp, a.code]);
                a.props.write(Ctx::ConnAck, inner, out);
            } else {
                out.put_slice(&[0x20, 2, sp, a.code]);
            }
        }
        Packet::Publish(p) => {
            publish_head(out, p, level);
            out.put_slice(&p.payload);
        }
        Packet::PubAck(a) => ack(out, 0x40, a, Ctx::PubAck, v5),
        Packet::PubRec(a) => ack(out, 0x50, a, Ctx::PubRec, v5),
        Packet::PubRel(a) => ack(out, 0x62, a, Ctx::PubRel, v5),
        Packet::PubComp(a) => ack(out, 0x70, a, Ctx::PubComp, v5),
        Packet::Subscribe(s) => {
            let (inner, props) = if v5 {
                props_len(&s.props, Ctx::Subscribe)
            } else {
                (0, 0)
            };
            let len = 2
                + props
                + s.filters
                    .iter()
                    .map(|(f, _)| str_len(f.as_bytes()) + 1)
                    .sum::<usize>();
            out.put_u8(0x82);
            put_len(out, len);
            out.put_u16(s.pid);
            if v5 {
                s.props.write(Ctx::Subscribe, inner, out);
            }
            for (f, o) in &s.filters {
                put_str(out, f.as_bytes());
                if v5 {
                    out.put_u8(
                        (o.qos & 3)
                            | u8::from(o.no_local) << 2
                            | u8::from(o.retain_as_published) << 3
                            | (o.retain_handling & 3) << 4,
                    );
                } else {
                    out.put_u8(o.qos);
                }
            }
        }
        Packet::SubAck(a) => {
            out.put_u8(0x90);
            if v5 {
                let (inner, props) = props_len(&a.props, Ctx::SubAck);
                put_len(out, 2 + props + a.codes.len());
                out.put_u16(a.pid);
                a.props.write(Ctx::SubAck, inner, out);
            } else {
                put_len(out, 2 + a.codes.len());
                out.put_u16(a.pid);
            }
            out.put_slice(&a.codes);
        }
        Packet::Unsubscribe(u) => {
            let (inner, props) = if v5 {
                props_len(&u.props, Ctx::Unsubscribe)
            } else {
                (0, 0)
            };
            let len = 2
                + props
                + u.filters
                    .iter()
                    .map(|f| str_len(f.as_bytes()))
                    .sum::<usize>();
            out.put_u8(0xa2);
            put_len(out, len);
            out.put_u16(u.pid);
            if v5 {
                u.props.write(Ctx::Unsubscribe, inner, out);
            }
            for f in &u.filters {
                put_str(out, f.as_bytes());
            }
        }
        Packet::UnsubAck(a) => {
            out.put_u8(0xb0);
            if v5 {
                let (inner, props) = props_len(&a.props, Ctx::UnsubAck);
                put_len(out, 2 + props + a.codes.len());
                out.put_u16(a.pid);
                a.props.write(Ctx::UnsubAck, inner, out);
                out.put_slice(&a.codes);
            } else {
                out.put_u8(2);
                out.put_u16(a.pid);
            }
        }
        Packet::PingReq => out.put_slice(&[0xc0, 0]),
        Packet::PingResp => out.put_slice(&[0xd0, 0]),
        Packet::Disconnect(d) if v5 => reasoned(out, 0xe0, d, Ctx::Disconnect),
        Packet::Disconnect(_) => out.put_slice(&[0xe0, 0]),
        Packet::Auth(a) => reasoned(out, 0xf0, a, Ctx::Auth),
    }
}

/// PUBACK, PUBREC, PUBREL, PUBCOMP: the packet id, then at level 5 the
/// reason code and properties, each left out when it and what follows it
/// are success and none.
fn ack(out: &mut BytesMut, first: u8, a: &Ack, ctx: Ctx, v5: bool) {
    out.put_u8(first);
    let (inner, props) = if v5 { props_len(&a.props, ctx) } else { (0, 0) };
    if !v5 || (inner == 0 && a.reason == reason::SUCCESS) {
        out.put_u8(2);
        out.put_u16(a.pid);
    } else if inner == 0 {
        out.put_u8(3);
        out.put_u16(a.pid);
        out.put_u8(a.reason);
    } else {
        put_len(out, 3 + props);
        out.put_u16(a.pid);
        out.put_u8(a.reason);
        a.props.write(ctx, inner, out);
    }
}

/// DISCONNECT or AUTH at level 5, in its shortest form.
fn reasoned(out: &mut BytesMut, first: u8, d: &Reasoned, ctx: Ctx) {
    out.put_u8(first);
    let (inner, props) = props_len(&d.props, ctx);
    if inner == 0 && d.reason == reason::SUCCESS {
        out.put_u8(0);
    } else if inner == 0 {
        out.put_u8(1);
        out.put_u8(d.reason);
    } else {
        put_len(out, 1 + props);
        out.put_u8(d.reason);
        d.props.write(ctx, inner, out);
    }
}
