//! The packet ids of an MQTT connection's deliveries in flight, and what
//! the client's acknowledgement of each settles.

use std::collections::HashMap;
use std::sync::Arc;

/// A packet id in use, and what its acknowledgement settles.
pub(in crate::session::mqtt) enum Pending {
    /// A topic delivery (QoS 1 or 2) of this many payload bytes waiting
    /// for PUBACK / PUBREC.
    Topic(u32),
    /// A durable subscription's delivery waiting for PUBACK / PUBREC.
    Queue {
        queue: Arc<str>,
        sub: Arc<str>,
        delivery: u64,
    },
    /// PUBREL sent, waiting for PUBCOMP.
    Released,
}

/// The deliveries in flight, by packet id. The map is boxed and made at
/// the first one: a connection that is never sent a QoS 1 or 2 delivery
/// holds 8 B here rather than a map's 48 (so boxed on purpose), which
/// keeps its [`super::sink::MqttSink`] at 88 B: 104 with its `Arc`, in
/// mimalloc's 112 B class rather than its 160 B one.
#[derive(Default)]
#[allow(clippy::box_collection)]
pub(in crate::session::mqtt) struct InFlight(Option<Box<HashMap<u16, Pending>>>);

impl InFlight {
    /// How many packet ids are in use.
    pub(in crate::session::mqtt) fn len(&self) -> usize {
        self.0.as_ref().map_or(0, |m| m.len())
    }

    /// Whether no packet id is in use.
    #[cfg(test)]
    pub(in crate::session::mqtt) fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// What packet id `pid` waits for, if it is in use.
    pub(in crate::session::mqtt) fn get(&self, pid: u16) -> Option<&Pending> {
        self.0.as_ref()?.get(&pid)
    }

    /// Whether packet id `pid` is in use.
    pub(in crate::session::mqtt) fn contains(&self, pid: u16) -> bool {
        self.get(pid).is_some()
    }

    /// Puts `pid` in use for `what` (replacing what it held).
    pub(in crate::session::mqtt) fn insert(&mut self, pid: u16, what: Pending) {
        self.0.get_or_insert_default().insert(pid, what);
    }

    /// Frees `pid`; what it held, if it was in use.
    pub(in crate::session::mqtt) fn remove(&mut self, pid: u16) -> Option<Pending> {
        self.0.as_mut()?.remove(&pid)
    }
}
