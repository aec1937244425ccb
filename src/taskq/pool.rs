//! The small worker pool that takes over busy resources.
//!
//! A resource reaches the pool only when the thread running it passes the
//! capture threshold, or when a worker has run a `quantum` of its tasks and
//! puts it back behind the others. Each scheduled resource is in the run
//! queue at most once (only its claim holder schedules it), so the run
//! queue is bounded by the number of resources. Idle workers block on the
//! run queue; they never spin.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, RecvTimeoutError, Sender};
use serde::{Deserialize, Serialize};

/// How long a worker waits without work before it lets the allocator
/// take back what it freed ([`crate::tidy`]).
const IDLE_TIDY: Duration = Duration::from_secs(1);

/// A resource that a worker can drain. Implemented by the task queue's
/// shared state; the pool knows nothing else about it.
pub(crate) trait Schedulable: Send + Sync {
    /// Runs up to a quantum of the resource's tasks on this worker, and
    /// reschedules it if work remains.
    fn run_on_worker(self: Arc<Self>);
}

/// `[scheduler]` settings: how long a submitting thread may be captured by a
/// busy resource, how long a worker stays on one, and how many workers.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SchedulerConfig {
    /// Tasks a submitting thread runs (its own included) before it hands a
    /// busy resource to a worker and returns to its caller.
    pub capture_threshold: usize,
    /// Tasks a worker runs on one resource before moving it to the back of
    /// the run queue, so one hot resource cannot starve the others.
    pub quantum: usize,
    /// Worker threads; 0 means one per CPU core.
    pub workers: usize,
    /// Most tasks one resource may have counted (running plus queued).
    /// Past it, submissions fail with [`TaskError::Overloaded`](super::TaskError)
    /// instead of growing the queue without bound. Checked before counting,
    /// so concurrent submitters may overshoot it by their number.
    pub max_depth: usize,
}

impl Default for SchedulerConfig {
    fn default() -> Self {
        SchedulerConfig {
            capture_threshold: 10,
            quantum: 64,
            workers: 0,
            max_depth: 100_000,
        }
    }
}

/// A `[scheduler]` value that cannot work, naming the key.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("scheduler.{key}: {reason}")]
pub struct SchedulerConfigError {
    /// The offending key inside `[scheduler]`.
    pub key: &'static str,
    /// Why the value was refused.
    pub reason: String,
}

impl SchedulerConfig {
    /// Most workers a scheduler will start; more only adds contention.
    pub const MAX_WORKERS: usize = 1024;

    /// Checks the values, naming the first bad key.
    ///
    /// # Errors
    /// A zero threshold, quantum or max depth, or more than [`Self::MAX_WORKERS`] workers.
    pub fn validate(&self) -> Result<(), SchedulerConfigError> {
        if self.capture_threshold == 0 {
            return Err(SchedulerConfigError {
                key: "capture_threshold",
                reason: "must be at least 1 (the submitter's own task)".into(),
            });
        }
        if self.quantum == 0 {
            return Err(SchedulerConfigError {
                key: "quantum",
                reason: "must be at least 1".into(),
            });
        }
        if self.max_depth == 0 {
            return Err(SchedulerConfigError {
                key: "max_depth",
                reason: "must be at least 1".into(),
            });
        }
        if self.workers > Self::MAX_WORKERS {
            return Err(SchedulerConfigError {
                key: "workers",
                reason: format!("must be at most {}", Self::MAX_WORKERS),
            });
        }
        Ok(())
    }

    /// The number of workers to start: `workers`, or the core count if 0.
    pub fn effective_workers(&self) -> usize {
        if self.workers == 0 {
            std::thread::available_parallelism().map_or(2, |n| n.get())
        } else {
            self.workers
        }
    }
}

/// Counters of the pool's slow paths.
#[derive(Debug, Default)]
pub(crate) struct PoolCounters {
    pub(crate) handoffs: AtomicU64,
    pub(crate) requeues: AtomicU64,
}

/// What every task queue holds on its scheduler: where to hand work, and
/// the limits to apply.
pub(crate) struct PoolShared {
    /// `None` once the scheduler shuts down; handing off then fails and the
    /// running thread keeps draining the resource itself.
    run_queue: RwLock<Option<Sender<Arc<dyn Schedulable>>>>,
    pub(crate) capture_threshold: usize,
    pub(crate) quantum: usize,
    pub(crate) max_depth: usize,
    pub(crate) counters: PoolCounters,
    /// Worker threads started.
    pub(crate) workers: usize,
}

impl PoolShared {
    /// Puts a resource (whose claim the caller gives up) in the run queue.
    /// Gives it back if the scheduler has shut down.
    pub(crate) fn schedule(
        &self,
        resource: Arc<dyn Schedulable>,
    ) -> Result<(), Arc<dyn Schedulable>> {
        let guard = match self.run_queue.read() {
            Ok(g) => g,
            Err(poisoned) => poisoned.into_inner(),
        };
        match guard.as_ref() {
            Some(tx) => tx.send(resource).map_err(|e| e.into_inner()),
            None => Err(resource),
        }
    }
}

/// Scheduler-wide counters, for metrics.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct SchedulerStats {
    /// Times a submitting thread passed the capture threshold and handed a
    /// resource to a worker.
    pub handoffs: u64,
    /// Times a worker used up its quantum on a resource and requeued it.
    pub requeues: u64,
    /// Worker threads started.
    pub workers: usize,
}

/// A cheap, cloneable reference to a scheduler, for code that creates
/// resources at run time (a registry creating topics from many threads).
/// It does not keep the workers alive: after the owning [`Scheduler`] shuts
/// down, resources made from it are drained by their submitters.
#[derive(Clone)]
pub struct SchedulerHandle {
    pub(crate) shared: Arc<PoolShared>,
}

impl SchedulerHandle {
    /// The scheduler's counters (for metrics, from wherever resources are
    /// made).
    pub fn stats(&self) -> SchedulerStats {
        SchedulerStats {
            handoffs: self.shared.counters.handoffs.load(Ordering::Relaxed),
            requeues: self.shared.counters.requeues.load(Ordering::Relaxed),
            workers: self.shared.workers,
        }
    }
}

impl std::fmt::Debug for SchedulerHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SchedulerHandle").finish_non_exhaustive()
    }
}

/// The worker pool behind every [`TaskQueue`](super::TaskQueue) created from
/// it. Owning handle: dropping it (or calling [`Scheduler::shutdown`]) stops
/// the workers after they finish the resources already handed to them. It
/// dereferences to a [`SchedulerHandle`], so `TaskQueue::new(s, &scheduler)`
/// works with either.
pub struct Scheduler {
    handle: SchedulerHandle,
    threads: Vec<JoinHandle<()>>,
    exited: Receiver<()>,
    workers: usize,
}

impl Scheduler {
    /// Starts the workers.
    ///
    /// # Errors
    /// A config that fails [`SchedulerConfig::validate`], or a worker thread
    /// the OS refused to spawn.
    pub fn new(config: &SchedulerConfig) -> Result<Self, SchedulerError> {
        config.validate()?;
        let workers = config.effective_workers();
        let (tx, rx) = crossbeam_channel::unbounded::<Arc<dyn Schedulable>>();
        let (exit_tx, exited) = crossbeam_channel::bounded(workers);
        let shared = Arc::new(PoolShared {
            run_queue: RwLock::new(Some(tx)),
            capture_threshold: config.capture_threshold,
            quantum: config.quantum,
            max_depth: config.max_depth,
            counters: PoolCounters::default(),
            workers,
        });
        let mut scheduler = Scheduler {
            handle: SchedulerHandle { shared },
            threads: Vec::with_capacity(workers),
            exited,
            workers,
        };
        for i in 0..workers {
            let rx = rx.clone();
            let exit_tx = exit_tx.clone();
            let handle = std::thread::Builder::new()
                .name(format!("wharf-taskq-{i}"))
                .spawn(move || {
                    // Ends when the run queue is closed and empty. A second
                    // without work after some: the allocator may take back
                    // what this thread freed (crate::tidy), then it waits.
                    let mut worked = false;
                    loop {
                        let next = if worked {
                            rx.recv_timeout(IDLE_TIDY)
                        } else {
                            rx.recv().map_err(|_| RecvTimeoutError::Disconnected)
                        };
                        match next {
                            Ok(resource) => {
                                resource.run_on_worker();
                                worked = true;
                            }
                            Err(RecvTimeoutError::Timeout) => {
                                crate::tidy::tidy();
                                worked = false;
                            }
                            Err(RecvTimeoutError::Disconnected) => break,
                        }
                    }
                    let _ = exit_tx.send(());
                })
                .map_err(SchedulerError::Spawn)?;
            scheduler.threads.push(handle);
        }
        Ok(scheduler)
    }

    /// A cloneable handle for creating resources elsewhere.
    pub fn handle(&self) -> SchedulerHandle {
        self.handle.clone()
    }

    /// Current counters.
    pub fn stats(&self) -> SchedulerStats {
        self.handle.stats()
    }

    /// Closes the run queue and waits up to `timeout` for the workers to
    /// finish what they hold. Resources busy after this are drained by the
    /// threads that submit to them. Returns whether every worker exited in
    /// time (the ones that did not are left detached).
    pub fn shutdown(&mut self, timeout: Duration) -> bool {
        {
            let mut guard = match self.handle.shared.run_queue.write() {
                Ok(g) => g,
                Err(poisoned) => poisoned.into_inner(),
            };
            guard.take();
        }
        let deadline = Instant::now() + timeout;
        let mut exited = 0;
        while exited < self.threads.len() {
            match self
                .exited
                .recv_timeout(deadline.saturating_duration_since(Instant::now()))
            {
                Ok(()) => exited += 1,
                Err(_) => break,
            }
        }
        let all = exited == self.threads.len();
        if all {
            for handle in self.threads.drain(..) {
                let _ = handle.join();
            }
        } else {
            tracing::warn!(
                exited,
                workers = self.threads.len(),
                "task queue workers still busy at shutdown deadline; leaving them detached"
            );
            self.threads.clear();
        }
        all
    }
}

impl std::ops::Deref for Scheduler {
    type Target = SchedulerHandle;

    fn deref(&self) -> &SchedulerHandle {
        &self.handle
    }
}

impl Drop for Scheduler {
    fn drop(&mut self) {
        if !self.threads.is_empty() {
            self.shutdown(Duration::from_secs(5));
        }
    }
}

impl std::fmt::Debug for Scheduler {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Scheduler")
            .field("workers", &self.workers)
            .field("stats", &self.stats())
            .finish()
    }
}

/// Why a scheduler could not start.
#[derive(Debug, thiserror::Error)]
pub enum SchedulerError {
    /// A `[scheduler]` value was refused.
    #[error(transparent)]
    Config(#[from] SchedulerConfigError),
    /// The OS would not start a worker thread.
    #[error("cannot start a task queue worker thread: {0}")]
    Spawn(#[source] std::io::Error),
}
