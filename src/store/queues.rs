//! Durable queues on disk. Three trees, big-endian keys so that sled's key
//! order is the delivery order:
//!
//! - `queues`: key = queue name; value = queue id (u32 BE) | options (the
//!   broker's opaque bytes, JSON).
//! - `qmsg`: key = queue id (u32 BE) | 9 - priority (u8) | seq (u64 BE), so
//!   a queue's messages sort highest priority first, then oldest first;
//!   value = enqueued_ms (u64 BE) | expires_ms (u64 BE, 0 = never) |
//!   headers | payload.
//! - `qdel`: the same key as the message; value = deliveries (u32 BE) |
//!   not_before_ms (u64 BE). Written when a message is delivered or
//!   delayed, so delivery counts and delays survive a restart; removed with
//!   the message.
//!
//! A message and its move to another queue (dead-lettering) are written in
//! one batch of `qmsg`, so a crash leaves it in exactly one of the two.

use std::collections::HashMap;

use bytes::Bytes;

use super::engine::Engine;
use super::write::Write;
use super::{Store, StoreError, decode_headers, encode_headers, read_error as io};
use crate::protocol::frame::Headers;

/// Queue names and ids.
pub const QUEUES_TREE: &str = "queues";
/// Queue messages.
pub const MESSAGES_TREE: &str = "qmsg";
/// Delivery state of queue messages.
pub const DELIVERIES_TREE: &str = "qdel";

/// Message priorities: 0 (lowest, the default) to 9.
pub const PRIORITIES: usize = 10;

/// A queue message, as stored and as the queue holds it in memory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredMessage {
    /// Its sequence number in its queue (from 1, never reused): its id.
    pub seq: u64,
    /// 0-9, higher delivered first.
    pub priority: u8,
    /// Headers.
    pub headers: Headers,
    /// Payload.
    pub payload: Bytes,
    /// When it was enqueued (Unix ms).
    pub enqueued_ms: u64,
    /// When it expires (Unix ms); 0 = never.
    pub expires_ms: u64,
    /// Times it has been delivered.
    pub deliveries: u32,
    /// Not delivered before this time (Unix ms); 0 = at once.
    pub not_before_ms: u64,
}

/// A queue as read back at start: the first messages (up to a window) in
/// delivery order, and counts of the rest, which stay on disk.
#[derive(Debug, Clone, Default)]
pub struct LoadedQueue {
    /// Its name.
    pub name: String,
    /// Its id in the keys.
    pub id: u32,
    /// The options stored with it.
    pub meta: Vec<u8>,
    /// Messages loaded into memory, highest priority first, oldest first.
    pub messages: Vec<StoredMessage>,
    /// Per priority: messages left on disk.
    pub spilled: [u64; PRIORITIES],
    /// Per priority: the highest seq loaded (messages on disk above it are
    /// the spilled ones).
    pub loaded_upto: [u64; PRIORITIES],
    /// The next sequence number to hand out.
    pub next_seq: u64,
}

/// What [`Store::load_queues`] found.
#[derive(Debug, Default)]
pub struct LoadedQueues {
    /// Every queue with its window.
    pub queues: Vec<LoadedQueue>,
    /// Deletes for records that belong to nothing (a delivery record whose
    /// message was acked, a message of an unknown queue): hand them to the
    /// writer.
    pub orphans: Vec<Write>,
}

/// The `qmsg` / `qdel` key of a message.
pub fn message_key(queue: u32, priority: u8, seq: u64) -> Vec<u8> {
    let mut key = Vec::with_capacity(13);
    key.extend_from_slice(&queue.to_be_bytes());
    key.push(9 - priority.min(9));
    key.extend_from_slice(&seq.to_be_bytes());
    key
}

/// Splits a `qmsg` / `qdel` key into queue id, priority and seq.
pub fn parse_key(key: &[u8]) -> Option<(u32, u8, u64)> {
    if key.len() != 13 || key[4] > 9 {
        return None;
    }
    let queue = u32::from_be_bytes(key[..4].try_into().ok()?);
    let seq = u64::from_be_bytes(key[5..].try_into().ok()?);
    Some((queue, 9 - key[4], seq))
}

/// The key range of `queue`'s messages of `priority` with a seq above
/// `after` (for reading spilled messages back).
pub fn range_after(queue: u32, priority: u8, after: u64) -> (Vec<u8>, Vec<u8>) {
    (
        message_key(queue, priority, after.saturating_add(1)),
        message_key(queue, priority, u64::MAX),
    )
}

/// The key range of all of `queue`'s messages.
pub fn queue_range(queue: u32) -> (Vec<u8>, Vec<u8>) {
    (message_key(queue, 9, 0), message_key(queue, 0, u64::MAX))
}

/// The write that stores a message (not its delivery state).
pub fn put_message(queue: u32, m: &StoredMessage) -> Write {
    let mut value = Vec::with_capacity(24 + m.payload.len());
    value.extend_from_slice(&m.enqueued_ms.to_be_bytes());
    value.extend_from_slice(&m.expires_ms.to_be_bytes());
    encode_headers(&mut value, &m.headers);
    value.extend_from_slice(&m.payload);
    Write::Put {
        tree: MESSAGES_TREE,
        key: message_key(queue, m.priority, m.seq),
        value,
    }
}

/// The write that records a message's delivery count and delay.
pub fn put_deliveries(queue: u32, m: &StoredMessage) -> Write {
    let mut value = Vec::with_capacity(12);
    value.extend_from_slice(&m.deliveries.to_be_bytes());
    value.extend_from_slice(&m.not_before_ms.to_be_bytes());
    Write::Put {
        tree: DELIVERIES_TREE,
        key: message_key(queue, m.priority, m.seq),
        value,
    }
}

/// The writes that remove a message and its delivery state.
pub fn delete_message(queue: u32, priority: u8, seq: u64) -> [Write; 2] {
    let key = message_key(queue, priority, seq);
    [
        Write::Delete {
            tree: MESSAGES_TREE,
            key: key.clone(),
        },
        Write::Delete {
            tree: DELIVERIES_TREE,
            key,
        },
    ]
}

/// The write that records a queue's name, id and options.
pub fn put_queue(name: &str, id: u32, meta: &[u8]) -> Write {
    let mut value = Vec::with_capacity(4 + meta.len());
    value.extend_from_slice(&id.to_be_bytes());
    value.extend_from_slice(meta);
    Write::Put {
        tree: QUEUES_TREE,
        key: name.as_bytes().to_vec(),
        value,
    }
}

/// The write that forgets a queue's name (its messages are deleted with
/// [`Write::DeleteRange`]).
pub fn delete_queue(name: &str, id: u32) -> [Write; 3] {
    let (from, to) = queue_range(id);
    [
        Write::Delete {
            tree: QUEUES_TREE,
            key: name.as_bytes().to_vec(),
        },
        Write::DeleteRange {
            tree: MESSAGES_TREE,
            from: from.clone(),
            to: to.clone(),
        },
        Write::DeleteRange {
            tree: DELIVERIES_TREE,
            from,
            to,
        },
    ]
}

/// Decodes a `qmsg` record (delivery state not included).
pub fn decode_message(key: &[u8], value: &[u8]) -> Option<(u32, StoredMessage)> {
    let (queue, priority, seq) = parse_key(key)?;
    let enqueued_ms = u64::from_be_bytes(value.get(..8)?.try_into().ok()?);
    let expires_ms = u64::from_be_bytes(value.get(8..16)?.try_into().ok()?);
    let mut at = 16;
    let headers = decode_headers(value, &mut at)?;
    Some((
        queue,
        StoredMessage {
            seq,
            priority,
            headers,
            payload: Bytes::copy_from_slice(value.get(at..)?),
            enqueued_ms,
            expires_ms,
            deliveries: 0,
            not_before_ms: 0,
        },
    ))
}

/// Decodes a `qdel` value: deliveries and not-before time.
pub fn decode_deliveries(value: &[u8]) -> Option<(u32, u64)> {
    Some((
        u32::from_be_bytes(value.get(..4)?.try_into().ok()?),
        u64::from_be_bytes(value.get(4..12)?.try_into().ok()?),
    ))
}

impl Store {
    /// Reads every queue back: names and ids, the first `window(name)`
    /// messages of each (with their delivery state) and counts of the
    /// rest. One pass over the keys; values past the window are not
    /// decoded.
    ///
    /// # Errors
    /// [`StoreError::Read`] if a tree cannot be read.
    pub fn load_queues(&self, window: impl Fn(&str) -> usize) -> Result<LoadedQueues, StoreError> {
        load(&self.engine()?, &window)
    }
}

/// [`Store::load_queues`] over any engine.
fn load(engine: &dyn Engine, window: &dyn Fn(&str) -> usize) -> Result<LoadedQueues, StoreError> {
    let mut out = LoadedQueues::default();
    let mut by_id: HashMap<u32, (LoadedQueue, usize)> = HashMap::new();
    engine
        .scan(QUEUES_TREE, &mut |k, v| {
            let (Ok(name), Some(id)) = (
                std::str::from_utf8(k),
                v.get(..4).and_then(|b| <[u8; 4]>::try_from(b).ok()),
            ) else {
                tracing::warn!(key = ?k, "skipping an undecodable queue record");
                return true;
            };
            let id = u32::from_be_bytes(id);
            let limit = window(name);
            by_id.insert(
                id,
                (
                    LoadedQueue {
                        name: name.to_owned(),
                        id,
                        meta: v[4..].to_vec(),
                        next_seq: 1,
                        ..LoadedQueue::default()
                    },
                    limit,
                ),
            );
            true
        })
        .map_err(io("read queues"))?;
    let mut deliveries: HashMap<Vec<u8>, (u32, u64)> = HashMap::new();
    engine
        .scan(DELIVERIES_TREE, &mut |k, v| {
            match decode_deliveries(v) {
                Some(d) => {
                    deliveries.insert(k.to_vec(), d);
                }
                None => out.orphans.push(Write::Delete {
                    tree: DELIVERIES_TREE,
                    key: k.to_vec(),
                }),
            }
            true
        })
        .map_err(io("read delivery state"))?;
    engine
        .scan(MESSAGES_TREE, &mut |k, v| {
            let Some((id, priority, seq)) = parse_key(k) else {
                tracing::warn!(key = ?k, "skipping an undecodable queue message key");
                return true;
            };
            let state = deliveries.remove(k);
            let Some((q, limit)) = by_id.get_mut(&id) else {
                out.orphans.extend(delete_message(id, priority, seq));
                return true;
            };
            let p = usize::from(priority);
            q.next_seq = q.next_seq.max(seq.saturating_add(1));
            // Past the window only messages delivered before the restart
            // are loaded (their delivery state must not be lost); the
            // queue skips them when it reads the rest back.
            if q.messages.len() >= *limit && state.is_none() {
                q.spilled[p] += 1;
                return true;
            }
            match decode_message(k, v) {
                Some((_, mut m)) => {
                    if let Some((n, nb)) = state {
                        m.deliveries = n;
                        m.not_before_ms = nb;
                    }
                    if q.spilled[p] == 0 {
                        q.loaded_upto[p] = seq;
                    }
                    q.messages.push(m);
                }
                None => {
                    tracing::warn!(queue = %q.name, seq, "dropping an undecodable queue message");
                    out.orphans.extend(delete_message(id, priority, seq));
                }
            }
            true
        })
        .map_err(io("read queue messages"))?;
    // Delivery records whose message is gone (acked just before a crash,
    // the two trees being separate batches).
    out.orphans
        .extend(deliveries.into_keys().map(|key| Write::Delete {
            tree: DELIVERIES_TREE,
            key,
        }));
    let mut queues: Vec<LoadedQueue> = by_id.into_values().map(|(q, _)| q).collect();
    queues.sort_by_key(|q| q.id);
    out.queues = queues;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn msg(seq: u64, priority: u8) -> StoredMessage {
        StoredMessage {
            seq,
            priority,
            headers: Headers::from([("k".into(), "v".into())]),
            payload: Bytes::from_static(b"payload"),
            enqueued_ms: 5,
            expires_ms: 9,
            deliveries: 0,
            not_before_ms: 0,
        }
    }

    #[test]
    fn keys_sort_by_priority_then_seq() {
        let mut keys = [
            message_key(1, 0, 1),
            message_key(1, 9, 5),
            message_key(1, 9, 2),
            message_key(0, 0, 9),
            message_key(1, 4, 3),
        ];
        keys.sort();
        let parsed: Vec<_> = keys.iter().map(|k| parse_key(k).unwrap()).collect();
        assert_eq!(
            parsed,
            vec![(0, 0, 9), (1, 9, 2), (1, 9, 5), (1, 4, 3), (1, 0, 1)]
        );
        let (from, to) = queue_range(1);
        assert!(keys.iter().filter(|k| **k >= from && **k <= to).count() == 4);
    }

    #[test]
    fn message_round_trip_and_truncation() {
        let m = msg(7, 3);
        let Write::Put { key, value, .. } = put_message(2, &m) else {
            panic!("a put");
        };
        assert_eq!(decode_message(&key, &value), Some((2, m)));
        for cut in 0..20 {
            assert!(decode_message(&key, &value[..cut]).is_none(), "cut {cut}");
        }
    }
}
