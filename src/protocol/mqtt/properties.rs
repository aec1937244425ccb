//! MQTT 5 properties (section 2.2.2): one typed, optional field each, the
//! packets each may appear in, and their encoding. Decoding refuses a
//! property outside its packets, a second copy of one that may appear once
//! (only user properties, and subscription identifiers in PUBLISH, repeat),
//! and values the spec forbids; encoding writes only the properties the
//! packet may carry, so the encoder never writes what the decoder refuses.

use bytes::Bytes;

use super::wire::{Count, Emit, Reader, VAR_INT_MAX};
use super::{MqttError, malformed};

/// Property identifiers (MQTT 5 table 2-4), for error messages and for
/// code that names a property.
pub mod property {
    /// Payload format indicator (byte).
    pub const PAYLOAD_FORMAT_INDICATOR: u8 = 0x01;
    /// Message expiry interval (four-byte integer).
    pub const MESSAGE_EXPIRY_INTERVAL: u8 = 0x02;
    /// Content type (string).
    pub const CONTENT_TYPE: u8 = 0x03;
    /// Response topic (string).
    pub const RESPONSE_TOPIC: u8 = 0x08;
    /// Correlation data (binary).
    pub const CORRELATION_DATA: u8 = 0x09;
    /// Subscription identifier (variable byte integer).
    pub const SUBSCRIPTION_IDENTIFIER: u8 = 0x0B;
    /// Session expiry interval (four-byte integer).
    pub const SESSION_EXPIRY_INTERVAL: u8 = 0x11;
    /// Assigned client identifier (string).
    pub const ASSIGNED_CLIENT_IDENTIFIER: u8 = 0x12;
    /// Server keep alive (two-byte integer).
    pub const SERVER_KEEP_ALIVE: u8 = 0x13;
    /// Authentication method (string).
    pub const AUTHENTICATION_METHOD: u8 = 0x15;
    /// Authentication data (binary).
    pub const AUTHENTICATION_DATA: u8 = 0x16;
    /// Request problem information (byte).
    pub const REQUEST_PROBLEM_INFORMATION: u8 = 0x17;
    /// Will delay interval (four-byte integer).
    pub const WILL_DELAY_INTERVAL: u8 = 0x18;
    /// Request response information (byte).
    pub const REQUEST_RESPONSE_INFORMATION: u8 = 0x19;
    /// Response information (string).
    pub const RESPONSE_INFORMATION: u8 = 0x1A;
    /// Server reference (string).
    pub const SERVER_REFERENCE: u8 = 0x1C;
    /// Reason string (string).
    pub const REASON_STRING: u8 = 0x1F;
    /// Receive maximum (two-byte integer).
    pub const RECEIVE_MAXIMUM: u8 = 0x21;
    /// Topic alias maximum (two-byte integer).
    pub const TOPIC_ALIAS_MAXIMUM: u8 = 0x22;
    /// Topic alias (two-byte integer).
    pub const TOPIC_ALIAS: u8 = 0x23;
    /// Maximum QoS (byte).
    pub const MAXIMUM_QOS: u8 = 0x24;
    /// Retain available (byte).
    pub const RETAIN_AVAILABLE: u8 = 0x25;
    /// User property (string pair).
    pub const USER_PROPERTY: u8 = 0x26;
    /// Maximum packet size (four-byte integer).
    pub const MAXIMUM_PACKET_SIZE: u8 = 0x27;
    /// Wildcard subscription available (byte).
    pub const WILDCARD_SUBSCRIPTION_AVAILABLE: u8 = 0x28;
    /// Subscription identifier available (byte).
    pub const SUBSCRIPTION_IDENTIFIER_AVAILABLE: u8 = 0x29;
    /// Shared subscription available (byte).
    pub const SHARED_SUBSCRIPTION_AVAILABLE: u8 = 0x2A;

    /// The spec's name of a property, for messages.
    #[must_use]
    pub fn name(id: u8) -> &'static str {
        match id {
            PAYLOAD_FORMAT_INDICATOR => "payload format indicator",
            MESSAGE_EXPIRY_INTERVAL => "message expiry interval",
            CONTENT_TYPE => "content type",
            RESPONSE_TOPIC => "response topic",
            CORRELATION_DATA => "correlation data",
            SUBSCRIPTION_IDENTIFIER => "subscription identifier",
            SESSION_EXPIRY_INTERVAL => "session expiry interval",
            ASSIGNED_CLIENT_IDENTIFIER => "assigned client identifier",
            SERVER_KEEP_ALIVE => "server keep alive",
            AUTHENTICATION_METHOD => "authentication method",
            AUTHENTICATION_DATA => "authentication data",
            REQUEST_PROBLEM_INFORMATION => "request problem information",
            WILL_DELAY_INTERVAL => "will delay interval",
            REQUEST_RESPONSE_INFORMATION => "request response information",
            RESPONSE_INFORMATION => "response information",
            SERVER_REFERENCE => "server reference",
            REASON_STRING => "reason string",
            RECEIVE_MAXIMUM => "receive maximum",
            TOPIC_ALIAS_MAXIMUM => "topic alias maximum",
            TOPIC_ALIAS => "topic alias",
            MAXIMUM_QOS => "maximum QoS",
            RETAIN_AVAILABLE => "retain available",
            USER_PROPERTY => "user property",
            MAXIMUM_PACKET_SIZE => "maximum packet size",
            WILDCARD_SUBSCRIPTION_AVAILABLE => "wildcard subscription available",
            SUBSCRIPTION_IDENTIFIER_AVAILABLE => "subscription identifier available",
            SHARED_SUBSCRIPTION_AVAILABLE => "shared subscription available",
            _ => "unknown",
        }
    }
}

use property as id;

/// The properties of an MQTT 5 packet (or of a will), as every packet
/// carries them: boxed only when some property is set, so a packet without
/// any (every packet at levels 3 and 4, most at level 5) costs a null
/// pointer to build, move and drop; the MQTT 3.1.1 publish path pays
/// nothing for MQTT 5. Reading goes through [`PropertySet`] by `Deref`
/// (absent fields read as `None`), and writing a field through `DerefMut`
/// allocates the set on first use.
#[derive(Clone, Default)]
pub struct Properties(Option<Box<PropertySet>>);

/// No property at all: what an absent [`Properties`] reads as.
static NONE: PropertySet = PropertySet {
    payload_format_indicator: None,
    message_expiry_interval: None,
    content_type: None,
    response_topic: None,
    correlation_data: None,
    subscription_identifiers: Vec::new(),
    session_expiry_interval: None,
    assigned_client_identifier: None,
    server_keep_alive: None,
    authentication_method: None,
    authentication_data: None,
    request_problem_information: None,
    will_delay_interval: None,
    request_response_information: None,
    response_information: None,
    server_reference: None,
    reason_string: None,
    receive_maximum: None,
    topic_alias_maximum: None,
    topic_alias: None,
    maximum_qos: None,
    retain_available: None,
    user_properties: Vec::new(),
    maximum_packet_size: None,
    wildcard_subscription_available: None,
    subscription_identifier_available: None,
    shared_subscription_available: None,
};

impl std::ops::Deref for Properties {
    type Target = PropertySet;

    fn deref(&self) -> &PropertySet {
        self.0.as_deref().unwrap_or(&NONE)
    }
}

impl std::ops::DerefMut for Properties {
    fn deref_mut(&mut self) -> &mut PropertySet {
        self.0.get_or_insert_with(Box::default)
    }
}

impl From<PropertySet> for Properties {
    fn from(set: PropertySet) -> Properties {
        Properties(Some(Box::new(set)))
    }
}

impl PartialEq for Properties {
    fn eq(&self, other: &Properties) -> bool {
        **self == **other
    }
}

impl Eq for Properties {}

impl std::fmt::Debug for Properties {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        (**self).fmt(f)
    }
}

/// Every MQTT 5 property, each `None` (or empty) when absent; `Default` is
/// none at all. Packets hold it behind [`Properties`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PropertySet {
    /// PUBLISH, will: `Some(true)` if the payload is UTF-8.
    pub payload_format_indicator: Option<bool>,
    /// PUBLISH, will: seconds the message lives.
    pub message_expiry_interval: Option<u32>,
    /// PUBLISH, will: the payload's content type.
    pub content_type: Option<String>,
    /// PUBLISH, will: the topic of the request's response.
    pub response_topic: Option<String>,
    /// PUBLISH, will: data tying a response to its request.
    pub correlation_data: Option<Bytes>,
    /// SUBSCRIBE: the one identifier of the subscription (1 to
    /// 268,435,455); PUBLISH: those of every subscription it matched.
    pub subscription_identifiers: Vec<u32>,
    /// CONNECT, CONNACK, DISCONNECT: seconds the session outlives the
    /// connection.
    pub session_expiry_interval: Option<u32>,
    /// CONNACK: the client id the server gave a client that sent none.
    pub assigned_client_identifier: Option<String>,
    /// CONNACK: the keep-alive the server imposes.
    pub server_keep_alive: Option<u16>,
    /// CONNECT, CONNACK, AUTH: the enhanced authentication method.
    pub authentication_method: Option<String>,
    /// CONNECT, CONNACK, AUTH: the enhanced authentication data.
    pub authentication_data: Option<Bytes>,
    /// CONNECT: whether reason strings and user properties may be sent on
    /// failures.
    pub request_problem_information: Option<bool>,
    /// Will: seconds to wait before publishing it.
    pub will_delay_interval: Option<u32>,
    /// CONNECT: the client asks for response information.
    pub request_response_information: Option<bool>,
    /// CONNACK: the basis of response topics.
    pub response_information: Option<String>,
    /// CONNACK, DISCONNECT: another server to use.
    pub server_reference: Option<String>,
    /// Acks, SUBACK, UNSUBACK, CONNACK, DISCONNECT, AUTH: why, for humans.
    pub reason_string: Option<String>,
    /// CONNECT, CONNACK: QoS 1/2 publishes the sender accepts in flight
    /// (not 0).
    pub receive_maximum: Option<u16>,
    /// CONNECT, CONNACK: the highest topic alias the sender accepts.
    pub topic_alias_maximum: Option<u16>,
    /// PUBLISH: a number standing for the topic (not 0).
    pub topic_alias: Option<u16>,
    /// CONNACK: the highest QoS the server supports (0 or 1; absent: 2).
    pub maximum_qos: Option<u8>,
    /// CONNACK: whether retained messages are supported.
    pub retain_available: Option<bool>,
    /// Every packet with properties, and will properties: name-value pairs,
    /// in order, repeatable.
    pub user_properties: Vec<(String, String)>,
    /// CONNECT, CONNACK: the largest packet the sender accepts (not 0).
    pub maximum_packet_size: Option<u32>,
    /// CONNACK: whether wildcard filters are supported.
    pub wildcard_subscription_available: Option<bool>,
    /// CONNACK: whether subscription identifiers are supported.
    pub subscription_identifier_available: Option<bool>,
    /// CONNACK: whether shared subscriptions are supported.
    pub shared_subscription_available: Option<bool>,
}

/// Where properties are read or written: each packet that has them, and
/// the will properties of CONNECT.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Ctx {
    Connect,
    ConnAck,
    Publish,
    Will,
    PubAck,
    PubRec,
    PubRel,
    PubComp,
    Subscribe,
    SubAck,
    Unsubscribe,
    UnsubAck,
    Disconnect,
    Auth,
}

impl Ctx {
    fn bit(self) -> u16 {
        1 << self as u16
    }

    /// The name of the packet, for messages.
    pub(super) fn name(self) -> &'static str {
        match self {
            Ctx::Connect => "CONNECT",
            Ctx::ConnAck => "CONNACK",
            Ctx::Publish => "PUBLISH",
            Ctx::Will => "will properties",
            Ctx::PubAck => "PUBACK",
            Ctx::PubRec => "PUBREC",
            Ctx::PubRel => "PUBREL",
            Ctx::PubComp => "PUBCOMP",
            Ctx::Subscribe => "SUBSCRIBE",
            Ctx::SubAck => "SUBACK",
            Ctx::Unsubscribe => "UNSUBSCRIBE",
            Ctx::UnsubAck => "UNSUBACK",
            Ctx::Disconnect => "DISCONNECT",
            Ctx::Auth => "AUTH",
        }
    }
}

const fn mask(ctxs: &[Ctx]) -> u16 {
    let mut m = 0;
    let mut i = 0;
    while i < ctxs.len() {
        m |= 1 << ctxs[i] as u16;
        i += 1;
    }
    m
}

const MESSAGE: u16 = mask(&[Ctx::Publish, Ctx::Will]);
const ACKS: u16 = mask(&[
    Ctx::PubAck,
    Ctx::PubRec,
    Ctx::PubRel,
    Ctx::PubComp,
    Ctx::SubAck,
    Ctx::UnsubAck,
]);

/// The packets a property may appear in (table 2-4); 0 for an unknown id.
fn allowed_in(property: u8) -> u16 {
    use Ctx::*;
    match property {
        id::PAYLOAD_FORMAT_INDICATOR
        | id::MESSAGE_EXPIRY_INTERVAL
        | id::CONTENT_TYPE
        | id::RESPONSE_TOPIC
        | id::CORRELATION_DATA => MESSAGE,
        id::SUBSCRIPTION_IDENTIFIER => mask(&[Publish, Subscribe]),
        id::SESSION_EXPIRY_INTERVAL => mask(&[Connect, ConnAck, Disconnect]),
        id::ASSIGNED_CLIENT_IDENTIFIER
        | id::SERVER_KEEP_ALIVE
        | id::RESPONSE_INFORMATION
        | id::MAXIMUM_QOS
        | id::RETAIN_AVAILABLE
        | id::WILDCARD_SUBSCRIPTION_AVAILABLE
        | id::SUBSCRIPTION_IDENTIFIER_AVAILABLE
        | id::SHARED_SUBSCRIPTION_AVAILABLE => mask(&[ConnAck]),
        id::AUTHENTICATION_METHOD | id::AUTHENTICATION_DATA => mask(&[Connect, ConnAck, Auth]),
        id::REQUEST_PROBLEM_INFORMATION | id::REQUEST_RESPONSE_INFORMATION => mask(&[Connect]),
        id::WILL_DELAY_INTERVAL => mask(&[Will]),
        id::SERVER_REFERENCE => mask(&[ConnAck, Disconnect]),
        id::REASON_STRING => ACKS | mask(&[ConnAck, Disconnect, Auth]),
        id::RECEIVE_MAXIMUM | id::TOPIC_ALIAS_MAXIMUM | id::MAXIMUM_PACKET_SIZE => {
            mask(&[Connect, ConnAck])
        }
        id::TOPIC_ALIAS => mask(&[Publish]),
        id::USER_PROPERTY => u16::MAX,
        _ => 0,
    }
}

fn allowed(property: u8, ctx: Ctx) -> bool {
    allowed_in(property) & ctx.bit() != 0
}

fn flag(property: u8, b: u8) -> Result<bool, MqttError> {
    match b {
        0 => Ok(false),
        1 => Ok(true),
        _ => Err(MqttError::BadPropertyValue {
            property,
            why: "not 0 or 1",
        }),
    }
}

fn nonzero<T: Default + PartialEq>(property: u8, v: T) -> Result<T, MqttError> {
    if v == T::default() {
        Err(MqttError::BadPropertyValue {
            property,
            why: "0 is not allowed",
        })
    } else {
        Ok(v)
    }
}

impl Properties {
    /// Whether no property is set, as at levels 3 and 4.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.0.as_deref().is_none_or(|p| *p == NONE)
    }

    /// Reads a property length and the properties it covers, as allowed in
    /// `ctx`.
    pub(super) fn read(r: &mut Reader, ctx: Ctx) -> Result<Properties, MqttError> {
        let len = r.var_int()? as usize;
        if len == 0 {
            return Ok(Properties::default());
        }
        let mut r = r.take(len)?;
        let mut p = PropertySet::default();
        let mut seen: u64 = 0;
        while !r.is_empty() {
            let code = r.var_int()?;
            let property = u8::try_from(code)
                .ok()
                .filter(|&c| allowed_in(c) != 0)
                .ok_or(MqttError::UnknownProperty(code))?;
            if !allowed(property, ctx) {
                return Err(MqttError::PropertyNotAllowed {
                    property,
                    packet: ctx.name(),
                });
            }
            let repeats = property == id::USER_PROPERTY
                || (property == id::SUBSCRIPTION_IDENTIFIER && ctx == Ctx::Publish);
            if !repeats && seen & (1 << property) != 0 {
                return Err(MqttError::DuplicateProperty(property));
            }
            seen |= 1 << property;
            match property {
                id::PAYLOAD_FORMAT_INDICATOR => {
                    p.payload_format_indicator = Some(flag(property, r.u8()?)?);
                }
                id::MESSAGE_EXPIRY_INTERVAL => p.message_expiry_interval = Some(r.u32()?),
                id::CONTENT_TYPE => p.content_type = Some(r.string()?),
                id::RESPONSE_TOPIC => p.response_topic = Some(r.string()?),
                id::CORRELATION_DATA => p.correlation_data = Some(r.bytes()?),
                id::SUBSCRIPTION_IDENTIFIER => {
                    let v = nonzero(property, r.var_int()?)?;
                    p.subscription_identifiers.push(v);
                }
                id::SESSION_EXPIRY_INTERVAL => p.session_expiry_interval = Some(r.u32()?),
                id::ASSIGNED_CLIENT_IDENTIFIER => {
                    p.assigned_client_identifier = Some(r.string()?);
                }
                id::SERVER_KEEP_ALIVE => p.server_keep_alive = Some(r.u16()?),
                id::AUTHENTICATION_METHOD => p.authentication_method = Some(r.string()?),
                id::AUTHENTICATION_DATA => p.authentication_data = Some(r.bytes()?),
                id::REQUEST_PROBLEM_INFORMATION => {
                    p.request_problem_information = Some(flag(property, r.u8()?)?);
                }
                id::WILL_DELAY_INTERVAL => p.will_delay_interval = Some(r.u32()?),
                id::REQUEST_RESPONSE_INFORMATION => {
                    p.request_response_information = Some(flag(property, r.u8()?)?);
                }
                id::RESPONSE_INFORMATION => p.response_information = Some(r.string()?),
                id::SERVER_REFERENCE => p.server_reference = Some(r.string()?),
                id::REASON_STRING => p.reason_string = Some(r.string()?),
                id::RECEIVE_MAXIMUM => p.receive_maximum = Some(nonzero(property, r.u16()?)?),
                id::TOPIC_ALIAS_MAXIMUM => p.topic_alias_maximum = Some(r.u16()?),
                id::TOPIC_ALIAS => {
                    let v = r.u16()?;
                    if v == 0 {
                        return Err(MqttError::TopicAliasZero);
                    }
                    p.topic_alias = Some(v);
                }
                id::MAXIMUM_QOS => {
                    let v = r.u8()?;
                    if v > 1 {
                        return Err(MqttError::BadPropertyValue {
                            property,
                            why: "not 0 or 1",
                        });
                    }
                    p.maximum_qos = Some(v);
                }
                id::RETAIN_AVAILABLE => p.retain_available = Some(flag(property, r.u8()?)?),
                id::USER_PROPERTY => {
                    let k = r.string()?;
                    let v = r.string()?;
                    p.user_properties.push((k, v));
                }
                id::MAXIMUM_PACKET_SIZE => {
                    p.maximum_packet_size = Some(nonzero(property, r.u32()?)?);
                }
                id::WILDCARD_SUBSCRIPTION_AVAILABLE => {
                    p.wildcard_subscription_available = Some(flag(property, r.u8()?)?);
                }
                id::SUBSCRIPTION_IDENTIFIER_AVAILABLE => {
                    p.subscription_identifier_available = Some(flag(property, r.u8()?)?);
                }
                id::SHARED_SUBSCRIPTION_AVAILABLE => {
                    p.shared_subscription_available = Some(flag(property, r.u8()?)?);
                }
                _ => return Err(malformed("unknown property")),
            }
        }
        if p.authentication_data.is_some() && p.authentication_method.is_none() {
            return Err(MqttError::ProtocolError(
                "authentication data without an authentication method",
            ));
        }
        Ok(p.into())
    }

    /// The length of the properties allowed in `ctx`, without the property
    /// length in front.
    pub(super) fn len(&self, ctx: Ctx) -> usize {
        let Some(set) = self.0.as_deref() else {
            return 0;
        };
        let mut c = Count::default();
        set.emit(ctx, &mut c);
        c.0
    }

    /// Writes the property length and the properties allowed in `ctx`;
    /// `len` is [`Properties::len`].
    pub(super) fn write<E: Emit>(&self, ctx: Ctx, len: usize, out: &mut E) {
        out.var_int(len);
        if let Some(set) = self.0.as_deref() {
            set.emit(ctx, out);
        }
    }
}

impl PropertySet {
    fn emit<E: Emit>(&self, ctx: Ctx, o: &mut E) {
        let on = |p: u8| allowed(p, ctx);
        let byte = |o: &mut E, p: u8, v: Option<u8>| {
            if let (Some(v), true) = (v, on(p)) {
                o.u8(p);
                o.u8(v);
            }
        };
        byte(
            o,
            id::PAYLOAD_FORMAT_INDICATOR,
            self.payload_format_indicator.map(u8::from),
        );
        byte(
            o,
            id::REQUEST_PROBLEM_INFORMATION,
            self.request_problem_information.map(u8::from),
        );
        byte(
            o,
            id::REQUEST_RESPONSE_INFORMATION,
            self.request_response_information.map(u8::from),
        );
        byte(o, id::MAXIMUM_QOS, self.maximum_qos);
        byte(o, id::RETAIN_AVAILABLE, self.retain_available.map(u8::from));
        byte(
            o,
            id::WILDCARD_SUBSCRIPTION_AVAILABLE,
            self.wildcard_subscription_available.map(u8::from),
        );
        byte(
            o,
            id::SUBSCRIPTION_IDENTIFIER_AVAILABLE,
            self.subscription_identifier_available.map(u8::from),
        );
        byte(
            o,
            id::SHARED_SUBSCRIPTION_AVAILABLE,
            self.shared_subscription_available.map(u8::from),
        );
        let two = |o: &mut E, p: u8, v: Option<u16>| {
            if let (Some(v), true) = (v, on(p)) {
                o.u8(p);
                o.u16(v);
            }
        };
        two(o, id::SERVER_KEEP_ALIVE, self.server_keep_alive);
        two(o, id::RECEIVE_MAXIMUM, self.receive_maximum);
        two(o, id::TOPIC_ALIAS_MAXIMUM, self.topic_alias_maximum);
        two(o, id::TOPIC_ALIAS, self.topic_alias);
        let four = |o: &mut E, p: u8, v: Option<u32>| {
            if let (Some(v), true) = (v, on(p)) {
                o.u8(p);
                o.u32(v);
            }
        };
        four(o, id::MESSAGE_EXPIRY_INTERVAL, self.message_expiry_interval);
        four(o, id::SESSION_EXPIRY_INTERVAL, self.session_expiry_interval);
        four(o, id::WILL_DELAY_INTERVAL, self.will_delay_interval);
        four(o, id::MAXIMUM_PACKET_SIZE, self.maximum_packet_size);
        let data = |o: &mut E, p: u8, v: Option<&[u8]>| {
            if let (Some(v), true) = (v, on(p)) {
                o.u8(p);
                o.bytes(v);
            }
        };
        data(
            o,
            id::CONTENT_TYPE,
            self.content_type.as_deref().map(str::as_bytes),
        );
        data(
            o,
            id::RESPONSE_TOPIC,
            self.response_topic.as_deref().map(str::as_bytes),
        );
        data(o, id::CORRELATION_DATA, self.correlation_data.as_deref());
        data(
            o,
            id::ASSIGNED_CLIENT_IDENTIFIER,
            self.assigned_client_identifier
                .as_deref()
                .map(str::as_bytes),
        );
        data(
            o,
            id::AUTHENTICATION_METHOD,
            self.authentication_method.as_deref().map(str::as_bytes),
        );
        data(
            o,
            id::AUTHENTICATION_DATA,
            self.authentication_data.as_deref(),
        );
        data(
            o,
            id::RESPONSE_INFORMATION,
            self.response_information.as_deref().map(str::as_bytes),
        );
        data(
            o,
            id::SERVER_REFERENCE,
            self.server_reference.as_deref().map(str::as_bytes),
        );
        data(
            o,
            id::REASON_STRING,
            self.reason_string.as_deref().map(str::as_bytes),
        );
        if on(id::SUBSCRIPTION_IDENTIFIER) {
            // SUBSCRIBE carries one identifier; PUBLISH any number.
            let n = if ctx == Ctx::Subscribe { 1 } else { usize::MAX };
            for &v in self.subscription_identifiers.iter().take(n) {
                o.u8(id::SUBSCRIPTION_IDENTIFIER);
                o.var_int(v.min(VAR_INT_MAX) as usize);
            }
        }
        for (k, v) in &self.user_properties {
            o.u8(id::USER_PROPERTY);
            o.bytes(k.as_bytes());
            o.bytes(v.as_bytes());
        }
    }
}
