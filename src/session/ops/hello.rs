//! `hello`: the client names itself and learns the session's limits.

use crate::protocol::codec::Format;
use crate::protocol::frame::{ErrorCode, Hello, Limits, PROTOCOL_VERSION, ServerFrame, Welcome};
use crate::session::Session;

/// Answers `hello` with `welcome`, or refuses a late hello or another
/// protocol version.
pub(in crate::session) fn hello(session: &mut Session, format: Format, h: Hello) {
    if session.frames > 1 {
        session.error(
            format,
            ErrorCode::UnexpectedHello,
            "hello must be the first frame",
            None,
        );
        return;
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
        return;
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
}
