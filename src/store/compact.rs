//! Compaction: sled 0.34 does not give back the space of deleted records,
//! not even at a restart, so a drained queue leaves its data directory as
//! large as it was full. Compaction copies the live records into a fresh
//! sled database inside the data directory and swaps it in, in steps a
//! crash can interrupt anywhere:
//!
//! 1. every tree is copied into [`COPY`], which is then fsynced;
//! 2. [`PHASE`] is written (`copied`): from here the copy is the store;
//! 3. sled's files at the top (`conf`, `db`, `snap.*`, `blobs/`) move into
//!    [`OLD`], then [`PHASE`] says `swapping`;
//! 4. the copy's files move to the top; [`OLD`], [`COPY`] and [`PHASE`]
//!    are removed.
//!
//! [`resume`] runs before every open: without [`PHASE`] a partial copy is
//! removed (the old files were never touched), with it the steps it names
//! are finished. Wharf's marker stays where it is throughout: the records
//! do not change, so what it says stays true.

use std::path::Path;

use super::{StoreError, sync_dir};

/// The directory the copy is made in.
pub const COPY: &str = "WHARF_STORE.compact";
/// Where the replaced files wait until the swap is done.
pub const OLD: &str = "WHARF_STORE.old";
/// How far a compaction got: `copied` or `swapping`.
pub const PHASE: &str = "WHARF_STORE.compacting";

/// Records copied per sled batch. Each batch is flushed and the log
/// cleaned behind it: garbage left to pile up over larger batches sets
/// the file's size (4,096 gave a copy 25% larger).
const BATCH: usize = 256;

/// What a compaction did, for the log and `wharf store compact`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Compacted {
    /// Records copied (all trees).
    pub records: u64,
    /// Bytes of their keys and values.
    pub live_bytes: u64,
    /// The directory's size before, in bytes.
    pub before: u64,
    /// And after.
    pub after: u64,
}

/// Copies every tree of `db` into a fresh database in `dir`/[`COPY`]
/// (replacing a leftover one) whose page cache holds at most
/// `cache_bytes` (sled's default is 1 GiB), fsyncs it, and writes
/// [`PHASE`]. Returns the records and bytes copied.
pub(super) fn copy(db: &sled::Db, dir: &Path, cache_bytes: u64) -> Result<(u64, u64), StoreError> {
    let target = dir.join(COPY);
    remove_dir(&target)?;
    let io = |source| StoreError::Io {
        op: "copy the store for compaction",
        source,
    };
    let copy = sled::Config::new()
        .path(&target)
        .cache_capacity(cache_bytes)
        .flush_every_ms(None)
        .open()
        .map_err(io)?;
    let (mut records, mut bytes) = (0u64, 0u64);
    for name in db.tree_names() {
        let to = copy.open_tree(&name).map_err(io)?;
        let mut batch = sled::Batch::default();
        let mut n = 0;
        for item in db.open_tree(&name).map_err(io)?.iter() {
            let (k, v) = item.map_err(io)?;
            records += 1;
            bytes += (k.len() + v.len()) as u64;
            batch.insert(k, v);
            n += 1;
            if n == BATCH {
                to.apply_batch(std::mem::take(&mut batch)).map_err(io)?;
                // Cleaned as it is written, as the store writer does: a
                // copy written without it is no smaller than the store.
                // (sled cleans only segments already flushed.)
                copy.flush().map_err(io)?;
                super::engine::clean(&copy, BATCH).map_err(io)?;
                n = 0;
            }
        }
        to.apply_batch(batch).map_err(io)?;
    }
    copy.flush().map_err(io)?;
    while super::engine::clean(&copy, BATCH).map_err(io)? == BATCH {}
    copy.flush().map_err(io)?;
    drop(copy);
    sync_dir(&target)?;
    write_phase(dir, "copied")?;
    Ok((records, bytes))
}

/// Finishes a compaction that wrote [`PHASE`], or removes a copy that did
/// not get that far. Nothing to do (the usual case) costs two lookups.
///
/// # Errors
/// [`StoreError::DataDir`] for a file that cannot be moved or removed,
/// [`StoreError::Damaged`] for a [`PHASE`] that names no step.
pub fn resume(dir: &Path) -> Result<(), StoreError> {
    let phase = match std::fs::read_to_string(dir.join(PHASE)) {
        Ok(p) => p,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            discard(dir);
            return Ok(());
        }
        Err(source) => return Err(dir_error(dir, "read the compaction phase", source)),
    };
    match phase.trim() {
        "copied" => {
            move_sled_files(dir, &dir.join(OLD))?;
            write_phase(dir, "swapping")?;
            swap_in(dir)
        }
        "swapping" => swap_in(dir),
        other => Err(StoreError::Damaged {
            path: dir.to_owned(),
            file: PHASE,
            detail: format!("names no compaction step ({other:?})"),
        }),
    }
}

/// Removes what a compaction that never wrote its phase file left (a
/// partial copy), or the copy of one that failed before the swap began;
/// the store's own files were not touched. Failures are only logged:
/// leftovers take room but change nothing, and the next open tries again.
pub(super) fn discard(dir: &Path) {
    for leftover in [COPY, OLD] {
        if let Err(e) = remove_dir(&dir.join(leftover)) {
            tracing::warn!("{e}");
        }
    }
    for file in [PHASE.to_owned(), format!("{PHASE}.tmp")] {
        match std::fs::remove_file(dir.join(&file)) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                tracing::warn!(dir = %dir.display(), "cannot remove {file}: {e}");
            }
            _ => {}
        }
    }
}

/// Step 4: the copy's files to the top, then the leftovers removed.
fn swap_in(dir: &Path) -> Result<(), StoreError> {
    let copy = dir.join(COPY);
    if copy.exists() {
        move_sled_files(&copy, dir)?;
    }
    sync_dir_only(dir)?;
    remove_dir(&copy)?;
    remove_dir(&dir.join(OLD))?;
    match std::fs::remove_file(dir.join(PHASE)) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
            return Err(dir_error(dir, "remove the compaction phase", e));
        }
        _ => {}
    }
    sync_dir_only(dir)?;
    tracing::info!(dir = %dir.display(), "compacted store swapped in");
    Ok(())
}

/// Moves sled's files (`conf`, `db`, `snap.*`, `blobs/`) from `from` to
/// `to` (created if missing), replacing what is there.
fn move_sled_files(from: &Path, to: &Path) -> Result<(), StoreError> {
    std::fs::create_dir_all(to).map_err(|e| dir_error(to, "create a directory", e))?;
    let entries = std::fs::read_dir(from).map_err(|e| dir_error(from, "list", e))?;
    for entry in entries {
        let entry = entry.map_err(|e| dir_error(from, "list", e))?;
        let name = entry.file_name();
        let s = name.to_string_lossy();
        if !(s == "conf" || s == "db" || s == "blobs" || s.starts_with("snap.")) {
            continue;
        }
        let target = to.join(&name);
        if target.is_dir() {
            std::fs::remove_dir_all(&target).map_err(|e| dir_error(to, "remove", e))?;
        }
        std::fs::rename(entry.path(), &target).map_err(|e| dir_error(to, "move a file", e))?;
    }
    sync_dir_only(to)
}

/// Writes [`PHASE`] through a temporary and a rename, and fsyncs.
fn write_phase(dir: &Path, phase: &str) -> Result<(), StoreError> {
    let tmp = dir.join(format!("{PHASE}.tmp"));
    std::fs::write(&tmp, phase)
        .and_then(|()| std::fs::File::open(&tmp)?.sync_all())
        .and_then(|()| std::fs::rename(&tmp, dir.join(PHASE)))
        .map_err(|e| dir_error(dir, "write the compaction phase", e))?;
    sync_dir_only(dir)
}

fn remove_dir(path: &Path) -> Result<(), StoreError> {
    match std::fs::remove_dir_all(path) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
            Err(dir_error(path, "remove a leftover of a compaction", e))
        }
        _ => Ok(()),
    }
}

/// Fsyncs the directory itself (its entries), not its files.
pub(super) fn sync_dir_only(dir: &Path) -> Result<(), StoreError> {
    std::fs::File::open(dir)
        .and_then(|f| f.sync_all())
        .map_err(|source| StoreError::Sync {
            path: dir.to_owned(),
            source,
        })
}

fn dir_error(path: &Path, op: &'static str, source: std::io::Error) -> StoreError {
    StoreError::DataDir {
        path: path.to_owned(),
        op,
        source,
    }
}

/// Bytes of the files under `dir`, recursively: a data directory's size
/// as compaction decides on it and reports it (and the benchmarks and
/// tests measure it).
pub fn dir_size(dir: &Path) -> u64 {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    entries
        .filter_map(Result::ok)
        .map(|e| match e.file_type() {
            Ok(t) if t.is_dir() => dir_size(&e.path()),
            Ok(_) => e.metadata().map(|m| m.len()).unwrap_or(0),
            Err(_) => 0,
        })
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::StoreConfig;
    use crate::store::{Store, retained_writes};

    fn config(dir: &Path) -> StoreConfig {
        StoreConfig {
            data_dir: dir.join("data"),
            cache_capacity_mb: 8,
            ..StoreConfig::default()
        }
    }

    /// `n` retained records of `size` bytes written, then all but `keep`
    /// deleted, through the writer as the broker does it.
    fn fill_and_delete(cfg: &StoreConfig, n: u32, size: usize, keep: u32) {
        let store = Store::open(cfg).unwrap();
        let mut writer = store.start_writer(cfg).unwrap();
        let h = writer.handle();
        let body = vec![7u8; size];
        let mut waits = Vec::new();
        for i in 0..n {
            let w =
                retained_writes::put(&format!("t/{i}"), u64::from(i), &Default::default(), &body);
            waits.push(h.submit(vec![w]).unwrap());
        }
        for i in keep..n {
            waits.push(
                h.submit(vec![retained_writes::delete(&format!("t/{i}"))])
                    .unwrap(),
            );
        }
        actix_rt::System::new().block_on(async {
            for w in waits {
                w.await.unwrap();
            }
        });
        assert!(writer.close(std::time::Duration::from_secs(10)));
        store.close().unwrap();
    }

    fn topics(store: &Store) -> Vec<String> {
        let mut got: Vec<String> = store
            .load_retained()
            .unwrap()
            .into_iter()
            .map(|r| r.topic)
            .collect();
        got.sort();
        got
    }

    #[test]
    fn a_start_compacts_a_mostly_deleted_store_and_keeps_what_is_live() {
        let tmp = tempfile::tempdir().unwrap();
        let cfg = config(tmp.path());
        fill_and_delete(&cfg, 20_000, 1024, 10);
        let before = dir_size(&cfg.data_dir);
        assert!(before > 16 << 20, "the deletes left {before} bytes");
        let recovered = Store::recover(&cfg, |_| 100).unwrap();
        let after = dir_size(&cfg.data_dir);
        assert!(after * 4 < before, "{before} -> {after} bytes");
        assert_eq!(recovered.retained.len(), 10);
        assert_eq!(topics(&recovered.store).len(), 10);
        for name in [COPY, OLD, PHASE] {
            assert!(!cfg.data_dir.join(name).exists(), "{name} left behind");
        }
        recovered.store.close().unwrap();
        drop(recovered);
        // Without compact_at_start nothing is rewritten.
        let off = StoreConfig {
            compact_at_start: false,
            ..cfg.clone()
        };
        fill_and_delete(&off, 20_000, 1024, 10);
        let big = dir_size(&off.data_dir);
        drop(Store::recover(&off, |_| 100).unwrap());
        assert!(dir_size(&off.data_dir) * 4 > big);
    }

    #[test]
    fn a_store_that_is_mostly_live_is_left_alone() {
        let tmp = tempfile::tempdir().unwrap();
        let cfg = config(tmp.path());
        fill_and_delete(&cfg, 20_000, 1024, 20_000);
        let recovered = Store::recover(&cfg, |_| 100).unwrap();
        assert_eq!(recovered.retained.len(), 20_000);
        assert!(!cfg.data_dir.join(COPY).exists());
    }

    #[test]
    fn an_interrupted_compaction_is_finished_or_undone_at_the_next_open() {
        let tmp = tempfile::tempdir().unwrap();
        let cfg = StoreConfig {
            compact_at_start: false,
            ..config(tmp.path())
        };
        fill_and_delete(&cfg, 2_000, 256, 5);
        let expected: Vec<String> = (0..5).map(|i| format!("t/{i}")).collect();
        let mut want = expected.clone();
        want.sort();

        // A crash during the copy: no phase written, the copy is removed.
        {
            let store = Store::open(&cfg).unwrap();
            copy(&store.db, &store.path, 8 << 20).unwrap();
            std::fs::remove_file(cfg.data_dir.join(PHASE)).unwrap();
        }
        let store = Store::open(&cfg).unwrap();
        assert!(!cfg.data_dir.join(COPY).exists());
        assert_eq!(topics(&store), want);
        drop(store);

        // A crash after the copy was complete: the swap is finished.
        {
            let store = Store::open(&cfg).unwrap();
            copy(&store.db, &store.path, 8 << 20).unwrap();
        }
        let store = Store::open(&cfg).unwrap();
        assert!(!cfg.data_dir.join(PHASE).exists());
        assert_eq!(topics(&store), want);
        drop(store);

        // A crash halfway through moving the old files aside.
        {
            let store = Store::open(&cfg).unwrap();
            copy(&store.db, &store.path, 8 << 20).unwrap();
            std::fs::create_dir_all(cfg.data_dir.join(OLD)).unwrap();
            std::fs::rename(
                cfg.data_dir.join("conf"),
                cfg.data_dir.join(OLD).join("conf"),
            )
            .unwrap();
        }
        let store = Store::open(&cfg).unwrap();
        assert_eq!(topics(&store), want);
        drop(store);

        // A crash halfway through moving the copy in.
        {
            let store = Store::open(&cfg).unwrap();
            copy(&store.db, &store.path, 8 << 20).unwrap();
            move_sled_files(&cfg.data_dir, &cfg.data_dir.join(OLD)).unwrap();
            write_phase(&cfg.data_dir, "swapping").unwrap();
            std::fs::rename(cfg.data_dir.join(COPY).join("db"), cfg.data_dir.join("db")).unwrap();
        }
        let store = Store::open(&cfg).unwrap();
        assert_eq!(topics(&store), want);
        for name in [COPY, OLD, PHASE] {
            assert!(!cfg.data_dir.join(name).exists(), "{name} left behind");
        }
        drop(store);

        // A phase that names no step is damage, said as such.
        std::fs::write(cfg.data_dir.join(PHASE), "half").unwrap();
        let err = Store::open(&cfg).unwrap_err();
        assert!(matches!(err, StoreError::Damaged { .. }), "{err}");
    }

    #[test]
    fn a_copy_that_cannot_be_made_leaves_the_store_to_start_as_it_was() {
        let tmp = tempfile::tempdir().unwrap();
        let cfg = config(tmp.path());
        fill_and_delete(&cfg, 20_000, 1024, 10);
        let before = dir_size(&cfg.data_dir);
        // A file where the copy's directory goes: the copy fails.
        std::fs::write(cfg.data_dir.join(COPY), b"in the way").unwrap();
        let recovered = Store::recover(&cfg, |_| 100).unwrap();
        assert_eq!(recovered.retained.len(), 10);
        // Not compacted: nothing copied or swapped. (The files' size says
        // nothing here: sled may give back free segments at the end of
        // its file when it opens it.)
        assert_eq!(
            std::fs::read(cfg.data_dir.join(COPY)).unwrap(),
            b"in the way"
        );
        for name in [OLD, PHASE] {
            assert!(!cfg.data_dir.join(name).exists(), "{name}");
        }
        recovered.store.close().unwrap();
        drop(recovered);
        // Out of the way, the next start compacts.
        std::fs::remove_file(cfg.data_dir.join(COPY)).unwrap();
        let recovered = Store::recover(&cfg, |_| 100).unwrap();
        assert_eq!(recovered.retained.len(), 10);
        assert!(dir_size(&cfg.data_dir) * 4 < before, "compacted");
    }

    #[test]
    fn compact_on_demand_gives_the_space_back() {
        let tmp = tempfile::tempdir().unwrap();
        let cfg = StoreConfig {
            compact_at_start: false,
            ..config(tmp.path())
        };
        fill_and_delete(&cfg, 5_000, 1024, 3);
        let store = Store::open(&cfg).unwrap();
        let (store, done) = store.compact(&cfg).unwrap();
        assert_eq!(done.after, dir_size(&cfg.data_dir));
        assert!(done.after * 2 < done.before, "{done:?}");
        assert!(done.records >= 3 && done.live_bytes > 3 * 1024, "{done:?}");
        assert_eq!(topics(&store).len(), 3);
    }

    /// 64 B queue messages enqueued through the writer in waves of 256 in
    /// flight (publishers that wait for their confirmations), as the
    /// broker writes them: sled's log keeps whatever it superseded until
    /// cleaned, and its cleaner runs only in the flusher thread Wharf
    /// turns off, so without the writer's cleaning the file came to 2.7x
    /// the records here; with it, 2.0x (the bound is between the two; at
    /// a million messages it is 1.7x, as the segments sled keeps in
    /// flight weigh less). The compaction copy, written the same way
    /// without cleaning, was no smaller.
    #[test]
    fn the_writer_and_the_compaction_copy_clean_the_log_as_they_write() {
        use crate::store::queues::{StoredMessage, put_message};
        let tmp = tempfile::tempdir().unwrap();
        let cfg = config(tmp.path());
        let store = Store::open(&cfg).unwrap();
        let mut writer = store.start_writer(&cfg).unwrap();
        let h = writer.handle();
        let mut live = 0;
        actix_rt::System::new().block_on(async {
            for wave in 0..200u64 {
                let mut waits = Vec::new();
                for i in 0..256 {
                    let w = put_message(
                        1,
                        &StoredMessage {
                            seq: wave * 256 + i + 1,
                            priority: 0,
                            headers: Default::default(),
                            payload: bytes::Bytes::from(vec![0x5a; 64]),
                            enqueued_ms: 1_795_000_000_000 + wave,
                            expires_ms: 0,
                            deliveries: 0,
                            not_before_ms: 0,
                        },
                    );
                    if let super::super::write::Write::Put { key, value, .. } = &w {
                        live += (key.len() + value.len()) as u64;
                    }
                    waits.push(h.submit(vec![w]).unwrap());
                }
                for w in waits {
                    w.await.unwrap();
                }
            }
        });
        assert!(writer.close(std::time::Duration::from_secs(10)));
        let written = dir_size(&cfg.data_dir);
        assert!(
            written * 10 < live * 24,
            "{written} bytes on disk for {live} bytes of records"
        );
        copy(&store.db, &store.path, 8 << 20).unwrap();
        let copied = dir_size(&cfg.data_dir.join(COPY));
        assert!(
            copied * 10 < live * 24,
            "a copy of {copied} bytes for {live} bytes of records"
        );
    }
}
