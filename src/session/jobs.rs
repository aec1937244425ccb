//! A session's job and worker frames: each runs as a spawned task (a
//! dequeue may wait), bounded by the session's pending-confirmations
//! count, and is answered with a `job_reply` carrying the HTTP API's JSON
//! or an `error` frame. The operations are [`crate::broker::jobs::api`]'s;
//! this file only decodes frames and encodes replies.

use super::Session;
use crate::auth::{Principal, Right};
use crate::broker::jobs::api::{self, parse_id, parse_outcome};
use crate::broker::jobs::{JobError, Jobs};
use crate::protocol::codec::Format;
use crate::protocol::frame::{ClientFrame, ErrorCode, ErrorFrame, Priority, ServerFrame};
use crate::protocol::jobs::{JobReply, JsonText, NewJob, Register, ReportOutcome};

/// Decodes one job or worker frame, runs its operation and encodes the
/// typed reply as the `job_reply` body (canonical JSON, as HTTP's).
async fn run(jobs: Jobs, frame: ClientFrame, who: Option<Principal>) -> Result<JsonText, JobError> {
    // A worker belongs to the principal that registered it.
    let owner = || {
        who.as_ref()
            .map_or_else(|| "anonymous".to_owned(), Principal::id)
    };
    match frame {
        ClientFrame::JobEnqueue(e) => {
            let new = NewJob {
                kind: e.kind,
                entity_id: parse_id(&e.entity_id, "entity_id")?,
                data: e.data.value(),
                priority: e.priority,
                timeout_ms: e.timeout_ms,
            };
            Ok(JsonText::of(&api::enqueue(&jobs, new).await?))
        }
        ClientFrame::JobStatus(q) => {
            let id = parse_id(&q.id, "id")?;
            let visible = |kind: &str| who.as_ref().is_some_and(|p| may_see_job(p, kind));
            Ok(JsonText::of(&api::status(&jobs, id, visible).await?))
        }
        ClientFrame::WorkerRegister(r) => {
            let req = Register { kinds: r.kinds };
            Ok(JsonText::of(&api::register(&jobs, req, owner()).await?))
        }
        ClientFrame::WorkerPing(p) => {
            let worker = parse_id(&p.worker_id, "worker_id")?;
            Ok(JsonText::of(&api::ping(&jobs, worker, owner()).await?))
        }
        ClientFrame::JobDequeue(d) => {
            let worker = parse_id(&d.worker_id, "worker_id")?;
            Ok(JsonText::of(
                &api::dequeue(&jobs, worker, owner(), d.wait_ms).await?,
            ))
        }
        ClientFrame::JobOutcome(o) => {
            let outcome = parse_outcome(&o.outcome)?;
            let id = parse_id(&o.id, "id")?;
            let req = ReportOutcome {
                worker_id: parse_id(&o.worker_id, "worker_id")?,
                token: o.token,
                outcome,
                error: o.error,
            };
            Ok(JsonText::of(&api::outcome(&jobs, id, req, owner()).await?))
        }
        _ => Err(JobError::Invalid("not a job frame".into())),
    }
}

/// Whether `p` may read the status of a job of `kind`: the admin, and
/// those who may enqueue or work on the kind.
pub(crate) fn may_see_job(p: &Principal, kind: &str) -> bool {
    p.may(Right::Admin) || p.may(Right::EnqueueJob(kind)) || p.may(Right::WorkJob(kind))
}

impl Session {
    /// Handles a job or worker frame without holding up the frames after
    /// it (past [`MAX_PENDING_CONFIRMS`] requests in flight, it waits).
    pub(super) async fn handle_job(&mut self, format: Format, frame: ClientFrame) {
        // Job and worker frames always carry one.
        let rid = frame.rid().unwrap_or(0);
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
        let who = self.principal.clone();
        let answer = async move {
            let reply = match run(jobs, frame, who).await {
                Ok(body) => ServerFrame::JobReply(JobReply { rid, body }),
                Err(e) => ServerFrame::Error(ErrorFrame {
                    code: e.code(),
                    message: e.to_string(),
                    rid: Some(rid),
                }),
            };
            let _ = out.push_frame(Priority::High, format, &reply);
        };
        self.answers.run(answer).await;
    }
}
