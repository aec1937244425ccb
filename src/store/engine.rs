//! The storage engine behind a small trait, so that sled could be swapped
//! for another ordered key-value store: the writer thread and the loaders
//! use only [`Engine`]; [`SledEngine`] is the one implementation.
//!
//! What an engine must provide: named trees of ordered byte keys; a batch
//! of writes to one tree applied atomically; range reads in key order; and
//! a way to make everything applied so far survive a crash ([`Engine::durable`]);
//! and a way to reclaim what its files keep of superseded writes
//! ([`Engine::clean`]).

use std::collections::HashSet;
use std::ffi::OsString;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use super::write::{CommitError, ReadResult, Write};

/// An ordered key-value store with named trees.
pub trait Engine: Send + 'static {
    /// Applies writes: those of one tree atomically (one batch per tree).
    ///
    /// # Errors
    /// The engine's failure; writes of trees not yet applied are not.
    fn apply(&self, writes: &mut dyn Iterator<Item = &Write>) -> Result<(), CommitError>;

    /// Up to `limit` pairs of `tree` from `from` to `to` (both included),
    /// in key order.
    fn read(&self, tree: &'static str, from: &[u8], to: &[u8], limit: usize) -> ReadResult;

    /// Visits every pair of `tree` in key order until `visit` returns
    /// false.
    ///
    /// # Errors
    /// The engine's failure to read.
    fn scan(
        &self,
        tree: &'static str,
        visit: &mut dyn FnMut(&[u8], &[u8]) -> bool,
    ) -> Result<(), CommitError>;

    /// Makes everything applied so far durable (survives a crash or power
    /// loss).
    ///
    /// # Errors
    /// The engine's or the file system's failure.
    fn durable(&mut self) -> Result<(), CommitError>;

    /// Reclaims space: up to `steps` steps of the engine's own cleaning
    /// (an engine whose files only grow until cleaned, as sled's log
    /// does); the number taken, fewer once nothing is left to clean.
    /// What a step writes is durable at the next [`Engine::durable`].
    ///
    /// # Errors
    /// The engine's failure.
    fn clean(&self, steps: usize) -> Result<usize, CommitError>;
}

/// sled 0.34 as an [`Engine`]. sled's `flush` uses `sync_file_range` on
/// Linux, not a full fsync (sled issue 1452), and never fsyncs the files it
/// keeps large values in: [`Engine::durable`] does both.
pub struct SledEngine {
    db: sled::Db,
    db_file: File,
    blobs: PathBuf,
    synced_blobs: HashSet<OsString>,
    /// Where [`Engine::scan`] adds the bytes it visits, if anywhere.
    scanned: Option<Arc<AtomicU64>>,
}

impl SledEngine {
    /// The engine over an open database in `dir`.
    ///
    /// # Errors
    /// The database file cannot be opened (for fsync).
    pub fn new(db: sled::Db, dir: &Path) -> std::io::Result<SledEngine> {
        Ok(SledEngine {
            db,
            // Required: without it "durable" would quietly mean less.
            db_file: File::open(dir.join("db"))?,
            blobs: dir.join("blobs"),
            synced_blobs: HashSet::new(),
            scanned: None,
        })
    }

    /// The engine, adding the bytes of keys and values its scans visit to
    /// `scanned`: what the store holds, measured by the reads at start.
    pub fn counting(mut self, scanned: Arc<AtomicU64>) -> SledEngine {
        self.scanned = Some(scanned);
        self
    }
}

fn fail(tree: &str) -> impl Fn(sled::Error) -> CommitError + '_ {
    move |e| CommitError(format!("tree {tree}: {e}"))
}

impl Engine for SledEngine {
    fn apply(&self, writes: &mut dyn Iterator<Item = &Write>) -> Result<(), CommitError> {
        let mut batches: Vec<(&'static str, sled::Batch)> = Vec::new();
        for w in writes {
            let tree = match w {
                Write::Put { tree, .. }
                | Write::Delete { tree, .. }
                | Write::DeleteRange { tree, .. } => *tree,
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
                Write::DeleteRange { from, to, .. } => {
                    let t = self.db.open_tree(tree).map_err(fail(tree))?;
                    for key in t.range(from.as_slice()..=to.as_slice()).keys() {
                        batch.remove(key.map_err(fail(tree))?);
                    }
                }
            }
        }
        for (tree, batch) in batches {
            self.db
                .open_tree(tree)
                .and_then(|t| t.apply_batch(batch))
                .map_err(fail(tree))?;
        }
        Ok(())
    }

    fn read(&self, tree: &'static str, from: &[u8], to: &[u8], limit: usize) -> ReadResult {
        let t = self.db.open_tree(tree).map_err(fail(tree))?;
        t.range(from..=to)
            .take(limit)
            .map(|item| {
                item.map(|(k, v)| (k.to_vec(), v.to_vec()))
                    .map_err(fail(tree))
            })
            .collect()
    }

    fn scan(
        &self,
        tree: &'static str,
        visit: &mut dyn FnMut(&[u8], &[u8]) -> bool,
    ) -> Result<(), CommitError> {
        let t = self.db.open_tree(tree).map_err(fail(tree))?;
        let mut bytes = 0;
        for item in t.iter() {
            let (k, v) = item.map_err(fail(tree))?;
            bytes += (k.len() + v.len()) as u64;
            if !visit(&k, &v) {
                break;
            }
        }
        if let Some(scanned) = &self.scanned {
            scanned.fetch_add(bytes, Ordering::Relaxed);
        }
        Ok(())
    }

    /// sled cleans its log only from the flusher thread that
    /// `flush_every_ms` starts, which Wharf turns off (the writer
    /// flushes): without these steps a segment whose pages were all
    /// superseded is reused, but one still partly live never is, and the
    /// file only grows. A step moves one page (one tree node) out of a
    /// segment at most half live.
    fn clean(&self, steps: usize) -> Result<usize, CommitError> {
        clean(&self.db, steps).map_err(|e| CommitError(e.to_string()))
    }

    fn durable(&mut self) -> Result<(), CommitError> {
        self.db.flush().map_err(|e| CommitError(e.to_string()))?;
        self.db_file
            .sync_data()
            .map_err(|e| CommitError(e.to_string()))?;
        sync_new_blobs(&self.blobs, &mut self.synced_blobs)
            .map_err(|e| CommitError(format!("blobs: {e}")))
    }
}

/// Up to `steps` of sled's log cleaning (see [`Engine::clean`]); the
/// number taken.
///
/// # Errors
/// sled's failure.
pub(super) fn clean(db: &sled::Db, steps: usize) -> sled::Result<usize> {
    for taken in 0..steps {
        if !db.attempt_gc()? {
            return Ok(taken);
        }
    }
    Ok(steps)
}

/// Fsyncs blob files not synced before, then the blob directory if any
/// was new; forgets names that no longer exist.
fn sync_new_blobs(dir: &Path, synced: &mut HashSet<OsString>) -> std::io::Result<()> {
    let entries = match std::fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(e),
    };
    let mut present = HashSet::new();
    let mut new = false;
    for entry in entries {
        let entry = entry?;
        let name = entry.file_name();
        if !synced.contains(&name) {
            File::open(entry.path())?.sync_data()?;
            new = true;
        }
        present.insert(name);
    }
    *synced = present;
    if new {
        File::open(dir)?.sync_all()?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(queue: u32, seq: u64) -> Vec<u8> {
        crate::store::queues::message_key(queue, 0, seq)
    }

    fn open(dir: &Path) -> SledEngine {
        let db = sled::Config::new()
            .path(dir)
            .cache_capacity(1 << 20)
            .open()
            .unwrap();
        SledEngine::new(db, dir).unwrap()
    }

    /// The fork's node sizes (vendor/README.md, patches 6 and 7) under
    /// the load a queue puts on them: three queues appended in groups
    /// far past the index nodes' split (32 children of leaves of up to 16
    /// keys, so ~500 keys a level), drained from the head far past their
    /// merges, the log cleaned between groups, and the store reopened from
    /// disk: every key left is there, in order, and no other.
    #[test]
    fn appends_and_head_deletes_through_many_splits_and_merges_reopen_exactly() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("db");
        const N: u64 = 12_000;
        let value = vec![7u8; 100];
        {
            let mut engine = open(&dir);
            for group in 0..N / 200 {
                let writes: Vec<Write> = (1..=200)
                    .flat_map(|i| {
                        let seq = group * 200 + i;
                        (0..3).map(move |q| (q, seq))
                    })
                    .map(|(q, seq)| Write::Put {
                        tree: "messages",
                        key: key(q, seq),
                        value: value.clone(),
                    })
                    .collect();
                engine.apply(&mut writes.iter()).unwrap();
                engine.clean(64).unwrap();
                engine.durable().unwrap();
            }
            // Queue 1 drained to its last 10, queue 2 wholly; queue 0 kept.
            for (q, upto) in [(1, N - 10), (2, N)] {
                for from in (1..=upto).step_by(500) {
                    let writes: Vec<Write> = (from..(from + 500).min(upto + 1))
                        .map(|seq| Write::Delete {
                            tree: "messages",
                            key: key(q, seq),
                        })
                        .collect();
                    engine.apply(&mut writes.iter()).unwrap();
                    engine.clean(64).unwrap();
                    engine.durable().unwrap();
                }
            }
        }
        let engine = open(&dir);
        let mut keys = Vec::new();
        engine
            .scan("messages", &mut |k, v| {
                assert_eq!(v.len(), 100);
                keys.push(crate::store::queues::parse_key(k).unwrap());
                true
            })
            .unwrap();
        let expected: Vec<_> = (1..=N)
            .map(|seq| (0, 0, seq))
            .chain((N - 9..=N).map(|seq| (1, 0, seq)))
            .collect();
        assert_eq!(keys.len(), expected.len());
        assert!(keys == expected, "the keys read back differ");
        let (from, to) = crate::store::queues::queue_range(1);
        assert_eq!(engine.read("messages", &from, &to, 100).unwrap().len(), 10);
    }
}
