//! Credentials on HTTP requests and WebSocket upgrades: `Authorization:
//! Bearer` or `Basic`, and for upgrades a `?token=` query parameter
//! (browsers cannot set headers on a WebSocket). [`Caller`] extracts the
//! authenticated principal for HTTP routes; failures are 401 with
//! `WWW-Authenticate`, or 429 while the address is blocked.

use std::future::Future;
use std::pin::Pin;

use actix_web::dev::Payload;
use actix_web::http::header;
use actix_web::{FromRequest, HttpRequest, web};
use base64::Engine as _;
use serde::Deserialize;

use super::{ApiError, AppState};
use crate::auth::{AuthError, Credential, Principal, Right, Way};
use crate::protocol::frame::ErrorCode;

/// What a request presented.
enum Presented {
    Token(String),
    Basic { user: String, password: Vec<u8> },
}

#[derive(Deserialize)]
struct TokenQuery {
    token: Option<String>,
}

fn bad(message: &str) -> ApiError {
    ApiError::coded(ErrorCode::Unauthorized, message.into())
}

/// The credentials in `req`, if any; a malformed `Authorization` header
/// is an error, not "none".
fn presented(req: &HttpRequest, query: bool) -> Result<Option<Presented>, ApiError> {
    if let Some(value) = req.headers().get(header::AUTHORIZATION) {
        let value = value
            .to_str()
            .map_err(|_| bad("the Authorization header is not visible ASCII"))?;
        let (scheme, rest) = value.split_once(' ').unwrap_or((value, ""));
        let rest = rest.trim();
        if scheme.eq_ignore_ascii_case("bearer") && !rest.is_empty() {
            return Ok(Some(Presented::Token(rest.to_owned())));
        }
        if scheme.eq_ignore_ascii_case("basic") {
            let decoded = base64::engine::general_purpose::STANDARD
                .decode(rest)
                .map_err(|_| bad("Basic credentials are not base64"))?;
            let colon = decoded
                .iter()
                .position(|b| *b == b':')
                .ok_or_else(|| bad("Basic credentials need user:password"))?;
            let user = String::from_utf8(decoded[..colon].to_vec())
                .map_err(|_| bad("the Basic user name is not UTF-8"))?;
            return Ok(Some(Presented::Basic {
                user,
                password: decoded[colon + 1..].to_vec(),
            }));
        }
        return Err(bad("Authorization must be Bearer or Basic"));
    }
    if query {
        if let Ok(q) = web::Query::<TokenQuery>::from_query(req.query_string()) {
            if let Some(t) = q.into_inner().token.filter(|t| !t.is_empty()) {
                return Ok(Some(Presented::Token(t)));
            }
        }
    }
    Ok(None)
}

/// The HTTP answer to a failed authentication.
pub(crate) fn auth_error(e: &AuthError) -> ApiError {
    let code = match e {
        AuthError::TooManyFailures => ErrorCode::TooManyFailures,
        AuthError::Busy => ErrorCode::Overloaded,
        AuthError::TooManyUnauthenticated => ErrorCode::RateLimited,
        AuthError::Missing | AuthError::Bad => ErrorCode::Unauthorized,
    };
    ApiError::coded(code, e.to_string())
}

/// Who a request or upgrade is: its credentials checked, or the
/// anonymous principal when it presented none. `Ok(None)`: none
/// presented and anonymous clients are not let in (a WebSocket may still
/// authenticate in its first frame; HTTP answers 401).
pub(crate) async fn principal(
    req: &HttpRequest,
    app: &AppState,
    query: bool,
    way: Way,
) -> Result<Option<Principal>, ApiError> {
    let peer = req.peer_addr().map(|a| a.ip());
    let result = match presented(req, query)? {
        None => return Ok(app.auth.anonymous()),
        Some(Presented::Token(t)) => {
            app.auth
                .authenticate(Credential::Token(&t), peer, way)
                .await
        }
        Some(Presented::Basic { user, password }) => {
            app.auth
                .authenticate(
                    Credential::Password {
                        user: &user,
                        password: &password,
                    },
                    peer,
                    way,
                )
                .await
        }
    };
    result.map(Some).map_err(|e| auth_error(&e))
}

/// The authenticated principal of an HTTP request: a handler argument.
pub(crate) struct Caller(pub Principal);

impl Caller {
    /// `Ok` if the caller may do `right`, else 403 `forbidden`.
    pub(crate) fn require(&self, right: Right<'_>) -> Result<(), ApiError> {
        if self.0.may(right) {
            return Ok(());
        }
        Err(self.forbidden(right))
    }

    /// 403 `forbidden` for `right`.
    pub(crate) fn forbidden(&self, right: Right<'_>) -> ApiError {
        let what = right.object().map_or(String::new(), |o| format!(" {o:?}"));
        ApiError::coded(
            ErrorCode::Forbidden,
            format!("{:?} may not {}{what}", self.0.name(), right.name()),
        )
    }

    /// `Ok` if the caller may work on some job kind (worker routes).
    pub(crate) fn require_worker(&self) -> Result<(), ApiError> {
        if self.0.grants().works_any() {
            return Ok(());
        }
        Err(self.forbidden(Right::WorkJob("*")))
    }

    /// Like [`Caller::require`] for the admin right, and logs the action
    /// with the principal (an audit line).
    pub(crate) fn admin(&self, action: &str, object: &str) -> Result<(), ApiError> {
        self.require(Right::Admin)?;
        tracing::info!(target: "wharf::audit", principal = %self.0.id(), action, object, "admin action");
        Ok(())
    }
}

impl FromRequest for Caller {
    type Error = ApiError;
    type Future = Pin<Box<dyn Future<Output = Result<Caller, ApiError>>>>;

    fn from_request(req: &HttpRequest, _: &mut Payload) -> Self::Future {
        let req = req.clone();
        Box::pin(async move {
            let Some(app) = req.app_data::<web::Data<AppState>>() else {
                return Err(ApiError::coded(
                    ErrorCode::Internal,
                    "the broker's state is not registered".into(),
                ));
            };
            // Before credentials: a forged request costs no failure count.
            super::origin::guard(&req, &app.config.server)?;
            match principal(&req, app, false, Way::Http).await? {
                Some(p) => Ok(Caller(p)),
                None => Err(bad(
                    "credentials are required: Authorization: Bearer TOKEN, or Basic",
                )),
            }
        })
    }
}

/// Who a WebSocket upgrade is: the principal its credentials prove (or
/// the anonymous one; `None`: it must authenticate in its first frame or
/// packet), its address, and, when it proved no one, its place among the
/// address's unauthenticated connections (held until it authenticates).
pub(crate) struct Upgrader {
    /// Who it is, if known yet.
    pub(crate) principal: Option<Principal>,
    /// Its address.
    pub(crate) peer: Option<std::net::IpAddr>,
    /// Its place, while it has not authenticated.
    pub(crate) unproven: Option<crate::auth::Unproven>,
}

/// The [`Upgrader`] of `req`, coming in by `way`.
///
/// # Errors
/// 401 for bad credentials, 429 when the address holds its
/// `max_unauthenticated_per_address` connections already.
pub(crate) async fn upgrader(
    req: &HttpRequest,
    app: &AppState,
    way: Way,
) -> Result<Upgrader, ApiError> {
    let principal = principal(req, app, true, way).await?;
    let peer = req.peer_addr().map(|a| a.ip());
    let unproven = match principal {
        Some(_) => None,
        None => app
            .auth
            .admit_unproven(peer, way)
            .map_err(|e| auth_error(&e))?,
    };
    Ok(Upgrader {
        principal,
        peer,
        unproven,
    })
}
