//! Queues that survive their home (`[cluster] failover`): leases and
//! takeovers. Each queue (with its dead-letter queue, under the name it
//! is homed by) has a lease: a message on `{prefix}.lease.{key}` in the
//! JetStream stream `{PREFIX}_LEASES`, which keeps one message per
//! subject for `lease_ms` (`max_age`). Taking a lease appends to a
//! subject with no message (expected last subject sequence 0), renewing
//! it appends after the holder's own message; so at most one node holds
//! a lease, and a lease nobody renews is gone after `lease_ms`, without
//! a consensus of Wharf's own.
//!
//! The home of a queue is the node holding its lease, as every node
//! reads the stream every quarter lease; without one, the first member
//! in the queue's order (its `home`, then by rendezvous score) that is
//! alive (heard within five seconds). That node takes the lease when a
//! call comes or when its keeper sees the lease gone, reads the queue's
//! journal (`journal.rs`), fences off the old home, installs what the
//! journal says in its own store and memory, and serves: deliveries in
//! flight at the old home are delivered again (at least once, as after a
//! crash). Until the takeover is done, calls for the queue wait for it.
//!
//! A holder that cannot renew its lease in time (NATS away) stops
//! serving the queue when the lease would have run out; its appends are
//! refused from the moment another node fences the journal, so nothing it
//! confirms is lost.
//!
//! The jobs resource moves the same way, under the lease of the name it
//! is homed by (`jobs`, with the queue `jobs.dlq`): its records have a
//! journal of their own ([`JOBS_JOURNAL`]), and a node taking it over
//! installs them (`Jobs::install`: unfinished jobs queued again, attempts
//! kept, workers registering again), as after a restart. A node that
//! loses the lease forgets the jobs it held in memory.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use parking_lot::{Mutex, RwLock};
use serde::{Deserialize, Serialize};

use super::Shared;
use super::home::JOBS_HOME_KEY;
use super::journal::Journal;
use super::js::{self, PublishError};
use super::takeover::{JOBS_JOURNAL, claim_error, take_over, take_over_jobs};
use crate::broker::BrokerError;
use crate::store::replica::JOBS_ID;

/// Most leases read back in one look.
const MAX_LEASES: u64 = 1_000_000;
/// Lease renewals sent at once.
const RENEW_AT_ONCE: usize = 64;
/// How long a stream just made may take to elect its leader.
const STREAM_WAIT: Duration = Duration::from_secs(10);
/// How long a takeover may take before its calls are told so.
const CLAIM_TIMEOUT: Duration = Duration::from_secs(60);

/// What a lease message says.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct Holder {
    node: String,
    instance: String,
}

/// A lease this node holds.
struct Held {
    /// Its message's sequence (renewals follow it).
    rev: u64,
    renewed: Instant,
    /// The queues it covers (the key's queue and its dead-letter queue).
    queues: Vec<String>,
}

/// A lease as last read.
#[derive(Debug, Clone)]
struct Seen {
    holder: Holder,
}

/// The failover state of a node (`Shared::failover`).
pub(super) struct Failover {
    pub(super) lease: Duration,
    replicas: usize,
    stream: String,
    subject_prefix: String,
    pub(super) journal: Arc<Journal>,
    held: Mutex<HashMap<String, Held>>,
    seen: RwLock<HashMap<String, Seen>>,
    /// Every key ever seen leased or held here, so a lease that ran out
    /// is still known to need a home.
    known: Mutex<HashSet<String>>,
    claiming: tokio::sync::Mutex<()>,
    ready: AtomicBool,
    /// Set when the node stops: it takes nothing over any more.
    stopping: AtomicBool,
    /// When the node started: queues without a lease are not taken over
    /// before the other nodes' hellos had time to come.
    born: Instant,
    /// Queues whose lease was lost while this node had consumers on
    /// them: the keeper moves those consumers to where the queue is now.
    evict: Mutex<Vec<String>>,
    /// Queues taken over, and leases lost.
    pub(super) taken: AtomicU64,
    pub(super) lost: AtomicU64,
}

impl Failover {
    pub(super) fn new(
        prefix: &str,
        node: &str,
        instance: &str,
        lease_ms: u64,
        replicas: usize,
    ) -> Failover {
        Failover {
            lease: Duration::from_millis(lease_ms),
            replicas,
            stream: format!("{}_LEASES", prefix.replace('.', "_").to_uppercase()),
            subject_prefix: format!("{prefix}.lease."),
            journal: Arc::new(Journal::new(prefix, node, instance)),
            held: Mutex::default(),
            seen: RwLock::default(),
            known: Mutex::default(),
            claiming: tokio::sync::Mutex::new(()),
            ready: AtomicBool::new(false),
            stopping: AtomicBool::new(false),
            born: Instant::now(),
            evict: Mutex::default(),
            taken: AtomicU64::new(0),
            lost: AtomicU64::new(0),
        }
    }

    /// The queues whose lease this node holds.
    pub(super) fn held_keys(&self) -> Vec<String> {
        let mut keys: Vec<String> = self.held.lock().keys().cloned().collect();
        keys.sort();
        keys
    }

    /// Whether this node holds `key`'s lease (and has installed its
    /// queues).
    pub(super) fn holds(&self, key: &str) -> bool {
        self.held.lock().contains_key(key)
    }

    fn subject(&self, key: &str) -> String {
        format!(
            "{}{}",
            self.subject_prefix,
            super::subject::retained_key(key)
        )
    }

    async fn ensure_streams(&self, client: &async_nats::Client) -> Result<(), super::NatsError> {
        if self.ready.load(Ordering::Acquire) {
            return Ok(());
        }
        let mut leases = js::file_stream(
            &self.stream,
            &format!("{}>", self.subject_prefix),
            self.replicas,
        );
        leases["max_age"] = u64::try_from(self.lease.as_nanos())
            .unwrap_or(u64::MAX)
            .into();
        leases["max_msgs_per_subject"] = 1.into();
        leases["discard"] = "old".into();
        leases["duplicate_window"] = 1_000_000_000u64.into();
        js::ensure_stream(client, leases, STREAM_WAIT).await?;
        js::ensure_stream(
            client,
            self.journal.stream_config(self.replicas),
            STREAM_WAIT,
        )
        .await?;
        self.ready.store(true, Ordering::Release);
        Ok(())
    }
}

/// A member not heard for this long is passed over when a queue without
/// a lease needs a home (shorter than [`LOST_AFTER`](super::LOST_AFTER): passing over a slow
/// member only moves a queue, and the lease keeps it in one place).
const SILENT_AFTER: Duration = Duration::from_secs(5);

impl Shared {
    fn alive(&self, node: &str) -> bool {
        node == self.node
            || self
                .peers
                .lock()
                .get(node)
                .is_some_and(|heard| heard.elapsed() < SILENT_AFTER)
    }

    /// The node that serves the queues homed by `key` now: its lease's
    /// holder, or the first live member in its order.
    pub(super) fn route(&self, f: &Failover, key: &str) -> Option<String> {
        if f.holds(key) {
            return Some(self.node.clone());
        }
        if let Some(s) = f.seen.read().get(key) {
            return Some(s.holder.node.clone());
        }
        let homes = self.remotes.homes.get()?;
        let ranked = homes.ranked(key);
        ranked
            .iter()
            .find(|m| self.alive(m))
            .or(ranked.first())
            .map(|m| (*m).to_owned())
    }

    /// Whether failover is on and this node holds `queue`'s lease.
    pub(super) fn served_here(&self, queue: &str) -> bool {
        let Some(f) = self.failover.as_ref() else {
            return false;
        };
        self.remotes
            .homes
            .get()
            .and_then(|h| h.key_of(queue))
            .is_some_and(|key| f.holds(key))
    }

    /// The home of `queue` (or of the jobs, homed as `jobs`) when
    /// failover is on (`None` for `$` names, which stay where they are).
    pub(super) fn failover_home(&self, queue: &str) -> Option<(String, String)> {
        let f = self.failover.as_ref()?;
        let key = self.remotes.homes.get()?.key_of(queue)?;
        let node = self.route(f, key)?;
        Some((key.to_owned(), node))
    }
}

impl super::Cluster {
    /// Makes `writer` copy the writes of the queues this node holds the
    /// lease of to the journal before confirming them (with failover on).
    pub fn use_store(&self, writer: &crate::store::WriterHandle) {
        if let Some(f) = &self.shared.failover {
            let broker = self.shared.broker.clone();
            f.journal.set_names(Box::new(move |id| {
                if id == JOBS_ID {
                    return Some(JOBS_JOURNAL.to_owned());
                }
                broker.upgrade()?.queues().name_of(id)
            }));
            writer.set_replica(f.journal.clone());
        }
    }
}

/// Takes `key`'s lease and its queues over, unless this node holds it
/// already: waits for a takeover in progress.
///
/// # Errors
/// Another node holds the lease, NATS or JetStream failing, or the
/// broker refusing to install the queues.
pub(super) async fn claim(shared: &Arc<Shared>, key: &str) -> Result<(), BrokerError> {
    let Some(f) = shared.failover.as_ref() else {
        return Ok(());
    };
    if f.holds(key) {
        return Ok(());
    }
    if f.stopping.load(Ordering::Acquire) {
        return Err(claim_error(key, "this node is stopping"));
    }
    if !shared.remotes.ready.load(Ordering::Acquire) {
        // Its store is not restored yet: nothing may be installed.
        return Err(claim_error(key, "this node is starting"));
    }
    let _one = tokio::time::timeout(CLAIM_TIMEOUT, f.claiming.lock())
        .await
        .map_err(|_| claim_error(key, "other takeovers are still running"))?;
    if f.holds(key) {
        return Ok(());
    }
    let client = &shared.client;
    f.ensure_streams(client)
        .await
        .map_err(|e| claim_error(key, format!("JetStream: {e}")))?;
    let broker = shared
        .broker
        .upgrade()
        .ok_or_else(|| claim_error(key, "the node is stopping"))?;
    // The lease: a subject with no message, or one this node's previous
    // process left.
    let subject = f.subject(key);
    let current = js::last_of(client, &f.stream, &subject)
        .await
        .map_err(|e| claim_error(key, format!("reading the lease: {e}")))?;
    let expected = match &current {
        None => 0,
        Some(m) => match serde_json::from_slice::<Holder>(&m.payload) {
            // This node's (an earlier process's, or its own lease whose
            // renewal went unanswered): taken again after it.
            Ok(h) if h.node == shared.node => m.seq,
            Ok(h) => {
                return Err(claim_error(
                    key,
                    format!("node {:?} holds its lease", h.node),
                ));
            }
            Err(_) => m.seq,
        },
    };
    let me = Holder {
        node: shared.node.clone(),
        instance: shared.instance.clone(),
    };
    let body = serde_json::to_vec(&me).unwrap_or_default();
    let rev = match js::publish_expecting(
        client,
        subject,
        async_nats::HeaderMap::new(),
        body.into(),
        expected,
        shared.confirm,
    )
    .await
    {
        Ok(rev) => rev,
        Err(PublishError::Fenced) => {
            return Err(claim_error(key, "another node took its lease first"));
        }
        Err(PublishError::Other(e)) => return Err(claim_error(key, format!("JetStream: {e}"))),
    };
    let renewed = Instant::now();
    // The queue and its chain of dead-letter queues, all homed by `key`.
    let mut queues = vec![key.to_owned()];
    while queues.len() < 8 {
        let last = queues.last().map(String::as_str).unwrap_or(key);
        match broker.queues().dead_letter_of(last) {
            Some(dlq) if !queues.contains(&dlq) => queues.push(dlq),
            _ => break,
        }
    }
    let jobs = shared.remotes.jobs.get().filter(|_| key == JOBS_HOME_KEY);
    if jobs.is_some() {
        queues.push(JOBS_JOURNAL.to_owned());
    }
    for name in &queues {
        let taken = match jobs {
            Some(jobs) if name == JOBS_JOURNAL => take_over_jobs(shared, &f.journal, jobs).await,
            _ => take_over(shared, &f.journal, &broker, name).await,
        };
        if let Err(e) = taken {
            // Let it go: another node (or a later try) takes it.
            for started in &queues {
                f.journal.stop(started);
            }
            release(shared, f, key, rev).await;
            return Err(e);
        }
    }
    tracing::info!(queue = key, node = %shared.node, "cluster: this node is the queue's home now");
    f.taken.fetch_add(1, Ordering::Relaxed);
    f.known.lock().insert(key.to_owned());
    f.held.lock().insert(
        key.to_owned(),
        Held {
            rev,
            renewed,
            queues,
        },
    );
    f.seen.write().insert(key.to_owned(), Seen { holder: me });
    Ok(())
}

/// Gives a lease up (deletes its message if it is still ours).
/// Best effort: a lease not released runs out by itself.
async fn release(shared: &Shared, f: &Failover, key: &str, rev: u64) {
    // A purge of the subject, only if its last message is still ours.
    if let Ok(Some(m)) = js::last_of(&shared.client, &f.stream, &f.subject(key)).await
        && m.seq == rev
    {
        let _ = js::purge_below(&shared.client, &f.stream, &f.subject(key), rev + 1).await;
    }
}

/// Gives up every lease this node holds (it is stopping): the next
/// homes take the queues over at once instead of after `lease_ms`.
pub(super) async fn release_all(shared: &Shared) {
    let Some(f) = shared.failover.as_ref() else {
        return;
    };
    f.stopping.store(true, Ordering::Release);
    let held: Vec<(String, Held)> = f.held.lock().drain().collect();
    for (key, h) in held {
        for q in &h.queues {
            f.journal.stop(q);
        }
        f.seen.write().remove(&key);
        release(shared, f, &key, h.rev).await;
        tracing::info!(queue = %key, "cluster: this node stops and gives the queue's lease up");
    }
}

/// Renews this node's leases, reads everyone's, takes over the queues
/// whose lease ran out where this node is next in line, and moves this
/// node's consumers to their queues' new homes: every quarter lease,
/// until the link's runtime ends.
pub(super) async fn keep(shared: Arc<Shared>) {
    let Some(f) = shared.failover.as_ref() else {
        return;
    };
    let every = (f.lease / 4).max(Duration::from_millis(100));
    let mut tick = tokio::time::interval(every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        if !shared.remotes.ready.load(Ordering::Acquire) {
            // Nothing is taken over before the store is restored.
            continue;
        }
        if !super::connected(&shared.client) {
            drop_stale(&shared, f);
            continue;
        }
        if f.ensure_streams(&shared.client).await.is_err() {
            continue;
        }
        renew(&shared, f).await;
        look(&shared, f).await;
        let settled = f.born.elapsed() >= super::HELLO_EVERY * 2 + Duration::from_millis(500);
        for key in orphans(&shared, f).into_iter().filter(|_| settled) {
            if let Err(e) = claim(&shared, &key).await {
                tracing::debug!(queue = %key, "cluster: no takeover yet: {e}");
            }
        }
        evict(&shared, f).await;
        let cluster = super::Cluster {
            shared: shared.clone(),
        };
        cluster.follow_homes().await;
    }
}

/// Takes the consumers off the queues this node lost: other nodes'
/// consumers are forgotten (their nodes follow the queue themselves),
/// this node's become consumers of a queue homed elsewhere, attached by
/// `follow_homes` where the queue is served now.
async fn evict(shared: &Arc<Shared>, f: &Failover) {
    let names: Vec<String> = std::mem::take(&mut *f.evict.lock());
    let Some(broker) = shared.broker.upgrade() else {
        return;
    };
    for name in names {
        let Ok(taken) = broker.queues().take_consumers(&name).await else {
            continue;
        };
        for (sub, prefetch) in taken {
            let sink = sub.sink.id();
            let remote = {
                let mut remote = shared.remotes.remote.lock();
                let key = remote
                    .iter()
                    .find(|(_, c)| c.sink.id == sink)
                    .map(|(k, _)| k.clone());
                key.and_then(|k| remote.remove(&k))
            };
            if let Some(c) = remote {
                c.sink.closed.store(true, Ordering::Release);
                continue;
            }
            let token = shared.remotes.next_token.fetch_add(1, Ordering::Relaxed);
            let mut local = shared.remotes.local.lock();
            local
                .by_sub
                .insert((name.clone(), sink, sub.id.to_string()), token);
            local.by_token.insert(
                token,
                super::remote::Local {
                    sub,
                    queue: name.clone(),
                    home: shared.node.clone(),
                    prefetch,
                    since: Instant::now(),
                },
            );
            tracing::info!(queue = %name, "cluster: a consumer of a queue this node lost waits for its new home");
        }
    }
}

/// Takes the leases `pick` chooses out of those held.
fn take_held(f: &Failover, pick: impl Fn(&Held) -> bool) -> Vec<(String, Held)> {
    let mut held = f.held.lock();
    let keys: Vec<String> = held
        .iter()
        .filter(|(_, h)| pick(h))
        .map(|(k, _)| k.clone())
        .collect();
    keys.into_iter()
        .filter_map(|k| held.remove_entry(&k))
        .collect()
}

/// Drops the leases this node could not renew before they ran out.
fn drop_stale(shared: &Shared, f: &Failover) {
    for (key, h) in take_held(f, |h| h.renewed.elapsed() >= f.lease) {
        lost(shared, f, &key, &h, "it could not be renewed in time");
    }
}

fn lost(shared: &Shared, f: &Failover, key: &str, h: &Held, why: &str) {
    for q in &h.queues {
        f.journal.stop(q);
    }
    if h.queues.iter().any(|q| q == JOBS_JOURNAL)
        && let Some(jobs) = shared.remotes.jobs.get().cloned()
    {
        // Another node serves them (or will): none of them runs here.
        tokio::spawn(async move {
            if let Err(e) = jobs.forget().await {
                tracing::warn!("cluster: the jobs lost here could not be forgotten: {e}");
            }
        });
    }
    f.evict.lock().extend(h.queues.iter().cloned());
    f.seen.write().remove(key);
    f.lost.fetch_add(1, Ordering::Relaxed);
    tracing::error!(queue = key, node = %shared.node, "cluster: this node lost the queue's lease ({why}); it no longer serves the queue");
}

async fn renew(shared: &Shared, f: &Failover) {
    drop_stale(shared, f);
    // A queue whose journal another node fenced is not this node's any
    // more: its lease goes too, so that a takeover (maybe by this node
    // again) reads the journal afresh.
    for (key, h) in take_held(f, |h| h.queues.iter().any(|q| f.journal.is_stopped(q))) {
        lost(shared, f, &key, &h, "its journal was fenced");
        release(shared, f, &key, h.rev).await;
    }
    let held: Vec<(String, u64)> = f
        .held
        .lock()
        .iter()
        .map(|(k, h)| (k.clone(), h.rev))
        .collect();
    let me = Holder {
        node: shared.node.clone(),
        instance: shared.instance.clone(),
    };
    let body: bytes::Bytes = serde_json::to_vec(&me).unwrap_or_default().into();
    // At once, a bounded number at a time: many leases are renewed
    // within the quarter lease a round has.
    for chunk in held.chunks(RENEW_AT_ONCE) {
        let renewals = chunk.iter().map(|(key, rev)| {
            let body = body.clone();
            async move {
                let started = Instant::now();
                let result = js::publish_expecting(
                    &shared.client,
                    f.subject(key),
                    async_nats::HeaderMap::new(),
                    body,
                    *rev,
                    shared.confirm,
                )
                .await;
                (key, started, result)
            }
        });
        for (key, started, result) in futures_util::future::join_all(renewals).await {
            let renewed = match result {
                Ok(new) => Some(new),
                // A renewal whose answer was lost moved the lease on: the
                // lease is still this process's if its message says so.
                Err(PublishError::Fenced) => {
                    match js::last_of(&shared.client, &f.stream, &f.subject(key)).await {
                        Ok(Some(m))
                            if serde_json::from_slice::<Holder>(&m.payload).ok().as_ref()
                                == Some(&me) =>
                        {
                            Some(m.seq)
                        }
                        _ => {
                            let gone = f.held.lock().remove(key);
                            if let Some(h) = gone {
                                lost(shared, f, key, &h, "another node holds it now");
                            }
                            None
                        }
                    }
                }
                Err(PublishError::Other(e)) => {
                    tracing::warn!(queue = %key, "cluster: renewing the lease failed: {e}");
                    None
                }
            };
            if let Some(new) = renewed
                && let Some(h) = f.held.lock().get_mut(key)
            {
                h.rev = new;
                h.renewed = started;
            }
        }
    }
}

/// Reads every lease.
async fn look(shared: &Shared, f: &Failover) {
    let read = js::read(
        &shared.client,
        &f.stream,
        &format!("{}>", f.subject_prefix),
        shared.confirm,
        MAX_LEASES,
    )
    .await;
    let Ok(leases) = read else {
        return;
    };
    let mut seen = HashMap::with_capacity(leases.len());
    for m in leases {
        let Some(key) = m
            .subject
            .strip_prefix(&f.subject_prefix)
            .and_then(|k| super::subject::key_topic(k).ok())
        else {
            continue;
        };
        if let Ok(holder) = serde_json::from_slice::<Holder>(&m.payload) {
            seen.insert(key, Seen { holder });
        }
    }
    f.known.lock().extend(seen.keys().cloned());
    // What this node holds stays as it knows it (a renewal may be newer).
    let held: Vec<String> = f.held.lock().keys().cloned().collect();
    let mut table = f.seen.write();
    let mine: Vec<(String, Seen)> = held
        .iter()
        .filter_map(|k| table.get(k).map(|s| (k.clone(), s.clone())))
        .collect();
    *table = seen;
    table.extend(mine);
}

/// Keys known to need a home whose lease nobody holds and whose first
/// live member in line is this node.
fn orphans(shared: &Shared, f: &Failover) -> Vec<String> {
    let mut keys: HashSet<String> = f.known.lock().clone();
    if let Some(homes) = shared.remotes.homes.get()
        && let Some(broker) = shared.broker.upgrade()
    {
        for name in broker.queues().queue_names() {
            if let Some(key) = homes.key_of(&name) {
                keys.insert(key.to_owned());
            }
        }
        // The jobs always need a home: workers wait on it.
        if shared.remotes.jobs.get().is_some() && homes.key_of(JOBS_HOME_KEY).is_some() {
            keys.insert(JOBS_HOME_KEY.to_owned());
        }
    }
    keys.retain(|k| !f.holds(k) && !f.seen.read().contains_key(k));
    keys.into_iter()
        .filter(|k| shared.route(f, k).as_deref() == Some(shared.node.as_str()))
        .collect()
}
