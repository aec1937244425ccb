//! CONNECT and the end of a connection: who the client is, what is kept of
//! its session, and what MQTT 5 agreed (CONNACK properties, the client's
//! limits on what it receives, session expiry, the will's delay).
//!
//! Sessions and their lifetime: at levels 3 and 4 `clean_session = false`
//! makes a persistent session, kept until the client starts clean. At
//! level 5 the session expiry interval decides: 0 (the default) ends the
//! session with the connection, `0xFFFFFFFF` never, anything else that
//! many seconds after the connection ends unless the client returns;
//! clean start only says whether an existing session is resumed. A
//! persistent session's subscriptions are durable subscriptions named from
//! the client id (see [`durable_id`]).

use super::sink::V5Out;
use super::v5::{TAKEN_OVER, TAKEN_OVER_CLEAN};
use super::*;
use crate::protocol::mqtt::{ConnAck, PropertySet, reason};

/// Topic aliases each way per MQTT 5 connection: what CONNACK offers the
/// client, and the most the server gives out to a client that accepts
/// more.
pub const TOPIC_ALIAS_MAX: u16 = 64;

/// The client id as it appears in durable subscription names: `mqtt:`
/// and the id with `%`, `/`, `+`, `#` percent-encoded.
pub(super) fn durable_client(client_id: &str) -> String {
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
pub(super) fn may_hold_durable(p: &Principal, filter: &str) -> bool {
    p.may(Right::Subscribe(filter)) && p.may(Right::ConsumeFilter(filter))
}

/// A durable subscription's id for `filter` with `o`: a hash of the
/// filter, `q` and the QoS, and for MQTT 5 options `o` and their flags
/// (1 no local, 2 retain as published) and `i` and the subscription
/// identifier when set; so the options survive a restart with the
/// subscription. Level 3/4 ids are those of earlier versions.
pub(super) fn durable_id(filter: &str, o: MqttSubOptions) -> String {
    // FNV-1a: stable across builds and platforms.
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in filter.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    let mut id = format!("{h:016x}q{}", o.qos);
    let flags = u8::from(o.no_local) | u8::from(o.retain_as_published) << 1;
    if flags != 0 {
        id.push_str(&format!("o{flags}"));
    }
    if o.id != 0 {
        id.push_str(&format!("i{}", o.id));
    }
    id
}

/// The options a durable subscription id records ([`durable_id`]).
pub(super) fn options_of(durable_id: &str) -> MqttSubOptions {
    let mut o = MqttSubOptions::default();
    let Some((_, rest)) = durable_id.split_once('q') else {
        return o;
    };
    let end = rest.find(['o', 'i']).unwrap_or(rest.len());
    o.qos = rest[..end].parse::<u8>().unwrap_or(0).min(2);
    let mut rest = &rest[end..];
    if let Some(r) = rest.strip_prefix('o') {
        let end = r.find('i').unwrap_or(r.len());
        let flags: u8 = r[..end].parse().unwrap_or(0);
        o.no_local = flags & 1 != 0;
        o.retain_as_published = flags & 2 != 0;
        rest = &r[end..];
    }
    if let Some(r) = rest.strip_prefix('i') {
        o.id = r.parse().unwrap_or(0);
    }
    o
}

/// Closes this node's connections of `client` (`mqtt:{id}`) of
/// `principal` that are older than `at_ms` (Unix ms) because the client
/// connected again on another node of the cluster then: the same takeover
/// as on one node (with a clean start, the old session ends and its will
/// goes out now). Node clocks are assumed to agree (NTP).
pub fn take_over_elsewhere(
    sessions: &crate::session::Sessions,
    client: &str,
    principal: &str,
    clean: bool,
    at_ms: u64,
) -> usize {
    let why = if clean { TAKEN_OVER_CLEAN } else { TAKEN_OVER };
    let mut closed = 0;
    for old in sessions.find_by_client(client) {
        if old.principal.as_deref() == Some(principal)
            && old.since_unix_ms <= at_ms
            && sessions.close(old.id, 1000, why, false)
        {
            closed += 1;
        }
    }
    closed
}
/// The key of a client's delayed will in [`Sessions::later`].
///
/// [`Sessions::later`]: crate::session::Sessions::later
fn will_key(client: &str) -> String {
    format!("will:{client}")
}

/// The key of a client's pending session expiry in [`Sessions::later`].
///
/// [`Sessions::later`]: crate::session::Sessions::later
fn expiry_key(client: &str) -> String {
    format!("expiry:{client}")
}

/// The longest reason string the server puts in a CONNACK or DISCONNECT.
const REASON_MAX: usize = 120;

/// `why`, cut to [`REASON_MAX`] bytes at a character boundary.
pub(super) fn short_reason(why: &str) -> String {
    let mut end = why.len().min(REASON_MAX);
    while !why.is_char_boundary(end) {
        end -= 1;
    }
    why[..end].to_owned()
}

/// An MQTT 5 DISCONNECT with `code` and, when the client accepts packets
/// that large, `why`.
pub(super) fn disconnect_packet(code: u8, why: &str, max_packet: usize) -> Bytes {
    let mut buf = BytesMut::new();
    let mut packet =
        Packet::Disconnect(mqtt::Reasoned::with_reason_string(code, short_reason(why)));
    mqtt::encode(&packet, &mut buf, mqtt::LEVEL_5);
    if buf.len() > max_packet {
        buf.clear();
        packet = Packet::Disconnect(mqtt::Reasoned {
            reason: code,
            props: mqtt::Properties::default(),
        });
        mqtt::encode(&packet, &mut buf, mqtt::LEVEL_5);
    }
    buf.freeze()
}

impl MqttSession {
    /// CONNECT refused with the MQTT 5 reason `code` (its 3.1.1 return
    /// code below level 5); the connection then ends.
    fn refuse(&self, code: u8, why: &str) -> Result<(), MqttClose> {
        let packet = if self.sink.level() == mqtt::LEVEL_5 {
            Packet::ConnAck(ConnAck {
                session_present: false,
                code,
                props: PropertySet {
                    reason_string: Some(short_reason(why)),
                    ..PropertySet::default()
                }
                .into(),
            })
        } else {
            Packet::connack(false, connack::to_v3(code))
        };
        self.sink.push(&packet);
        Err(violation(format!("CONNECT refused: {why}")))
    }

    pub(super) async fn connect(&mut self, c: Connect) -> Result<(), MqttClose> {
        if !matches!(c.level, mqtt::LEVEL_3_1 | mqtt::LEVEL_3_1_1 | mqtt::LEVEL_5) {
            return self.refuse(
                reason::UNSUPPORTED_PROTOCOL_VERSION,
                &format!(
                    "protocol level {} is not spoken here (3.1, 3.1.1 and 5 are)",
                    c.level
                ),
            );
        }
        // From here on the connection's packets are read and written at
        // its level (3 and 4 are alike after CONNECT).
        self.sink.set_level(c.level);
        let v5 = c.level == mqtt::LEVEL_5;
        if v5 && c.props.authentication_method.is_some() {
            return self.refuse(
                reason::BAD_AUTHENTICATION_METHOD,
                "enhanced authentication (AUTH) is not supported",
            );
        }
        if c.client_id.is_empty() && !c.clean_session && !v5 {
            return self.refuse(
                reason::CLIENT_IDENTIFIER_NOT_VALID,
                "an empty client id needs a clean session",
            );
        }
        let principal = match (&c.password, &self.principal) {
            (Some(password), _) => {
                let user = c.username.as_deref().unwrap_or("");
                self.auth
                    .authenticate(
                        Credential::Password { user, password },
                        self.before_connect.as_ref().and_then(|b| b.peer),
                        crate::auth::Way::Mqtt,
                    )
                    .await
            }
            (None, Some(p)) => Ok(p.clone()),
            (None, None) => self.auth.without_credentials(),
        };
        let principal = match principal {
            Ok(p) => p,
            Err(e) => {
                let code = match e {
                    AuthError::Bad => reason::BAD_USER_NAME_OR_PASSWORD,
                    AuthError::Busy | AuthError::TooManyUnauthenticated => reason::SERVER_BUSY,
                    AuthError::Missing | AuthError::TooManyFailures => reason::NOT_AUTHORIZED,
                };
                return self.refuse(code, &e.to_string());
            }
        };
        if let Some(w) = &c.will {
            if self.broker.topic_limits().check_topic(&w.topic).is_err() {
                if v5 {
                    return self.refuse(reason::TOPIC_NAME_INVALID, "the will's topic is invalid");
                }
                return Err(violation("CONNECT with an invalid will"));
            }
            if w.payload.len() > self.cfg.max_payload {
                if v5 {
                    return self
                        .refuse(reason::PACKET_TOO_LARGE, "the will's payload is too large");
                }
                return Err(violation("CONNECT with an invalid will"));
            }
            if !principal.may(Right::Publish(&w.topic)) {
                return self.refuse(
                    reason::NOT_AUTHORIZED,
                    &format!(
                        "{:?} may not publish its will to {:?}",
                        principal.name(),
                        w.topic
                    ),
                );
            }
        }
        self.expires_at = principal.expires_at().map(Stamp::of);
        // Authenticated: no longer counted against its address.
        self.before_connect = None;
        let assigned = c.client_id.is_empty();
        let client_id = if assigned {
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
            // A clean start ends the old session (its will goes out at
            // once, MQTT 5 §3.1.3.2.2); the old connection reads why.
            let why = if c.clean_session {
                TAKEN_OVER_CLEAN
            } else {
                TAKEN_OVER
            };
            self.sessions.mark_taken_over(old.id, c.clean_session);
            self.sessions.close(old.id, 1000, why, false);
        }
        if let Some(remote) = self.broker.remote() {
            // And on every other node.
            remote.announce_connect(&key, &principal.id(), c.clean_session);
        }
        self.sessions
            .insert(self.id, "mqtt", key.clone(), self.sink.out.clone());
        self.sessions.set_principal(self.id, &principal.id());
        let durable_client = principal.namespace(&durable_client(&client_id));
        // Back in time: a pending session expiry of the last connection is
        // off (and says a session was kept, even one without
        // subscriptions); its delayed will is off too, unless this is a
        // clean start, which ends that session: then it goes out now.
        let later = self.sessions.later();
        let mut pending = later.cancel(&expiry_key(&durable_client));
        pending += if c.clean_session {
            later.fire(&will_key(&durable_client))
        } else {
            later.cancel(&will_key(&durable_client))
        };
        self.principal = Some(principal.clone());
        // MQTT 5: the session lives as long as its expiry interval says;
        // 3.1.1: a persistent session until a clean start.
        let expiry = v5.then(|| c.props.session_expiry_interval.unwrap_or(0));
        let persistent = expiry.map_or(!c.clean_session, |e| e > 0);
        let existing = self.broker.durable().durable_subscriptions(&durable_client);
        let conn = Connected {
            ids: format!("{client_id}{durable_client}").into_boxed_str(),
            // An MQTT string is at most 65,535 bytes.
            ids_split: u32::try_from(client_id.len()).unwrap_or(u32::MAX),
            expiry_s: expiry.unwrap_or(0),
            v5: expiry.is_some(),
            clean: !persistent,
            keep_alive: c.keep_alive,
            // Its own payload: kept for the connection's life, it would
            // otherwise keep the read the CONNECT came in.
            will: c.will.map(|mut w| {
                w.payload = Bytes::copy_from_slice(&w.payload);
                Box::new(w)
            }),
            subs: Default::default(),
            rare: None,
        };
        let session_present = !c.clean_session && (!existing.is_empty() || pending > 0);
        if c.clean_session {
            // A clean start forgets what a persistent session kept.
            for (id, _) in &existing {
                let sink = self.sink.id;
                if let Err(e) = self
                    .broker
                    .durable()
                    .unsubscribe_durable(&durable_client, id, sink)
                    .await
                {
                    tracing::warn!("dropping an old MQTT session's subscription failed: {e}");
                }
            }
        }
        // CONNACK goes out before anything a resumed subscription sends:
        // a PUBLISH may not precede it.
        if v5 {
            self.sink.state.lock().v5 = Some(Box::new(V5Out::new(
                c.props.receive_maximum.unwrap_or(u16::MAX),
                c.props.maximum_packet_size.unwrap_or(u32::MAX),
                c.props
                    .topic_alias_maximum
                    .unwrap_or(0)
                    .min(TOPIC_ALIAS_MAX),
            )));
            let max_packet = c
                .props
                .maximum_packet_size
                .map_or(usize::MAX, |m| usize::try_from(m).unwrap_or(usize::MAX));
            let props = PropertySet {
                assigned_client_identifier: assigned.then(|| client_id.clone()),
                topic_alias_maximum: Some(TOPIC_ALIAS_MAX),
                maximum_packet_size: u32::try_from(self.cfg.max_frame).ok(),
                ..PropertySet::default()
            };
            self.sink.push(&Packet::ConnAck(ConnAck {
                session_present,
                code: reason::SUCCESS,
                props: props.into(),
            }));
            // Only after CONNACK: a DISCONNECT may not come first. (A
            // close asked for before this point closes without one.)
            self.sink.out.set_farewell(Some(Box::new(move |code, why| {
                disconnect_packet(v5::disconnect_reason(code, why), why, max_packet)
            })));
        } else {
            self.sink
                .push(&Packet::connack(session_present, connack::ACCEPTED));
        }
        self.connected = Some(conn);
        if !c.clean_session {
            self.resume(&principal, &durable_client, existing).await;
        }
        self.report_counts();
        Ok(())
    }

    /// Consumes again the durable subscriptions a session kept.
    async fn resume(
        &mut self,
        principal: &Principal,
        durable_client: &str,
        existing: Vec<(String, Vec<String>)>,
    ) {
        for (id, filters) in existing {
            let Some(filter) = filters.into_iter().next() else {
                continue;
            };
            // Rights may have narrowed since the subscription was made (a
            // new token, a new config): what the principal may no longer
            // hold ends here.
            if !may_hold_durable(principal, &filter) {
                tracing::info!(
                    principal = %principal.id(),
                    %filter,
                    "a kept MQTT subscription ended: the principal may no longer hold it"
                );
                let sink = self.sink.id;
                let _ = self
                    .broker
                    .durable()
                    .unsubscribe_durable(durable_client, &id, sink)
                    .await;
                continue;
            }
            match self.consume_durable(durable_client, &id, &filter).await {
                Ok(entry) => {
                    if let Some(c) = self.connected.as_mut() {
                        c.rare_mut().durable.insert(filter, entry);
                    }
                }
                Err(e) => tracing::warn!("resuming an MQTT subscription failed: {e}"),
            }
        }
    }

    /// At MQTT 5, a DISCONNECT saying why the server ends the connection
    /// (unless the client said DISCONNECT first); the outbound's farewell
    /// (which covers closes from elsewhere) is then spent.
    pub(super) fn goodbye(&self, close: &MqttClose) {
        // No DISCONNECT before CONNACK, nor after a refusing CONNACK.
        if self.sink.level() != mqtt::LEVEL_5
            || self.connected.is_none()
            || self.graceful
            || close.code == 1000
        {
            return;
        }
        let code = close
            .mqtt
            .unwrap_or_else(|| v5::disconnect_reason(close.code, &close.reason));
        let max = self
            .sink
            .state
            .lock()
            .v5
            .as_ref()
            .map_or(usize::MAX, |v| v.max_packet);
        let bytes = disconnect_packet(code, &close.reason, max);
        let pushed = self.sink.out.push(
            Priority::High,
            crate::session::OutFrame::data(
                crate::protocol::codec::Format::Bincode,
                Bytes::new(),
                bytes,
            ),
        );
        // Not queued (the outbound full): the farewell says it instead.
        if pushed.is_ok() {
            self.sink.out.set_farewell(None);
        }
    }

    /// The connection ended: the will (unless DISCONNECT came first; at
    /// MQTT 5 after its delay), then subscriptions end (a persistent
    /// session's stay, waiting, until its expiry).
    pub async fn end(mut self) {
        // Publishers held for this subscriber go on now.
        self.sink.relieve_all();
        let Some(mut conn) = self.connected.take() else {
            return;
        };
        let later = self.sessions.later().clone();
        let key = conn.durable_client().to_owned();
        // Taken over by a new connection of the same principal (this
        // connection's close says so): the session goes on there, so it
        // neither expires nor sends a delayed will from here; unless the
        // new one started clean, which ended the session here: the will
        // goes out at once (the new connection dropped what was kept).
        // The mark covers a takeover whose CONNECT came after this
        // connection had closed (so its close reason is not the
        // takeover's).
        let marked = self.sessions.taken_over(self.id);
        let why = self.sink.out.close_reason().map(|(_, why)| why);
        let taken_over =
            marked.is_some() || why.as_deref().is_some_and(|w| w.starts_with(TAKEN_OVER));
        let clean_takeover = marked == Some(true) || why.as_deref() == Some(TAKEN_OVER_CLEAN);
        // The session ends at once (expiry 0), never (`u32::MAX`, and
        // 3.1.1's persistent sessions), or after the interval.
        let ends_in = match conn.expiry() {
            _ if clean_takeover => Some(Duration::ZERO),
            _ if taken_over => None,
            Some(0) => Some(Duration::ZERO),
            Some(u32::MAX) | None => None,
            Some(s) => Some(Duration::from_secs(u64::from(s))),
        };
        // What it kept goes then (ending at once, only a resumed session
        // has durable subscriptions).
        let delete_in =
            ends_in.filter(|d| !taken_over && (!d.is_zero() || !conn.rare().durable.is_empty()));
        if !self.graceful {
            if let Some(w) = conn.will.take() {
                let delay =
                    Duration::from_secs(u64::from(w.props.will_delay_interval.unwrap_or(0)));
                let delay = ends_in.map_or(delay, |e| delay.min(e));
                let broker = self.broker.clone();
                let origin = self.sink.id;
                let (client, principal) = (
                    conn.client_id().to_owned(),
                    self.principal.as_ref().map(|p| p.name().to_owned()),
                );
                let publish = async move {
                    // Headers made now: a message expiry counts from when
                    // the will is published, not from when it was set.
                    let msg = Publish {
                        topic: w.topic,
                        headers: v5::headers_of(&w.props),
                        payload: w.payload,
                        retain: w.retain,
                        priority: Priority::Normal,
                        qos: w.qos,
                        origin,
                    };
                    let source = crate::broker::Source {
                        ingress: crate::broker::Ingress::Mqtt,
                        client_id: Some(&client),
                        principal: principal.as_deref(),
                    };
                    if let Err(e) = broker.publish_from(msg, &source).await {
                        tracing::warn!("publishing a will failed: {e}");
                    }
                };
                if delay.is_zero() {
                    publish.await;
                } else if !taken_over || clean_takeover {
                    later.schedule(&will_key(&key), delay, publish);
                }
            }
        }
        for sub in conn.subs {
            sub.cancel();
            let _ = self
                .broker
                .unsubscribe(self.sink.id, &sub.id, &sub.filter)
                .await;
        }
        let rare = conn.rare.map(|r| *r).unwrap_or_default();
        for (_, (queue, consumer)) in rare.durable {
            consumer.cancel();
            let _ = self
                .broker
                .queues()
                .cancel_consumer(&queue, self.sink.id, &consumer.id)
                .await;
        }
        for (full, member) in rare.shared {
            shared::leave(&self.broker, self.sink.id, &full, member).await;
        }
        if let Some(after) = delete_in {
            let broker = self.broker.clone();
            let client = key.clone();
            let expire = async move {
                for (id, _) in broker.durable().durable_subscriptions(&client) {
                    if let Err(e) = broker.durable().unsubscribe_durable(&client, &id, 0).await {
                        tracing::warn!("ending an expired MQTT session failed: {e}");
                    }
                }
            };
            if after.is_zero() {
                expire.await;
            } else {
                later.schedule(&expiry_key(&key), after, expire);
            }
        }
        // A takeover marked since the look above (its CONNECT ran while
        // this ended, and found nothing here yet to cancel or fire): do
        // now what it would have done to what was just scheduled.
        if marked.is_none() {
            if let Some(clean) = self.sessions.taken_over(self.id) {
                later.cancel(&expiry_key(&key));
                if clean {
                    later.fire(&will_key(&key));
                } else {
                    later.cancel(&will_key(&key));
                }
            }
        }
        self.sessions.remove(self.id);
    }
}

/// The credentials a session holds after CONNECT.
impl MqttSession {
    /// Holds `unproven` (the connection counted against its address)
    /// until CONNECT authenticates it or the connection ends.
    pub fn holding(mut self, unproven: Option<crate::auth::Unproven>) -> Self {
        if unproven.is_some() {
            self.before_connect.get_or_insert_default().unproven = unproven;
        }
        self
    }

    /// Whether a reload of the keys withdrew the one that verified the
    /// session's credential: then the connection must close (4403; at
    /// MQTT 5 a DISCONNECT "not authorized" has been queued). As the
    /// native session's, asked after each read.
    pub fn revoked(&mut self) -> Option<MqttClose> {
        if !self
            .auth
            .withdrawn_since(&mut self.auth_seen, self.principal.as_ref())
        {
            return None;
        }
        let who = self.principal.as_ref().map(crate::auth::Principal::id);
        tracing::info!(target: "wharf::auth", principal = ?who, "ending an MQTT session: its token's key was withdrawn");
        let close = MqttClose {
            code: crate::session::CLOSE_EXPIRED,
            reason: "credentials revoked".into(),
            mqtt: None,
        };
        self.goodbye(&close);
        Some(close)
    }
}

/// What a session keeps only until CONNECT: see
/// [`MqttSession::before_connect`].
#[derive(Default)]
pub(super) struct BeforeConnect {
    /// The client's address, for counting failed authentications.
    pub(super) peer: Option<IpAddr>,
    /// Counted against its address until CONNECT authenticates it.
    pub(super) unproven: Option<crate::auth::Unproven>,
}

/// What a session knows once CONNECT is accepted. Its every byte counts
/// times an idle broker's thousands of connections, and a parked one
/// holds it: the two ids share a string (and a 4 B split), and the
/// expiry, keep-alive and flags pack into 8 B (72 B in all; see
/// `a_parked_connection_fits_a_224_byte_allocation`).
pub(super) struct Connected {
    /// The client id, then the id as durable subscription names carry
    /// it, split at `ids_split` ([`Connected::client_id`],
    /// [`Connected::durable_client`]).
    ids: Box<str>,
    ids_split: u32,
    /// MQTT 5's session expiry interval in seconds, when `v5`
    /// ([`Connected::expiry`]).
    expiry_s: u32,
    pub(super) keep_alive: u16,
    pub(super) clean: bool,
    v5: bool,
    /// Boxed, as the rarer maps below are B-trees: what a connection
    /// that uses none of them holds is kept small (an idle connection's
    /// every byte counts, times its thousands).
    pub(super) will: Option<Box<mqtt::Will>>,
    /// Clean-session subscriptions.
    pub(super) subs: SubList<ByFilter>,
    /// What most connections never use, boxed together at its first use
    /// ([`Connected::rare_mut`]): four empty maps inline were 96 B of
    /// every idle connection's task.
    rare: Option<Box<Rare>>,
}

/// A connection's rarer state: see [`Connected::rare`].
#[derive(Default)]
pub(super) struct Rare {
    /// Persistent-session consumers by filter: (queue, consumer).
    pub(super) durable: BTreeMap<String, (String, Subscription)>,
    /// Shared subscription memberships by `$share/...` filter.
    pub(super) shared: BTreeMap<String, Subscription>,
    /// Inbound QoS 2 packet ids published and waiting for PUBREL.
    pub(super) awaiting_rel: BTreeSet<u16>,
    /// MQTT 5: topics the client named by alias (at most
    /// [`TOPIC_ALIAS_MAX`]).
    pub(super) aliases_in: BTreeMap<u16, String>,
}

/// What a connection that never used its rarer state reads.
static NO_RARE: Rare = Rare {
    durable: BTreeMap::new(),
    shared: BTreeMap::new(),
    awaiting_rel: BTreeSet::new(),
    aliases_in: BTreeMap::new(),
};

impl Connected {
    /// The client id (assigned when the client sent none), for rules.
    pub(super) fn client_id(&self) -> &str {
        self.ids.get(..self.ids_split as usize).unwrap_or("")
    }

    /// The client id as durable subscription names carry it (the
    /// principal's namespace, the id escaped: [`durable_client`]).
    pub(super) fn durable_client(&self) -> &str {
        self.ids.get(self.ids_split as usize..).unwrap_or("")
    }

    /// MQTT 5: the session expiry interval in seconds (`None` below 5).
    pub(super) fn expiry(&self) -> Option<u32> {
        self.v5.then_some(self.expiry_s)
    }

    /// Sets an MQTT 5 session's expiry interval (its DISCONNECT may
    /// change it). A 3.1.1 session has none and keeps none: its expiry is
    /// its clean-session flag.
    pub(super) fn set_expiry(&mut self, seconds: u32) {
        if self.v5 {
            self.expiry_s = seconds;
        }
    }

    /// The rarer state: durable and shared subscriptions, QoS 2 ids
    /// waiting for PUBREL, topic aliases (empty when never used).
    pub(super) fn rare(&self) -> &Rare {
        self.rare.as_deref().unwrap_or(&NO_RARE)
    }

    /// The rarer state, to change: boxed at the first change.
    pub(super) fn rare_mut(&mut self) -> &mut Rare {
        self.rare.get_or_insert_with(Box::default)
    }

    /// The rarer state to take something out of, if it was ever used
    /// (taking out of what is empty allocates nothing).
    pub(super) fn rare_if_used(&mut self) -> Option<&mut Rare> {
        self.rare.as_deref_mut()
    }

    /// Whether inbound QoS 2 packet `pid` was waiting for its PUBREL
    /// (it no longer is).
    pub(super) fn released(&mut self, pid: u16) -> bool {
        self.rare
            .as_mut()
            .is_some_and(|r| r.awaiting_rel.remove(&pid))
    }
}

#[cfg(test)]
mod id_tests {
    use super::*;

    #[test]
    fn durable_ids_keep_the_options() {
        let plain = MqttSubOptions {
            qos: 1,
            ..MqttSubOptions::default()
        };
        let id = durable_id("a/+", plain);
        assert!(id.ends_with("q1"), "{id}");
        assert_eq!(options_of(&id), plain);
        let all = MqttSubOptions {
            qos: 2,
            no_local: true,
            retain_as_published: true,
            id: 268_435_455,
            skip_retained: false,
        };
        let id = durable_id("a/+", all);
        assert!(id.ends_with("q2o3i268435455"), "{id}");
        assert_eq!(options_of(&id), all);
        let some = MqttSubOptions {
            qos: 0,
            id: 7,
            ..MqttSubOptions::default()
        };
        assert_eq!(options_of(&durable_id("#", some)), some);
    }
}
