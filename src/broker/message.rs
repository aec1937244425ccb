//! A published message as the broker hands it to subscribers: shared, with
//! its encodings cached so that each wire format encodes it once.

use std::sync::{Arc, OnceLock};

use bytes::Bytes;

use crate::protocol::frame::{Headers, Priority};

/// How many wire encodings a message can cache (native JSON, native
/// bincode, and room for MQTT).
pub const ENCODING_SLOTS: usize = 4;

/// One publish, shared by every subscriber it reaches (`Arc<Published>`):
/// the payload is never copied per subscriber.
#[derive(Debug)]
pub struct Published {
    /// The topic it was published to.
    pub topic: Arc<str>,
    /// Its topic's sequence number (from 1 per topic incarnation).
    pub seq: u64,
    /// The payload.
    pub payload: Bytes,
    /// Message headers.
    pub headers: Headers,
    /// Lane at each subscriber.
    pub priority: Priority,
    /// True for the retained copy handed to new subscribers.
    pub retained: bool,
    encodings: [OnceLock<Bytes>; ENCODING_SLOTS],
}

impl Published {
    /// A message as a topic task stamps it.
    pub fn new(
        topic: Arc<str>,
        seq: u64,
        payload: Bytes,
        headers: Headers,
        priority: Priority,
        retained: bool,
    ) -> Self {
        Published {
            topic,
            seq,
            payload,
            headers,
            priority,
            retained,
            encodings: Default::default(),
        }
    }

    /// The copy kept as the topic's retained message.
    pub fn as_retained(&self) -> Published {
        Published::new(
            self.topic.clone(),
            self.seq,
            self.payload.clone(),
            self.headers.clone(),
            self.priority,
            true,
        )
    }

    /// The message's encoding in `slot`, made by `encode` on first use and
    /// shared afterwards (by every subscriber using that format).
    pub fn encoded(&self, slot: usize, encode: impl FnOnce(&Published) -> Bytes) -> Bytes {
        match self.encodings.get(slot) {
            Some(cell) => cell.get_or_init(|| encode(self)).clone(),
            None => encode(self),
        }
    }
}
