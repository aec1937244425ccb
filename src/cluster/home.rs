//! Where queues and the jobs resource live in a cluster, and what other
//! nodes send their home (no I/O).
//!
//! With `[cluster] members` listed, each queue has one home node: the
//! one its `[[queues]] home` names, or else the member with the highest
//! rendezvous score for its name (so adding or removing a member moves
//! only the queues that scored highest on it). A dead-letter queue lives
//! with its queue, and the jobs resource is homed as the name `jobs`
//! (with `jobs.dlq`). Names starting with `$` (durable and shared
//! subscriptions) stay on the node that made them.
//!
//! Calls travel as one NATS message each: a big-endian `u32` length, a
//! JSON [`Call`] of that length, then the message payload if any;
//! deliveries to a consumer on another node travel the same way, with a
//! [`Delivered`] in place of the call. Answers are JSON [`Answer`]s.

use std::collections::HashMap;

use bytes::{BufMut, Bytes, BytesMut};
use serde::{Deserialize, Serialize};

use super::FrameError;
pub use crate::broker::hooks::AdminOp;
pub use crate::broker::jobs::JobCall;
use crate::broker::{DLQ_SUFFIX, Settlement};
use crate::config::{QueueDecl, QueueOptions};
use crate::protocol::frame::{ErrorCode, Headers};

/// The name the jobs resource is homed by.
pub const JOBS_HOME_KEY: &str = "jobs";

/// Which node each queue lives on.
#[derive(Debug, Clone, Default)]
pub struct Homes {
    members: Vec<String>,
    /// `[[queues]] home`, by queue name (dead-letter queues included).
    explicit: HashMap<String, String>,
    /// Configured dead-letter queue names -> the queue they serve.
    dead_letters: HashMap<String, String>,
}

impl Homes {
    /// The homes `[cluster] members` and the declared queues give.
    pub fn new(members: &[String], declared: &[QueueDecl], defaults: &QueueOptions) -> Homes {
        let mut homes = Homes {
            members: members.to_vec(),
            ..Homes::default()
        };
        for d in declared {
            let dlq = d.options(defaults).dead_letter;
            if !dlq.is_empty() && dlq != d.name {
                homes.dead_letters.insert(dlq, d.name.clone());
            }
            if let Some(home) = &d.home {
                homes.explicit.insert(d.name.clone(), home.clone());
            }
        }
        homes
    }

    /// The nodes queues are homed on.
    pub fn members(&self) -> &[String] {
        &self.members
    }

    /// The node `queue` lives on; `None` when every node keeps its own
    /// (no members listed, or a `$` name).
    pub fn home_of(&self, queue: &str) -> Option<&str> {
        let key = self.key_of(queue)?;
        match self.explicit.get(key) {
            Some(home) => Some(home),
            None => rendezvous(&self.members, key),
        }
    }

    /// The name `queue` is homed by: its own, or, for a dead-letter queue,
    /// its queue's (a chain of configured dead-letter queues is followed,
    /// at most 8 deep); `None` when every node keeps its own.
    pub fn key_of<'s>(&'s self, queue: &'s str) -> Option<&'s str> {
        if self.members.is_empty() || queue.starts_with('$') {
            return None;
        }
        let mut name = queue;
        for _ in 0..8 {
            if self.explicit.contains_key(name) {
                break;
            }
            if let Some(owner) = self.dead_letters.get(name) {
                name = owner;
            } else if let Some(owner) = name.strip_suffix(DLQ_SUFFIX).filter(|o| !o.is_empty()) {
                name = owner;
            } else {
                break;
            }
        }
        Some(name)
    }

    /// The members in the order they take a key's queues: its `home`
    /// first, then by rendezvous score.
    pub fn ranked(&self, key: &str) -> Vec<&str> {
        let mut ranked: Vec<&str> = self.members.iter().map(String::as_str).collect();
        ranked.sort_by_key(|m| std::cmp::Reverse(score(m, key)));
        if let Some(home) = self.explicit.get(key) {
            ranked.retain(|m| m != home);
            ranked.insert(0, home);
        }
        ranked
    }
}

/// The member with the highest score for `key` (ties to the first).
pub fn rendezvous<'a>(members: &'a [String], key: &str) -> Option<&'a str> {
    members
        .iter()
        .max_by_key(|m| score(m, key))
        .map(String::as_str)
}

/// A stable 64-bit score of (node, key): FNV-1a, then a mixing finalizer
/// (the same on every node and every build, unlike std's hasher).
fn score(node: &str, key: &str) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in node.bytes().chain([0xff]).chain(key.bytes()) {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h ^= h >> 33;
    h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
    h ^= h >> 33;
    h = h.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    h ^ (h >> 33)
}

/// What a node asks of a queue's or the jobs resource's home.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "do", rename_all = "snake_case")]
pub enum Call {
    /// Enqueue the payload that follows; answered once durable.
    Enqueue {
        /// The queue.
        queue: String,
        /// 0-9.
        priority: u8,
        /// The message's headers.
        headers: Headers,
        /// Time to live.
        ttl_ms: Option<u64>,
    },
    /// Attach a consumer on the calling node.
    Consume {
        /// The queue.
        queue: String,
        /// The consumer's credit.
        prefetch: u32,
        /// The calling node.
        node: String,
        /// The calling node's number for this consumer.
        token: u64,
        /// The consumer's id (as its sink names it).
        id: String,
    },
    /// Detach a consumer; its unsettled deliveries go back.
    Cancel {
        /// The queue.
        queue: String,
        /// The calling node.
        node: String,
        /// The consumer's number.
        token: u64,
    },
    /// Settle deliveries of a consumer on the calling node.
    Settle {
        /// The queue.
        queue: String,
        /// The calling node.
        node: String,
        /// The consumer's number.
        token: u64,
        /// Delivery ids.
        ids: Vec<u64>,
        /// What to do with them.
        how: Settlement,
    },
    /// A jobs operation.
    Job {
        /// Which.
        call: JobCall,
    },
    /// Which of these consumers of the calling node the home does not
    /// have (it restarted, or took the node for lost): the caller
    /// attaches them again. Answered with the unknown tokens.
    Known {
        /// The calling node.
        node: String,
        /// Its consumers' numbers.
        tokens: Vec<u64>,
    },
    /// An operator's operation on a queue.
    Admin {
        /// The queue.
        queue: String,
        /// Which.
        op: AdminOp,
    },
}

impl Call {
    /// The queue the call is about (`jobs` for the jobs resource; none
    /// for a call about the node itself).
    pub fn queue(&self) -> Option<&str> {
        match self {
            Call::Enqueue { queue, .. }
            | Call::Consume { queue, .. }
            | Call::Cancel { queue, .. }
            | Call::Settle { queue, .. }
            | Call::Admin { queue, .. } => Some(queue),
            Call::Job { .. } => Some(JOBS_HOME_KEY),
            Call::Known { .. } => None,
        }
    }
}

/// A home's answer to a [`Call`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "r", rename_all = "snake_case")]
pub enum Answer {
    /// Done.
    Ok,
    /// Enqueued (and durable) with this sequence number.
    Seq {
        /// Its seq.
        seq: u64,
    },
    /// A jobs operation's reply, as its type serializes.
    Value {
        /// The reply.
        value: serde_json::Value,
    },
    /// Refused.
    Error {
        /// The code it has on every transport.
        code: ErrorCode,
        /// Why.
        message: String,
    },
}

/// A queue delivery on its way to a consumer on another node.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Delivered {
    /// The consumer's number on its node.
    pub token: u64,
    /// The queue's home (where to settle, or cancel an unknown consumer).
    pub from: String,
    /// The queue.
    pub queue: String,
    /// The delivery id to settle.
    pub id: u64,
    /// The message's seq.
    pub seq: u64,
    /// Its priority.
    pub priority: u8,
    /// Its headers.
    pub headers: Headers,
    /// When it was enqueued (Unix ms).
    pub enqueued_ms: u64,
    /// When it expires (Unix ms; 0 never).
    pub expires_ms: u64,
    /// Times delivered, this one included.
    pub deliveries: u32,
    /// Not before (Unix ms).
    pub not_before_ms: u64,
}

/// Longest JSON part a call or delivery may have.
const MAX_HEAD: usize = 1 << 20;

/// `head` as JSON, framed with `payload`.
pub fn frame<T: Serialize>(head: &T, payload: &[u8]) -> Bytes {
    let json = serde_json::to_vec(head).unwrap_or_default();
    let mut b = BytesMut::with_capacity(4 + json.len() + payload.len());
    b.put_u32(u32::try_from(json.len()).unwrap_or(u32::MAX));
    b.put_slice(&json);
    b.put_slice(payload);
    b.freeze()
}

/// A framed head and its payload, or why it is not one.
pub fn unframe<T: for<'de> Deserialize<'de>>(msg: &Bytes) -> Result<(T, Bytes), FrameError> {
    let Some(len) = msg.get(..4) else {
        return Err(FrameError::Short);
    };
    let len = u32::from_be_bytes([len[0], len[1], len[2], len[3]]) as usize;
    if len > MAX_HEAD || msg.len() < 4 + len {
        return Err(FrameError::Oversized(len));
    }
    let head =
        serde_json::from_slice(&msg[4..4 + len]).map_err(|e| FrameError::Head(e.to_string()))?;
    Ok((head, msg.slice(4 + len..)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn members(n: usize) -> Vec<String> {
        (0..n).map(|i| format!("node-{i}")).collect()
    }

    #[test]
    fn no_members_means_every_queue_is_local() {
        let h = Homes::new(&[], &[], &QueueOptions::default());
        assert_eq!(h.home_of("orders"), None);
    }

    #[test]
    fn explicit_homes_dead_letters_and_dollar_names() {
        let m = members(3);
        let decl: Vec<QueueDecl> = toml::from_str::<HashMap<String, Vec<QueueDecl>>>(
            r#"q = [{ name = "orders", home = "node-2", dead_letter = "graveyard" }]"#,
        )
        .unwrap()
        .remove("q")
        .unwrap();
        let h = Homes::new(&m, &decl, &QueueOptions::default());
        assert_eq!(h.home_of("orders"), Some("node-2"));
        assert_eq!(h.home_of("graveyard"), Some("node-2"));
        assert_eq!(h.home_of("orders.dlq"), Some("node-2"));
        assert_eq!(h.home_of("$durable/c/s"), None);
        assert_eq!(h.home_of("other.dlq"), h.home_of("other"));
        assert_eq!(h.home_of(".dlq"), rendezvous(&m, ".dlq"));
        assert_eq!(h.home_of("jobs.dlq"), h.home_of(JOBS_HOME_KEY));
        // Failover's order: the home first, then by score; a dead-letter
        // queue is keyed by its queue.
        assert_eq!(h.key_of("graveyard"), Some("orders"));
        assert_eq!(h.key_of("other.dlq"), Some("other"));
        assert_eq!(h.key_of("$durable/c/s"), None);
        let ranked = h.ranked("orders");
        assert_eq!(ranked[0], "node-2");
        assert_eq!(ranked.len(), 3);
        let other = h.ranked("other");
        assert_eq!(Some(other[0]), rendezvous(&m, "other"));
        let mut sorted = other.clone();
        sorted.sort_unstable();
        assert_eq!(sorted, ["node-0", "node-1", "node-2"]);
    }

    #[test]
    fn frames_round_trip_and_bad_ones_are_refused() {
        let call = Call::Settle {
            queue: "q".into(),
            node: "a".into(),
            token: 7,
            ids: vec![1, 2],
            how: Settlement::Nack(Some(5)),
        };
        let b = frame(&call, b"payload");
        let (back, payload): (Call, Bytes) = unframe(&b).unwrap();
        assert_eq!(back, call);
        assert_eq!(&payload[..], b"payload");
        for bad in [
            &b"\0\0"[..],
            b"\0\0\0\x09{}",
            b"\xff\xff\xff\xff{}",
            b"\0\0\0\x02[]",
        ] {
            assert!(unframe::<Call>(&Bytes::copy_from_slice(bad)).is_err());
        }
    }

    proptest! {
        /// Every node computes the same home, and removing a member moves
        /// only the queues that were homed on it.
        #[test]
        fn removing_a_member_moves_only_its_queues(names in proptest::collection::vec("[a-z./]{1,12}", 1..50), gone in 0usize..5) {
            let all = members(5);
            let rest: Vec<String> = all.iter().filter(|m| **m != all[gone]).cloned().collect();
            for name in &names {
                let before = rendezvous(&all, name).unwrap();
                let after = rendezvous(&rest, name).unwrap();
                if before != all[gone] {
                    prop_assert_eq!(before, after);
                }
            }
        }
    }

    #[test]
    fn homes_spread_over_the_members() {
        let m = members(3);
        let mut counts = HashMap::new();
        for i in 0..3000 {
            *counts
                .entry(rendezvous(&m, &format!("queue-{i}")).unwrap())
                .or_insert(0) += 1;
        }
        for node in &m {
            let n = counts.get(node.as_str()).copied().unwrap_or(0);
            assert!((800..1200).contains(&n), "{node}: {n} of 3000");
        }
    }
}
