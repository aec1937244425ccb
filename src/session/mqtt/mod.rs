//! An MQTT session (levels 3.1, 3.1.1 and 5) over one connection
//! (WebSocket, TCP or TLS): packets in ([`MqttSession::data`], any split
//! into frames or reads), packets out through the connection's
//! [`Outbound`]. MQTT and native clients share the broker's topics:
//! payloads are the same bytes, MQTT 5 properties are headers (`v5.rs`).
//!
//! - QoS: inbound QoS 1 is acknowledged after the publish task ran (after
//!   the durable write for a retained message), QoS 2 is published once
//!   per packet id (PUBREC, then PUBCOMP on PUBREL). Outbound QoS is the
//!   lower of the publish's and the subscription's; QoS 1/2 deliveries take
//!   a packet id until PUBACK / PUBCOMP.
//! - Clean sessions subscribe to topics directly. Persistent sessions
//!   (`clean_session = false`) subscribe durably: each filter is a durable
//!   subscription (a queue, `$durable/mqtt:<client>/<filter hash>q<qos>`)
//!   that keeps messages while the client is away and across restarts;
//!   a PUBACK (or PUBREC) acknowledges the queue delivery, and what was not
//!   acknowledged when the client left is delivered again (DUP set).
//! - Shared subscriptions (`$share/{group}/{filter}`) make the connection
//!   a member of a group that splits the filter's messages (`shared.rs`).
//! - A will is published when the connection ends without DISCONNECT
//!   (MQTT 5: after its delay, unless the client returns first).
//! - CONNECT, session lifetime and the end of a connection: `connect.rs`.
//!
//! # Design notes
//!
//! ## One decision, two levels
//! The level the CONNECT carries is the connection's (`MqttSink::level`).
//! Where 3.1.1 and 5 differ, a decision is made in MQTT 5's terms and
//! written at the connection's level: CONNACK and SUBACK refusals are MQTT
//! 5 reason codes that `connack::to_v3` and `suback_to_v3` turn into
//! 3.1.1's, and the acks' reason codes are simply not written at 3.1.1.
//!
//! ## Packets in
//! `data` decodes packets in place, buffering only one cut at a read's
//! end, and handles each whole packet in order, inline in the read loop:
//! a QoS 1 PUBLISH awaits its publish before the next packet is read.
//! CONNECT checks the level, the client id and the credentials, closes an
//! older connection of the same client id and principal (connections are
//! registered as `mqtt:<client id>` in `Sessions`), ends the kept session
//! on a clean start, and sends CONNACK; a persistent session resumes its
//! subscriptions only after that, so no PUBLISH precedes the CONNACK.
//! Publishes go through `Broker::publish_from` with the packet's QoS, which
//! `Published::qos` carries to every sink (native publishes are 0);
//! inbound QoS 2 packet ids wait in a set until PUBREL. The idle deadline
//! is 1.5 times the keep-alive from the last MQTT packet, so WebSocket
//! pongs do not keep a silent client alive.
//!
//! ## Deliveries
//! `MqttSink` (`sink.rs`) sends the lower of the granted and the published
//! QoS. At QoS 0 (3.1.1) the PUBLISH header comes from
//! `Published::encoded` (`EncodingSlot::MqttPublish`), made once per
//! message and shared by every such subscriber, and is pushed under the
//! slow-consumer policy. At QoS 1 and 2 the header is the connection's
//! own, with a packet id from `OutState`, and is pushed in the high lane
//! only if it fits (`push_if_room`); refused, the id is freed and the
//! delivery reported `Dropped`. MQTT 5 deliveries are encoded per
//! subscription (properties, identifier, alias).
//!
//! ## Persistent sessions
//! With `clean_session` 0 (or an MQTT 5 session expiry above 0) each filter
//! is a durable subscription of the client (`connect::durable_client`, in
//! the principal's namespace) whose id (`connect::durable_id`) records a
//! hash of the filter, the granted QoS and the MQTT 5 options, so they
//! survive restarts with the binding. CONNECT lists the kept ones
//! (`durable_subscriptions`) and resumes each with
//! `DURABLE_PREFETCH`, dropping those the principal may no longer hold.
//! The `BindSink` filling the queue records the QoS, the retain flag and
//! the publishing connection as headers (`mqtt-qos`, `mqtt-retain`,
//! `mqtt-origin`); `MqttSink::deliver_queued` delivers at the lower QoS,
//! takes the topic from the `topic` header, and sets DUP past the first
//! delivery. PUBACK and PUBREC settle the queue delivery without waiting
//! (`settle_detached`); a QoS 0 delivery is acked once queued. Retained
//! messages come from the topics on SUBSCRIBE, not through the queue.
//!
//! ## What MQTT 5 adds, mapped onto what exists
//! - Properties are headers (`v5.rs`), so native, HTTP and queue
//!   subscribers see them. Message expiry becomes an absolute `expires-at`:
//!   it survives queues and restarts, and the sink drops what is past it
//!   and sends what is left of the interval.
//! - Session expiry is the persistent session: at the end of a connection
//!   `Sessions::later()` schedules the subscriptions' deletion after the
//!   interval, and the will after its delay, under keys of the client, so
//!   a CONNECT of the same client cancels them (a clean start fires the
//!   will at once). A connection knows it was taken over from its close
//!   reason or from the mark the takeover left on its registry entry
//!   (`Sessions::mark_taken_over`), looked at before and after it
//!   schedules, so a client that reconnects at once never gets its old
//!   delayed will. The timers live in memory only.
//! - Subscription options are the subscription's `SubTag::Mqtt`, read at
//!   each delivery without a lookup: no local compares `Published::origin`
//!   with the sink's id, retain as published reads `retain_flag`.
//! - Flow control and aliases are the sink's (`V5Out`, under the lock that
//!   guards packet ids): the receive maximum holds QoS 1 and 2 topic
//!   deliveries in a bounded local queue (1,000) and queue deliveries in
//!   their queue; outbound topic aliases go first come, first served, up
//!   to the client's maximum (64 at most), and the PUBLISH assigning one
//!   takes the high lane, which drop-oldest never evicts.
//! - Every close of an MQTT 5 connection (takeover, keep-alive, shutdown,
//!   the admin API, the slow-consumer policy) goes through its `Outbound`,
//!   whose farewell (registered at CONNECT) writes a DISCONNECT with the
//!   reason code the close maps to (`v5.rs`, from `session::close_reason`).
//!   The session's own refusals send a more precise one and spend the
//!   farewell, as the client's DISCONNECT does.
//!
//! ## The end of a connection
//! `MqttSession::end` (`connect.rs`) publishes the will unless DISCONNECT
//! came first, unsubscribes the clean subscriptions, cancels the durable
//! consumers (their deliveries go back to their queues), leaves the shared
//! groups and schedules what session expiry asks for. UNSUBSCRIBE, a clean
//! start, and a SUBSCRIBE of the same filter at another QoS delete a
//! durable subscription. In a cluster, CONNECT is announced to the other
//! nodes, which close their connections of that client id and principal
//! (`take_over_elsewhere`).

mod connect;
mod inflight;

pub use connect::take_over_elsewhere;
mod publish;
mod shared;
mod sink;
#[cfg(test)]
mod tests;
mod v5;

pub use connect::TOPIC_ALIAS_MAX;
pub use v5::{CONTENT_TYPE, CORRELATION_DATA, EXPIRES_AT, PAYLOAD_FORMAT, RESPONSE_TOPIC};

pub use sink::MqttSink;

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;
use std::sync::Arc;
use std::sync::atomic::AtomicU8;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use parking_lot::Mutex;
use uuid::Uuid;

use super::{Outbound, Sessions, Stamp};
use crate::auth::{Auth, AuthError, Credential, Principal, Right};
use crate::broker::{
    Broker, MqttSubOptions, Publish, PublishOutcome, Settlement, Sink, Subscription, next_sink_id,
};
use crate::config::SessionConfig;
use crate::protocol::frame::Priority;
use crate::protocol::mqtt::{
    self, Connect, MqttError, Packet, SubOptions, connack, reason, suback_to_v3,
};
use crate::session::sublist::{ByFilter, SubList};
use connect::{BeforeConnect, Connected, durable_id, may_hold_durable, options_of};
use publish::ack_with;
pub use sink::Flow;
use sink::{OutState, Pending};

/// Why the connection must end.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MqttClose {
    /// WebSocket close code.
    pub code: u16,
    /// Why (also logged).
    pub reason: String,
    /// The MQTT 5 reason code the DISCONNECT says, when it is more precise
    /// than what `code` maps to.
    pub mqtt: Option<u8>,
}

fn violation(reason: impl Into<String>) -> MqttClose {
    MqttClose {
        code: 1002,
        reason: reason.into(),
        mqtt: None,
    }
}

/// A violation that MQTT 5 names with its own reason code.
fn violation_v5(code: u8, why: impl Into<String>) -> MqttClose {
    MqttClose {
        mqtt: Some(code),
        ..violation(why)
    }
}

/// One MQTT connection's state.
pub struct MqttSession {
    id: Uuid,
    broker: Broker,
    sessions: Sessions,
    sink: Arc<MqttSink>,
    cfg: Arc<SessionConfig>,
    /// A packet cut at the end of a read, waiting for the rest: boxed,
    /// and dropped once empty, so that a quiet connection holds 8 B here
    /// rather than a buffer's 32 and whatever room it last grew to.
    partial: Option<Box<BytesMut>>,
    connected: Option<Connected>,
    /// Set by DISCONNECT: no will.
    graceful: bool,
    /// When the last MQTT packet arrived (keep-alive counts packets, not
    /// WebSocket pongs).
    last_packet: Stamp,
    /// How CONNECT's credentials are checked.
    auth: Auth,
    /// Who the upgrade's credentials proved, if any; after CONNECT, who
    /// the session acts as.
    principal: Option<Principal>,
    /// Publish permission by topic (see the native session's).
    may_publish: crate::auth::PublishVerdicts,
    /// When the principal's credential expires.
    expires_at: Option<Stamp>,
    /// The key reloads seen (as the native session's).
    auth_seen: u32,
    /// What only CONNECT reads (the client's address, and its place in
    /// the count of connections waiting to authenticate), boxed and
    /// dropped there: 8 B in a connected session, not 25.
    before_connect: Option<Box<BeforeConnect>>,
    /// Packets read since the transport last asked
    /// ([`MqttSession::take_charged`]) that count against the rate: all
    /// but the client's acknowledgements of the broker's deliveries.
    charged: u32,
    /// Longest this connection's publishes are held for crowded
    /// subscribers, in milliseconds ([`Flow::hold_timeout`]).
    hold_ms: u32,
}

impl MqttSession {
    /// A session writing to `out`.
    pub fn new(
        broker: Broker,
        sessions: Sessions,
        out: Arc<Outbound>,
        cfg: impl Into<Arc<SessionConfig>>,
    ) -> Self {
        let sink = Arc::new(MqttSink {
            id: next_sink_id(),
            out,
            state: Mutex::new(OutState::new(&Flow::default())),
            broker: broker.downgrade(),
            level: AtomicU8::new(mqtt::LEVEL_3_1_1),
        });
        MqttSession {
            id: Uuid::now_v7(),
            broker,
            sessions,
            sink,
            cfg: cfg.into(),
            partial: None,
            connected: None,
            graceful: false,
            last_packet: Stamp::now(),
            auth: Auth::open(),
            principal: None,
            may_publish: crate::auth::PublishVerdicts::default(),
            expires_at: None,
            auth_seen: 0,
            before_connect: None,
            charged: 0,
            hold_ms: Flow::default().hold_ms(),
        }
    }

    /// Checks CONNECT credentials with `auth`; `principal` is who the
    /// WebSocket upgrade's credentials proved, used when CONNECT carries
    /// no password. `peer` is the client's address.
    pub fn with_auth(
        mut self,
        auth: Auth,
        principal: Option<Principal>,
        peer: Option<IpAddr>,
    ) -> Self {
        self.auth_seen = auth.generation();
        self.auth = auth;
        self.principal = principal;
        if peer.is_some() {
            self.before_connect.get_or_insert_default().peer = peer;
        }
        self
    }

    /// When the session's credential expires: the connection is closed
    /// then (and the will published).
    pub fn expires_at(&self) -> Option<std::time::Instant> {
        self.expires_at.map(Stamp::instant)
    }

    /// Whether the session's principal may publish to `topic` (cached).
    fn may_publish(&mut self, topic: &str) -> bool {
        match &self.principal {
            Some(p) => self.may_publish.may(p, topic),
            None => false,
        }
    }

    /// The packets read since the last call that count against the
    /// rate (all but acknowledgements of the broker's deliveries), for
    /// the transport's [`crate::session::RateLimiter::charge`].
    pub fn take_charged(&mut self) -> u32 {
        std::mem::take(&mut self.charged)
    }

    /// The `[session]` settings it runs under: a parked connection's rate
    /// limiter is made again from them.
    pub fn config(&self) -> &SessionConfig {
        &self.cfg
    }

    /// The connection's outbound queue.
    pub fn outbound(&self) -> &Arc<Outbound> {
        &self.sink.out
    }

    /// The broker's metrics, for the transport's counts: reached through
    /// the session rather than held by every connection's loop.
    pub fn metrics(&self) -> &Arc<crate::metrics::Metrics> {
        self.broker.metrics()
    }

    /// How long the connection may stay silent: one and a half times the
    /// keep-alive the client asked for (the session's idle timeout with a
    /// keep-alive of 0; its hello timeout before CONNECT).
    pub fn idle_timeout(&self) -> Duration {
        match self.connected.as_ref().map(|c| c.keep_alive) {
            Some(k) if k > 0 => Duration::from_millis(u64::from(k) * 1500),
            Some(_) => Duration::from_secs(self.cfg.idle_timeout_s),
            // No CONNECT yet: it must come within the hello timeout.
            None => Duration::from_secs(self.cfg.hello_timeout_s),
        }
    }

    /// When the client will have sent no MQTT packet for longer than
    /// [`MqttSession::idle_timeout`]: the connection is closed (and its
    /// will published) then.
    pub fn idle_deadline(&self) -> std::time::Instant {
        self.last_packet.instant() + self.idle_timeout()
    }

    /// The connection is being closed for silence: one that never sent
    /// its CONNECT is counted as denied for bringing no credentials in
    /// time (`[session] hello_timeout_s`).
    pub fn idle_closed(&self) {
        if self.connected.is_none() {
            self.auth.deny(
                crate::auth::Denial::NoCredentialsInTime,
                crate::auth::Way::Mqtt,
            );
        }
    }

    /// Bytes from a WebSocket message (or a TCP read) that arrived at
    /// `now`: decodes and handles every complete packet. `Err` ends the
    /// connection (a protocol violation, or DISCONNECT with code 1000).
    /// The transport reads the clock once per read, not the session once
    /// per packet (a clock read was ~4% of the broker's time per MQTT
    /// over WebSocket message).
    pub async fn data(&mut self, bytes: Bytes, now: std::time::Instant) -> Result<(), MqttClose> {
        let result = self.read(bytes, now).await;
        if let Err(close) = &result {
            self.goodbye(close);
        }
        result
    }

    /// With nothing buffered, the packets are decoded where they arrived
    /// (their payloads are views of `whole`, not copies); only a packet
    /// cut at the end is copied, to wait for the rest.
    async fn read(&mut self, mut whole: Bytes, now: std::time::Instant) -> Result<(), MqttClose> {
        let waiting = self.partial.as_ref().map_or(0, |p| p.len());
        if waiting + whole.len() > self.cfg.max_frame.saturating_mul(2) {
            return Err(MqttClose {
                code: 1009,
                reason: "MQTT packet larger than max_frame".into(),
                mqtt: None,
            });
        }
        if let Some(partial) = &mut self.partial {
            partial.extend_from_slice(&std::mem::take(&mut whole));
        }
        // Once per read, not per packet.
        let now = Stamp::of(now);
        loop {
            let (max, level) = (self.cfg.max_frame, self.sink.level());
            let decoded = match self.partial.as_deref_mut() {
                Some(partial) => mqtt::decode(partial, max, level),
                None => mqtt::decode(&mut whole, max, level),
            };
            let packet = match decoded {
                Ok(Some(p)) => p,
                Ok(None) => {
                    // What is left is the start of a packet (in `partial`
                    // already, or the end of `whole`), or nothing.
                    match &self.partial {
                        Some(partial) if partial.is_empty() => self.partial = None,
                        Some(_) => {}
                        None if whole.is_empty() => {}
                        None => self.partial = Some(Box::new(BytesMut::from(&whole[..]))),
                    }
                    return Ok(());
                }
                Err(MqttError::TooLarge(n)) => {
                    return Err(MqttClose {
                        code: 1009,
                        reason: format!("MQTT packet of {n} bytes is over max_frame"),
                        mqtt: None,
                    });
                }
                Err(e) => {
                    return Err(violation_v5(
                        e.reason_code(),
                        format!("MQTT protocol error: {e}"),
                    ));
                }
            };
            // Never back: a hold may have moved it past `now`.
            self.last_packet = self.last_packet.max(now);
            // PUBACK, PUBREC and PUBCOMP answer the broker's own deliveries
            // (bounded by its in-flight window): never rate-limited.
            if !matches!(
                packet,
                Packet::PubAck(_) | Packet::PubRec(_) | Packet::PubComp(_)
            ) {
                self.charged += 1;
            }
            self.packet(packet).await?;
        }
    }

    async fn packet(&mut self, packet: Packet) -> Result<(), MqttClose> {
        let Some(conn) = self.connected.as_mut() else {
            return match packet {
                Packet::Connect(c) => self.connect(*c).await,
                _ => Err(violation("the first MQTT packet must be CONNECT")),
            };
        };
        let v5 = self.sink.level() == mqtt::LEVEL_5;
        match packet {
            Packet::Connect(_) => Err(violation("a second CONNECT")),
            Packet::Publish(p) => self.publish(p).await,
            Packet::PubAck(a) => {
                self.acknowledged(a.pid, false);
                self.sink.acknowledged();
                Ok(())
            }
            Packet::PubRec(a) => {
                let known = self.acknowledged(a.pid, true);
                // MQTT 5: a PUBREC with an error code ends the exchange.
                if a.reason >= 0x80 {
                    self.sink.state.lock().remove(a.pid);
                    self.sink.acknowledged();
                } else if known || !v5 {
                    self.sink.push(&Packet::pubrel(a.pid));
                } else {
                    self.sink.push(&ack_with(
                        Packet::pubrel(a.pid),
                        reason::PACKET_IDENTIFIER_NOT_FOUND,
                    ));
                }
                Ok(())
            }
            Packet::PubComp(a) => {
                let mut st = self.sink.state.lock();
                if matches!(st.pending.get(a.pid), Some(Pending::Released)) {
                    st.remove(a.pid);
                }
                drop(st);
                self.sink.acknowledged();
                Ok(())
            }
            Packet::PubRel(a) => {
                let known = conn.released(a.pid);
                let comp = Packet::pubcomp(a.pid);
                if known || !v5 {
                    self.sink.push(&comp);
                } else {
                    self.sink
                        .push(&ack_with(comp, reason::PACKET_IDENTIFIER_NOT_FOUND));
                }
                Ok(())
            }
            Packet::Subscribe(s) => {
                let id = s
                    .props
                    .subscription_identifiers
                    .first()
                    .copied()
                    .unwrap_or(0);
                let mut codes = Vec::with_capacity(s.filters.len());
                for (filter, options) in s.filters {
                    let code = self.subscribe(filter, options, id).await;
                    codes.push(if v5 { code } else { suback_to_v3(code) });
                }
                self.report_counts();
                self.sink.push(&Packet::suback(s.pid, codes));
                Ok(())
            }
            Packet::Unsubscribe(u) => {
                let mut codes = Vec::with_capacity(u.filters.len());
                for f in u.filters {
                    codes.push(if self.unsubscribe(&f).await {
                        reason::SUCCESS
                    } else {
                        reason::NO_SUBSCRIPTION_EXISTED
                    });
                }
                self.report_counts();
                let mut ack = Packet::unsuback(u.pid);
                if let (true, Packet::UnsubAck(a)) = (v5, &mut ack) {
                    a.codes = codes;
                }
                self.sink.push(&ack);
                Ok(())
            }
            Packet::PingReq => {
                self.sink.push(&Packet::PingResp);
                Ok(())
            }
            Packet::Disconnect(d) => {
                // MQTT 5: "disconnect with will message" still sends it;
                // the session expiry may change, but not from 0.
                if let (Some(new), Some(old)) = (d.props.session_expiry_interval, conn.expiry()) {
                    if old == 0 && new != 0 {
                        return Err(violation_v5(
                            reason::PROTOCOL_ERROR,
                            "DISCONNECT set a session expiry where CONNECT had 0",
                        ));
                    }
                    conn.set_expiry(new);
                }
                self.graceful = d.reason != reason::DISCONNECT_WITH_WILL;
                // The client closes: no DISCONNECT back.
                self.sink.out.set_farewell(None);
                Err(MqttClose {
                    code: 1000,
                    reason: "DISCONNECT".into(),
                    mqtt: None,
                })
            }
            Packet::ConnAck(_) | Packet::SubAck(_) | Packet::UnsubAck(_) | Packet::PingResp => {
                Err(violation("a server-to-client packet from the client"))
            }
            // Enhanced authentication is refused at CONNECT, so an AUTH
            // (only decoded at level 5) is out of turn.
            Packet::Auth(_) => Err(violation_v5(
                reason::PROTOCOL_ERROR,
                "AUTH without enhanced authentication",
            )),
        }
    }

    /// PUBACK (or PUBREC with `rec`): the client has the delivery; false
    /// if no delivery had that packet id.
    fn acknowledged(&self, pid: u16, rec: bool) -> bool {
        let done = {
            let mut st = self.sink.state.lock();
            let Some(p) = st.remove(pid) else {
                return false;
            };
            if rec {
                st.pending.insert(pid, Pending::Released);
            }
            p
        };
        if let Pending::Queue {
            queue,
            sub,
            delivery,
        } = done
        {
            self.broker.queues().settle_detached(
                &queue,
                self.sink.id,
                &sub,
                vec![delivery],
                Settlement::Ack,
            );
        }
        true
    }

    async fn consume_durable(
        &self,
        client: &str,
        id: &str,
        filter: &str,
    ) -> Result<(String, Subscription), crate::broker::BrokerError> {
        let queue = crate::broker::durable_queue_name(client, id)?;
        let consumer = Subscription::new(
            self.sink.clone(),
            id,
            &queue,
            sink::tag(options_of(id)),
            Some(crate::broker::EncodingSlot::MqttPublish),
        );
        self.broker
            .durable()
            .subscribe_durable(
                client,
                filter,
                consumer.clone(),
                crate::broker::DURABLE_PREFETCH,
            )
            .await?;
        Ok((queue, consumer))
    }

    /// SUBSCRIBE to one filter: the MQTT 5 reason code (the granted QoS,
    /// or why not; the caller turns a refusal into 0x80 below level 5).
    async fn subscribe(&mut self, filter: String, o: SubOptions, id: u32) -> u8 {
        let opts = MqttSubOptions {
            qos: o.qos.min(2),
            no_local: o.no_local,
            retain_as_published: o.retain_as_published,
            id,
            skip_retained: o.retain_handling == 2,
        };
        if shared::is_share(&filter) {
            // MQTT 5 §4.8.2: no local does not apply to shared ones.
            let opts = MqttSubOptions {
                no_local: false,
                ..opts
            };
            return self.subscribe_shared(filter, opts).await;
        }
        if self.broker.topic_limits().check_filter(&filter).is_err() {
            return reason::TOPIC_FILTER_INVALID;
        }
        if !self
            .principal
            .as_ref()
            .is_some_and(|p| p.may(Right::Subscribe(&filter)))
        {
            tracing::info!(
                principal = self.principal.as_ref().map(|p| p.id()),
                %filter,
                "MQTT subscription refused: not allowed"
            );
            return reason::NOT_AUTHORIZED;
        }
        let Some(conn) = self.connected.as_ref() else {
            return reason::UNSPECIFIED_ERROR;
        };
        // Retain handling 1: retained messages only for a new subscription.
        let existed = conn.subs.contains(&filter) || conn.rare().durable.contains_key(&filter);
        let opts = MqttSubOptions {
            skip_retained: opts.skip_retained || (o.retain_handling == 1 && existed),
            ..opts
        };
        if !conn.clean {
            // A persistent session's subscription is a durable one: it
            // needs the consume right too, as a native one does.
            if !self
                .principal
                .as_ref()
                .is_some_and(|p| may_hold_durable(p, &filter))
            {
                tracing::info!(
                    principal = self.principal.as_ref().map(|p| p.id()),
                    %filter,
                    "MQTT persistent subscription refused: no consume right"
                );
                return reason::NOT_AUTHORIZED;
            }
            return self.subscribe_durable(filter, opts).await;
        }
        self.unsubscribe(&filter).await;
        let Some(conn) = self.connected.as_ref() else {
            return reason::UNSPECIFIED_ERROR;
        };
        if conn.subs.len() >= self.cfg.max_subscriptions {
            return reason::QUOTA_EXCEEDED;
        }
        let sub = Subscription::new(
            self.sink.clone(),
            &filter,
            &filter,
            sink::tag(opts),
            Some(crate::broker::EncodingSlot::MqttPublish),
        );
        if self.broker.subscribe(sub.clone()).await.is_err() {
            return reason::UNSPECIFIED_ERROR;
        }
        let client = self.connected.as_ref().map_or("", |c| c.client_id());
        crate::session::ops::presence::join_as(&self.broker, &sub, client, self.principal.as_ref())
            .await;
        if let Some(c) = self.connected.as_mut() {
            c.subs.insert(sub);
        }
        opts.qos
    }

    /// SUBSCRIBE in a persistent session: the filter's durable
    /// subscription, kept (with its backlog) when it exists with these
    /// options.
    async fn subscribe_durable(&mut self, filter: String, opts: MqttSubOptions) -> u8 {
        let Some(conn) = self.connected.as_ref() else {
            return reason::UNSPECIFIED_ERROR;
        };
        let client = conn.durable_client().to_owned();
        let id = durable_id(&filter, opts);
        let existing = conn.rare().durable.get(&filter).map(|(_, c)| c.clone());
        let entry = match existing {
            // Subscribing again (clients do after each reconnect) keeps
            // what was kept.
            Some(consumer) if *consumer.id == *id => None,
            _ => {
                if conn.rare().durable.len() >= self.cfg.max_subscriptions {
                    return reason::QUOTA_EXCEEDED;
                }
                // Other options for the same filter are another
                // subscription id: the old one goes.
                if let Some(c) = self.connected.as_mut() {
                    if let Some((queue, old)) =
                        c.rare_if_used().and_then(|r| r.durable.remove(&filter))
                    {
                        old.cancel();
                        let _ = self
                            .broker
                            .queues()
                            .cancel_consumer(&queue, self.sink.id, &old.id)
                            .await;
                    }
                }
                for (old, filters) in self.broker.durable().durable_subscriptions(&client) {
                    if old != id && filters.first() == Some(&filter) {
                        let _ = self
                            .broker
                            .durable()
                            .unsubscribe_durable(&client, &old, self.sink.id)
                            .await;
                    }
                }
                match self.consume_durable(&client, &id, &filter).await {
                    Ok(e) => Some(e),
                    Err(e) => {
                        tracing::debug!(%filter, "MQTT durable subscription refused: {e}");
                        return reason::UNSPECIFIED_ERROR;
                    }
                }
            }
        };
        let consumer = match &entry {
            Some((_, c)) => c.clone(),
            None => match self
                .connected
                .as_ref()
                .and_then(|c| c.rare().durable.get(&filter))
            {
                Some((_, c)) => c.clone(),
                None => return reason::UNSPECIFIED_ERROR,
            },
        };
        // Retained messages go to the subscriber directly (the durable
        // subscription keeps only what is published from now on).
        if !opts.skip_retained {
            if let Ok(retained) = self.broker.retained_matching(&filter).await {
                for m in retained {
                    let _ = self.sink.deliver(&consumer, &m);
                }
            }
        }
        if let (Some(entry), Some(c)) = (entry, self.connected.as_mut()) {
            c.rare_mut().durable.insert(filter, entry);
        }
        opts.qos
    }

    /// Tells the registry how many subscriptions the connection holds
    /// (after a SUBSCRIBE, an UNSUBSCRIBE or a resumed session).
    fn report_counts(&self) {
        if let Some(c) = &self.connected {
            let n = c.subs.len() + c.rare().durable.len() + c.rare().shared.len();
            self.sessions.set_counts(self.id, n, 0);
        }
    }

    /// Ends the subscription to `filter`; false if there was none.
    async fn unsubscribe(&mut self, filter: &str) -> bool {
        if shared::is_share(filter) {
            return self.leave_shared(filter).await;
        }
        let Some(conn) = self.connected.as_mut() else {
            return false;
        };
        let mut existed = false;
        if let Some(sub) = conn.subs.remove(filter) {
            existed = true;
            sub.cancel();
            let _ = self.broker.unsubscribe(self.sink.id, &sub.id, filter).await;
        }
        if let Some((_, consumer)) = conn.rare_if_used().and_then(|r| r.durable.remove(filter)) {
            existed = true;
            consumer.cancel();
            let client = conn.durable_client().to_owned();
            let _ = self
                .broker
                .durable()
                .unsubscribe_durable(&client, &consumer.id, self.sink.id)
                .await;
        }
        existed
    }
}
