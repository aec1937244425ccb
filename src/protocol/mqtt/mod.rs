//! MQTT packets of protocol levels 3 (MQTT 3.1), 4 (3.1.1) and 5 (MQTT 5):
//! a pure, incremental codec. Bytes in, packets out, no I/O; every length
//! is checked against the input and a configurable maximum, so arbitrary
//! input yields a packet, "need more", or an error, never a panic
//! (property tests hold it to that).
//!
//! One set of types serves every level. A connection's level is known once
//! its CONNECT is read (CONNECT carries it), so [`decode`], [`encode`] and
//! [`publish_head`] take the level of the connection for every other
//! packet. At levels 3 and 4 the MQTT 5 parts of a packet (reason codes on
//! acks, [`Properties`], subscription options other than QoS) are neither
//! read nor written, and the bytes are exactly those of MQTT 3.1.1; at
//! level 5 they are, with the MQTT 5.0 rules enforced on decode.
//!
//! - `mod.rs` (here): the packet types, reason codes and errors.
//! - `wire.rs`: reading and writing the primitive fields (integers,
//!   variable byte integers, strings, binary data).
//! - `properties.rs`: [`Properties`], where each property may appear, and
//!   its encoding.
//! - `decode.rs` / `encode.rs`: whole packets, both levels.

use bytes::Bytes;

mod decode;
mod encode;
mod properties;
mod wire;

#[cfg(test)]
mod tests;

pub use decode::decode;
pub use encode::{encode, publish_head};
pub use properties::{Properties, PropertySet, property};

/// Protocol level of MQTT 3.1 (protocol name `MQIsdp`), for CONNECT and for
/// choosing the codec's rules.
pub const LEVEL_3_1: u8 = 3;
/// Protocol level of MQTT 3.1.1, the level Wharf's sessions and client speak.
pub const LEVEL_3_1_1: u8 = 4;
/// Protocol level of MQTT 5, which turns on reason codes and properties.
pub const LEVEL_5: u8 = 5;

/// Whether `level` is decoded and encoded by the MQTT 5 rules.
const fn is_v5(level: u8) -> bool {
    level == LEVEL_5
}

/// CONNACK return codes of MQTT 3.1.1 (section 3.2.2.3), and how they map
/// to and from MQTT 5 CONNACK reason codes ([`reason`]).
pub mod connack {
    use super::reason;

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

    /// The MQTT 3.1.1 return code closest to an MQTT 5 CONNACK reason
    /// code, so one refusal decision can be answered at either level:
    /// success is 0; unsupported protocol version 1; client identifier not
    /// valid 2; bad user name or password 4; not authorized, banned and
    /// bad authentication method 5; any other refusal 3 (unavailable).
    #[must_use]
    pub const fn to_v3(code: u8) -> u8 {
        match code {
            reason::SUCCESS => ACCEPTED,
            reason::UNSUPPORTED_PROTOCOL_VERSION => BAD_PROTOCOL,
            reason::CLIENT_IDENTIFIER_NOT_VALID => BAD_CLIENT_ID,
            reason::BAD_USER_NAME_OR_PASSWORD => BAD_CREDENTIALS,
            reason::NOT_AUTHORIZED | reason::BANNED | reason::BAD_AUTHENTICATION_METHOD => {
                NOT_AUTHORIZED
            }
            _ => UNAVAILABLE,
        }
    }

    /// The MQTT 5 CONNACK reason code of an MQTT 3.1.1 return code (0 to
    /// 5 map one to one; anything else is unspecified error, 0x80), the
    /// inverse of [`to_v3`] on the codes 3.1.1 has.
    #[must_use]
    pub const fn to_v5(code: u8) -> u8 {
        match code {
            ACCEPTED => reason::SUCCESS,
            BAD_PROTOCOL => reason::UNSUPPORTED_PROTOCOL_VERSION,
            BAD_CLIENT_ID => reason::CLIENT_IDENTIFIER_NOT_VALID,
            UNAVAILABLE => reason::SERVER_UNAVAILABLE,
            BAD_CREDENTIALS => reason::BAD_USER_NAME_OR_PASSWORD,
            NOT_AUTHORIZED => reason::NOT_AUTHORIZED,
            _ => reason::UNSPECIFIED_ERROR,
        }
    }
}

/// SUBACK code of a refused subscription (MQTT 3.1.1; MQTT 5 calls 0x80
/// "unspecified error" and has more specific ones, see [`reason`]).
pub const SUBACK_FAILURE: u8 = 0x80;

/// MQTT 5 reason codes (section 2.4), named so the session states why it
/// refuses or ends something. Codes below 0x80 are successes.
///
/// Mapping to 3.1.1: CONNACK through [`connack::to_v3`]; a SUBACK code of
/// 0x80 or more is 0x80 in 3.1.1 ([`suback_to_v3`]); PUBACK, PUBREC,
/// PUBREL, PUBCOMP, UNSUBACK and DISCONNECT have no code in 3.1.1, so
/// encoding them at level 3 or 4 leaves it out.
pub mod reason {
    /// Success (also normal disconnection and granted QoS 0).
    pub const SUCCESS: u8 = 0x00;
    /// DISCONNECT: normal disconnection.
    pub const NORMAL_DISCONNECTION: u8 = 0x00;
    /// SUBACK: granted QoS 0.
    pub const GRANTED_QOS_0: u8 = 0x00;
    /// SUBACK: granted QoS 1.
    pub const GRANTED_QOS_1: u8 = 0x01;
    /// SUBACK: granted QoS 2.
    pub const GRANTED_QOS_2: u8 = 0x02;
    /// DISCONNECT from the client: publish the will anyway.
    pub const DISCONNECT_WITH_WILL: u8 = 0x04;
    /// PUBACK, PUBREC: accepted, but nobody subscribes.
    pub const NO_MATCHING_SUBSCRIBERS: u8 = 0x10;
    /// UNSUBACK: there was no such subscription.
    pub const NO_SUBSCRIPTION_EXISTED: u8 = 0x11;
    /// AUTH: continue the authentication exchange.
    pub const CONTINUE_AUTHENTICATION: u8 = 0x18;
    /// AUTH: start a re-authentication.
    pub const RE_AUTHENTICATE: u8 = 0x19;
    /// Unspecified error.
    pub const UNSPECIFIED_ERROR: u8 = 0x80;
    /// The packet could not be parsed.
    pub const MALFORMED_PACKET: u8 = 0x81;
    /// The packet broke a rule of the protocol.
    pub const PROTOCOL_ERROR: u8 = 0x82;
    /// Valid, but refused by this implementation.
    pub const IMPLEMENTATION_SPECIFIC_ERROR: u8 = 0x83;
    /// CONNACK: the protocol level is not served.
    pub const UNSUPPORTED_PROTOCOL_VERSION: u8 = 0x84;
    /// CONNACK: the client identifier is not allowed.
    pub const CLIENT_IDENTIFIER_NOT_VALID: u8 = 0x85;
    /// CONNACK: bad user name or password.
    pub const BAD_USER_NAME_OR_PASSWORD: u8 = 0x86;
    /// Not authorized.
    pub const NOT_AUTHORIZED: u8 = 0x87;
    /// CONNACK: the server is not available.
    pub const SERVER_UNAVAILABLE: u8 = 0x88;
    /// The server is busy.
    pub const SERVER_BUSY: u8 = 0x89;
    /// CONNACK: the client is banned.
    pub const BANNED: u8 = 0x8A;
    /// DISCONNECT: the server is shutting down.
    pub const SERVER_SHUTTING_DOWN: u8 = 0x8B;
    /// The authentication method is not supported (also: enhanced
    /// authentication refused).
    pub const BAD_AUTHENTICATION_METHOD: u8 = 0x8C;
    /// DISCONNECT: no packet within 1.5 times the keep-alive.
    pub const KEEP_ALIVE_TIMEOUT: u8 = 0x8D;
    /// DISCONNECT: another connection took the session over.
    pub const SESSION_TAKEN_OVER: u8 = 0x8E;
    /// The topic filter is not valid.
    pub const TOPIC_FILTER_INVALID: u8 = 0x8F;
    /// The topic name is not valid.
    pub const TOPIC_NAME_INVALID: u8 = 0x90;
    /// The packet identifier is already in use.
    pub const PACKET_IDENTIFIER_IN_USE: u8 = 0x91;
    /// PUBREL, PUBCOMP: the packet identifier is not known.
    pub const PACKET_IDENTIFIER_NOT_FOUND: u8 = 0x92;
    /// DISCONNECT: more QoS 1/2 publishes in flight than receive maximum.
    pub const RECEIVE_MAXIMUM_EXCEEDED: u8 = 0x93;
    /// DISCONNECT: a topic alias of 0, over the maximum, or unknown.
    pub const TOPIC_ALIAS_INVALID: u8 = 0x94;
    /// The packet is over the maximum packet size.
    pub const PACKET_TOO_LARGE: u8 = 0x95;
    /// DISCONNECT: the message rate is too high.
    pub const MESSAGE_RATE_TOO_HIGH: u8 = 0x96;
    /// A quota was exceeded.
    pub const QUOTA_EXCEEDED: u8 = 0x97;
    /// DISCONNECT: an administrator ended the connection.
    pub const ADMINISTRATIVE_ACTION: u8 = 0x98;
    /// The payload does not match its payload format indicator.
    pub const PAYLOAD_FORMAT_INVALID: u8 = 0x99;
    /// Retained messages are not supported.
    pub const RETAIN_NOT_SUPPORTED: u8 = 0x9A;
    /// The QoS is not supported.
    pub const QOS_NOT_SUPPORTED: u8 = 0x9B;
    /// Use another server (temporarily).
    pub const USE_ANOTHER_SERVER: u8 = 0x9C;
    /// The server has moved (permanently).
    pub const SERVER_MOVED: u8 = 0x9D;
    /// Shared subscriptions are not supported.
    pub const SHARED_SUBSCRIPTIONS_NOT_SUPPORTED: u8 = 0x9E;
    /// Connection rate exceeded.
    pub const CONNECTION_RATE_EXCEEDED: u8 = 0x9F;
    /// DISCONNECT: the maximum connection time is over.
    pub const MAXIMUM_CONNECT_TIME: u8 = 0xA0;
    /// Subscription identifiers are not supported.
    pub const SUBSCRIPTION_IDENTIFIERS_NOT_SUPPORTED: u8 = 0xA1;
    /// Wildcard subscriptions are not supported.
    pub const WILDCARD_SUBSCRIPTIONS_NOT_SUPPORTED: u8 = 0xA2;

    /// Whether `code` is one the MQTT 5 spec allows in a packet of
    /// `packet_type` (the fixed header's type, 2 to 15), which decode
    /// enforces and encoders may check.
    #[must_use]
    pub fn allowed(packet_type: u8, code: u8) -> bool {
        let list: &[u8] = match packet_type {
            // CONNACK
            2 => &[
                0x00, 0x80, 0x81, 0x82, 0x83, 0x84, 0x85, 0x86, 0x87, 0x88, 0x89, 0x8A, 0x8C, 0x90,
                0x95, 0x97, 0x99, 0x9A, 0x9B, 0x9C, 0x9D, 0x9F,
            ],
            // PUBACK, PUBREC
            4 | 5 => &[0x00, 0x10, 0x80, 0x83, 0x87, 0x90, 0x91, 0x97, 0x99],
            // PUBREL, PUBCOMP
            6 | 7 => &[0x00, 0x92],
            // SUBACK
            9 => &[
                0x00, 0x01, 0x02, 0x80, 0x83, 0x87, 0x8F, 0x91, 0x97, 0x9E, 0xA1, 0xA2,
            ],
            // UNSUBACK
            11 => &[0x00, 0x11, 0x80, 0x83, 0x87, 0x8F, 0x91],
            // DISCONNECT
            14 => &[
                0x00, 0x04, 0x80, 0x81, 0x82, 0x83, 0x87, 0x89, 0x8B, 0x8D, 0x8E, 0x8F, 0x90, 0x93,
                0x94, 0x95, 0x96, 0x97, 0x98, 0x99, 0x9A, 0x9B, 0x9C, 0x9D, 0x9E, 0x9F, 0xA0, 0xA1,
                0xA2,
            ],
            // AUTH
            15 => &[0x00, 0x18, 0x19],
            _ => &[],
        };
        list.contains(&code)
    }
}

/// The MQTT 3.1.1 SUBACK return code for an MQTT 5 SUBACK reason code: a
/// granted QoS stays, any refusal is 0x80; so one decision serves both.
#[must_use]
pub const fn suback_to_v3(code: u8) -> u8 {
    if code < 0x80 { code } else { SUBACK_FAILURE }
}

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
    /// MQTT 5 will properties (will delay, message expiry, content type,
    /// ...); empty at levels 3 and 4.
    pub props: Properties,
}

/// CONNECT.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Connect {
    /// Protocol level: 3 (MQTT 3.1), 4 (3.1.1), 5 (MQTT 5); any other level
    /// with a known protocol name is reported with nothing else, for
    /// refusal.
    pub level: u8,
    /// Client identifier (may be empty with a clean session).
    pub client_id: String,
    /// Start afresh (MQTT 5: clean start).
    pub clean_session: bool,
    /// Keep-alive in seconds (0: none).
    pub keep_alive: u16,
    /// Will message.
    pub will: Option<Will>,
    /// User name.
    pub username: Option<String>,
    /// Password.
    pub password: Option<Bytes>,
    /// MQTT 5 CONNECT properties; empty at levels 3 and 4.
    pub props: Properties,
}

/// CONNACK.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConnAck {
    /// The server kept a session for this client.
    pub session_present: bool,
    /// The 3.1.1 return code ([`connack`]) at levels 3 and 4, the MQTT 5
    /// reason code ([`reason`]) at level 5: written and read as is.
    pub code: u8,
    /// MQTT 5 CONNACK properties; not written at levels 3 and 4.
    pub props: Properties,
}

/// PUBLISH.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PublishPacket {
    /// A redelivery.
    pub dup: bool,
    /// QoS 0-2.
    pub qos: u8,
    /// Retain.
    pub retain: bool,
    /// Topic name (MQTT 5: may be empty when a topic alias stands for it).
    pub topic: String,
    /// Packet id (QoS 1 and 2 only).
    pub pid: Option<u16>,
    /// Payload.
    pub payload: Bytes,
    /// MQTT 5 PUBLISH properties; not written at levels 3 and 4.
    pub props: Properties,
}

/// PUBACK, PUBREC, PUBREL or PUBCOMP: the packet id, and at level 5 a
/// reason code and properties (reason string, user properties).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ack {
    /// Packet id.
    pub pid: u16,
    /// MQTT 5 reason code ([`reason`]); 0 (success) at levels 3 and 4.
    pub reason: u8,
    /// MQTT 5 properties; not written at levels 3 and 4.
    pub props: Properties,
}

impl Ack {
    /// A successful acknowledgement of `pid` without properties: all 3.1.1
    /// has, and MQTT 5's short form.
    #[must_use]
    pub fn new(pid: u16) -> Self {
        Ack {
            pid,
            reason: reason::SUCCESS,
            props: Properties::default(),
        }
    }
}

/// The subscription options of one SUBSCRIBE filter (MQTT 5 section
/// 3.8.3.1); only `qos` exists at levels 3 and 4.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SubOptions {
    /// Maximum QoS asked for, 0-2.
    pub qos: u8,
    /// Do not send the subscriber its own publishes.
    pub no_local: bool,
    /// Keep the RETAIN flag of forwarded publishes as published.
    pub retain_as_published: bool,
    /// Retained messages at subscribe time: 0 send, 1 send only if the
    /// subscription is new, 2 do not send.
    pub retain_handling: u8,
}

impl SubOptions {
    /// Options with only a QoS, as MQTT 3.1.1 subscribes.
    #[must_use]
    pub fn qos(qos: u8) -> Self {
        SubOptions {
            qos,
            ..SubOptions::default()
        }
    }
}

/// SUBSCRIBE.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Subscribe {
    /// Packet id.
    pub pid: u16,
    /// (filter, options) pairs, at least one.
    pub filters: Vec<(String, SubOptions)>,
    /// MQTT 5 properties (subscription identifier, user properties).
    pub props: Properties,
}

/// SUBACK.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SubAck {
    /// Packet id.
    pub pid: u16,
    /// One code per filter: granted QoS or 0x80 at levels 3 and 4, an
    /// MQTT 5 SUBACK reason code at level 5.
    pub codes: Vec<u8>,
    /// MQTT 5 properties; not written at levels 3 and 4.
    pub props: Properties,
}

/// UNSUBSCRIBE.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unsubscribe {
    /// Packet id.
    pub pid: u16,
    /// Filters, at least one.
    pub filters: Vec<String>,
    /// MQTT 5 properties (user properties).
    pub props: Properties,
}

/// UNSUBACK.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnsubAck {
    /// Packet id.
    pub pid: u16,
    /// MQTT 5: one reason code per filter; empty (and not written) at
    /// levels 3 and 4, whose UNSUBACK has none.
    pub codes: Vec<u8>,
    /// MQTT 5 properties; not written at levels 3 and 4.
    pub props: Properties,
}

/// DISCONNECT, or MQTT 5 AUTH: a reason code and properties, both absent
/// at levels 3 and 4 (AUTH does not exist there).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Reasoned {
    /// MQTT 5 reason code ([`reason`]); 0 at levels 3 and 4.
    pub reason: u8,
    /// MQTT 5 properties; not written at levels 3 and 4.
    pub props: Properties,
}

impl Reasoned {
    /// A reason code with a reason string, as a server's DISCONNECT says
    /// why it ends the connection.
    #[must_use]
    pub fn with_reason_string(reason: u8, why: impl Into<String>) -> Self {
        Reasoned {
            reason,
            props: PropertySet {
                reason_string: Some(why.into()),
                ..PropertySet::default()
            }
            .into(),
        }
    }
}

/// A control packet.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Packet {
    /// CONNECT (boxed: it is one packet per connection and the largest,
    /// and every packet decoded would otherwise take its size).
    Connect(Box<Connect>),
    /// CONNACK.
    ConnAck(ConnAck),
    /// PUBLISH.
    Publish(PublishPacket),
    /// PUBACK (QoS 1).
    PubAck(Ack),
    /// PUBREC (QoS 2, step 1).
    PubRec(Ack),
    /// PUBREL (QoS 2, step 2).
    PubRel(Ack),
    /// PUBCOMP (QoS 2, step 3).
    PubComp(Ack),
    /// SUBSCRIBE.
    Subscribe(Subscribe),
    /// SUBACK.
    SubAck(SubAck),
    /// UNSUBSCRIBE.
    Unsubscribe(Unsubscribe),
    /// UNSUBACK.
    UnsubAck(UnsubAck),
    /// PINGREQ.
    PingReq,
    /// PINGRESP.
    PingResp,
    /// DISCONNECT (MQTT 5: with a reason code and properties, either way).
    Disconnect(Reasoned),
    /// AUTH (MQTT 5 only): enhanced authentication, which a server that
    /// does not offer it refuses with [`reason::BAD_AUTHENTICATION_METHOD`].
    Auth(Reasoned),
}

impl Packet {
    /// CONNACK without properties, as 3.1.1 answers.
    #[must_use]
    pub fn connack(session_present: bool, code: u8) -> Self {
        Packet::ConnAck(ConnAck {
            session_present,
            code,
            props: Properties::default(),
        })
    }

    /// A successful PUBACK of `pid`.
    #[must_use]
    pub fn puback(pid: u16) -> Self {
        Packet::PubAck(Ack::new(pid))
    }

    /// A successful PUBREC of `pid`.
    #[must_use]
    pub fn pubrec(pid: u16) -> Self {
        Packet::PubRec(Ack::new(pid))
    }

    /// A successful PUBREL of `pid`.
    #[must_use]
    pub fn pubrel(pid: u16) -> Self {
        Packet::PubRel(Ack::new(pid))
    }

    /// A successful PUBCOMP of `pid`.
    #[must_use]
    pub fn pubcomp(pid: u16) -> Self {
        Packet::PubComp(Ack::new(pid))
    }

    /// SUBSCRIBE of (filter, QoS) pairs, as 3.1.1 subscribes.
    #[must_use]
    pub fn subscribe(pid: u16, filters: Vec<(String, u8)>) -> Self {
        Packet::Subscribe(Subscribe {
            pid,
            filters: filters
                .into_iter()
                .map(|(f, q)| (f, SubOptions::qos(q)))
                .collect(),
            props: Properties::default(),
        })
    }

    /// SUBACK with one code per filter and no properties.
    #[must_use]
    pub fn suback(pid: u16, codes: Vec<u8>) -> Self {
        Packet::SubAck(SubAck {
            pid,
            codes,
            props: Properties::default(),
        })
    }

    /// UNSUBSCRIBE of `filters` without properties.
    #[must_use]
    pub fn unsubscribe(pid: u16, filters: Vec<String>) -> Self {
        Packet::Unsubscribe(Unsubscribe {
            pid,
            filters,
            props: Properties::default(),
        })
    }

    /// UNSUBACK as 3.1.1 has it: the packet id alone.
    #[must_use]
    pub fn unsuback(pid: u16) -> Self {
        Packet::UnsubAck(UnsubAck {
            pid,
            codes: Vec::new(),
            props: Properties::default(),
        })
    }

    /// DISCONNECT with normal disconnection and no properties, as 3.1.1
    /// has it.
    #[must_use]
    pub fn disconnect() -> Self {
        Packet::Disconnect(Reasoned::default())
    }
}

/// Why bytes are not an MQTT packet. Any of these ends the connection; at
/// level 5 with a DISCONNECT of [`MqttError::reason_code`] whose reason
/// string may be the error's message.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MqttError {
    /// The remaining length is encoded in more than four bytes (MQTT 5:
    /// or in more bytes than needed).
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
    /// A variable byte integer inside the packet runs over four bytes or
    /// uses more bytes than its value needs.
    #[error("malformed variable byte integer")]
    BadVarInt,
    /// A property identifier MQTT 5 does not define.
    #[error("unknown property identifier {0:#04x}")]
    UnknownProperty(u32),
    /// A property in a packet that may not carry it.
    #[error("property {} is not allowed in {packet}", property::name(*.property))]
    PropertyNotAllowed {
        /// The property identifier.
        property: u8,
        /// The packet (or "will properties").
        packet: &'static str,
    },
    /// A property that may appear once appears again.
    #[error("property {} appears more than once", property::name(*.0))]
    DuplicateProperty(u8),
    /// A property value MQTT 5 forbids (a receive maximum of 0, a
    /// boolean byte other than 0 or 1, ...).
    #[error("property {} has an invalid value: {why}", property::name(*.property))]
    BadPropertyValue {
        /// The property identifier.
        property: u8,
        /// What is wrong with it.
        why: &'static str,
    },
    /// A topic alias of 0.
    #[error("topic alias 0 is not allowed")]
    TopicAliasZero,
    /// A reason code the packet may not carry.
    #[error("reason code {code:#04x} is not allowed in {packet}")]
    BadReasonCode {
        /// The packet.
        packet: &'static str,
        /// The code.
        code: u8,
    },
    /// Well-formed, but against a rule of MQTT 5.
    #[error("protocol error: {0}")]
    ProtocolError(&'static str),
}

impl MqttError {
    /// The MQTT 5 DISCONNECT reason code for this error: packet too large,
    /// topic alias invalid, protocol error, or malformed packet.
    #[must_use]
    pub fn reason_code(&self) -> u8 {
        match self {
            MqttError::TooLarge(_) => reason::PACKET_TOO_LARGE,
            MqttError::TopicAliasZero => reason::TOPIC_ALIAS_INVALID,
            MqttError::DuplicateProperty(_)
            | MqttError::BadPropertyValue { .. }
            | MqttError::BadReasonCode { .. }
            | MqttError::ProtocolError(_) => reason::PROTOCOL_ERROR,
            MqttError::BadLength
            | MqttError::BadHeader(_)
            | MqttError::Malformed(_)
            | MqttError::BadVarInt
            | MqttError::UnknownProperty(_)
            | MqttError::PropertyNotAllowed { .. } => reason::MALFORMED_PACKET,
        }
    }
}

fn malformed(what: &'static str) -> MqttError {
    MqttError::Malformed(what)
}
