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
//! - `GET /jobs?status=&kind=&after=&limit=` -> a page of jobs the caller
//!   may see; `POST /jobs/{id}/retry` (admin) and `POST /jobs/{id}/cancel`
//!   (admin, or whoever may enqueue its kind) -> the job.
//!
//! Each handler only decodes (path ids, bodies) and encodes: the operation
//! is [`crate::broker::jobs::api`]'s, its reply type
//! [`crate::protocol::jobs`]'s.

use actix_web::{HttpRequest, HttpResponse, web};
use serde::Deserialize;

use super::body::BodyReader;
use super::credentials::Caller;
use super::error::HttpCode;
use super::topics::query;
use super::{ApiError, AppState};
use crate::auth::Right;
use crate::broker::jobs::api::{self, parse_id};
use crate::broker::jobs::{JobError, JobFilter};
use crate::protocol::jobs::{NewJob, Register, ReportOutcome};

/// Largest JSON body accepted by the jobs routes.
const MAX_BODY: usize = 1 << 20;

fn job_error(e: JobError) -> ApiError {
    ApiError::coded(e.code(), e.to_string())
}

/// `Ok` if the caller has some job right (which jobs it sees is decided
/// per kind afterwards).
fn require_any_jobs(caller: &Caller) -> Result<(), ApiError> {
    if caller.0.grants().any_jobs() {
        Ok(())
    } else {
        Err(caller.forbidden(Right::EnqueueJob("*")))
    }
}

/// The job id of a route about one job, once the caller has some job
/// right.
fn job_id_for(caller: &Caller, raw: &str) -> Result<uuid::Uuid, ApiError> {
    require_any_jobs(caller)?;
    parse_id(raw, "job id").map_err(job_error)
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
    serde_json::from_slice(&bytes).map_err(|e| ApiError::http(HttpCode::InvalidBody, e.to_string()))
}

pub(crate) async fn enqueue(
    caller: Caller,
    mut body: web::Payload,
    app: web::Data<AppState>,
) -> Result<HttpResponse, ApiError> {
    let new: NewJob = json_body(&app.bodies, &mut body, None).await?;
    caller.require(Right::EnqueueJob(&new.kind))?;
    let reply = api::enqueue(&app.jobs, new).await.map_err(job_error)?;
    Ok(HttpResponse::Created().json(reply))
}

pub(crate) async fn status(
    caller: Caller,
    id: web::Path<String>,
    app: web::Data<AppState>,
) -> Result<HttpResponse, ApiError> {
    let id = job_id_for(&caller, &id)?;
    let visible = |kind: &str| crate::session::may_see_job(&caller.0, kind);
    let view = api::status(&app.jobs, id, visible)
        .await
        .map_err(job_error)?;
    Ok(HttpResponse::Ok().json(view))
}

pub(crate) async fn register(
    caller: Caller,
    mut body: web::Payload,
    app: web::Data<AppState>,
) -> Result<HttpResponse, ApiError> {
    let r: Register = json_body(&app.bodies, &mut body, Some(Register::default())).await?;
    caller.require_worker()?;
    if r.kinds.is_empty() {
        // No kinds: every kind.
        caller.require(Right::WorkAllJobs)?;
    }
    for kind in &r.kinds {
        caller.require(Right::WorkJob(kind))?;
    }
    let reply = api::register(&app.jobs, r, caller.0.id())
        .await
        .map_err(job_error)?;
    Ok(HttpResponse::Created().json(reply))
}

pub(crate) async fn ping(
    caller: Caller,
    id: web::Path<String>,
    app: web::Data<AppState>,
) -> Result<HttpResponse, ApiError> {
    caller.require_worker()?;
    let id = parse_id(&id, "worker id").map_err(job_error)?;
    let reply = api::ping(&app.jobs, id, caller.0.id())
        .await
        .map_err(job_error)?;
    Ok(HttpResponse::Ok().json(reply))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct DequeueQuery {
    #[serde(default)]
    wait_ms: u64,
}

pub(crate) async fn dequeue(
    caller: Caller,
    req: HttpRequest,
    id: web::Path<String>,
    app: web::Data<AppState>,
) -> Result<HttpResponse, ApiError> {
    caller.require_worker()?;
    let id = parse_id(&id, "worker id").map_err(job_error)?;
    let q: DequeueQuery = query(&req)?;
    match api::dequeue(&app.jobs, id, caller.0.id(), q.wait_ms)
        .await
        .map_err(job_error)?
    {
        Some(job) => Ok(HttpResponse::Ok().json(job)),
        None => Ok(HttpResponse::NoContent().finish()),
    }
}

pub(crate) async fn outcome(
    caller: Caller,
    id: web::Path<String>,
    mut body: web::Payload,
    app: web::Data<AppState>,
) -> Result<HttpResponse, ApiError> {
    caller.require_worker()?;
    let id = parse_id(&id, "job id").map_err(job_error)?;
    let b: ReportOutcome = json_body(&app.bodies, &mut body, None).await?;
    let reply = api::outcome(&app.jobs, id, b, caller.0.id())
        .await
        .map_err(job_error)?;
    Ok(HttpResponse::Ok().json(reply))
}

pub(crate) async fn info(
    caller: Caller,
    app: web::Data<AppState>,
) -> Result<HttpResponse, ApiError> {
    caller.admin("read", "/admin/jobs")?;
    let info = app.jobs.info().await.map_err(job_error)?;
    Ok(HttpResponse::Ok().json(info))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ListQuery {
    #[serde(default)]
    status: Option<String>,
    #[serde(default)]
    kind: Option<String>,
    #[serde(default)]
    after: Option<String>,
    #[serde(default = "default_list_limit")]
    limit: usize,
}

fn default_list_limit() -> usize {
    100
}

pub(crate) async fn list(
    caller: Caller,
    req: HttpRequest,
    app: web::Data<AppState>,
) -> Result<HttpResponse, ApiError> {
    require_any_jobs(&caller)?;
    let q: ListQuery = query(&req)?;
    let filter = JobFilter {
        status: q
            .status
            .as_deref()
            .map(api::parse_status)
            .transpose()
            .map_err(job_error)?,
        kind: q.kind,
        after: q
            .after
            .as_deref()
            .map(|a| parse_id(a, "after"))
            .transpose()
            .map_err(job_error)?,
        limit: q.limit,
    };
    let who = caller.0.clone();
    let visible = move |kind: &str| crate::session::may_see_job(&who, kind);
    let page = api::list(&app.jobs, filter, visible)
        .await
        .map_err(job_error)?;
    Ok(HttpResponse::Ok().json(page))
}

pub(crate) async fn retry(
    caller: Caller,
    id: web::Path<String>,
    app: web::Data<AppState>,
) -> Result<HttpResponse, ApiError> {
    caller.admin("retry job", &id)?;
    let id = parse_id(&id, "job id").map_err(job_error)?;
    let view = api::retry(&app.jobs, id).await.map_err(job_error)?;
    Ok(HttpResponse::Ok().json(view))
}

pub(crate) async fn cancel(
    caller: Caller,
    id: web::Path<String>,
    app: web::Data<AppState>,
) -> Result<HttpResponse, ApiError> {
    let id = job_id_for(&caller, &id)?;
    let p = &caller.0;
    let allowed = |kind: &str| p.may(Right::Admin) || p.may(Right::EnqueueJob(kind));
    let view = api::cancel(&app.jobs, id, allowed)
        .await
        .map_err(job_error)?;
    tracing::info!(principal = %p.id(), job = %id, "job cancelled");
    Ok(HttpResponse::Ok().json(view))
}
