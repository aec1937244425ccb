//! The one place where errors become HTTP responses: a status and a JSON
//! body `{"error":{"code":"...","message":"..."}}`.

use actix_web::http::StatusCode;
use actix_web::{HttpRequest, HttpResponse, ResponseError};
use serde::Serialize;

use crate::protocol::frame::ErrorCode;

/// An error answered over HTTP: a status, a stable machine-readable code
/// and a message for people.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{code}: {message}")]
pub struct ApiError {
    /// HTTP status to answer with.
    pub status: StatusCode,
    /// Stable snake_case code clients can match on.
    pub code: &'static str,
    /// Human-readable detail.
    pub message: String,
}

#[derive(Serialize)]
struct Body<'a> {
    error: Inner<'a>,
}

#[derive(Serialize)]
struct Inner<'a> {
    code: &'a str,
    message: &'a str,
}

impl ResponseError for ApiError {
    fn status_code(&self) -> StatusCode {
        self.status
    }

    fn error_response(&self) -> HttpResponse {
        HttpResponse::build(self.status).json(Body {
            error: Inner {
                code: self.code,
                message: &self.message,
            },
        })
    }
}

impl actix_web::Responder for ApiError {
    type Body = actix_web::body::BoxBody;

    fn respond_to(self, _req: &HttpRequest) -> HttpResponse<Self::Body> {
        self.error_response()
    }
}

/// The HTTP status answering an error code.
pub(crate) fn http_status(code: ErrorCode) -> StatusCode {
    use ErrorCode as C;
    match code {
        C::Malformed
        | C::UnknownOp
        | C::MissingField
        | C::InvalidField
        | C::InvalidTopic
        | C::InvalidFilter
        | C::UnexpectedHello
        | C::UnsupportedVersion => StatusCode::BAD_REQUEST,
        C::PayloadTooLarge | C::TransactionTooLarge => StatusCode::PAYLOAD_TOO_LARGE,
        C::RateLimited => StatusCode::TOO_MANY_REQUESTS,
        C::DuplicateSubscription
        | C::UnknownDelivery
        | C::WorkerExpired
        | C::StaleToken
        | C::TransactionState => StatusCode::CONFLICT,
        C::UnknownSubscription | C::UnknownQueue | C::UnknownJob => StatusCode::NOT_FOUND,
        C::TooManySubscriptions
        | C::Overloaded
        | C::TooManyTopics
        | C::QueueFull
        | C::TooManyWorkers => StatusCode::SERVICE_UNAVAILABLE,
        C::Internal => StatusCode::INTERNAL_SERVER_ERROR,
    }
}

impl ApiError {
    /// An error with the code (and its HTTP status) it has on every
    /// transport.
    pub(crate) fn coded(code: ErrorCode, message: String) -> ApiError {
        ApiError {
            status: http_status(code),
            code: code.as_str(),
            message,
        }
    }
}

pub(crate) async fn not_found(req: HttpRequest) -> ApiError {
    if req.headers().contains_key(actix_web::http::header::UPGRADE) {
        tracing::info!(
            peer = ?req.peer_addr(),
            path = req.path(),
            "refused a WebSocket upgrade: no endpoint at this path (use /ws, or /mqtt or / with the \"mqtt\" subprotocol)"
        );
    }
    ApiError {
        status: StatusCode::NOT_FOUND,
        code: "not_found",
        message: "no such route".into(),
    }
}

pub(crate) async fn method_not_allowed(req: HttpRequest) -> ApiError {
    ApiError {
        status: StatusCode::METHOD_NOT_ALLOWED,
        code: "method_not_allowed",
        message: format!("{} is not allowed on {}", req.method(), req.path()),
    }
}
