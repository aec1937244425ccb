//! The broker's topics part: publish (through the hooks, then the local
//! topics), subscribe and unsubscribe, retained messages, idle sweeping,
//! and what operators read of topics.

use std::sync::Arc;

use super::topic::{Gone, NotPublished, TopicState};
use super::{Broker, BrokerError, Publish, PublishOutcome, Published, Source, Subscription, Topic};
use crate::routing::{self, TopicLimits};
use crate::store::RetainedRecord;
use crate::taskq::TaskQueue;

/// A retry bound for a task that keeps finding its topic removed; each
/// retry creates the topic afresh, so more than one is already unusual.
pub(super) const GONE_RETRIES: usize = 8;

/// Refuses the topics only the broker publishes to (presence events).
fn reserved(topic: &str) -> Result<(), BrokerError> {
    if topic.starts_with(crate::routing::PRESENCE_PREFIX) {
        return Err(BrokerError::ReservedTopic(topic.to_owned()));
    }
    Ok(())
}

impl Broker {
    /// Re-creates topics with their retained messages, as read back from
    /// the store at start.
    pub async fn restore_retained(&self, records: Vec<RetainedRecord>) -> Result<(), BrokerError> {
        for r in records {
            if TopicLimits::WIDEST.check_topic(&r.topic).is_err() {
                tracing::warn!(topic = %r.topic, "skipping a stored retained message with an invalid topic");
                continue;
            }
            // What the store holds is served even past a lowered limit.
            let Some(topic) = self.topic(&r.topic, true, false)? else {
                continue;
            };
            topic
                .submit(move |t| t.restore_retained(r.seq, r.payload, r.headers))
                .await?;
        }
        Ok(())
    }

    /// The topic named `name`, created (with its matching wildcard
    /// subscriptions) if `create` and it does not exist.
    pub(super) fn topic(
        &self,
        name: &str,
        create: bool,
        limited: bool,
    ) -> Result<Option<Topic>, BrokerError> {
        {
            let reg = self.read();
            if let Some(t) = reg.topics.get(name) {
                return Ok(Some(t.clone()));
            }
            // A publish to a name nobody wants needs no write lock.
            if !create {
                let mut wanted = false;
                reg.wildcards.for_each_match(name, |s| {
                    wanted |= !s.is_cancelled() && !s.sink.is_closed();
                });
                if !wanted && !self.keeps_history(name) {
                    return Ok(None);
                }
            }
        }
        let mut reg = self.write();
        if let Some(t) = reg.topics.get(name) {
            return Ok(Some(t.clone()));
        }
        let mut subs = Vec::new();
        reg.wildcards.for_each_match(name, |s| {
            if !s.is_cancelled() && !s.sink.is_closed() {
                subs.push(s.clone());
            }
        });
        // A topic with history is kept from its first message on.
        let decls = self.keeps_history(name).then(|| self.history_decls());
        let history = decls
            .as_deref()
            .and_then(|d| crate::config::HistoryDecl::for_topic(d, name));
        if !create && subs.is_empty() && history.is_none() {
            return Ok(None);
        }
        if limited && reg.topics.len() >= self.inner.max_topics {
            return Err(BrokerError::TooManyTopics(self.inner.max_topics));
        }
        let name: Arc<str> = name.into();
        let topic = TaskQueue::new(
            TopicState::new(
                name.clone(),
                subs,
                self.inner.writer.clone(),
                self.inner.metrics.clone(),
                history,
                self.keeps_presence(&name),
            ),
            &self.inner.scheduler,
        );
        if history.is_some() {
            reg.history.insert(name.clone());
        }
        reg.topics.insert(name, topic.clone());
        Ok(Some(topic))
    }

    /// Drops a removed topic's registry entry (if it is still this topic),
    /// so a retry finds or creates the live one instead of the stale one.
    pub(super) fn forget(&self, name: &str, topic: &Topic) {
        let mut reg = self.write();
        if reg.topics.get(name).is_some_and(|t| t.same(topic)) {
            reg.topics.remove(name);
            reg.history.remove(name);
            crate::maps::shrink_if_sparse(&mut reg.topics);
            reg.retired.retire(&topic.stats());
        }
    }

    /// Publishes a message: stamps it with the topic's next sequence number,
    /// keeps it if retained, and queues it for every matching subscription.
    /// A publish to a topic nobody subscribes to and that keeps nothing is
    /// a no-op. With a store, a retained publish returns once the retained
    /// message is durable.
    ///
    /// # Errors
    /// An invalid topic name, or the topic's queue refusing the task
    /// (overloaded).
    pub async fn publish(&self, msg: Publish) -> Result<PublishOutcome, BrokerError> {
        self.publish_at(msg, &Source::EMBEDDED, 0).await
    }

    /// [`Broker::publish`] for a connection: `source` is what rules see of
    /// the publisher. A message a rule drops is published nowhere (the
    /// outcome counts no delivery).
    ///
    /// # Errors
    /// As [`Broker::publish`].
    pub async fn publish_from(
        &self,
        msg: Publish,
        source: &Source<'_>,
    ) -> Result<PublishOutcome, BrokerError> {
        self.publish_at(msg, source, 0).await
    }

    /// Whether a local subscription still uses `filter` (a wildcard
    /// subscription under exactly that filter, or any subscription to
    /// that topic): the cluster drops the NATS subscriptions of filters
    /// nobody here uses.
    pub(crate) async fn has_subscribers(&self, filter: &str) -> bool {
        if routing::is_wildcard(filter) {
            return self
                .read()
                .wildcards
                .any_at(filter, |s| !s.is_cancelled() && !s.sink.is_closed());
        }
        let Some(topic) = self.read().topics.get(filter).cloned() else {
            return false;
        };
        // A topic too busy to answer is taken as still wanted.
        topic
            .submit(|t| t.summary())
            .await
            .map_or(true, |(subs, _, _)| subs > 0)
    }

    /// Publishes a message another node of the cluster published: to
    /// local subscribers only, without rules (they ran on that node) and
    /// without sending it back out.
    ///
    /// # Errors
    /// As [`Broker::publish`].
    pub(crate) async fn publish_remote(&self, msg: Publish) -> Result<PublishOutcome, BrokerError> {
        self.check_topic(&msg.topic)?;
        reserved(&msg.topic)?;
        self.publish_local(msg).await
    }

    /// A message the broker itself publishes to this node's subscribers
    /// (presence events): no rules, not sent to other nodes.
    pub(super) async fn publish_local_event(
        &self,
        msg: Publish,
    ) -> Result<PublishOutcome, BrokerError> {
        self.check_topic(&msg.topic)?;
        self.publish_local(msg).await
    }

    /// A publish `depth` republishes deep in a chain of rules.
    pub(crate) async fn publish_at(
        &self,
        msg: Publish,
        source: &Source<'_>,
        depth: u8,
    ) -> Result<PublishOutcome, BrokerError> {
        self.check_topic(&msg.topic)?;
        // Rules' republishes and embedding apps come here too.
        reserved(&msg.topic)?;
        // The hook (the rules) first: it may edit, copy or drop. Its
        // future is boxed by the hook, so it costs nothing in size to a
        // publish that has no hook.
        let msg = match self.inner.publish_hook.get() {
            Some(hook) if hook.active() => match hook.apply(self, msg, source, depth).await {
                Some(msg) => msg,
                None => return Ok(PublishOutcome::default()),
            },
            _ => msg,
        };
        // Then the other nodes, without waiting; then the local topics.
        if let Some(remote) = self.inner.remote.get() {
            remote.forward(&msg);
        }
        self.publish_local(msg).await
    }

    /// A publish to this node's subscribers (and retained store).
    async fn publish_local(&self, msg: Publish) -> Result<PublishOutcome, BrokerError> {
        let Publish {
            topic: name,
            payload,
            headers,
            retain,
            priority,
            qos,
            origin,
        } = msg;
        let mut message = Some((payload, headers));
        for _ in 0..GONE_RETRIES {
            let Some(topic) = self.topic(&name, retain, true)? else {
                // No topic and no subscriber: nothing to keep.
                self.inner.metrics.publish(0, 0);
                return Ok(PublishOutcome::default());
            };
            let Some((payload, headers)) = message.take() else {
                break;
            };
            match topic
                .submit(move |t| t.publish(payload, headers, priority, retain, qos, origin))
                .await?
            {
                Ok((outcome, None)) => {
                    self.inner
                        .metrics
                        .publish(outcome.delivered, outcome.dropped);
                    return Ok(outcome);
                }
                Ok((outcome, Some(durable))) => {
                    durable.await.map_err(BrokerError::Store)?;
                    self.inner
                        .metrics
                        .publish(outcome.delivered, outcome.dropped);
                    return Ok(outcome);
                }
                // The topic was removed under us: it hands the message back.
                Err(NotPublished::Gone(payload, headers)) => {
                    self.forget(&name, &topic);
                    message = Some((payload, headers));
                }
                Err(NotPublished::Store(e)) => return Err(BrokerError::StoreBusy(e)),
            }
        }
        Err(BrokerError::Contended)
    }

    /// Subscribes `sub` to its filter: on every matching topic, existing or
    /// created later. Each matching topic's retained message is delivered
    /// first.
    ///
    /// # Errors
    /// An invalid filter, or a topic queue refusing the task.
    pub async fn subscribe(&self, sub: Subscription) -> Result<(), BrokerError> {
        self.check_filter(&sub.filter)?;
        if let Some(remote) = self.inner.remote.get() {
            // Before the local subscribe: by the time it returns, a
            // publish on any node is heard here.
            remote.want(&sub.filter).await;
        }
        if !routing::is_wildcard(&sub.filter) {
            return self.subscribe_exact(sub).await;
        }
        let matching: Vec<Topic> = {
            let mut reg = self.write();
            reg.wildcards.insert(&sub.filter, sub.clone());
            reg.topics
                .iter()
                .filter(|(name, _)| routing::matches(&sub.filter, name))
                .map(|(_, t)| t.clone())
                .collect()
        };
        for topic in matching {
            let s = sub.clone();
            // A topic removed meanwhile is fine: if it is created again it
            // copies the subscription from the trie.
            if let Err(e) = topic.submit(move |t| t.subscribe(s)).await {
                // All or nothing: the cancel stops deliveries at once, the
                // unsubscribe tidies the topics that took it.
                sub.cancel();
                let _ = self.unsubscribe(sub.sink.id(), &sub.id, &sub.filter).await;
                return Err(e.into());
            }
        }
        Ok(())
    }

    async fn subscribe_exact(&self, sub: Subscription) -> Result<(), BrokerError> {
        for _ in 0..GONE_RETRIES {
            let Some(topic) = self.topic(&sub.filter, true, true)? else {
                continue;
            };
            let s = sub.clone();
            match topic.submit(move |t| t.subscribe(s)).await? {
                Ok(()) => return Ok(()),
                Err(Gone) => self.forget(&sub.filter, &topic),
            }
        }
        Err(BrokerError::Contended)
    }

    /// Ends the subscription `id` of `sink` on `filter`.
    ///
    /// # Errors
    /// A topic queue refusing the task.
    pub async fn unsubscribe(&self, sink: u64, id: &str, filter: &str) -> Result<(), BrokerError> {
        let topics: Vec<Topic> = if routing::is_wildcard(filter) {
            let mut reg = self.write();
            reg.wildcards
                .remove_by(filter, |s| s.sink.id() == sink && &*s.id == id);
            reg.topics
                .iter()
                .filter(|(name, _)| routing::matches(filter, name))
                .map(|(_, t)| t.clone())
                .collect()
        } else {
            self.read()
                .topics
                .get(filter)
                .cloned()
                .into_iter()
                .collect()
        };
        let id: Arc<str> = id.into();
        // Every topic is asked even if one refuses; the first error is
        // reported. (A caller that cancelled the subscription first gets no
        // more deliveries either way.)
        let mut first_error = None;
        for topic in topics {
            let id = id.clone();
            match topic
                .submit(move |t| (t.unsubscribe(sink, &id), t.name.clone()))
                .await
            {
                Ok((left, name)) => {
                    for m in left {
                        self.presence().announce(&name, "leave", &m).await;
                    }
                }
                Err(e) => {
                    first_error.get_or_insert(e);
                }
            }
        }
        match first_error {
            Some(e) => Err(e.into()),
            None => Ok(()),
        }
    }

    /// Removes topics with no subscriptions and no retained message that
    /// nothing has used since the previous sweep. Called every idle
    /// timeout, it removes topics idle for between one and two timeouts.
    /// Returns how many were removed.
    pub async fn sweep_idle(&self) -> usize {
        // Wildcard subscriptions whose subscriber is gone (an actor that
        // stopped, a session that ended without unsubscribing).
        let dead = self
            .write()
            .wildcards
            .retain(|s| !s.is_cancelled() && !s.sink.is_closed());
        if dead > 0 {
            tracing::debug!(dead, "dead wildcard subscriptions dropped");
        }
        let topics: Vec<(Arc<str>, Topic)> = self
            .read()
            .topics
            .iter()
            .map(|(n, t)| (n.clone(), t.clone()))
            .collect();
        let mut removed = 0;
        for (name, topic) in topics {
            if let Ok(true) = topic.submit(|t| t.remove_if_idle()).await {
                self.forget(&name, &topic);
                removed += 1;
            }
        }
        removed
    }

    /// The retained messages of every existing topic matching `filter`.
    ///
    /// # Errors
    /// An invalid filter.
    pub async fn retained_matching(
        &self,
        filter: &str,
    ) -> Result<Vec<Arc<Published>>, BrokerError> {
        self.check_filter(filter)?;
        let topics: Vec<Topic> = self
            .read()
            .topics
            .iter()
            .filter(|(name, _)| routing::matches(filter, name))
            .map(|(_, t)| t.clone())
            .collect();
        let mut out = Vec::new();
        for t in topics {
            if let Ok(Some(m)) = t.submit(|t| t.retained()).await {
                out.push(m);
            }
        }
        Ok(out)
    }

    /// A page of topic names in name order: those after `after`,
    /// matching `filter` if given, at most `limit`. For the admin API:
    /// each call walks the registry (no index is kept for it).
    pub fn topic_names(
        &self,
        filter: Option<&str>,
        after: Option<&str>,
        limit: usize,
    ) -> Vec<String> {
        let reg = self.read();
        let mut names: Vec<&str> = reg
            .topics
            .keys()
            .map(|n| &**n)
            .filter(|n| after.is_none_or(|a| *n > a))
            .filter(|n| filter.is_none_or(|f| routing::matches(f, n)))
            .collect();
        names.sort_unstable();
        names.truncate(limit);
        names.into_iter().map(str::to_owned).collect()
    }

    /// Subscriptions, retained flag and last sequence number of a topic.
    pub async fn topic_info(&self, name: &str) -> Option<(usize, bool, u64)> {
        let topic = self.read().topics.get(name).cloned()?;
        topic.submit(|t| t.summary()).await.ok()
    }
}
