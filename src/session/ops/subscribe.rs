//! `subscribe` and `unsubscribe`: topic subscriptions, plain or durable.

use crate::auth::{Principal, Right};
use crate::broker::SubTag;
use crate::broker::{
    DURABLE_PREFETCH, DURABLE_PREFIX, Sink as _, Subscription, durable_queue_name,
};
use crate::protocol::codec::{self, Format};
use crate::protocol::frame::{
    Ended, ErrorCode, Priority, Recover, ServerFrame, Subscribe, Subscribed, Unsubscribe,
};
use crate::session::{Session, encoding_slot};

/// Subscribes to `s.filter` under the id `s.id`: a plain subscription, or a
/// durable one when `s.durable`.
pub(in crate::session) async fn subscribe(session: &mut Session, format: Format, mut s: Subscribe) {
    if let Err(e) = session.broker.topic_limits().check_filter(&s.filter) {
        session.error(
            format,
            ErrorCode::InvalidFilter,
            format!("filter: {e}"),
            s.rid,
        );
        return;
    }
    if !session.check_new_id(format, &s.id, s.rid) {
        return;
    }
    if let Some(recover) = s.recover.take() {
        let why = if s.durable {
            Some("recover: a durable subscription keeps its own backlog; give one or the other")
        } else if crate::routing::is_wildcard(&s.filter) {
            Some("recover: needs a topic name, not a filter with wildcards")
        } else {
            None
        };
        match why {
            Some(why) => session.error(format, ErrorCode::InvalidField, why, s.rid),
            None => subscribe_recovering(session, format, s, recover).await,
        }
        return;
    }
    if s.durable {
        subscribe_durable(session, format, s).await;
        return;
    }
    let sub = plain(session, format, &s);
    match session.broker.subscribe(sub.clone()).await {
        Ok(()) => {
            session.receipt(format, s.rid);
            super::presence::join(session, &sub).await;
            session.subs.insert(sub);
        }
        Err(e) => session.broker_error(format, e, s.rid),
    }
}

/// A plain subscription's entry in the topics: the session's outbound
/// queue, tagged with its `message` frames' prefix.
fn plain(session: &Session, format: Format, s: &Subscribe) -> Subscription {
    Subscription::new(
        session.out.clone(),
        &s.id,
        &s.filter,
        crate::broker::SubTag::Prefix(codec::message_prefix(format, &s.id)),
        Some(encoding_slot(format)),
    )
}

/// A plain subscription to one topic that resumes from `recover`: the
/// messages missed first (the topic does that), then a `subscribed` frame
/// saying what was recovered.
async fn subscribe_recovering(
    session: &mut Session,
    format: Format,
    s: Subscribe,
    recover: Recover,
) {
    let sub = plain(session, format, &s);
    let position = (!recover.epoch.is_empty()).then_some((recover.epoch.as_str(), recover.offset));
    match session
        .broker
        .history()
        .subscribe_recovering(sub.clone(), position)
        .await
    {
        Ok(r) => {
            super::presence::join(session, &sub).await;
            session.subs.insert(sub);
            session.reply(
                format,
                ServerFrame::Subscribed(Subscribed {
                    rid: s.rid,
                    sub: s.id,
                    epoch: r.epoch,
                    offset: r.offset,
                    recovered: r.recovered,
                    replayed: r.replayed as u64,
                    reason: r.reason,
                }),
            );
        }
        Err(e) => session.broker_error(format, e, s.rid),
    }
}

/// A durable subscription: a queue named by the client id and `s.id`,
/// consumed by this session; refused when `hello` gave no client id.
async fn subscribe_durable(session: &mut Session, format: Format, s: Subscribe) {
    if !session.named {
        session.error(
            format,
            ErrorCode::InvalidField,
            "durable: a durable subscription needs the client id given in hello",
            s.rid,
        );
        return;
    }
    let owner = session.durable_owner();
    let name = match durable_queue_name(&owner, &s.id) {
        Ok(n) => n,
        Err(e) => return session.error(format, ErrorCode::InvalidField, e.to_string(), s.rid),
    };
    let consumer = Subscription::new(
        session.out.clone(),
        &s.id,
        &name,
        crate::broker::SubTag::Durable(s.filter.as_str().into()),
        Some(encoding_slot(format)),
    );
    let prefetch = s.prefetch.unwrap_or(DURABLE_PREFETCH);
    match session
        .broker
        .durable()
        .subscribe_durable(&owner, &s.filter, consumer.clone(), prefetch)
        .await
    {
        Ok(()) => {
            session.consumers.insert(s.id, consumer);
            session.receipt(format, s.rid);
        }
        Err(e) => session.broker_error(format, e, s.rid),
    }
}

/// Ends subscription or consumer `u.id`.
pub(in crate::session) async fn unsubscribe(session: &mut Session, format: Format, u: Unsubscribe) {
    if let Some(c) = session.consumers.remove(&u.id) {
        c.cancel();
        let done = if c.filter.starts_with(DURABLE_PREFIX) {
            // A durable subscription ends for good: its backlog goes with
            // it.
            session
                .broker
                .durable()
                .unsubscribe_durable(&session.durable_owner(), &u.id, session.out.id())
                .await
                .map(|_| ())
        } else {
            session
                .broker
                .queues()
                .cancel_consumer(&c.filter, session.out.id(), &u.id)
                .await
        };
        match done {
            Ok(()) => session.receipt(format, u.rid),
            Err(e) => session.broker_error(format, e, u.rid),
        }
        return;
    }
    match session.subs.remove(&u.id) {
        None => session.error(
            format,
            ErrorCode::UnknownSubscription,
            format!("no subscription {:?}", u.id),
            u.rid,
        ),
        Some(sub) => {
            // Effective at once; the topics drop it as they can.
            sub.cancel();
            if let Err(e) = session
                .broker
                .unsubscribe(session.out.id(), &u.id, &sub.filter)
                .await
            {
                tracing::debug!(sub = %u.id, "unsubscribe left for the topics to tidy: {e}");
            }
            session.receipt(format, u.rid);
        }
    }
}

/// The right a subscription (`consumer`: a queue consumer or durable
/// subscription) needs and `p` lacks, if any: what `permit` checks when
/// it is made, checked again after a `refresh`.
fn lacking<'a>(p: &Principal, sub: &'a Subscription, consumer: bool) -> Option<Right<'a>> {
    let needs: &[Right<'a>] = match (sub.tag(), consumer) {
        (SubTag::Durable(filter), _) => &[Right::Subscribe(filter), Right::ConsumeFilter(filter)],
        (_, true) => &[Right::Consume(&sub.filter)],
        (_, false) => &[Right::Subscribe(&sub.filter)],
    };
    needs.iter().copied().find(|r| !p.may(*r))
}

/// Ends the subscriptions and consumers the session's principal no
/// longer has the rights for (a `refresh` narrowed them), each with an
/// `ended` frame saying which right is missing. A durable subscription's
/// queue and backlog stay (only its consumer ends): a later credential
/// with the right takes it up again.
pub(in crate::session) async fn end_unpermitted(session: &mut Session, format: Format) {
    let Some(p) = session.principal.clone() else {
        return;
    };
    let mut ended: Vec<(String, bool, String)> = Vec::new();
    let subs = session.subs.iter().map(|s| (false, s));
    let consumers = session.consumers.values().map(|s| (true, s));
    for (consumer, sub) in subs.chain(consumers) {
        if let Some(right) = lacking(&p, sub, consumer) {
            let what = right.object().map_or(String::new(), |o| format!(" {o:?}"));
            let why = format!(
                "{:?} may no longer {}{what} (the refreshed credential)",
                p.name(),
                right.name()
            );
            ended.push((sub.id.to_string(), consumer, why));
        }
    }
    let sink = session.out.id();
    for (id, consumer, message) in ended {
        if consumer {
            if let Some(c) = session.consumers.remove(&id) {
                c.cancel();
                // Its unsettled deliveries go back to the queue.
                let _ = session
                    .broker
                    .queues()
                    .cancel_consumer(&c.filter, sink, &id)
                    .await;
            }
        } else if let Some(sub) = session.subs.remove(&id) {
            sub.cancel();
            let _ = session.broker.unsubscribe(sink, &id, &sub.filter).await;
        }
        tracing::info!(target: "wharf::auth", principal = %p.id(), sub = %id, "subscription ended: {message}");
        let frame = ServerFrame::Ended(Ended {
            sub: id,
            code: ErrorCode::Forbidden,
            message,
        });
        let _ = session.out.push_frame(Priority::High, format, &frame);
    }
    session
        .sessions
        .set_counts(session.id, session.subs.len(), session.consumers.len());
}
