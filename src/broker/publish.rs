//! A message to publish ([`Publish`]) and who published it ([`Source`],
//! [`Ingress`]): what the publish path, and the publish hook, see.

use bytes::Bytes;

use crate::protocol::frame::{Headers, Priority};

/// A message to publish.
#[derive(Debug, Clone, Default)]
pub struct Publish {
    /// Topic name, without wildcards.
    pub topic: String,
    /// Payload bytes (shared, not copied, by the fan-out).
    pub payload: Bytes,
    /// Headers.
    pub headers: Headers,
    /// Keep as the topic's retained message; an empty payload clears it.
    pub retain: bool,
    /// Lane at the subscribers.
    pub priority: Priority,
    /// MQTT quality of service asked for by the publisher (0-2); an MQTT
    /// subscriber gets the lower of this and its subscription's. Native
    /// publishes are 0.
    pub qos: u8,
    /// The publishing connection's sink id, 0 for none (native, HTTP and
    /// embedded publishes): MQTT 5's "no local" compares it.
    pub origin: u64,
}

/// How a message came in, for rules that match on it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ingress {
    /// The native protocol (`/ws`).
    Native,
    /// MQTT, over any listener.
    Mqtt,
    /// `POST /topics/{name}`.
    Http,
    /// The embedding app ([`crate::Wharf::publish`], or the broker itself).
    Embedded,
    /// An app's typed socket ([`crate::sockets::Socket::publish`]).
    Socket,
}

impl Ingress {
    /// Its name in rules (`protocol = "mqtt"`).
    pub fn as_str(self) -> &'static str {
        match self {
            Ingress::Native => "native",
            Ingress::Mqtt => "mqtt",
            Ingress::Http => "http",
            Ingress::Embedded => "embedded",
            Ingress::Socket => "socket",
        }
    }

    /// The ingress named `name`.
    pub fn parse(name: &str) -> Option<Ingress> {
        [
            Ingress::Native,
            Ingress::Mqtt,
            Ingress::Http,
            Ingress::Embedded,
            Ingress::Socket,
        ]
        .into_iter()
        .find(|i| i.as_str() == name)
    }
}

/// Who published a message and how: what rules see of the publisher
/// (borrowed from the connection, so it costs nothing when no rule runs).
#[derive(Debug, Clone, Copy)]
pub struct Source<'a> {
    /// The way in.
    pub ingress: Ingress,
    /// The client id of the connection, if it has one.
    pub client_id: Option<&'a str>,
    /// The authenticated principal's name, if any.
    pub principal: Option<&'a str>,
}

impl Source<'static> {
    /// A publish by the embedding app.
    pub const EMBEDDED: Source<'static> = Source {
        ingress: Ingress::Embedded,
        client_id: None,
        principal: None,
    };
}
