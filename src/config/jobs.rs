//! `[jobs]` and `[[jobs.kinds]]`: the jobs resource's limits and retry
//! policies.

use serde::{Deserialize, Serialize};

/// `[jobs]` settings.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct JobsConfig {
    /// Milliseconds a worker stays valid after registering, pinging or
    /// dequeuing (a dequeue adds its `wait_ms`); past it its running jobs
    /// go back to the queue.
    pub worker_lease_ms: u64,
    /// Attempts a job gets (the first included) before it is dead.
    pub max_attempts: u32,
    /// Delays before a failed or timed-out job is queued again, by attempt
    /// (the last repeats); empty = at once.
    pub backoff_ms: Vec<u64>,
    /// Execution timeout of jobs that do not set one; 0 = none.
    pub timeout_ms: u64,
    /// Whether a timed-out attempt (the worker's `timed_out` outcome, or
    /// the execution timeout) is retried like a failure. Off by default:
    /// a timed-out job ends `timed_out`, since work that may still be
    /// running somewhere should not be started again unasked.
    pub retry_timed_out: bool,
    /// Seconds finished (succeeded, dead, timed out or cancelled) jobs
    /// stay queryable.
    pub retention_s: u64,
    /// Most jobs held (finished ones included); past it enqueues are
    /// refused with `queue_full`.
    pub max_jobs: usize,
    /// Most workers registered at once.
    pub max_workers: usize,
    /// Longest `wait_ms` a dequeue may ask for.
    pub max_wait_ms: u64,
    /// Per-kind policies overriding the above.
    pub kinds: Vec<JobKindConfig>,
}

impl Default for JobsConfig {
    fn default() -> Self {
        JobsConfig {
            worker_lease_ms: 30_000,
            max_attempts: 3,
            backoff_ms: vec![1_000, 5_000, 30_000],
            timeout_ms: 0,
            retry_timed_out: false,
            retention_s: 86_400,
            max_jobs: 1_000_000,
            max_workers: 10_000,
            max_wait_ms: 60_000,
            kinds: Vec::new(),
        }
    }
}

/// One `[[jobs.kinds]]` entry: a job kind's own retry policy.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct JobKindConfig {
    /// The kind.
    pub name: String,
    /// See [`JobsConfig::max_attempts`].
    #[serde(default)]
    pub max_attempts: Option<u32>,
    /// See [`JobsConfig::backoff_ms`].
    #[serde(default)]
    pub backoff_ms: Option<Vec<u64>>,
    /// See [`JobsConfig::timeout_ms`].
    #[serde(default)]
    pub timeout_ms: Option<u64>,
    /// See [`JobsConfig::retry_timed_out`].
    #[serde(default)]
    pub retry_timed_out: Option<bool>,
}
