//! A published message as the broker hands it to subscribers: shared, with
//! its encodings cached so that each wire format encodes it once.

use std::sync::{Arc, OnceLock};

use bytes::Bytes;

use crate::protocol::frame::{Headers, Priority};

/// Which of a message's cached encodings a subscriber reads
/// ([`Published::encoded`]): each wire form is encoded once per publish
/// and shared by every subscriber that uses it. The broker only keeps the
/// slots; the sinks say what goes in them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EncodingSlot {
    /// The body of a native `message` frame in JSON.
    NativeJson,
    /// The body of a native `message` frame in bincode.
    NativeBincode,
    /// An MQTT QoS 0 PUBLISH header.
    MqttPublish,
}

impl EncodingSlot {
    const COUNT: usize = 3;

    fn index(self) -> usize {
        match self {
            EncodingSlot::NativeJson => 0,
            EncodingSlot::NativeBincode => 1,
            EncodingSlot::MqttPublish => 2,
        }
    }
}

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
    /// MQTT quality of service of the publish (0-2).
    pub qos: u8,
    /// The publisher's retain flag, which MQTT 5's "retain as published"
    /// passes on to a subscriber (`retained` is the copy kept for new
    /// subscribers).
    pub retain_flag: bool,
    /// The publishing connection's sink id (0 for none), so an MQTT 5
    /// subscription with "no local" leaves out its own publishes.
    pub origin: u64,
    /// The topic's history epoch, when the topic keeps a history
    /// (`[[history]]`): then `seq` is the message's offset in it, and
    /// (epoch, seq) is the position a client recovers from.
    pub epoch: Option<Arc<str>>,
    encodings: [OnceLock<Bytes>; EncodingSlot::COUNT],
    /// Whether encodings are kept for the next subscriber: not for a
    /// message its topic delivers to one subscriber only (filling a cell
    /// costs a once-only lock's slow path, ~3% of an MQTT 1 -> 1 message).
    cache: bool,
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
            qos: 0,
            retain_flag: false,
            origin: 0,
            epoch: None,
            encodings: Default::default(),
            cache: true,
        }
    }

    /// The same message, its encodings not kept (`cache` false): for a
    /// message that has one subscriber.
    pub fn with_cache(mut self, cache: bool) -> Self {
        self.cache = cache;
        self
    }

    /// The same message with QoS `qos`.
    pub fn with_qos(mut self, qos: u8) -> Self {
        self.qos = qos;
        self
    }

    /// The same message as published with the retain flag `retain` by
    /// the connection whose sink is `origin`.
    pub fn with_origin(mut self, origin: u64, retain: bool) -> Self {
        self.origin = origin;
        self.retain_flag = retain;
        self
    }

    /// The copy kept as the topic's retained message, with a payload of
    /// its own (see [`Published::unshared`]: a retained message may be
    /// kept for days).
    pub fn as_retained(&self) -> Published {
        let mut kept = Published::new(
            self.topic.clone(),
            self.seq,
            Bytes::copy_from_slice(&self.payload),
            self.headers.clone(),
            self.priority,
            true,
        )
        .with_qos(self.qos)
        .with_origin(self.origin, true);
        kept.epoch = self.epoch.clone();
        kept
    }

    /// A copy whose payload has an allocation of its own, for what keeps
    /// a message for long (a topic's history): a payload read off a
    /// connection is a slice of that connection's read buffer, and
    /// keeping the slice would keep the whole buffer.
    pub fn unshared(&self) -> Published {
        let mut kept = Published::new(
            self.topic.clone(),
            self.seq,
            Bytes::copy_from_slice(&self.payload),
            self.headers.clone(),
            self.priority,
            false,
        )
        .with_qos(self.qos)
        .with_origin(self.origin, self.retain_flag);
        kept.epoch = self.epoch.clone();
        kept
    }

    /// The message's encoding in `slot`, made by `encode` on first use and
    /// shared afterwards (by every subscriber using that format).
    pub fn encoded(&self, slot: EncodingSlot, encode: impl FnOnce(&Published) -> Bytes) -> Bytes {
        match self.encodings.get(slot.index()) {
            Some(cell) if self.cache => cell.get_or_init(|| encode(self)).clone(),
            _ => encode(self),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What is kept for long (the retained copy, a history's copy) has a
    /// payload of its own: a payload read off a connection is a view of
    /// its read buffer, which keeping the view would keep whole.
    #[test]
    fn kept_copies_do_not_share_the_payload_they_were_made_from() {
        let read_buffer = Bytes::from(vec![7u8; 4096]);
        let msg = Published::new(
            "t".into(),
            1,
            read_buffer.slice(100..164),
            Headers::new(),
            Priority::Normal,
            false,
        );
        let shared = msg.payload.as_ptr_range();
        for kept in [msg.as_retained(), msg.unshared()] {
            assert_eq!(kept.payload, msg.payload);
            assert!(!shared.contains(&kept.payload.as_ptr()), "a copy");
        }
        assert!(msg.as_retained().retained);
    }
}
