//! The frames of presence (`[[presence]]`): the `presence` request and
//! its answer. Re-exported by `frame.rs`, with the other frames.

use serde::{Deserialize, Serialize};

/// `presence`: who is subscribed to a topic under a `[[presence]]` entry,
/// a page at a time.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, bincode::Encode, bincode::Decode)]
#[serde(deny_unknown_fields)]
pub struct PresenceQuery {
    /// The topic (a name, not a filter).
    pub topic: String,
    /// Members after this cursor (a previous answer's `next`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub after: Option<String>,
    /// Most members answered (1 to 1000; default 100).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit: Option<u32>,
    /// Request id: the answer carries it.
    pub rid: u64,
}

/// One member of a topic's presence.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, bincode::Encode, bincode::Decode)]
#[serde(deny_unknown_fields)]
pub struct PresenceMember {
    /// The connection's client id.
    pub client_id: String,
    /// The principal it authenticated as.
    pub principal: String,
    /// When it joined (Unix ms).
    pub since_ms: u64,
}

/// `presence` (server): a page of a topic's members.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, bincode::Encode, bincode::Decode)]
#[serde(deny_unknown_fields)]
pub struct PresenceReply {
    /// The request id of the `presence`.
    pub rid: u64,
    /// The topic.
    pub topic: String,
    /// Members in all (connections: a client connected twice counts
    /// twice).
    pub count: u64,
    /// This page, by client id.
    pub members: Vec<PresenceMember>,
    /// The cursor of the next page (`after`), if there is one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next: Option<String>,
}
