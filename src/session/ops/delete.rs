//! `delete_queue`: removes a queue, at once or after a drain (admin only).

use crate::broker::{Drain, MAX_DRAIN_WAIT_MS};
use crate::protocol::codec::Format;
use crate::protocol::frame::{DeleteQueue, Draining, ErrorCode, ServerFrame};
use crate::session::Session;

/// Removes `d.queue`: `receipt` once it is gone, `draining` when a drain
/// outlasts `wait_ms` (the queue is removed once it is settled), or an
/// error (`unknown_queue`, `invalid_field`).
pub(in crate::session) async fn delete_queue(
    session: &mut Session,
    format: Format,
    d: DeleteQueue,
) {
    if d.wait_ms > MAX_DRAIN_WAIT_MS {
        let message = format!("wait_ms: at most {MAX_DRAIN_WAIT_MS}");
        return session.error(format, ErrorCode::InvalidField, message, d.rid);
    }
    let unknown = |session: &Session| {
        let message = format!("no queue named {:?}", d.queue);
        session.error(format, ErrorCode::UnknownQueue, message, d.rid);
    };
    if !d.drain {
        return match session.broker.queues().delete_queue(&d.queue).await {
            Ok(true) => session.receipt(format, d.rid),
            Ok(false) => unknown(session),
            Err(e) => session.broker_error(format, e, d.rid),
        };
    }
    let wait = std::time::Duration::from_millis(d.wait_ms);
    match session.broker.queues().drain_queue(&d.queue, wait).await {
        Ok(Drain::Removed) => session.receipt(format, d.rid),
        Ok(Drain::NotFound) => unknown(session),
        Ok(Drain::Draining { waiting, in_flight }) => session.reply(
            format,
            ServerFrame::Draining(Draining {
                rid: d.rid,
                queue: d.queue.clone(),
                waiting,
                in_flight,
            }),
        ),
        Err(e) => session.broker_error(format, e, d.rid),
    }
}
