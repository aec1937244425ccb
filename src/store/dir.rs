//! The data directory before sled sees it: Wharf's marker file, and the
//! decision whether a directory is ours to open.
//!
//! sled creates its files in any directory it is given and overwrites a
//! `db` it cannot read, so nothing reaches sled before [`inspect`] has
//! decided: a missing or empty directory is new; a directory with the
//! marker is ours; a directory without it is adopted only if it holds
//! nothing but sled's files and a readable `conf`, and a copy of them
//! opened by sled has Wharf's schema key; anything else is refused,
//! untouched.
//!
//! The marker (`WHARF_STORE`) is a small text file. It carries the schema
//! version and the state of the last run: `new` (created, first open not
//! finished), `open` (running, or it crashed), or `clean` (closed by a
//! graceful shutdown, with the counts of what the store held then). It is
//! rewritten only at open and at close, by write-to-temporary and rename.

use std::io::Write as _;
use std::path::{Path, PathBuf};

use super::{SCHEMA_VERSION, StoreError};

/// The marker's file name.
pub const MARKER: &str = "WHARF_STORE";
/// The temporary a marker is written to before the rename.
const MARKER_TMP: &str = "WHARF_STORE.tmp";
/// The scratch directory an unmarked store is copied to, to look at it
/// with sled without changing it (see [`copy_for_probe`]).
pub const SCRATCH: &str = "WHARF_STORE.check";

/// How much a store holds: written at a clean shutdown, compared at the
/// next open.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counts {
    /// Queues.
    pub queues: u64,
    /// Queue messages (in memory and spilled).
    pub messages: u64,
    /// Job records.
    pub jobs: u64,
    /// Retained messages.
    pub retained: u64,
}

/// The state a marker records.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum State {
    /// Created; the first open has not finished (sled's files may be
    /// missing or empty).
    New,
    /// Opened and not closed cleanly since.
    Open,
    /// Closed by a graceful shutdown holding these counts.
    Clean(Counts),
}

/// What [`inspect`] decided about a data directory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Found {
    /// Missing or empty: created, marker written (state `new`).
    Fresh,
    /// Marked: the state of the last run.
    Marked(State),
    /// No marker, but only sled's files with a readable `conf`: the caller
    /// looks for the schema key in a copy ([`copy_for_probe`]), then
    /// writes the marker.
    Unmarked,
}

/// Decides whether `dir` may be handed to sled (see the module doc).
/// Writes only the marker of a fresh directory.
///
/// # Errors
/// [`StoreError::Foreign`], [`StoreError::Damaged`],
/// [`StoreError::SchemaMismatch`] or [`StoreError::DataDir`].
pub fn inspect(dir: &Path) -> Result<Found, StoreError> {
    let io = |op: &'static str| {
        move |source| StoreError::DataDir {
            path: dir.to_owned(),
            op,
            source,
        }
    };
    match std::fs::metadata(dir) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            std::fs::create_dir_all(dir).map_err(io("create the data directory"))?;
            write_marker(dir, State::New)?;
            return Ok(Found::Fresh);
        }
        Err(e) => return Err(io("read the data directory")(e)),
        Ok(m) if !m.is_dir() => {
            return Err(StoreError::Foreign {
                path: dir.to_owned(),
                files: Vec::new(),
                why: "it is a file, not a directory",
            });
        }
        Ok(_) => {}
    }
    let mut names = Vec::new();
    for entry in std::fs::read_dir(dir).map_err(io("list the data directory"))? {
        let entry = entry.map_err(io("list the data directory"))?;
        names.push(entry.file_name().to_string_lossy().into_owned());
    }
    names.sort();
    if names.iter().any(|n| n == MARKER) {
        let state = read_marker(dir)?;
        if state != State::New {
            check_sled_files(dir, true)?;
        }
        return Ok(Found::Marked(state));
    }
    // A temporary left by a crash while the marker of a fresh store was
    // being written, or while an unmarked store was being looked at, is
    // ours.
    if names.iter().any(|n| n == SCRATCH) {
        remove_scratch(dir);
    }
    names.retain(|n| n != MARKER_TMP && n != SCRATCH);
    if names.is_empty() {
        write_marker(dir, State::New)?;
        return Ok(Found::Fresh);
    }
    let foreign: Vec<String> = names
        .iter()
        .filter(|n| !is_sled_name(dir, n))
        .cloned()
        .collect();
    if !foreign.is_empty() {
        return Err(StoreError::Foreign {
            path: dir.to_owned(),
            files: foreign,
            why: "it holds files Wharf did not create",
        });
    }
    check_sled_files(dir, false).map_err(|e| match e {
        StoreError::Damaged { .. } => StoreError::Foreign {
            path: dir.to_owned(),
            files: names,
            why: "it has no WHARF_STORE marker and its files are not a complete sled database",
        },
        other => other,
    })?;
    Ok(Found::Unmarked)
}

/// Copies sled's `conf`, `db` and `snap.*` of `dir` into a fresh
/// [`SCRATCH`] directory inside it and returns its path: sled rewrites
/// parts of a database it opens (and all of one it cannot read), so an
/// unmarked store is looked at in a copy. Blobs are not copied: the schema
/// key is small and never in one. On Linux the copy is done in the kernel
/// (`copy_file_range`), a reflink where the file system has them.
///
/// # Errors
/// [`StoreError::DataDir`] (no space for the copy, for one).
pub fn copy_for_probe(dir: &Path) -> Result<PathBuf, StoreError> {
    let io = |op: &'static str| {
        move |source| StoreError::DataDir {
            path: dir.to_owned(),
            op,
            source,
        }
    };
    let scratch = dir.join(SCRATCH);
    remove_scratch(dir);
    std::fs::create_dir(&scratch).map_err(io("create a scratch copy of the store"))?;
    for entry in std::fs::read_dir(dir).map_err(io("list the data directory"))? {
        let entry = entry.map_err(io("list the data directory"))?;
        let name = entry.file_name().to_string_lossy().into_owned();
        if name == "conf" || name == "db" || (name.starts_with("snap.") && !entry.path().is_dir()) {
            if let Err(e) = std::fs::copy(entry.path(), scratch.join(&name)) {
                remove_scratch(dir);
                return Err(io("copy the store to look at it")(e));
            }
        }
    }
    Ok(scratch)
}

/// Removes the [`SCRATCH`] copy, if any; a failure is only logged (the
/// next open removes it).
pub fn remove_scratch(dir: &Path) {
    match std::fs::remove_dir_all(dir.join(SCRATCH)) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
            tracing::warn!(dir = %dir.display(), "cannot remove {SCRATCH}: {e}");
        }
        _ => {}
    }
}

/// sled's own names: `conf`, `db`, `blobs/`, `snap.*` (files).
fn is_sled_name(dir: &Path, name: &str) -> bool {
    let is_dir = dir.join(name).is_dir();
    match name {
        "blobs" => is_dir,
        "conf" | "db" => !is_dir,
        _ => name.starts_with("snap.") && !is_dir,
    }
}

/// `conf` must hold sled's parameters and `db` must not be empty.
fn check_sled_files(dir: &Path, marked: bool) -> Result<(), StoreError> {
    let damaged = |file: &'static str, detail: String| StoreError::Damaged {
        path: dir.to_owned(),
        file,
        detail,
    };
    // A missing file is damage; any other failure (permissions) is the
    // directory's.
    let unreadable = |file: &'static str, op: &'static str| {
        move |e: std::io::Error| {
            if e.kind() == std::io::ErrorKind::NotFound {
                damaged(file, "is missing".into())
            } else {
                StoreError::DataDir {
                    path: dir.to_owned(),
                    op,
                    source: e,
                }
            }
        }
    };
    let conf = std::fs::read(dir.join("conf")).map_err(unreadable("conf", "read conf"))?;
    if let Err(detail) = check_conf(&conf) {
        return Err(damaged("conf", detail));
    }
    match std::fs::metadata(dir.join("db")) {
        Ok(m) if m.len() == 0 => Err(damaged(
            "db",
            if marked {
                "is empty (0 bytes), though the marker says the store was written".into()
            } else {
                "is empty (0 bytes)".into()
            },
        )),
        Ok(_) => Ok(()),
        Err(e) => Err(unreadable("db", "read db")(e)),
    }
}

/// sled 0.34's `conf`: text lines `segment_size: N`, `use_compression:
/// BOOL`, `version: A.B`, then a 4-byte checksum.
fn check_conf(bytes: &[u8]) -> Result<(), String> {
    let text = bytes
        .len()
        .checked_sub(4)
        .and_then(|n| std::str::from_utf8(&bytes[..n]).ok())
        .ok_or_else(|| {
            format!(
                "is not a sled configuration ({} bytes, not text)",
                bytes.len()
            )
        })?;
    for key in ["segment_size", "use_compression", "version"] {
        let found = text.lines().any(|line| {
            line.split_once(": ")
                .is_some_and(|(k, v)| k == key && !v.is_empty())
        });
        if !found {
            return Err(format!("is not a sled configuration (no `{key}`)"));
        }
    }
    Ok(())
}

/// Reads and checks the marker.
fn read_marker(dir: &Path) -> Result<State, StoreError> {
    let path = dir.join(MARKER);
    let text = std::fs::read_to_string(&path).map_err(|e| {
        if e.kind() == std::io::ErrorKind::InvalidData {
            StoreError::Damaged {
                path: dir.to_owned(),
                file: MARKER,
                detail: "is not text".into(),
            }
        } else {
            StoreError::DataDir {
                path: dir.to_owned(),
                op: "read the WHARF_STORE marker",
                source: e,
            }
        }
    })?;
    let bad = |detail: String| StoreError::Damaged {
        path: dir.to_owned(),
        file: MARKER,
        detail,
    };
    let mut schema = None;
    let mut state = None;
    let mut counts = Counts::default();
    for line in text.lines().map(str::trim) {
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let Some((key, value)) = line.split_once('=').map(|(k, v)| (k.trim(), v.trim())) else {
            return Err(bad(format!(
                "has a line that is not `key = value`: {line:?}"
            )));
        };
        let number = || {
            value
                .parse::<u64>()
                .map_err(|_| bad(format!("has a bad number for `{key}`: {value:?}")))
        };
        match key {
            "schema" => schema = Some(number()?),
            "state" => state = Some(value.to_owned()),
            "queues" => counts.queues = number()?,
            "messages" => counts.messages = number()?,
            "jobs" => counts.jobs = number()?,
            "retained" => counts.retained = number()?,
            _ => return Err(bad(format!("has an unknown key `{key}`"))),
        }
    }
    let schema = schema.ok_or_else(|| bad("has no `schema` line".into()))?;
    if schema != u64::from(SCHEMA_VERSION) {
        return Err(StoreError::SchemaMismatch {
            path: dir.to_owned(),
            found: u32::try_from(schema).unwrap_or(u32::MAX),
            expected: SCHEMA_VERSION,
        });
    }
    match state.as_deref() {
        Some("new") => Ok(State::New),
        Some("open") => Ok(State::Open),
        Some("clean") => Ok(State::Clean(counts)),
        other => Err(bad(format!("has an unknown state {other:?}"))),
    }
}

/// Writes the marker with `state`: to a temporary, synced, renamed over
/// the marker, then the directory synced.
///
/// # Errors
/// [`StoreError::DataDir`].
pub fn write_marker(dir: &Path, state: State) -> Result<(), StoreError> {
    let mut text = format!(
        "# This directory is a Wharf store: sled's files (conf, db, blobs/, snap.*)\n\
         # and this marker. Wharf refuses a directory without this file that holds\n\
         # other files. Written at open and at a clean shutdown.\n\
         schema = {SCHEMA_VERSION}\n"
    );
    match state {
        State::New => text.push_str("state = new\n"),
        State::Open => text.push_str("state = open\n"),
        State::Clean(c) => text.push_str(&format!(
            "state = clean\nqueues = {}\nmessages = {}\njobs = {}\nretained = {}\n",
            c.queues, c.messages, c.jobs, c.retained
        )),
    }
    let tmp: PathBuf = dir.join(MARKER_TMP);
    let io = |op: &'static str| {
        move |source| StoreError::DataDir {
            path: dir.to_owned(),
            op,
            source,
        }
    };
    let mut f = std::fs::File::create(&tmp).map_err(io("write the WHARF_STORE marker"))?;
    f.write_all(text.as_bytes())
        .and_then(|()| f.sync_all())
        .map_err(io("write the WHARF_STORE marker"))?;
    std::fs::rename(&tmp, dir.join(MARKER)).map_err(io("rename the WHARF_STORE marker"))?;
    std::fs::File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(io("sync the data directory"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn marker_round_trips() {
        let tmp = tempfile::tempdir().unwrap();
        let counts = Counts {
            queues: 1,
            messages: 2,
            jobs: 3,
            retained: 4,
        };
        for state in [State::New, State::Open, State::Clean(counts)] {
            write_marker(tmp.path(), state).unwrap();
            assert_eq!(read_marker(tmp.path()).unwrap(), state);
        }
    }

    #[test]
    fn a_foreign_file_is_refused_and_kept() {
        let tmp = tempfile::tempdir().unwrap();
        std::fs::write(tmp.path().join("notes.txt"), b"mine").unwrap();
        match inspect(tmp.path()) {
            Err(StoreError::Foreign { files, .. }) => assert_eq!(files, ["notes.txt"]),
            other => panic!("expected a refusal, got {other:?}"),
        }
        assert!(!tmp.path().join(MARKER).exists());
    }

    #[test]
    fn a_bad_or_newer_marker_is_refused() {
        let tmp = tempfile::tempdir().unwrap();
        std::fs::write(tmp.path().join(MARKER), b"\xff\x00 junk").unwrap();
        match inspect(tmp.path()) {
            Err(StoreError::Damaged { file: MARKER, .. }) => {}
            other => panic!("expected damage, got {other:?}"),
        }
        std::fs::write(tmp.path().join(MARKER), b"schema = 9\nstate = open\n").unwrap();
        match inspect(tmp.path()) {
            Err(StoreError::SchemaMismatch { found: 9, .. }) => {}
            other => panic!("expected a schema mismatch, got {other:?}"),
        }
    }

    #[test]
    fn sled_conf_is_recognised() {
        let good = b"segment_size: 524288\nuse_compression: false\nversion: 0.34\n\x01\x02\x03\x04";
        assert!(check_conf(good).is_ok());
        assert!(check_conf(b"\xff\xfe garbage bytes").is_err());
        assert!(check_conf(b"abc").is_err());
    }
}
