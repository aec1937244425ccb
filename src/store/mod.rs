//! Persistence on sled. The only module that knows sled: everything above
//! it sees [`Store`] and [`StoreError`].
//!
//! Layout: one tree per record kind, big-endian keys. The `meta` tree holds
//! the schema version, checked on every open so that a database written by
//! an incompatible Wharf is refused instead of misread. The data
//! directory also holds Wharf's marker file (`dir.rs`): nothing is handed
//! to sled before the directory is known to be a Wharf store, and the
//! marker records whether the last run shut down cleanly (`recover.rs`).
//!
//! # Design notes
//!
//! ## Records
//! One tree per kind of record, keys big-endian so that sled's order is
//! the order Wharf reads them in:
//!
//! | tree | key | value |
//! |---|---|---|
//! | `meta` | `schema_version` | the schema version |
//! | `retained` | topic name | seq, headers, payload (`retained.rs`) |
//! | `history` | topic, 0xFF, offset | epoch (offset 0); time, headers, payload (`history.rs`) |
//! | `queues` | queue name | queue id (u32), then metadata |
//! | `qmsg` | queue id, 9 - priority, seq | times, headers, payload |
//! | `qdel` | the message's `qmsg` key | delivery count, not-before time |
//! | `jobs` | job id (16 bytes, a UUID v7) | the job record, JSON |
//!
//! A queue's metadata is empty for most queues (their options come from
//! the configuration at each start) and `{"bind":[filter]}` for a durable
//! subscription's. Its messages are contiguous in `qmsg`, highest priority
//! first and oldest first within one; the value starts with the enqueue
//! and expiry times (`queues.rs`). `qdel` is written best effort, at
//! dispatch and for delays; deleting a queue deletes its `queues` record
//! and a `DeleteRange` of its ids in `qmsg` and `qdel`.
//!
//! ## The writer
//! `WriterHandle::submit` never blocks: it fails at once with
//! `SubmitError::Full` once `WRITER_QUEUE` (65,536) submissions wait, and
//! the task that submitted changes nothing (its caller answers
//! `overloaded`). The bound is an atomic count over an unbounded channel: a
//! bounded crossbeam channel allocates all its slots up front, 6.5 MiB of
//! an idle broker. The writer thread takes what is queued, up to 4,096
//! submissions, applies it as one sled batch per tree, and with `flush =
//! "always"` flushes sled and fsyncs the `db` file before completing every
//! submission's `Durable`: one flush for the group (group commit). sled
//! keeps large values in files of their own under `blobs/` and does not
//! fsync them, so each durable commit also fsyncs the blob files not yet
//! synced, and the directory. `submit_detached` is for writes nobody
//! awaits. At shutdown the writer commits what is queued, flushes and
//! releases the database; a later submission fails at once instead of
//! waiting for ever.
//!
//! ## Reads through the writer
//! `WriterHandle::read` (a key range of one tree, up to a limit) is queued
//! with the writes: the writer applies a group's writes, then answers the
//! group's reads, so a read sees every write submitted before it. The
//! answer goes to a callback on the writer thread, which must only hand it
//! on (a queue's refill submits a task to its queue). A `DeleteRange` is
//! expanded into deletes of the keys in its range when its group is
//! applied, in the same batch.
//!
//! ## Log cleaning and compaction
//! sled's file is a log of page images: what a write supersedes stays until
//! sled's cleaner moves the live pages out of a mostly dead segment, and
//! sled cleans only in the flusher thread that `flush_every_ms` starts,
//! which Wharf leaves off (the writer flushes). A store of 64 B messages
//! once took 2.2-2.7 times its records on disk. The writer now takes one
//! cleaning step (one page moved, `Db::attempt_gc`, which the vendored sled
//! exposes) per write after each confirmed group, so no commit waits for
//! it, and cleans the rest while idle: 1.7-1.9 times. Cleaning reuses space
//! but the file shrinks only as far as free segments reach its end, so
//! compaction stays (`compact.rs`): with `[store] compact_at_start`, a
//! store whose files are four times its records plus `COMPACT_SLACK` is
//! compacted before the broker listens (the loads count the records'
//! bytes, so that costs no pass of its own); `wharf store compact` does
//! the same to a stopped broker's directory.
//!
//! ## Opening and loading
//! `Store::open` opens sled with an explicit cache capacity and checks the
//! schema version (a mismatch is `SchemaMismatch`). sled releases its file
//! lock from a background thread, so an in-process reopen waits up to a
//! second for it; a lock held by another process is `Locked`, naming the
//! directory. `recover.rs` also translates sled's misleading errors ("a
//! sled version earlier than 0.29" means an unreadable `conf`, corruption
//! reports mean `db`). A marked store is opened in place: sled may rewrite
//! parts of a damaged `db` before it reports it, so the advice is a backup,
//! not a repair. `Store::load_queues` reads the `queues` tree, then all of
//! `qdel`, then makes one pass over `qmsg`: per queue it decodes the first
//! `memory_window` messages with their `qdel` state and only counts the
//! rest. Orphans become deletes: `qdel` records without a message (an
//! ack's two trees are two batches, so a crash can fall between them),
//! messages of an unknown queue, undecodable records. Deliveries in flight
//! at a crash were never deleted: they come back ready, with their counts.
//!
//! ## Crash tests
//! `tests/it/crash.rs` kills the broker with SIGKILL while clients publish
//! retained messages and pipeline enqueues and acks with receipts, restarts
//! it, and checks that every confirmed value is there, that no message
//! whose ack was confirmed comes back, and that messages in flight at the
//! crash come back with their delivery count raised.
//! `tests/it/store_damage.rs` covers foreign and damaged directories.

pub mod compact;
mod dir;
mod engine;
mod history;
pub mod jobs;
pub mod queues;
mod recover;
pub mod replica;
mod retained;
mod write;
mod writer;

use std::path::{Path, PathBuf};

pub use dir::MARKER;
pub use engine::{Engine, SledEngine};
pub use history::{HistoryRecord, StoredEntry};
pub use recover::Recovered;
pub use retained::RetainedRecord;
pub use write::{CommitError, ReadResult, Write};
pub use writer::{Durable, ReadReply, StoreWriter, SubmitError, WRITER_QUEUE, WriterHandle};

use crate::config::StoreConfig;

/// The writes that keep topics' history (`history.rs`).
pub mod history_writes {
    pub use super::history::{delete, put, put_epoch};
}

/// Writes for the `retained` tree.
pub mod retained_writes {
    pub use super::retained::{delete, put};
}

/// The on-disk layout version this build reads and writes.
pub const SCHEMA_VERSION: u32 = 1;

const META_TREE: &str = "meta";
const SCHEMA_KEY: &[u8] = b"schema_version";

/// Why the store failed. Carries the sled error as its source.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// sled could not open the database (missing permissions, say);
    /// damage is [`StoreError::Damaged`], a lock held by another process
    /// [`StoreError::Locked`].
    #[error("cannot open the store at {path}: {source}")]
    Open {
        /// The data directory.
        path: PathBuf,
        /// sled's explanation.
        #[source]
        source: sled::Error,
    },
    /// Another process holds the database's file lock: most likely
    /// another Wharf running on the same data directory. sled's own words
    /// (an OS `WouldBlock`) are kept as the source, not in the message.
    #[error(
        "the data directory {path} is in use by another process (another wharf running \
         on it?): its store is locked; stop that process first, or give this one another \
         directory with store.data_dir (or --data-dir)"
    )]
    Locked {
        /// The data directory.
        path: PathBuf,
        /// sled's explanation.
        #[source]
        source: sled::Error,
    },
    /// The database was written with another schema version.
    #[error(
        "the store at {path} has schema version {found}, this build needs {expected}; \
         use a matching Wharf or another data_dir"
    )]
    SchemaMismatch {
        /// The data directory.
        path: PathBuf,
        /// Version on disk.
        found: u32,
        /// [`SCHEMA_VERSION`].
        expected: u32,
    },
    /// The schema key exists but is not 4 bytes.
    #[error("the store at {path} has an unreadable schema version key")]
    CorruptSchema {
        /// The data directory.
        path: PathBuf,
    },
    /// A read, write or flush failed.
    #[error("store {op} failed: {source}")]
    Io {
        /// What was being done.
        op: &'static str,
        /// sled's explanation.
        #[source]
        source: sled::Error,
    },
    /// The engine could not read a tree back.
    #[error("store {op} failed: {reason}")]
    Read {
        /// What was being read.
        op: &'static str,
        /// The engine's explanation.
        reason: String,
    },
    /// The data directory holds files Wharf did not write; nothing was
    /// changed.
    #[error(
        "refusing to use {path} as the data directory: {why}{}; Wharf does not \
         overwrite what it did not create: set store.data_dir (or --data-dir) to a new or \
         empty directory, or to the directory of your Wharf store",
        list_files(files)
    )]
    Foreign {
        /// The data directory.
        path: PathBuf,
        /// The files that are not Wharf's (empty if `path` is a file).
        files: Vec<String>,
        /// Why they are not Wharf's.
        why: &'static str,
    },
    /// A file of a Wharf store is damaged: cut short, emptied, or bytes
    /// sled cannot read.
    #[error(
        "the store at {path} is damaged: {file} {detail}; restore the directory from a \
         backup, or move it aside to start with an empty store"
    )]
    Damaged {
        /// The data directory.
        path: PathBuf,
        /// The damaged file, relative to `path`.
        file: &'static str,
        /// What is wrong with it.
        detail: String,
    },
    /// The data directory or its marker could not be read or written.
    #[error("cannot {op} in {path}: {source}")]
    DataDir {
        /// The data directory.
        path: PathBuf,
        /// What was being done.
        op: &'static str,
        /// What the OS said.
        #[source]
        source: std::io::Error,
    },
    /// Syncing the database files to disk failed.
    #[error("cannot sync {path} to disk: {source}")]
    Sync {
        /// The file.
        path: PathBuf,
        /// What the OS said.
        #[source]
        source: std::io::Error,
    },
}

/// The broker's database. Cheap to clone (sled's handles are shared).
#[derive(Clone, Debug)]
pub struct Store {
    db: sled::Db,
    path: PathBuf,
    /// What the marker said about the last run, for [`Store::recover`].
    previous: Previous,
    /// Bytes of keys and values the loaders have read (for
    /// [`Store::compact_if_worth`]).
    scanned: std::sync::Arc<std::sync::atomic::AtomicU64>,
}

/// How the last run left the store, as the marker told at open.
#[derive(Clone, Copy, Debug)]
enum Previous {
    /// No store: created now.
    Fresh,
    /// A store of an earlier Wharf, without a marker: adopted now.
    Adopted,
    /// Opened and not closed cleanly (a crash or kill).
    Unclean,
    /// Closed cleanly, holding these counts.
    Clean(dir::Counts),
}

impl Store {
    /// Opens (or creates) the database in `config.data_dir` and checks its
    /// schema version. Refuses a directory that holds files Wharf did not
    /// write without touching it, and adopts a store of an earlier Wharf
    /// that has no marker yet; finishes a compaction a crash interrupted.
    /// [`Store::recover`] is the same plus the loads (and a compaction
    /// when `[store] compact_at_start` finds one worth it), safe against
    /// sled's panics, and records the start in the marker (until then a
    /// crash or a clean shutdown recorded before stays the last run's
    /// state).
    ///
    /// # Errors
    /// [`StoreError::Foreign`], [`StoreError::Damaged`],
    /// [`StoreError::Open`], [`StoreError::Locked`] (another process runs
    /// on the directory), [`StoreError::SchemaMismatch`],
    /// [`StoreError::CorruptSchema`], [`StoreError::DataDir`] or
    /// [`StoreError::Io`].
    pub fn open(config: &StoreConfig) -> Result<Store, StoreError> {
        // A compaction a crash interrupted is finished (or its partial
        // copy removed) first; only a directory Wharf marked can have one.
        if config.data_dir.join(MARKER).exists() {
            compact::resume(&config.data_dir)?;
        }
        Store::open_as_is(config)
    }

    /// Compacts the store (see [`Store::compact`]) if `[store]
    /// compact_at_start` is on and its files are at least four times the
    /// size of the records the loaders read and [`COMPACT_SLACK`] more.
    /// Called once everything has been read back, so that the records'
    /// size costs no pass of its own.
    ///
    /// # Errors
    /// As [`Store::compact`].
    pub(super) fn compact_if_worth(self, config: &StoreConfig) -> Result<Store, StoreError> {
        if !config.compact_at_start {
            return Ok(self);
        }
        let before = compact::dir_size(&self.path);
        let live = self.scanned.load(std::sync::atomic::Ordering::Relaxed);
        if before < live.saturating_mul(4).saturating_add(COMPACT_SLACK) {
            return Ok(self);
        }
        tracing::info!(
            path = %self.path.display(),
            before,
            live,
            "compacting the store: its files are more than four times its records"
        );
        // A copy that fails (no room for it, say) leaves the store as it
        // was: the broker starts on it and says why it was not compacted.
        let copied = match compact::copy(&self.db, &self.path, cache_bytes(config)) {
            Ok(copied) => copied,
            Err(e) => {
                tracing::warn!(
                    path = %self.path.display(),
                    "the store was not compacted: {e}"
                );
                compact::discard(&self.path);
                return Ok(self);
            }
        };
        Ok(self.swap_compacted(config, before, copied)?.0)
    }

    /// Rewrites the store compactly (`compact.rs`) and opens the result:
    /// sled gives the space of deleted records back only so. Takes the
    /// store, which must be the only handle on it (nothing else may write
    /// while it runs). Used by `wharf store compact`; a start compacts
    /// through `Store::compact_if_worth`.
    ///
    /// # Errors
    /// As [`Store::open`]; the store is then as it was (a failed copy is
    /// removed), or compacted and swapped in at the next open.
    pub fn compact(self, config: &StoreConfig) -> Result<(Store, compact::Compacted), StoreError> {
        let before = compact::dir_size(&self.path);
        match compact::copy(&self.db, &self.path, cache_bytes(config)) {
            Ok(copied) => self.swap_compacted(config, before, copied),
            Err(e) => {
                compact::discard(&self.path);
                Err(e)
            }
        }
    }

    /// Closes the store, swaps in the complete copy [`compact::copy`]
    /// made, and opens the result.
    fn swap_compacted(
        self,
        config: &StoreConfig,
        before: u64,
        (records, live_bytes): (u64, u64),
    ) -> Result<(Store, compact::Compacted), StoreError> {
        let path = self.path.clone();
        drop(self);
        compact::resume(&path)?;
        let store = Store::open_as_is(config)?;
        let done = compact::Compacted {
            records,
            live_bytes,
            before,
            after: compact::dir_size(&path),
        };
        tracing::info!(
            path = %path.display(),
            records,
            before,
            after = done.after,
            "store compacted"
        );
        Ok((store, done))
    }

    /// Opens the store without looking at its size (see [`Store::open`]).
    fn open_as_is(config: &StoreConfig) -> Result<Store, StoreError> {
        let path = config.data_dir.clone();
        let found = dir::inspect(&path)?;
        if found == dir::Found::Unmarked && !wharf_wrote(&path)? {
            return Err(StoreError::Foreign {
                path,
                files: vec!["conf".into(), "db".into()],
                why: "it holds a sled database without Wharf's schema version \
                      (another program's, or a damaged store)",
            });
        }
        let sled_config = sled::Config::new()
            .path(&path)
            .cache_capacity(cache_bytes(config))
            // Every write goes through the store writer, which flushes as
            // `[store] flush` says; sled's own flusher thread would only
            // add a thread, contention with the writer, and a wait at drop.
            .flush_every_ms(None);
        // sled releases its file lock from a background thread after the
        // last handle drops, so a reopen in the same process can briefly
        // find it held; a lock held by another process stays held.
        let deadline = std::time::Instant::now() + LOCK_WAIT;
        let db = loop {
            match sled_config.open() {
                Ok(db) => break db,
                Err(e) if is_lock_error(&e) && std::time::Instant::now() < deadline => {
                    std::thread::sleep(std::time::Duration::from_millis(10));
                }
                Err(source) => return Err(open_error(&path, source)),
            }
        };
        let previous = match found {
            dir::Found::Fresh | dir::Found::Marked(dir::State::New) => Previous::Fresh,
            dir::Found::Unmarked => Previous::Adopted,
            dir::Found::Marked(dir::State::Open) => Previous::Unclean,
            dir::Found::Marked(dir::State::Clean(counts)) => Previous::Clean(counts),
        };
        let store = Store {
            db,
            path,
            previous,
            scanned: std::sync::Arc::default(),
        };
        store.check_schema()?;
        match previous {
            Previous::Adopted => {
                tracing::info!(
                    path = %store.path.display(),
                    "adopting a store written by an earlier Wharf: writing its {} marker",
                    dir::MARKER
                );
                dir::write_marker(&store.path, dir::State::Open)?;
            }
            // The marker says `open` only once sled's files hold the
            // schema: from then on an empty `db` means damage.
            Previous::Fresh => store.sync()?,
            Previous::Unclean | Previous::Clean(_) => {}
        }
        Ok(store)
    }

    /// Records in the marker that the store is in use (not closed
    /// cleanly), once what it held has been read back.
    fn mark_open(&self) -> Result<(), StoreError> {
        dir::write_marker(&self.path, dir::State::Open)
    }

    fn check_schema(&self) -> Result<(), StoreError> {
        let meta = self
            .db
            .open_tree(META_TREE)
            .map_err(|source| StoreError::Io {
                op: "open meta tree",
                source,
            })?;
        let found = meta.get(SCHEMA_KEY).map_err(|source| StoreError::Io {
            op: "read schema version",
            source,
        })?;
        match found {
            None if matches!(self.previous, Previous::Fresh) => {
                meta.insert(SCHEMA_KEY, &SCHEMA_VERSION.to_be_bytes())
                    .map_err(|source| StoreError::Io {
                        op: "write schema version",
                        source,
                    })?;
                self.flush()?;
                Ok(())
            }
            None => Err(StoreError::Damaged {
                path: self.path.clone(),
                file: "db",
                detail: "has lost the schema version Wharf wrote in it".into(),
            }),
            Some(bytes) => {
                let raw: [u8; 4] =
                    bytes
                        .as_ref()
                        .try_into()
                        .map_err(|_| StoreError::CorruptSchema {
                            path: self.path.clone(),
                        })?;
                let found = u32::from_be_bytes(raw);
                if found == SCHEMA_VERSION {
                    Ok(())
                } else {
                    Err(StoreError::SchemaMismatch {
                        path: self.path.clone(),
                        found,
                        expected: SCHEMA_VERSION,
                    })
                }
            }
        }
    }

    /// Flushes sled's buffers to the OS; returns the bytes flushed. On
    /// Linux sled uses `sync_file_range`, not a full fsync (sled issue
    /// 1452): call [`Store::sync`] where a write must survive power loss.
    ///
    /// # Errors
    /// [`StoreError::Io`].
    pub fn flush(&self) -> Result<usize, StoreError> {
        self.db.flush().map_err(|source| StoreError::Io {
            op: "flush",
            source,
        })
    }

    /// Flushes, then fsyncs every file of the database and its directory.
    /// Used at shutdown so that what was written is on disk when the
    /// process exits.
    ///
    /// # Errors
    /// [`StoreError::Io`] or [`StoreError::Sync`].
    pub fn sync(&self) -> Result<(), StoreError> {
        self.flush()?;
        sync_dir(&self.path)
    }

    /// Starts the group-commit writer for this database.
    ///
    /// # Errors
    /// [`StoreError::Sync`] if the writer thread cannot start.
    pub fn start_writer(&self, config: &StoreConfig) -> Result<StoreWriter, StoreError> {
        let sync_err = |source| StoreError::Sync {
            path: self.path.clone(),
            source,
        };
        let engine = SledEngine::new(self.db.clone(), &config.data_dir).map_err(sync_err)?;
        StoreWriter::start(Box::new(engine), config).map_err(sync_err)
    }

    /// The database as an [`Engine`], for the loaders.
    fn engine(&self) -> Result<SledEngine, StoreError> {
        SledEngine::new(self.db.clone(), &self.path)
            .map(|e| e.counting(self.scanned.clone()))
            .map_err(|source| StoreError::Sync {
                path: self.path.clone(),
                source,
            })
    }

    /// The data directory.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Bytes the database occupies on disk, as sled reports it.
    ///
    /// # Errors
    /// [`StoreError::Io`].
    pub fn size_on_disk(&self) -> Result<u64, StoreError> {
        self.db.size_on_disk().map_err(|source| StoreError::Io {
            op: "size_on_disk",
            source,
        })
    }
}

/// Appends `headers` as `count (u32 BE) | (len u32 BE, bytes)` per key and
/// value: the header encoding of every stored message kind.
fn encode_headers(out: &mut Vec<u8>, headers: &crate::protocol::frame::Headers) {
    out.extend_from_slice(&(headers.len() as u32).to_be_bytes());
    for (k, v) in headers {
        for part in [k.as_bytes(), v.as_bytes()] {
            out.extend_from_slice(&(part.len() as u32).to_be_bytes());
            out.extend_from_slice(part);
        }
    }
}

/// Reads what [`encode_headers`] wrote, starting at `*at`; `None` if the
/// bytes are truncated or not UTF-8.
fn decode_headers(value: &[u8], at: &mut usize) -> Option<crate::protocol::frame::Headers> {
    let count = u32::from_be_bytes(value.get(*at..*at + 4)?.try_into().ok()?);
    *at += 4;
    let take = |at: &mut usize| -> Option<String> {
        let len = u32::from_be_bytes(value.get(*at..*at + 4)?.try_into().ok()?) as usize;
        let s = std::str::from_utf8(value.get(*at + 4..(*at + 4).checked_add(len)?)?)
            .ok()?
            .to_owned();
        *at += 4 + len;
        Some(s)
    };
    let mut headers = crate::protocol::frame::Headers::new();
    for _ in 0..count {
        let k = take(at)?;
        let v = take(at)?;
        headers.insert(k, v);
    }
    Some(headers)
}

/// Turns an engine's read failure into [`StoreError::Read`] for `op`.
fn read_error(op: &'static str) -> impl Fn(CommitError) -> StoreError {
    move |e| StoreError::Read { op, reason: e.0 }
}

/// sled's page cache, as `[store] cache_capacity_mb` sets it.
fn cache_bytes(config: &StoreConfig) -> u64 {
    config.cache_capacity_mb.saturating_mul(1024 * 1024)
}

/// Bytes a store's files may exceed four times its live records by
/// before a start compacts it.
const COMPACT_SLACK: u64 = 8 << 20;

/// How long [`Store::open`] waits for sled's file lock to be released.
const LOCK_WAIT: std::time::Duration = std::time::Duration::from_millis(1000);

/// Whether the unmarked sled database in `dir` was written by Wharf (its
/// `meta` tree holds the schema key), looked at in a scratch copy so that
/// sled changes nothing in `dir`. A panic inside sled counts as no.
///
/// # Errors
/// [`StoreError::DataDir`] if the copy cannot be made.
fn wharf_wrote(dir: &Path) -> Result<bool, StoreError> {
    let scratch = dir::copy_for_probe(dir)?;
    let probe = std::panic::catch_unwind(|| {
        let db = sled::Config::new().path(&scratch).open().ok()?;
        // Looked for by name: `open_tree` would create it.
        if !db.tree_names().iter().any(|n| n == META_TREE.as_bytes()) {
            return Some(false);
        }
        db.open_tree(META_TREE)
            .and_then(|t| t.contains_key(SCHEMA_KEY))
            .ok()
    });
    dir::remove_scratch(dir);
    Ok(matches!(probe, Ok(Some(true))))
}

/// sled's open failure as a [`StoreError`]: its misleading words for a
/// damaged `conf` ("created using a sled version earlier than 0.29") and
/// its corruption reports become [`StoreError::Damaged`], its lock
/// failure [`StoreError::Locked`].
fn open_error(path: &Path, source: sled::Error) -> StoreError {
    if is_lock_error(&source) {
        return StoreError::Locked {
            path: path.to_owned(),
            source,
        };
    }
    let damaged = |file, detail| StoreError::Damaged {
        path: path.to_owned(),
        file,
        detail,
    };
    match source {
        sled::Error::Unsupported(ref why) if why.contains("0.29") => {
            damaged("conf", "is not a configuration sled can read".into())
        }
        sled::Error::Corruption { at, .. } => damaged(
            "db",
            match at {
                Some(at) => format!("holds data sled cannot read (corrupted at {at:?})"),
                None => "holds data sled cannot read".into(),
            },
        ),
        source => StoreError::Open {
            path: path.to_owned(),
            source,
        },
    }
}

/// Joins file names for an error message: `: a, b` or nothing.
fn list_files(files: &[String]) -> String {
    if files.is_empty() {
        String::new()
    } else {
        format!(" ({})", files.join(", "))
    }
}

fn is_lock_error(e: &sled::Error) -> bool {
    matches!(e, sled::Error::Io(io) if io.to_string().contains("could not acquire lock"))
}

fn sync_dir(dir: &Path) -> Result<(), StoreError> {
    let sync_err = |path: &Path| {
        let path = path.to_owned();
        move |source| StoreError::Sync { path, source }
    };
    let entries = std::fs::read_dir(dir).map_err(sync_err(dir))?;
    for entry in entries {
        let entry = entry.map_err(sync_err(dir))?;
        let path = entry.path();
        let kind = entry.file_type().map_err(sync_err(&path))?;
        if kind.is_dir() {
            sync_dir(&path)?;
        } else if kind.is_file() {
            std::fs::File::open(&path)
                .and_then(|f| f.sync_all())
                .map_err(sync_err(&path))?;
        }
    }
    compact::sync_dir_only(dir)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(dir: &Path) -> StoreConfig {
        StoreConfig {
            data_dir: dir.join("db"),
            cache_capacity_mb: 8,
            ..StoreConfig::default()
        }
    }

    #[test]
    fn the_writer_commits_groups_and_confirms_after_the_flush() {
        let tmp = tempfile::tempdir().unwrap();
        let cfg = config(tmp.path());
        let store = Store::open(&cfg).unwrap();
        let mut writer = store.start_writer(&cfg).unwrap();
        let h = writer.handle();
        let mut waits = Vec::new();
        for i in 0..100u32 {
            let topic = format!("t/{i}");
            let w = retained_writes::put(&topic, u64::from(i), &Default::default(), b"v");
            waits.push(h.submit(vec![w]).unwrap());
        }
        waits.push(h.submit(vec![retained_writes::delete("t/0")]).unwrap());
        actix_rt::System::new().block_on(async {
            for w in waits {
                w.await.unwrap();
            }
        });
        assert!(writer.close(std::time::Duration::from_secs(10)));
        // A late write is refused, not left waiting.
        let late = h.submit(vec![retained_writes::delete("t/1")]).unwrap();
        let refused = actix_rt::System::new().block_on(late);
        assert!(refused.is_err(), "{refused:?}");
        drop(store);
        let again = Store::open(&cfg).unwrap();
        let mut got = again.load_retained().unwrap();
        got.sort_by_key(|r| r.seq);
        assert_eq!(got.len(), 99);
        assert_eq!(got[0].topic, "t/1");
    }

    /// A replica that keeps what it is handed and completes nothing until
    /// told.
    #[derive(Default)]
    struct Held {
        writes: parking_lot::Mutex<Vec<(u32, Write)>>,
        done: parking_lot::Mutex<Vec<replica::Completion>>,
    }

    impl replica::Replica for Held {
        fn replicates(&self, id: u32) -> bool {
            id == 1
        }

        fn replicate(&self, writes: Vec<(u32, Write)>, done: Vec<replica::Completion>) {
            self.writes.lock().extend(writes);
            self.done.lock().extend(done);
        }
    }

    #[test]
    fn writes_to_replicated_queues_are_confirmed_by_the_replica_after_the_disk() {
        use futures_util::FutureExt;
        let tmp = tempfile::tempdir().unwrap();
        let cfg = config(tmp.path());
        let store = Store::open(&cfg).unwrap();
        let mut writer = store.start_writer(&cfg).unwrap();
        let h = writer.handle();
        let held = std::sync::Arc::new(Held::default());
        assert!(h.set_replica(held.clone()));
        let msg = |seq| queues::StoredMessage {
            seq,
            priority: 0,
            headers: Default::default(),
            payload: bytes::Bytes::from_static(b"m"),
            enqueued_ms: 1,
            expires_ms: 0,
            deliveries: 0,
            not_before_ms: 0,
        };
        let mut replicated = h
            .submit(vec![
                queues::put_message(1, &msg(1)),
                queues::put_queue("q", 1, b""),
            ])
            .unwrap();
        let local = h.submit(vec![queues::put_message(2, &msg(1))]).unwrap();
        actix_rt::System::new().block_on(async {
            local
                .await
                .expect("a queue nobody replicates: confirmed after the flush");
            // On disk, and with the replica, but not confirmed by it yet.
            let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
            while held.done.lock().is_empty() {
                assert!(
                    std::time::Instant::now() < deadline,
                    "the replica got nothing"
                );
                actix_rt::time::sleep(std::time::Duration::from_millis(5)).await;
            }
            assert!((&mut replicated).now_or_never().is_none());
            let writes = held.writes.lock().clone();
            assert_eq!(writes.len(), 1, "only queue 1's message record: {writes:?}");
            assert_eq!(writes[0].0, 1);
            for d in held.done.lock().drain(..) {
                d.complete(Err(CommitError("the replica failed".into())));
            }
            assert_eq!(
                replicated.await,
                Err(CommitError("the replica failed".into()))
            );
        });
        assert!(writer.close(std::time::Duration::from_secs(10)));
    }

    #[test]
    fn open_writes_schema_and_reopens() {
        let tmp = tempfile::tempdir().unwrap();
        let store = Store::open(&config(tmp.path())).unwrap();
        store.sync().unwrap();
        drop(store);
        let again = Store::open(&config(tmp.path())).unwrap();
        assert!(again.size_on_disk().unwrap() > 0);
    }

    #[test]
    fn other_schema_version_is_refused() {
        let tmp = tempfile::tempdir().unwrap();
        {
            let store = Store::open(&config(tmp.path())).unwrap();
            let meta = store.db.open_tree(META_TREE).unwrap();
            meta.insert(SCHEMA_KEY, &99u32.to_be_bytes()).unwrap();
            store.flush().unwrap();
        }
        match Store::open(&config(tmp.path())) {
            Err(StoreError::SchemaMismatch {
                found: 99,
                expected: SCHEMA_VERSION,
                ..
            }) => {}
            other => panic!("expected a schema mismatch, got {other:?}"),
        }
    }

    #[test]
    fn second_open_of_a_locked_dir_fails_cleanly() {
        let tmp = tempfile::tempdir().unwrap();
        let _first = Store::open(&config(tmp.path())).unwrap();
        match Store::open(&config(tmp.path())) {
            Err(e @ StoreError::Locked { .. }) => {
                let text = e.to_string();
                let dir = tmp.path().display().to_string();
                assert!(text.contains(&dir), "names the directory: {text}");
                assert!(text.contains("another process"), "{text}");
                assert!(text.contains("another wharf"), "{text}");
                assert!(text.contains("--data-dir"), "says what to do: {text}");
                assert!(
                    !text.contains("Os {") && !text.contains("WouldBlock"),
                    "no raw OS error: {text}"
                );
                // sled's words are kept as the source.
                let source = std::error::Error::source(&e).expect("a source");
                assert!(source.to_string().contains("lock"), "{source}");
            }
            other => panic!("expected a lock error, got {other:?}"),
        }
    }
}
