//! The frames of topic recovery (`[[history]]`): `recover` on a
//! `subscribe`, and the `subscribed` answer. Re-exported by `frame.rs`,
//! with the other frames.

use serde::{Deserialize, Serialize};

/// A position in a topic's history: what `recover` resumes from.
#[derive(
    Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize, bincode::Encode, bincode::Decode,
)]
#[serde(deny_unknown_fields)]
pub struct Recover {
    /// The topic's epoch as the previous subscription learnt it (from
    /// `subscribed`); "" for none (a first subscription: nothing to
    /// recover, and `subscribed` tells the position to keep).
    #[serde(default)]
    pub epoch: String,
    /// The offset (`seq`) of the last message received.
    #[serde(default)]
    pub offset: u64,
}

/// `subscribed`: answers a `subscribe` with `recover`, once the
/// subscription is live, saying where the topic's history stands and
/// whether the messages after the client's position were all delivered
/// (they come before any live message; this frame may come before or
/// after them).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, bincode::Encode, bincode::Decode)]
#[serde(deny_unknown_fields)]
pub struct Subscribed {
    /// The `subscribe`'s request id, if it had one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rid: Option<u64>,
    /// The subscription id.
    pub sub: String,
    /// The topic's epoch ("" when it keeps no history); keep it with the
    /// last offset received, to recover from next time.
    pub epoch: String,
    /// The topic's latest offset when the subscription started.
    pub offset: u64,
    /// True: every message after the given offset was delivered. False:
    /// some may be missing (another epoch, pushed out of the history, no
    /// history, no position given); reload from the source of truth.
    pub recovered: bool,
    /// How many missed messages were delivered.
    pub replayed: u64,
    /// Why nothing was recovered, when `recovered` is false.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}
