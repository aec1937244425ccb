//! The client's job and worker calls over the native protocol: the same
//! operations as the HTTP API, answered by `job_reply` frames.

use std::time::Duration;

use uuid::Uuid;

use super::{Client, ClientError};
use crate::broker::jobs::{JobStatus, JobView, NewJob, Outcome};
use crate::protocol::frame::{ClientFrame, ServerFrame};
use crate::protocol::jobs::{
    JobDequeue, JobEnqueue, JobOutcome, JobStatusQuery, JsonText, WorkerPing, WorkerRegister,
};

fn unexpected(what: &str, got: impl std::fmt::Debug) -> ClientError {
    ClientError::Connect(format!("expected {what}, got {got:?}"))
}

impl Client {
    async fn job_call(
        &self,
        make: impl FnOnce(u64) -> ClientFrame,
    ) -> Result<serde_json::Value, ClientError> {
        let rid = self.next_id();
        match self.request(make(rid), Some(rid)).await? {
            ServerFrame::JobReply(r) => Ok(r.body.value()),
            other => Err(unexpected("job_reply", other)),
        }
    }

    /// Enqueues a job; returns its id once it is durable.
    ///
    /// # Errors
    /// The server refusing (invalid field, too many jobs), a timeout, or a
    /// closed connection.
    pub async fn enqueue_job(&self, job: NewJob) -> Result<Uuid, ClientError> {
        let v = self
            .job_call(|rid| {
                ClientFrame::JobEnqueue(JobEnqueue {
                    kind: job.kind,
                    entity_id: job.entity_id.to_string(),
                    data: JsonText::of(&job.data),
                    priority: job.priority,
                    timeout_ms: job.timeout_ms,
                    rid,
                })
            })
            .await?;
        serde_json::from_value(v["id"].clone()).map_err(|e| unexpected("a job id", e))
    }

    /// A job's record.
    ///
    /// # Errors
    /// `unknown_job`, a timeout, or a closed connection.
    pub async fn job_status(&self, id: Uuid) -> Result<JobView, ClientError> {
        let v = self
            .job_call(|rid| {
                ClientFrame::JobStatus(JobStatusQuery {
                    id: id.to_string(),
                    rid,
                })
            })
            .await?;
        serde_json::from_value(v).map_err(|e| unexpected("a job", e))
    }

    /// Registers a worker for `kinds` (empty: all); returns its id and
    /// lease (ms).
    ///
    /// # Errors
    /// The server refusing, a timeout, or a closed connection.
    pub async fn register_worker(&self, kinds: &[&str]) -> Result<(Uuid, u64), ClientError> {
        let kinds = kinds.iter().map(|k| (*k).to_owned()).collect();
        let v = self
            .job_call(|rid| ClientFrame::WorkerRegister(WorkerRegister { kinds, rid }))
            .await?;
        let id = serde_json::from_value(v["worker_id"].clone())
            .map_err(|e| unexpected("a worker id", e))?;
        Ok((id, v["lease_ms"].as_u64().unwrap_or(0)))
    }

    /// Extends a worker's lease; `false`: register again.
    ///
    /// # Errors
    /// A timeout or a closed connection.
    pub async fn ping_worker(&self, worker: Uuid) -> Result<bool, ClientError> {
        let v = self
            .job_call(|rid| {
                ClientFrame::WorkerPing(WorkerPing {
                    worker_id: worker.to_string(),
                    rid,
                })
            })
            .await?;
        Ok(v["valid"].as_bool().unwrap_or(false))
    }

    /// The worker's next job, waiting up to `wait` (keep it under the
    /// client's request timeout); `None` if none arrived.
    ///
    /// # Errors
    /// `worker_expired`, a timeout, or a closed connection.
    pub async fn dequeue_job(
        &self,
        worker: Uuid,
        wait: Duration,
    ) -> Result<Option<JobView>, ClientError> {
        let v = self
            .job_call(|rid| {
                ClientFrame::JobDequeue(JobDequeue {
                    worker_id: worker.to_string(),
                    wait_ms: u64::try_from(wait.as_millis()).unwrap_or(u64::MAX),
                    rid,
                })
            })
            .await?;
        serde_json::from_value(v).map_err(|e| unexpected("a job or null", e))
    }

    /// Reports a job's outcome with the token it was handed out with;
    /// returns the job's new status.
    ///
    /// # Errors
    /// `stale_token` or `worker_expired` (nothing changed), a timeout, or
    /// a closed connection.
    pub async fn job_outcome(
        &self,
        job: Uuid,
        worker: Uuid,
        token: u32,
        outcome: Outcome,
        error: Option<String>,
    ) -> Result<JobStatus, ClientError> {
        let outcome = match outcome {
            Outcome::Succeeded => "succeeded",
            Outcome::Failed => "failed",
            Outcome::TimedOut => "timed_out",
        };
        let v = self
            .job_call(|rid| {
                ClientFrame::JobOutcome(JobOutcome {
                    id: job.to_string(),
                    worker_id: worker.to_string(),
                    token,
                    outcome: outcome.to_owned(),
                    error,
                    rid,
                })
            })
            .await?;
        serde_json::from_value(v["status"].clone()).map_err(|e| unexpected("a status", e))
    }
}
