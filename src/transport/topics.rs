//! `POST /topics/{name}`: publish over HTTP. The body is the payload;
//! `x-wharf-*` request headers become message headers; `?retain=true` and
//! `?priority=high` as on the WebSocket.

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
