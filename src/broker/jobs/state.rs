//! The jobs resource's state and its tasks: every job record, the ready
//! jobs per kind, the workers and their leases, and the dequeues waiting
//! for a job. Everything here runs inside the resource's task queue.
//!
//! # Design notes
//!
//! ## One resource
//! Every job record, the ready jobs per kind, the registered workers with
//! their leases, the waiting dequeues and the deadlines are one state, and
//! every operation is a task on it. There is no resource per job or per
//! kind: a worker serves several kinds, and an outcome must check the
//! worker and the job together. All job traffic goes through one resource;
//! measured end to end, the HTTP round trips and the fsyncs are the limit,
//! not the resource (benches/README.md, "Jobs").
//!
//! `jobs` holds every job not yet past its retention, finished ones
//! included (`max_jobs` bounds it). Indexes over it: `ready`, per kind, a
//! set of (`Reverse(priority)`, order, id), the order raised each time a
//! job becomes ready, so a dequeue takes among the kinds its worker serves
//! the smallest first entry (highest priority, then ready longest), one
//! look per kind; `retrying` by retry time; `deadlines`, running jobs by
//! execution deadline; `finished` by finish time, for retention; `workers`
//! with their kinds, `lease_until` and running jobs; `waiting`, parked
//! dequeues, oldest first, at most one per worker.
//!
//! ## Fencing
//! The token is the job's attempt number, raised by each assignment. An
//! outcome's checks and its change are one task: the job exists, the
//! worker's lease is in force at the task's `now`, and the job is running,
//! under this worker, at attempt `token`. Whatever takes a job from a
//! worker (its lease ending, the execution timeout, a reassignment) is
//! another task on the same queue, so one of the two runs first and the
//! other sees its result: the outcome is taken, or it fails with
//! `worker_expired` or `stale_token` before it changes anything. No lock
//! and no compare-and-swap in the store: the store only records what the
//! task decided. An outcome, ping or dequeue that finds the lease ended
//! expires the worker itself, without waiting for the tick. The attempt
//! goes down in one case only: a job sent to a parked dequeue whose
//! receiver was already gone (`unassign`), which no worker saw. A dequeue
//! extends the lease to cover its wait.
//!
//! ## Waiters
//! A dequeue that finds no job parks a `oneshot::Sender` in `waiting`,
//! replacing the worker's earlier one. Every task that makes jobs ready
//! (enqueue, outcome, tick) ends with `hand_to_waiting`: oldest waiter
//! first, it skips closed senders and expired workers, assigns the best job
//! the worker serves and sends it; a failed send puts the job back.
//! `Jobs::dequeue` waits on the receiver outside the resource, with a
//! timeout (capped by `max_wait_ms`). When the timeout fires it cannot
//! just drop the receiver (a job may have been sent an instant before, and
//! would stay running under the worker until the lease or the timeout
//! ended), so it submits `cancel_wait`, awaits it, then `try_recv`s: tasks
//! run in order, so any send to this waiter happened before `cancel_wait`
//! and none can happen after it. When the channel closes instead, `is_valid`
//! tells a newer dequeue of the same worker (no job, HTTP 204) from an
//! expired worker (`worker_expired`).
//!
//! ## The tick
//! The queues' ticker also calls `Jobs::tick` every `QUEUE_TICK`, a
//! high-lane `execute` (refused when overloaded: the next tick does the
//! work). It expires workers whose lease ended (their running jobs are
//! ready again at once, attempt kept; their waiter goes), ends attempts
//! past their deadline as `timed_out`, makes due retries ready, deletes
//! finished jobs past `retention_s` (with a store delete), and hands ready
//! jobs to waiters. Deadlines, retries and retention are ordered sets, so a
//! tick visits only what is due; leases are a scan of the workers.
//!
//! ## Retries and dead jobs
//! `retry_or_die` takes the kind's policy (`[[jobs.kinds]]` over `[jobs]`).
//! A timeout is final unless `retry_timed_out` (the work may still be
//! running somewhere). With attempts left the job waits `backoff_ms` of its
//! attempt (the last step repeats) in `retrying`, or is ready at once for a
//! zero step; otherwise it is `dead`, and `on_dead` runs inside the task:
//! `Wharf::start` gives one that puts the record, as JSON, on the queue
//! `jobs.dlq` with `enqueue_detached` (a task must not wait) through a weak
//! broker handle.
//!
//! ## Persistence and restore
//! `persist` submits a put of the whole record (`store/jobs.rs`) after each
//! change; the writer never blocks the task. Enqueue and outcome return the
//! write's `Durable` and the caller awaits it before answering, so `201`
//! and an outcome's `200` (and their `job_reply`) come once the record is
//! durable. An enqueue whose write is refused is undone and answered
//! `overloaded`; an outcome whose write is refused is still applied and
//! answered, its record on disk a change behind. Every other write is best
//! effort: an assignment, a lease expiry's requeue, a timeout, a retry
//! becoming ready, the retention delete. At start `Jobs::restore` installs
//! the records in creation order: finished jobs as they were (retention
//! counted from their last change), every other job `queued`, with no
//! worker, start or retry time and its attempt kept. Workers are not
//! stored: after a restart each gets `worker_expired` until it registers
//! again. With `[cluster] failover` the node taking the jobs' lease
//! installs the journal's records the same way (`Jobs::install`: the
//! store's records replaced, then `reset` and `restore`), and a node that
//! loses it forgets them (`reset`); nothing is restored at start then.
//! `state_tests.rs` runs these tasks directly with a fake clock;
//! `tests/it/jobs.rs` drives both transports end to end.

use std::cmp::Reverse;
use std::collections::{BTreeSet, BinaryHeap, HashMap, HashSet, VecDeque};

use tokio::sync::oneshot;
use uuid::Uuid;

use super::{JobError, JobFilter, JobRecord, JobStatus, JobView, NewJob, Outcome};
use crate::broker::queue::backoff_delay;
use crate::config::JobsConfig;
use crate::store::{Durable, WriterHandle, jobs as records};

mod restore;

struct Worker {
    /// The principal that registered it (its id): only it may use the
    /// worker, so that a leaked worker id is not a capability.
    owner: String,
    kinds: Vec<String>,
    lease_until: u64,
    running: HashSet<Uuid>,
}

impl Worker {
    fn serves(&self, kind: &str) -> bool {
        self.kinds.is_empty() || self.kinds.iter().any(|k| k == kind)
    }
}

/// A ready job's place: highest priority first, then oldest.
type ReadyKey = (Reverse<u8>, u64, Uuid);

/// A job's retry policy.
#[derive(Debug, Clone)]
struct Policy {
    max_attempts: u32,
    backoff_ms: Vec<u64>,
    timeout_ms: u64,
    retry_timed_out: bool,
}

/// The state the jobs resource owns.
pub(crate) struct JobsState {
    cfg: JobsConfig,
    jobs: HashMap<Uuid, JobRecord>,
    /// Ready jobs per kind: highest priority first, then oldest.
    ready: HashMap<String, BTreeSet<ReadyKey>>,
    /// The order jobs became ready in (FIFO within a priority).
    order: u64,
    /// Failed or timed-out jobs waiting for their retry time.
    retrying: BTreeSet<(u64, Uuid)>,
    /// Running jobs with an execution timeout, by deadline.
    deadlines: BTreeSet<(u64, Uuid)>,
    workers: HashMap<Uuid, Worker>,
    /// Dequeues waiting for a job, oldest first; one per worker.
    waiting: VecDeque<(Uuid, oneshot::Sender<JobView>)>,
    /// Finished jobs by finish time, for the retention sweep.
    finished: BTreeSet<(u64, Uuid)>,
    writer: Option<WriterHandle>,
    /// Called with each job that dies (copied to the dead-letter queue).
    on_dead: Box<dyn Fn(&JobRecord) + Send>,
    /// Workers whose lease ran out.
    lease_expiries: u64,
    /// Outcomes refused: stale token, or an expired worker.
    stale_outcomes: u64,
    /// Attempts that ran past their execution timeout.
    timeouts: u64,
}

impl JobsState {
    pub(crate) fn new(
        cfg: JobsConfig,
        writer: Option<WriterHandle>,
        on_dead: Box<dyn Fn(&JobRecord) + Send>,
    ) -> Self {
        JobsState {
            cfg,
            jobs: HashMap::new(),
            ready: HashMap::new(),
            order: 0,
            retrying: BTreeSet::new(),
            deadlines: BTreeSet::new(),
            workers: HashMap::new(),
            waiting: VecDeque::new(),
            finished: BTreeSet::new(),
            writer,
            on_dead,
            lease_expiries: 0,
            stale_outcomes: 0,
            timeouts: 0,
        }
    }

    fn policy(&self, kind: &str) -> Policy {
        let c = &self.cfg;
        let k = c.kinds.iter().find(|k| k.name == kind);
        Policy {
            max_attempts: k.and_then(|k| k.max_attempts).unwrap_or(c.max_attempts),
            backoff_ms: k
                .and_then(|k| k.backoff_ms.clone())
                .unwrap_or_else(|| c.backoff_ms.clone()),
            timeout_ms: k.and_then(|k| k.timeout_ms).unwrap_or(c.timeout_ms),
            retry_timed_out: k
                .and_then(|k| k.retry_timed_out)
                .unwrap_or(c.retry_timed_out),
        }
    }

    /// Persists a job's record (fire and forget unless the caller awaits
    /// the returned [`Durable`]).
    fn persist(&self, id: Uuid) -> Option<Durable> {
        let (w, job) = (self.writer.as_ref()?, self.jobs.get(&id)?);
        let bytes = match serde_json::to_vec(job) {
            Ok(b) => b,
            Err(e) => {
                tracing::error!(job = %id, "cannot encode a job record: {e}");
                return None;
            }
        };
        match w.submit(vec![records::put(id.as_bytes(), bytes)]) {
            Ok(d) => Some(d),
            Err(e) => {
                tracing::warn!(job = %id, "job record not persisted: {e}");
                None
            }
        }
    }

    fn make_ready(&mut self, id: Uuid) {
        let Some(j) = self.jobs.get_mut(&id) else {
            return;
        };
        j.status = JobStatus::Queued;
        self.order += 1;
        self.ready
            .entry(j.kind.clone())
            .or_default()
            .insert((Reverse(j.priority), self.order, id));
    }

    /// Adds a job; returns its id and, with a store, when it is durable.
    pub(crate) fn enqueue(
        &mut self,
        new: NewJob,
        now: u64,
    ) -> Result<(Uuid, Option<Durable>), JobError> {
        if self.jobs.len() >= self.cfg.max_jobs {
            return Err(JobError::Full(self.cfg.max_jobs));
        }
        let id = Uuid::now_v7();
        // 0 means no timeout, as in the config.
        let timeout_ms = match new.timeout_ms {
            Some(0) => None,
            Some(t) => Some(t),
            None => Some(self.policy(&new.kind).timeout_ms).filter(|&t| t > 0),
        };
        let job = JobRecord {
            id,
            kind: new.kind,
            entity_id: new.entity_id,
            data: new.data,
            priority: new.priority,
            timeout_ms,
            status: JobStatus::Queued,
            attempt: 0,
            worker: None,
            started_ms: None,
            created_ms: now,
            updated_ms: now,
            error: None,
            retry_at_ms: None,
        };
        self.jobs.insert(id, job);
        let durable = self.persist(id);
        if self.writer.is_some() && durable.is_none() {
            self.jobs.remove(&id);
            return Err(JobError::StoreBusy);
        }
        self.make_ready(id);
        self.hand_to_waiting(now);
        Ok((id, durable))
    }

    /// The job's record as the API shows it.
    pub(crate) fn status(&self, id: Uuid) -> Option<JobView> {
        self.jobs.get(&id).map(JobView::from)
    }

    /// Registers a worker for `kinds` (empty: all), owned by `owner`.
    pub(crate) fn register(
        &mut self,
        kinds: Vec<String>,
        owner: String,
        now: u64,
    ) -> Result<(Uuid, u64), JobError> {
        if self.workers.len() >= self.cfg.max_workers {
            return Err(JobError::TooManyWorkers(self.cfg.max_workers));
        }
        let id = Uuid::now_v7();
        self.workers.insert(
            id,
            Worker {
                owner,
                kinds,
                lease_until: now.saturating_add(self.cfg.worker_lease_ms),
                running: HashSet::new(),
            },
        );
        Ok((id, self.cfg.worker_lease_ms))
    }

    /// `Ok` unless the worker is registered by a principal other than
    /// `owner` (an unknown worker is left to the operation to refuse).
    pub(crate) fn check_owner(&self, worker: Uuid, owner: &str) -> Result<(), JobError> {
        match self.workers.get(&worker) {
            Some(w) if w.owner != owner => Err(JobError::NotYourWorker),
            _ => Ok(()),
        }
    }

    /// Whether the worker is registered with a lease in force.
    pub(crate) fn is_valid(&self, worker: Uuid, now: u64) -> bool {
        self.workers
            .get(&worker)
            .is_some_and(|w| w.lease_until > now)
    }

    /// Extends a worker's lease; false if it is no longer valid (it must
    /// register again).
    pub(crate) fn ping(&mut self, worker: Uuid, now: u64) -> bool {
        if !self.is_valid(worker, now) {
            self.expire_worker(worker, now);
            return false;
        }
        let lease = self.cfg.worker_lease_ms;
        if let Some(w) = self.workers.get_mut(&worker) {
            w.lease_until = now.saturating_add(lease);
        }
        true
    }

    /// The best ready job the worker serves: highest priority, then
    /// oldest.
    fn best_for(&self, worker: &Worker) -> Option<(String, ReadyKey)> {
        self.ready
            .iter()
            .filter(|(kind, set)| !set.is_empty() && worker.serves(kind))
            .filter_map(|(kind, set)| set.first().map(|first| (kind.clone(), *first)))
            .min_by_key(|(_, key)| *key)
    }

    /// Gives the worker its next job now, or parks `waiter` (replacing
    /// an earlier one of the same worker) when there is none.
    pub(crate) fn dequeue(
        &mut self,
        worker: Uuid,
        waiter: Option<oneshot::Sender<JobView>>,
        wait_ms: u64,
        now: u64,
    ) -> Result<Option<JobView>, JobError> {
        if !self.is_valid(worker, now) {
            self.expire_worker(worker, now);
            return Err(JobError::WorkerExpired);
        }
        // Asking for work is a sign of life: the lease covers the wait.
        let lease = self.cfg.worker_lease_ms;
        if let Some(w) = self.workers.get_mut(&worker) {
            w.lease_until = w
                .lease_until
                .max(now.saturating_add(lease).saturating_add(wait_ms));
        }
        let best = self.workers.get(&worker).and_then(|w| self.best_for(w));
        match best {
            Some((kind, key)) => {
                self.take_ready(&kind, &key);
                Ok(self.assign(key.2, worker, now))
            }
            None => {
                if let Some(tx) = waiter {
                    self.waiting.retain(|(w, _)| *w != worker);
                    self.waiting.push_back((worker, tx));
                }
                Ok(None)
            }
        }
    }

    /// Stops waiting for `worker`'s parked dequeue.
    pub(crate) fn cancel_wait(&mut self, worker: Uuid) {
        self.waiting.retain(|(w, _)| *w != worker);
    }

    fn assign(&mut self, id: Uuid, worker: Uuid, now: u64) -> Option<JobView> {
        let j = self.jobs.get_mut(&id)?;
        j.status = JobStatus::Running;
        j.attempt += 1;
        j.worker = Some(worker);
        j.started_ms = Some(now);
        j.updated_ms = now;
        j.retry_at_ms = None;
        if let Some(t) = j.timeout_ms {
            self.deadlines.insert((now.saturating_add(t), id));
        }
        let view = JobView::from(&*j);
        if let Some(w) = self.workers.get_mut(&worker) {
            w.running.insert(id);
        }
        // Best effort: after a crash the job is queued again anyway.
        let _ = self.persist(id);
        Some(view)
    }

    /// Hands ready jobs to parked dequeues, oldest waiter first.
    fn hand_to_waiting(&mut self, now: u64) {
        let mut still = VecDeque::with_capacity(self.waiting.len());
        while let Some((worker, tx)) = self.waiting.pop_front() {
            if tx.is_closed() || !self.is_valid(worker, now) {
                continue;
            }
            let best = self.workers.get(&worker).and_then(|w| self.best_for(w));
            let Some((kind, key)) = best else {
                still.push_back((worker, tx));
                continue;
            };
            self.take_ready(&kind, &key);
            let Some(view) = self.assign(key.2, worker, now) else {
                continue;
            };
            if let Err(view) = tx.send(view) {
                // The request went away between the check and the send:
                // the job goes back, not to this worker.
                self.unassign(view.id, worker);
            }
        }
        self.waiting = still;
    }

    /// Takes a job out of its kind's ready set; an emptied set goes, so
    /// kinds nobody enqueues any more cost nothing.
    fn take_ready(&mut self, kind: &str, key: &ReadyKey) {
        if let Some(set) = self.ready.get_mut(kind) {
            set.remove(key);
            if set.is_empty() {
                self.ready.remove(kind);
            }
        }
    }

    fn unassign(&mut self, id: Uuid, worker: Uuid) {
        self.stop_running(id, worker);
        if let Some(j) = self.jobs.get_mut(&id) {
            j.attempt = j.attempt.saturating_sub(1);
            j.worker = None;
            j.started_ms = None;
        }
        self.make_ready(id);
    }

    /// Records a worker's outcome for a job it runs with token `token`.
    pub(crate) fn outcome(
        &mut self,
        id: Uuid,
        worker: Uuid,
        token: u32,
        outcome: Outcome,
        error: Option<String>,
        now: u64,
    ) -> Result<(JobStatus, Option<Durable>), JobError> {
        let Some(j) = self.jobs.get(&id) else {
            return Err(JobError::UnknownJob);
        };
        if !self.is_valid(worker, now) {
            self.stale_outcomes += 1;
            self.expire_worker(worker, now);
            return Err(JobError::WorkerExpired);
        }
        if j.status != JobStatus::Running || j.worker != Some(worker) || j.attempt != token {
            self.stale_outcomes += 1;
            return Err(JobError::StaleToken {
                current: j.attempt,
                status: j.status,
            });
        }
        self.stop_running(id, worker);
        let status = match outcome {
            Outcome::Succeeded => {
                self.finish(id, JobStatus::Succeeded, None, now);
                JobStatus::Succeeded
            }
            Outcome::Failed => self.retry_or_die(id, JobStatus::Failed, error, now),
            Outcome::TimedOut => self.retry_or_die(id, JobStatus::TimedOut, error, now),
        };
        let durable = self.persist(id);
        self.hand_to_waiting(now);
        Ok((status, durable))
    }

    fn stop_running(&mut self, id: Uuid, worker: Uuid) {
        if let Some(w) = self.workers.get_mut(&worker) {
            w.running.remove(&id);
        }
        if let Some(j) = self.jobs.get(&id) {
            if let (Some(t), Some(started)) = (j.timeout_ms, j.started_ms) {
                self.deadlines.remove(&(started.saturating_add(t), id));
            }
        }
    }

    fn finish(&mut self, id: Uuid, status: JobStatus, error: Option<String>, now: u64) {
        if let Some(j) = self.jobs.get_mut(&id) {
            j.status = status;
            j.updated_ms = now;
            j.retry_at_ms = None;
            if error.is_some() {
                j.error = error;
            }
            self.finished.insert((now, id));
            if status == JobStatus::Dead {
                (self.on_dead)(j);
            }
        }
    }

    /// After a failure or a timeout: retried after the backoff while
    /// attempts remain, else dead.
    fn retry_or_die(
        &mut self,
        id: Uuid,
        status: JobStatus,
        error: Option<String>,
        now: u64,
    ) -> JobStatus {
        let Some(j) = self.jobs.get(&id) else {
            return status;
        };
        let policy = self.policy(&j.kind);
        if status == JobStatus::TimedOut && !policy.retry_timed_out {
            // Final: the work may still be running somewhere.
            self.finish(id, JobStatus::TimedOut, error, now);
            return JobStatus::TimedOut;
        }
        if j.attempt >= policy.max_attempts {
            self.finish(id, JobStatus::Dead, error, now);
            return JobStatus::Dead;
        }
        let delay = backoff_delay(&policy.backoff_ms, j.attempt);
        if let Some(j) = self.jobs.get_mut(&id) {
            j.status = status;
            j.worker = None;
            j.updated_ms = now;
            if error.is_some() {
                j.error = error;
            }
        }
        if delay == 0 {
            self.make_ready(id);
            JobStatus::Queued
        } else {
            let at = now.saturating_add(delay);
            if let Some(j) = self.jobs.get_mut(&id) {
                j.retry_at_ms = Some(at);
            }
            self.retrying.insert((at, id));
            status
        }
    }

    /// Removes a worker whose lease ended; its running jobs go back to the
    /// queue (the next attempt raises their count).
    fn expire_worker(&mut self, worker: Uuid, now: u64) {
        let Some(w) = self.workers.remove(&worker) else {
            return;
        };
        self.lease_expiries += 1;
        self.waiting.retain(|(id, _)| *id != worker);
        for id in w.running {
            self.stop_running(id, worker);
            if let Some(j) = self.jobs.get_mut(&id) {
                j.worker = None;
                j.started_ms = None;
                j.updated_ms = now;
            }
            self.make_ready(id);
            let _ = self.persist(id);
        }
    }

    /// Deadlines: expired leases, execution timeouts, retry times, and the
    /// retention of finished jobs.
    pub(crate) fn tick(&mut self, now: u64) {
        let expired: Vec<Uuid> = self
            .workers
            .iter()
            .filter(|(_, w)| w.lease_until <= now)
            .map(|(id, _)| *id)
            .collect();
        for w in expired {
            self.expire_worker(w, now);
        }
        while let Some(&(at, id)) = self.deadlines.first() {
            if at > now {
                break;
            }
            self.deadlines.remove(&(at, id));
            let Some(worker) = self.jobs.get(&id).and_then(|j| j.worker) else {
                continue;
            };
            if let Some(w) = self.workers.get_mut(&worker) {
                w.running.remove(&id);
            }
            self.timeouts += 1;
            let error = Some("execution timeout".to_owned());
            self.retry_or_die(id, JobStatus::TimedOut, error, now);
            let _ = self.persist(id);
        }
        while let Some(&(at, id)) = self.retrying.first() {
            if at > now {
                break;
            }
            self.retrying.remove(&(at, id));
            if let Some(j) = self.jobs.get_mut(&id) {
                j.retry_at_ms = None;
            }
            self.make_ready(id);
            let _ = self.persist(id);
        }
        let horizon = now.saturating_sub(self.cfg.retention_s.saturating_mul(1000));
        while let Some(&(at, id)) = self.finished.first() {
            if at > horizon {
                break;
            }
            self.finished.remove(&(at, id));
            self.jobs.remove(&id);
            if let Some(w) = &self.writer {
                let _ = w.submit_detached(vec![records::delete(id.as_bytes())]);
            }
        }
        self.hand_to_waiting(now);
    }

    /// A page of jobs in id order (= enqueue order: ids are UUIDv7) after
    /// `after`, of `status` and `kind` if given, and of kinds `visible`
    /// accepts; with the id to continue after when there are more.
    pub(crate) fn list(
        &self,
        filter: &JobFilter,
        visible: &dyn Fn(&str) -> bool,
    ) -> (Vec<JobView>, Option<Uuid>) {
        // The limit + 1 lowest matching ids, without sorting every job.
        let mut lowest: BinaryHeap<Uuid> = BinaryHeap::with_capacity(filter.limit + 2);
        for (id, j) in &self.jobs {
            if filter.after.is_some_and(|a| *id <= a)
                || filter.status.is_some_and(|s| s != j.status)
                || filter.kind.as_deref().is_some_and(|k| k != j.kind)
                || !visible(&j.kind)
            {
                continue;
            }
            lowest.push(*id);
            if lowest.len() > filter.limit + 1 {
                lowest.pop();
            }
        }
        let mut ids = lowest.into_sorted_vec();
        let more = ids.len() > filter.limit;
        ids.truncate(filter.limit);
        let next = if more { ids.last().copied() } else { None };
        let views = ids
            .iter()
            .filter_map(|id| self.jobs.get(id))
            .map(JobView::from)
            .collect();
        (views, next)
    }

    /// Queues a dead or cancelled job again with a fresh count of
    /// attempts, or a failed one waiting for its retry at once.
    pub(crate) fn retry(&mut self, id: Uuid, now: u64) -> Result<Option<Durable>, JobError> {
        let Some(j) = self.jobs.get_mut(&id) else {
            return Err(JobError::UnknownJob);
        };
        match j.status {
            JobStatus::Dead | JobStatus::Cancelled | JobStatus::TimedOut if j.is_finished() => {
                self.finished.remove(&(j.updated_ms, id));
                j.attempt = 0;
            }
            JobStatus::Failed | JobStatus::TimedOut => {
                if let Some(at) = j.retry_at_ms {
                    self.retrying.remove(&(at, id));
                }
            }
            status => {
                return Err(JobError::Conflict(format!(
                    "the job is {status}: only dead, cancelled, failed or timed-out jobs are retried"
                )));
            }
        }
        j.retry_at_ms = None;
        j.updated_ms = now;
        self.make_ready(id);
        let durable = self.persist(id);
        self.hand_to_waiting(now);
        Ok(durable)
    }

    /// Cancels a job that has not finished: a queued or waiting one never
    /// runs; a running one is taken from its worker, whose outcome is
    /// then refused as stale.
    pub(crate) fn cancel(&mut self, id: Uuid, now: u64) -> Result<Option<Durable>, JobError> {
        let Some(j) = self.jobs.get(&id) else {
            return Err(JobError::UnknownJob);
        };
        match j.status {
            JobStatus::Queued => {
                let kind = j.kind.clone();
                let key = self
                    .ready
                    .get(&kind)
                    .and_then(|set| set.iter().find(|k| k.2 == id).copied());
                if let Some(key) = key {
                    self.take_ready(&kind, &key);
                }
            }
            JobStatus::Failed | JobStatus::TimedOut if !j.is_finished() => {
                if let Some(at) = j.retry_at_ms {
                    self.retrying.remove(&(at, id));
                }
            }
            JobStatus::Running => {
                if let Some(worker) = j.worker {
                    self.stop_running(id, worker);
                }
            }
            status => {
                return Err(JobError::Conflict(format!("the job is {status} already")));
            }
        }
        if let Some(j) = self.jobs.get_mut(&id) {
            j.worker = None;
        }
        self.finish(id, JobStatus::Cancelled, None, now);
        Ok(self.persist(id))
    }

    /// Counts for the admin API.
    pub(crate) fn counts(&self) -> super::JobsInfo {
        super::JobsInfo {
            jobs: self.jobs.len(),
            ready: self.ready.values().map(BTreeSet::len).sum(),
            running: self.workers.values().map(|w| w.running.len()).sum(),
            workers: self.workers.len(),
            // A waiter whose request went away (closed) is no longer
            // waiting, though it stays queued until the next hand-out.
            waiting: self
                .waiting
                .iter()
                .filter(|(_, tx)| !tx.is_closed())
                .count(),
            lease_expiries: self.lease_expiries,
            stale_outcomes: self.stale_outcomes,
            timeouts: self.timeouts,
        }
    }

    /// Jobs held by kind and status, for metrics (one pass over every
    /// job: called at scrape time only).
    pub(crate) fn census(&self) -> Vec<(String, JobStatus, u64)> {
        let mut by: HashMap<(&str, JobStatus), u64> = HashMap::new();
        for j in self.jobs.values() {
            *by.entry((j.kind.as_str(), j.status)).or_default() += 1;
        }
        by.into_iter()
            .map(|((k, s), n)| (k.to_owned(), s, n))
            .collect()
    }
}
