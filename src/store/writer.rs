//! The store writer: one thread that applies writes to sled in groups and
//! makes each group durable with one flush (group commit), then completes
//! the writers' futures. Tasks never do disk I/O themselves: they hand
//! writes here and, if they must, await the returned [`Durable`].
//!
//! `[store] flush = "always"`: a group is flushed and the database file
//! fsynced before its writes are confirmed (sled's own flush uses
//! `sync_file_range` on Linux, not a full fsync: sled issue 1452).
//! `"interval"`: writes are confirmed once applied, and flushed every
//! `interval_ms`; a crash can lose the last interval's confirmed writes.
//!
//! The writer also cleans the engine's log ([`Engine::clean`]): a step
//! per write after each confirmed group, the rest while idle.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, RecvTimeoutError, Sender};
use tokio::sync::oneshot;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use super::engine::Engine;
use super::replica::{Completion, Replica, ReplicaCell, queue_of};
use super::write::{CommitError, ReadResult, Write};
use crate::config::{FlushMode, StoreConfig};
use crate::metrics::StoreStats;

/// Groups of writes queued for the writer before submitters are refused.
pub const WRITER_QUEUE: usize = 65_536;

/// Most queued groups committed together.
const MAX_GROUP: usize = 4096;

/// What to do with a read's result; runs on the writer thread, so it must
/// only hand the result on (submit a task), never block.
pub type ReadReply = Box<dyn FnOnce(ReadResult) + Send>;

/// Why writes were not accepted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum SubmitError {
    /// [`WRITER_QUEUE`] groups are already waiting: the disk is behind.
    #[error("the store writer is {WRITER_QUEUE} commits behind")]
    Full,
    /// The writer has shut down.
    #[error("the store writer has shut down")]
    Closed,
}

enum Msg {
    Writes {
        writes: Vec<Write>,
        done: Option<oneshot::Sender<Result<(), CommitError>>>,
    },
    Read {
        tree: &'static str,
        from: Vec<u8>,
        to: Vec<u8>,
        limit: usize,
        reply: ReadReply,
    },
    Close,
}

/// Completes when the writes it was returned for are durable (per the
/// flush mode).
#[must_use = "dropping a Durable does not cancel the writes, only the wait"]
pub struct Durable(oneshot::Receiver<Result<(), CommitError>>);

impl Future for Durable {
    type Output = Result<(), CommitError>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        Pin::new(&mut self.0)
            .poll(cx)
            .map(|r| r.unwrap_or_else(|_| Err(CommitError("the store writer stopped".into()))))
    }
}

/// A handle to submit writes; cheap to clone.
#[derive(Clone)]
pub struct WriterHandle {
    tx: Sender<Msg>,
    /// Writes and reads queued and not yet taken by the writer: the
    /// bound ([`WRITER_QUEUE`]) is counted here, not in the channel, whose
    /// preallocated slots (~100 B each) held 6.5 MiB of an idle broker.
    queued: Arc<AtomicUsize>,
    stats: Arc<StoreStats>,
    /// Where some queues' writes are copied before they are confirmed.
    replica: ReplicaCell,
}

impl WriterHandle {
    /// Installs the replica some queues' writes go to before they are
    /// confirmed (once; `false` if one was installed already).
    pub fn set_replica(&self, replica: Arc<dyn Replica>) -> bool {
        self.replica.set(replica).is_ok()
    }

    /// What the writer measured of its commits, for metrics.
    pub fn stats(&self) -> &StoreStats {
        &self.stats
    }

    /// Queues writes to be committed in the next group, without waiting.
    ///
    /// # Errors
    /// [`SubmitError::Full`] or [`SubmitError::Closed`]; nothing is queued.
    pub fn submit(&self, writes: Vec<Write>) -> Result<Durable, SubmitError> {
        let (done, rx) = oneshot::channel();
        self.send(Msg::Writes {
            writes,
            done: Some(done),
        })?;
        Ok(Durable(rx))
    }

    /// Queues writes that nobody waits for (best-effort records): like
    /// [`WriterHandle::submit`] without the completion to signal.
    ///
    /// # Errors
    /// As [`WriterHandle::submit`].
    pub fn submit_detached(&self, writes: Vec<Write>) -> Result<(), SubmitError> {
        self.send(Msg::Writes { writes, done: None })
    }

    fn send(&self, msg: Msg) -> Result<(), SubmitError> {
        if self.queued.fetch_add(1, Ordering::AcqRel) >= WRITER_QUEUE {
            self.queued.fetch_sub(1, Ordering::AcqRel);
            return Err(SubmitError::Full);
        }
        self.tx.send(msg).map_err(|_| {
            self.queued.fetch_sub(1, Ordering::AcqRel);
            SubmitError::Closed
        })
    }

    /// Reads up to `limit` pairs of `tree` from `from` to `to` (both
    /// included), in key order, after every write submitted before it has
    /// been applied (read-your-writes), and hands them to `reply` on the
    /// writer thread. Used to bring messages kept only on disk back into
    /// memory without a task ever touching the disk.
    ///
    /// # Errors
    /// As [`WriterHandle::submit`]; `reply` is then not called.
    pub fn read(
        &self,
        tree: &'static str,
        (from, to): (Vec<u8>, Vec<u8>),
        limit: usize,
        reply: ReadReply,
    ) -> Result<(), SubmitError> {
        self.send(Msg::Read {
            tree,
            from,
            to,
            limit,
            reply,
        })
    }

    /// [`WriterHandle::read`], its answer as a future (the writer
    /// stopping before it answers is a [`CommitError`]): for a caller
    /// that waits for the pairs in a task.
    ///
    /// # Errors
    /// As [`WriterHandle::submit`].
    pub fn read_later(
        &self,
        tree: &'static str,
        range: (Vec<u8>, Vec<u8>),
        limit: usize,
    ) -> Result<impl Future<Output = ReadResult> + use<>, SubmitError> {
        let (tx, rx) = oneshot::channel();
        self.read(
            tree,
            range,
            limit,
            Box::new(move |r| {
                let _ = tx.send(r);
            }),
        )?;
        Ok(async move {
            rx.await
                .unwrap_or_else(|_| Err(CommitError("the store writer stopped".into())))
        })
    }
}

impl std::fmt::Debug for WriterHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WriterHandle").finish_non_exhaustive()
    }
}

/// The owning side. [`StoreWriter::close`] (or drop) commits what is
/// queued, flushes, and releases the database; the thread then lingers only
/// to refuse late submissions (their `Durable` fails at once instead of
/// waiting forever) and exits when the last [`WriterHandle`] is gone.
pub struct StoreWriter {
    handle: WriterHandle,
    closed: Option<Receiver<()>>,
}

impl StoreWriter {
    pub(super) fn start(
        engine: Box<dyn Engine>,
        config: &StoreConfig,
    ) -> std::io::Result<StoreWriter> {
        // Bounded by `queued` (see WriterHandle).
        let (tx, rx) = crossbeam_channel::unbounded();
        let queued = Arc::new(AtomicUsize::new(0));
        let taken = Taken {
            rx,
            queued: queued.clone(),
        };
        let mode = config.flush;
        let interval = Duration::from_millis(config.interval_ms.max(1));
        let (closed_tx, closed) = crossbeam_channel::bounded(1);
        let stats = Arc::new(StoreStats::default());
        let measured = stats.clone();
        let replica = ReplicaCell::default();
        let replicas = replica.clone();
        std::thread::Builder::new()
            .name("wharf-store-writer".into())
            .spawn(move || {
                run(engine, &taken, mode, interval, &measured, &replicas);
                let _ = closed_tx.send(());
                // Refuse whatever still arrives, until every handle is gone.
                let closed = || CommitError("the store writer has shut down".into());
                while let Ok(m) = taken.recv() {
                    match m {
                        Msg::Writes {
                            done: Some(done), ..
                        } => {
                            let _ = done.send(Err(closed()));
                        }
                        Msg::Read { reply, .. } => reply(Err(closed())),
                        _ => {}
                    }
                }
            })?;
        Ok(StoreWriter {
            handle: WriterHandle {
                tx,
                queued,
                stats,
                replica,
            },
            closed: Some(closed),
        })
    }

    /// A handle for submitters.
    pub fn handle(&self) -> WriterHandle {
        self.handle.clone()
    }

    /// Commits everything queued, flushes, and releases the database.
    /// Waits up to `timeout` in all; returns whether that finished.
    pub fn close(&mut self, timeout: Duration) -> bool {
        let Some(closed) = self.closed.take() else {
            return true;
        };
        let deadline = Instant::now() + timeout;
        // Everything queued before Close is committed first. Close is
        // not counted against the bound: it always gets in.
        // A writer already gone says so through `closed` below.
        let _ = self.handle.tx.send(Msg::Close);
        match closed.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
            Ok(()) => true,
            Err(_) => {
                tracing::warn!("store writer still busy at the shutdown deadline");
                false
            }
        }
    }
}

impl Drop for StoreWriter {
    fn drop(&mut self) {
        self.close(Duration::from_secs(10));
    }
}

/// The writer's end of the queue: takes messages and counts them out of
/// [`WriterHandle`]'s bound.
struct Taken {
    rx: Receiver<Msg>,
    queued: Arc<AtomicUsize>,
}

impl Taken {
    fn count_out(&self, m: Msg) -> Msg {
        if !matches!(m, Msg::Close) {
            self.queued.fetch_sub(1, Ordering::AcqRel);
        }
        m
    }

    fn recv(&self) -> Result<Msg, crossbeam_channel::RecvError> {
        self.rx.recv().map(|m| self.count_out(m))
    }

    fn recv_timeout(&self, wait: Duration) -> Result<Msg, RecvTimeoutError> {
        self.rx.recv_timeout(wait).map(|m| self.count_out(m))
    }

    fn try_recv(&self) -> Option<Msg> {
        self.rx.try_recv().ok().map(|m| self.count_out(m))
    }

    fn is_empty(&self) -> bool {
        self.rx.is_empty()
    }
}

/// Log cleaning ([`Engine::clean`]) on the writer thread, paced by what
/// is written: a step per write after each group keeps a store under
/// steady load from growing without bound; what is left is cleaned while
/// the writer is idle.
struct Cleaning {
    /// The last steps found more to clean.
    more: bool,
    /// Steps taken since the last flush.
    unflushed: bool,
}

/// Cleaning steps taken between looks at the queue when idle (a step
/// rewrites one page: microseconds).
const IDLE_STEPS: usize = 16;

/// Most cleaning steps in one idle spell; the next group's steps go on.
const IDLE_BUDGET: usize = 1 << 16;

/// How long what cleaning wrote may wait for a group's flush (`flush =
/// "always"`) before the writer flushes it itself.
const CLEANING_FLUSH: Duration = Duration::from_secs(1);

impl Cleaning {
    fn after_group(&mut self, engine: &dyn Engine, written: usize) {
        if written == 0 {
            return;
        }
        self.step(engine, written);
    }

    fn idle(&mut self, engine: &dyn Engine, rx: &Taken) {
        let mut budget = IDLE_BUDGET;
        while self.more && rx.is_empty() {
            if budget == 0 {
                // Bounded, should the cleaner keep finding work.
                self.more = false;
                return;
            }
            self.step(engine, IDLE_STEPS);
            budget = budget.saturating_sub(IDLE_STEPS);
        }
    }

    fn step(&mut self, engine: &dyn Engine, steps: usize) {
        match engine.clean(steps) {
            Ok(taken) => {
                self.more = taken == steps;
                self.unflushed |= taken > 0;
            }
            Err(e) => {
                // Space is not reclaimed for now; writes go on.
                tracing::warn!("store log cleaning failed: {e}");
                self.more = false;
            }
        }
    }
}

fn run(
    mut engine: Box<dyn Engine>,
    rx: &Taken,
    mode: FlushMode,
    interval: Duration,
    stats: &StoreStats,
    replica: &ReplicaCell,
) {
    // Makes the applied writes durable, timing it.
    let durable = |engine: &mut Box<dyn Engine>| {
        let started = Instant::now();
        let result = engine.durable();
        stats
            .durable_seconds
            .observe(started.elapsed().as_secs_f64());
        result
    };
    let mut dirty = false;
    let mut last_flush = Instant::now();
    // A store opened with segments waiting to be cleaned cleans them first.
    let mut cleaning = Cleaning {
        more: true,
        unflushed: false,
    };
    loop {
        // Idle: clean what the groups left, a little at a time while no
        // writes wait.
        if rx.is_empty() {
            cleaning.idle(engine.as_ref(), rx);
            if cleaning.unflushed && mode == FlushMode::Interval {
                dirty = true;
                cleaning.unflushed = false;
            }
        }
        let wait = match mode {
            FlushMode::Interval if dirty => interval.saturating_sub(last_flush.elapsed()),
            // What cleaning wrote is made durable (so its segments can be
            // reused) with the next group's flush, or after a quiet
            // spell: a flush of its own right away would make the next
            // commit wait for it.
            FlushMode::Always if cleaning.unflushed => CLEANING_FLUSH,
            _ => Duration::from_secs(3600),
        };
        let first = match rx.recv_timeout(wait) {
            Ok(m) => m,
            Err(RecvTimeoutError::Timeout) => {
                if cleaning.unflushed && mode == FlushMode::Always {
                    match durable(&mut engine) {
                        Err(e) => tracing::error!("store flush failed: {e}"),
                        Ok(()) => cleaning.unflushed = false,
                    }
                }
                if dirty {
                    match durable(&mut engine) {
                        // Stays dirty: the next interval tries again.
                        Err(e) => tracing::error!("periodic store flush failed: {e}"),
                        Ok(()) => dirty = false,
                    }
                    last_flush = Instant::now();
                }
                continue;
            }
            Err(RecvTimeoutError::Disconnected) => break,
        };
        let mut group = vec![first];
        while group.len() < MAX_GROUP {
            match rx.try_recv() {
                Some(m) => group.push(m),
                None => break,
            }
        }
        let closing = group.iter().any(|m| matches!(m, Msg::Close));
        let written: usize = group
            .iter()
            .map(|m| match m {
                Msg::Writes { writes, .. } => writes.len(),
                _ => 0,
            })
            .sum();
        let mut result = engine.apply(&mut group.iter().flat_map(|m| match m {
            Msg::Writes { writes, .. } => writes.as_slice(),
            _ => &[],
        }));
        // Reads see every write queued before them: the group is applied.
        let mut writes = Vec::with_capacity(group.len());
        for m in group {
            match m {
                Msg::Read {
                    tree,
                    from,
                    to,
                    limit,
                    reply,
                } => reply(engine.read(tree, &from, &to, limit)),
                other => writes.push(other),
            }
        }
        let group = writes;
        let submissions = group
            .iter()
            .filter(|m| matches!(m, Msg::Writes { .. }))
            .count();
        if submissions > 0 {
            stats.batch.observe(submissions as f64);
        }
        match mode {
            FlushMode::Always => {
                if result.is_ok() {
                    result = durable(&mut engine);
                    // The cleaning since the last flush is durable too.
                    cleaning.unflushed = false;
                }
            }
            FlushMode::Interval => {
                dirty = true;
                if last_flush.elapsed() >= interval || closing {
                    match durable(&mut engine) {
                        Err(e) => tracing::error!("store flush failed: {e}"),
                        Ok(()) => dirty = false,
                    }
                    last_flush = Instant::now();
                }
            }
        }
        if let Err(e) = &result {
            tracing::error!("{e}");
        }
        match (replica.get(), &result) {
            (Some(r), Ok(())) => hand_to_replica(r.as_ref(), group),
            _ => {
                for m in group {
                    if let Msg::Writes {
                        done: Some(done), ..
                    } = m
                    {
                        let _ = done.send(result.clone());
                    }
                }
            }
        }
        if closing {
            break;
        }
        // After the group is confirmed, so no commit waits for it.
        cleaning.after_group(engine.as_ref(), written);
    }
    if let Err(e) = engine.durable() {
        tracing::error!("final store flush failed: {e}");
    }
}

/// Completes a durable group's submissions, except those with writes to
/// replicated queues: their writes and completions go to the replica,
/// which completes them once its copy is safe.
fn hand_to_replica(replica: &dyn Replica, group: Vec<Msg>) {
    let mut copied = Vec::new();
    let mut waiting = Vec::new();
    for m in group {
        let Msg::Writes { writes, done } = m else {
            continue;
        };
        // Asked once per write: the answer may change meanwhile.
        let ids: Vec<Option<u32>> = writes
            .iter()
            .map(|w| queue_of(w).filter(|&id| replica.replicates(id)))
            .collect();
        if ids.iter().all(Option::is_none) {
            if let Some(done) = done {
                let _ = done.send(Ok(()));
            }
            continue;
        }
        copied.extend(
            writes
                .into_iter()
                .zip(ids)
                .filter_map(|(w, id)| Some((id?, w))),
        );
        if let Some(done) = done {
            waiting.push(Completion(done));
        }
    }
    if !copied.is_empty() {
        replica.replicate(copied, waiting);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn submissions_past_the_bound_are_refused_and_taken_ones_make_room() {
        let (tx, rx) = crossbeam_channel::unbounded();
        let queued = Arc::new(AtomicUsize::new(WRITER_QUEUE - 1));
        let h = WriterHandle {
            tx,
            queued: queued.clone(),
            stats: Arc::default(),
            replica: ReplicaCell::default(),
        };
        let taken = Taken {
            rx,
            queued: queued.clone(),
        };
        assert_eq!(h.submit_detached(Vec::new()), Ok(()), "the last place");
        assert_eq!(h.submit_detached(Vec::new()), Err(SubmitError::Full));
        assert!(matches!(h.submit(Vec::new()), Err(SubmitError::Full)));
        assert_eq!(queued.load(Ordering::Acquire), WRITER_QUEUE);
        // The writer takes one: one more gets in.
        assert!(taken.try_recv().is_some());
        assert_eq!(queued.load(Ordering::Acquire), WRITER_QUEUE - 1);
        assert_eq!(h.submit_detached(Vec::new()), Ok(()));
        // Close is not counted: it gets in past the bound, and taking it
        // counts nothing out.
        h.tx.send(Msg::Close).unwrap();
        assert!(taken.try_recv().is_some());
        assert!(matches!(taken.try_recv(), Some(Msg::Close)));
        assert_eq!(queued.load(Ordering::Acquire), WRITER_QUEUE - 1);
        // A writer gone refuses, and the refusal is not counted.
        drop(taken);
        assert_eq!(h.submit_detached(Vec::new()), Err(SubmitError::Closed));
        assert_eq!(queued.load(Ordering::Acquire), WRITER_QUEUE - 1);
    }
}
