//! Where an MQTT session's deliveries go: [`MqttSink`], the session's
//! [`Sink`], turns topic messages and queue deliveries into PUBLISH packets
//! on its outbound queue, and keeps the packet ids in flight
//! ([`OutState`], [`Pending`]) until the session sees them acknowledged.
//!
//! At MQTT 5 a delivery is shaped per subscription and connection
//! (`v5.rs`): headers become properties, the subscription's identifier and
//! options apply, topic aliases stand for topics the client has seen, and
//! the client's receive maximum and maximum packet size bound what is sent.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::sync::atomic::{AtomicU8, Ordering};

use bytes::{Bytes, BytesMut};
use parking_lot::Mutex;
use tokio::sync::Notify;

use super::v5;
use crate::broker::{
    DeliveryOutcome, EncodingSlot, MqttSubOptions, ORIGIN_HEADER, Published, QOS_HEADER,
    QueuedDelivery, RETAIN_HEADER, Settlement, Sink, SubTag, Subscription, TOPIC_HEADER,
    WeakBroker, origin_tag,
};
use crate::protocol::codec::Format;
use crate::protocol::frame::Priority;
use crate::protocol::mqtt::{self, Packet};
use crate::session::{OutFrame, Outbound, PushError};

pub(super) use super::inflight::{InFlight, Pending};

/// The packet ids of deliveries in flight, and whether their number
/// crowds the subscriber ([`Flow`]).
pub(super) struct OutState {
    next_pid: u16,
    /// Deliveries in flight (and, at MQTT 5, waiting) at which the sink
    /// crowds: `[mqtt] max_inflight`.
    mark: u16,
    /// `[mqtt] slow_subscriber = "drop"`: past the mark, topic deliveries
    /// are dropped instead of crowding.
    drop_past_mark: bool,
    /// Past the mark since it last fell to half of it: topic deliveries
    /// answer [`DeliveryOutcome::Crowded`].
    crowded: bool,
    /// Topic deliveries in flight (queue deliveries, bounded by their
    /// subscription's credit, do not count toward the mark).
    topics: usize,
    /// Payload bytes of the topic deliveries in flight.
    bytes: usize,
    /// Notified when `crowded` changes or the connection ends, for held
    /// publishers; made when the first one waits.
    room: Option<Arc<Notify>>,
    pub(super) pending: InFlight,
    /// What an MQTT 5 connection agreed at CONNECT (`None` below level 5).
    pub(super) v5: Option<Box<V5Out>>,
}

/// QoS 1/2 topic deliveries an MQTT 5 connection may have waiting for room
/// under its receive maximum (and at most `session.outbound_limit` bytes
/// of payload); past either they are dropped and counted.
pub(super) const WAITING_MAX: usize = 1000;

/// The limits an MQTT 5 client set at CONNECT on what it receives, and the
/// topic aliases the server gave it.
pub(super) struct V5Out {
    /// The client's receive maximum: QoS 1/2 publishes unacknowledged at
    /// most.
    pub(super) receive_max: usize,
    /// The client's maximum packet size in bytes.
    pub(super) max_packet: usize,
    /// Topic aliases the server may use (the client's maximum, capped by
    /// `[mqtt] topic_alias_maximum`).
    pub(super) alias_max: u16,
    /// Aliases given out, by topic: assigned once per connection.
    pub(super) aliases: HashMap<String, u16>,
    /// QoS 1/2 topic deliveries waiting for the receive maximum (at most
    /// [`WAITING_MAX`], and the outbound limit in payload bytes).
    pub(super) waiting: VecDeque<mqtt::PublishPacket>,
    /// Payload bytes in `waiting`.
    pub(super) waiting_bytes: usize,
}

impl V5Out {
    /// Limits for a client that asked for none.
    pub(super) fn new(receive_max: u16, max_packet: u32, alias_max: u16) -> V5Out {
        V5Out {
            receive_max: usize::from(receive_max.max(1)),
            max_packet: usize::try_from(max_packet).unwrap_or(usize::MAX),
            alias_max,
            aliases: HashMap::new(),
            waiting: VecDeque::new(),
            waiting_bytes: 0,
        }
    }
}

/// What an MQTT connection does with a QoS 1 or 2 subscriber that falls
/// behind (`[mqtt] slow_subscriber`, `max_inflight`, `hold_timeout_ms`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Flow {
    /// Deliveries in flight to one subscriber at which it crowds.
    pub max_inflight: u16,
    /// Drop topic deliveries past `max_inflight` instead of holding the
    /// publishers back.
    pub drop: bool,
    /// Longest a publisher is held for one message before the subscribers
    /// still crowded are disconnected.
    pub hold_timeout: std::time::Duration,
}

impl Flow {
    /// The flow `[mqtt]` asks for.
    pub fn of(cfg: &crate::config::MqttConfig) -> Flow {
        Flow {
            max_inflight: u16::try_from(cfg.max_inflight.clamp(1, usize::from(u16::MAX)))
                .unwrap_or(u16::MAX),
            drop: cfg.slow_subscriber == crate::config::SlowSubscriber::Drop,
            hold_timeout: std::time::Duration::from_millis(cfg.hold_timeout_ms),
        }
    }
}

impl Flow {
    /// The hold timeout in milliseconds, as a session keeps it.
    pub(super) fn hold_ms(&self) -> u32 {
        u32::try_from(self.hold_timeout.as_millis()).unwrap_or(u32::MAX)
    }
}

impl Default for Flow {
    /// `[mqtt]`'s defaults, without making a whole `MqttConfig` (its
    /// addresses are strings) for every connection.
    fn default() -> Self {
        Flow {
            max_inflight: u16::try_from(crate::config::MAX_INFLIGHT).unwrap_or(u16::MAX),
            drop: false,
            hold_timeout: std::time::Duration::from_millis(crate::config::HOLD_TIMEOUT_MS),
        }
    }
}

impl OutState {
    /// No delivery in flight yet, crowding at `flow`'s mark.
    pub(super) fn new(flow: &Flow) -> Self {
        let mut st = OutState {
            next_pid: 0,
            mark: 1,
            drop_past_mark: false,
            crowded: false,
            topics: 0,
            bytes: 0,
            room: None,
            pending: InFlight::default(),
            v5: None,
        };
        st.set_flow(flow);
        st
    }

    /// Crowds at `flow`'s mark from now on.
    pub(super) fn set_flow(&mut self, flow: &Flow) {
        self.mark = flow.max_inflight.max(1);
        self.drop_past_mark = flow.drop;
    }

    fn take_pid(&mut self, what: Pending) -> Option<u16> {
        if self.pending.len() >= usize::from(u16::MAX) {
            return None;
        }
        if let Pending::Topic(n) = what {
            self.topics += 1;
            self.bytes += n as usize;
        }
        loop {
            self.next_pid = self.next_pid.wrapping_add(1).max(1);
            if !self.pending.contains(self.next_pid) {
                self.pending.insert(self.next_pid, what);
                return Some(self.next_pid);
            }
        }
    }

    /// Frees packet id `pid`; what it was waiting for, if it was in use.
    pub(super) fn remove(&mut self, pid: u16) -> Option<Pending> {
        let p = self.pending.remove(pid)?;
        if let Pending::Topic(n) = p {
            self.topics -= 1;
            self.bytes -= n as usize;
        }
        Some(p)
    }

    /// Topic deliveries in flight or waiting, their payload bytes, and
    /// the mark they crowd at (at MQTT 5 at most the client's receive
    /// maximum and half the waiting room).
    fn load(&self) -> (usize, usize, usize) {
        let mark = usize::from(self.mark);
        match &self.v5 {
            Some(v) => (
                self.topics + v.waiting.len(),
                self.bytes + v.waiting_bytes,
                mark.min(v.receive_max.saturating_add(WAITING_MAX / 2)),
            ),
            None => (self.topics, self.bytes, mark),
        }
    }

    /// What a topic delivery just counted in flight (or set waiting)
    /// answers: crowded from the mark (or half the outbound limit in
    /// bytes) until the load falls to half of that (a quarter), which
    /// acknowledgements see first ([`OutState::relieve`]).
    fn queued(&mut self, limit: usize) -> DeliveryOutcome {
        if self.drop_past_mark {
            return DeliveryOutcome::Queued;
        }
        if self.crowded {
            // Seen here first when the deliveries counted went without
            // an acknowledgement (refused by a full outbound).
            if let Some(room) = self.relieve(limit, false) {
                room.notify_waiters();
            }
        } else {
            let (load, bytes, mark) = self.load();
            self.crowded = load >= mark || bytes >= limit / 2;
            // A publisher held for others stops waiting when it crowds
            // itself (it must read its own acknowledgements).
            if let (true, Some(room)) = (self.crowded, &self.room) {
                room.notify_waiters();
            }
        }
        if self.crowded {
            DeliveryOutcome::Crowded
        } else {
            DeliveryOutcome::Queued
        }
    }

    /// Whether a topic delivery is to be dropped for the load alone
    /// (`slow_subscriber = "drop"` past the mark).
    fn drops(&self) -> bool {
        self.drop_past_mark && {
            let (load, _, mark) = self.load();
            load >= mark
        }
    }

    /// After acknowledgements: no longer crowded once the load is at half
    /// the mark (and a quarter of the limit in bytes), or at once with
    /// `all`; the signal to notify then.
    fn relieve(&mut self, limit: usize, all: bool) -> Option<Arc<Notify>> {
        if !self.crowded {
            return None;
        }
        let (load, bytes, mark) = self.load();
        if all || (load <= mark / 2 && bytes <= limit / 4) {
            self.crowded = false;
            return self.room.clone();
        }
        None
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

    fn send(&self, mut p: mqtt::PublishPacket, what: Pending) -> DeliveryOutcome {
        if self.level() == mqtt::LEVEL_5 {
            return self.send_v5(p, what);
        }
        let mut outcome = DeliveryOutcome::Queued;
        if p.qos > 0 {
            let topic = matches!(what, Pending::Topic(_));
            let mut st = self.state.lock();
            if topic && st.drops() {
                return DeliveryOutcome::Dropped;
            }
            match st.take_pid(what) {
                Some(pid) => p.pid = Some(pid),
                None => return DeliveryOutcome::Dropped,
            }
            // Counted with the packet id, under the same lock.
            if topic {
                outcome = st.queued(self.out.limit());
            }
        }
        let mut head = BytesMut::with_capacity(8 + p.topic.len());
        mqtt::publish_head(&mut head, &p, self.level());
        let frame = OutFrame::data(Format::Bincode, head.freeze(), p.payload.clone());
        match self.push_publish(frame, p.qos > 0) {
            Ok(()) => outcome,
            Err(e) => {
                if let Some(pid) = p.pid {
                    let mut st = self.state.lock();
                    st.remove(pid);
                    // Counted as crowding a moment ago: looked at again.
                    if let Some(room) = st.relieve(self.out.limit(), false) {
                        room.notify_waiters();
                    }
                }
                lost(e)
            }
        }
    }

    /// A topic delivery of `p` waiting for an acknowledgement.
    fn topic_pending(p: &mqtt::PublishPacket) -> Pending {
        Pending::Topic(u32::try_from(p.payload.len()).unwrap_or(u32::MAX))
    }

    /// Queues a PUBLISH. One that must not be evicted (QoS 1/2 ones hold
    /// a packet id until acknowledged; an MQTT 5 one may tell the client a
    /// topic alias) goes in the high lane, which the drop-oldest policy
    /// never evicts, and only when there is room; others take the normal
    /// lane under the slow-consumer policy.
    fn push_publish(&self, frame: OutFrame, keep: bool) -> Result<(), PushError> {
        if keep {
            self.out.push_if_room(Priority::High, frame)
        } else {
            self.out.push(Priority::Normal, frame)
        }
    }

    /// An MQTT 5 delivery: held back past the client's receive maximum
    /// (topic deliveries wait, queue deliveries stay in their queue), then
    /// aliased and bounded by the client's maximum packet size.
    #[inline(never)]
    fn send_v5(&self, mut p: mqtt::PublishPacket, what: Pending) -> DeliveryOutcome {
        let mut st = self.state.lock();
        let topic = matches!(what, Pending::Topic(_));
        let limit = self.out.limit();
        if p.qos > 0 {
            if topic && st.drops() {
                return DeliveryOutcome::Dropped;
            }
            // Room under the receive maximum goes to those waiting first
            // (order), so a queue that waits with nothing in flight (a
            // release refused) moves again.
            self.release_waiting(&mut st);
            // Full, or others waiting still.
            let full = st
                .v5
                .as_ref()
                .is_some_and(|v| st.pending.len() >= v.receive_max || !v.waiting.is_empty());
            if full {
                let waits = match (&what, st.v5.as_mut()) {
                    (Pending::Topic(_), Some(v))
                        if v.waiting.len() < WAITING_MAX
                            && v.waiting_bytes + p.payload.len() <= limit =>
                    {
                        v.waiting_bytes += p.payload.len();
                        v.waiting.push_back(p);
                        true
                    }
                    _ => false,
                };
                return if waits {
                    st.queued(limit)
                } else {
                    DeliveryOutcome::Dropped
                };
            }
            match st.take_pid(what) {
                Some(pid) => p.pid = Some(pid),
                None => return DeliveryOutcome::Dropped,
            }
        }
        let qos = p.qos;
        match self.write_v5(&mut st, p) {
            DeliveryOutcome::Queued if topic && qos > 0 => st.queued(limit),
            outcome => outcome,
        }
    }

    /// Encodes and queues an MQTT 5 PUBLISH whose packet id (if any) is
    /// taken; `st` is the locked state.
    fn write_v5(&self, st: &mut OutState, mut p: mqtt::PublishPacket) -> DeliveryOutcome {
        let (alias_max, max_packet) = st
            .v5
            .as_ref()
            .map_or((0, usize::MAX), |v| (v.alias_max, v.max_packet));
        // A topic the client knows by alias goes as the alias alone; a new
        // one takes a free alias, and the packet that tells the client
        // goes in the high lane, which nothing evicts, so the client never
        // sees an alias it was not told.
        let mut assigned = None;
        if alias_max > 0 {
            if let Some(v) = st.v5.as_mut() {
                match v.aliases.get(p.topic.as_str()) {
                    Some(&a) => {
                        p.props.topic_alias = Some(a);
                        p.topic.clear();
                    }
                    None if v.aliases.len() < usize::from(alias_max) => {
                        let a = u16::try_from(v.aliases.len() + 1).unwrap_or(u16::MAX);
                        v.aliases.insert(p.topic.clone(), a);
                        p.props.topic_alias = Some(a);
                        assigned = Some(p.topic.clone());
                    }
                    None => {}
                }
            }
        }
        let mut head = BytesMut::with_capacity(16 + p.topic.len());
        mqtt::publish_head(&mut head, &p, mqtt::LEVEL_5);
        if let (Some(topic), true) = (&assigned, head.len() + p.payload.len() > max_packet) {
            // The alias property made it too large: without it, then.
            if let Some(v) = st.v5.as_mut() {
                v.aliases.remove(topic);
            }
            p.props.topic_alias = None;
            assigned = None;
            head.clear();
            mqtt::publish_head(&mut head, &p, mqtt::LEVEL_5);
        }
        let undo = |st: &mut OutState, p: &mqtt::PublishPacket| {
            if let Some(pid) = p.pid {
                st.remove(pid);
            }
            if let (Some(topic), Some(v)) = (&assigned, st.v5.as_mut()) {
                v.aliases.remove(topic);
            }
        };
        if head.len() + p.payload.len() > max_packet {
            // MQTT 5 §3.1.2.11.4: a packet over the client's maximum is
            // discarded as if it had been sent.
            undo(st, &p);
            return DeliveryOutcome::Dropped;
        }
        let frame = OutFrame::data(Format::Bincode, head.freeze(), p.payload.clone());
        match self.push_publish(frame, p.qos > 0 || assigned.is_some()) {
            Ok(()) => DeliveryOutcome::Queued,
            Err(e) => {
                undo(st, &p);
                lost(e)
            }
        }
    }

    /// After acknowledgements: sends the topic deliveries that waited for
    /// the receive maximum (MQTT 5) as far as they made room, and lets the
    /// publishers held for this subscriber go on once it has caught up.
    pub(super) fn acknowledged(&self) {
        let mut st = self.state.lock();
        self.release_waiting(&mut st);
        let room = st.relieve(self.out.limit(), false);
        drop(st);
        if let Some(room) = room {
            room.notify_waiters();
        }
    }

    /// The connection is ending: no publisher waits for it any longer.
    pub(super) fn relieve_all(&self) {
        let room = self.state.lock().relieve(self.out.limit(), true);
        if let Some(room) = room {
            room.notify_waiters();
        }
    }

    fn release_waiting(&self, st: &mut OutState) {
        loop {
            let inflight = st.pending.len();
            let Some(v) = st.v5.as_ref() else { return };
            if v.waiting.is_empty() || inflight >= v.receive_max {
                return;
            }
            let Some(mut p) = st.v5.as_mut().and_then(|v| v.waiting.pop_front()) else {
                return;
            };
            if let Some(v) = st.v5.as_mut() {
                v.waiting_bytes -= p.payload.len();
            }
            match st.take_pid(Self::topic_pending(&p)) {
                Some(pid) => p.pid = Some(pid),
                None => return,
            }
            // Refused: over the client's maximum packet size (dropped as
            // if sent: the next goes on), or the outbound full or closing
            // (that one lost, counted; the rest wait). Acknowledgements,
            // the next delivery, and a held publisher's looks (`crowded`)
            // release them, so they never wait with nothing to move them.
            let too_large = st
                .v5
                .as_ref()
                .is_some_and(|v| p.payload.len() > v.max_packet);
            if self.write_v5(st, p) != DeliveryOutcome::Queued && !too_large {
                return;
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

/// What a refused push means for the delivery.
fn lost(e: PushError) -> DeliveryOutcome {
    match e {
        PushError::Dropped => DeliveryOutcome::Dropped,
        PushError::Closed => DeliveryOutcome::Closed,
    }
}

/// The options an MQTT subscription was made with.
fn options(sub: &Subscription) -> MqttSubOptions {
    match sub.tag() {
        SubTag::Mqtt(o) => *o,
        _ => MqttSubOptions::default(),
    }
}

/// A subscription's tag for `options`.
pub(super) fn tag(options: MqttSubOptions) -> SubTag {
    SubTag::Mqtt(MqttSubOptions {
        qos: options.qos.min(2),
        ..options
    })
}

impl Sink for MqttSink {
    fn id(&self) -> u64 {
        self.id
    }

    fn deliver(&self, sub: &Subscription, msg: &Arc<Published>) -> DeliveryOutcome {
        let opts = options(sub);
        let qos = opts.qos.min(msg.qos);
        if msg.retained && (opts.skip_retained || v5::expired(&msg.headers)) {
            // Retain handling said no, or a retained message is past its
            // MQTT 5 message expiry.
            return DeliveryOutcome::Queued;
        }
        if self.level() == mqtt::LEVEL_5 {
            return self.deliver_v5(opts, qos, msg);
        }
        if qos == 0 {
            let head = msg.encoded(EncodingSlot::MqttPublish, |m| {
                let mut head = BytesMut::new();
                mqtt::publish_head(
                    &mut head,
                    &mqtt::PublishPacket {
                        dup: false,
                        qos: 0,
                        retain: m.retained,
                        topic: m.topic.to_string(),
                        pid: None,
                        payload: m.payload.clone(),
                        props: mqtt::Properties::default(),
                    },
                    // The shared slot holds the 3.1.1 form (MQTT 5
                    // deliveries are shaped per subscription above).
                    mqtt::LEVEL_3_1_1,
                );
                head.freeze()
            });
            return match self.out.push(
                Priority::Normal,
                OutFrame::data(Format::Bincode, head, msg.payload.clone()),
            ) {
                Ok(()) => DeliveryOutcome::Queued,
                Err(e) => lost(e),
            };
        }
        let p = mqtt::PublishPacket {
            dup: false,
            qos,
            retain: msg.retained,
            topic: msg.topic.to_string(),
            pid: None,
            payload: msg.payload.clone(),
            props: mqtt::Properties::default(),
        };
        let what = Self::topic_pending(&p);
        self.send(p, what)
    }

    fn deliver_queued(&self, sub: &Subscription, d: &QueuedDelivery<'_>) -> DeliveryOutcome {
        let m = d.message;
        let published_qos = m
            .headers
            .get(QOS_HEADER)
            .and_then(|q| q.parse::<u8>().ok())
            .unwrap_or(0);
        let opts = options(sub);
        let qos = opts.qos.min(published_qos);
        let v5 = self.level() == mqtt::LEVEL_5;
        let props = if v5 {
            v5::message_props(&m.headers)
        } else if v5::expired(&m.headers) {
            None
        } else {
            Some(mqtt::Properties::default())
        };
        // Past its message expiry, or (MQTT 5's no local) published by
        // this connection: consumed without being sent.
        let own = || {
            m.headers
                .get(ORIGIN_HEADER)
                .is_some_and(|o| *o == origin_tag(self.id))
        };
        let Some(mut props) = props.filter(|_| !(v5 && opts.no_local && own())) else {
            self.settle(d, sub, Settlement::Ack);
            return DeliveryOutcome::Queued;
        };
        if v5 && opts.id != 0 {
            props.subscription_identifiers.push(opts.id);
        }
        let topic = m
            .headers
            .get(TOPIC_HEADER)
            .cloned()
            .unwrap_or_else(|| d.queue.to_owned());
        let p = mqtt::PublishPacket {
            dup: m.deliveries > 1,
            qos,
            retain: v5 && opts.retain_as_published && m.headers.contains_key(RETAIN_HEADER),
            topic,
            pid: None,
            payload: m.payload.clone(),
            props,
        };
        if v5 && self.too_large(&p) {
            // Over the client's maximum packet size: never deliverable to
            // it, so consumed (MQTT 5 discards such a packet as if sent).
            self.settle(d, sub, Settlement::Ack);
            return DeliveryOutcome::Queued;
        }
        let what = Pending::Queue {
            queue: d.queue.into(),
            sub: sub.id.clone(),
            delivery: d.id,
        };
        let outcome = self.send(p, what);
        if qos == 0 && outcome == DeliveryOutcome::Queued {
            // Nothing will acknowledge a QoS 0 delivery: it is done.
            self.settle(d, sub, Settlement::Ack);
        }
        outcome
    }

    fn is_closed(&self) -> bool {
        self.out.is_closing()
    }

    fn crowded(&self) -> bool {
        let mut st = self.state.lock();
        // A held publisher looks here now and then: deliveries that wait
        // for room (MQTT 5) move, and the load is looked at again.
        self.release_waiting(&mut st);
        if let Some(room) = st.relieve(self.out.limit(), false) {
            room.notify_waiters();
        }
        st.crowded && !self.out.is_closing()
    }

    fn signal(&self) -> Option<Arc<Notify>> {
        Some(
            self.state
                .lock()
                .room
                .get_or_insert_with(Default::default)
                .clone(),
        )
    }

    fn expel(&self, why: &str) {
        tracing::info!(sink = self.id, "closing an MQTT subscriber: {why}");
        if let Some(b) = self.broker.upgrade() {
            b.metrics().mqtt_subscribers_expelled.add(1);
        }
        self.out.close(crate::session::CloseRequest {
            code: 1008,
            reason: why.to_owned(),
            drain: false,
        });
        self.relieve_all();
    }
}

impl MqttSink {
    /// A topic message to an MQTT 5 subscription: shaped for it (no local,
    /// retain as published, properties, identifier). Out of line, so the
    /// 3.1.1 path above stays as small as it was.
    #[inline(never)]
    fn deliver_v5(&self, opts: MqttSubOptions, qos: u8, msg: &Published) -> DeliveryOutcome {
        if opts.no_local && msg.origin == self.id {
            return DeliveryOutcome::Queued;
        }
        let Some(mut props) = v5::message_props(&msg.headers) else {
            return DeliveryOutcome::Queued;
        };
        if opts.id != 0 {
            props.subscription_identifiers.push(opts.id);
        }
        if let Some(epoch) = &msg.epoch {
            // A topic with history: the position to recover from (the
            // broker's, not a publisher's headers of the same names).
            props
                .user_properties
                .retain(|(k, _)| k != v5::OFFSET_PROPERTY && k != v5::EPOCH_PROPERTY);
            props
                .user_properties
                .push((v5::OFFSET_PROPERTY.into(), msg.seq.to_string()));
            props
                .user_properties
                .push((v5::EPOCH_PROPERTY.into(), epoch.to_string()));
        }
        let p = mqtt::PublishPacket {
            dup: false,
            qos,
            retain: msg.retained || (opts.retain_as_published && msg.retain_flag),
            topic: msg.topic.to_string(),
            pid: None,
            payload: msg.payload.clone(),
            props,
        };
        let what = Self::topic_pending(&p);
        self.send(p, what)
    }

    /// Whether `p` would be over an MQTT 5 client's maximum packet size.
    fn too_large(&self, p: &mqtt::PublishPacket) -> bool {
        let max = self
            .state
            .lock()
            .v5
            .as_ref()
            .map_or(usize::MAX, |v| v.max_packet);
        if max == usize::MAX {
            return false;
        }
        let mut head = BytesMut::new();
        mqtt::publish_head(&mut head, p, mqtt::LEVEL_5);
        head.len() + p.payload.len() > max
    }

    fn settle(&self, d: &QueuedDelivery<'_>, sub: &Subscription, how: Settlement) {
        if let Some(b) = self.broker.upgrade() {
            b.queues()
                .settle_detached(d.queue, self.id, &sub.id, vec![d.id], how);
        }
    }
}
