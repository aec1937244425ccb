//! Retained topic messages on disk: tree `retained`, key = topic name,
//! value = `seq (u64 BE) | header count (u32 BE) | (len u32 BE, bytes) per
//! header key and value | payload`.

use bytes::Bytes;

use super::engine::Engine as _;
use super::write::Write;
use super::{Store, StoreError};
use crate::protocol::frame::Headers;

const TREE: &str = "retained";

/// A retained message as stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RetainedRecord {
    /// The topic.
    pub topic: String,
    /// Its sequence number when retained.
    pub seq: u64,
    /// Headers.
    pub headers: Headers,
    /// Payload.
    pub payload: Bytes,
}

/// The write that stores `topic`'s retained message.
pub fn put(topic: &str, seq: u64, headers: &Headers, payload: &[u8]) -> Write {
    let mut value = Vec::with_capacity(12 + payload.len());
    value.extend_from_slice(&seq.to_be_bytes());
    super::encode_headers(&mut value, headers);
    value.extend_from_slice(payload);
    Write::Put {
        tree: TREE,
        key: topic.as_bytes().to_vec(),
        value,
    }
}

/// The write that forgets `topic`'s retained message.
pub fn delete(topic: &str) -> Write {
    Write::Delete {
        tree: TREE,
        key: topic.as_bytes().to_vec(),
    }
}

fn decode(key: &[u8], value: &[u8]) -> Option<RetainedRecord> {
    let topic = String::from_utf8(key.to_vec()).ok()?;
    let seq = u64::from_be_bytes(value.get(..8)?.try_into().ok()?);
    let mut at = 8;
    let headers = super::decode_headers(value, &mut at)?;
    Some(RetainedRecord {
        topic,
        seq,
        headers,
        payload: Bytes::copy_from_slice(value.get(at..)?),
    })
}

impl Store {
    /// Every stored retained message. Records that do not decode are
    /// skipped with a warning (they cannot have been written by this
    /// schema version).
    ///
    /// # Errors
    /// [`StoreError::Io`] if the tree cannot be read.
    pub fn load_retained(&self) -> Result<Vec<RetainedRecord>, StoreError> {
        let mut out = Vec::new();
        self.engine()?
            .scan(TREE, &mut |k, v| {
                match decode(k, v) {
                    // An empty retained message means none (it is never
                    // stored as such); skip it rather than resurrect it.
                    Some(r) if r.payload.is_empty() => {}
                    Some(r) => out.push(r),
                    None => tracing::warn!(key = ?k, "skipping an undecodable retained record"),
                }
                true
            })
            .map_err(super::read_error("read retained messages"))?;
        Ok(out)
    }

    /// How many records [`Store::load_retained`] would return, without
    /// keeping them (for the count of a clean shutdown).
    ///
    /// # Errors
    /// [`StoreError::Read`] if the tree cannot be read.
    pub(super) fn count_retained(&self) -> Result<u64, StoreError> {
        let mut n = 0;
        self.engine()?
            .scan(TREE, &mut |k, v| {
                n += u64::from(decode(k, v).is_some_and(|r| !r.payload.is_empty()));
                true
            })
            .map_err(super::read_error("count retained messages"))?;
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip() {
        let mut h = Headers::new();
        h.insert("unit".into(), "C".into());
        h.insert("".into(), "é".into());
        let Write::Put { key, value, .. } = put("a/b", 7, &h, b"\\x00payload") else {
            panic!("a put");
        };
        let r = decode(&key, &value).unwrap();
        assert_eq!(
            (r.topic.as_str(), r.seq, &r.headers, &r.payload[..]),
            ("a/b", 7, &h, &b"\\x00payload"[..])
        );
    }

    #[test]
    fn truncated_values_do_not_decode() {
        let Write::Put { key, value, .. } =
            put("t", 1, &Headers::from([("k".into(), "v".into())]), b"p")
        else {
            panic!("a put");
        };
        for cut in 0..14 {
            assert!(decode(&key, &value[..cut]).is_none(), "cut at {cut}");
        }
    }
}
