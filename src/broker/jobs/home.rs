//! Where the jobs resource lives when it is not on this node: the
//! [`JobsHome`] hook (the cluster implements it) and the calls sent there.

use std::time::Duration;

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use super::{JobError, JobStatus, NewJob, Outcome};
use crate::broker::hooks::HookFuture;
use crate::protocol::frame::ErrorCode;

/// A jobs operation sent to the jobs resource's home.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "job", rename_all = "snake_case")]
pub enum JobCall {
    /// `Jobs::enqueue`.
    Enqueue {
        /// The job.
        new: NewJob,
    },
    /// `Jobs::status`.
    Status {
        /// The job.
        id: Uuid,
    },
    /// `Jobs::list`.
    List {
        /// Only this status.
        status: Option<JobStatus>,
        /// Only this kind.
        kind: Option<String>,
        /// After this id.
        after: Option<Uuid>,
        /// At most this many.
        limit: usize,
    },
    /// `Jobs::retry`.
    Retry {
        /// The job.
        id: Uuid,
    },
    /// `Jobs::cancel`.
    Cancel {
        /// The job.
        id: Uuid,
    },
    /// `Jobs::register`.
    Register {
        /// The kinds taken.
        kinds: Vec<String>,
        /// The principal asking (the worker's owner).
        owner: String,
    },
    /// `Jobs::ping`.
    Ping {
        /// The worker.
        worker: Uuid,
        /// The principal asking (the worker's owner).
        owner: String,
    },
    /// `Jobs::dequeue`.
    Dequeue {
        /// The worker.
        worker: Uuid,
        /// The principal asking (the worker's owner).
        owner: String,
        /// How long to wait for a job.
        wait_ms: u64,
    },
    /// `Jobs::outcome`.
    Outcome {
        /// The job.
        id: Uuid,
        /// The worker.
        worker: Uuid,
        /// The principal asking (the worker's owner).
        owner: String,
        /// The attempt.
        token: u32,
        /// How it went.
        outcome: Outcome,
        /// Why it failed.
        error: Option<String>,
    },
    /// `Jobs::info`.
    Info,
}

/// Where the jobs resource lives, asked before each operation, since it
/// may move (a cluster with failover): every operation runs where it
/// says. The cluster implements it.
pub trait JobsHome: Send + Sync {
    /// The node the jobs live on now, `None` when that is this one (after
    /// taking them over here, if this node is next in line for them).
    fn place(&self) -> HookFuture<'_, Result<Option<String>, JobError>>;

    /// Sends `call` to `home` and waits up to `limit`: its answer as JSON.
    fn call<'a>(
        &'a self,
        home: &'a str,
        call: JobCall,
        limit: Duration,
    ) -> HookFuture<'a, Result<serde_json::Value, JobError>>;

    /// How long a call may take beyond its own wait (a dequeue's).
    fn call_timeout(&self) -> Duration;
}

/// A jobs call on `home`, its answer read as `T`.
///
/// # Errors
/// The home's refusal or silence, or an answer that does not read as `T`.
pub(super) async fn call<T: DeserializeOwned>(
    remote: &dyn JobsHome,
    home: &str,
    call: JobCall,
    limit: Duration,
) -> Result<T, JobError> {
    let value = remote.call(home, call, limit).await?;
    serde_json::from_value(value).map_err(|e| JobError::Remote {
        code: ErrorCode::Internal,
        message: format!("an unreadable answer from node {home:?}: {e}"),
    })
}
