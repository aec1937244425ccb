//! `presence`: a page of who is subscribed to a topic with presence; and
//! the join a subscribe makes on such a topic.

use crate::auth::Principal;
use crate::broker::{Subscription, Who};
use crate::protocol::codec::Format;
use crate::protocol::frame::{
    ErrorCode, PresenceMember, PresenceQuery, PresenceReply, ServerFrame,
};
use crate::session::Session;

/// Most members one `presence` answers with.
const MAX_PAGE: u32 = 1000;

/// Answers `q` with a page of the topic's members.
pub(in crate::session) async fn presence(session: &mut Session, format: Format, q: PresenceQuery) {
    let limit = q.limit.unwrap_or(100);
    if limit == 0 || limit > MAX_PAGE {
        let why = format!("limit {limit}: give 1 to {MAX_PAGE}");
        return session.error(format, ErrorCode::InvalidField, why, Some(q.rid));
    }
    match session
        .broker
        .presence()
        .page(&q.topic, q.after, limit as usize)
        .await
    {
        Ok(Some(page)) => session.reply(
            format,
            ServerFrame::Presence(PresenceReply {
                rid: q.rid,
                topic: q.topic,
                count: page.count as u64,
                members: page
                    .members
                    .into_iter()
                    .map(|m| PresenceMember {
                        client_id: m.who.client_id.to_string(),
                        principal: m.who.principal.to_string(),
                        since_ms: m.since_ms,
                    })
                    .collect(),
                next: page.next,
            }),
        ),
        Ok(None) => session.error(
            format,
            ErrorCode::InvalidField,
            format!(
                "topic: no presence is kept for {:?} (no [[presence]] entry covers it)",
                q.topic
            ),
            Some(q.rid),
        ),
        Err(e) => session.broker_error(format, e, Some(q.rid)),
    }
}

/// Counts the session in the presence of the topic `sub` subscribed to
/// (if it keeps one).
pub(in crate::session) async fn join(session: &Session, sub: &Subscription) {
    join_as(
        &session.broker,
        sub,
        &session.client_id,
        session.principal.as_ref(),
    )
    .await;
}

/// Counts a connection of `client_id` authenticated as `principal` in the
/// presence of the topic `sub` subscribed to, if it keeps one (its `Who`
/// made only then).
pub(in crate::session) async fn join_as(
    broker: &crate::broker::Broker,
    sub: &Subscription,
    client_id: &str,
    principal: Option<&Principal>,
) {
    if !broker.presence().counts(&sub.filter) {
        return;
    }
    let who = Who {
        client_id: client_id.into(),
        principal: principal.map_or("anonymous", |p| p.name()).into(),
    };
    broker.presence().join(sub, who).await;
}
