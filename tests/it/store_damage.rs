//! Damaged and foreign data directories, with the real binary: a directory
//! holding files Wharf did not write is refused and left as it was; a
//! damaged store file is named and the broker exits with status 1 (no
//! panic); a store of an earlier Wharf without the marker is adopted; a
//! store that was not shut down cleanly, or lost data since, says so; a
//! directory another wharf is running on is refused in plain words.

use crate::common;

use std::path::Path;
use std::time::Duration;

use common::{ChildBroker, block_on};
use wharf::client::{Client, ClientOptions, EnqueueOptions};

const MARKER: &str = "WHARF_STORE";
const START: Duration = Duration::from_secs(20);

/// `n` bytes that look random (xorshift), the same for the same seed.
fn noise(n: usize, mut seed: u64) -> Vec<u8> {
    (0..n)
        .map(|_| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed as u8
        })
        .collect()
}

/// Starts the binary on `data`, expects it to refuse to start: returns its
/// stderr after checking the exit status is 1 and that no panic leaked.
fn refused(data: &Path) -> String {
    let mut broker = ChildBroker::serve(data);
    let (log, listening) = broker.read_until("listening on", START);
    assert!(!listening, "it started:\n{log}");
    let status = broker.wait_exit(Duration::from_secs(10));
    assert_eq!(status.code(), Some(1), "{log}");
    for leak in ["panicked", "Blocking thread pool", "RUST_BACKTRACE"] {
        assert!(!log.contains(leak), "{leak:?} in:\n{log}");
    }
    log
}

/// Starts the binary on `data` and waits until it listens: the broker,
/// its address and the log up to the listening line.
fn started(data: &Path) -> (ChildBroker, String, String) {
    let broker = ChildBroker::serve(data);
    let (log, listening) = broker.read_until("listening on", START);
    assert!(listening, "it did not start:\n{log}");
    let addr = log
        .split("listening on ")
        .nth(1)
        .and_then(|rest| rest.split_whitespace().next())
        .expect("an address")
        .to_owned();
    (broker, format!("ws://{addr}/ws"), log)
}

/// Stops the broker with SIGTERM and waits for a clean exit.
fn stop(mut broker: ChildBroker) {
    broker.signal("TERM");
    assert!(broker.wait_exit(Duration::from_secs(20)).success());
}

/// Enqueues `n` messages `m0..` on queue `q`, each confirmed.
fn enqueue(url: &str, n: usize) {
    let url = url.to_owned();
    block_on(async move {
        let c = Client::connect(&url, ClientOptions::default())
            .await
            .unwrap();
        let mut waits = Vec::new();
        for i in 0..n {
            let payload = format!("m{i}").into_bytes();
            let w = c
                .enqueue_pipelined("q", payload, EnqueueOptions::default())
                .await
                .unwrap();
            waits.push(w);
        }
        for w in waits {
            w.await.unwrap();
        }
    });
}

/// A store with `n` queue messages, stopped gracefully.
fn store_with(data: &Path, n: usize) {
    let (broker, url, _) = started(data);
    enqueue(&url, n);
    stop(broker);
}

#[test]
fn a_second_wharf_on_the_same_directory_is_refused_in_plain_words() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let (first, url, _) = started(&data);
    let log = refused(&data);
    assert!(
        log.contains(data.to_str().unwrap()),
        "names the dir:\n{log}"
    );
    assert!(
        log.contains("in use by another process (another wharf"),
        "{log}"
    );
    assert!(log.contains("--data-dir"), "says what to do:\n{log}");
    assert!(!log.contains("WouldBlock"), "no raw OS error:\n{log}");
    // The first one is untouched: it still serves and stops cleanly.
    enqueue(&url, 1);
    stop(first);
}

#[test]
fn a_foreign_db_file_is_refused_and_left_unchanged() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    std::fs::create_dir(&data).unwrap();
    let bytes = noise(1 << 20, 7);
    std::fs::write(data.join("db"), &bytes).unwrap();
    let log = refused(&data);
    assert!(log.contains("refusing to use"), "{log}");
    assert!(log.contains(data.to_str().unwrap()), "{log}");
    assert_eq!(std::fs::read(data.join("db")).unwrap(), bytes);
    let names: Vec<_> = std::fs::read_dir(&data)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(names, ["db"], "nothing was added");
}

#[test]
fn an_unrelated_file_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    std::fs::create_dir(&data).unwrap();
    std::fs::write(data.join("notes.txt"), b"my notes").unwrap();
    let log = refused(&data);
    assert!(log.contains("notes.txt"), "{log}");
    assert!(!data.join(MARKER).exists());
    assert!(!data.join("conf").exists());
}

#[test]
fn garbage_in_db_is_reported_as_damage_of_db() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    store_with(&data, 10);
    std::fs::write(data.join("db"), noise(200, 11)).unwrap();
    let log = refused(&data);
    assert!(log.contains("is damaged: db"), "{log}");
    assert!(log.contains("backup"), "{log}");
}

#[test]
fn garbage_in_conf_is_reported_as_damage_of_conf() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    store_with(&data, 10);
    std::fs::write(data.join("conf"), noise(100, 13)).unwrap();
    let log = refused(&data);
    assert!(log.contains("is damaged: conf"), "{log}");
    assert!(!log.contains("0.29"), "{log}");
}

#[test]
fn an_emptied_db_is_refused_as_damaged() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    store_with(&data, 10);
    std::fs::write(data.join("db"), b"").unwrap();
    let log = refused(&data);
    assert!(log.contains("is damaged: db is empty"), "{log}");
}

#[test]
fn a_truncated_db_is_refused_or_reported_missing() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    store_with(&data, 3000);
    let db = std::fs::OpenOptions::new()
        .write(true)
        .open(data.join("db"))
        .unwrap();
    let len = db.metadata().unwrap().len();
    db.set_len(len / 3).unwrap();
    drop(db);
    let mut broker = ChildBroker::serve(&data);
    let (log, listening) = broker.read_until("listening on", START);
    if listening {
        assert!(
            log.contains("WARN") && log.contains("data is missing"),
            "started without a warning:\n{log}"
        );
        assert!(log.contains("3000 messages"), "{log}");
        eprintln!("started with: {log}");
    } else {
        let status = broker.wait_exit(Duration::from_secs(10));
        assert_eq!(status.code(), Some(1), "{log}");
        assert!(log.contains("is damaged: db"), "{log}");
        assert!(!log.contains("panicked"), "{log}");
        eprintln!("refused with: {log}");
    }
}

#[test]
fn a_store_of_an_earlier_wharf_is_adopted() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    store_with(&data, 500);
    // Stores written before the marker existed have none.
    std::fs::remove_file(data.join(MARKER)).unwrap();
    let (broker, url, log) = started(&data);
    assert!(
        log.contains("adopting a store written by an earlier Wharf"),
        "{log}"
    );
    assert!(data.join(MARKER).exists());
    let got = block_on(async move {
        let c = Client::connect(&url, ClientOptions::default())
            .await
            .unwrap();
        let mut k = c.consume("q", 1000).await.unwrap();
        let mut got = std::collections::BTreeSet::new();
        while got.len() < 500 {
            let Some(d) = k.recv_timeout(Duration::from_secs(10)).await else {
                break;
            };
            got.insert(String::from_utf8(d.payload).unwrap());
        }
        got
    });
    assert_eq!(got.len(), 500);
    assert!((0..500).all(|i| got.contains(&format!("m{i}"))));
    stop(broker);
}

#[test]
fn a_restart_after_kill_9_warns_with_what_was_recovered() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let (mut broker, url, _) = started(&data);
    enqueue(&url, 100);
    broker.signal("KILL");
    assert!(!broker.wait_exit(Duration::from_secs(10)).success());
    let (broker, _, log) = started(&data);
    // The queue `q` and the jobs' dead-letter queue.
    assert!(
        log.contains(
            "the store was not shut down cleanly; recovered 2 queues, 100 messages, \
             0 jobs, 0 retained"
        ),
        "{log}"
    );
    stop(broker);
    // A clean stop is recorded: the next start does not warn.
    let (broker, _, log) = started(&data);
    assert!(!log.contains("WARN"), "{log}");
    stop(broker);
}
