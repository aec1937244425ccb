//! Job workers inside the embedding app: a handler for some job kinds,
//! run by Wharf on a thread of its own (an actix arbiter), with the same
//! lease and outcome rules as external workers: each worker registers,
//! pings while a job runs, reports the outcome with its token, and
//! registers again if its lease was lost. A handler that panics does not
//! end its worker: the job is reported `failed` with the panic's message
//! and the worker carries on with a new handler from the factory.

use std::future::Future;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use super::Error;
use super::Wharf;
use crate::broker::jobs::{JobError, JobView, Jobs, Outcome};

/// The owner of embedded workers: no principal's id has this form (ids
/// are `anonymous` or `via:name`), so no client can use their ids.
const OWNER: &str = "embedded";

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

/// What an embedded worker runs for each job it takes: one value per
/// worker, so it may keep state (a connection, a cache) between jobs;
/// made again by the factory after a panic. Any
/// `FnMut(JobView) -> impl Future<Output = Result<(), String>>` is one.
pub trait JobHandler: 'static {
    /// The future of one job's run.
    type Run: Future<Output = Result<(), String>> + 'static;
    /// Starts the run of `job`: `Ok` reports `succeeded`, `Err(text)`
    /// reports `failed`.
    fn handle(&mut self, job: JobView) -> Self::Run;
}

impl<F, Fut> JobHandler for F
where
    F: FnMut(JobView) -> Fut + 'static,
    Fut: Future<Output = Result<(), String>> + 'static,
{
    type Run = Fut;

    fn handle(&mut self, job: JobView) -> Fut {
        self(job)
    }
}

/// How a job's run ended.
enum Ended {
    Done(Result<(), String>),
    Panicked(String),
    TimedOut,
    LeaseLost,
}

/// A run's future, with a panic while polling it caught and returned.
struct Guarded<F>(Pin<Box<F>>);

impl<F: Future> Future for Guarded<F> {
    type Output = Result<F::Output, String>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let run = self.0.as_mut();
        match catch_unwind(AssertUnwindSafe(|| run.poll(cx))) {
            Ok(Poll::Ready(out)) => Poll::Ready(Ok(out)),
            Ok(Poll::Pending) => Poll::Pending,
            Err(payload) => Poll::Ready(Err(panic_message(&*payload))),
        }
    }
}

/// The text a panic was raised with.
fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    payload
        .downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a panic without a message".to_owned())
}

async fn run_one<M, H>(jobs: Jobs, kinds: Vec<String>, factory: Arc<M>, stop: Arc<AtomicBool>)
where
    M: Fn() -> H + 'static,
    H: JobHandler,
{
    let mut handler = factory();
    let ping_every = Duration::from_millis((jobs.lease_ms() / 3).max(10));
    let mut worker = None;
    while !stop.load(Ordering::Acquire) {
        let id = match worker {
            Some(id) => id,
            None => match jobs.register(kinds.clone(), OWNER.to_owned()).await {
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
        let job = match jobs.dequeue(id, OWNER.to_owned(), POLL).await {
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
        let started = catch_unwind(AssertUnwindSafe(|| handler.handle(job)));
        let work = async move {
            match started {
                Ok(run) => Guarded(Box::pin(run)).await,
                Err(payload) => Err(panic_message(&*payload)),
            }
        };
        tokio::pin!(work);
        let deadline = timeout.map(|t| actix_rt::time::Instant::now() + Duration::from_millis(t));
        // First due one interval from now (an awaited first tick of
        // `interval` would hold every job ~1 ms, until the timer's next
        // millisecond).
        let mut pings =
            actix_rt::time::interval_at(actix_rt::time::Instant::now() + ping_every, ping_every);
        let ended = loop {
            tokio::select! {
                r = &mut work => break match r {
                    Ok(done) => Ended::Done(done),
                    Err(panic) => Ended::Panicked(panic),
                },
                _ = pings.tick() => {
                    if !jobs.ping(id, OWNER.to_owned()).await.unwrap_or(false) {
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
            Ended::Panicked(panic) => {
                tracing::error!(job = %job_id, "embedded job handler panicked: {panic}; making a new one");
                // The old handler's state may be broken: a new one.
                handler = factory();
                (Outcome::Failed, Some(format!("handler panicked: {panic}")))
            }
            Ended::TimedOut => (Outcome::TimedOut, Some("execution timeout".to_owned())),
            // The job belongs to someone else now: stop working on it.
            Ended::LeaseLost => {
                worker = None;
                continue;
            }
        };
        if let Err(e) = jobs
            .outcome(job_id, id, OWNER.to_owned(), token, outcome, error)
            .await
        {
            tracing::warn!(job = %job_id, "embedded job worker's outcome refused: {e}");
        }
    }
}

impl Wharf {
    /// Runs `handler` for jobs of `kinds` (empty: every kind) on
    /// `concurrency` workers, on a thread of Wharf's own. The handler's
    /// `Ok` reports `succeeded`, `Err(text)` reports `failed`, a panic
    /// reports `failed` with its message (the worker carries on); a job
    /// that outlives its execution timeout is reported `timed_out`. Each
    /// worker pings its lease while a job runs. The handler's future need
    /// not be `Send`: it runs on that thread.
    ///
    /// # Errors
    /// [`Error::WorkerThread`] if the thread cannot start.
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
        let handler = Arc::new(handler);
        self.run_job_worker_factory(kinds, concurrency, move || {
            let handler = handler.clone();
            move |job| handler(job)
        })
    }

    /// [`Wharf::run_job_workers`] with a handler of each worker's own,
    /// made by `factory` on the workers' thread (so it need not be `Send`)
    /// when the worker starts and again after the handler panicked: state
    /// a panic may have left half-changed is not used again.
    ///
    /// # Errors
    /// [`Error::WorkerThread`] if the thread cannot start.
    pub fn run_job_worker_factory<M, H>(
        &self,
        kinds: Vec<String>,
        concurrency: usize,
        factory: M,
    ) -> Result<JobWorkers, Error>
    where
        M: Fn() -> H + Send + Sync + 'static,
        H: JobHandler,
    {
        let arbiter = actix_rt::Arbiter::new();
        let stop = Arc::new(AtomicBool::new(false));
        let factory = Arc::new(factory);
        for _ in 0..concurrency.max(1) {
            let (jobs, kinds, factory, stop) = (
                self.jobs().clone(),
                kinds.clone(),
                factory.clone(),
                stop.clone(),
            );
            let spawned = arbiter.spawn_fn(move || {
                actix_rt::spawn(run_one(jobs, kinds, factory, stop));
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
