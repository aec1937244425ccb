//! `POST /topics/{name}`: publish over HTTP. The body is the payload;
//! `x-wharf-*` request headers become message headers; `?retain=true` and
//! `?priority=high` as on the WebSocket. `GET /topics/{name}/history`:
//! the kept messages of a topic under a `[[history]]` entry.
//! `GET /topics/{name}/presence`: who is subscribed to a topic under a
//! `[[presence]]` entry.

use actix_web::{HttpRequest, HttpResponse, web};
use serde::{Deserialize, Serialize};

use super::credentials::Caller;
use super::error::HttpCode;
use super::{ApiError, AppState};
use crate::auth::Right;
use crate::broker::{BrokerError, Publish};
use crate::protocol::frame::{Headers, Priority};

/// Prefix of request headers carried as message headers.
pub const HEADER_PREFIX: &str = "x-wharf-";

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct PublishQuery {
    #[serde(default)]
    retain: bool,
    #[serde(default)]
    priority: Priority,
}

/// The JSON answer to an HTTP publish.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PublishReply {
    /// The topic published to.
    pub topic: String,
    /// Its sequence number on the topic (0 if nobody subscribes and nothing
    /// was retained).
    pub seq: u64,
    /// Subscriptions it was queued for.
    pub delivered: usize,
    /// Subscriptions whose slow-consumer policy dropped it.
    pub dropped: usize,
}

/// The request's query string as `T`; `400 invalid_query` if it is not.
pub(crate) fn query<T: serde::de::DeserializeOwned>(req: &HttpRequest) -> Result<T, ApiError> {
    web::Query::<T>::from_query(req.query_string())
        .map(web::Query::into_inner)
        .map_err(|e| ApiError::http(HttpCode::InvalidQuery, e.to_string()))
}

/// The `x-wharf-*` request headers, as message headers.
pub(crate) fn message_headers(req: &HttpRequest) -> Result<Headers, ApiError> {
    let mut headers = Headers::new();
    for (key, value) in req.headers() {
        if let Some(name) = key.as_str().strip_prefix(HEADER_PREFIX) {
            let value = value.to_str().map_err(|_| {
                ApiError::http(
                    HttpCode::InvalidHeader,
                    format!("header {key} is not visible ASCII"),
                )
            })?;
            headers.insert(name.to_owned(), value.to_owned());
        }
    }
    Ok(headers)
}

/// A broker error as an HTTP status and code.
pub(crate) fn api_error(e: BrokerError) -> ApiError {
    ApiError::coded(e.code(), e.to_string())
}

pub(crate) async fn publish(
    caller: Caller,
    req: HttpRequest,
    name: web::Path<String>,
    mut body: web::Payload,
    app: web::Data<AppState>,
) -> Result<HttpResponse, ApiError> {
    caller.require(Right::Publish(&name))?;
    let query: PublishQuery = query(&req)?;
    let payload = app
        .bodies
        .read(&mut body, app.config.session.max_payload)
        .await?;
    let headers = message_headers(&req)?;
    let topic = name.into_inner();
    let source = crate::broker::Source {
        ingress: crate::broker::Ingress::Http,
        client_id: None,
        principal: Some(caller.0.name()),
    };
    let outcome = app
        .broker
        .publish_from(
            Publish {
                topic: topic.clone(),
                payload,
                headers,
                retain: query.retain,
                priority: query.priority,
                qos: 0,
                origin: 0,
            },
            &source,
        )
        .await
        .map_err(api_error)?;
    Ok(HttpResponse::Accepted().json(PublishReply {
        topic,
        seq: outcome.seq,
        delivered: outcome.delivered,
        dropped: outcome.dropped,
    }))
}

/// `limit` when it is 1 to `max`; else `400 invalid_field`, saying so.
pub(crate) fn page_limit(limit: usize, max: usize) -> Result<usize, ApiError> {
    if limit == 0 || limit > max {
        return Err(ApiError::coded(
            crate::protocol::frame::ErrorCode::InvalidField,
            format!("limit {limit}: give 1 to {max}"),
        ));
    }
    Ok(limit)
}

/// A payload as the JSON answers show it: `(payload, payload_base64)`,
/// the text when it is UTF-8, else its standard base64.
pub(crate) fn text_or_base64(payload: &[u8]) -> (Option<String>, Option<String>) {
    use base64::Engine as _;
    match std::str::from_utf8(payload) {
        Ok(text) => (Some(text.to_owned()), None),
        Err(_) => (
            None,
            Some(base64::engine::general_purpose::STANDARD.encode(payload)),
        ),
    }
}

/// Most payload bytes one `GET /topics/{t}/history` answers with.
pub const MAX_HISTORY_BYTES: usize = 16 << 20;

/// Most messages one `GET /topics/{t}/history` answers with.
pub const MAX_HISTORY_PAGE: usize = 10_000;

fn default_history_limit() -> usize {
    100
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct HistoryQuery {
    /// Messages after this offset (0: from the oldest kept).
    #[serde(default)]
    since: u64,
    /// Most messages answered (1 to [`MAX_HISTORY_PAGE`]).
    #[serde(default = "default_history_limit")]
    limit: usize,
}

/// The JSON answer to `GET /topics/{t}/history`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HistoryReply {
    /// The topic.
    pub topic: String,
    /// Its history's epoch: an offset means something only under it.
    pub epoch: String,
    /// Its latest offset.
    pub offset: u64,
    /// Whether every message after `since` is in the history (false: some
    /// were pushed out by size or age, or `since` is ahead of the topic).
    pub complete: bool,
    /// Messages after `since`, oldest first, at most `limit`.
    pub messages: Vec<HistoryMessage>,
}

/// One message of a topic's history, its payload as text when it is
/// UTF-8 (`payload`), else as base64 (`payload_base64`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HistoryMessage {
    /// Its offset (the `seq` subscribers saw).
    pub offset: u64,
    /// When it was published (Unix ms).
    pub time_ms: u64,
    /// Its headers.
    pub headers: Headers,
    /// The payload, when it is UTF-8.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub payload: Option<String>,
    /// The payload in standard base64, when it is not UTF-8.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub payload_base64: Option<String>,
}

/// `GET /topics/{name}/history?since=N&limit=M`; needs `subscribe` on the
/// topic.
pub(crate) async fn history(
    caller: Caller,
    req: HttpRequest,
    name: web::Path<String>,
    app: web::Data<AppState>,
) -> Result<HttpResponse, ApiError> {
    caller.require(Right::Subscribe(&name))?;
    let q: HistoryQuery = query(&req)?;
    page_limit(q.limit, MAX_HISTORY_PAGE)?;
    let topic = name.into_inner();
    let Some(page) = app
        .broker
        .history()
        .page(&topic, q.since, q.limit)
        .await
        .map_err(api_error)?
    else {
        return Err(ApiError::http(
            HttpCode::NoHistory,
            format!("no history is kept for {topic:?}: no [[history]] entry covers it"),
        ));
    };
    // At most MAX_HISTORY_BYTES of payloads in one answer (one message
    // at least): page on with since = the last offset.
    let mut bytes = 0usize;
    let messages = page
        .messages
        .into_iter()
        .take_while(|e| {
            let first = bytes == 0;
            bytes = bytes.saturating_add(e.message.payload.len().max(1));
            first || bytes <= MAX_HISTORY_BYTES
        })
        .map(|e| {
            let m = &e.message;
            let (payload, payload_base64) = text_or_base64(&m.payload);
            HistoryMessage {
                offset: m.seq,
                time_ms: e.time_ms,
                headers: m.headers.clone(),
                payload,
                payload_base64,
            }
        })
        .collect();
    Ok(HttpResponse::Ok().json(HistoryReply {
        topic,
        epoch: page.epoch,
        offset: page.offset,
        complete: page.complete,
        messages,
    }))
}

/// `POST /topics/{name}/history`: a publish to the topic whose name ends
/// in `/history` (the route of `GET` takes the path).
pub(crate) async fn publish_to_history_name(
    caller: Caller,
    req: HttpRequest,
    name: web::Path<String>,
    body: web::Payload,
    app: web::Data<AppState>,
) -> Result<HttpResponse, ApiError> {
    let full = web::Path::from(format!("{}/history", name.into_inner()));
    publish(caller, req, full, body, app).await
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct PresenceQuery {
    /// Members after this cursor (a previous page's `next`).
    #[serde(default)]
    after: Option<String>,
    /// Most members answered (1 to 1,000).
    #[serde(default = "default_history_limit")]
    limit: usize,
}

/// The JSON answer to `GET /topics/{t}/presence`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PresenceReply {
    /// The topic.
    pub topic: String,
    /// Members in all (connections).
    pub count: usize,
    /// This page, by client id.
    pub members: Vec<crate::protocol::frame::PresenceMember>,
    /// The cursor of the next page (`?after=`), if there is one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next: Option<String>,
}

/// `GET /topics/{name}/presence?after=C&limit=N`; needs `subscribe` on
/// the topic.
pub(crate) async fn presence(
    caller: Caller,
    req: HttpRequest,
    name: web::Path<String>,
    app: web::Data<AppState>,
) -> Result<HttpResponse, ApiError> {
    caller.require(Right::Subscribe(&name))?;
    let q: PresenceQuery = query(&req)?;
    page_limit(q.limit, 1000)?;
    let topic = name.into_inner();
    let Some(page) = app
        .broker
        .presence()
        .page(&topic, q.after, q.limit)
        .await
        .map_err(api_error)?
    else {
        return Err(ApiError::http(
            HttpCode::NoPresence,
            format!("no presence is kept for {topic:?}: no [[presence]] entry covers it"),
        ));
    };
    Ok(HttpResponse::Ok().json(PresenceReply {
        topic,
        count: page.count,
        members: page
            .members
            .into_iter()
            .map(|m| crate::protocol::frame::PresenceMember {
                client_id: m.who.client_id.to_string(),
                principal: m.who.principal.to_string(),
                since_ms: m.since_ms,
            })
            .collect(),
        next: page.next,
    }))
}

/// `POST /topics/{name}/presence`: a publish to the topic whose name ends
/// in `/presence` (the route of `GET` takes the path).
pub(crate) async fn publish_to_presence_name(
    caller: Caller,
    req: HttpRequest,
    name: web::Path<String>,
    body: web::Payload,
    app: web::Data<AppState>,
) -> Result<HttpResponse, ApiError> {
    let full = web::Path::from(format!("{}/presence", name.into_inner()));
    publish(caller, req, full, body, app).await
}
