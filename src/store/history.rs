//! Topic history on disk: tree `history`, key = `topic | 0xFF | offset (u64
//! BE)`. Offset 0 holds the topic's epoch (the latest offset used under
//! it, u64 BE, then the epoch's UTF-8 bytes); every other
//! offset a message: `time (u64 BE, Unix ms) | headers | payload`. 0xFF
//! never occurs in UTF-8, so a topic's records are contiguous and in
//! offset order. The broker's topics write these (`broker/history.rs`):
//! new messages a second at a time, trims as a range delete.

use bytes::Bytes;

use super::engine::Engine as _;
use super::write::Write;
use super::{Store, StoreError};
use crate::protocol::frame::Headers;

const TREE: &str = "history";

/// One topic's history as stored.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HistoryRecord {
    /// The topic.
    pub topic: String,
    /// Its epoch and the latest offset used under it, if the record of
    /// it was read.
    pub epoch: Option<(String, u64)>,
    /// Its messages, oldest first.
    pub messages: Vec<StoredEntry>,
}

/// One message of a topic's history as stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredEntry {
    /// Its offset in the topic.
    pub offset: u64,
    /// When it was published (Unix ms).
    pub time_ms: u64,
    /// Headers.
    pub headers: Headers,
    /// Payload.
    pub payload: Bytes,
}

fn key(topic: &str, offset: u64) -> Vec<u8> {
    let mut k = Vec::with_capacity(topic.len() + 9);
    k.extend_from_slice(topic.as_bytes());
    k.push(0xFF);
    k.extend_from_slice(&offset.to_be_bytes());
    k
}

/// The write that stores `topic`'s epoch and the latest offset used
/// under it.
pub fn put_epoch(topic: &str, epoch: &str, latest: u64) -> Write {
    let mut value = Vec::with_capacity(8 + epoch.len());
    value.extend_from_slice(&latest.to_be_bytes());
    value.extend_from_slice(epoch.as_bytes());
    Write::Put {
        tree: TREE,
        key: key(topic, 0),
        value,
    }
}

fn decode_epoch(value: &[u8]) -> Option<(String, u64)> {
    let latest = u64::from_be_bytes(value.get(..8)?.try_into().ok()?);
    let epoch = std::str::from_utf8(value.get(8..)?).ok()?;
    Some((epoch.to_owned(), latest))
}

/// The write that stores message `offset` of `topic`.
pub fn put(topic: &str, offset: u64, time_ms: u64, headers: &Headers, payload: &[u8]) -> Write {
    let mut value = Vec::with_capacity(12 + payload.len());
    value.extend_from_slice(&time_ms.to_be_bytes());
    super::encode_headers(&mut value, headers);
    value.extend_from_slice(payload);
    Write::Put {
        tree: TREE,
        key: key(topic, offset),
        value,
    }
}

/// The write that forgets `topic`'s messages from offset `from` to `to`
/// (both included; 0 is the epoch).
pub fn delete(topic: &str, from: u64, to: u64) -> Write {
    Write::DeleteRange {
        tree: TREE,
        from: key(topic, from),
        to: key(topic, to),
    }
}

/// Splits a key into its topic and offset.
fn split(k: &[u8]) -> Option<(&str, u64)> {
    let at = k.len().checked_sub(9)?;
    if k[at] != 0xFF {
        return None;
    }
    let offset = u64::from_be_bytes(k[at + 1..].try_into().ok()?);
    Some((std::str::from_utf8(&k[..at]).ok()?, offset))
}

fn decode_entry(offset: u64, value: &[u8]) -> Option<StoredEntry> {
    let time_ms = u64::from_be_bytes(value.get(..8)?.try_into().ok()?);
    let mut at = 8;
    let headers = super::decode_headers(value, &mut at)?;
    Some(StoredEntry {
        offset,
        time_ms,
        headers,
        payload: Bytes::copy_from_slice(value.get(at..)?),
    })
}

impl Store {
    /// Every topic's stored history, in topic order. Records that do not
    /// decode are skipped with a warning.
    ///
    /// # Errors
    /// [`StoreError::Read`] if the tree cannot be read.
    pub fn load_history(&self) -> Result<Vec<HistoryRecord>, StoreError> {
        let mut out: Vec<HistoryRecord> = Vec::new();
        self.engine()?
            .scan(TREE, &mut |k, v| {
                let Some((topic, offset)) = split(k) else {
                    tracing::warn!(key = ?k, "skipping an undecodable history key");
                    return true;
                };
                if out.last().is_none_or(|r| r.topic != topic) {
                    out.push(HistoryRecord {
                        topic: topic.to_owned(),
                        ..HistoryRecord::default()
                    });
                }
                let Some(record) = out.last_mut() else {
                    return true;
                };
                if offset == 0 {
                    record.epoch = decode_epoch(v);
                } else if let Some(e) = decode_entry(offset, v) {
                    record.messages.push(e);
                } else {
                    tracing::warn!(topic, offset, "skipping an undecodable history record");
                }
                true
            })
            .map_err(super::read_error("read topic history"))?;
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_split_back_and_entries_round_trip() {
        let Write::Put { key, value, .. } = put(
            "chat/room",
            7,
            123,
            &Headers::from([("k".into(), "v".into())]),
            b"hi",
        ) else {
            panic!("a put");
        };
        assert_eq!(split(&key), Some(("chat/room", 7)));
        let e = decode_entry(7, &value).unwrap();
        assert_eq!((e.time_ms, &e.payload[..]), (123, &b"hi"[..]));
        assert_eq!(e.headers.get("k").map(String::as_str), Some("v"));
        assert!(split(b"short").is_none());
        let Write::Put { value, .. } = put_epoch("t", "9f3c01ab22d4", 42) else {
            panic!("a put");
        };
        assert_eq!(decode_epoch(&value), Some(("9f3c01ab22d4".into(), 42)));
        assert_eq!(decode_epoch(&value[..7]), None);
        for cut in 0..12 {
            assert!(decode_entry(1, &value[..cut]).is_none(), "cut at {cut}");
        }
    }

    #[test]
    fn a_topics_records_sort_by_offset_and_apart_from_longer_names() {
        // "a" and "a/b": the 0xFF separator keeps each topic's keys together.
        let mut keys = [key("a", 2), key("a/b", 1), key("a", 0), key("a", 256)];
        keys.sort();
        let order: Vec<_> = keys.iter().map(|k| split(k).unwrap()).collect();
        assert_eq!(order, [("a/b", 1), ("a", 0), ("a", 2), ("a", 256)]);
    }
}
