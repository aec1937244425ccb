//! The jobs API, one function per operation: each takes the decoded
//! request (typed ids, the [`Outcome`] enum) and returns the typed reply of
//! [`crate::protocol::jobs`] or a [`JobError`]. HTTP (`transport/jobs.rs`)
//! and the native frames (`session/jobs.rs`) only decode around these and
//! encode their replies, so both answer with the same JSON.

use std::time::Duration;

use uuid::Uuid;

use super::{JobError, JobView, Jobs, NewJob};
use crate::protocol::jobs::{
    Enqueued, Outcome, OutcomeReply, PingReply, Register, Registered, ReportOutcome,
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
pub async fn enqueue(jobs: &Jobs, new: NewJob) -> Result<Enqueued, JobError> {
    Ok(Enqueued {
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

/// Registers a worker.
///
/// # Errors
/// As [`Jobs::register`].
pub async fn register(jobs: &Jobs, req: Register) -> Result<Registered, JobError> {
    let (worker_id, lease_ms) = jobs.register(req.kinds).await?;
    Ok(Registered {
        worker_id,
        lease_ms,
    })
}

/// Extends a worker's lease.
///
/// # Errors
/// As [`Jobs::ping`].
pub async fn ping(jobs: &Jobs, worker: Uuid) -> Result<PingReply, JobError> {
    Ok(PingReply {
        valid: jobs.ping(worker).await?,
    })
}

/// The worker's next job, waiting up to `wait_ms`; `None` if none came.
///
/// # Errors
/// As [`Jobs::dequeue`].
pub async fn dequeue(jobs: &Jobs, worker: Uuid, wait_ms: u64) -> Result<Option<JobView>, JobError> {
    jobs.dequeue(worker, Duration::from_millis(wait_ms)).await
}

/// Records a worker's outcome for job `id`; answers once it is durable.
///
/// # Errors
/// As [`Jobs::outcome`].
pub async fn outcome(jobs: &Jobs, id: Uuid, req: ReportOutcome) -> Result<OutcomeReply, JobError> {
    let status = jobs
        .outcome(id, req.worker_id, req.token, req.outcome, req.error)
        .await?;
    Ok(OutcomeReply { id, status })
}
