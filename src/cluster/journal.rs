//! The queues' journal (`[cluster] failover`): every write a home makes to
//! a queue it holds the lease of (messages, delivery state, deletes) is
//! also appended to one JetStream stream, `{PREFIX}_QUEUES`, on the
//! queue's subject `{prefix}.jq.{key}`, before the write is confirmed (the
//! store writer hands it here: `store::replica`). A node that takes the
//! queue over reads the subject back and holds what it says.
//!
//! A record is one group of writes to one queue: a version byte, then
//! operations, each a tag and a 9-byte key (the store key without the
//! queue's id: 9 - priority, seq):
//!
//! | tag | operation | then |
//! |---|---|---|
//! | 1 / 3 | put a message / its delivery state | `u32` length, the store's value |
//! | 2 / 4 | delete a message / its delivery state | |
//! | 5 / 6 | delete a range of messages / of delivery state | the last key |
//!
//! The jobs resource has a journal of its own, `{prefix}.jq.=24jobs` (its
//! writes reach the replica under `store::replica::JOBS_ID`), whose
//! operations have a job's 16-byte id for a key:
//!
//! | tag | operation | then |
//! |---|---|---|
//! | 7 | put a job record | `u32` length, the record (JSON) |
//! | 8 | delete a job record | |
//! | 9 | delete a range of job records | the last id |
//!
//! Each append says which subject sequence it follows
//! (`Nats-Expected-Last-Subject-Sequence`), so only one writer appends at
//! a time: a node taking a queue over appends a takeover record first,
//! and the appends of a home that lost its lease without knowing it are
//! refused from then on (fenced). Records no live message needs any more
//! are purged below the oldest record that still holds one.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use bytes::{BufMut, Bytes, BytesMut};
use parking_lot::{Mutex, RwLock};
use tokio::sync::mpsc;

use super::js::{self, PublishError};
pub(super) use record::Rebuilt;
use record::{Live, Op, VERSION, decode, split_puts_first};

mod record;
use crate::store::replica::{Completion, Replica};
use crate::store::{CommitError, Write};

/// Largest record appended (NATS's default `max_payload` is 1 MiB): a
/// group's writes to one queue are split across records past it.
const MAX_RECORD: usize = 900 * 1024;
/// Groups waiting for the journal before the store writer's submissions
/// are failed rather than queued.
const BACKLOG: usize = 4096;
/// How long an append waits for JetStream.
const APPEND_TIMEOUT: Duration = Duration::from_secs(5);
/// Most records read back for one queue.
pub(super) const MAX_RECORDS: u64 = 10_000_000;
/// How often a queue's dead records are purged at most.
const PURGE_EVERY: Duration = Duration::from_secs(1);

/// A queue this node appends to: it holds the queue's lease.
pub(super) struct Journaled {
    /// The queue's name.
    pub(super) name: String,
    /// Its subject.
    pub(super) subject: String,
    /// The subject's last sequence, as this node appended or read it.
    last: AtomicU64,
    /// What purging needs (only the journal's task touches it).
    live: Mutex<(Live, u64, Instant)>,
}

/// What the journal knows of a store id.
#[derive(Clone)]
enum Slot {
    /// A held queue: its writes are appended.
    Held(Arc<Journaled>),
    /// Not a held queue: its writes are none of the journal's.
    Not,
    /// A queue this node stopped journaling (named): its writes fail
    /// until a takeover starts it again.
    Stopped(String),
}

/// Finds a queue's name from its id in this node's store.
pub(super) type NameOf = Box<dyn Fn(u32) -> Option<String> + Send + Sync>;

/// One group's writes on their way to the journal.
struct Batch {
    writes: Vec<(u32, Write)>,
    done: Vec<Completion>,
}

/// The journal: the store writer's replica for the queues this node
/// holds the lease of.
pub(super) struct Journal {
    /// `{PREFIX}_QUEUES`.
    pub(super) stream: String,
    /// `{prefix}.jq.`.
    subject_prefix: String,
    /// `{node}/{instance}`, on each record.
    writer: String,
    /// Queues appended to, by name.
    held: RwLock<HashMap<String, Arc<Journaled>>>,
    /// The same by their id in this node's store, ids known not to be
    /// held (a queue deleted and made again gets a new id: it is looked
    /// up by name once), and ids of queues stopped here.
    ids: RwLock<HashMap<u32, Slot>>,
    /// Queues whose journal this node stopped (fenced, lease gone) and
    /// has not started again: their writes fail rather than pass
    /// unjournaled, and the keeper gives their lease up.
    stopped: Mutex<std::collections::HashSet<String>>,
    /// A queue's name from its id in this node's store.
    name_of: std::sync::OnceLock<NameOf>,
    tx: mpsc::Sender<Batch>,
    rx: Mutex<Option<mpsc::Receiver<Batch>>>,
    /// Records appended, and appends refused or failed.
    pub(super) appended: AtomicU64,
    pub(super) failed: AtomicU64,
}

impl Journal {
    pub(super) fn new(prefix: &str, node: &str, instance: &str) -> Journal {
        let (tx, rx) = mpsc::channel(BACKLOG);
        Journal {
            stream: format!("{}_QUEUES", prefix.replace('.', "_").to_uppercase()),
            subject_prefix: format!("{prefix}.jq."),
            writer: format!("{node}/{instance}"),
            held: RwLock::default(),
            ids: RwLock::default(),
            stopped: Mutex::default(),
            name_of: std::sync::OnceLock::new(),
            tx,
            rx: Mutex::new(Some(rx)),
            appended: AtomicU64::new(0),
            failed: AtomicU64::new(0),
        }
    }

    /// The stream's configuration.
    pub(super) fn stream_config(&self, replicas: usize) -> serde_json::Value {
        js::file_stream(&self.stream, &format!("{}>", self.subject_prefix), replicas)
    }

    /// Queue `name`'s subject.
    pub(super) fn subject(&self, name: &str) -> String {
        format!(
            "{}{}",
            self.subject_prefix,
            super::subject::retained_key(name)
        )
    }

    /// Reads queue `name`'s records back: what they leave, the subject's
    /// last sequence, and who wrote its last record.
    pub(super) async fn read(
        &self,
        client: &async_nats::Client,
        name: &str,
    ) -> Result<(Rebuilt, u64), super::NatsError> {
        let subject = self.subject(name);
        let records = js::read(
            client,
            &self.stream,
            &subject,
            Duration::from_secs(5),
            MAX_RECORDS,
        )
        .await?;
        let mut rebuilt = Rebuilt::default();
        let mut last = 0;
        for r in records {
            last = r.seq;
            match decode(&r.payload) {
                Some(ops) => rebuilt.apply(&ops, r.seq),
                None if r.payload.is_empty() => {} // a takeover record
                None => {
                    tracing::error!(
                        queue = name,
                        seq = r.seq,
                        "cluster: an unreadable journal record is skipped"
                    )
                }
            }
        }
        Ok((rebuilt, last))
    }

    /// Appends a takeover record after sequence `last` (fencing off any
    /// other writer); the new last sequence.
    pub(super) async fn fence(
        &self,
        client: &async_nats::Client,
        name: &str,
        last: u64,
    ) -> Result<u64, PublishError> {
        js::publish_expecting(
            client,
            self.subject(name),
            self.headers(),
            Bytes::new(),
            last,
            APPEND_TIMEOUT,
        )
        .await
    }

    fn headers(&self) -> async_nats::HeaderMap {
        let mut h = async_nats::HeaderMap::new();
        h.insert("Wharf-Writer", self.writer.as_str());
        h
    }

    /// From now on, queue `name` (with `id` in this node's store, or,
    /// not made here yet, whatever id it gets) is appended to, after
    /// sequence `last`, with `rebuilt`'s records live.
    pub(super) fn start(&self, id: Option<u32>, name: &str, last: u64, rebuilt: Rebuilt) {
        let q = Arc::new(Journaled {
            name: name.to_owned(),
            subject: self.subject(name),
            last: AtomicU64::new(last),
            live: Mutex::new((rebuilt.live, 0, Instant::now())),
        });
        self.held.write().insert(name.to_owned(), q.clone());
        self.clear_stopped(name);
        let mut ids = self.ids.write();
        // Ids looked up while it was not held are looked up again.
        ids.retain(|_, slot| !matches!(slot, Slot::Not));
        if let Some(id) = id {
            ids.insert(id, Slot::Held(q));
        }
    }

    /// Starts queue `name`'s journal, which has no record yet (after
    /// sequence `last`: the takeover record), from what this node's store
    /// holds of it (`writes`): the queue had messages before failover was
    /// turned on. Returns the state to [`Journal::start`] with.
    pub(super) async fn seed(
        &self,
        client: &async_nats::Client,
        name: &str,
        last: u64,
        writes: &[Write],
    ) -> Result<(u64, Rebuilt), String> {
        let q = Journaled {
            name: name.to_owned(),
            subject: self.subject(name),
            last: AtomicU64::new(last),
            live: Mutex::new((Live::default(), 0, Instant::now())),
        };
        let ops: Vec<Op> = writes.iter().filter_map(Op::of).collect();
        self.append_queue(client, &q, ops).await?;
        let live = std::mem::take(&mut q.live.lock().0);
        Ok((q.last.load(Ordering::Acquire), Rebuilt::with_live(live)))
    }

    /// Stops appending to queue `name` (its lease is gone, or another
    /// node fenced it): from now on its writes here fail.
    pub(super) fn stop(&self, name: &str) {
        self.held.write().remove(name);
        self.stopped.lock().insert(name.to_owned());
        for slot in self.ids.write().values_mut() {
            if matches!(slot, Slot::Held(q) if q.name == name) {
                *slot = Slot::Stopped(name.to_owned());
            }
        }
    }

    /// Lets queue `name`'s writes through unjournaled again (a takeover
    /// about to install it: the install's own writes).
    pub(super) fn clear_stopped(&self, name: &str) {
        self.stopped.lock().remove(name);
        self.ids
            .write()
            .retain(|_, slot| !matches!(slot, Slot::Stopped(n) if n == name));
    }

    /// Whether queue `name`'s journal was stopped here.
    pub(super) fn is_stopped(&self, name: &str) -> bool {
        self.stopped.lock().contains(name)
    }

    /// Sets how a queue's name is found from its id (once).
    pub(super) fn set_names(&self, name_of: NameOf) {
        let _ = self.name_of.set(name_of);
    }

    /// What the journal knows of store id `id`.
    fn by_id(&self, id: u32) -> Slot {
        if let Some(known) = self.ids.read().get(&id) {
            return known.clone();
        }
        let name = self.name_of.get().and_then(|f| f(id));
        let found = match name {
            Some(n) => match self.held.read().get(&n) {
                Some(q) => Slot::Held(q.clone()),
                None if self.stopped.lock().contains(&n) => Slot::Stopped(n),
                None => Slot::Not,
            },
            None => Slot::Not,
        };
        let mut ids = self.ids.write();
        // Bounded: ids of queues that come and go are forgotten at times.
        if ids.len() >= 100_000 {
            ids.retain(|_, q| !matches!(q, Slot::Not));
        }
        ids.insert(id, found.clone());
        found
    }

    /// The task that appends what the writer hands over, until the
    /// writer's handles are gone or the runtime ends. Started once.
    pub(super) fn run(self: &Arc<Self>, client: async_nats::Client) {
        let Some(mut rx) = self.rx.lock().take() else {
            return;
        };
        let me = self.clone();
        tokio::spawn(async move {
            while let Some(first) = rx.recv().await {
                let mut batches = vec![first];
                while batches.len() < 1024 {
                    match rx.try_recv() {
                        Ok(b) => batches.push(b),
                        Err(_) => break,
                    }
                }
                me.append(&client, batches).await;
            }
        });
    }

    /// Appends the batches' writes, one record (or a few) per queue, the
    /// queues at once, and completes the batches.
    async fn append(&self, client: &async_nats::Client, batches: Vec<Batch>) {
        let mut per: BTreeMap<u32, Vec<Op>> = BTreeMap::new();
        let mut touched: Vec<Vec<u32>> = Vec::with_capacity(batches.len());
        let mut dones = Vec::with_capacity(batches.len());
        for b in batches {
            let mut ids: Vec<u32> = b.writes.iter().map(|(id, _)| *id).collect();
            ids.dedup();
            for (id, w) in &b.writes {
                if let Some(op) = Op::of(w) {
                    per.entry(*id).or_default().push(op);
                }
            }
            touched.push(ids);
            dones.push(b.done);
        }
        // Writes to several queues may be one move (a dead-lettering, a
        // redrive, a transaction): each queue's record is appended on its
        // own, so the puts go first and the deletes only once every put
        // is in. A failure between leaves a message twice, never nowhere.
        let (first, then) = if per.len() > 1 {
            split_puts_first(per)
        } else {
            (per, BTreeMap::new())
        };
        let mut results = self.append_all(client, first).await;
        if results.values().all(Result::is_ok) {
            results.extend(self.append_all(client, then).await);
        } else {
            for id in then.keys() {
                results
                    .entry(*id)
                    .or_insert_with(|| Err("an earlier part of the group failed".into()));
            }
        }
        for (ids, done) in touched.into_iter().zip(dones) {
            let failed = ids
                .iter()
                .find_map(|id| results.get(id).and_then(|r| r.as_ref().err()));
            let result = match failed {
                Some(why) => Err(CommitError(format!("the cluster journal: {why}"))),
                None => Ok(()),
            };
            for d in done {
                d.complete(result.clone());
            }
        }
    }

    /// Appends each queue's operations, the queues at once.
    async fn append_all(
        &self,
        client: &async_nats::Client,
        per: BTreeMap<u32, Vec<Op>>,
    ) -> HashMap<u32, Result<(), String>> {
        let appends = per.into_iter().map(|(id, ops)| async move {
            let result = match self.by_id(id) {
                Slot::Held(q) => self.append_queue(client, &q, ops).await,
                _ => Err("this node no longer holds the queue's lease".to_owned()),
            };
            (id, result)
        });
        futures_util::future::join_all(appends)
            .await
            .into_iter()
            .collect()
    }

    /// Appends `ops` to queue `q`'s subject, in records of at most
    /// [`MAX_RECORD`], each after the last.
    async fn append_queue(
        &self,
        client: &async_nats::Client,
        q: &Journaled,
        ops: Vec<Op>,
    ) -> Result<(), String> {
        let mut start = 0;
        let mut retried = false;
        while start < ops.len() {
            let mut end = start;
            let mut size = 1;
            while end < ops.len() && (end == start || size + ops[end].encoded_len() <= MAX_RECORD) {
                size += ops[end].encoded_len();
                end += 1;
            }
            let mut record = BytesMut::with_capacity(size);
            record.put_u8(VERSION);
            for op in &ops[start..end] {
                op.encode(&mut record);
            }
            let last = q.last.load(Ordering::Acquire);
            match js::publish_expecting(
                client,
                q.subject.clone(),
                self.headers(),
                record.freeze(),
                last,
                APPEND_TIMEOUT,
            )
            .await
            {
                Ok(seq) => {
                    q.last.store(seq, Ordering::Release);
                    self.appended.fetch_add(1, Ordering::Relaxed);
                    let mut live = q.live.lock();
                    let mut rebuilt = Rebuilt::with_live(std::mem::take(&mut live.0));
                    rebuilt.track(&ops[start..end], seq);
                    live.0 = rebuilt.live;
                }
                Err(PublishError::Fenced) if !retried => {
                    // Maybe this node's own earlier append, whose answer
                    // was lost: then it follows that one.
                    retried = true;
                    self.relearn(client, q).await;
                    if q.last.load(Ordering::Acquire) != last {
                        continue;
                    }
                    self.fenced(q);
                    return Err("another node took the queue over".into());
                }
                Err(PublishError::Fenced) => {
                    self.fenced(q);
                    return Err("another node took the queue over".into());
                }
                Err(PublishError::Other(e)) => {
                    self.failed.fetch_add(1, Ordering::Relaxed);
                    // It may have been stored: learn the subject's last
                    // sequence again, and keep it only if this node wrote it.
                    self.relearn(client, q).await;
                    return Err(format!("JetStream did not confirm the append: {e}"));
                }
            }
            start = end;
        }
        self.maybe_purge(client, q).await;
        Ok(())
    }

    fn fenced(&self, q: &Journaled) {
        self.failed.fetch_add(1, Ordering::Relaxed);
        tracing::error!(queue = %q.name, "cluster: another node appends to this queue's journal now: this node no longer serves it");
        self.stop(&q.name);
    }

    /// After an append whose outcome is unknown: the subject's last
    /// record, taken as the last if this node wrote it.
    async fn relearn(&self, client: &async_nats::Client, q: &Journaled) {
        if let Ok(Some(m)) = js::last_of(client, &self.stream, &q.subject).await {
            let writer = m
                .headers
                .as_ref()
                .and_then(|h| h.get("Wharf-Writer"))
                .map(|v| v.as_str().to_owned());
            if writer.as_deref() == Some(self.writer.as_str()) {
                q.last.store(m.seq, Ordering::Release);
            }
        }
    }

    /// Purges the queue's records below the oldest live one, at most once
    /// per [`PURGE_EVERY`] (the last record stays: appends follow it).
    async fn maybe_purge(&self, client: &async_nats::Client, q: &Journaled) {
        let below = {
            let mut live = q.live.lock();
            let last = q.last.load(Ordering::Acquire);
            let below = live.0.oldest().unwrap_or(last).min(last);
            if below <= live.1 + 1 || live.2.elapsed() < PURGE_EVERY {
                return;
            }
            live.1 = below;
            live.2 = Instant::now();
            below
        };
        if let Err(e) = js::purge_below(client, &self.stream, &q.subject, below).await {
            tracing::warn!(queue = %q.name, "cluster: purging the journal failed: {e}");
        }
    }
}

impl Replica for Journal {
    fn replicates(&self, id: u32) -> bool {
        !matches!(self.by_id(id), Slot::Not)
    }

    fn replicate(&self, writes: Vec<(u32, Write)>, done: Vec<Completion>) {
        if let Err(e) = self.tx.try_send(Batch { writes, done }) {
            let (mpsc::error::TrySendError::Full(b) | mpsc::error::TrySendError::Closed(b)) = e;
            self.failed.fetch_add(1, Ordering::Relaxed);
            for d in b.done {
                d.complete(Err(CommitError(
                    "the cluster journal is behind or stopped".into(),
                )));
            }
        }
    }
}
