//! `consume`: a consumer on a queue, whose messages arrive as `delivery`.

use crate::broker::Subscription;
use crate::protocol::codec::Format;
use crate::protocol::frame::{Consume, ErrorCode};
use crate::session::{Session, encoding_slot};

/// Starts consumer `c.id` on `c.queue`, in the same id space as the
/// session's subscriptions.
pub(in crate::session) async fn consume(session: &mut Session, format: Format, c: Consume) {
    if let Err(e) = session.broker.topic_limits().check_topic(&c.queue) {
        session.error(
            format,
            ErrorCode::InvalidField,
            format!("queue: {e}"),
            c.rid,
        );
        return;
    }
    if !session.check_new_id(format, &c.id, c.rid) {
        return;
    }
    let sub = Subscription::new(
        session.out.clone(),
        &c.id,
        &c.queue,
        crate::broker::SubTag::None,
        Some(encoding_slot(format)),
    );
    match session
        .broker
        .queues()
        .consume(&c.queue, sub.clone(), c.prefetch)
        .await
    {
        Ok(()) => {
            session.consumers.insert(c.id, sub);
            session.receipt(format, c.rid);
        }
        Err(e) => session.broker_error(format, e, c.rid),
    }
}
