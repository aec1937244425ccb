//! The data of queue operations that several parts of the broker share
//! (the registry, durable and shared subscriptions, the hooks that send
//! them to another node): an enqueue, a consumer's settlement, the
//! prefetch bound.

use bytes::Bytes;

use crate::protocol::frame::Headers;

/// Largest prefetch a consumer may ask for.
pub const MAX_PREFETCH: u32 = 10_000;

/// A message to put on a queue.
#[derive(Debug, Clone, Default)]
pub struct Enqueue {
    /// The queue's name (topic-name rules: no wildcards).
    pub queue: String,
    /// Payload bytes.
    pub payload: Bytes,
    /// Headers.
    pub headers: Headers,
    /// 0 (lowest, default) to 9.
    pub priority: u8,
    /// Time to live in ms (the queue's `ttl_ms` caps it).
    pub ttl_ms: Option<u64>,
}

/// What the consumer of a delivery decided (as JSON between cluster
/// nodes: `"ack"`, `{"nack": ms}`, `"reject"`, `{"touch": ms}`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Settlement {
    /// Done: delete the message.
    Ack,
    /// Give it back: redelivered after the delay (ms), or after the
    /// queue's backoff schedule when `None`.
    Nack(Option<u64>),
    /// Send it to the dead-letter queue.
    Reject,
    /// Still working: extend the ack deadline by this much (ms), or by
    /// the ack timeout when `None`.
    Touch(Option<u64>),
}
