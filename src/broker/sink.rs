//! Where a subscription's messages go. The broker knows subscribers only as
//! a [`Sink`] plus an opaque tag, so topics never touch sockets.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use bytes::Bytes;

use super::message::{EncodingSlot, Published};
use crate::store::queues::StoredMessage;

static NEXT_ID: AtomicU64 = AtomicU64::new(1);

/// A fresh id for a [`Sink`]: sinks of every kind share one sequence so
/// that ids never collide.
pub fn next_sink_id() -> u64 {
    NEXT_ID.fetch_add(1, Ordering::Relaxed)
}

/// What happened to one delivery: what [`Sink::deliver`] returns to the
/// topic or queue (not to be confused with `wharf::Delivery`, the message
/// an embedded actor receives).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeliveryOutcome {
    /// Queued for the subscriber.
    Queued,
    /// Refused by the subscriber's slow-consumer policy (counted there).
    Dropped,
    /// The subscriber is gone; the topic forgets the subscription.
    Closed,
    /// Queued, but the subscriber is past its mark of unacknowledged
    /// deliveries: the publisher should wait for it ([`Sink::crowded`],
    /// [`super::Hold`]) before it takes more from its client.
    Crowded,
}

/// A receiver of messages: a WebSocket session, an embedded actor, a queue.
/// `deliver` runs inside a topic's task, so it must not block: it queues
/// and returns.
pub trait Sink: Send + Sync {
    /// Unique among live sinks; with the subscription id it identifies a
    /// subscription.
    fn id(&self) -> u64;
    /// Hands `msg` to the sink for the subscription described by `sub`.
    fn deliver(&self, sub: &Subscription, msg: &Arc<Published>) -> DeliveryOutcome;
    /// Whether the sink is gone for good (its subscriptions can be dropped).
    fn is_closed(&self) -> bool;
    /// Hands a queue delivery to the sink, for the consumer described by
    /// `sub`. A sink that cannot consume queues keeps the default, which
    /// refuses; `Dropped` makes the queue keep the message and skip this
    /// consumer until it acknowledges something.
    fn deliver_queued(&self, sub: &Subscription, delivery: &QueuedDelivery<'_>) -> DeliveryOutcome {
        let _ = (sub, delivery);
        DeliveryOutcome::Closed
    }
    /// Whether the sink is crowded now: it answered
    /// [`DeliveryOutcome::Crowded`] and has not caught up since (false
    /// once it closes). Sinks that never crowd keep the default.
    fn crowded(&self) -> bool {
        false
    }
    /// What the sink notifies whenever it becomes crowded, catches up or
    /// closes, for publishers waiting on it (or on themselves); `None` for
    /// sinks that never crowd.
    fn signal(&self) -> Option<Arc<tokio::sync::Notify>> {
        None
    }
    /// Closes the sink because it kept a publisher waiting longer than it
    /// may (`why` says how long): the publishers it held go on.
    fn expel(&self, why: &str) {
        let _ = why;
    }
}

/// A delivery as a consumer's sink sees it.
#[derive(Debug)]
pub struct QueuedDelivery<'a> {
    /// The queue's name.
    pub queue: &'a str,
    /// The delivery id to ack, nack, reject or touch (unique per queue).
    pub id: u64,
    /// The message (`deliveries` is this delivery's count, from 1).
    pub message: &'a StoredMessage,
}

/// What a sink attaches to one of its subscriptions at subscribe time,
/// to use at each delivery.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SubTag {
    /// Nothing.
    None,
    /// The encoded start of a native session's `message` frames for this
    /// subscription (made once, sent before each shared body).
    Prefix(Bytes),
    /// An MQTT subscription's granted QoS and MQTT 5 options.
    Mqtt(MqttSubOptions),
    /// A native durable subscription's topic filter (its consumer's
    /// `filter` is the queue's name), so that rights can be checked
    /// against it again after a `refresh`.
    Durable(Arc<str>),
}

/// What an MQTT subscription asked for, kept with it so a delivery is
/// shaped without a lookup: the granted QoS, and MQTT 5's options (all
/// off, and identifier 0, at levels 3 and 4).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct MqttSubOptions {
    /// Granted QoS (0-2).
    pub qos: u8,
    /// Leave out messages the subscribing connection published.
    pub no_local: bool,
    /// Pass the publisher's retain flag on (otherwise only the copy sent
    /// at subscribe time is marked retained).
    pub retain_as_published: bool,
    /// The subscription identifier deliveries carry (0: none).
    pub id: u32,
    /// Send no retained message at subscribe time (MQTT 5 retain
    /// handling 2, or 1 for a subscription that existed).
    pub skip_retained: bool,
}

/// One subscription as topics hold it: a copy per matching topic (and one
/// in the subscriber's own list), each 56 B, sharing what the sink
/// attached in one allocation ([`Subscription::tag`]).
#[derive(Clone)]
pub struct Subscription {
    /// The receiver.
    pub sink: Arc<dyn Sink>,
    /// The subscriber's name for this subscription.
    pub id: Arc<str>,
    /// The filter subscribed to.
    pub filter: Arc<str>,
    /// What every copy shares: the tag, the encoding slot and the cancel
    /// flag. A delivery reads the flag anyway, so the tag and slot cost no
    /// look elsewhere, and each copy is 48 B smaller than with them
    /// inline (an MQTT/TCP connection holds two copies: the 112 B class
    /// became the 64 B one; benches/README.md, "mimalloc's classes").
    shared: Arc<Shared>,
}

/// What a subscription's copies share.
struct Shared {
    /// Once set, no topic delivers to the subscription and each drops it
    /// on its next publish, so ending a subscription takes effect at once
    /// even if a topic is too busy to take the unsubscribe task.
    cancelled: AtomicBool,
    /// Which of a message's cached encodings ([`Published::encoded`]) the
    /// subscription uses, so each wire format is encoded once per
    /// publish; `None` for sinks that take messages unencoded (actors,
    /// queues).
    encoding: Option<EncodingSlot>,
    /// What the sink attached at subscribe time for its own use.
    tag: SubTag,
}

impl Subscription {
    /// A live subscription.
    pub fn new(
        sink: Arc<dyn Sink>,
        id: &str,
        filter: &str,
        tag: SubTag,
        encoding: Option<EncodingSlot>,
    ) -> Self {
        let filter: Arc<str> = filter.into();
        // An MQTT subscription is named by its filter: one string for both.
        let id = if id == &*filter {
            filter.clone()
        } else {
            id.into()
        };
        Subscription {
            sink,
            id,
            filter,
            shared: Arc::new(Shared {
                cancelled: AtomicBool::new(false),
                encoding,
                tag,
            }),
        }
    }

    /// What the sink attached at subscribe time for its own use.
    pub fn tag(&self) -> &SubTag {
        &self.shared.tag
    }

    /// Which of a message's cached encodings this subscription uses
    /// (`None` for sinks that take messages unencoded).
    pub fn encoding(&self) -> Option<EncodingSlot> {
        self.shared.encoding
    }

    /// Ends the subscription everywhere at once.
    pub fn cancel(&self) {
        self.shared.cancelled.store(true, Ordering::Release);
    }

    /// Whether [`Subscription::cancel`] was called.
    pub fn is_cancelled(&self) -> bool {
        self.shared.cancelled.load(Ordering::Acquire)
    }

    fn key(&self) -> (u64, &str) {
        (self.sink.id(), &self.id)
    }
}

impl PartialEq for Subscription {
    fn eq(&self, other: &Self) -> bool {
        self.key() == other.key()
    }
}

impl Eq for Subscription {}

impl std::fmt::Debug for Subscription {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Subscription")
            .field("sink", &self.sink.id())
            .field("id", &self.id)
            .field("filter", &self.filter)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    /// Each copy of a subscription is 56 B (a 64 B allocation in the
    /// exact-size lists topics and sessions keep), and what the copies
    /// share fits a 64 B allocation too (benches/README.md, "mimalloc's
    /// classes").
    #[test]
    fn a_subscription_and_what_its_copies_share_fit_64_byte_allocations() {
        let copy = std::mem::size_of::<super::Subscription>();
        assert!(copy <= 56, "a subscription is {copy} B");
        // Two counts, then the shared part.
        let shared = 16 + std::mem::size_of::<super::Shared>();
        assert!(
            shared <= 64,
            "what a subscription's copies share is {shared} B"
        );
    }
}
