//! `publish`: a message to a topic's current subscribers.

use bytes::Bytes;

use crate::broker::Publish;
use crate::protocol::codec::Format;
use crate::protocol::frame::{self, ErrorCode};
use crate::session::Session;

/// Publishes outside a transaction; a `receipt` once every current
/// subscriber has it, when the frame has a rid.
pub(in crate::session) async fn publish(session: &Session, format: Format, p: frame::PublishFrame) {
    if let Some(refusal) = session.refuse_payload(p.payload.len()) {
        session.error(format, ErrorCode::PayloadTooLarge, refusal, p.rid);
        return;
    }
    let msg = Publish {
        topic: p.topic,
        payload: Bytes::from(p.payload),
        headers: p.headers,
        retain: p.retain,
        priority: p.priority,
        qos: 0,
        origin: 0,
    };
    match session.broker.publish_from(msg, &session.source()).await {
        Ok(_) => session.receipt(format, p.rid),
        Err(e) => session.broker_error(format, e, p.rid),
    }
}
