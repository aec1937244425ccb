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
        let mut response = HttpResponse::build(self.status);
        if self.status == StatusCode::UNAUTHORIZED {
            // RFC 9110 §11.6.1: a 401 names the schemes it accepts.
            response.insert_header((
                actix_web::http::header::WWW_AUTHENTICATE,
                "Bearer realm=\"wharf\", Basic realm=\"wharf\"",
            ));
        }
        response.json(Body {
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
        | C::TransactionState
        | C::Conflict => StatusCode::CONFLICT,
        C::UnknownSubscription | C::UnknownQueue | C::UnknownJob | C::UnknownMessage => {
            StatusCode::NOT_FOUND
        }
        C::TooManySubscriptions
        | C::Overloaded
        | C::TooManyTopics
        | C::QueueFull
        | C::TooManyWorkers => StatusCode::SERVICE_UNAVAILABLE,
        C::Internal => StatusCode::INTERNAL_SERVER_ERROR,
        C::Unauthorized => StatusCode::UNAUTHORIZED,
        C::Forbidden => StatusCode::FORBIDDEN,
        C::TooManyFailures => StatusCode::TOO_MANY_REQUESTS,
        C::OutcomeUnknown => StatusCode::GATEWAY_TIMEOUT,
    }
}

/// The error codes only HTTP answers with (every other code is the
/// protocol's [`ErrorCode`], the same on every transport), each with its
/// status: one list, so no handler spells a code of its own.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HttpCode {
    /// No route has this path.
    NotFound,
    /// The path exists, not with this method.
    MethodNotAllowed,
    /// The query string does not parse.
    InvalidQuery,
    /// The JSON body does not parse or has the wrong shape.
    InvalidBody,
    /// An `x-wharf-*` header is not visible ASCII.
    InvalidHeader,
    /// The connection failed while the body was read.
    BadBody,
    /// The body did not arrive within `server.body_timeout_s`.
    BodyTimeout,
    /// Not a valid WebSocket upgrade.
    WebsocketHandshake,
    /// A WebSocket upgrade, or a request that changes something, from a
    /// foreign browser origin.
    ForbiddenOrigin,
    /// A request whose `Host` is not a name the broker answers to.
    ForbiddenHost,
    /// A reload of a broker started without a config file.
    NoConfigFile,
    /// A reloaded config file that does not read or validate.
    InvalidConfig,
    /// `GET /topics/{t}/history` of a topic no `[[history]]` entry covers.
    NoHistory,
    /// `GET /topics/{t}/presence` of a topic no `[[presence]]` entry covers.
    NoPresence,
}

impl HttpCode {
    /// The snake_case code in the error body.
    pub fn as_str(self) -> &'static str {
        match self {
            HttpCode::NotFound => "not_found",
            HttpCode::MethodNotAllowed => "method_not_allowed",
            HttpCode::InvalidQuery => "invalid_query",
            HttpCode::InvalidBody => "invalid_body",
            HttpCode::InvalidHeader => "invalid_header",
            HttpCode::BadBody => "bad_body",
            HttpCode::BodyTimeout => "body_timeout",
            HttpCode::WebsocketHandshake => "websocket_handshake",
            HttpCode::ForbiddenOrigin => "forbidden_origin",
            HttpCode::ForbiddenHost => "forbidden_host",
            HttpCode::NoConfigFile => "no_config_file",
            HttpCode::InvalidConfig => "invalid_config",
            HttpCode::NoHistory => "no_history",
            HttpCode::NoPresence => "no_presence",
        }
    }

    /// The status it is answered with.
    pub fn status(self) -> StatusCode {
        match self {
            HttpCode::NotFound | HttpCode::NoHistory | HttpCode::NoPresence => {
                StatusCode::NOT_FOUND
            }
            HttpCode::MethodNotAllowed => StatusCode::METHOD_NOT_ALLOWED,
            HttpCode::InvalidQuery
            | HttpCode::InvalidBody
            | HttpCode::InvalidHeader
            | HttpCode::BadBody
            | HttpCode::WebsocketHandshake => StatusCode::BAD_REQUEST,
            HttpCode::BodyTimeout => StatusCode::REQUEST_TIMEOUT,
            HttpCode::ForbiddenOrigin | HttpCode::ForbiddenHost => StatusCode::FORBIDDEN,
            HttpCode::NoConfigFile => StatusCode::CONFLICT,
            HttpCode::InvalidConfig => StatusCode::UNPROCESSABLE_ENTITY,
        }
    }
}

impl ApiError {
    /// An HTTP-only error with its code's status.
    pub(crate) fn http(code: HttpCode, message: impl Into<String>) -> ApiError {
        ApiError {
            status: code.status(),
            code: code.as_str(),
            message: message.into(),
        }
    }

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

/// 404 for paths no route matches (and a log line for a WebSocket upgrade
/// sent to one).
pub(crate) async fn not_found(req: HttpRequest) -> ApiError {
    if req.headers().contains_key(actix_web::http::header::UPGRADE) {
        tracing::info!(
            peer = ?req.peer_addr(),
            path = req.path(),
            "refused a WebSocket upgrade: no endpoint at this path (use /ws, or /mqtt or / with the \"mqtt\" subprotocol)"
        );
    }
    ApiError::http(HttpCode::NotFound, "no such route")
}

pub(crate) async fn method_not_allowed(req: HttpRequest) -> ApiError {
    ApiError::http(
        HttpCode::MethodNotAllowed,
        format!("{} is not allowed on {}", req.method(), req.path()),
    )
}
