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

use std::fs::File;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, RecvTimeoutError, Sender, TrySendError};
use tokio::sync::oneshot;

use crate::config::{FlushMode, StoreConfig};

/// Groups of writes queued for the writer before submitters are refused.
pub const WRITER_QUEUE: usize = 65_536;

/// Most queued groups committed together.
const MAX_GROUP: usize = 4096;

/// One change to one tree.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Write {
    /// Insert or replace `key` in `tree`.
    Put {
        /// The tree (record kind).
        tree: &'static str,
        /// The key.
        key: Vec<u8>,
        /// The value.
        value: Vec<u8>,
    },
    /// Remove `key` from `tree`.
    Delete {
        /// The tree.
        tree: &'static str,
        /// The key.
        key: Vec<u8>,
    },
}

/// Why a commit failed (shared by every write of the group).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("store commit failed: {0}")]
pub struct CommitError(pub String);

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
}

impl WriterHandle {
    /// Queues writes to be committed in the next group, without waiting.
    ///
    /// # Errors
    /// [`SubmitError::Full`] or [`SubmitError::Closed`]; nothing is queued.
    pub fn submit(&self, writes: Vec<Write>) -> Result<Durable, SubmitError> {
        let (done, rx) = oneshot::channel();
        self.tx
            .try_send(Msg::Writes {
                writes,
                done: Some(done),
            })
            .map_err(|e| match e {
                TrySendError::Full(_) => SubmitError::Full,
                TrySendError::Disconnected(_) => SubmitError::Closed,
            })?;
        Ok(Durable(rx))
    }
}

impl std::fmt::Debug for WriterHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WriterHandle").finish_non_exhaustive()
    }
}

/// The owning side: the thread, joined on [`StoreWriter::close`] or drop.
pub struct StoreWriter {
    handle: WriterHandle,
    thread: Option<JoinHandle<()>>,
}

impl StoreWriter {
    pub(super) fn start(db: sled::Db, config: &StoreConfig) -> std::io::Result<StoreWriter> {
        let (tx, rx) = crossbeam_channel::bounded(WRITER_QUEUE);
        // The file fsynced after each flush: without it "always" would
        // quietly stop meaning what it says, so it is required.
        let db_file = File::open(config.data_dir.join("db"))?;
        let mode = config.flush;
        let interval = Duration::from_millis(config.interval_ms.max(1));
        let thread = std::thread::Builder::new()
            .name("wharf-store-writer".into())
            .spawn(move || run(db, db_file, rx, mode, interval))?;
        Ok(StoreWriter {
            handle: WriterHandle { tx },
            thread: Some(thread),
        })
    }

    /// A handle for submitters.
    pub fn handle(&self) -> WriterHandle {
        self.handle.clone()
    }

    /// Commits everything queued, flushes, and stops the thread. Waits up
    /// to `timeout`; returns whether the thread finished.
    pub fn close(&mut self, timeout: Duration) -> bool {
        let Some(thread) = self.thread.take() else {
            return true;
        };
        // Blocking send: everything queued before Close is committed first.
        let _ = self.handle.tx.send_timeout(Msg::Close, timeout);
        let deadline = Instant::now() + timeout;
        while !thread.is_finished() {
            if Instant::now() >= deadline {
                tracing::warn!("store writer still busy at the shutdown deadline");
                return false;
            }
            std::thread::sleep(Duration::from_millis(2));
        }
        let _ = thread.join();
        true
    }
}

impl Drop for StoreWriter {
    fn drop(&mut self) {
        self.close(Duration::from_secs(10));
    }
}

fn run(db: sled::Db, db_file: File, rx: Receiver<Msg>, mode: FlushMode, interval: Duration) {
    let mut dirty = false;
    let mut last_flush = Instant::now();
    let durable = |db: &sled::Db| -> Result<(), CommitError> {
        db.flush().map_err(|e| CommitError(e.to_string()))?;
        db_file.sync_data().map_err(|e| CommitError(e.to_string()))
    };
    loop {
        let wait = match mode {
            FlushMode::Interval if dirty => interval.saturating_sub(last_flush.elapsed()),
            _ => Duration::from_secs(3600),
        };
        let first = match rx.recv_timeout(wait) {
            Ok(m) => m,
            Err(RecvTimeoutError::Timeout) => {
                if dirty {
                    if let Err(e) = durable(&db) {
                        tracing::error!("periodic store flush failed: {e}");
                    }
                    dirty = false;
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
        let mut result = apply(&db, &group);
        match mode {
            FlushMode::Always => {
                if result.is_ok() {
                    result = durable(&db);
                }
            }
            FlushMode::Interval => {
                dirty = true;
                if last_flush.elapsed() >= interval || closing {
                    if let Err(e) = durable(&db) {
                        tracing::error!("store flush failed: {e}");
                    }
                    dirty = false;
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
    if let Err(e) = durable(&db) {
        tracing::error!("final store flush failed: {e}");
    }
}

/// Applies a group as one sled batch per tree.
fn apply(db: &sled::Db, group: &[Msg]) -> Result<(), CommitError> {
    let mut batches: Vec<(&'static str, sled::Batch)> = Vec::new();
    for m in group {
        let Msg::Writes { writes, .. } = m else {
            continue;
        };
        for w in writes {
            let tree = match w {
                Write::Put { tree, .. } | Write::Delete { tree, .. } => *tree,
            };
            let i = match batches.iter().position(|(t, _)| *t == tree) {
                Some(i) => i,
                None => {
                    batches.push((tree, sled::Batch::default()));
                    batches.len() - 1
                }
            };
            let batch = &mut batches[i].1;
            match w {
                Write::Put { key, value, .. } => batch.insert(key.as_slice(), value.as_slice()),
                Write::Delete { key, .. } => batch.remove(key.as_slice()),
            }
        }
    }
    for (tree, batch) in batches {
        db.open_tree(tree)
            .and_then(|t| t.apply_batch(batch))
            .map_err(|e| CommitError(format!("tree {tree}: {e}")))?;
    }
    Ok(())
}
