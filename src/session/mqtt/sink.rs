//! Where an MQTT session's deliveries go: [`MqttSink`], the session's
//! [`Sink`], turns topic messages and queue deliveries into PUBLISH packets
//! on its outbound queue, and keeps the packet ids in flight
//! ([`OutState`], [`Pending`]) until the session sees them acknowledged.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU8, Ordering};

use bytes::{Bytes, BytesMut};
use parking_lot::Mutex;

use crate::broker::{
    DeliveryOutcome, EncodingSlot, Published, QOS_HEADER, QueuedDelivery, Settlement, Sink, SubTag,
    Subscription, TOPIC_HEADER, WeakBroker,
};
use crate::protocol::codec::Format;
use crate::protocol::frame::Priority;
use crate::protocol::mqtt::{self, Packet};
use crate::session::{OutFrame, Outbound, PushError};

/// A packet id in use, and what its acknowledgement settles.
pub(super) enum Pending {
    /// A topic delivery (QoS 1 or 2) waiting for PUBACK / PUBREC.
    Topic,
    /// A durable subscription's delivery waiting for PUBACK / PUBREC.
    Queue {
        queue: Arc<str>,
        sub: Arc<str>,
        delivery: u64,
    },
    /// PUBREL sent, waiting for PUBCOMP.
    Released,
}

/// The packet ids of deliveries in flight.
#[derive(Default)]
pub(super) struct OutState {
    next_pid: u16,
    pub(super) pending: HashMap<u16, Pending>,
}

impl OutState {
    fn take_pid(&mut self, what: Pending) -> Option<u16> {
        if self.pending.len() >= usize::from(u16::MAX) {
            return None;
        }
        loop {
            self.next_pid = self.next_pid.wrapping_add(1).max(1);
            if !self.pending.contains_key(&self.next_pid) {
                self.pending.insert(self.next_pid, what);
                return Some(self.next_pid);
            }
        }
    }
}

/// Where an MQTT session's deliveries go: PUBLISH packets on its
/// outbound queue. A subscription's tag holds its granted QoS.
pub struct MqttSink {
    pub(super) id: u64,
    pub(super) out: Arc<Outbound>,
    pub(super) state: Mutex<OutState>,
    pub(super) broker: WeakBroker,
    /// The connection's protocol level once CONNECT is accepted (3.1.1
    /// until then), for the codec.
    pub(super) level: AtomicU8,
}

impl MqttSink {
    /// The protocol level the connection's packets are read and written at.
    pub(super) fn level(&self) -> u8 {
        self.level.load(Ordering::Relaxed)
    }

    pub(super) fn set_level(&self, level: u8) {
        self.level.store(level, Ordering::Relaxed);
    }

    fn send(&self, mut p: mqtt::Publish, what: Pending) -> DeliveryOutcome {
        if p.qos > 0 {
            match self.state.lock().take_pid(what) {
                Some(pid) => p.pid = Some(pid),
                None => return DeliveryOutcome::Dropped,
            }
        }
        let mut head = BytesMut::with_capacity(8 + p.topic.len());
        mqtt::publish_head(&mut head, &p, self.level());
        let frame = OutFrame::data(Format::Bincode, head.freeze(), p.payload.clone());
        // QoS 1/2 deliveries hold a packet id until acknowledged: they go
        // in the high lane, which the drop-oldest policy never evicts, and
        // only when there is room.
        let pushed = if p.qos > 0 {
            self.out.push_if_room(Priority::High, frame)
        } else {
            self.out.push(Priority::Normal, frame)
        };
        match pushed {
            Ok(()) => DeliveryOutcome::Queued,
            Err(e) => {
                if let Some(pid) = p.pid {
                    self.state.lock().pending.remove(&pid);
                }
                match e {
                    PushError::Dropped => DeliveryOutcome::Dropped,
                    PushError::Closed => DeliveryOutcome::Closed,
                }
            }
        }
    }

    pub(super) fn push(&self, packet: &Packet) {
        let mut buf = BytesMut::new();
        mqtt::encode(packet, &mut buf, self.level());
        let _ = self.out.push(
            Priority::High,
            OutFrame::data(Format::Bincode, Bytes::new(), buf.freeze()),
        );
    }
}

fn granted(sub: &Subscription) -> u8 {
    match sub.tag {
        SubTag::Qos(q) => q.min(2),
        _ => 0,
    }
}

impl Sink for MqttSink {
    fn id(&self) -> u64 {
        self.id
    }

    fn deliver(&self, sub: &Subscription, msg: &Arc<Published>) -> DeliveryOutcome {
        let qos = granted(sub).min(msg.qos);
        if qos == 0 {
            let head = msg.encoded(EncodingSlot::MqttPublish, |m| {
                let mut head = BytesMut::new();
                mqtt::publish_head(
                    &mut head,
                    &mqtt::Publish {
                        dup: false,
                        qos: 0,
                        retain: m.retained,
                        topic: m.topic.to_string(),
                        pid: None,
                        payload: m.payload.clone(),
                        props: mqtt::Properties::default(),
                    },
                    // The shared slot holds the 3.1.1 form (an MQTT 5
                    // connection will need a slot of its own).
                    mqtt::LEVEL_3_1_1,
                );
                head.freeze()
            });
            return match self.out.push(
                Priority::Normal,
                OutFrame::data(Format::Bincode, head, msg.payload.clone()),
            ) {
                Ok(()) => DeliveryOutcome::Queued,
                Err(PushError::Dropped) => DeliveryOutcome::Dropped,
                Err(PushError::Closed) => DeliveryOutcome::Closed,
            };
        }
        let p = mqtt::Publish {
            dup: false,
            qos,
            retain: msg.retained,
            topic: msg.topic.to_string(),
            pid: None,
            payload: msg.payload.clone(),
            props: mqtt::Properties::default(),
        };
        self.send(p, Pending::Topic)
    }

    fn deliver_queued(&self, sub: &Subscription, d: &QueuedDelivery<'_>) -> DeliveryOutcome {
        let m = d.message;
        let published_qos = m
            .headers
            .get(QOS_HEADER)
            .and_then(|q| q.parse::<u8>().ok())
            .unwrap_or(0);
        let qos = granted(sub).min(published_qos);
        let topic = m
            .headers
            .get(TOPIC_HEADER)
            .cloned()
            .unwrap_or_else(|| d.queue.to_owned());
        let p = mqtt::Publish {
            dup: m.deliveries > 1,
            qos,
            retain: false,
            topic,
            pid: None,
            payload: m.payload.clone(),
            props: mqtt::Properties::default(),
        };
        let what = Pending::Queue {
            queue: d.queue.into(),
            sub: sub.id.clone(),
            delivery: d.id,
        };
        let outcome = self.send(p, what);
        if qos == 0 && outcome == DeliveryOutcome::Queued {
            // Nothing will acknowledge a QoS 0 delivery: it is done.
            if let Some(b) = self.broker.upgrade() {
                b.settle_detached(d.queue, self.id, &sub.id, vec![d.id], Settlement::Ack);
            }
        }
        outcome
    }

    fn is_closed(&self) -> bool {
        self.out.is_closing()
    }
}
