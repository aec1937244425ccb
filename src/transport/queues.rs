//! Queues over HTTP: `POST /queues/{name}/messages` enqueues (201 once the
//! message is durable), `GET /queues/{name}` reports depth, in-flight
//! deliveries, consumers and the dead-letter queue's depth, `GET /queues`
//! lists them, `POST /queues/{name}/redrive` moves a dead-letter queue's
//! messages back, and `DELETE /queues/{name}` deletes a queue.

use crate::protocol::frame::ErrorCode;
use actix_web::{HttpRequest, HttpResponse, web};
use serde::{Deserialize, Serialize};

use super::credentials::Caller;
use super::topics::{api_error, message_headers, query};
use super::{ApiError, AppState};
use crate::auth::Right;
use crate::broker::{Enqueue, QueueInfo};

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct EnqueueQuery {
    #[serde(default)]
    priority: u8,
    #[serde(default)]
    ttl_ms: Option<u64>,
}

/// The JSON answer to an HTTP enqueue.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EnqueueReply {
    /// The queue.
    pub queue: String,
    /// The message's id (seq) in the queue.
    pub id: u64,
}

/// The JSON answer to a redrive.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RedriveReply {
    /// Messages moved.
    pub moved: u64,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RedriveQuery {
    #[serde(default)]
    to: Option<String>,
}

/// Whether the caller may see a queue's counters (and that it exists):
/// the admin, and those who may enqueue to or consume it.
fn may_see_queue(caller: &Caller, name: &str) -> bool {
    let p = &caller.0;
    p.may(Right::Admin) || p.may(Right::Enqueue(name)) || p.may(Right::Consume(name))
}

pub(crate) async fn enqueue(
    caller: Caller,
    req: HttpRequest,
    name: web::Path<String>,
    mut body: web::Payload,
    app: web::Data<AppState>,
) -> Result<HttpResponse, ApiError> {
    caller.require(Right::Enqueue(&name))?;
    let q: EnqueueQuery = query(&req)?;
    let payload = app
        .bodies
        .read(&mut body, app.config.session.max_payload)
        .await?;
    let headers = message_headers(&req)?;
    let queue = name.into_inner();
    let id = app
        .broker
        .enqueue_durable(Enqueue {
            queue: queue.clone(),
            payload,
            headers,
            priority: q.priority,
            ttl_ms: q.ttl_ms,
        })
        .await
        .map_err(api_error)?;
    Ok(HttpResponse::Created().json(EnqueueReply { queue, id }))
}

pub(crate) async fn info(
    caller: Caller,
    name: web::Path<String>,
    app: web::Data<AppState>,
) -> Result<HttpResponse, ApiError> {
    // Checked before the lookup: a forbidden queue and a missing one
    // answer the same.
    if !may_see_queue(&caller, &name) {
        return Err(caller.forbidden(Right::Consume(&name)));
    }
    match app.broker.queue_info(&name).await {
        Some(info) => Ok(HttpResponse::Ok().json(info)),
        None => Err(ApiError::coded(
            ErrorCode::UnknownQueue,
            format!("no queue named {:?}", name.as_str()),
        )),
    }
}

pub(crate) async fn list(caller: Caller, app: web::Data<AppState>) -> HttpResponse {
    HttpResponse::Ok().json(visible(&caller, &app, usize::MAX).await)
}

/// The queues `caller` may see, as `GET /queues` lists them (in name
/// order, at most `limit`); the dashboard's stream sends the same.
pub(crate) async fn visible(caller: &Caller, app: &AppState, limit: usize) -> Vec<QueueInfo> {
    let mut all = Vec::new();
    for name in app.broker.queue_names() {
        if all.len() >= limit {
            break;
        }
        if !may_see_queue(caller, &name) {
            continue;
        }
        if let Some(info) = app.broker.queue_info(&name).await {
            all.push(info);
        }
    }
    all
}

pub(crate) async fn redrive(
    caller: Caller,
    req: HttpRequest,
    name: web::Path<String>,
    app: web::Data<AppState>,
) -> Result<HttpResponse, ApiError> {
    caller.admin("redrive", &name)?;
    let q: RedriveQuery = query(&req)?;
    let moved = app
        .broker
        .redrive(&name, q.to.as_deref())
        .await
        .map_err(api_error)?;
    Ok(HttpResponse::Ok().json(RedriveReply { moved }))
}

pub(crate) async fn delete(
    caller: Caller,
    name: web::Path<String>,
    app: web::Data<AppState>,
) -> Result<HttpResponse, ApiError> {
    caller.admin("delete queue", &name)?;
    if app.broker.delete_queue(&name).await.map_err(api_error)? {
        Ok(HttpResponse::NoContent().finish())
    } else {
        Err(ApiError::coded(
            ErrorCode::UnknownQueue,
            format!("no queue named {:?}", name.as_str()),
        ))
    }
}
