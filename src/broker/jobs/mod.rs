//! Jobs and workers. A job is a durable record (kind, entity id, data,
//! priority, execution timeout) with a tracked status; workers register
//! for kinds, keep a lease alive with pings, dequeue (long-polling), and
//! report an outcome with the fencing token (the attempt number) they were
//! given. All of it is one resource ([`Jobs`]): every operation is a task
//! on its queue, so a late outcome and a reassignment can never both win.
//!
//! Statuses: `queued`, `running` (worker, since when, attempt n),
//! `failed` / `timed_out` (waiting for a retry after the kind's backoff),
//! `succeeded`, `dead` (attempts exhausted; copied to the queue
//! `jobs.dlq`).
//!
//! The types the wire shares (statuses, outcomes, requests, replies) live
//! in [`crate::protocol::jobs`] and are re-exported here; [`api`] holds one
//! function per operation, which every transport calls. The state's tasks
//! are unit-tested with a fake clock in `state_tests.rs`.

pub mod api;
pub mod home;
mod state;
#[cfg(test)]
mod state_tests;
mod takeover;

use std::time::Duration;

use serde::{Deserialize, Serialize};
use tokio::sync::oneshot;
use uuid::Uuid;

use super::queue::now_ms;
use crate::config::JobsConfig;
pub use crate::protocol::jobs::{JobStatus, JobView, NewJob, Outcome};
use crate::store::WriterHandle;
use crate::taskq::{Lane, SchedulerHandle, TaskError, TaskQueue};
pub use home::{JobCall, JobsHome};
use state::JobsState;

/// The queue dead jobs are copied to (an ordinary queue).
pub const JOBS_DLQ: &str = "jobs.dlq";

/// Longest kind name.
pub const MAX_KIND: usize = 256;

/// A job as stored (JSON in the `jobs` tree).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JobRecord {
    /// Its id (UUID v7).
    pub id: Uuid,
    /// Its kind; workers choose kinds.
    pub kind: String,
    /// The entity it is about.
    pub entity_id: Uuid,
    /// Free-form data for the worker.
    pub data: serde_json::Value,
    /// 0-9, higher first.
    pub priority: u8,
    /// Execution timeout (ms).
    pub timeout_ms: Option<u64>,
    /// Status.
    pub status: JobStatus,
    /// Attempts started so far (the fencing token of the current one).
    pub attempt: u32,
    /// The worker running it; only in the dequeue's answer (a worker's id
    /// is kept among the worker and its principal, the only one that may
    /// use it).
    pub worker: Option<Uuid>,
    /// When the current attempt started (Unix ms).
    pub started_ms: Option<u64>,
    /// When it was enqueued (Unix ms).
    pub created_ms: u64,
    /// Its last change (Unix ms).
    pub updated_ms: u64,
    /// The last failure's text.
    pub error: Option<String>,
    /// When a failed or timed-out job is queued again (Unix ms).
    pub retry_at_ms: Option<u64>,
}

impl JobRecord {
    /// Whether the job has ended for good (succeeded, dead, cancelled, or
    /// timed out without a retry to wait for): kept for the retention,
    /// never run again unless retried by hand.
    pub fn is_finished(&self) -> bool {
        match self.status {
            JobStatus::Succeeded | JobStatus::Dead | JobStatus::Cancelled => true,
            JobStatus::TimedOut => self.retry_at_ms.is_none(),
            JobStatus::Queued | JobStatus::Running | JobStatus::Failed => false,
        }
    }
}

impl From<&JobRecord> for JobView {
    fn from(j: &JobRecord) -> Self {
        JobView {
            id: j.id,
            kind: j.kind.clone(),
            entity_id: j.entity_id,
            data: j.data.clone(),
            priority: j.priority,
            status: j.status,
            attempt: j.attempt,
            token: (j.status == JobStatus::Running).then_some(j.attempt),
            worker_id: j.worker,
            started_ms: j.started_ms,
            timeout_ms: j.timeout_ms,
            error: j.error.clone(),
            retry_at_ms: j.retry_at_ms,
            created_ms: j.created_ms,
        }
    }
}

/// Why a jobs operation was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum JobError {
    /// No job has this id (or it finished longer ago than the retention).
    #[error("no such job")]
    UnknownJob,
    /// The worker's lease ended (or it never registered): register again.
    #[error("the worker is not (or no longer) registered; register again")]
    WorkerExpired,
    /// The worker was registered by another principal: a worker id is
    /// not a credential, only its registering principal may use it.
    #[error("the worker was registered by another principal")]
    NotYourWorker,
    /// The token is not the job's current attempt by this worker: the job
    /// was handed to someone else, or already has an outcome.
    #[error("stale token: the job is {status} at attempt {current}")]
    StaleToken {
        /// The job's current attempt.
        current: u32,
        /// Its status.
        status: JobStatus,
    },
    /// A field is invalid.
    #[error("{0}")]
    Invalid(String),
    /// The job's status does not allow this (cancelling a finished job).
    #[error("{0}")]
    Conflict(String),
    /// `jobs.max_jobs` jobs are held.
    #[error("too many jobs: at most {0}")]
    Full(usize),
    /// `jobs.max_workers` workers are registered.
    #[error("too many workers: at most {0}")]
    TooManyWorkers(usize),
    /// The store writer is too far behind; try again.
    #[error("the store is busy; try again")]
    StoreBusy,
    /// The store failed the write (its commit error kept as the source).
    #[error(transparent)]
    Store(#[from] crate::store::CommitError),
    /// The jobs resource refused or lost the task.
    #[error(transparent)]
    Task(#[from] TaskError),
    /// The jobs resource's home node refused the call, or did not answer
    /// (`Overloaded`).
    #[error("{message}")]
    Remote {
        /// The code.
        code: crate::protocol::frame::ErrorCode,
        /// Why.
        message: String,
    },
}

impl JobError {
    /// The error code this error has on every transport (native `error`
    /// frames; HTTP derives its status from it).
    pub fn code(&self) -> crate::protocol::frame::ErrorCode {
        use crate::protocol::frame::ErrorCode;
        match self {
            JobError::UnknownJob => ErrorCode::UnknownJob,
            JobError::WorkerExpired => ErrorCode::WorkerExpired,
            JobError::NotYourWorker => ErrorCode::Forbidden,
            JobError::StaleToken { .. } => ErrorCode::StaleToken,
            JobError::Invalid(_) => ErrorCode::InvalidField,
            JobError::Conflict(_) => ErrorCode::Conflict,
            JobError::Full(_) => ErrorCode::QueueFull,
            JobError::TooManyWorkers(_) => ErrorCode::TooManyWorkers,
            JobError::StoreBusy | JobError::Task(TaskError::Overloaded { .. }) => {
                ErrorCode::Overloaded
            }
            JobError::Store(_) | JobError::Task(_) => ErrorCode::Internal,
            JobError::Remote { code, .. } => *code,
        }
    }
}

/// Counts for the admin API.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct JobsInfo {
    /// Jobs held (finished ones within their retention included).
    pub jobs: usize,
    /// Waiting for a worker.
    pub ready: usize,
    /// Handed to workers.
    pub running: usize,
    /// Workers registered.
    pub workers: usize,
    /// Dequeues parked, waiting for a job (at most one per worker).
    pub waiting: usize,
    /// Workers whose lease ran out since start (their jobs went back).
    pub lease_expiries: u64,
    /// Outcomes refused since start (stale token, or expired worker).
    pub stale_outcomes: u64,
    /// Attempts that ran past their execution timeout since start.
    pub timeouts: u64,
}

/// Most jobs one list page holds.
pub const MAX_LIST: usize = 1000;

/// Which jobs a list shows.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct JobFilter {
    /// Only jobs with this status.
    pub status: Option<JobStatus>,
    /// Only jobs of this kind.
    pub kind: Option<String>,
    /// Only jobs with a higher id (the previous page's `next`).
    pub after: Option<Uuid>,
    /// At most this many (1 to [`MAX_LIST`]).
    pub limit: usize,
}

/// The jobs resource. Cheap to clone.
#[derive(Clone)]
pub struct Jobs {
    tq: TaskQueue<JobsState>,
    cfg: std::sync::Arc<JobsConfig>,
    /// Where the resource lives, in a cluster whose nodes share one: asked
    /// before each operation, which is sent there unless that is here.
    home: std::sync::Arc<std::sync::OnceLock<std::sync::Arc<dyn JobsHome>>>,
    /// The store's writer, for the records of jobs taken over.
    writer: Option<WriterHandle>,
}

impl Jobs {
    /// The jobs resource, persisting records through `writer` if given.
    /// `on_dead` is called (inside the resource's task) with each job that
    /// runs out of attempts.
    pub fn new(
        cfg: JobsConfig,
        scheduler: &SchedulerHandle,
        writer: Option<WriterHandle>,
        on_dead: Box<dyn Fn(&JobRecord) + Send>,
    ) -> Jobs {
        Jobs {
            tq: TaskQueue::new(
                JobsState::new(cfg.clone(), writer.clone(), on_dead),
                scheduler,
            ),
            cfg: std::sync::Arc::new(cfg),
            home: Default::default(),
            writer,
        }
    }

    /// From now on asks `remote` (the cluster) where the resource lives
    /// before each operation, and sends it there unless that is this node
    /// (once).
    pub fn set_home(&self, remote: std::sync::Arc<dyn JobsHome>) {
        let _ = self.home.set(remote);
    }

    /// A call to the resource's home, if it lives on another node now.
    async fn at_home<T: serde::de::DeserializeOwned>(
        &self,
        call: impl FnOnce() -> JobCall,
        wait: Duration,
    ) -> Option<Result<T, JobError>> {
        let remote = self.home.get()?;
        let home = match remote.place().await {
            Ok(None) => return None,
            Ok(Some(home)) => home,
            Err(e) => return Some(Err(e)),
        };
        let limit = remote.call_timeout() + wait;
        Some(home::call(&**remote, &home, call(), limit).await)
    }

    /// Installs job records read back from the store (JSON); unfinished
    /// jobs are queued again. Returns how many were restored.
    ///
    /// # Errors
    /// The resource refusing the task.
    pub async fn restore(&self, stored: Vec<([u8; 16], Vec<u8>)>) -> Result<usize, JobError> {
        let jobs = takeover::read_records(&stored);
        let n = jobs.len();
        self.tq.submit(move |s| s.restore(jobs, now_ms())).await?;
        Ok(n)
    }

    /// Enqueues a job; returns its id once it is durable.
    ///
    /// # Errors
    /// [`JobError::Invalid`] for a bad kind or priority, [`JobError::Full`],
    /// or a store failure.
    pub async fn enqueue(&self, new: NewJob) -> Result<Uuid, JobError> {
        if let Some(r) = self
            .at_home(|| JobCall::Enqueue { new: new.clone() }, Duration::ZERO)
            .await
        {
            return r;
        }
        if new.kind.is_empty() || new.kind.len() > MAX_KIND {
            return Err(JobError::Invalid(format!(
                "kind must be 1 to {MAX_KIND} bytes"
            )));
        }
        if new.priority > 9 {
            return Err(JobError::Invalid(format!(
                "priority {} is out of range 0-9",
                new.priority
            )));
        }
        let (id, durable) = self.tq.submit(move |s| s.enqueue(new, now_ms())).await??;
        if let Some(d) = durable {
            d.await.map_err(JobError::Store)?;
        }
        Ok(id)
    }

    /// A job's current record, as anyone who knows its id may see it:
    /// without the worker's id and the fencing token: only the worker
    /// (from its registration and its dequeue) knows them, and only its
    /// registering principal may use them.
    ///
    /// # Errors
    /// [`JobError::UnknownJob`], or the resource refusing the task.
    pub async fn status(&self, id: Uuid) -> Result<JobView, JobError> {
        if let Some(r) = self
            .at_home(|| JobCall::Status { id }, Duration::ZERO)
            .await
        {
            return r;
        }
        let mut view = self
            .tq
            .submit(move |s| s.status(id))
            .await?
            .ok_or(JobError::UnknownJob)?;
        view.token = None;
        view.worker_id = None;
        Ok(view)
    }

    /// A page of jobs matching `filter` among the kinds `visible`
    /// accepts, as [`Jobs::status`] shows them, and the id to list after
    /// for the next page.
    ///
    /// # Errors
    /// [`JobError::Invalid`] for a limit out of range, or the resource
    /// refusing the task.
    pub async fn list(
        &self,
        filter: JobFilter,
        visible: impl Fn(&str) -> bool + Send + 'static,
    ) -> Result<(Vec<JobView>, Option<Uuid>), JobError> {
        if let Some(r) = self
            .at_home::<(Vec<JobView>, Option<Uuid>)>(
                || JobCall::List {
                    status: filter.status,
                    kind: filter.kind.clone(),
                    after: filter.after,
                    limit: filter.limit,
                },
                Duration::ZERO,
            )
            .await
        {
            return r.map(|(page, next)| {
                (
                    page.into_iter().filter(|j| visible(&j.kind)).collect(),
                    next,
                )
            });
        }
        if filter.limit == 0 || filter.limit > MAX_LIST {
            return Err(JobError::Invalid(format!(
                "limit {}: give 1 to {MAX_LIST}",
                filter.limit
            )));
        }
        let (mut views, next) = self.tq.submit(move |s| s.list(&filter, &visible)).await?;
        for v in &mut views {
            v.token = None;
            v.worker_id = None;
        }
        Ok((views, next))
    }

    /// Queues a dead, cancelled, failed or timed-out job again at once
    /// (a dead or cancelled one with a fresh count of attempts); answers
    /// once that is durable.
    ///
    /// # Errors
    /// [`JobError::UnknownJob`], [`JobError::Conflict`] for a queued,
    /// running or succeeded job, or a store failure.
    pub async fn retry(&self, id: Uuid) -> Result<JobView, JobError> {
        if let Some(r) = self.at_home(|| JobCall::Retry { id }, Duration::ZERO).await {
            return r;
        }
        let durable = self.tq.submit(move |s| s.retry(id, now_ms())).await??;
        if let Some(d) = durable {
            d.await.map_err(JobError::Store)?;
        }
        self.status(id).await
    }

    /// Cancels a queued, waiting or running job; answers once that is
    /// durable. A running job's worker is not told: its outcome is
    /// refused as stale.
    ///
    /// # Errors
    /// [`JobError::UnknownJob`], [`JobError::Conflict`] for a finished
    /// job, or a store failure.
    pub async fn cancel(&self, id: Uuid) -> Result<JobView, JobError> {
        if let Some(r) = self
            .at_home(|| JobCall::Cancel { id }, Duration::ZERO)
            .await
        {
            return r;
        }
        let durable = self.tq.submit(move |s| s.cancel(id, now_ms())).await??;
        if let Some(d) = durable {
            d.await.map_err(JobError::Store)?;
        }
        self.status(id).await
    }

    /// Jobs held by kind and status, for metrics.
    ///
    /// # Errors
    /// The resource refusing the task.
    pub async fn census(&self) -> Result<Vec<(String, JobStatus, u64)>, JobError> {
        Ok(self.tq.submit(|s| s.census()).await?)
    }

    /// The jobs resource's task-queue counters, for metrics.
    pub fn taskq_stats(&self) -> crate::taskq::QueueStats {
        self.tq.stats()
    }

    /// Registers a worker for `kinds` (empty: every kind) on behalf of
    /// the principal `owner` (its [`crate::auth::Principal::id`]), the
    /// only one that may use it; returns its id and its lease in ms.
    ///
    /// # Errors
    /// [`JobError::TooManyWorkers`], or the resource refusing the task.
    pub async fn register(
        &self,
        kinds: Vec<String>,
        owner: String,
    ) -> Result<(Uuid, u64), JobError> {
        if let Some(r) = self
            .at_home(
                || JobCall::Register {
                    kinds: kinds.clone(),
                    owner: owner.clone(),
                },
                Duration::ZERO,
            )
            .await
        {
            return r;
        }
        if kinds.iter().any(|k| k.is_empty() || k.len() > MAX_KIND) {
            return Err(JobError::Invalid(format!(
                "kinds must be 1 to {MAX_KIND} bytes"
            )));
        }
        self.tq
            .submit(move |s| s.register(kinds, owner, now_ms()))
            .await?
    }

    /// Extends a worker's lease; `false` means it is no longer valid and
    /// must register again.
    ///
    /// # Errors
    /// [`JobError::NotYourWorker`] unless `owner` registered it, or the
    /// resource refusing the task.
    pub async fn ping(&self, worker: Uuid, owner: String) -> Result<bool, JobError> {
        if let Some(r) = self
            .at_home(
                || JobCall::Ping {
                    worker,
                    owner: owner.clone(),
                },
                Duration::ZERO,
            )
            .await
        {
            return r;
        }
        self.tq
            .submit(move |s| {
                s.check_owner(worker, &owner)?;
                Ok(s.ping(worker, now_ms()))
            })
            .await?
    }

    /// The worker's next job (highest priority, then oldest, of the kinds
    /// it serves), waiting up to `wait` (capped by `jobs.max_wait_ms`) for
    /// one to arrive. `None`: none arrived in time.
    ///
    /// # Errors
    /// [`JobError::WorkerExpired`], [`JobError::NotYourWorker`] unless
    /// `owner` registered it, or the resource refusing the task.
    pub async fn dequeue(
        &self,
        worker: Uuid,
        owner: String,
        wait: Duration,
    ) -> Result<Option<JobView>, JobError> {
        if let Some(r) = self
            .at_home(
                || JobCall::Dequeue {
                    worker,
                    owner: owner.clone(),
                    wait_ms: u64::try_from(wait.as_millis()).unwrap_or(u64::MAX),
                },
                wait,
            )
            .await
        {
            return r;
        }
        let wait = wait.min(Duration::from_millis(self.cfg.max_wait_ms));
        let (tx, mut rx) = oneshot::channel();
        let waiter = (!wait.is_zero()).then_some(tx);
        if let Some(job) = self
            .tq
            .submit(move |s| {
                s.check_owner(worker, &owner)?;
                let wait_ms = u64::try_from(wait.as_millis()).unwrap_or(u64::MAX);
                s.dequeue(worker, waiter, wait_ms, now_ms())
            })
            .await??
        {
            return Ok(Some(job));
        }
        if wait.is_zero() {
            return Ok(None);
        }
        match tokio::time::timeout(wait, &mut rx).await {
            Ok(Ok(job)) => Ok(Some(job)),
            // The resource dropped the waiter: the worker expired, or a
            // newer dequeue of the same worker replaced this one.
            Ok(Err(_)) => {
                if self
                    .tq
                    .submit(move |s| s.is_valid(worker, now_ms()))
                    .await?
                {
                    Ok(None)
                } else {
                    Err(JobError::WorkerExpired)
                }
            }
            Err(_) => {
                // Stop waiting; a job sent before the cancel ran is still
                // in the channel (tasks run in order, so none can follow).
                self.tq.submit(move |s| s.cancel_wait(worker)).await?;
                Ok(rx.try_recv().ok())
            }
        }
    }

    /// Records a worker's outcome for job `id` run with `token`; returns
    /// the job's new status once it is durable.
    ///
    /// # Errors
    /// [`JobError::UnknownJob`], [`JobError::WorkerExpired`],
    /// [`JobError::NotYourWorker`] unless `owner` registered the worker,
    /// [`JobError::StaleToken`] (nothing changes), or a store failure.
    #[allow(clippy::too_many_arguments)]
    pub async fn outcome(
        &self,
        id: Uuid,
        worker: Uuid,
        owner: String,
        token: u32,
        outcome: Outcome,
        error: Option<String>,
    ) -> Result<JobStatus, JobError> {
        if let Some(r) = self
            .at_home(
                || JobCall::Outcome {
                    id,
                    worker,
                    owner: owner.clone(),
                    token,
                    outcome,
                    error: error.clone(),
                },
                Duration::ZERO,
            )
            .await
        {
            return r;
        }
        let (status, durable) = self
            .tq
            .submit(move |s| {
                s.check_owner(worker, &owner)?;
                s.outcome(id, worker, token, outcome, error, now_ms())
            })
            .await??;
        if let Some(d) = durable {
            d.await.map_err(JobError::Store)?;
        }
        Ok(status)
    }

    /// Runs the deadline task (leases, timeouts, retries, retention).
    pub fn tick(&self) {
        if let Err(e) = self.tq.execute(Lane::High, |s| s.tick(now_ms())) {
            tracing::debug!("jobs tick postponed: {e}");
        }
    }

    /// Current counts.
    ///
    /// # Errors
    /// The resource refusing the task.
    pub async fn info(&self) -> Result<JobsInfo, JobError> {
        if let Some(r) = self.at_home(|| JobCall::Info, Duration::ZERO).await {
            return r;
        }
        Ok(self.tq.submit(|s| s.counts()).await?)
    }

    /// The lease workers get, in ms.
    pub fn lease_ms(&self) -> u64 {
        self.cfg.worker_lease_ms
    }
}

impl std::fmt::Debug for Jobs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Jobs").finish_non_exhaustive()
    }
}
