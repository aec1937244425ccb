//! The native protocol's frames: what a client sends ([`ClientFrame`]) and
//! what the server sends ([`ServerFrame`]). One type per frame, shared by the
//! JSON and bincode encodings. proto/native.md is their specification.

use std::collections::BTreeMap;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;
use serde::{Deserialize, Serialize};

/// Protocol version this server speaks.
pub const PROTOCOL_VERSION: u32 = 1;

pub use super::code::ErrorCode;
pub use super::presence::{PresenceMember, PresenceQuery, PresenceReply};
pub use super::recover::{Recover, Subscribed};

/// Message headers: string keys to string values, ordered for stable
/// encoding.
pub type Headers = BTreeMap<String, String>;

/// A frame from client to server. JSON: an object whose `op` names the
/// variant in snake_case.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, bincode::Encode, bincode::Decode)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum ClientFrame {
    /// Identifies the client; optional, but must come first if sent.
    Hello(Hello),
    /// Subscribes to a topic filter.
    Subscribe(Subscribe),
    /// Ends a subscription.
    Unsubscribe(Unsubscribe),
    /// Publishes a message to a topic.
    Publish(PublishFrame),
    /// Asks for a `pong`.
    Ping(Ping),
    /// Closes the session, optionally after what is queued is delivered.
    Close(Close),
    /// Puts a message on a queue.
    Enqueue(EnqueueFrame),
    /// Consumes a queue: its messages arrive as `delivery` frames.
    Consume(Consume),
    /// Acknowledges deliveries: their messages are done and deleted.
    Ack(Settle),
    /// Gives deliveries back to the queue, for redelivery.
    Nack(Nack),
    /// Sends deliveries to the queue's dead-letter queue.
    Reject(Settle),
    /// Extends deliveries' ack deadline.
    Touch(Touch),
    /// Enqueues a job.
    JobEnqueue(super::jobs::JobEnqueue),
    /// Asks for a job's record.
    JobStatus(super::jobs::JobStatusQuery),
    /// Registers a job worker.
    WorkerRegister(super::jobs::WorkerRegister),
    /// Extends a worker's lease.
    WorkerPing(super::jobs::WorkerPing),
    /// Takes the next job (long poll).
    JobDequeue(super::jobs::JobDequeue),
    /// Reports a job's outcome.
    JobOutcome(super::jobs::JobOutcome),
    /// Starts a transaction: publishes, enqueues, acks and nacks are
    /// staged until `commit`.
    Begin(Txn),
    /// Makes everything staged take effect together, durably.
    Commit(Txn),
    /// Discards what was staged; staged acks give their deliveries back.
    Rollback(Txn),
    /// Presents a new token (a JWT about to expire) for the same
    /// principal, so the session outlives the old one.
    Refresh(Refresh),
    /// Removes a queue, at once or after its consumers drain it (admin).
    DeleteQueue(DeleteQueue),
    /// Asks who is subscribed to a topic with presence.
    Presence(PresenceQuery),
}

impl ClientFrame {
    /// The request id the frame carries, if any: what an answer to it
    /// (a reply or an `error`) echoes.
    pub fn rid(&self) -> Option<u64> {
        match self {
            ClientFrame::Hello(_) | ClientFrame::Close(_) => None,
            ClientFrame::Subscribe(f) => f.rid,
            ClientFrame::Unsubscribe(f) => f.rid,
            ClientFrame::Publish(f) => f.rid,
            ClientFrame::Ping(f) => f.rid,
            ClientFrame::Enqueue(f) => f.rid,
            ClientFrame::Consume(f) => f.rid,
            ClientFrame::Ack(f) | ClientFrame::Reject(f) => f.rid,
            ClientFrame::Nack(f) => f.rid,
            ClientFrame::Touch(f) => f.rid,
            ClientFrame::JobEnqueue(f) => Some(f.rid),
            ClientFrame::JobStatus(f) => Some(f.rid),
            ClientFrame::WorkerRegister(f) => Some(f.rid),
            ClientFrame::WorkerPing(f) => Some(f.rid),
            ClientFrame::JobDequeue(f) => Some(f.rid),
            ClientFrame::JobOutcome(f) => Some(f.rid),
            ClientFrame::Begin(f) | ClientFrame::Commit(f) | ClientFrame::Rollback(f) => f.rid,
            ClientFrame::Refresh(f) => f.rid,
            ClientFrame::DeleteQueue(f) => f.rid,
            ClientFrame::Presence(f) => Some(f.rid),
        }
    }
}

/// `begin`, `commit`, `rollback`.
#[derive(
    Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize, bincode::Encode, bincode::Decode,
)]
#[serde(deny_unknown_fields)]
pub struct Txn {
    /// Request id: a `receipt` answers (for `commit`, once durable).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rid: Option<u64>,
}

/// `enqueue`: a message for a queue. Answered (when `rid` is given) by
/// `enqueued` once the message is durable.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, bincode::Encode, bincode::Decode)]
#[serde(try_from = "json::Enqueue", into = "json::Enqueue")]
pub struct EnqueueFrame {
    /// Queue name (topic-name rules; created on first use).
    pub queue: String,
    /// The payload bytes.
    pub payload: Vec<u8>,
    /// Message headers.
    pub headers: Headers,
    /// 0 (lowest, the default) to 9: higher is delivered first.
    pub priority: u8,
    /// Time to live in ms; the queue's `ttl_ms` caps it.
    pub ttl_ms: Option<u64>,
    /// Request id: when present, `enqueued` (or an `error`) answers.
    pub rid: Option<u64>,
}

fn default_prefetch() -> u32 {
    10
}

/// `consume`: attach to a queue as one of its competing consumers.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, bincode::Encode, bincode::Decode)]
#[serde(deny_unknown_fields)]
pub struct Consume {
    /// The client's name for this consumer, unique in the session among
    /// subscriptions and consumers; deliveries carry it as `sub`.
    pub id: String,
    /// The queue.
    pub queue: String,
    /// Most unacknowledged deliveries at once (1 to 10000, default 10).
    #[serde(default = "default_prefetch")]
    pub prefetch: u32,
    /// Request id, as for `subscribe`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rid: Option<u64>,
}

/// `ack` and `reject`: settle deliveries of consumer `sub`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, bincode::Encode, bincode::Decode)]
#[serde(deny_unknown_fields)]
pub struct Settle {
    /// The consumer id given to `consume`.
    pub sub: String,
    /// Delivery ids (1 to 10000); all are settled or none.
    pub ids: Vec<u64>,
    /// Request id: a `receipt` answers once done (for `ack`, once the
    /// deletes are durable).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rid: Option<u64>,
}

/// `nack`: give deliveries back.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, bincode::Encode, bincode::Decode)]
#[serde(deny_unknown_fields)]
pub struct Nack {
    /// The consumer id.
    pub sub: String,
    /// Delivery ids (1 to 10000).
    pub ids: Vec<u64>,
    /// Redeliver after this many ms (0 = at once); absent = the queue's
    /// backoff schedule.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delay_ms: Option<u64>,
    /// Request id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rid: Option<u64>,
}

/// `touch`: still working on these deliveries.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, bincode::Encode, bincode::Decode)]
#[serde(deny_unknown_fields)]
pub struct Touch {
    /// The consumer id.
    pub sub: String,
    /// Delivery ids (1 to 10000).
    pub ids: Vec<u64>,
    /// New deadline, in ms from now; absent = the queue's ack timeout.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub extend_ms: Option<u64>,
    /// Request id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rid: Option<u64>,
}

/// `hello`: who the client is.
#[derive(
    Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize, bincode::Encode, bincode::Decode,
)]
#[serde(deny_unknown_fields)]
pub struct Hello {
    /// Client id; the server makes one up when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_id: Option<String>,
    /// An auth token (checked once authentication exists).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token: Option<String>,
    /// Protocol version the client speaks; defaults to the server's.
    #[serde(default = "default_version")]
    pub version: u32,
}

fn default_version() -> u32 {
    PROTOCOL_VERSION
}

/// `subscribe`: receive messages published to topics matching `filter`,
/// tagged with the subscription id `id`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, bincode::Encode, bincode::Decode)]
#[serde(deny_unknown_fields)]
pub struct Subscribe {
    /// The client's name for this subscription, unique in the session.
    pub id: String,
    /// Topic filter, with `+` and `#` wildcards.
    pub filter: String,
    /// Request id: when present, success is confirmed by a `receipt` and a
    /// failure's `error` carries it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rid: Option<u64>,
    /// A durable subscription: named by the client id (from `hello`) and
    /// `id`, it outlives the connection; messages published while the
    /// client is away are kept and arrive as `delivery` frames, to be
    /// acknowledged like queue deliveries.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub durable: bool,
    /// Most unacknowledged deliveries of a durable subscription at once
    /// (1 to 10000, default 100); ignored otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prefetch: Option<u32>,
    /// Resume from where a previous subscription to this topic (a name,
    /// not a filter) got to: the messages it missed arrive first, then
    /// the live ones, and a `subscribed` frame says whether everything
    /// was recovered. Needs a `[[history]]` entry covering the topic.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub recover: Option<Recover>,
}

/// `unsubscribe`: end subscription `id`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, bincode::Encode, bincode::Decode)]
#[serde(deny_unknown_fields)]
pub struct Unsubscribe {
    /// The subscription id given to `subscribe`.
    pub id: String,
    /// Request id, as for `subscribe`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rid: Option<u64>,
}

/// Which outbound lane a message takes at each subscriber.
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    Default,
    Serialize,
    Deserialize,
    bincode::Encode,
    bincode::Decode,
)]
#[serde(rename_all = "snake_case")]
pub enum Priority {
    /// The ordinary lane.
    #[default]
    Normal,
    /// Delivered ahead of queued normal messages.
    High,
}

/// `publish`: a message to a topic.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, bincode::Encode, bincode::Decode)]
#[serde(try_from = "json::Publish", into = "json::Publish")]
pub struct PublishFrame {
    /// Topic name (no wildcards).
    pub topic: String,
    /// The payload bytes.
    pub payload: Vec<u8>,
    /// Message headers.
    pub headers: Headers,
    /// Keep as the topic's retained message (an empty payload clears it).
    pub retain: bool,
    /// Lane at the subscribers.
    pub priority: Priority,
    /// Request id: when present, the server answers with a `receipt` once
    /// the message has been handed to every current subscriber.
    pub rid: Option<u64>,
}

/// `refresh`: a new credential for the session's principal. Answered by
/// a `receipt` (when `rid` is given) once checked.
#[derive(
    Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize, bincode::Encode, bincode::Decode,
)]
#[serde(deny_unknown_fields)]
pub struct Refresh {
    /// The new token (a JWT or a static token).
    pub token: String,
    /// Request id, echoed in the `receipt` or `error`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rid: Option<u64>,
}

/// `delete_queue`: removes a queue. Without `drain`, at once (what it
/// holds is lost); with `drain`, it takes no more messages and is removed
/// once its consumers have settled what it holds. Answered by `receipt`
/// once removed, or by `draining` when `wait_ms` passed first.
#[derive(
    Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize, bincode::Encode, bincode::Decode,
)]
#[serde(deny_unknown_fields)]
pub struct DeleteQueue {
    /// The queue.
    pub queue: String,
    /// Let consumers take and settle what the queue holds first.
    #[serde(default)]
    pub drain: bool,
    /// How long to wait for a drain before answering `draining` (at most
    /// 60,000 ms; 0 answers at once).
    #[serde(default)]
    pub wait_ms: u64,
    /// Request id, echoed in the answer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rid: Option<u64>,
}

/// `draining`: a `delete_queue` with `drain` is under way; the queue is
/// removed once what it holds is settled.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, bincode::Encode, bincode::Decode)]
#[serde(deny_unknown_fields)]
pub struct Draining {
    /// The request id of the `delete_queue`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rid: Option<u64>,
    /// The queue.
    pub queue: String,
    /// Messages not yet delivered.
    pub waiting: u64,
    /// Messages delivered and not yet settled.
    pub in_flight: u64,
}

/// `ended`: the broker ended one of the session's subscriptions or queue
/// consumers on its own (a `refresh` narrowed the rights it needs): nothing
/// more arrives for `sub`, and its id may be used again.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, bincode::Encode, bincode::Decode)]
#[serde(deny_unknown_fields)]
pub struct Ended {
    /// The subscription or consumer id.
    pub sub: String,
    /// Why, as a code (`forbidden`).
    pub code: ErrorCode,
    /// Why, in words.
    pub message: String,
}

/// `ping`: the server answers `pong` with the same `rid`.
#[derive(
    Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize, bincode::Encode, bincode::Decode,
)]
#[serde(deny_unknown_fields)]
pub struct Ping {
    /// Echoed in the `pong`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rid: Option<u64>,
}

/// `close`: end the session.
#[derive(
    Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize, bincode::Encode, bincode::Decode,
)]
#[serde(deny_unknown_fields)]
pub struct Close {
    /// Deliver what is already queued for this session before closing.
    #[serde(default)]
    pub drain: bool,
}

/// A frame from server to client.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, bincode::Encode, bincode::Decode)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum ServerFrame {
    /// Answers the connection (or `hello`): the session and its limits.
    Welcome(Welcome),
    /// A message for one of the session's subscriptions.
    Message(Message),
    /// Confirms a request that carried a `rid`.
    Receipt(Receipt),
    /// A request failed, or the client broke a rule; the session goes on
    /// unless a close follows.
    Error(ErrorFrame),
    /// Answers `ping`.
    Pong(Ping),
    /// Messages were dropped because the session read too slowly.
    Dropped(Dropped),
    /// A queue message for one of the session's consumers.
    Delivery(QueueDelivery),
    /// Confirms an `enqueue`: the message is durable.
    Enqueued(Enqueued),
    /// Answers a job or worker request.
    JobReply(super::jobs::JobReply),
    /// Answers a draining `delete_queue` still under way.
    Draining(Draining),
    /// A subscription or consumer the broker ended.
    Ended(Ended),
    /// Answers a `subscribe` that asked to `recover`.
    Subscribed(Subscribed),
    /// Answers `presence`: a page of a topic's members.
    Presence(PresenceReply),
}

impl ServerFrame {
    /// The request id the frame answers, if any: what a client matches it
    /// to its request by.
    pub fn rid(&self) -> Option<u64> {
        match self {
            ServerFrame::Receipt(f) => Some(f.rid),
            ServerFrame::Error(f) => f.rid,
            ServerFrame::Pong(f) => f.rid,
            ServerFrame::Enqueued(f) => Some(f.rid),
            ServerFrame::JobReply(f) => Some(f.rid),
            ServerFrame::Draining(f) => f.rid,
            ServerFrame::Subscribed(f) => f.rid,
            ServerFrame::Presence(f) => Some(f.rid),
            ServerFrame::Welcome(_)
            | ServerFrame::Message(_)
            | ServerFrame::Dropped(_)
            | ServerFrame::Delivery(_)
            | ServerFrame::Ended(_) => None,
        }
    }
}

/// `delivery`: a queue message handed to one consumer, to be settled with
/// `ack`, `nack` or `reject` by its `id`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, bincode::Encode, bincode::Decode)]
#[serde(try_from = "json::QueueDelivery", into = "json::QueueDelivery")]
pub struct QueueDelivery {
    /// The consumer id.
    pub sub: String,
    /// The queue.
    pub queue: String,
    /// Delivery id (unique per queue; a redelivery gets a new one).
    pub id: u64,
    /// The message's id in its queue.
    pub seq: u64,
    /// Times this message has been delivered, this one included.
    pub count: u32,
    /// Its priority.
    pub priority: u8,
    /// The payload bytes.
    pub payload: Vec<u8>,
    /// Message headers.
    pub headers: Headers,
}

/// `enqueued`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, bincode::Encode, bincode::Decode)]
#[serde(deny_unknown_fields)]
pub struct Enqueued {
    /// The request id of the `enqueue`.
    pub rid: u64,
    /// The queue.
    pub queue: String,
    /// The message's id in the queue.
    pub seq: u64,
}

/// `welcome`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, bincode::Encode, bincode::Decode)]
#[serde(deny_unknown_fields)]
pub struct Welcome {
    /// Server-chosen session id (a UUID).
    pub session: String,
    /// The client id in force (given in `hello`, or made up).
    pub client_id: String,
    /// Protocol version spoken.
    pub version: u32,
    /// Limits that apply to this session.
    pub limits: Limits,
}

/// Limits a client must respect, told in `welcome`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, bincode::Encode, bincode::Decode)]
#[serde(deny_unknown_fields)]
pub struct Limits {
    /// Largest WebSocket frame accepted, in bytes; larger closes with 1009.
    pub max_frame: u64,
    /// Largest message payload accepted, in bytes.
    pub max_payload: u64,
    /// Bytes the server buffers for this session before its slow-consumer
    /// policy applies.
    pub outbound_limit: u64,
    /// Frames per second the session may send (burst allowed).
    pub rate_per_s: u64,
}

/// `message`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, bincode::Encode, bincode::Decode)]
#[serde(try_from = "json::Message", into = "json::Message")]
pub struct Message {
    /// The subscription this delivery is for.
    pub sub: String,
    /// The topic it was published to.
    pub topic: String,
    /// The topic's publish sequence number (per topic, from 1; starts over
    /// when the topic is created again).
    pub seq: u64,
    /// The payload bytes.
    pub payload: Vec<u8>,
    /// Message headers.
    pub headers: Headers,
    /// Whether this is the retained message, sent on subscribe.
    pub retained: bool,
}

/// `receipt`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, bincode::Encode, bincode::Decode)]
#[serde(deny_unknown_fields)]
pub struct Receipt {
    /// The request id confirmed.
    pub rid: u64,
}

/// `dropped`: how many messages the slow-consumer policy dropped since the
/// last notice.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, bincode::Encode, bincode::Decode)]
#[serde(deny_unknown_fields)]
pub struct Dropped {
    /// Messages dropped.
    pub count: u64,
}

/// `error`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, bincode::Encode, bincode::Decode)]
#[serde(deny_unknown_fields)]
pub struct ErrorFrame {
    /// What went wrong, for programs.
    pub code: ErrorCode,
    /// What went wrong, for people.
    pub message: String,
    /// The request id this answers, when the request had one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rid: Option<u64>,
}

/// How a JSON `payload` string is to be read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Encoding {
    /// The string is the payload (UTF-8).
    #[default]
    Utf8,
    /// The string is the payload in standard base64.
    Base64,
}

/// Payload text for JSON: UTF-8 as is, anything else in base64.
pub(crate) fn payload_to_json(payload: &[u8]) -> (std::borrow::Cow<'_, str>, Encoding) {
    match std::str::from_utf8(payload) {
        Ok(s) => (s.into(), Encoding::Utf8),
        Err(_) => (BASE64.encode(payload).into(), Encoding::Base64),
    }
}

/// The JSON shapes of frames whose payload is text or base64.
pub(crate) mod json {
    use super::*;

    #[derive(Serialize, Deserialize)]
    #[serde(deny_unknown_fields)]
    pub struct Publish {
        pub topic: String,
        pub payload: String,
        #[serde(default, skip_serializing_if = "is_utf8")]
        pub encoding: Encoding,
        #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
        pub headers: Headers,
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        pub retain: bool,
        #[serde(default, skip_serializing_if = "is_normal")]
        pub priority: Priority,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub rid: Option<u64>,
    }

    #[derive(Serialize, Deserialize)]
    #[serde(deny_unknown_fields)]
    pub struct Message {
        pub sub: String,
        pub topic: String,
        pub seq: u64,
        pub payload: String,
        #[serde(default, skip_serializing_if = "is_utf8")]
        pub encoding: Encoding,
        #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
        pub headers: Headers,
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        pub retained: bool,
    }

    #[derive(Serialize, Deserialize)]
    #[serde(deny_unknown_fields)]
    pub struct Enqueue {
        pub queue: String,
        pub payload: String,
        #[serde(default, skip_serializing_if = "is_utf8")]
        pub encoding: Encoding,
        #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
        pub headers: Headers,
        #[serde(default, skip_serializing_if = "is_zero")]
        pub priority: u8,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub ttl_ms: Option<u64>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub rid: Option<u64>,
    }

    #[derive(Serialize, Deserialize)]
    #[serde(deny_unknown_fields)]
    pub struct QueueDelivery {
        pub sub: String,
        pub queue: String,
        pub id: u64,
        pub seq: u64,
        pub count: u32,
        #[serde(default, skip_serializing_if = "is_zero")]
        pub priority: u8,
        pub payload: String,
        #[serde(default, skip_serializing_if = "is_utf8")]
        pub encoding: Encoding,
        #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
        pub headers: Headers,
    }

    fn is_zero(p: &u8) -> bool {
        *p == 0
    }

    impl TryFrom<Enqueue> for super::EnqueueFrame {
        type Error = String;
        fn try_from(e: Enqueue) -> Result<Self, String> {
            Ok(super::EnqueueFrame {
                payload: decode_payload(e.payload, e.encoding)?,
                queue: e.queue,
                headers: e.headers,
                priority: e.priority,
                ttl_ms: e.ttl_ms,
                rid: e.rid,
            })
        }
    }

    impl From<super::EnqueueFrame> for Enqueue {
        fn from(e: super::EnqueueFrame) -> Self {
            let (payload, encoding) = payload_to_json(&e.payload);
            Enqueue {
                payload: payload.into_owned(),
                encoding,
                queue: e.queue,
                headers: e.headers,
                priority: e.priority,
                ttl_ms: e.ttl_ms,
                rid: e.rid,
            }
        }
    }

    impl TryFrom<QueueDelivery> for super::QueueDelivery {
        type Error = String;
        fn try_from(d: QueueDelivery) -> Result<Self, String> {
            Ok(super::QueueDelivery {
                payload: decode_payload(d.payload, d.encoding)?,
                sub: d.sub,
                queue: d.queue,
                id: d.id,
                seq: d.seq,
                count: d.count,
                priority: d.priority,
                headers: d.headers,
            })
        }
    }

    impl From<super::QueueDelivery> for QueueDelivery {
        fn from(d: super::QueueDelivery) -> Self {
            let (payload, encoding) = payload_to_json(&d.payload);
            QueueDelivery {
                payload: payload.into_owned(),
                encoding,
                sub: d.sub,
                queue: d.queue,
                id: d.id,
                seq: d.seq,
                count: d.count,
                priority: d.priority,
                headers: d.headers,
            }
        }
    }

    fn is_utf8(e: &Encoding) -> bool {
        *e == Encoding::Utf8
    }

    fn is_normal(p: &Priority) -> bool {
        *p == Priority::Normal
    }

    pub(crate) fn decode_payload(text: String, encoding: Encoding) -> Result<Vec<u8>, String> {
        match encoding {
            Encoding::Utf8 => Ok(text.into_bytes()),
            Encoding::Base64 => BASE64
                .decode(text.as_bytes())
                .map_err(|e| format!("payload is not valid base64: {e}")),
        }
    }

    impl TryFrom<Publish> for super::PublishFrame {
        type Error = String;
        fn try_from(p: Publish) -> Result<Self, String> {
            Ok(super::PublishFrame {
                payload: decode_payload(p.payload, p.encoding)?,
                topic: p.topic,
                headers: p.headers,
                retain: p.retain,
                priority: p.priority,
                rid: p.rid,
            })
        }
    }

    impl From<super::PublishFrame> for Publish {
        fn from(p: super::PublishFrame) -> Self {
            let (payload, encoding) = payload_to_json(&p.payload);
            Publish {
                payload: payload.into_owned(),
                encoding,
                topic: p.topic,
                headers: p.headers,
                retain: p.retain,
                priority: p.priority,
                rid: p.rid,
            }
        }
    }

    impl TryFrom<Message> for super::Message {
        type Error = String;
        fn try_from(m: Message) -> Result<Self, String> {
            Ok(super::Message {
                payload: decode_payload(m.payload, m.encoding)?,
                sub: m.sub,
                topic: m.topic,
                seq: m.seq,
                headers: m.headers,
                retained: m.retained,
            })
        }
    }

    impl From<super::Message> for Message {
        fn from(m: super::Message) -> Self {
            let (payload, encoding) = payload_to_json(&m.payload);
            Message {
                payload: payload.into_owned(),
                encoding,
                sub: m.sub,
                topic: m.topic,
                seq: m.seq,
                headers: m.headers,
                retained: m.retained,
            }
        }
    }
}
