//! Opening the store at start and closing it at shutdown, saying what
//! happened to the data in between.
//!
//! [`Store::recover`] opens the database and reads everything back on a
//! thread of its own, so that a panic inside sled (it panics on some
//! damaged files) becomes [`StoreError::Damaged`] instead of taking the
//! process down. It then compares what it read with what the marker says
//! the last run left: after a crash it logs what was recovered; after a
//! clean shutdown it logs what is missing, if anything is.
//! [`Store::close`] records the counts and the clean shutdown.

use std::sync::Once;

use super::dir::{self, Counts, State};
use super::jobs::StoredJob;
use super::queues::LoadedQueues;
use super::{HistoryRecord, Previous, RetainedRecord, Store, StoreError};
use crate::config::StoreConfig;

/// The name of the thread that opens the store; its panics are caught and
/// not printed (see [`quiet_open_panics`]).
const OPEN_THREAD: &str = "wharf-store-open";

/// Everything the store held at start.
#[derive(Debug)]
pub struct Recovered {
    /// The open store.
    pub store: Store,
    /// Retained messages.
    pub retained: Vec<RetainedRecord>,
    /// Queues with their first messages.
    pub queues: LoadedQueues,
    /// Job records.
    pub jobs: Vec<StoredJob>,
    /// Topics' history.
    pub history: Vec<HistoryRecord>,
    /// Whether the last run ended without a recorded clean shutdown (a
    /// crash, a kill, a store adopted without a marker): what was kept
    /// only in memory then is lost, and topics' history epochs change.
    pub unclean: bool,
}

impl Recovered {
    /// How much was read back.
    fn counts(&self) -> Counts {
        Counts {
            queues: self.queues.queues.len() as u64,
            messages: message_count(&self.queues),
            jobs: self.jobs.len() as u64,
            retained: self.retained.len() as u64,
        }
    }
}

fn message_count(loaded: &LoadedQueues) -> u64 {
    loaded
        .queues
        .iter()
        .map(|q| q.messages.len() as u64 + q.spilled.iter().sum::<u64>())
        .sum()
}

impl Store {
    /// Opens the store in `config.data_dir` and reads it back (retained
    /// messages, queues with `window(name)` messages each in memory, jobs),
    /// on a thread whose panic is reported as [`StoreError::Damaged`].
    /// Logs at WARN what was recovered after an unclean shutdown, or what
    /// is missing after a clean one.
    ///
    /// # Errors
    /// Whatever [`Store::open`] and the loaders return, or
    /// [`StoreError::Damaged`] if sled panicked.
    pub fn recover(
        config: &StoreConfig,
        window: impl Fn(&str) -> usize + Send + 'static,
    ) -> Result<Recovered, StoreError> {
        quiet_open_panics();
        let config = config.clone();
        let path = config.data_dir.clone();
        let opening = std::thread::Builder::new()
            .name(OPEN_THREAD.into())
            .spawn(move || {
                let store = Store::open(&config)?;
                let retained = store.load_retained()?;
                let queues = store.load_queues(window)?;
                let jobs = store.load_jobs()?;
                let history = store.load_history()?;
                let unclean = matches!(store.previous, Previous::Unclean | Previous::Adopted);
                // What was read is what a compaction would copy.
                let store = store.compact_if_worth(&config)?;
                Ok::<_, StoreError>(Recovered {
                    store,
                    retained,
                    queues,
                    jobs,
                    history,
                    unclean,
                })
            })
            .map_err(|source| StoreError::DataDir {
                path: path.clone(),
                op: "start the thread that opens the store",
                source,
            })?;
        let recovered = match opening.join() {
            Ok(result) => result?,
            Err(panic) => {
                let what = panic
                    .downcast_ref::<&str>()
                    .map(|s| (*s).to_owned())
                    .or_else(|| panic.downcast_ref::<String>().cloned())
                    .unwrap_or_else(|| "no message".into());
                return Err(StoreError::Damaged {
                    path,
                    file: "db",
                    detail: format!("cannot be read by sled (it panicked: {what})"),
                });
            }
        };
        report(&recovered);
        recovered.store.mark_open()?;
        Ok(recovered)
    }

    /// Records a clean shutdown: counts what the store holds (one pass
    /// over every tree, keeping nothing), syncs it,
    /// and writes the counts to the marker, so that the next open can tell
    /// a crash or lost data. Call it once nothing writes any more (after
    /// the writer is closed); use [`Store::sync`] instead when the writer
    /// did not finish.
    ///
    /// # Errors
    /// A loader's error, [`StoreError::Sync`] or [`StoreError::DataDir`].
    pub fn close(&self) -> Result<(), StoreError> {
        // A window of 0 decodes only messages with a delivery state.
        let queues = self.load_queues(|_| 0)?;
        let counts = Counts {
            queues: queues.queues.len() as u64,
            messages: message_count(&queues),
            jobs: self.count_jobs()?,
            retained: self.count_retained()?,
        };
        self.sync()?;
        dir::write_marker(&self.path, State::Clean(counts))
    }
}

/// Logs what the last run left, compared with what was read back.
fn report(recovered: &Recovered) {
    let now = recovered.counts();
    match recovered.store.previous {
        Previous::Fresh | Previous::Adopted => {}
        Previous::Unclean => tracing::warn!(
            queues = now.queues,
            messages = now.messages,
            jobs = now.jobs,
            retained = now.retained,
            "the store was not shut down cleanly; recovered {} queues, {} messages, {} jobs, {} retained",
            now.queues,
            now.messages,
            now.jobs,
            now.retained
        ),
        Previous::Clean(then) => {
            let lost = |was: u64, is: u64| was.saturating_sub(is);
            let missing = Counts {
                queues: lost(then.queues, now.queues),
                messages: lost(then.messages, now.messages),
                jobs: lost(then.jobs, now.jobs),
                retained: lost(then.retained, now.retained),
            };
            if missing != Counts::default() {
                tracing::warn!(
                    "data is missing from the store at {}: the last clean shutdown left \
                     {} queues, {} messages, {} jobs, {} retained; found {} queues, \
                     {} messages, {} jobs, {} retained ({} queues, {} messages, {} jobs, \
                     {} retained missing); restore it from a backup if they matter",
                    recovered.store.path.display(),
                    then.queues,
                    then.messages,
                    then.jobs,
                    then.retained,
                    now.queues,
                    now.messages,
                    now.jobs,
                    now.retained,
                    missing.queues,
                    missing.messages,
                    missing.jobs,
                    missing.retained
                );
            }
        }
    }
}

/// Installs, once, a panic hook that keeps panics of the thread opening
/// the store off stderr (they are reported as [`StoreError::Damaged`]) and
/// hands every other panic to the hook that was installed before.
fn quiet_open_panics() {
    static INSTALL: Once = Once::new();
    INSTALL.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            if std::thread::current().name() == Some(OPEN_THREAD) {
                tracing::debug!("sled panicked while opening the store: {info}");
            } else {
                previous(info);
            }
        }));
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::queues;

    fn config(dir: &std::path::Path) -> StoreConfig {
        StoreConfig {
            data_dir: dir.join("data"),
            cache_capacity_mb: 8,
            ..StoreConfig::default()
        }
    }

    #[test]
    fn a_panic_while_loading_is_reported_as_damage() {
        let tmp = tempfile::tempdir().unwrap();
        let cfg = config(tmp.path());
        {
            let store = Store::open(&cfg).unwrap();
            let mut writer = store.start_writer(&cfg).unwrap();
            let done = writer
                .handle()
                .submit(vec![
                    queues::put_queue("a", 1, b"{}"),
                    crate::store::retained_writes::put("t", 1, &Default::default(), b"v"),
                    crate::store::jobs::put(&[7; 16], b"{}".to_vec()),
                ])
                .unwrap();
            actix_rt::System::new().block_on(done).unwrap();
            assert!(writer.close(std::time::Duration::from_secs(10)));
            store.close().unwrap();
        }
        match Store::recover(&cfg, |_| panic!("boom")) {
            Err(StoreError::Damaged {
                file: "db", detail, ..
            }) => {
                assert!(detail.contains("boom"), "{detail}");
            }
            other => panic!("expected damage, got {other:?}"),
        }
        // The store itself is fine and was recorded clean with what it holds.
        let recovered = Store::recover(&cfg, |_| 10).unwrap();
        assert_eq!(recovered.queues.queues.len(), 1);
        assert!(matches!(
            recovered.store.previous,
            Previous::Clean(Counts {
                queues: 1,
                messages: 0,
                jobs: 1,
                retained: 1
            })
        ));
    }

    #[test]
    fn a_sled_database_of_another_program_is_refused_untouched() {
        let tmp = tempfile::tempdir().unwrap();
        let cfg = config(tmp.path());
        {
            let db = sled::open(&cfg.data_dir).unwrap();
            db.insert(b"theirs", b"value").unwrap();
            db.flush().unwrap();
        }
        let files = |d: &std::path::Path| {
            let mut all: Vec<_> = std::fs::read_dir(d)
                .unwrap()
                .map(|e| e.unwrap().path())
                .filter(|p| p.is_file())
                .map(|p| (p.clone(), std::fs::read(p).unwrap()))
                .collect();
            all.sort();
            all
        };
        let before = files(&cfg.data_dir);
        match Store::open(&cfg) {
            Err(StoreError::Foreign { why, .. }) => assert!(why.contains("sled"), "{why}"),
            other => panic!("expected a refusal, got {other:?}"),
        }
        assert!(before == files(&cfg.data_dir), "its files changed");
        assert!(!cfg.data_dir.join(dir::MARKER).exists());
        assert!(!cfg.data_dir.join(dir::SCRATCH).exists());
        let db = sled::open(&cfg.data_dir).unwrap();
        assert!(!db.tree_names().iter().any(|n| n == b"meta"));
        assert_eq!(db.get(b"theirs").unwrap().as_deref(), Some(&b"value"[..]));
    }
}
