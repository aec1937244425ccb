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

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, RecvTimeoutError, Sender, TrySendError};
use tokio::sync::oneshot;

use std::sync::Arc;

use super::engine::Engine;
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
    stats: Arc<StoreStats>,
}

impl WriterHandle {
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
        self.tx.try_send(msg).map_err(|e| match e {
            TrySendError::Full(_) => SubmitError::Full,
            TrySendError::Disconnected(_) => SubmitError::Closed,
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
        let (tx, rx) = crossbeam_channel::bounded(WRITER_QUEUE);
        let mode = config.flush;
        let interval = Duration::from_millis(config.interval_ms.max(1));
        let (closed_tx, closed) = crossbeam_channel::bounded(1);
        let stats = Arc::new(StoreStats::default());
        let measured = stats.clone();
        std::thread::Builder::new()
            .name("wharf-store-writer".into())
            .spawn(move || {
                run(engine, &rx, mode, interval, &measured);
                let _ = closed_tx.send(());
                // Refuse whatever still arrives, until every handle is gone.
                let closed = || CommitError("the store writer has shut down".into());
                for m in rx.iter() {
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
            handle: WriterHandle { tx, stats },
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
        // Everything queued before Close is committed first.
        if self.handle.tx.send_timeout(Msg::Close, timeout).is_err() {
            tracing::warn!("store writer queue still full at the shutdown deadline");
            return false;
        }
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

fn run(
    mut engine: Box<dyn Engine>,
    rx: &Receiver<Msg>,
    mode: FlushMode,
    interval: Duration,
    stats: &StoreStats,
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
    loop {
        let wait = match mode {
            FlushMode::Interval if dirty => interval.saturating_sub(last_flush.elapsed()),
            _ => Duration::from_secs(3600),
        };
        let first = match rx.recv_timeout(wait) {
            Ok(m) => m,
            Err(RecvTimeoutError::Timeout) => {
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
                Ok(m) => group.push(m),
                Err(_) => break,
            }
        }
        let closing = group.iter().any(|m| matches!(m, Msg::Close));
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
        for m in group {
            if let Msg::Writes {
                done: Some(done), ..
            } = m
            {
                let _ = done.send(result.clone());
            }
        }
        if closing {
            break;
        }
    }
    if let Err(e) = engine.durable() {
        tracing::error!("final store flush failed: {e}");
    }
}
