//! An MQTT 3.1.1 session over one WebSocket connection: packets in
//! ([`MqttSession::data`], any split into WebSocket frames), packets out
//! through the connection's [`Outbound`]. MQTT and native clients share
//! the broker's topics: payloads are the same bytes.
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
//! - A will is published when the connection ends without DISCONNECT.

mod shared;
mod sink;
#[cfg(test)]
mod tests;

pub use sink::MqttSink;

use std::collections::{HashMap, HashSet};
use std::net::IpAddr;
use std::sync::Arc;
use std::sync::atomic::AtomicU8;
use std::time::Duration;

use bytes::BytesMut;
use parking_lot::Mutex;
use uuid::Uuid;

use super::{Outbound, Sessions};
use crate::auth::{Auth, AuthError, Credential, Principal, Right};
use crate::broker::{Broker, Publish, Settlement, Sink, Subscription, next_sink_id};
use crate::config::SessionConfig;
use crate::protocol::frame::{Headers, Priority};
use crate::protocol::mqtt::{self, Connect, MqttError, Packet, SUBACK_FAILURE, connack};
use sink::{OutState, Pending};

/// Why the connection must end.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MqttClose {
    /// WebSocket close code.
    pub code: u16,
    /// Why (also logged).
    pub reason: String,
}

fn violation(reason: impl Into<String>) -> MqttClose {
    MqttClose {
        code: 1002,
        reason: reason.into(),
    }
}

/// The client id as it appears in durable subscription names: `mqtt:`
/// and the id with `%`, `/`, `+`, `#` percent-encoded.
fn durable_client(client_id: &str) -> String {
    let mut s = String::from("mqtt:");
    for c in client_id.chars() {
        match c {
            '%' => s.push_str("%25"),
            '/' => s.push_str("%2F"),
            '+' => s.push_str("%2B"),
            '#' => s.push_str("%23"),
            '\0' => s.push_str("%00"),
            c => s.push(c),
        }
    }
    s
}

/// Whether `p` may hold a durable subscription to `filter` (a persistent
/// session's): subscribe and consume rights covering it.
fn may_hold_durable(p: &Principal, filter: &str) -> bool {
    p.may(Right::Subscribe(filter)) && p.may(Right::ConsumeFilter(filter))
}

/// A durable subscription's id for `filter` at `qos`.
fn durable_id(filter: &str, qos: u8) -> String {
    // FNV-1a: stable across builds and platforms.
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in filter.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    format!("{h:016x}q{qos}")
}

fn qos_of(durable_id: &str) -> u8 {
    durable_id
        .rsplit_once('q')
        .and_then(|(_, q)| q.parse().ok())
        .unwrap_or(0)
}

/// One MQTT connection's state.
pub struct MqttSession {
    id: Uuid,
    broker: Broker,
    sessions: Sessions,
    sink: Arc<MqttSink>,
    cfg: SessionConfig,
    buf: BytesMut,
    connected: Option<Connected>,
    /// Set by DISCONNECT: no will.
    graceful: bool,
    /// When the last MQTT packet arrived (keep-alive counts packets, not
    /// WebSocket pongs).
    last_packet: std::time::Instant,
    /// How CONNECT's credentials are checked.
    auth: Auth,
    /// Who the upgrade's credentials proved, if any; after CONNECT, who
    /// the session acts as.
    principal: Option<Principal>,
    /// The client's address, for counting failed authentications.
    peer: Option<IpAddr>,
    /// Publish permission by topic (see the native session's).
    may_publish: crate::auth::PublishVerdicts,
    /// When the principal's credential expires.
    expires_at: Option<std::time::Instant>,
}

struct Connected {
    /// The client id as durable subscription names carry it.
    durable_client: String,
    clean: bool,
    keep_alive: u16,
    will: Option<mqtt::Will>,
    /// Clean-session subscriptions by filter.
    subs: HashMap<String, Subscription>,
    /// Persistent-session consumers by filter: (queue, consumer).
    durable: HashMap<String, (String, Subscription)>,
    /// Shared subscription memberships by `$share/...` filter.
    shared: HashMap<String, Subscription>,
    /// Inbound QoS 2 packet ids published and waiting for PUBREL.
    awaiting_rel: HashSet<u16>,
}

impl MqttSession {
    /// A session writing to `out`.
    pub fn new(broker: Broker, sessions: Sessions, out: Arc<Outbound>, cfg: SessionConfig) -> Self {
        let sink = Arc::new(MqttSink {
            id: next_sink_id(),
            out,
            state: Mutex::new(OutState::default()),
            broker: broker.downgrade(),
            level: AtomicU8::new(mqtt::LEVEL_3_1_1),
        });
        MqttSession {
            id: Uuid::now_v7(),
            broker,
            sessions,
            sink,
            cfg,
            buf: BytesMut::new(),
            connected: None,
            graceful: false,
            last_packet: std::time::Instant::now(),
            auth: Auth::open(),
            principal: None,
            peer: None,
            may_publish: crate::auth::PublishVerdicts::default(),
            expires_at: None,
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
        self.auth = auth;
        self.principal = principal;
        self.peer = peer;
        self
    }

    /// When the session's credential expires: the connection is closed
    /// then (and the will published).
    pub fn expires_at(&self) -> Option<std::time::Instant> {
        self.expires_at
    }

    /// Whether the session's principal may publish to `topic` (cached).
    fn may_publish(&mut self, topic: &str) -> bool {
        match &self.principal {
            Some(p) => self.may_publish.may(p, topic),
            None => false,
        }
    }

    /// The connection's outbound queue.
    pub fn outbound(&self) -> &Arc<Outbound> {
        &self.sink.out
    }

    /// How long the connection may stay silent: one and a half times the
    /// keep-alive the client asked for (the session's idle timeout before
    /// CONNECT, or with a keep-alive of 0).
    pub fn idle_timeout(&self) -> Duration {
        match self.connected.as_ref().map(|c| c.keep_alive) {
            Some(k) if k > 0 => Duration::from_millis(u64::from(k) * 1500),
            _ => Duration::from_secs(self.cfg.idle_timeout_s),
        }
    }

    /// When the client will have sent no MQTT packet for longer than
    /// [`MqttSession::idle_timeout`]: the connection is closed (and its
    /// will published) then.
    pub fn idle_deadline(&self) -> std::time::Instant {
        self.last_packet + self.idle_timeout()
    }

    /// Bytes from a WebSocket message: decodes and handles every complete
    /// packet. `Err` ends the connection (a protocol violation, or
    /// DISCONNECT with code 1000).
    pub async fn data(&mut self, bytes: &[u8]) -> Result<(), MqttClose> {
        if self.buf.len() + bytes.len() > self.cfg.max_frame.saturating_mul(2) {
            return Err(MqttClose {
                code: 1009,
                reason: "MQTT packet larger than max_frame".into(),
            });
        }
        self.buf.extend_from_slice(bytes);
        loop {
            let packet = match mqtt::decode(&mut self.buf, self.cfg.max_frame, self.sink.level()) {
                Ok(Some(p)) => p,
                Ok(None) => return Ok(()),
                Err(MqttError::TooLarge(n)) => {
                    return Err(MqttClose {
                        code: 1009,
                        reason: format!("MQTT packet of {n} bytes is over max_frame"),
                    });
                }
                Err(e) => return Err(violation(format!("MQTT protocol error: {e}"))),
            };
            self.last_packet = std::time::Instant::now();
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
        match packet {
            Packet::Connect(_) => Err(violation("a second CONNECT")),
            Packet::Publish(p) => self.publish(p).await,
            Packet::PubAck(a) => {
                self.acknowledged(a.pid, false);
                Ok(())
            }
            Packet::PubRec(a) => {
                self.acknowledged(a.pid, true);
                self.sink.push(&Packet::pubrel(a.pid));
                Ok(())
            }
            Packet::PubComp(a) => {
                let mut st = self.sink.state.lock();
                if matches!(st.pending.get(&a.pid), Some(Pending::Released)) {
                    st.pending.remove(&a.pid);
                }
                Ok(())
            }
            Packet::PubRel(a) => {
                conn.awaiting_rel.remove(&a.pid);
                self.sink.push(&Packet::pubcomp(a.pid));
                Ok(())
            }
            Packet::Subscribe(s) => {
                let mut codes = Vec::with_capacity(s.filters.len());
                for (filter, options) in s.filters {
                    codes.push(self.subscribe(filter, options.qos).await);
                }
                self.report_counts();
                self.sink.push(&Packet::suback(s.pid, codes));
                Ok(())
            }
            Packet::Unsubscribe(u) => {
                for f in u.filters {
                    self.unsubscribe(&f).await;
                }
                self.report_counts();
                self.sink.push(&Packet::unsuback(u.pid));
                Ok(())
            }
            Packet::PingReq => {
                self.sink.push(&Packet::PingResp);
                Ok(())
            }
            Packet::Disconnect(_) => {
                self.graceful = true;
                Err(MqttClose {
                    code: 1000,
                    reason: "DISCONNECT".into(),
                })
            }
            Packet::ConnAck(_) | Packet::SubAck(_) | Packet::UnsubAck(_) | Packet::PingResp => {
                Err(violation("a server-to-client packet from the client"))
            }
            // Only decoded at level 5, which this session does not serve.
            Packet::Auth(_) => Err(violation("AUTH before MQTT 5")),
        }
    }

    /// PUBACK (or PUBREC with `rec`): the client has the delivery.
    fn acknowledged(&self, pid: u16, rec: bool) {
        let done = {
            let mut st = self.sink.state.lock();
            let Some(p) = st.pending.remove(&pid) else {
                return;
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
            self.broker.settle_detached(
                &queue,
                self.sink.id,
                &sub,
                vec![delivery],
                Settlement::Ack,
            );
        }
    }

    async fn connect(&mut self, c: Connect) -> Result<(), MqttClose> {
        let refuse = |sink: &MqttSink, code: u8, why: &str| {
            sink.push(&Packet::connack(false, code));
            Err(violation(format!("CONNECT refused: {why}")))
        };
        if c.level != 3 && c.level != 4 {
            return refuse(
                &self.sink,
                connack::BAD_PROTOCOL,
                &format!(
                    "protocol level {} is not spoken here (3.1 and 3.1.1 are)",
                    c.level
                ),
            );
        }
        // From here on the connection's packets are read and written at
        // its level (3 and 4 are alike after CONNECT).
        self.sink.set_level(c.level);
        if c.client_id.is_empty() && !c.clean_session {
            return refuse(
                &self.sink,
                connack::BAD_CLIENT_ID,
                "an empty client id needs a clean session",
            );
        }
        let principal = match (&c.password, &self.principal) {
            (Some(password), _) => {
                let user = c.username.as_deref().unwrap_or("");
                self.auth
                    .authenticate(Credential::Password { user, password }, self.peer)
                    .await
            }
            (None, Some(p)) => Ok(p.clone()),
            (None, None) => self.auth.without_credentials(),
        };
        let principal = match principal {
            Ok(p) => p,
            Err(e) => {
                let code = match e {
                    AuthError::Bad => connack::BAD_CREDENTIALS,
                    AuthError::Busy => connack::UNAVAILABLE,
                    AuthError::Missing | AuthError::TooManyFailures => connack::NOT_AUTHORIZED,
                };
                return refuse(&self.sink, code, &e.to_string());
            }
        };
        if let Some(w) = &c.will {
            if self.broker.topic_limits().check_topic(&w.topic).is_err()
                || w.payload.len() > self.cfg.max_payload
            {
                return Err(violation("CONNECT with an invalid will"));
            }
            if !principal.may(Right::Publish(&w.topic)) {
                return refuse(
                    &self.sink,
                    connack::NOT_AUTHORIZED,
                    &format!(
                        "{:?} may not publish its will to {:?}",
                        principal.name(),
                        w.topic
                    ),
                );
            }
        }
        self.expires_at = principal.expires_at();
        let client_id = if c.client_id.is_empty() {
            format!("anon-{}", self.id.simple())
        } else {
            c.client_id.clone()
        };
        // A client id connects once per principal: an older connection
        // of the same principal is taken over (another principal's is a
        // different session).
        let key = format!("mqtt:{client_id}");
        for old in self.sessions.find_by_client(&key) {
            if old.principal.as_deref() != Some(principal.id().as_str()) {
                continue;
            }
            self.sessions.close(
                old.id,
                1000,
                "session taken over by a new connection",
                false,
            );
        }
        self.sessions.insert(self.id, key, self.sink.out.clone());
        self.sessions.set_principal(self.id, &principal.id());
        let durable_client = principal.namespace(&durable_client(&client_id));
        self.principal = Some(principal.clone());
        let existing = self.broker.durable_subscriptions(&durable_client);
        let mut conn = Connected {
            durable_client: durable_client.clone(),
            clean: c.clean_session,
            keep_alive: c.keep_alive,
            will: c.will,
            subs: HashMap::new(),
            durable: HashMap::new(),
            shared: HashMap::new(),
            awaiting_rel: HashSet::new(),
        };
        let session_present = !c.clean_session && !existing.is_empty();
        if c.clean_session {
            // A clean start forgets what a persistent session kept.
            for (id, _) in &existing {
                let sink = self.sink.id;
                if let Err(e) = self
                    .broker
                    .unsubscribe_durable(&durable_client, id, sink)
                    .await
                {
                    tracing::warn!("dropping an old MQTT session's subscription failed: {e}");
                }
            }
        }
        // CONNACK goes out before anything a resumed subscription sends:
        // a PUBLISH may not precede it.
        self.sink
            .push(&Packet::connack(session_present, connack::ACCEPTED));
        if !c.clean_session {
            for (id, filters) in existing {
                let Some(filter) = filters.into_iter().next() else {
                    continue;
                };
                // Rights may have narrowed since the subscription was
                // made (a new token, a new config): what the principal
                // may no longer hold ends here.
                if !may_hold_durable(&principal, &filter) {
                    tracing::info!(
                        principal = %principal.id(),
                        %filter,
                        "a kept MQTT subscription ended: the principal may no longer hold it"
                    );
                    let sink = self.sink.id;
                    let _ = self
                        .broker
                        .unsubscribe_durable(&durable_client, &id, sink)
                        .await;
                    continue;
                }
                match self.consume_durable(&durable_client, &id, &filter).await {
                    Ok(entry) => {
                        conn.durable.insert(filter, entry);
                    }
                    Err(e) => tracing::warn!("resuming an MQTT subscription failed: {e}"),
                }
            }
        }
        self.connected = Some(conn);
        self.report_counts();
        Ok(())
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
            crate::broker::SubTag::Qos(qos_of(id)),
            Some(crate::broker::EncodingSlot::MqttPublish),
        );
        self.broker
            .subscribe_durable(
                client,
                filter,
                consumer.clone(),
                crate::broker::DURABLE_PREFETCH,
            )
            .await?;
        Ok((queue, consumer))
    }

    async fn publish(&mut self, p: mqtt::Publish) -> Result<(), MqttClose> {
        if let Err(e) = self.broker.topic_limits().check_topic(&p.topic) {
            return Err(violation(format!("PUBLISH to an invalid topic: {e}")));
        }
        if p.payload.len() > self.cfg.max_payload {
            return Err(MqttClose {
                code: 1009,
                reason: format!("payload over the {}-byte limit", self.cfg.max_payload),
            });
        }
        if !self.may_publish(&p.topic) {
            // 3.1.1 has no refusal: the packet is acknowledged as usual
            // and dropped, with a log line.
            tracing::info!(
                principal = self.principal.as_ref().map(|p| p.id()),
                topic = %p.topic,
                "MQTT publish refused: not allowed"
            );
            match (p.qos, p.pid) {
                (1, Some(pid)) => self.sink.push(&Packet::puback(pid)),
                (2, Some(pid)) => self.sink.push(&Packet::pubrec(pid)),
                _ => {}
            }
            return Ok(());
        }
        if p.qos == 2 {
            let pid = p.pid.unwrap_or(0);
            let fresh = match self.connected.as_mut() {
                Some(c) => {
                    if c.awaiting_rel.len() >= usize::from(u16::MAX) {
                        return Err(violation("too many QoS 2 publishes awaiting PUBREL"));
                    }
                    c.awaiting_rel.insert(pid)
                }
                None => false,
            };
            // A repeated packet id is the same message: published once.
            if fresh && !self.publish_to_broker(&p).await {
                if let Some(c) = self.connected.as_mut() {
                    c.awaiting_rel.remove(&pid);
                }
                return Ok(());
            }
            self.sink.push(&Packet::pubrec(pid));
            return Ok(());
        }
        let ok = self.publish_to_broker(&p).await;
        if p.qos == 1 && ok {
            self.sink.push(&Packet::puback(p.pid.unwrap_or(0)));
        }
        Ok(())
    }

    /// Publishes; false if the broker refused (no acknowledgement then:
    /// the client sends it again).
    async fn publish_to_broker(&self, p: &mqtt::Publish) -> bool {
        let msg = Publish {
            topic: p.topic.clone(),
            payload: p.payload.clone(),
            headers: Headers::new(),
            retain: p.retain,
            priority: Priority::Normal,
            qos: p.qos,
        };
        match self.broker.publish(msg).await {
            Ok(_) => true,
            Err(e) => {
                tracing::debug!(topic = %p.topic, "MQTT publish refused: {e}");
                false
            }
        }
    }

    async fn subscribe(&mut self, filter: String, qos: u8) -> u8 {
        if shared::is_share(&filter) {
            return self.subscribe_shared(filter, qos.min(2)).await;
        }
        if self.broker.topic_limits().check_filter(&filter).is_err() {
            return SUBACK_FAILURE;
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
            return SUBACK_FAILURE;
        }
        let qos = qos.min(2);
        let Some(conn) = self.connected.as_ref() else {
            return SUBACK_FAILURE;
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
                return SUBACK_FAILURE;
            }
            return self.subscribe_durable(filter, qos).await;
        }
        self.unsubscribe(&filter).await;
        let Some(conn) = self.connected.as_ref() else {
            return SUBACK_FAILURE;
        };
        if conn.subs.len() >= self.cfg.max_subscriptions {
            return SUBACK_FAILURE;
        }
        let sub = Subscription::new(
            self.sink.clone(),
            &filter,
            &filter,
            crate::broker::SubTag::Qos(qos),
            Some(crate::broker::EncodingSlot::MqttPublish),
        );
        if self.broker.subscribe(sub.clone()).await.is_err() {
            return SUBACK_FAILURE;
        }
        if let Some(c) = self.connected.as_mut() {
            c.subs.insert(filter, sub);
        }
        qos
    }

    /// SUBSCRIBE in a persistent session: the filter's durable
    /// subscription, kept (with its backlog) when it exists at this QoS.
    async fn subscribe_durable(&mut self, filter: String, qos: u8) -> u8 {
        let Some(conn) = self.connected.as_ref() else {
            return SUBACK_FAILURE;
        };
        let client = conn.durable_client.clone();
        let id = durable_id(&filter, qos);
        let existing = conn.durable.get(&filter).map(|(_, c)| c.clone());
        let entry = match existing {
            // Subscribing again (clients do after each reconnect) keeps
            // what was kept.
            Some(consumer) if *consumer.id == *id => None,
            _ => {
                if conn.durable.len() >= self.cfg.max_subscriptions {
                    return SUBACK_FAILURE;
                }
                // Another QoS for the same filter is another subscription
                // id: the old one goes.
                if let Some(c) = self.connected.as_mut() {
                    if let Some((queue, old)) = c.durable.remove(&filter) {
                        old.cancel();
                        let _ = self
                            .broker
                            .cancel_consumer(&queue, self.sink.id, &old.id)
                            .await;
                    }
                }
                for q in 0..=2u8 {
                    if q != qos {
                        let _ = self
                            .broker
                            .unsubscribe_durable(&client, &durable_id(&filter, q), self.sink.id)
                            .await;
                    }
                }
                match self.consume_durable(&client, &id, &filter).await {
                    Ok(e) => Some(e),
                    Err(e) => {
                        tracing::debug!(%filter, "MQTT durable subscription refused: {e}");
                        return SUBACK_FAILURE;
                    }
                }
            }
        };
        let consumer = match &entry {
            Some((_, c)) => c.clone(),
            None => match self.connected.as_ref().and_then(|c| c.durable.get(&filter)) {
                Some((_, c)) => c.clone(),
                None => return SUBACK_FAILURE,
            },
        };
        // Retained messages go to the subscriber directly (the durable
        // subscription keeps only what is published from now on).
        if let Ok(retained) = self.broker.retained_matching(&filter).await {
            for m in retained {
                let _ = self.sink.deliver(&consumer, &m);
            }
        }
        if let (Some(entry), Some(c)) = (entry, self.connected.as_mut()) {
            c.durable.insert(filter, entry);
        }
        qos
    }

    /// Tells the registry how many subscriptions the connection holds
    /// (after a SUBSCRIBE, an UNSUBSCRIBE or a resumed session).
    fn report_counts(&self) {
        if let Some(c) = &self.connected {
            let n = c.subs.len() + c.durable.len() + c.shared.len();
            self.sessions.set_counts(self.id, n, 0);
        }
    }

    async fn unsubscribe(&mut self, filter: &str) {
        if shared::is_share(filter) {
            return self.leave_shared(filter).await;
        }
        let Some(conn) = self.connected.as_mut() else {
            return;
        };
        if let Some(sub) = conn.subs.remove(filter) {
            sub.cancel();
            let _ = self.broker.unsubscribe(self.sink.id, &sub.id, filter).await;
        }
        if let Some((_, consumer)) = conn.durable.remove(filter) {
            consumer.cancel();
            let client = conn.durable_client.clone();
            let _ = self
                .broker
                .unsubscribe_durable(&client, &consumer.id, self.sink.id)
                .await;
        }
    }

    /// The connection ended: the will (unless DISCONNECT came first),
    /// then subscriptions end (a persistent session's stay, waiting).
    pub async fn end(mut self) {
        let Some(conn) = self.connected.take() else {
            return;
        };
        if !self.graceful {
            if let Some(w) = conn.will {
                let msg = Publish {
                    topic: w.topic,
                    payload: w.payload,
                    headers: Headers::new(),
                    retain: w.retain,
                    priority: Priority::Normal,
                    qos: w.qos,
                };
                if let Err(e) = self.broker.publish(msg).await {
                    tracing::warn!("publishing a will failed: {e}");
                }
            }
        }
        for (filter, sub) in conn.subs {
            sub.cancel();
            let _ = self
                .broker
                .unsubscribe(self.sink.id, &sub.id, &filter)
                .await;
        }
        for (_, (queue, consumer)) in conn.durable {
            consumer.cancel();
            let _ = self
                .broker
                .cancel_consumer(&queue, self.sink.id, &consumer.id)
                .await;
        }
        for (full, member) in conn.shared {
            shared::leave(&self.broker, self.sink.id, &full, member).await;
        }
        self.sessions.remove(self.id);
    }
}
