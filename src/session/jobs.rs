//! A session's job and worker frames: each runs as a spawned task (a
//! dequeue may wait), bounded by the session's pending-confirmations
//! count, and is answered with a `job_reply` carrying the HTTP API's JSON
//! or an `error` frame.

use std::time::Duration;

use uuid::Uuid;

use super::{Lane, Session};
use crate::broker::jobs::{JobError, Jobs, NewJob, Outcome};
use crate::protocol::codec::Format;
use crate::protocol::frame::{ClientFrame, ErrorCode, ErrorFrame, ServerFrame};
use crate::protocol::jobs::{JobReply, JsonText};

fn uuid(raw: &str, what: &str) -> Result<Uuid, JobError> {
    Uuid::parse_str(raw).map_err(|e| JobError::Invalid(format!("{what} is not a UUID: {e}")))
}

/// Runs one job or worker request; the JSON answer.
async fn run(jobs: Jobs, frame: ClientFrame) -> Result<serde_json::Value, JobError> {
    use serde_json::json;
    match frame {
        ClientFrame::JobEnqueue(e) => {
            let new = NewJob {
                kind: e.kind,
                entity_id: uuid(&e.entity_id, "entity_id")?,
                data: e.data.value(),
                priority: e.priority,
                timeout_ms: e.timeout_ms,
            };
            Ok(json!({ "id": jobs.enqueue(new).await? }))
        }
        ClientFrame::JobStatus(q) => {
            let view = jobs.status(uuid(&q.id, "id")?).await?;
            Ok(serde_json::to_value(view).unwrap_or_default())
        }
        ClientFrame::WorkerRegister(r) => {
            let (worker_id, lease_ms) = jobs.register(r.kinds).await?;
            Ok(json!({ "worker_id": worker_id, "lease_ms": lease_ms }))
        }
        ClientFrame::WorkerPing(p) => {
            let valid = jobs.ping(uuid(&p.worker_id, "worker_id")?).await?;
            Ok(json!({ "valid": valid }))
        }
        ClientFrame::JobDequeue(d) => {
            let worker = uuid(&d.worker_id, "worker_id")?;
            let job = jobs
                .dequeue(worker, Duration::from_millis(d.wait_ms))
                .await?;
            Ok(serde_json::to_value(job).unwrap_or_default())
        }
        ClientFrame::JobOutcome(o) => {
            let outcome = match o.outcome.as_str() {
                "succeeded" => Outcome::Succeeded,
                "failed" => Outcome::Failed,
                "timed_out" => Outcome::TimedOut,
                other => {
                    return Err(JobError::Invalid(format!(
                        "outcome {other:?}: expected succeeded, failed or timed_out"
                    )));
                }
            };
            let id = uuid(&o.id, "id")?;
            let worker = uuid(&o.worker_id, "worker_id")?;
            let status = jobs.outcome(id, worker, o.token, outcome, o.error).await?;
            Ok(json!({ "id": id, "status": status }))
        }
        _ => Err(JobError::Invalid("not a job frame".into())),
    }
}

/// The request id of a job or worker frame.
fn rid(frame: &ClientFrame) -> u64 {
    match frame {
        ClientFrame::JobEnqueue(f) => f.rid,
        ClientFrame::JobStatus(f) => f.rid,
        ClientFrame::WorkerRegister(f) => f.rid,
        ClientFrame::WorkerPing(f) => f.rid,
        ClientFrame::JobDequeue(f) => f.rid,
        ClientFrame::JobOutcome(f) => f.rid,
        _ => 0,
    }
}

impl Session {
    /// Handles a job or worker frame without holding up the frames after
    /// it (past [`MAX_PENDING_CONFIRMS`] requests in flight, it waits).
    pub(super) async fn handle_job(&mut self, format: Format, frame: ClientFrame) {
        let rid = rid(&frame);
        let Some(jobs) = self.jobs.clone() else {
            self.error(
                format,
                ErrorCode::UnknownOp,
                "jobs are not served on this endpoint",
                Some(rid),
            );
            return;
        };
        let out = self.out.clone();
        let answer = async move {
            let reply = match run(jobs, frame).await {
                Ok(body) => ServerFrame::JobReply(JobReply {
                    rid,
                    body: JsonText::of(&body),
                }),
                Err(e) => ServerFrame::Error(ErrorFrame {
                    code: e.code(),
                    message: e.to_string(),
                    rid: Some(rid),
                }),
            };
            let _ = out.push_frame(Lane::High, format, &reply);
        };
        self.run_bounded(answer).await;
    }
}
