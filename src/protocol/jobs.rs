//! The native protocol's job and worker frames: the same operations as
//! the HTTP API (proto/http.md), answered by a `job_reply` frame whose
//! `body` is exactly the HTTP answer's JSON.

use serde::{Deserialize, Deserializer, Serialize, Serializer};

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
    /// The JSON text of `value`.
    pub fn of<T: Serialize>(value: &T) -> JsonText {
        JsonText(serde_json::to_string(value).unwrap_or_else(|_| "null".into()))
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
