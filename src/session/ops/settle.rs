//! `ack`, `nack`, `reject`, `touch`: what a consumer does with its
//! deliveries (outside a transaction).

use crate::broker::{Settlement, Sink as _};
use crate::protocol::codec::Format;
use crate::protocol::frame::{self, ErrorCode, Nack, Touch};
use crate::session::{Confirm, Session};

/// Acknowledges deliveries: their messages are done.
pub(in crate::session) async fn ack(session: &Session, format: Format, a: frame::Settle) {
    settle(session, format, &a.sub, a.ids, Settlement::Ack, a.rid).await;
}

/// Gives deliveries back to their queue, after `delay_ms` if given.
pub(in crate::session) async fn nack(session: &Session, format: Format, n: Nack) {
    settle(
        session,
        format,
        &n.sub,
        n.ids,
        Settlement::Nack(n.delay_ms),
        n.rid,
    )
    .await;
}

/// Sends deliveries to their queue's dead-letter queue.
pub(in crate::session) async fn reject(session: &Session, format: Format, r: frame::Settle) {
    settle(session, format, &r.sub, r.ids, Settlement::Reject, r.rid).await;
}

/// Extends deliveries' ack deadline.
pub(in crate::session) async fn touch(session: &Session, format: Format, t: Touch) {
    settle(
        session,
        format,
        &t.sub,
        t.ids,
        Settlement::Touch(t.extend_ms),
        t.rid,
    )
    .await;
}

/// Settles `ids` of consumer `sub` the way `how` says; the `receipt` waits
/// for the disk when the settlement is durable.
async fn settle(
    session: &Session,
    format: Format,
    sub: &str,
    ids: Vec<u64>,
    how: Settlement,
    rid: Option<u64>,
) {
    let Some(consumer) = session.consumers.get(sub) else {
        session.error(
            format,
            ErrorCode::UnknownSubscription,
            format!("no consumer {sub:?}"),
            rid,
        );
        return;
    };
    let sink = session.out.id();
    let ids = match session
        .broker
        .queues()
        .settle_elsewhere(&consumer.filter, sink, sub, ids, how)
    {
        Err(local) => local,
        // A queue on another node of the cluster: sent now, answered
        // when its home is done, while the next frames go on.
        Ok(Ok(answer)) => {
            if let Some(rid) = rid {
                let answer = async move {
                    answer.await?;
                    Ok(crate::protocol::frame::ServerFrame::Receipt(
                        crate::protocol::frame::Receipt { rid },
                    ))
                };
                session.reply_later(format, rid, answer).await;
            }
            return;
        }
        Ok(Err(e)) => return session.broker_error(format, e, rid),
    };
    match session
        .broker
        .queues()
        .settle(&consumer.filter, sink, sub, ids, how)
        .await
    {
        Ok(Some(durable)) => {
            if let Some(rid) = rid {
                session
                    .confirm_when_durable(format, rid, durable, Confirm::Receipt)
                    .await;
            }
        }
        Ok(None) => session.receipt(format, rid),
        Err(e) => session.broker_error(format, e, rid),
    }
}
