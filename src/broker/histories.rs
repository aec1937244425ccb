//! The broker's part of topic history: the `[[history]]` entries in
//! force, restoring what the store kept, recovering subscribes, the
//! history route's reads and the flushes to the store. The state itself
//! and the rules of recovery are in `history.rs`; everything here finds a
//! topic and submits a task to it.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use super::history::{HistoryPage, Recovery};
use crate::config::HistoryDecl;
use crate::store::history_writes;

/// The broker's topic-history part ([`Broker::history`](super::Broker::history)):
/// the `[[history]]` entries, restoring, recovering subscribes, reads and
/// flushes. A view, as [`Queues`](super::Queues).
#[derive(Clone, Copy)]
pub struct TopicHistory<'a>(&'a super::Broker);

impl std::ops::Deref for TopicHistory<'_> {
    type Target = super::Broker;

    fn deref(&self) -> &super::Broker {
        self.0
    }
}

impl super::Broker {
    /// The topic-history part: `[[history]]` entries, recovering
    /// subscribes, reads of what topics keep.
    pub fn history(&self) -> TopicHistory<'_> {
        TopicHistory(self)
    }

    /// The `[[history]]` entries in force.
    pub(super) fn history_decls(&self) -> Arc<Vec<HistoryDecl>> {
        self.inner.history.read().clone()
    }

    /// Whether a `[[history]]` entry covers `topic` (so a publish to it
    /// creates the topic, to be kept).
    pub(super) fn keeps_history(&self, topic: &str) -> bool {
        if !self.inner.history_on.load(Ordering::Relaxed) {
            return false;
        }
        let decls = self.inner.history.read();
        !decls.is_empty() && HistoryDecl::for_topic(&decls, topic).is_some()
    }
}

impl TopicHistory<'_> {
    /// Installs the `[[history]]` entries (at start, before
    /// [`TopicHistory::restore`], and on every reload): existing topics
    /// start, change or end their history to match.
    pub async fn set(&self, decls: &[HistoryDecl]) {
        let decls = Arc::new(decls.to_vec());
        *self.inner.history.write() = decls.clone();
        self.inner
            .history_on
            .store(!decls.is_empty(), Ordering::Relaxed);
        let topics: Vec<(Arc<str>, super::Topic)> = self
            .read()
            .topics
            .iter()
            .map(|(n, t)| (n.clone(), t.clone()))
            .collect();
        for (name, topic) in topics {
            let decl = HistoryDecl::for_topic(&decls, &name).cloned();
            let keeps = decl.is_some();
            if topic
                .submit(move |t| t.set_history(decl.as_ref()))
                .await
                .is_ok()
            {
                let mut reg = self.write();
                if keeps {
                    reg.history.insert(name);
                } else {
                    reg.history.remove(&name);
                }
            }
        }
    }

    /// Re-creates the topics whose history the store holds, with their
    /// messages and epochs (new epochs if `renew`: the last run did not
    /// shut down cleanly, so messages may be missing). A stored history
    /// that no `[[history]]` entry covers any more is deleted. Returns
    /// how many topics got theirs back.
    ///
    /// # Errors
    /// A topic queue refusing the task.
    pub async fn restore(
        &self,
        records: Vec<crate::store::HistoryRecord>,
        renew: bool,
    ) -> Result<usize, super::BrokerError> {
        let decls = self.history_decls();
        let mut restored = 0;
        for r in records {
            let decl = HistoryDecl::for_topic(&decls, &r.topic).cloned();
            let valid = crate::routing::TopicLimits::WIDEST
                .check_topic(&r.topic)
                .is_ok();
            let Some(decl) = decl.filter(|_| valid) else {
                if let Some(w) = &self.inner.writer {
                    let _ = w.submit_detached(vec![history_writes::delete(&r.topic, 0, u64::MAX)]);
                }
                tracing::info!(topic = %r.topic, "stored history dropped: no [[history]] entry covers the topic");
                continue;
            };
            let Some(topic) = self.topic(&r.topic, true, false)? else {
                continue;
            };
            topic
                .submit(move |t| t.restore_history(&decl, r.epoch, r.messages, renew))
                .await?;
            restored += 1;
        }
        Ok(restored)
    }

    /// Subscribes `sub` (to a topic name, not a filter) resuming from
    /// `position`, an (epoch, offset) a previous subscription reached:
    /// the messages it missed first, then the live ones, none twice. See
    /// [`Recovery`] for what it answers; a topic without history answers
    /// `recovered: false`.
    ///
    /// # Errors
    /// A filter with wildcards (`InvalidTopic`), too many topics, a topic
    /// queue refusing the task.
    pub async fn subscribe_recovering(
        &self,
        sub: super::Subscription,
        position: Option<(&str, u64)>,
    ) -> Result<Recovery, super::BrokerError> {
        self.check_topic(&sub.filter)?;
        if let Some(remote) = self.inner.remote.get() {
            remote.want(&sub.filter).await;
        }
        let position = position.map(|(e, o)| (Arc::<str>::from(e), o));
        for _ in 0..super::topics::GONE_RETRIES {
            let Some(topic) = self.topic(&sub.filter, true, true)? else {
                continue;
            };
            let (s, p) = (sub.clone(), position.clone());
            let found = topic
                .submit(move |t| t.subscribe_recovering(s, p.as_ref().map(|(e, o)| (&**e, *o))))
                .await?;
            match found {
                Ok(recovery) => return Ok(recovery),
                Err(super::topic::Gone) => self.forget(&sub.filter, &topic),
            }
        }
        Err(super::BrokerError::Contended)
    }

    /// The kept messages of `topic` after offset `since`, at most
    /// `limit`; `None` when no `[[history]]` entry covers it. A topic that
    /// does not exist (nothing published yet, or its history expired and
    /// it was swept) answers an empty page with epoch "".
    ///
    /// # Errors
    /// An invalid topic name, too many topics, a topic queue refusing the
    /// task.
    pub async fn page(
        &self,
        topic: &str,
        since: u64,
        limit: usize,
    ) -> Result<Option<HistoryPage>, super::BrokerError> {
        self.check_topic(topic)?;
        if !self.keeps_history(topic) {
            return Ok(None);
        }
        // A read creates nothing: a topic not there has nothing kept.
        let Some(t) = self.read().topics.get(topic).cloned() else {
            return Ok(Some(HistoryPage::nothing()));
        };
        // None: a topic created before the entry was (a reload under way).
        Ok(t.submit(move |t| t.history_page(since, limit)).await?)
    }

    /// Hands every topic's new history to the store writer, and returns
    /// once each topic has (for the shutdown). Returns how many topics
    /// left something unwritten (the writer was full).
    pub async fn flush(&self) -> usize {
        let mut left = 0;
        for topic in self.history_topics() {
            // Refused by the writer, or by the topic's queue: unwritten.
            if !matches!(topic.submit(|t| t.flush_history()).await, Ok(false)) {
                left += 1;
            }
        }
        left
    }

    /// [`TopicHistory::flush`] without waiting: a task on each topic
    /// with history (the broker's ticker, once a second).
    pub fn flush_detached(&self) {
        for topic in self.history_topics() {
            let _ = topic.execute(crate::taskq::Lane::Normal, |t| {
                t.flush_history();
            });
        }
    }

    fn history_topics(&self) -> Vec<super::Topic> {
        let reg = self.read();
        reg.history
            .iter()
            .filter_map(|n| reg.topics.get(n).cloned())
            .collect()
    }

    /// Topics with a history and the messages they keep, for operators.
    pub async fn summary(&self) -> (usize, usize) {
        let mut messages = 0;
        let topics = self.history_topics();
        for t in &topics {
            if let Ok(Some(n)) = t.submit(|t| t.history_len()).await {
                messages += n;
            }
        }
        (topics.len(), messages)
    }
}
