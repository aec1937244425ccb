//! The jobs API, one function per operation: each takes the decoded
//! request (typed ids, the [`Outcome`] enum) and returns the typed reply of
//! [`crate::protocol::jobs`] or a [`JobError`]. HTTP (`transport/jobs.rs`)
//! and the native frames (`session/jobs.rs`) only decode around these and
//! encode their replies, so both answer with the same JSON.

use std::time::Duration;

use uuid::Uuid;

use super::{JobError, JobFilter, JobView, Jobs, NewJob};
use crate::protocol::jobs::{
    JobEnqueued, JobPage, JobStatus, Outcome, OutcomeReply, PingReply, Register, Registered,
    ReportOutcome,
};

/// Decodes an id sent as text; `what` names it in the error.
///
/// # Errors
/// [`JobError::Invalid`] if `raw` is not a UUID.
pub fn parse_id(raw: &str, what: &str) -> Result<Uuid, JobError> {
    Uuid::parse_str(raw).map_err(|e| JobError::Invalid(format!("{what} is not a UUID: {e}")))
}

/// Decodes an outcome sent as text (`succeeded`, `failed`, `timed_out`).
///
/// # Errors
/// [`JobError::Invalid`] for any other text.
pub fn parse_outcome(raw: &str) -> Result<Outcome, JobError> {
    Outcome::from_name(raw).ok_or_else(|| {
        JobError::Invalid(format!(
            "outcome {raw:?}: expected succeeded, failed or timed_out"
        ))
    })
}

/// Enqueues a job; answers once it is durable.
///
/// # Errors
/// As [`Jobs::enqueue`].
pub async fn enqueue(jobs: &Jobs, new: NewJob) -> Result<JobEnqueued, JobError> {
    Ok(JobEnqueued {
        id: jobs.enqueue(new).await?,
    })
}

/// A job's record, without its worker and token, if the caller may see
/// jobs of its kind (`visible`); a job it may not see answers as a
/// missing one does, so ids of others' jobs reveal nothing.
///
/// # Errors
/// As [`Jobs::status`]; [`JobError::UnknownJob`] for an invisible kind.
pub async fn status(
    jobs: &Jobs,
    id: Uuid,
    visible: impl Fn(&str) -> bool,
) -> Result<JobView, JobError> {
    let view = jobs.status(id).await?;
    if !visible(&view.kind) {
        return Err(JobError::UnknownJob);
    }
    Ok(view)
}

/// Registers a worker for the principal `owner` (its id), the only one
/// that may then use it.
///
/// # Errors
/// As [`Jobs::register`].
pub async fn register(jobs: &Jobs, req: Register, owner: String) -> Result<Registered, JobError> {
    let (worker_id, lease_ms) = jobs.register(req.kinds, owner).await?;
    Ok(Registered {
        worker_id,
        lease_ms,
    })
}

/// Extends a worker's lease.
///
/// # Errors
/// As [`Jobs::ping`].
pub async fn ping(jobs: &Jobs, worker: Uuid, owner: String) -> Result<PingReply, JobError> {
    Ok(PingReply {
        valid: jobs.ping(worker, owner).await?,
    })
}

/// The worker's next job, waiting up to `wait_ms`; `None` if none came.
///
/// # Errors
/// As [`Jobs::dequeue`].
pub async fn dequeue(
    jobs: &Jobs,
    worker: Uuid,
    owner: String,
    wait_ms: u64,
) -> Result<Option<JobView>, JobError> {
    jobs.dequeue(worker, owner, Duration::from_millis(wait_ms))
        .await
}

/// Records a worker's outcome for job `id`; answers once it is durable.
///
/// # Errors
/// As [`Jobs::outcome`].
pub async fn outcome(
    jobs: &Jobs,
    id: Uuid,
    req: ReportOutcome,
    owner: String,
) -> Result<OutcomeReply, JobError> {
    let status = jobs
        .outcome(id, req.worker_id, owner, req.token, req.outcome, req.error)
        .await?;
    Ok(OutcomeReply { id, status })
}

/// Decodes a status sent as text (`queued`, `dead`, ...).
///
/// # Errors
/// [`JobError::Invalid`] for any other text.
pub fn parse_status(raw: &str) -> Result<JobStatus, JobError> {
    serde_json::from_value(serde_json::Value::String(raw.to_owned())).map_err(|_| {
        JobError::Invalid(format!(
            "status {raw:?}: expected queued, running, failed, timed_out, succeeded, dead or cancelled"
        ))
    })
}

/// A page of the jobs whose kinds the caller may see (`visible`).
///
/// # Errors
/// As [`Jobs::list`].
pub async fn list(
    jobs: &Jobs,
    filter: JobFilter,
    visible: impl Fn(&str) -> bool + Send + 'static,
) -> Result<JobPage, JobError> {
    let (jobs, next) = jobs.list(filter, visible).await?;
    Ok(JobPage { jobs, next })
}

/// Queues a dead, cancelled, failed or timed-out job again.
///
/// # Errors
/// As [`Jobs::retry`].
pub async fn retry(jobs: &Jobs, id: Uuid) -> Result<JobView, JobError> {
    jobs.retry(id).await
}

/// Cancels a job that has not finished, if the caller may (`allowed`,
/// given the job's kind); one it may not see answers as a missing one.
///
/// # Errors
/// As [`Jobs::cancel`]; [`JobError::UnknownJob`] for a kind not allowed.
pub async fn cancel(
    jobs: &Jobs,
    id: Uuid,
    allowed: impl Fn(&str) -> bool,
) -> Result<JobView, JobError> {
    let view = jobs.status(id).await?;
    if !allowed(&view.kind) {
        return Err(JobError::UnknownJob);
    }
    jobs.cancel(id).await
}
