//! Queues over HTTP: `POST /queues/{name}/messages` enqueues (201 once the
//! message is durable), `GET /queues/{name}` reports depth, in-flight
//! deliveries, consumers and the dead-letter queue's depth, `GET /queues`
//! lists them, `POST /queues/{name}/redrive` moves a dead-letter queue's
//! messages back, and `DELETE /queues/{name}` deletes a queue. The
//! operator's tools: `GET /queues/{name}/messages` browses without
//! consuming, `DELETE /queues/{name}/messages` purges, and
//! `POST /queues/{name}/messages/{id}/move?to=` moves one message.

use crate::protocol::frame::ErrorCode;
use actix_web::{HttpRequest, HttpResponse, web};
use serde::{Deserialize, Serialize};

use super::credentials::Caller;
use super::topics::{api_error, message_headers, query};
use super::{ApiError, AppState};
use crate::auth::Right;
use crate::broker::{Drain, Enqueue, MessageState, PeekedMessage, QueueInfo};
use crate::protocol::frame::Headers;

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
    let mut headers = message_headers(&req)?;
    // The standard name for an id that makes a retry safe.
    if let Some(key) = req.headers().get("idempotency-key")
        && !headers.contains_key(crate::broker::MSG_ID_HEADER)
    {
        let key = key.to_str().map_err(|_| {
            ApiError::http(
                super::error::HttpCode::InvalidHeader,
                "header idempotency-key is not visible ASCII",
            )
        })?;
        headers.insert(crate::broker::MSG_ID_HEADER.into(), key.to_owned());
    }
    let queue = name.into_inner();
    let id = app
        .broker
        .queues()
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
    match app
        .broker
        .queues()
        .queue_info_or_why(&name)
        .await
        .map_err(api_error)?
    {
        Some(info) => {
            // In a cluster with members: which node holds it.
            let home = app.cluster.as_ref().and_then(|c| c.home_of(&name));
            match (home, serde_json::to_value(&info)) {
                (Some(home), Ok(serde_json::Value::Object(mut o))) => {
                    o.insert("home".into(), home.into());
                    Ok(HttpResponse::Ok().json(o))
                }
                _ => Ok(HttpResponse::Ok().json(info)),
            }
        }
        None => Err(unknown_queue(&name)),
    }
}

pub(crate) async fn list(caller: Caller, app: web::Data<AppState>) -> HttpResponse {
    HttpResponse::Ok().json(visible(&caller, &app, usize::MAX).await)
}

/// The queues `caller` may see, as `GET /queues` lists them (in name
/// order, at most `limit`); the dashboard's stream sends the same.
pub(crate) async fn visible(caller: &Caller, app: &AppState, limit: usize) -> Vec<QueueInfo> {
    let mut all = Vec::new();
    for name in app.broker.queues().queue_names() {
        if all.len() >= limit {
            break;
        }
        if !may_see_queue(caller, &name) {
            continue;
        }
        if let Some(info) = app.broker.queues().queue_info(&name).await {
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
        .queues()
        .redrive(&name, q.to.as_deref())
        .await
        .map_err(api_error)?;
    Ok(HttpResponse::Ok().json(RedriveReply { moved }))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct DeleteQuery {
    /// Let consumers take and settle what the queue holds first.
    #[serde(default)]
    drain: bool,
    /// How long a drain may hold the request (at most 60,000 ms).
    #[serde(default)]
    wait_ms: u64,
}

/// The 202 body of a drain still under way.
#[derive(Serialize)]
struct DrainingReply<'a> {
    queue: &'a str,
    draining: bool,
    waiting: u64,
    in_flight: u64,
}

use crate::broker::MAX_DRAIN_WAIT_MS;

/// `DELETE /queues/{name}`: 204 once removed. With `?drain=true`: the
/// queue takes no more messages and is removed once its consumers have
/// settled what it holds: 204 if that happened within `wait_ms`, else
/// 202 with what is left (it is removed when that is done).
pub(crate) async fn delete(
    caller: Caller,
    req: HttpRequest,
    name: web::Path<String>,
    app: web::Data<AppState>,
) -> Result<HttpResponse, ApiError> {
    caller.admin("delete queue", &name)?;
    let q: DeleteQuery = query(&req)?;
    if q.wait_ms > MAX_DRAIN_WAIT_MS {
        return Err(ApiError::coded(
            crate::protocol::frame::ErrorCode::InvalidField,
            format!("wait_ms: at most {MAX_DRAIN_WAIT_MS}"),
        ));
    }
    if !q.drain {
        return if app
            .broker
            .queues()
            .delete_queue(&name)
            .await
            .map_err(api_error)?
        {
            Ok(HttpResponse::NoContent().finish())
        } else {
            Err(unknown_queue(&name))
        };
    }
    let wait = std::time::Duration::from_millis(q.wait_ms);
    match app
        .broker
        .queues()
        .drain_queue(&name, wait)
        .await
        .map_err(api_error)?
    {
        Drain::Removed => Ok(HttpResponse::NoContent().finish()),
        Drain::NotFound => Err(unknown_queue(&name)),
        Drain::Draining { waiting, in_flight } => {
            Ok(HttpResponse::Accepted().json(DrainingReply {
                queue: &name,
                draining: true,
                waiting,
                in_flight,
            }))
        }
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct BrowseQuery {
    #[serde(default)]
    from: u64,
    #[serde(default = "default_browse_limit")]
    limit: usize,
}

fn default_browse_limit() -> usize {
    100
}

/// One message in a browse: where it is, its metadata, and its payload
/// as text when it is UTF-8 (`payload`), else as base64
/// (`payload_base64`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BrowsedMessage {
    /// Its id (seq) in the queue.
    pub id: u64,
    /// 0-9.
    pub priority: u8,
    /// Ready, delayed, in flight or on disk.
    pub state: MessageState,
    /// Times it has been delivered.
    pub deliveries: u32,
    /// When it was enqueued (Unix ms).
    pub enqueued_ms: u64,
    /// When it expires (Unix ms), if it does.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires_ms: Option<u64>,
    /// Not delivered before (Unix ms), while delayed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub not_before_ms: Option<u64>,
    /// Its headers.
    pub headers: Headers,
    /// Payload bytes.
    pub size: usize,
    /// The payload, when it is UTF-8.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub payload: Option<String>,
    /// The payload in standard base64, when it is not UTF-8.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub payload_base64: Option<String>,
}

impl From<PeekedMessage> for BrowsedMessage {
    fn from(p: PeekedMessage) -> Self {
        let m = p.message;
        let (payload, payload_base64) = super::topics::text_or_base64(&m.payload);
        BrowsedMessage {
            id: m.seq,
            priority: m.priority,
            state: p.state,
            deliveries: m.deliveries,
            enqueued_ms: m.enqueued_ms,
            expires_ms: (m.expires_ms > 0).then_some(m.expires_ms),
            not_before_ms: (m.not_before_ms > 0).then_some(m.not_before_ms),
            headers: m.headers,
            size: m.payload.len(),
            payload,
            payload_base64,
        }
    }
}

/// The JSON answer to a browse.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BrowseReply {
    /// The queue.
    pub queue: String,
    /// Messages by id, lowest first.
    pub messages: Vec<BrowsedMessage>,
    /// `from` for the next page; `null` on the last.
    pub next: Option<u64>,
}

/// The JSON answer to a purge.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PurgeReply {
    /// Messages deleted.
    pub purged: u64,
}

/// The JSON answer to a move.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MoveReply {
    /// The queue the message is in now.
    pub queue: String,
    /// Its id there.
    pub id: u64,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct MoveQuery {
    to: String,
}

fn unknown_queue(name: &str) -> ApiError {
    ApiError::coded(ErrorCode::UnknownQueue, format!("no queue named {name:?}"))
}

pub(crate) async fn browse(
    caller: Caller,
    req: HttpRequest,
    name: web::Path<String>,
    app: web::Data<AppState>,
) -> Result<HttpResponse, ApiError> {
    // Reading messages is consuming's right (or the admin's); a queue the
    // caller may not read answers as a missing one does.
    let p = &caller.0;
    if !(p.may(Right::Admin) || p.may(Right::Consume(&name))) {
        return Err(caller.forbidden(Right::Consume(&name)));
    }
    let q: BrowseQuery = query(&req)?;
    super::topics::page_limit(q.limit, crate::broker::MAX_BROWSE)?;
    let page = app
        .broker
        .queues()
        .browse_queue(&name, q.from, q.limit)
        .await
        .map_err(api_error)?;
    Ok(HttpResponse::Ok().json(BrowseReply {
        queue: name.into_inner(),
        messages: page
            .messages
            .into_iter()
            .map(BrowsedMessage::from)
            .collect(),
        next: page.next,
    }))
}

pub(crate) async fn purge(
    caller: Caller,
    name: web::Path<String>,
    app: web::Data<AppState>,
) -> Result<HttpResponse, ApiError> {
    caller.admin("purge", &name)?;
    let purged = app
        .broker
        .queues()
        .purge_queue(&name)
        .await
        .map_err(api_error)?;
    tracing::info!(queue = %name, purged, "queue purged");
    Ok(HttpResponse::Ok().json(PurgeReply { purged }))
}

pub(crate) async fn move_message(
    caller: Caller,
    req: HttpRequest,
    path: web::Path<(String, String)>,
    app: web::Data<AppState>,
) -> Result<HttpResponse, ApiError> {
    let (name, id) = path.into_inner();
    caller.admin("move message", &format!("{name}/{id}"))?;
    let id: u64 = id.parse().map_err(|_| {
        ApiError::coded(
            ErrorCode::InvalidField,
            format!("message id {id:?} is not a number"),
        )
    })?;
    let q: MoveQuery = query(&req)?;
    let moved = app
        .broker
        .queues()
        .move_message(&name, id, &q.to)
        .await
        .map_err(api_error)?;
    Ok(HttpResponse::Ok().json(MoveReply {
        queue: q.to,
        id: moved.id,
    }))
}
