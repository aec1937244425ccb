//! The broker's part of presence: the `[[presence]]` entries in force,
//! joins (after a subscribe), pages of members, and the join and leave
//! events on `$presence/<topic>`. The state is in `presence.rs`; the
//! leaves come out of the topics' unsubscribe tasks (`topics.rs`).

use std::sync::Arc;
use std::sync::atomic::Ordering;

use super::presence::{Member, PresencePage, Who};
use crate::config::PresenceDecl;
use crate::routing::PRESENCE_PREFIX;

/// The broker's presence part ([`Broker::presence`](super::Broker::presence)).
/// A view, as [`Queues`](super::Queues).
#[derive(Clone, Copy)]
pub struct TopicPresence<'a>(&'a super::Broker);

impl std::ops::Deref for TopicPresence<'_> {
    type Target = super::Broker;

    fn deref(&self) -> &super::Broker {
        self.0
    }
}

impl super::Broker {
    /// The presence part: who is subscribed to topics under a
    /// `[[presence]]` entry.
    pub fn presence(&self) -> TopicPresence<'_> {
        TopicPresence(self)
    }

    /// Whether a `[[presence]]` entry covers `topic`.
    pub(super) fn keeps_presence(&self, topic: &str) -> bool {
        if !self.inner.presence_on.load(Ordering::Relaxed) {
            return false;
        }
        let decls = self.inner.presence.read();
        !decls.is_empty() && PresenceDecl::covers(&decls, topic)
    }
}

impl TopicPresence<'_> {
    /// Installs the `[[presence]]` entries (at start and on every
    /// reload): existing topics start or stop counting. A topic that
    /// starts counts the connections that subscribe from then on.
    pub async fn set(&self, decls: &[PresenceDecl]) {
        *self.inner.presence.write() = Arc::new(decls.to_vec());
        self.inner
            .presence_on
            .store(!decls.is_empty(), Ordering::Relaxed);
        let topics: Vec<(Arc<str>, super::Topic)> = self
            .read()
            .topics
            .iter()
            .map(|(n, t)| (n.clone(), t.clone()))
            .collect();
        for (name, topic) in topics {
            let on = PresenceDecl::covers(decls, &name);
            let _ = topic.submit(move |t| t.set_presence(on)).await;
        }
    }

    /// Whether a subscription to `filter` counts in a presence: a topic
    /// name under a `[[presence]]` entry (so a caller makes its [`Who`]
    /// only then).
    pub fn counts(&self, filter: &str) -> bool {
        !crate::routing::is_wildcard(filter) && self.keeps_presence(filter)
    }

    /// Counts `sub`, which just subscribed to a topic name, as `who` in
    /// the topic's presence, and announces the join if it is new. Nothing
    /// for a filter with wildcards or a topic without presence.
    pub async fn join(&self, sub: &super::Subscription, who: Who) {
        if !self.counts(&sub.filter) {
            return;
        }
        let Some(topic) = self.read().topics.get(&*sub.filter).cloned() else {
            return;
        };
        let s = sub.clone();
        if let Ok(Ok(Some(member))) = topic.submit(move |t| t.join_presence(&s, who)).await {
            self.announce(&sub.filter, "join", &member).await;
        }
    }

    /// A page of `topic`'s members after `after`, at most `limit`; `None`
    /// when no `[[presence]]` entry covers it.
    ///
    /// # Errors
    /// An invalid topic name, or its task queue refusing the task.
    pub async fn page(
        &self,
        topic: &str,
        after: Option<String>,
        limit: usize,
    ) -> Result<Option<PresencePage>, super::BrokerError> {
        self.check_topic(topic)?;
        if let Some(a) = after
            .as_deref()
            .filter(|a| !super::presence::valid_cursor(a))
        {
            return Err(super::BrokerError::Invalid(format!(
                "after: {a:?} is not a cursor a page gave (its \"next\")"
            )));
        }
        if !self.keeps_presence(topic) {
            return Ok(None);
        }
        let Some(t) = self.read().topics.get(topic).cloned() else {
            // Nobody subscribes: no topic, no members.
            return Ok(Some(PresencePage::default()));
        };
        let page = t
            .submit(move |t| t.presence_page(after.as_deref(), limit))
            .await?;
        Ok(Some(page.unwrap_or_default()))
    }

    /// Publishes a join or leave on `$presence/<topic>`, for whoever
    /// subscribes to it (nobody, most of the time: then it costs one
    /// registry lookup).
    pub(super) async fn announce(&self, topic: &str, event: &str, m: &Member) {
        let payload = serde_json::json!({
            "event": event,
            "topic": topic,
            "client_id": &*m.who.client_id,
            "principal": &*m.who.principal,
            "since_ms": m.since_ms,
        });
        let publish = super::Publish {
            topic: format!("{PRESENCE_PREFIX}{topic}"),
            payload: payload.to_string().into(),
            ..super::Publish::default()
        };
        if let Err(e) = self.publish_local_event(publish).await {
            tracing::debug!(topic, event, "presence event not published: {e}");
        }
    }
}
