//! `ping` and `close`: the operations about the connection itself.

use crate::protocol::codec::Format;
use crate::protocol::frame::{Close, Ping, ServerFrame};
use crate::session::{Next, Session};

/// Answers `ping` with a `pong` carrying the same rid.
pub(in crate::session) fn ping(session: &Session, format: Format, p: Ping) {
    session.reply(format, ServerFrame::Pong(p));
}

/// Tells the connection to close, after draining its queue if asked.
pub(in crate::session) fn close(c: Close) -> Next {
    Next::Close { drain: c.drain }
}
