//! Job workers inside the embedding app: a handler function for some job
//! kinds, run by Wharf on a thread of its own (an actix arbiter), with the
//! same lease and outcome rules as external workers: each worker
//! registers, pings while a job runs, reports the outcome with its token,
//! and registers again if its lease was lost.

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use super::Wharf;
use crate::Error;
use crate::broker::jobs::{JobError, JobView, Jobs, Outcome};

/// How long an idle embedded worker's dequeue waits before asking again.
const POLL: Duration = Duration::from_secs(1);

/// The embedded workers of one [`Wharf::run_job_workers`] call. Dropping
/// it does not stop them; [`JobWorkers::stop`] or the broker's shutdown
/// (which also ends their thread) does.
pub struct JobWorkers {
    arbiter: actix_rt::ArbiterHandle,
    stop: Arc<AtomicBool>,
}

impl JobWorkers {
    /// Stops taking jobs and ends the thread. Jobs running at that moment
    /// are abandoned: their lease runs out and they go back to the queue.
    pub fn stop(self) {
        self.stop.store(true, Ordering::Release);
        self.arbiter.stop();
    }
}

/// How a job's run ended.
enum Ended {
    Done(Result<(), String>),
    TimedOut,
    LeaseLost,
}

async fn run_one<F, Fut>(jobs: Jobs, kinds: Vec<String>, handler: Arc<F>, stop: Arc<AtomicBool>)
where
    F: Fn(JobView) -> Fut + 'static,
    Fut: Future<Output = Result<(), String>> + 'static,
{
    let ping_every = Duration::from_millis((jobs.lease_ms() / 3).max(10));
    let mut worker = None;
    while !stop.load(Ordering::Acquire) {
        let id = match worker {
            Some(id) => id,
            None => match jobs.register(kinds.clone()).await {
                Ok((id, _)) => {
                    worker = Some(id);
                    id
                }
                Err(e) => {
                    tracing::warn!("embedded job worker cannot register: {e}");
                    actix_rt::time::sleep(POLL).await;
                    continue;
                }
            },
        };
        // A dequeue checks the lease and extends it over its wait.
        let job = match jobs.dequeue(id, POLL).await {
            Ok(Some(job)) => job,
            Ok(None) => continue,
            Err(JobError::WorkerExpired) => {
                worker = None;
                continue;
            }
            Err(e) => {
                tracing::warn!("embedded job worker cannot dequeue: {e}");
                actix_rt::time::sleep(POLL).await;
                continue;
            }
        };
        let (job_id, token, timeout) = (job.id, job.attempt, job.timeout_ms);
        let work = handler(job);
        tokio::pin!(work);
        let deadline = timeout.map(|t| actix_rt::time::Instant::now() + Duration::from_millis(t));
        let mut pings = actix_rt::time::interval(ping_every);
        pings.tick().await;
        let ended = loop {
            tokio::select! {
                r = &mut work => break Ended::Done(r),
                _ = pings.tick() => {
                    if !jobs.ping(id).await.unwrap_or(false) {
                        break Ended::LeaseLost;
                    }
                }
                _ = async {
                    match deadline {
                        Some(d) => actix_rt::time::sleep_until(d).await,
                        None => std::future::pending().await,
                    }
                } => break Ended::TimedOut,
            }
        };
        let (outcome, error) = match ended {
            Ended::Done(Ok(())) => (Outcome::Succeeded, None),
            Ended::Done(Err(e)) => (Outcome::Failed, Some(e)),
            Ended::TimedOut => (Outcome::TimedOut, Some("execution timeout".to_owned())),
            // The job belongs to someone else now: stop working on it.
            Ended::LeaseLost => {
                worker = None;
                continue;
            }
        };
        if let Err(e) = jobs.outcome(job_id, id, token, outcome, error).await {
            tracing::warn!(job = %job_id, "embedded job worker's outcome refused: {e}");
        }
    }
}

impl Wharf {
    /// Runs `handler` for jobs of `kinds` (empty: every kind) on
    /// `concurrency` workers, on a thread of Wharf's own. The handler's
    /// `Ok` reports `succeeded`, `Err(text)` reports `failed`; a job that
    /// outlives its execution timeout is reported `timed_out`. Each worker
    /// pings its lease while a job runs. The handler's future need not be
    /// `Send`: it runs on that thread.
    ///
    /// # Errors
    /// [`Error::Io`] if the thread cannot start.
    pub fn run_job_workers<F, Fut>(
        &self,
        kinds: Vec<String>,
        concurrency: usize,
        handler: F,
    ) -> Result<JobWorkers, Error>
    where
        F: Fn(JobView) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<(), String>> + 'static,
    {
        let arbiter = actix_rt::Arbiter::new();
        let stop = Arc::new(AtomicBool::new(false));
        let handler = Arc::new(handler);
        for _ in 0..concurrency.max(1) {
            let (jobs, kinds, handler, stop) = (
                self.jobs().clone(),
                kinds.clone(),
                handler.clone(),
                stop.clone(),
            );
            let spawned = arbiter.spawn_fn(move || {
                actix_rt::spawn(run_one(jobs, kinds, handler, stop));
            });
            if !spawned {
                return Err(Error::WorkerThread);
            }
        }
        let handle = JobWorkers {
            arbiter: arbiter.handle(),
            stop,
        };
        // The broker's shutdown stops the thread and waits for it.
        self.adopt_thread(arbiter);
        Ok(handle)
    }
}
