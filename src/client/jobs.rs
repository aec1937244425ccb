//! The client's job and worker calls over the native protocol: the same
//! operations as the HTTP API, answered by `job_reply` frames whose
//! bodies decode into the typed replies of [`crate::protocol::jobs`].

use std::time::Duration;

use uuid::Uuid;

use super::{Client, ClientError};
use crate::protocol::frame::{ClientFrame, ServerFrame};
use crate::protocol::jobs::{
    JobDequeue, JobEnqueue, JobEnqueued, JobOutcome, JobStatus, JobStatusQuery, JobView, JsonText,
    NewJob, Outcome, OutcomeReply, PingReply, Registered, WorkerPing, WorkerRegister,
};

fn unexpected(what: &str, got: impl std::fmt::Debug) -> ClientError {
    ClientError::Connect(format!("expected {what}, got {got:?}"))
}

/// The jobs and workers calls of a [`Client`] ([`Client::jobs`]): enqueue
/// a job, read its status, and a worker's register, ping, dequeue and
/// outcome. A view that borrows the client, made afresh at each use
/// (`client.jobs().enqueue_job(..)`); it derefs to the client.
#[derive(Clone, Copy)]
pub struct JobCalls<'a>(&'a Client);

impl std::ops::Deref for JobCalls<'_> {
    type Target = Client;

    fn deref(&self) -> &Client {
        self.0
    }
}

impl Client {
    /// The jobs and workers calls.
    pub fn jobs(&self) -> JobCalls<'_> {
        JobCalls(self)
    }

    /// Sends a job frame; its `job_reply` body as `T` (`what` names it in
    /// the error).
    async fn job_call<T: serde::de::DeserializeOwned>(
        &self,
        what: &str,
        make: impl FnOnce(u64) -> ClientFrame,
    ) -> Result<T, ClientError> {
        let rid = self.next_id();
        match self.request(make(rid), Some(rid)).await? {
            ServerFrame::JobReply(r) => {
                serde_json::from_str(&r.body.0).map_err(|e| unexpected(what, e))
            }
            other => Err(unexpected("job_reply", other)),
        }
    }
}

impl JobCalls<'_> {
    /// Enqueues a job; returns its id once it is durable.
    ///
    /// # Errors
    /// The server refusing (invalid field, too many jobs), a timeout, or a
    /// closed connection.
    pub async fn enqueue_job(self, job: NewJob) -> Result<Uuid, ClientError> {
        let reply: JobEnqueued = self
            .job_call("a job id", |rid| {
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
        Ok(reply.id)
    }
    /// A job's record.
    ///
    /// # Errors
    /// `unknown_job`, a timeout, or a closed connection.
    pub async fn job_status(self, id: Uuid) -> Result<JobView, ClientError> {
        self.job_call("a job", |rid| {
            ClientFrame::JobStatus(JobStatusQuery {
                id: id.to_string(),
                rid,
            })
        })
        .await
    }
    /// Registers a worker for `kinds` (empty: all); returns its id and
    /// lease (ms).
    ///
    /// # Errors
    /// The server refusing, a timeout, or a closed connection.
    pub async fn register_worker(self, kinds: &[&str]) -> Result<(Uuid, u64), ClientError> {
        let kinds = kinds.iter().map(|k| (*k).to_owned()).collect();
        let r: Registered = self
            .job_call("a registration", |rid| {
                ClientFrame::WorkerRegister(WorkerRegister { kinds, rid })
            })
            .await?;
        Ok((r.worker_id, r.lease_ms))
    }
    /// Extends a worker's lease; `false`: register again.
    ///
    /// # Errors
    /// A timeout or a closed connection.
    pub async fn ping_worker(self, worker: Uuid) -> Result<bool, ClientError> {
        let r: PingReply = self
            .job_call("a ping reply", |rid| {
                ClientFrame::WorkerPing(WorkerPing {
                    worker_id: worker.to_string(),
                    rid,
                })
            })
            .await?;
        Ok(r.valid)
    }
    /// The worker's next job, waiting up to `wait` (keep it under the
    /// client's request timeout); `None` if none arrived.
    ///
    /// # Errors
    /// `worker_expired`, a timeout, or a closed connection.
    pub async fn dequeue_job(
        self,
        worker: Uuid,
        wait: Duration,
    ) -> Result<Option<JobView>, ClientError> {
        self.job_call("a job or null", |rid| {
            ClientFrame::JobDequeue(JobDequeue {
                worker_id: worker.to_string(),
                wait_ms: u64::try_from(wait.as_millis()).unwrap_or(u64::MAX),
                rid,
            })
        })
        .await
    }
    /// Reports a job's outcome with the token it was handed out with;
    /// returns the job's new status.
    ///
    /// # Errors
    /// `stale_token` or `worker_expired` (nothing changed), a timeout, or
    /// a closed connection.
    pub async fn job_outcome(
        self,
        job: Uuid,
        worker: Uuid,
        token: u32,
        outcome: Outcome,
        error: Option<String>,
    ) -> Result<JobStatus, ClientError> {
        let r: OutcomeReply = self
            .job_call("a status", |rid| {
                ClientFrame::JobOutcome(JobOutcome {
                    id: job.to_string(),
                    worker_id: worker.to_string(),
                    token,
                    outcome: outcome.name().to_owned(),
                    error,
                    rid,
                })
            })
            .await?;
        Ok(r.status)
    }
}
