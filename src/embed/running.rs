//! How an embedded broker stops: the steps after the sessions are closed,
//! on a thread of their own and bounded, so a store that does not answer
//! cannot hold the process.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use super::Error;
use crate::broker::Broker;
use crate::store::{Store, StoreWriter};
use crate::taskq::Scheduler;

/// What a started broker owns and must stop, in order.
pub(super) struct Running {
    /// The broker, held until the rules' forwards have ended: they reach
    /// its queues (their dead letters) through a weak handle.
    pub(super) broker: Broker,
    /// The rules, whose forwards end first.
    pub(super) rules: std::sync::Arc<crate::rules::Rules>,
    pub(super) store: Store,
    pub(super) writer: StoreWriter,
    pub(super) scheduler: Scheduler,
    pub(super) sweeper: actix_rt::task::JoinHandle<()>,
    pub(super) ticker: actix_rt::task::JoinHandle<()>,
    /// The cluster link and its reconciler, when `[cluster]` is set.
    pub(super) cluster: Option<(crate::cluster::Cluster, actix_rt::task::JoinHandle<()>)>,
    /// Threads of embedded job workers.
    pub(super) threads: Vec<actix_rt::Arbiter>,
}

/// The steps of [`Running::stop`], in order; the stop records the one
/// it is in, so a stop that overruns its deadline says where.
const STOP_STEPS: [&str; 9] = [
    "leaving the cluster",
    "ending rules' forwards",
    "writing topic history",
    "stopping embedded worker threads",
    "stopping task queue workers",
    "closing the store writer",
    "closing the store",
    "syncing the store",
    "done",
];

impl Running {
    /// Topics finish their tasks, the writer commits what they handed it,
    /// then the database files are synced and, if everything finished,
    /// the clean shutdown is recorded. Blocking; `step` follows
    /// [`STOP_STEPS`].
    pub(super) fn stop(mut self, timeout: Duration, step: &AtomicUsize) -> Result<(), Error> {
        let started = std::time::Instant::now();
        let mark = |i: usize| {
            tracing::debug!(elapsed = ?started.elapsed(), "shutdown: {}", STOP_STEPS[i]);
            step.store(i, Ordering::Release);
        };
        mark(0);
        // First, so that what was published before the stop still
        // reaches the other nodes.
        if let Some((cluster, reconciler)) = self.cluster.take() {
            reconciler.abort();
            cluster.shutdown(timeout);
        }
        mark(1);
        self.rules.shutdown(timeout);
        mark(2);
        // Nothing publishes any more: the topics' history goes to the
        // writer whole, so the next start keeps its epochs.
        let history = self.flush_history(timeout);
        // The forwards are over: nothing needs the broker kept alive.
        drop(self.broker);
        self.sweeper.abort();
        self.ticker.abort();
        mark(3);
        for t in self.threads.drain(..) {
            t.stop();
            let _ = t.join();
        }
        mark(4);
        let workers = self.scheduler.shutdown(timeout);
        mark(5);
        let committed = self.writer.close(timeout);
        let result = if workers && committed && history {
            mark(6);
            self.store.close().map_err(Error::from)
        } else {
            // Not recorded as a clean shutdown: the next start says so.
            tracing::warn!(
                "task queue workers, topic history or the store writer did not finish before the deadline"
            );
            mark(7);
            self.store.sync().map_err(Error::from)
        };
        mark(8);
        result
    }

    /// Hands every topic's history to the store writer and waits for the
    /// topics to have done so, at most `timeout`. False if some history
    /// was left unwritten (then the shutdown is not recorded clean, and
    /// the next start gives topics new epochs).
    fn flush_history(&self, timeout: Duration) -> bool {
        // On a thread of its own with its own runtime: the stop may run
        // on a thread that drives one already (a drop inside the app's).
        let broker = self.broker.clone();
        let flushing = std::thread::Builder::new()
            .name("wharf-history".into())
            .spawn(move || {
                let runtime = tokio::runtime::Builder::new_current_thread()
                    .enable_time()
                    .build()
                    .map_err(|e| e.to_string())?;
                runtime
                    .block_on(async move {
                        tokio::time::timeout(timeout, broker.history().flush()).await
                    })
                    .map_err(|_| "not within the deadline".to_owned())
            });
        let left = match flushing.map(std::thread::JoinHandle::join) {
            Ok(Ok(left)) => left,
            Ok(Err(_)) => Err("the thread panicked".to_owned()),
            Err(e) => Err(e.to_string()),
        };
        match left {
            Ok(0) => true,
            Ok(topics) => {
                tracing::warn!(
                    topics,
                    "topic history left unwritten at shutdown (the store writer was full)"
                );
                false
            }
            Err(why) => {
                tracing::warn!("topic history not written at shutdown: {why}");
                false
            }
        }
    }

    /// [`Running::stop`] on a thread of its own, awaited for at most
    /// `3 x timeout + 10 s`: a stop stuck in the store (an fsync that does
    /// not return) must not hold the caller, nor the runtime, forever.
    pub(super) async fn stop_bounded(self, timeout: Duration) -> Result<(), Error> {
        let step = Arc::new(AtomicUsize::new(0));
        let (done, finished) = tokio::sync::oneshot::channel();
        let seen = step.clone();
        std::thread::Builder::new()
            .name("wharf-stop".into())
            .spawn(move || {
                let _ = done.send(self.stop(timeout, &seen));
            })?;
        let limit = timeout * 3 + Duration::from_secs(10);
        match actix_rt::time::timeout(limit, finished).await {
            Ok(Ok(result)) => result,
            Ok(Err(_)) => {
                let step = STOP_STEPS[step.load(Ordering::Acquire)];
                tracing::error!("the broker's stop panicked at: {step}");
                Err(Error::ShutdownStuck { step, limit })
            }
            Err(_) => {
                let step = STOP_STEPS[step.load(Ordering::Acquire)];
                tracing::error!(?limit, "the broker's stop is stuck at: {step}");
                Err(Error::ShutdownStuck { step, limit })
            }
        }
    }
}
