//! The jobs API's types, shared by every transport and the broker: the
//! decoded requests and typed replies of each operation (the same JSON on
//! HTTP and in native `job_reply` bodies), and the native protocol's job
//! and worker frames (proto/http.md, proto/native.md). Pure: serde only.

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use uuid::Uuid;

/// JSON carried inside a frame: a JSON value in JSON frames, its text in
/// bincode frames. Kept as canonical text.
#[derive(Debug, Clone, PartialEq, Eq, bincode::Encode, bincode::Decode)]
pub struct JsonText(pub String);

/// `null`, the value of an absent field (an empty text would decode to a
/// different frame than it encodes to).
impl Default for JsonText {
    fn default() -> Self {
        JsonText("null".into())
    }
}

impl JsonText {
    /// The canonical JSON text of `value`: compact, object keys sorted
    /// (as the text a decoded frame holds).
    pub fn of<T: Serialize>(value: &T) -> JsonText {
        match serde_json::to_value(value) {
            Ok(v) => JsonText(v.to_string()),
            Err(_) => JsonText::default(),
        }
    }

    /// The value the text holds (`Null` if it is not JSON).
    pub fn value(&self) -> serde_json::Value {
        serde_json::from_str(&self.0).unwrap_or(serde_json::Value::Null)
    }
}

impl Serialize for JsonText {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.value().serialize(s)
    }
}

impl<'de> Deserialize<'de> for JsonText {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let v = serde_json::Value::deserialize(d)?;
        Ok(JsonText(v.to_string()))
    }
}

/// `job_enqueue`: a job; answered with `{"id"}` once it is durable.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, bincode::Encode, bincode::Decode)]
#[serde(deny_unknown_fields)]
pub struct JobEnqueue {
    /// Its kind.
    pub kind: String,
    /// The entity it is about (a UUID).
    pub entity_id: String,
    /// Free-form JSON for the worker.
    #[serde(default)]
    pub data: JsonText,
    /// 0-9.
    #[serde(default)]
    pub priority: u8,
    /// Execution timeout (ms).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_ms: Option<u64>,
    /// Request id (required: the answer carries it).
    pub rid: u64,
}

/// `job_status`: a job's record.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, bincode::Encode, bincode::Decode)]
#[serde(deny_unknown_fields)]
pub struct JobStatusQuery {
    /// The job id.
    pub id: String,
    /// Request id.
    pub rid: u64,
}

/// `worker_register`: answered with `{"worker_id","lease_ms"}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, bincode::Encode, bincode::Decode)]
#[serde(deny_unknown_fields)]
pub struct WorkerRegister {
    /// Kinds served (empty: all).
    #[serde(default)]
    pub kinds: Vec<String>,
    /// Request id.
    pub rid: u64,
}

/// `worker_ping`: answered with `{"valid"}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, bincode::Encode, bincode::Decode)]
#[serde(deny_unknown_fields)]
pub struct WorkerPing {
    /// The worker id.
    pub worker_id: String,
    /// Request id.
    pub rid: u64,
}

/// `job_dequeue`: answered with the job (and its `token`) or `null` when
/// none arrived within `wait_ms`. Other frames are handled meanwhile.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, bincode::Encode, bincode::Decode)]
#[serde(deny_unknown_fields)]
pub struct JobDequeue {
    /// The worker id.
    pub worker_id: String,
    /// Longest wait (ms), capped by `jobs.max_wait_ms`.
    #[serde(default)]
    pub wait_ms: u64,
    /// Request id.
    pub rid: u64,
}

/// `job_outcome`: answered with `{"id","status"}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, bincode::Encode, bincode::Decode)]
#[serde(deny_unknown_fields)]
pub struct JobOutcome {
    /// The job id.
    pub id: String,
    /// The worker id.
    pub worker_id: String,
    /// The token the job was handed out with.
    pub token: u32,
    /// `succeeded`, `failed` or `timed_out`.
    pub outcome: String,
    /// The failure's text.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// Request id.
    pub rid: u64,
}

/// `job_reply`: the answer to a job or worker request.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, bincode::Encode, bincode::Decode)]
#[serde(deny_unknown_fields)]
pub struct JobReply {
    /// The request id answered.
    pub rid: u64,
    /// The same JSON as the HTTP API's answer.
    pub body: JsonText,
}

/// Where a job is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum JobStatus {
    /// Waiting for a worker.
    Queued,
    /// Handed to a worker.
    Running,
    /// The last attempt failed; retried at `retry_at_ms`.
    Failed,
    /// The last attempt timed out; retried at `retry_at_ms`.
    TimedOut,
    /// Done.
    Succeeded,
    /// Out of attempts.
    Dead,
    /// Cancelled by an operator; never run again unless retried.
    Cancelled,
}

impl JobStatus {
    /// The status as it is spelt on the wire (`timed_out`), for messages
    /// that name it.
    pub fn as_str(self) -> &'static str {
        match self {
            JobStatus::Queued => "queued",
            JobStatus::Running => "running",
            JobStatus::Failed => "failed",
            JobStatus::TimedOut => "timed_out",
            JobStatus::Succeeded => "succeeded",
            JobStatus::Dead => "dead",
            JobStatus::Cancelled => "cancelled",
        }
    }
}

impl std::fmt::Display for JobStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What a worker reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    /// The job is done.
    Succeeded,
    /// It failed (with an error text); retried per the kind's policy.
    Failed,
    /// The worker gave up on time; retried per the kind's policy.
    TimedOut,
}

impl Outcome {
    /// The outcome a wire name (`succeeded`, `failed`, `timed_out`) stands
    /// for, through serde; `None` for any other text.
    pub fn from_name(name: &str) -> Option<Outcome> {
        use serde::de::value::{Error, StrDeserializer};
        Outcome::deserialize(StrDeserializer::<Error>::new(name)).ok()
    }

    /// The outcome's wire name (a test holds it to serde's).
    pub fn name(self) -> &'static str {
        match self {
            Outcome::Succeeded => "succeeded",
            Outcome::Failed => "failed",
            Outcome::TimedOut => "timed_out",
        }
    }
}

/// A job to enqueue (`POST /jobs`, `job_enqueue`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NewJob {
    /// Its kind (1 to 256 bytes).
    pub kind: String,
    /// The entity it is about.
    pub entity_id: Uuid,
    /// Free-form data (any JSON).
    #[serde(default)]
    pub data: serde_json::Value,
    /// 0-9 (default 0).
    #[serde(default)]
    pub priority: u8,
    /// Execution timeout (ms); default: the kind's.
    #[serde(default)]
    pub timeout_ms: Option<u64>,
}

/// A job as the API shows it (`GET /jobs/{id}`, dequeue answers).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JobView {
    /// Its id.
    pub id: Uuid,
    /// Its kind.
    pub kind: String,
    /// The entity it is about.
    pub entity_id: Uuid,
    /// Its data.
    pub data: serde_json::Value,
    /// Its priority.
    pub priority: u8,
    /// Status.
    pub status: JobStatus,
    /// Attempts started; for a running job, the token its worker must
    /// give with the outcome.
    pub attempt: u32,
    /// The fencing token of a running job (= `attempt`); only in the
    /// dequeue's answer to the worker that took the job.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub token: Option<u32>,
    /// The worker running it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub worker_id: Option<Uuid>,
    /// When the current attempt started (Unix ms).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub started_ms: Option<u64>,
    /// Execution timeout (ms).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub timeout_ms: Option<u64>,
    /// The last failure's text.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// When it is retried (Unix ms).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub retry_at_ms: Option<u64>,
    /// When it was enqueued (Unix ms).
    pub created_ms: u64,
}

/// A page of jobs (`GET /jobs`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JobPage {
    /// Jobs in id order (the order they were enqueued in).
    pub jobs: Vec<JobView>,
    /// The `after` of the next page; `null` on the last.
    pub next: Option<Uuid>,
}

/// A worker registration (`POST /workers`, `worker_register`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Register {
    /// Kinds served (empty: all).
    #[serde(default)]
    pub kinds: Vec<String>,
}

/// A worker's outcome for a job (`POST /jobs/{id}/outcome`,
/// `job_outcome`); the job id travels beside it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReportOutcome {
    /// The worker reporting.
    pub worker_id: Uuid,
    /// The token the job was handed out with.
    pub token: u32,
    /// How the attempt ended.
    pub outcome: Outcome,
    /// The failure's text.
    #[serde(default)]
    pub error: Option<String>,
}

/// The answer to an enqueue (`201` of `POST /jobs`, `job_reply`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobEnqueued {
    /// The job's id.
    pub id: Uuid,
}

/// The answer to a registration (`201` of `POST /workers`, `job_reply`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Registered {
    /// The worker's id.
    pub worker_id: Uuid,
    /// Its lease: ping within this many ms.
    pub lease_ms: u64,
}

/// The answer to a ping (`POST /workers/{id}/ping`, `job_reply`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct PingReply {
    /// `false`: the worker must register again.
    pub valid: bool,
}

/// The answer to an outcome (`POST /jobs/{id}/outcome`, `job_reply`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OutcomeReply {
    /// The job.
    pub id: Uuid,
    /// Its status now.
    pub status: JobStatus,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn outcome_names_round_trip_through_serde() {
        for o in [Outcome::Succeeded, Outcome::Failed, Outcome::TimedOut] {
            assert_eq!(Outcome::from_name(o.name()), Some(o));
        }
        assert_eq!(Outcome::TimedOut.name(), "timed_out");
        assert_eq!(Outcome::from_name("done"), None);
    }

    #[test]
    fn json_text_is_canonical() {
        let r = Registered {
            worker_id: Uuid::nil(),
            lease_ms: 5,
        };
        assert_eq!(
            JsonText::of(&r).0,
            r#"{"lease_ms":5,"worker_id":"00000000-0000-0000-0000-000000000000"}"#
        );
    }

    #[test]
    fn status_names_agree_with_serde() {
        use super::JobStatus as S;
        for s in [
            S::Queued,
            S::Running,
            S::Failed,
            S::TimedOut,
            S::Succeeded,
            S::Dead,
        ] {
            assert_eq!(serde_json::to_value(s).unwrap(), s.as_str());
        }
    }
}
