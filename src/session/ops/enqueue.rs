//! `enqueue`: a message onto a queue.

use bytes::Bytes;

use crate::broker::Enqueue;
use crate::protocol::codec::Format;
use crate::protocol::frame::{self, Enqueued, ErrorCode, ServerFrame};
use crate::session::{Confirm, Session};

/// Enqueues outside a transaction; `enqueued` (once durable, for a
/// persistent queue) when the frame has a rid.
pub(in crate::session) async fn enqueue(session: &Session, format: Format, e: frame::EnqueueFrame) {
    if let Some(refusal) = session.refuse_payload(e.payload.len()) {
        session.error(format, ErrorCode::PayloadTooLarge, refusal, e.rid);
        return;
    }
    let queue = e.queue.clone();
    let msg = Enqueue {
        queue: e.queue,
        payload: Bytes::from(e.payload),
        headers: e.headers,
        priority: e.priority,
        ttl_ms: e.ttl_ms,
    };
    // A queue on another node of the cluster: sent now, answered when
    // its home has it on disk, while the next frames go on.
    let msg = match session.broker.queues().enqueue_elsewhere(msg) {
        Err(local) => local,
        Ok(Err(err)) => return session.broker_error(format, err, e.rid),
        Ok(Ok(answer)) => {
            if let Some(rid) = e.rid {
                let answer = async move {
                    let seq = answer.await?;
                    Ok(ServerFrame::Enqueued(Enqueued { rid, queue, seq }))
                };
                session.reply_later(format, rid, answer).await;
            }
            return;
        }
    };
    match session.broker.queues().enqueue(msg).await {
        Ok((seq, durable)) => match (e.rid, durable) {
            (Some(rid), Some(d)) => {
                session
                    .confirm_when_durable(format, rid, d, Confirm::Enqueued { queue, seq })
                    .await;
            }
            (Some(rid), None) => {
                session.reply(format, ServerFrame::Enqueued(Enqueued { rid, queue, seq }));
            }
            (None, _) => {}
        },
        Err(err) => session.broker_error(format, err, e.rid),
    }
}
