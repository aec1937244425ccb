//! Jobs and workers over HTTP (JSON bodies; errors as
//! `{"error":{"code","message"}}`):
//!
//! - `POST /jobs` enqueue -> 201 `{"id"}` once durable; `GET /jobs/{id}`.
//! - `POST /workers` register -> 201 `{"worker_id","lease_ms"}`;
//!   `POST /workers/{id}/ping` -> `{"valid"}`;
//!   `POST /workers/{id}/dequeue?wait_ms=N` -> 200 job with `token`, or 204.
//! - `POST /jobs/{id}/outcome` -> 200 `{"id","status"}`; a stale token or
//!   an expired worker -> 409 and no change.
//! - `GET /admin/jobs` -> counts.

use std::time::Duration;

use actix_web::http::StatusCode;
use actix_web::{HttpRequest, HttpResponse, web};
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use super::body::BodyReader;
use super::topics::{bad, query};
use super::{ApiError, AppState};
use crate::broker::jobs::{JobError, JobStatus, NewJob, Outcome};

/// Largest JSON body accepted by the jobs routes.
const MAX_BODY: usize = 1 << 20;

fn job_error(e: JobError) -> ApiError {
    ApiError::coded(e.code(), e.to_string())
}

async fn json_body<T: serde::de::DeserializeOwned>(
    bodies: &BodyReader,
    body: &mut web::Payload,
    empty_ok: Option<T>,
) -> Result<T, ApiError> {
    let bytes = bodies.read(body, MAX_BODY).await?;
    if bytes.iter().all(u8::is_ascii_whitespace) {
        if let Some(default) = empty_ok {
            return Ok(default);
        }
    }
    serde_json::from_slice(&bytes)
        .map_err(|e| bad(StatusCode::BAD_REQUEST, "invalid_body", e.to_string()))
}

fn uuid(raw: &str, what: &str) -> Result<Uuid, ApiError> {
    Uuid::parse_str(raw).map_err(|e| {
        bad(
            StatusCode::BAD_REQUEST,
            "invalid_field",
            format!("{what} is not a UUID: {e}"),
        )
    })
}

/// `201` answer to `POST /jobs`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Enqueued {
    /// The job's id.
    pub id: Uuid,
}

pub(crate) async fn enqueue(
    mut body: web::Payload,
    app: web::Data<AppState>,
) -> Result<HttpResponse, ApiError> {
    let new: NewJob = json_body(&app.bodies, &mut body, None).await?;
    let id = app.jobs.enqueue(new).await.map_err(job_error)?;
    Ok(HttpResponse::Created().json(Enqueued { id }))
}

pub(crate) async fn status(
    id: web::Path<String>,
    app: web::Data<AppState>,
) -> Result<HttpResponse, ApiError> {
    let id = uuid(&id, "job id")?;
    let view = app.jobs.status(id).await.map_err(job_error)?;
    Ok(HttpResponse::Ok().json(view))
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct Register {
    #[serde(default)]
    kinds: Vec<String>,
}

/// `201` answer to `POST /workers`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Registered {
    /// The worker's id.
    pub worker_id: Uuid,
    /// Its lease: ping within this many ms.
    pub lease_ms: u64,
}

pub(crate) async fn register(
    mut body: web::Payload,
    app: web::Data<AppState>,
) -> Result<HttpResponse, ApiError> {
    let r: Register = json_body(&app.bodies, &mut body, Some(Register::default())).await?;
    let (worker_id, lease_ms) = app.jobs.register(r.kinds).await.map_err(job_error)?;
    Ok(HttpResponse::Created().json(Registered {
        worker_id,
        lease_ms,
    }))
}

pub(crate) async fn ping(
    id: web::Path<String>,
    app: web::Data<AppState>,
) -> Result<HttpResponse, ApiError> {
    let id = uuid(&id, "worker id")?;
    let valid = app.jobs.ping(id).await.map_err(job_error)?;
    Ok(HttpResponse::Ok().json(serde_json::json!({ "valid": valid })))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct DequeueQuery {
    #[serde(default)]
    wait_ms: u64,
}

pub(crate) async fn dequeue(
    req: HttpRequest,
    id: web::Path<String>,
    app: web::Data<AppState>,
) -> Result<HttpResponse, ApiError> {
    let id = uuid(&id, "worker id")?;
    let q: DequeueQuery = query(&req)?;
    let wait = Duration::from_millis(q.wait_ms);
    match app.jobs.dequeue(id, wait).await.map_err(job_error)? {
        Some(job) => Ok(HttpResponse::Ok().json(job)),
        None => Ok(HttpResponse::NoContent().finish()),
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct OutcomeBody {
    worker_id: Uuid,
    token: u32,
    outcome: Outcome,
    #[serde(default)]
    error: Option<String>,
}

/// `200` answer to `POST /jobs/{id}/outcome`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OutcomeReply {
    /// The job.
    pub id: Uuid,
    /// Its status now.
    pub status: JobStatus,
}

pub(crate) async fn outcome(
    id: web::Path<String>,
    mut body: web::Payload,
    app: web::Data<AppState>,
) -> Result<HttpResponse, ApiError> {
    let id = uuid(&id, "job id")?;
    let b: OutcomeBody = json_body(&app.bodies, &mut body, None).await?;
    let status = app
        .jobs
        .outcome(id, b.worker_id, b.token, b.outcome, b.error)
        .await
        .map_err(job_error)?;
    Ok(HttpResponse::Ok().json(OutcomeReply { id, status }))
}

pub(crate) async fn info(app: web::Data<AppState>) -> Result<HttpResponse, ApiError> {
    let info = app.jobs.info().await.map_err(job_error)?;
    Ok(HttpResponse::Ok().json(info))
}
