//! Several Wharf nodes as one broker, joined through NATS (`[cluster]`).
//!
//! Every topic publish on a node (whatever way it came in, after rules)
//! is also published on NATS under `{prefix}.t.` ([`subject`]), with its
//! flags and headers as NATS headers ([`wire`]). Each node subscribes on
//! NATS only to the filters its own subscriptions use, and publishes what
//! arrives to its local subscribers without forwarding it again; NATS
//! never echoes a node's own publishes back to it, so local subscribers
//! are served once, locally, without a round trip.
//!
//! A node subscribed to overlapping filters (`a/+` and `+/b`) hears a
//! message on `a/b` once per filter. Of those copies it keeps the one
//! that arrived by the oldest of its filters matching the topic, so each
//! topic is taken from one subscription stream, in the order NATS
//! delivered it, exactly once. A filter's NATS subscription is dropped
//! only when no local subscription uses it any more and no newer filter
//! overlaps it, so the stream a topic comes by never changes while the
//! topic is wanted.
//!
//! A node sends a publish to NATS only when another node listens to a
//! filter matching its topic: nodes tell each other their filters
//! (`interest.rs`), and a node forwards everything while it cannot be sure
//! what the others want.
//!
//! All NATS work runs on a thread of its own (`link`); the broker hands it
//! publishes through a bounded buffer and never waits for NATS on the
//! publish path.

mod connect;
mod error;
mod failover;
mod here;
pub mod home;
mod hooks;
mod interest;
mod journal;
mod js;
mod kv;
mod link;
mod peers;
mod pump;
mod remote;
mod resend;
mod serve;
mod takeover;
mod tell;

pub use error::{CallError, ClusterError, FrameError, NatsError};
pub use remote::{Answering, CALL_TIMEOUT};
pub mod subject;
pub mod wire;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use parking_lot::Mutex;
use serde::Serialize;
use tokio::sync::{mpsc, oneshot};

use crate::broker::{Broker, WeakBroker};
use crate::config::ClusterConfig;
use crate::protocol::frame::Headers;

/// What the link counts (`GET /admin/cluster`, `/metrics`).
#[derive(Debug, Default)]
struct Counters {
    forwarded: AtomicU64,
    dropped: AtomicU64,
    failed: AtomicU64,
    received: AtomicU64,
    duplicates: AtomicU64,
    resent: AtomicU64,
    repeats: AtomicU64,
    invalid: AtomicU64,
    refused: AtomicU64,
}

/// A publish on its way to NATS.
struct Outbound {
    subject: String,
    payload: Bytes,
    what: What,
}

/// What a publish on its way to NATS is, which says how the pump sends
/// it.
enum What {
    /// A topic publish: its NATS headers (written on the publishing
    /// thread), and its Wharf headers and flags, from which the pump
    /// writes them again should it send it again. The pump numbers it and
    /// keeps it to send again should NATS be lost with it in flight
    /// (`resend.rs`).
    Topic(async_nats::HeaderMap, Headers, wire::Flags),
    /// A retained bucket write: kept and sent again the same way (a write
    /// repeated in order leaves the bucket as it was).
    Retained(Option<async_nats::HeaderMap>),
    /// Sent once: a call (with where its answer goes), a delivery to a
    /// consumer, an announcement.
    Once {
        headers: Option<async_nats::HeaderMap>,
        reply: Option<String>,
    },
}

impl Outbound {
    /// A publish sent once.
    fn once(subject: String, payload: Bytes, reply: Option<String>) -> Outbound {
        Outbound {
            subject,
            payload,
            what: What::Once {
                headers: None,
                reply,
            },
        }
    }
}

/// A retained bucket entry read back: the topic, and its message (or
/// `None` where it was cleared).
type Synced = Vec<(String, Option<(Bytes, Headers, wire::Flags)>)>;

/// What the broker asks of the link's thread.
enum Control {
    /// Subscribe on NATS to a filter (if not already); answers with the
    /// filter's [`Listen`] (whether NATS confirmed it, and the version
    /// that told the other nodes).
    Want {
        filter: String,
        reply: oneshot::Sender<Result<Listen, NatsError>>,
    },
    /// The filters subscribed, with the generation of their last want.
    List { reply: oneshot::Sender<Listed> },
    /// The retained messages of a filter first wanted, read from the
    /// retained bucket by a task of the link's.
    Synced {
        id: u64,
        result: Result<Synced, NatsError>,
    },
    /// Drop these filters' NATS subscriptions unless wanted again since
    /// the listing (or overlapped by a newer filter); answers how many
    /// were dropped.
    Release {
        filters: Vec<(u64, u64)>,
        reply: oneshot::Sender<usize>,
    },
}

/// A filter the link listens to, as a want is answered.
#[derive(Debug, Clone)]
struct Listen {
    /// Set once NATS has confirmed the subscription.
    confirmed: Arc<AtomicBool>,
    /// The version of this node's filters that told the other nodes of
    /// it: the want waits until they took it.
    told: u64,
}

/// The link's subscriptions, as [`Control::List`] answers.
struct Listed {
    /// (id, filter, generation of its last want).
    filters: Vec<(u64, String, u64)>,
    /// NATS subjects subscribed.
    subjects: Vec<String>,
}

/// What the link shares with the broker's threads.
struct Shared {
    node: String,
    prefix: String,
    urls: Vec<String>,
    client: async_nats::Client,
    outbound: mpsc::Sender<Outbound>,
    control: mpsc::Sender<Control>,
    counters: Counters,
    /// Messages from other nodes the NATS client dropped because the
    /// link fell behind (its event callback counts them).
    lost: Arc<AtomicU64>,
    /// How long a subscribe waits for NATS to confirm it.
    confirm: Duration,
    /// `$KV.{bucket}.`, once the retained bucket is known to exist.
    retained: std::sync::OnceLock<String>,
    /// What to do when another node says a client connected there (close
    /// this node's older connections of that client id and principal);
    /// set by the embedding broker, which owns the sessions.
    on_connect: std::sync::OnceLock<ConnectHook>,
    /// Queues and jobs homed here or elsewhere.
    remotes: remote::Remotes,
    /// Other nodes by name, with when they were last heard.
    peers: Mutex<BTreeMap<String, Instant>>,
    /// When the link last handled NATS coming back (and asked the others
    /// to say hello), with the client's count of connections then: a
    /// hello handled after it came over that connection or a later one
    /// ([`peers::until_listening`]).
    returned: Mutex<Option<(u64, Instant)>>,
    /// This process's random id, in its hellos.
    instance: String,
    /// `[cluster] members`, in its hellos (a node listing others is
    /// told).
    members: Vec<String>,
    /// Other processes heard using this node's name, and peers whose
    /// members differ.
    conflicts: Mutex<peers::Conflicts>,
    /// Whether the NATS client is connected (set by its events): the
    /// pump holds publishes while it is not.
    online: tokio::sync::watch::Receiver<bool>,
    /// What the other nodes listen to (which publishes go to NATS).
    interest: interest::Interest,
    /// Queues failing over between members (`[cluster] failover`).
    failover: Option<failover::Failover>,
    /// The broker this node serves (calls taken over here run on it).
    broker: WeakBroker,
    /// The link's runtime (for work started from the broker's threads).
    runtime: tokio::runtime::Handle,
    /// Asks the link's thread to stop; answered when it has.
    stop: Mutex<Option<(oneshot::Sender<()>, std::sync::mpsc::Receiver<()>)>>,
}

impl Shared {
    /// The other nodes heard within [`LOST_AFTER`].
    fn up(&self) -> Vec<String> {
        let now = Instant::now();
        self.peers
            .lock()
            .iter()
            .filter(|(_, seen)| now.saturating_duration_since(**seen) < LOST_AFTER)
            .map(|(node, _)| node.clone())
            .collect()
    }
}

/// Called with a client id (`mqtt:{id}`), the principal's id, whether
/// the new connection asked for a clean start, and when it connected
/// (Unix ms, the other node's clock), when a client connects on another
/// node.
pub type ConnectHook = Box<dyn Fn(&str, &str, bool, u64) + Send + Sync>;

/// What a node says on `{prefix}.sys.connect` when a client connects.
#[derive(Debug, serde::Serialize, serde::Deserialize)]
pub(crate) struct Connected {
    pub node: String,
    pub client: String,
    pub principal: String,
    pub clean: bool,
    /// When the client connected there (Unix ms): only older connections
    /// are closed, so a late announcement never closes a newer one.
    #[serde(default)]
    pub at_ms: u64,
}

/// Whether the client is connected to NATS. Right after its first
/// connect it may still say `Pending`: a connect counted says otherwise.
fn connected(client: &async_nats::Client) -> bool {
    match client.connection_state() {
        async_nats::connection::State::Connected => true,
        async_nats::connection::State::Pending => {
            client.statistics().connects.load(Ordering::Relaxed) > 0
        }
        async_nats::connection::State::Disconnected => false,
    }
}

/// Waits until NATS has taken everything this connection sent before:
/// NATS handles a connection's commands in order, and answers a request
/// nobody serves (`{prefix}.sys.probe.{node}`) with "no responders" once
/// it got there (the client's flush only empties its own buffer).
async fn round_trip(
    client: &async_nats::Client,
    prefix: &str,
    node: &str,
    limit: Duration,
) -> Result<(), NatsError> {
    let probe = async_nats::Request::new().timeout(Some(limit));
    match client
        .send_request(format!("{prefix}.sys.probe.{node}"), probe)
        .await
    {
        Ok(_) => Ok(()),
        Err(e) if e.kind() == async_nats::RequestErrorKind::NoResponders => Ok(()),
        Err(e) => Err(NatsError::Request(e.to_string())),
    }
}

/// This node's membership of a cluster: cheap to clone, held by the
/// broker, which calls it on every publish and subscribe.
#[derive(Clone)]
pub struct Cluster {
    shared: Arc<Shared>,
}

/// How often a node says it is alive on `{prefix}.sys.hello`.
pub(super) const HELLO_EVERY: Duration = Duration::from_secs(2);
/// A node not heard for this long is listed as lost.
pub(super) const LOST_AFTER: Duration = Duration::from_secs(10);
/// A lost node is forgotten after this long.
const FORGET_AFTER: Duration = Duration::from_secs(600);
/// A node not heard for this long no longer has its filters served: 30
/// missed hellos, so it is gone (or cut off from NATS, where nothing
/// reaches it anyway); when it is heard again its whole set is asked
/// for, and everything goes to it meanwhile (`interest.rs`).
const FILTERS_KEPT_FOR: Duration = Duration::from_secs(60);
/// How often filters no local subscription uses are looked for.
pub const RECONCILE_EVERY: Duration = Duration::from_secs(10);

impl Cluster {
    /// Connects to NATS on a thread of its own and starts serving
    /// `broker`'s cross-node traffic. With `required`, a NATS that does
    /// not answer in time is an error; without, the node starts alone
    /// and joins when NATS comes.
    ///
    /// # Errors
    /// [`ClusterError`].
    pub async fn start(
        config: &ClusterConfig,
        broker: WeakBroker,
    ) -> Result<Cluster, ClusterError> {
        link::start(config, broker).await
    }

    /// This node's name.
    pub fn node(&self) -> &str {
        &self.shared.node
    }

    /// Hands a publish to the link for the other nodes, if any of them
    /// wants its topic. Never waits: a full buffer (NATS slow or away)
    /// drops it and counts it. A retained publish is written to the
    /// retained bucket either way.
    pub(crate) fn forward(
        &self,
        topic: &str,
        payload: &Bytes,
        headers: &Headers,
        flags: wire::Flags,
    ) {
        let s = &self.shared;
        if s.interest.wants(topic) {
            let msg = Outbound {
                subject: subject::topic_subject(&s.prefix, topic),
                payload: payload.clone(),
                what: What::Topic(
                    wire::encode(&s.node, headers, flags),
                    headers.clone(),
                    flags,
                ),
            };
            if s.outbound.try_send(msg).is_err() {
                s.counters.dropped.fetch_add(1, Ordering::Relaxed);
                return;
            }
        } else {
            s.interest.not_wanted.add(1);
        }
        // A retained message is also the value of its topic's key in the
        // retained bucket, written after the message on the same
        // connection (a core publish: JetStream stores it in order).
        let Some(kv) = s.retained.get().filter(|_| flags.retain) else {
            return;
        };
        let subject = format!("{kv}{}", subject::retained_key(topic));
        let put = if payload.is_empty() {
            let mut del = async_nats::HeaderMap::new();
            del.insert("KV-Operation", "DEL");
            Outbound {
                subject,
                payload: Bytes::new(),
                what: What::Retained(Some(del)),
            }
        } else {
            Outbound {
                subject,
                payload: wire::retained_value(payload, headers, flags).into(),
                what: What::Retained(None),
            }
        };
        if s.outbound.try_send(put).is_err() {
            s.counters.dropped.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Sets what this node does when a client connects on another node
    /// (once; the embedding broker closes its older connections of the
    /// same client id and principal: a takeover across nodes).
    pub fn on_connect(&self, hook: ConnectHook) {
        let _ = self.shared.on_connect.set(hook);
    }

    /// Tells the other nodes that `client` (`mqtt:{id}`) of `principal`
    /// connected here, so they close their older connections of it. In
    /// order with this node's publishes (a will the old connection leaves
    /// comes before the new connection's messages only on its own node).
    pub(crate) fn announce_connect(&self, client: &str, principal: &str, clean: bool) {
        let s = &self.shared;
        let body = Connected {
            node: s.node.clone(),
            client: client.to_owned(),
            principal: principal.to_owned(),
            clean,
            at_ms: crate::broker::now_ms(),
        };
        let msg = Outbound::once(
            format!("{}.sys.connect", s.prefix),
            serde_json::to_vec(&body).unwrap_or_default().into(),
            None,
        );
        if s.outbound.try_send(msg).is_err() {
            s.counters.dropped.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Makes sure this node hears `filter`'s topics from the other nodes:
    /// subscribes on NATS if it does not yet, reads the filter's retained
    /// messages from the retained bucket into the local topics, and waits
    /// (at most `connect_timeout_ms`) for NATS to confirm and for the
    /// other nodes to say they forward its topics, so that a publish on
    /// another node after the subscribe returns is heard. With NATS away
    /// it returns at once: the subscription is made when NATS comes back.
    pub(crate) async fn want(&self, filter: &str) {
        let s = &self.shared;
        let (reply, answer) = oneshot::channel();
        let asked = s.control.send(Control::Want {
            filter: filter.to_owned(),
            reply,
        });
        // The link's own read of retained messages is bounded by `confirm`
        // too: this wait is longer.
        let listen = match tokio::time::timeout(s.confirm * 2, async {
            asked.await.ok()?;
            answer.await.ok()
        })
        .await
        {
            Ok(Some(Ok(listen))) => listen,
            Ok(Some(Err(e))) => {
                tracing::warn!(filter, "cluster: cannot subscribe on NATS: {e}");
                return;
            }
            Ok(None) | Err(_) => {
                tracing::warn!(
                    filter,
                    "cluster: the NATS link did not take the subscription in time"
                );
                return;
            }
        };
        if !connected(&s.client) {
            return;
        }
        if !listen.confirmed.load(Ordering::Acquire) {
            match round_trip(&s.client, &s.prefix, &s.node, s.confirm).await {
                Ok(()) => listen.confirmed.store(true, Ordering::Release),
                Err(e) => tracing::debug!(filter, "cluster: NATS did not confirm: {e}"),
            }
        }
        // And every other node forwards the filter's topics.
        s.interest.wait_acked(&s.up(), listen.told, s.confirm).await;
    }

    /// Drops the NATS subscriptions of filters no local subscription uses
    /// any more (see the module's notes for the ones kept). Returns how
    /// many were dropped.
    pub(crate) async fn reconcile(&self, broker: &Broker) -> usize {
        let s = &self.shared;
        let Some(listed) = self.list().await else {
            return 0;
        };
        let mut unused = Vec::new();
        for (id, filter, generation) in listed.filters {
            if !broker.has_subscribers(&filter).await {
                unused.push((id, generation));
            }
        }
        if unused.is_empty() {
            return 0;
        }
        let (reply, answer) = oneshot::channel();
        if s.control
            .send(Control::Release {
                filters: unused,
                reply,
            })
            .await
            .is_err()
        {
            return 0;
        }
        answer.await.unwrap_or(0)
    }

    async fn list(&self) -> Option<Listed> {
        let (reply, answer) = oneshot::channel();
        self.shared
            .control
            .send(Control::List { reply })
            .await
            .ok()?;
        tokio::time::timeout(self.shared.confirm, answer)
            .await
            .ok()?
            .ok()
    }

    /// The few numbers `GET /admin/overview`, the dashboard and `wharf
    /// top` show, without asking the link.
    pub fn summary(&self) -> ClusterSummary {
        let s = &self.shared;
        let now = Instant::now();
        let (up, lost) = s.peers.lock().values().fold((0, 0), |(up, lost), seen| {
            if now.saturating_duration_since(*seen) < LOST_AFTER {
                (up + 1, lost)
            } else {
                (up, lost + 1)
            }
        });
        let conflicts = {
            let c = s.conflicts.lock();
            c.same_name.len() + c.members.len()
        };
        ClusterSummary {
            node: s.node.clone(),
            connected: connected(&s.client),
            peers_up: up,
            peers_lost: lost,
            conflicts,
            buffered: s.outbound.max_capacity() - s.outbound.capacity(),
        }
    }

    /// What `GET /admin/cluster` shows.
    pub async fn status(&self) -> ClusterStatus {
        let s = &self.shared;
        let listed = self.list().await;
        let now = Instant::now();
        let peers = s
            .peers
            .lock()
            .iter()
            .map(|(node, seen)| {
                let ago = now.saturating_duration_since(*seen);
                PeerStatus {
                    node: node.clone(),
                    last_seen_ms: ago.as_millis() as u64,
                    up: ago < LOST_AFTER,
                }
            })
            .collect();
        let c = &s.counters;
        let stats = s.client.statistics();
        let (remote_consumers, consumers_elsewhere) = self.consumer_counts();
        let (peer_filters, forwarding_all) = s.interest.status();
        let (same_name, other_members) = {
            let seen = s.conflicts.lock();
            (
                seen.same_name.iter().cloned().collect(),
                seen.members.clone(),
            )
        };
        ClusterStatus {
            enabled: true,
            node: Some(s.node.clone()),
            nats: s.urls.clone(),
            state: match s.client.connection_state() {
                async_nats::connection::State::Connected => "connected",
                async_nats::connection::State::Disconnected => "disconnected",
                async_nats::connection::State::Pending => "connecting",
            },
            connects: stats.connects.load(Ordering::Relaxed),
            peers,
            filters: listed
                .as_ref()
                .map(|l| l.filters.iter().map(|(_, f, _)| f.clone()).collect())
                .unwrap_or_default(),
            subjects: listed.map(|l| l.subjects).unwrap_or_default(),
            buffered: s.outbound.max_capacity() - s.outbound.capacity(),
            forwarded: c.forwarded.load(Ordering::Relaxed),
            not_wanted: s.interest.not_wanted.get(),
            forwarding_all,
            retained_shared: s.retained.get().is_some(),
            peer_filters,
            dropped: c.dropped.load(Ordering::Relaxed),
            failed: c.failed.load(Ordering::Relaxed),
            received: c.received.load(Ordering::Relaxed),
            duplicates: c.duplicates.load(Ordering::Relaxed),
            resent: c.resent.load(Ordering::Relaxed),
            repeats: c.repeats.load(Ordering::Relaxed),
            invalid: c.invalid.load(Ordering::Relaxed),
            refused: c.refused.load(Ordering::Relaxed),
            lost: s.lost.load(Ordering::Relaxed),
            members: s.remotes.members(),
            jobs_home: self.home_of(home::JOBS_HOME_KEY),
            remote_consumers,
            consumers_elsewhere,
            same_name,
            other_members,
            failover: s.failover.as_ref().map(|f| FailoverStatus {
                lease_ms: f.lease.as_millis() as u64,
                leases: f.held_keys(),
                taken_over: f.taken.load(Ordering::Relaxed),
                leases_lost: f.lost.load(Ordering::Relaxed),
                journal_appended: f.journal.appended.load(Ordering::Relaxed),
                journal_failed: f.journal.failed.load(Ordering::Relaxed),
            }),
        }
    }

    /// Stops the link: what is buffered for NATS is sent (for at most
    /// `timeout`), then the connection closes. Blocking; idempotent.
    pub(crate) fn shutdown(&self, timeout: Duration) {
        let Some((stop, stopped)) = self.shared.stop.lock().take() else {
            return;
        };
        let _ = stop.send(());
        if stopped
            .recv_timeout(timeout + Duration::from_secs(1))
            .is_err()
        {
            tracing::warn!("cluster: the NATS link did not stop in time");
        }
    }
}

impl std::fmt::Debug for Cluster {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Cluster")
            .field("node", &self.shared.node)
            .finish_non_exhaustive()
    }
}

/// `GET /admin/cluster`: this node, its NATS link, the nodes it hears and
/// what crossed between them.
#[derive(Debug, Clone, Default, Serialize)]
pub struct ClusterStatus {
    /// Whether `[cluster]` is configured.
    pub enabled: bool,
    /// This node's name.
    pub node: Option<String>,
    /// The NATS servers configured.
    pub nats: Vec<String>,
    /// `connected`, `disconnected` or `connecting`.
    pub state: &'static str,
    /// Times the link has connected (1 plus reconnects).
    pub connects: u64,
    /// Other nodes heard on NATS.
    pub peers: Vec<PeerStatus>,
    /// Topic filters this node listens to on NATS.
    pub filters: Vec<String>,
    /// Their NATS subjects.
    pub subjects: Vec<String>,
    /// Publishes waiting for NATS now.
    pub buffered: usize,
    /// Publishes sent to NATS.
    pub forwarded: u64,
    /// Publishes no other node wanted (no filter of theirs matched), not
    /// sent to NATS.
    pub not_wanted: u64,
    /// Whether every publish goes to NATS now, wanted or not: for a few
    /// seconds after connecting, and while some node's filters are not
    /// known here (`peer_filters`).
    pub forwarding_all: bool,
    /// Whether retained messages published here are written to the
    /// retained bucket (JetStream), for every node to read; until then
    /// they stay on this node.
    pub retained_shared: bool,
    /// How many filters each other node listens to, as known here
    /// (`null`: not known yet, or a node older than interest-based
    /// forwarding).
    pub peer_filters: BTreeMap<String, Option<usize>>,
    /// Publishes dropped because the buffer was full.
    pub dropped: u64,
    /// Publishes NATS refused (past its max_payload, say).
    pub failed: u64,
    /// Messages from other nodes published here.
    pub received: u64,
    /// Copies of a message heard by a second overlapping filter, ignored.
    pub duplicates: u64,
    /// Publishes sent again after a reconnect to NATS: those sent within
    /// two seconds before it was lost, which a dying server may have
    /// taken with it.
    pub resent: u64,
    /// Copies of a message from another node that this node already had
    /// (sent again after NATS was lost), ignored.
    pub repeats: u64,
    /// Messages whose subject names no topic, ignored.
    pub invalid: u64,
    /// Messages from other nodes this node's topics refused (overloaded).
    pub refused: u64,
    /// Messages from other nodes lost because this node fell behind
    /// (`[cluster] inbound_buffer` was full).
    pub lost: u64,
    /// `[cluster] members`: the nodes queues and jobs are homed on.
    pub members: Vec<String>,
    /// The node the jobs resource lives on (none without members): with
    /// failover, the holder of its lease, or the next in line for it.
    pub jobs_home: Option<String>,
    /// Consumers on other nodes of queues homed here.
    pub remote_consumers: usize,
    /// This node's consumers of queues homed on other nodes.
    pub consumers_elsewhere: usize,
    /// Other processes heard using this node's name (their instance
    /// ids): each would mix its queues with this node's.
    pub same_name: Vec<String>,
    /// Peers whose `[cluster] members` differ from this node's, with
    /// theirs: queues are homed differently on each side.
    pub other_members: BTreeMap<String, Vec<String>>,
    /// Queue failover (`[cluster] failover`), when on.
    pub failover: Option<FailoverStatus>,
}

/// `GET /admin/cluster`'s `failover`: the leases this node holds and
/// what its journal did.
#[derive(Debug, Clone, Default, Serialize)]
pub struct FailoverStatus {
    /// How long a lease lasts unless renewed.
    pub lease_ms: u64,
    /// The queues (by the name they are homed by) whose lease this node
    /// holds: it is their home.
    pub leases: Vec<String>,
    /// Queues this node took over (a first home included).
    pub taken_over: u64,
    /// Leases this node lost while holding them (not renewed in time, or
    /// taken by another node).
    pub leases_lost: u64,
    /// Journal records appended.
    pub journal_appended: u64,
    /// Journal appends that failed (their writes were not confirmed).
    pub journal_failed: u64,
}

/// The cluster at a glance (`GET /admin/overview`'s `cluster`).
#[derive(Debug, Clone, Serialize)]
pub struct ClusterSummary {
    /// This node's name.
    pub node: String,
    /// Whether the link to NATS is up.
    pub connected: bool,
    /// Other nodes heard lately.
    pub peers_up: usize,
    /// Other nodes not heard for ten seconds (vanished; a node that
    /// stopped said so and is not counted).
    pub peers_lost: usize,
    /// Processes using this node's name, and peers with other members.
    pub conflicts: usize,
    /// Publishes waiting for NATS.
    pub buffered: usize,
}

/// A node heard on NATS.
#[derive(Debug, Clone, Serialize)]
pub struct PeerStatus {
    /// Its name.
    pub node: String,
    /// Milliseconds since it was last heard.
    pub last_seen_ms: u64,
    /// Heard within the last ten seconds.
    pub up: bool,
}
