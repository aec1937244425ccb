//! `hello` and `refresh`: the client names itself, presents its
//! credential, and learns the session's limits; later it may present a
//! fresh credential for the same principal.

use crate::auth::{AuthError, Credential, Way};
use crate::protocol::codec::Format;
use crate::protocol::frame::{
    ErrorCode, Hello, Limits, PROTOCOL_VERSION, Refresh, ServerFrame, Welcome,
};
use crate::session::{CLOSE_UNAUTHORIZED, Next, Session};

/// The error code an authentication failure is answered with.
fn auth_code(e: &AuthError) -> ErrorCode {
    match e {
        AuthError::TooManyFailures => ErrorCode::TooManyFailures,
        AuthError::Busy => ErrorCode::Overloaded,
        AuthError::TooManyUnauthenticated => ErrorCode::RateLimited,
        AuthError::Missing | AuthError::Bad => ErrorCode::Unauthorized,
    }
}

/// Answers `hello` with `welcome`, or refuses a late hello, another
/// protocol version, or a bad token (then the session closes).
pub(in crate::session) async fn hello(session: &mut Session, format: Format, h: Hello) -> Next {
    if session.frames > 1 {
        session.error(
            format,
            ErrorCode::UnexpectedHello,
            "hello must be the first frame",
            None,
        );
        return Next::Continue;
    }
    if h.version != PROTOCOL_VERSION {
        session.error(
            format,
            ErrorCode::UnsupportedVersion,
            format!(
                "this server speaks version {PROTOCOL_VERSION}, not {}",
                h.version
            ),
            None,
        );
        return Next::Continue;
    }
    let principal = match (&h.token, &session.principal) {
        (Some(token), _) => {
            session
                .auth
                .authenticate(Credential::Token(token), session.peer, Way::Native)
                .await
        }
        (None, Some(p)) => Ok(p.clone()),
        (None, None) => Err(AuthError::Missing),
    };
    match principal {
        Ok(p) => session.set_principal(Some(p)),
        Err(e) => {
            session.error(format, auth_code(&e), e.to_string(), None);
            return Next::Refused {
                code: CLOSE_UNAUTHORIZED,
                reason: "authentication failed",
            };
        }
    }
    if let Some(client_id) = h.client_id {
        session.named = true;
        session.client_id = client_id;
        session
            .sessions
            .set_client_id(session.id, session.client_id.clone());
    }
    session.reply(
        format,
        ServerFrame::Welcome(Welcome {
            session: session.id.to_string(),
            client_id: session.client_id.clone(),
            version: PROTOCOL_VERSION,
            limits: Limits {
                max_frame: session.config.max_frame as u64,
                max_payload: session.config.max_payload as u64,
                outbound_limit: session.config.outbound_limit as u64,
                rate_per_s: u64::from(session.config.rate_per_s),
            },
        }),
    );
    Next::Continue
}

/// Takes a fresh credential for the same principal (its permissions and
/// expiry replace the old ones); a credential for another principal, or
/// a bad one, is refused and the session keeps the old.
pub(in crate::session) async fn refresh(session: &mut Session, format: Format, r: Refresh) -> Next {
    let Some(current) = session.principal.clone() else {
        session.error(
            format,
            ErrorCode::Unauthorized,
            "refresh needs an authenticated session: send hello with a token",
            r.rid,
        );
        return Next::Refused {
            code: CLOSE_UNAUTHORIZED,
            reason: "authentication required",
        };
    };
    match session
        .auth
        .authenticate(Credential::Token(&r.token), session.peer, Way::Native)
        .await
    {
        Ok(p) if p.id() == current.id() => {
            session.set_principal(Some(p));
            session.receipt(format, r.rid);
            // Rights may have narrowed: what they no longer allow ends.
            super::subscribe::end_unpermitted(session, format).await;
        }
        Ok(p) => session.error(
            format,
            ErrorCode::Forbidden,
            format!(
                "the token is for {:?}, not this session's principal",
                p.id()
            ),
            r.rid,
        ),
        Err(e) => session.error(format, auth_code(&e), e.to_string(), r.rid),
    }
    Next::Continue
}
