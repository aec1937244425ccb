//! The NATS link's thread: connects, sends what the broker forwards,
//! keeps the node's NATS subscriptions, and publishes what other nodes
//! send to the local broker. Everything here runs on one current-thread
//! runtime of its own, so NATS work never competes with the HTTP workers'
//! event loops; its state is touched only by the loop in [`serve`].

use std::collections::HashMap;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use futures_util::stream::{SelectAll, Stream};
use tokio::sync::{mpsc, oneshot};

use super::{
    Cluster, ClusterError, Control, HELLO_EVERY, Listed, Listen, NatsError, Shared, kv, subject,
    wire,
};
use crate::broker::{Publish, WeakBroker};
use crate::config::ClusterConfig;
use crate::routing::{self, FilterTrie};

/// Commands from the broker waiting for the link; past it a subscribe
/// waits (bounded by its timeout).
const CONTROL_DEPTH: usize = 1024;
/// Longest a starting node waits for its roll call's answer.
const ROLL_CALL_WAIT: Duration = Duration::from_secs(1);
/// Longest the link spends sending what is buffered when it stops.
const FLUSH_ON_STOP: Duration = Duration::from_secs(2);

/// Starts the link's thread and waits for it to connect (or, without
/// `required`, to begin trying).
pub(super) async fn start(
    config: &ClusterConfig,
    broker: WeakBroker,
) -> Result<Cluster, ClusterError> {
    let (started, start_answer) = oneshot::channel::<Result<Cluster, ClusterError>>();
    let config = config.clone();
    std::thread::Builder::new()
        .name("wharf-cluster".into())
        .spawn(move || {
            let runtime = match tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            {
                Ok(r) => r,
                Err(e) => {
                    let _ = started.send(Err(ClusterError::Thread(e)));
                    return;
                }
            };
            runtime.block_on(run(config, broker, started));
        })?;
    start_answer.await.unwrap_or_else(|_| {
        Err(ClusterError::Thread(std::io::Error::other(
            "the NATS link thread ended before it connected",
        )))
    })
}

async fn run(
    config: ClusterConfig,
    broker: WeakBroker,
    started: oneshot::Sender<Result<Cluster, ClusterError>>,
) {
    let node = super::connect::node_name(&config);
    let lost = Arc::new(AtomicU64::new(0));
    let (online_tx, online) = tokio::sync::watch::channel(false);
    let online_tx = Arc::new(online_tx);
    let options =
        match super::connect::options(&config, &node, lost.clone(), online_tx.clone()).await {
            Ok(o) => o,
            Err(e) => {
                let _ = started.send(Err(e));
                return;
            }
        };
    let urls: Vec<async_nats::ServerAddr> =
        config.nats.iter().filter_map(|u| u.parse().ok()).collect();
    let client = match options.connect(urls.as_slice()).await {
        Ok(c) => c,
        Err(e) => {
            let _ = started.send(Err(ClusterError::Unreachable {
                urls: config.nats.join(", "),
                reason: e.to_string(),
            }));
            return;
        }
    };
    // Only ever raised here: the client's Connected event may have come
    // before its state reads as connected, and must not be undone.
    if super::connected(&client) {
        online_tx.send_replace(true);
    }
    let prefix = config.prefix.clone();
    // A node of the same name already serving answers on its home
    // subject: refuse to join rather than mix its queues with ours. (A
    // node that starts without NATS finds out from its hellos instead.)
    if config.required || super::connected(&client) {
        let probe = async_nats::Request::new()
            .timeout(Some(Duration::from_millis(config.connect_timeout_ms)));
        match client
            .send_request(format!("{prefix}.home.{node}"), probe)
            .await
        {
            Ok(_) => {
                let _ = started.send(Err(ClusterError::NameTaken(node)));
                return;
            }
            Err(e) if e.kind() == async_nats::RequestErrorKind::NoResponders => {}
            Err(e) => {
                tracing::warn!("cluster: could not check that no other node is named {node:?}: {e}")
            }
        }
    }
    let hello_subject = format!("{prefix}.sys.hello");
    // Subscribed in this order: NATS takes a connection's commands in
    // order, and the probe below comes after them all.
    let subscribed = tokio::try_join!(
        client.subscribe(hello_subject.clone()),
        client.subscribe(format!("{prefix}.sys.connect")),
        client.subscribe(format!("{prefix}.sys.bye")),
        client.subscribe(format!("{prefix}.home.{node}")),
        client.subscribe(format!("{prefix}.deliver.{node}")),
        client.subscribe(format!("{prefix}.reply.{node}.*")),
        client.subscribe(super::tell::interest_subject(&prefix)),
        client.subscribe(super::tell::ack_subject(&prefix, &node)),
        client.subscribe(super::tell::tell_subject(&prefix, &node)),
        client.subscribe(super::tell::roll_subject(&prefix)),
    );
    let (hello, connects, bye, calls, deliveries, replies, interest, acks, tell, roll) =
        match subscribed {
            Ok(s) => s,
            Err(e) => {
                let _ = started.send(Err(ClusterError::Unreachable {
                    urls: config.nats.join(", "),
                    reason: e.to_string(),
                }));
                return;
            }
        };
    // The subscriptions are in place at NATS before the node serves, so
    // that a call to this node's queues from then on finds it.
    if super::connected(&client)
        && let Err(e) = super::round_trip(
            &client,
            &prefix,
            &node,
            Duration::from_millis(config.connect_timeout_ms),
        )
        .await
    {
        tracing::warn!("cluster: NATS did not confirm this node's subscriptions: {e}");
    }
    // The nodes up, so that this node's first subscribes wait for them to
    // take its filters (a node it does not know would not forward them).
    let named = if super::connected(&client) {
        // Short: anything subscribed to `{prefix}.sys.>` (an operator's
        // `nats sub`) is a responder that never answers.
        let limit = Duration::from_millis(config.connect_timeout_ms).min(ROLL_CALL_WAIT);
        super::tell::roll_call(&client, &prefix, &node, limit).await
    } else {
        Vec::new()
    };
    let (outbound, out_rx) = mpsc::channel(config.buffer);
    let (control, control_rx) = mpsc::channel(CONTROL_DEPTH);
    let (stop, stop_rx) = oneshot::channel();
    let (stopped, stopped_rx) = std::sync::mpsc::channel();
    let instance = uuid::Uuid::now_v7().simple().to_string();
    let shared = Arc::new(Shared {
        node: node.clone(),
        prefix,
        urls: config.nats.clone(),
        client: client.clone(),
        outbound,
        control,
        counters: super::Counters::default(),
        lost,
        confirm: Duration::from_millis(config.connect_timeout_ms),
        retained: std::sync::OnceLock::new(),
        on_connect: std::sync::OnceLock::new(),
        remotes: super::remote::Remotes::new(),
        peers: Default::default(),
        returned: Default::default(),
        instance: instance.clone(),
        members: config.members.clone(),
        conflicts: Default::default(),
        interest: super::interest::Interest::new(config.forward_all),
        online,
        failover: config.failover.then(|| {
            super::failover::Failover::new(
                &config.prefix,
                &node,
                &instance,
                config.lease_ms,
                config.replicas,
            )
        }),
        broker: broker.clone(),
        runtime: tokio::runtime::Handle::current(),
        stop: parking_lot::Mutex::new(Some((stop, stopped_rx))),
    });
    {
        let now = Instant::now();
        let mut peers = shared.peers.lock();
        for n in &named {
            peers.insert(n.clone(), now);
        }
    }
    shared.interest.named(&named);
    let bucket = kv::retained_bucket(&shared.prefix);
    if super::connected(&client) {
        kv::ensure_bucket(&client, &bucket, &shared).await;
    }
    tracing::info!(node = %node, nats = %config.nats.join(", "), "cluster: this node joins");
    if started
        .send(Ok(Cluster {
            shared: shared.clone(),
        }))
        .is_err()
    {
        return;
    }
    let (finish, finishing) = oneshot::channel();
    let pump = tokio::spawn(super::pump::pump(shared.clone(), out_rx, finishing));
    if let Some(f) = &shared.failover {
        // Appends for the queues held here, and the leases kept (both end
        // with the runtime).
        f.journal.run(client.clone());
        tokio::spawn(super::failover::keep(shared.clone()));
    }
    // Calls to this node's queues and jobs, and deliveries to its
    // consumers of other nodes' queues (ends with the runtime).
    tokio::spawn(super::serve::serve(
        shared.clone(),
        broker.clone(),
        calls,
        deliveries,
        replies,
    ));
    serve(
        &shared,
        broker,
        bucket,
        control_rx,
        Sys {
            connects,
            hello,
            bye,
            interest,
            acks,
            tell,
            roll,
        },
        hello_subject,
        stop_rx,
    )
    .await;
    // Calls still waiting for answers fail now rather than at their
    // deadline.
    super::Cluster {
        shared: shared.clone(),
    }
    .fail_waiting();
    // Stopping: what the broker handed over is sent, then the other
    // nodes are told, then flushed.
    let _ = finish.send(());
    let bye_subject = format!("{}.sys.bye", shared.prefix);
    let _ = tokio::time::timeout(FLUSH_ON_STOP, async {
        let _ = pump.await;
        // Its queues' next homes need not wait for the leases to run out.
        super::failover::release_all(&shared).await;
        // As a hello (with this process's instance), so that a bye from
        // another process of the same name is told apart.
        let bye = super::peers::Hello {
            node: shared.node.clone(),
            instance: shared.instance.clone(),
            members: shared.members.clone(),
            ask: false,
            interest: None,
        };
        let _ = client.publish(bye_subject, bye.encode()).await;
        let _ = client.flush().await;
    })
    .await;
    let _ = stopped.send(());
}

/// One NATS subscription of a filter, tagged with the filter's id.
struct Tagged {
    id: u64,
    sub: async_nats::Subscriber,
}

impl Stream for Tagged {
    type Item = (u64, async_nats::Message);

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let id = self.id;
        self.sub.poll_next_unpin(cx).map(|m| m.map(|m| (id, m)))
    }
}

/// A filter the node listens to on NATS.
struct Listening {
    filter: String,
    subjects: Vec<String>,
    /// Bumped by every want, so a release that raced a new want loses.
    generation: u64,
    /// When it was last wanted: a subscribe makes the local subscription
    /// only after its want is answered, so a filter just wanted has no
    /// local user yet and is not released until [`release_grace`] passed.
    wanted_at: Instant,
    confirmed: Arc<AtomicBool>,
    /// The version of this node's filters that told the others of it.
    told: u64,
}

impl Listening {
    fn listen(&self) -> Listen {
        Listen {
            confirmed: self.confirmed.clone(),
            told: self.told,
        }
    }
}

/// How long after its last want a filter may be released at the
/// earliest: longer than a want may take (twice `connect_timeout_ms`)
/// plus a reconciler tick.
fn release_grace(confirm: Duration) -> Duration {
    confirm * 2 + super::RECONCILE_EVERY
}

/// The link's state: its filters and the subscription streams.
struct Link {
    prefix: String,
    by_filter: HashMap<String, u64>,
    filters: HashMap<u64, Listening>,
    /// The filters by id, to find the oldest one matching a topic.
    trie: FilterTrie<u64>,
    inbound: SelectAll<Tagged>,
    next_id: u64,
    generation: u64,
    /// Filters whose retained messages are being read, by id.
    syncing: HashMap<u64, Syncing>,
    /// See [`release_grace`].
    grace: Duration,
    /// What the other nodes were told of the filters.
    told: super::interest::Told,
    /// What this node had from each other process (`resend.rs`).
    seen: super::resend::Seen,
}

/// A filter whose retained messages are being read: the subscribes
/// waiting for them, and the topics whose retained message changed live
/// meanwhile (newer than what the read may bring).
struct Syncing {
    filter: String,
    live: std::collections::HashSet<String>,
    waiting: Vec<oneshot::Sender<Result<Listen, NatsError>>>,
}

/// A subscribe's answer: now, or once the filter's retained messages are
/// in.
enum Wanted {
    Now(Result<Listen, NatsError>),
    /// A new filter: read its retained messages (these key patterns),
    /// then answer.
    Sync(u64, Vec<String>),
    /// Its retained messages are being read: answer with the others.
    Later,
}

impl Link {
    async fn want(
        &mut self,
        client: &async_nats::Client,
        filter: String,
        reply: &mut Option<oneshot::Sender<Result<Listen, NatsError>>>,
        retained: bool,
    ) -> Wanted {
        self.generation += 1;
        if let Some(id) = self.by_filter.get(&filter) {
            if let Some(s) = self.syncing.get_mut(id) {
                s.waiting.extend(reply.take());
                return Wanted::Later;
            }
            let Some(l) = self.filters.get_mut(id) else {
                return Wanted::Now(Err(NatsError::LostFilter));
            };
            l.generation = self.generation;
            l.wanted_at = Instant::now();
            return Wanted::Now(Ok(l.listen()));
        }
        self.next_id += 1;
        let id = self.next_id;
        let subjects = subject::filter_subjects(&self.prefix, &filter);
        let mut subs = Vec::with_capacity(subjects.len());
        for s in &subjects {
            match client.subscribe(s.clone()).await {
                Ok(sub) => subs.push(sub),
                Err(e) => return Wanted::Now(Err(NatsError::Request(e.to_string()))),
            }
        }
        for sub in subs {
            self.inbound.push(Tagged { id, sub });
        }
        let confirmed = Arc::new(AtomicBool::new(false));
        let told = self.told.added(&filter);
        self.trie.insert(&filter, id);
        self.by_filter.insert(filter.clone(), id);
        self.filters.insert(
            id,
            Listening {
                filter: filter.clone(),
                subjects,
                generation: self.generation,
                wanted_at: Instant::now(),
                confirmed: confirmed.clone(),
                told,
            },
        );
        if !retained {
            return Wanted::Now(Ok(Listen { confirmed, told }));
        }
        // The NATS subscription went out first on this connection: a
        // retained message changed after the read is heard live.
        let keys = subject::filter_keys(&filter);
        self.syncing.insert(
            id,
            Syncing {
                filter,
                live: Default::default(),
                waiting: reply.take().into_iter().collect(),
            },
        );
        Wanted::Sync(id, keys)
    }

    fn list(&self) -> Listed {
        let mut filters: Vec<(u64, String, u64)> = self
            .filters
            .iter()
            .map(|(id, l)| (*id, l.filter.clone(), l.generation))
            .collect();
        filters.sort_unstable();
        let subjects = filters
            .iter()
            .flat_map(|(id, _, _)| self.filters[id].subjects.iter().cloned())
            .collect();
        Listed { filters, subjects }
    }

    /// Drops the subscriptions of `unused` filters that [`releasable`]
    /// lets go.
    fn release(&mut self, unused: Vec<(u64, u64)>) -> usize {
        // Still reading its retained messages: being wanted right now.
        let unused = unused
            .into_iter()
            .filter(|(id, _)| !self.syncing.contains_key(id))
            .collect();
        let gone = releasable(&self.filters, unused, Instant::now(), self.grace);
        if gone.is_empty() {
            return 0;
        }
        for id in &gone {
            if let Some(l) = self.filters.remove(id) {
                self.told.removed(&l.filter);
                self.trie.remove(&l.filter, id);
                self.by_filter.remove(&l.filter);
            }
        }
        // Dropping a subscriber unsubscribes it on NATS.
        let kept: Vec<Tagged> = std::mem::take(&mut self.inbound)
            .into_iter()
            .filter(|t| !gone.contains(&t.id))
            .collect();
        self.inbound = kept.into_iter().collect();
        gone.len()
    }

    /// Puts a filter's retained messages, read from the bucket, into the
    /// local topics, then answers the subscribes waiting for them. A
    /// topic another (already heard) filter covers, or whose retained
    /// message changed live during the read, is current already.
    async fn synced(
        &mut self,
        broker: &crate::broker::Broker,
        id: u64,
        result: Result<super::Synced, NatsError>,
    ) {
        let Some(s) = self.syncing.remove(&id) else {
            return;
        };
        match result {
            Ok(entries) => {
                for (topic, value) in entries {
                    if s.live.contains(&topic) {
                        continue;
                    }
                    let mut covered = false;
                    self.trie.for_each_match(&topic, |i| {
                        covered |= *i != id && !self.syncing.contains_key(i);
                    });
                    if covered {
                        continue;
                    }
                    let (payload, headers, flags) = value.unwrap_or_default();
                    let publish = Publish {
                        topic,
                        payload,
                        headers,
                        retain: true,
                        priority: flags.priority,
                        qos: flags.qos,
                        origin: 0,
                    };
                    if let Err(e) = broker.publish_remote(publish).await {
                        tracing::debug!("cluster: a retained message was not restored: {e}");
                    }
                }
            }
            Err(e) => tracing::warn!(
                filter = %s.filter,
                "cluster: the retained messages were not read: {e}"
            ),
        }
        let listen = self.filters.get(&id).map(Listening::listen);
        for w in s.waiting {
            let _ = w.send(listen.clone().ok_or(NatsError::Released));
        }
    }

    /// The topic `msg` is about, if this copy is the one to publish: the
    /// one that came by the oldest of the node's filters matching it.
    fn accept(&self, id: u64, msg: &async_nats::Message, shared: &Shared) -> Option<String> {
        let c = &shared.counters;
        let topic = match subject::subject_topic(&self.prefix, msg.subject.as_str()) {
            Ok(t) => t,
            Err(e) => {
                tracing::debug!(subject = %msg.subject, "cluster: ignored: {e}");
                c.invalid.fetch_add(1, Ordering::Relaxed);
                return None;
            }
        };
        let mut oldest = u64::MAX;
        self.trie
            .for_each_match(&topic, |i| oldest = oldest.min(*i));
        if oldest != id {
            // Heard by an older filter too (or by none that matches it,
            // a `$` topic under `#`).
            c.duplicates.fetch_add(1, Ordering::Relaxed);
            return None;
        }
        Some(topic)
    }
}

/// Which of the `unused` filters (id, generation when listed) may stop
/// being heard: those not wanted again since they were listed nor within
/// `grace` of `now`, and that no newer filter overlaps (a topic both
/// match is taken from the older one's stream; dropping it would move the
/// topic to another stream mid-flow).
fn releasable(
    filters: &HashMap<u64, Listening>,
    unused: Vec<(u64, u64)>,
    now: Instant,
    grace: Duration,
) -> Vec<u64> {
    let mut gone = Vec::new();
    for (id, generation) in unused {
        let Some(l) = filters.get(&id) else {
            continue;
        };
        if l.generation != generation || now.saturating_duration_since(l.wanted_at) < grace {
            continue;
        }
        let overlapped = filters
            .iter()
            .any(|(other, o)| *other > id && routing::overlaps(&l.filter, &o.filter));
        if !overlapped {
            gone.push(id);
        }
    }
    gone
}

/// The node's subscriptions to what nodes say to each other.
struct Sys {
    /// `{prefix}.sys.connect`: clients connecting elsewhere.
    connects: async_nats::Subscriber,
    /// `{prefix}.sys.hello`: nodes alive.
    hello: async_nats::Subscriber,
    /// `{prefix}.sys.bye`: nodes stopping.
    bye: async_nats::Subscriber,
    /// `{prefix}.sys.interest`: other nodes' filters.
    interest: async_nats::Subscriber,
    /// `{prefix}.sys.ack.{node}`: the others took this node's filters.
    acks: async_nats::Subscriber,
    /// `{prefix}.sys.tell.{node}`: asks for this node's whole set.
    tell: async_nats::Subscriber,
    /// `{prefix}.sys.roll`: starting nodes ask who is up.
    roll: async_nats::Subscriber,
}

/// The link's loop: commands, messages from other nodes, hellos, until
/// asked to stop.
async fn serve(
    shared: &Arc<Shared>,
    broker: WeakBroker,
    bucket: String,
    mut control: mpsc::Receiver<Control>,
    sys: Sys,
    hello_subject: String,
    mut stop: oneshot::Receiver<()>,
) {
    let Sys {
        mut connects,
        mut hello,
        mut bye,
        mut interest,
        mut acks,
        mut tell,
        mut roll,
    } = sys;
    let client = shared.client.clone();
    let mut link = Link {
        prefix: shared.prefix.clone(),
        by_filter: HashMap::new(),
        filters: HashMap::new(),
        trie: FilterTrie::new(),
        inbound: SelectAll::new(),
        next_id: 0,
        generation: 0,
        syncing: HashMap::new(),
        grace: release_grace(shared.confirm),
        told: Default::default(),
        seen: Default::default(),
    };
    let mut tick = tokio::time::interval(HELLO_EVERY);
    let hello_of = |ask: bool, told: &super::interest::Told| {
        super::peers::Hello {
            node: shared.node.clone(),
            instance: shared.instance.clone(),
            members: shared.members.clone(),
            ask,
            interest: Some(told.version()),
        }
        .encode()
    };
    // The first hello asks the others to say hello (and their filters'
    // versions) at once.
    let mut first = true;
    let mut ask_again = kv::AskAgain::default();
    let mut online = shared.online.clone();
    let c = &shared.counters;
    loop {
        tokio::select! {
                    biased;
                    _ = &mut stop => break,
                    cmd = control.recv() => match cmd {
                        Some(Control::Want { filter, reply }) => {
                            let has_bucket = kv::has_bucket(&client, &bucket, shared).await;
                            let mut reply = Some(reply);
                            match link.want(&client, filter, &mut reply, has_bucket).await {
                                Wanted::Now(answer) => {
                                    if let Some(r) = reply {
                                        let _ = r.send(answer);
                                    }
                                }
                                Wanted::Later => {}
                                Wanted::Sync(id, keys) => {
                                    let (client, bucket, back) =
                                        (client.clone(), bucket.clone(), shared.control.clone());
                                    let limit = shared.confirm;
                                    tokio::spawn(async move {
                                        let read = kv::read(&client, &bucket, &keys, limit);
                                        let result = tokio::time::timeout(limit, read)
                                            .await
                                            .unwrap_or_else(|_| Err(NatsError::Timeout));
                                        let _ = back.send(Control::Synced { id, result }).await;
                                    });
                                }
                            }
                            super::tell::change(shared, &mut link.told).await;
                        }
                        Some(Control::Synced { id, result }) => {
                            let Some(broker) = broker.upgrade() else {
                                break;
                            };
                            link.synced(&broker, id, result).await;
                        }
                        Some(Control::List { reply }) => {
                            let _ = reply.send(link.list());
                        }
                        Some(Control::Release { filters, reply }) => {
                            let _ = reply.send(link.release(filters));
                            super::tell::change(shared, &mut link.told).await;
                        }
                        None => break,
                    },
                    // Rare and small: ahead of the stream of messages, which
                    // would otherwise starve the hellos that say a node is alive.
                    Some(msg) = connects.next() => {
                        if let Ok(c) = serde_json::from_slice::<super::Connected>(&msg.payload)
                            && c.node != shared.node
                            && let Some(hook) = shared.on_connect.get()
                        {
        hook(&c.client, &c.principal, c.clean, c.at_ms);
                        }
                    }
                    Some(msg) = hello.next() => {
                        let Some(h) = super::peers::Hello::parse(&msg.payload) else {
                            continue;
                        };
                        super::peers::on_hello(shared, &h).await;
                        // A node back on NATS asks who listens: answer at
                        // once rather than at the next tick.
                        if h.ask && super::connected(&client) {
                            let _ = client.publish(hello_subject.clone(), hello_of(false, &link.told)).await;
                        }
                    }
                    Ok(()) = online.changed() => {
                        // Back on NATS (its subscriptions sent again before
                        // this): say so, and ask the others to.
                        let up = *online.borrow_and_update();
                        if up {
                            super::peers::returned(shared);
                            // What was said meanwhile may be lost, both ways.
                            for node in shared.interest.reconnected() {
                                super::tell::ask(shared, &node).await;
                            }
                            super::tell::whole(shared, &mut link.told, link.by_filter.keys()).await;
                            let _ = client.publish(hello_subject.clone(), hello_of(true, &link.told)).await;
                        }
                    }
                    Some(msg) = interest.next() => super::tell::heard(shared, msg).await,
                    Some(msg) = acks.next() => super::tell::acked(shared, &msg),
                    Some(_) = tell.next() => {
                        super::tell::whole(shared, &mut link.told, link.by_filter.keys()).await;
                    }
                    Some(msg) = roll.next() => super::tell::answer_roll(shared, msg).await,
                    Some(msg) = bye.next() => {
                        if let Some(bye) = super::peers::Hello::parse(&msg.payload) {
                            super::peers::on_bye(shared, &broker, &bye);
                        }
                    }
                    _ = tick.tick() => {
                        if super::connected(&client) {
                            let _ = client.publish(hello_subject.clone(), hello_of(first, &link.told)).await;
                            first = false;
                            ask_again.tick(&client, &bucket, shared);
                        }
                        super::peers::tidy(shared);
                    }
                    Some((id, msg)) = link.inbound.next(), if !link.inbound.is_empty() => {
                        let Some(topic) = link.accept(id, &msg, shared) else {
                            continue;
                        };
                        let Some(broker) = broker.upgrade() else {
                            break;
                        };
                        let wire::Decoded { headers, flags, seq, .. } = wire::decode(msg.headers.as_ref());
                        if seq.is_some_and(|s| !link.seen.fresh(s.epoch, s.seq)) {
                            c.repeats.fetch_add(1, Ordering::Relaxed);
                            continue;
                        }
                        if flags.retain {
                            for s in link.syncing.values_mut() {
                                if routing::matches(&s.filter, &topic) {
                                    s.live.insert(topic.clone());
                                }
                            }
                        }
                        let publish = Publish {
                            topic,
                            payload: msg.payload,
                            headers,
                            retain: flags.retain,
                            priority: flags.priority,
                            qos: flags.qos,
                            origin: 0,
                        };
                        match broker.publish_remote(publish).await {
                            Ok(_) => c.received.fetch_add(1, Ordering::Relaxed),
                            Err(e) => {
                                tracing::debug!("cluster: a message from another node was refused: {e}");
                                c.refused.fetch_add(1, Ordering::Relaxed)
                            }
                        };
                    }
                }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn listening(filters: &[(u64, &str, u64)]) -> HashMap<u64, Listening> {
        filters
            .iter()
            .map(|(id, f, generation)| {
                (
                    *id,
                    Listening {
                        filter: (*f).to_owned(),
                        subjects: Vec::new(),
                        generation: *generation,
                        wanted_at: Instant::now(),
                        confirmed: Arc::default(),
                        told: 0,
                    },
                )
            })
            .collect()
    }

    #[test]
    fn a_filter_is_released_only_unwanted_since_listed_and_not_overlapped_by_a_newer_one() {
        let f = listening(&[(1, "a/#", 1), (2, "a/b", 2), (3, "x/+", 3), (4, "y", 9)]);
        // a/# is overlapped by the newer a/b: kept. a/b overlaps only the
        // older a/#: released. x/+ overlaps nothing: released. y was
        // wanted again (generation 9, listed at 4): kept. 5 is unknown.
        let later = Instant::now() + Duration::from_secs(60);
        let grace = Duration::from_secs(30);
        let all = vec![(1, 1), (2, 2), (3, 3), (4, 4), (5, 5)];
        let mut gone = releasable(&f, all.clone(), later, grace);
        gone.sort_unstable();
        assert_eq!(gone, [2, 3]);
        // Wanted within the grace: none goes (its subscriber may not have
        // subscribed locally yet).
        assert!(releasable(&f, all, Instant::now(), grace).is_empty());
        // Once a/b is gone, a/# may go too.
        let f = listening(&[(1, "a/#", 1)]);
        assert_eq!(releasable(&f, vec![(1, 1)], later, grace), [1]);
    }
}
