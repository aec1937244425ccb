//! A topic's state and the tasks that change it. Everything here runs
//! inside the topic's task queue: one task at a time, never blocking.

use bytes::Bytes;
use std::sync::Arc;

use super::history::{FlushMark, History, HistoryPage, Recovery};
use super::message::Published;
use super::presence::{Member, Presence, PresencePage, Who};
use super::sink::{DeliveryOutcome, Subscription};
use crate::config::HistoryDecl;
use crate::protocol::frame::{Headers, Priority};
use crate::store::{Durable, StoredEntry, SubmitError, WriterHandle, retained_writes};

/// The state a topic resource owns.
#[derive(Debug)]
pub(crate) struct TopicState {
    pub(crate) name: Arc<str>,
    /// Exact and wildcard subscriptions matching this topic.
    subs: Vec<Subscription>,
    retained: Option<Arc<Published>>,
    seq: u64,
    /// Set by the idle sweep just before the registry forgets the topic;
    /// tasks that find it set tell their caller to look the topic up again.
    pub(crate) removed: bool,
    /// Set by every operation, cleared by each idle sweep: a topic the
    /// sweep finds untouched since the previous sweep has been idle for at
    /// least one sweep interval. (No clock read on the publish path.)
    touched: bool,
    /// Where retained messages are persisted, if anywhere.
    writer: Option<WriterHandle>,
    /// The broker's counters (the count of retained messages).
    metrics: Arc<crate::metrics::Metrics>,
    /// The last messages, when a `[[history]]` entry covers the topic.
    history: Option<Box<History>>,
    /// Who is subscribed, when a `[[presence]]` entry covers the topic.
    presence: Option<Box<Presence>>,
}

/// Why a publish task did not publish.
#[derive(Debug)]
pub(crate) enum NotPublished {
    /// The topic was removed: the message comes back for a retry.
    Gone(Bytes, Headers),
    /// The store writer refused the retained write; nothing changed.
    Store(SubmitError),
}

/// A task found the topic already removed: look it up again and retry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Gone;

/// What a publish reached.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PublishOutcome {
    /// Subscriptions the message was queued for.
    pub delivered: usize,
    /// Subscriptions whose slow-consumer policy dropped it.
    pub dropped: usize,
    /// The message's sequence number on its topic (0 if no topic existed
    /// and nothing was kept).
    pub seq: u64,
    /// The subscribers it reached that are past their mark of
    /// unacknowledged deliveries: what a publisher that acknowledges its
    /// client's messages waits for first ([`super::Hold::wait`]).
    pub hold: super::Hold,
}

impl TopicState {
    pub(crate) fn new(
        name: Arc<str>,
        subs: Vec<Subscription>,
        writer: Option<WriterHandle>,
        metrics: Arc<crate::metrics::Metrics>,
        history: Option<&HistoryDecl>,
        presence: bool,
    ) -> Self {
        TopicState {
            name,
            subs,
            retained: None,
            seq: 0,
            removed: false,
            touched: true,
            writer,
            metrics,
            history: history.map(|d| Box::new(History::new(d, 0))),
            presence: presence.then(Box::default),
        }
    }

    /// Keeps `m` as the retained message (or none), and the broker's
    /// count of retained messages with it.
    fn set_retained(&mut self, m: Option<Arc<Published>>) {
        let delta = i64::from(m.is_some()) - i64::from(self.retained.is_some());
        if delta != 0 {
            self.metrics
                .retained
                .fetch_add(delta, std::sync::atomic::Ordering::Relaxed);
        }
        self.retained = m;
    }

    /// Installs a retained message read back from the store at start; the
    /// topic's sequence continues after it.
    pub(crate) fn restore_retained(&mut self, seq: u64, payload: Bytes, headers: Headers) {
        self.seq = self.seq.max(seq);
        self.set_retained(Some(Arc::new(Published::new(
            self.name.clone(),
            seq,
            payload,
            headers,
            Priority::Normal,
            true,
        ))));
    }

    /// Stamps, retains (or clears) and fans out one message. A removed
    /// topic gives the payload and headers back, for a retry. A retained
    /// message is handed to the store writer first (nothing changes if the
    /// writer refuses it); the returned [`Durable`] completes once it is on
    /// disk.
    pub(crate) fn publish(
        &mut self,
        payload: Bytes,
        headers: Headers,
        priority: Priority,
        retain: bool,
        qos: u8,
        origin: u64,
    ) -> Result<(PublishOutcome, Option<Durable>), NotPublished> {
        if self.removed {
            return Err(NotPublished::Gone(payload, headers));
        }
        let durable = match (&self.writer, retain) {
            (Some(writer), true) => {
                let write = if payload.is_empty() {
                    retained_writes::delete(&self.name)
                } else {
                    retained_writes::put(&self.name, self.seq.wrapping_add(1), &headers, &payload)
                };
                Some(writer.submit(vec![write]).map_err(NotPublished::Store)?)
            }
            _ => None,
        };
        self.seq = self.seq.wrapping_add(1);
        self.touched = true;
        let mut msg = Published::new(
            self.name.clone(),
            self.seq,
            payload,
            headers,
            priority,
            false,
        )
        .with_qos(qos.min(2))
        .with_origin(origin, retain)
        // Kept encodings serve the next subscriber: a message with one
        // (and no history to replay it) encodes once anyway.
        .with_cache(self.subs.len() > 1 || self.history.is_some());
        if let Some(h) = &self.history {
            msg.epoch = Some(h.epoch.clone());
        }
        let msg = Arc::new(msg);
        if let Some(h) = &mut self.history {
            h.push(msg.clone());
        }
        if retain {
            let kept = (!msg.payload.is_empty()).then(|| Arc::new(msg.as_retained()));
            self.set_retained(kept);
        }
        let mut outcome = PublishOutcome {
            seq: self.seq,
            ..PublishOutcome::default()
        };
        let mut closed = false;
        for sub in &self.subs {
            if sub.is_cancelled() {
                closed = true;
                continue;
            }
            match sub.sink.deliver(sub, &msg) {
                DeliveryOutcome::Queued => outcome.delivered += 1,
                DeliveryOutcome::Crowded => {
                    outcome.delivered += 1;
                    outcome.hold.push(&sub.sink);
                }
                DeliveryOutcome::Dropped => outcome.dropped += 1,
                DeliveryOutcome::Closed => closed = true,
            }
        }
        if closed {
            self.forget_closed();
        }
        Ok((outcome, durable))
    }

    /// Adds a subscription (once) and hands it the retained message first.
    pub(crate) fn subscribe(&mut self, sub: Subscription) -> Result<(), Gone> {
        if self.removed {
            return Err(Gone);
        }
        self.touched = true;
        if sub.is_cancelled() || self.subs.contains(&sub) {
            return Ok(());
        }
        if let Some(retained) = &self.retained {
            if sub.sink.deliver(&sub, retained) == DeliveryOutcome::Closed {
                return Ok(());
            }
        }
        crate::maps::push_snug(&mut self.subs, sub);
        Ok(())
    }

    /// Removes a subscription if present.
    /// Removes a subscription if present; returns the presence members
    /// that left (with it, or before it without a word), if any.
    pub(crate) fn unsubscribe(&mut self, sink: u64, id: &str) -> Vec<Member> {
        self.touched = true;
        self.subs.retain(|s| !(s.sink.id() == sink && &*s.id == id));
        self.presence
            .as_mut()
            .map(|p| p.leave(sink, id))
            .unwrap_or_default()
    }

    /// Drops subscriptions that were cancelled or whose sink is closed
    /// (and the presence members that held only those).
    fn forget_closed(&mut self) {
        self.subs
            .retain(|s| !s.is_cancelled() && !s.sink.is_closed());
        if let Some(p) = &mut self.presence {
            p.retain_live(&self.subs);
        }
    }

    /// Counts `sub` (already subscribed here) as `who` in the topic's
    /// presence; returns the member if it joined now. Nothing on a topic
    /// without presence, or for a subscription that is not (or no
    /// longer) here.
    pub(crate) fn join_presence(
        &mut self,
        sub: &Subscription,
        who: Who,
    ) -> Result<Option<Member>, Gone> {
        if self.removed {
            return Err(Gone);
        }
        let Some(p) = &mut self.presence else {
            return Ok(None);
        };
        if sub.is_cancelled() || !self.subs.contains(sub) {
            return Ok(None);
        }
        Ok(p.join(sub, who))
    }

    /// A page of the topic's presence; `None` without presence.
    pub(crate) fn presence_page(
        &mut self,
        after: Option<&str>,
        limit: usize,
    ) -> Option<PresencePage> {
        self.forget_closed();
        self.presence.as_ref().map(|p| p.page(after, limit))
    }

    /// Follows a changed `[[presence]]`: starts counting (connections
    /// join as they subscribe again) or forgets the members.
    pub(crate) fn set_presence(&mut self, on: bool) {
        match (&self.presence, on) {
            (None, true) => self.presence = Some(Box::default()),
            (Some(_), false) => self.presence = None,
            _ => {}
        }
    }

    /// Marks the topic removed if it has no subscribers and no retained
    /// message and was not touched since the previous sweep.
    pub(crate) fn remove_if_idle(&mut self) -> bool {
        self.forget_closed();
        let touched = std::mem::replace(&mut self.touched, false);
        // A history whose messages all expired goes with its topic (a
        // topic made again starts a new epoch); one that keeps messages
        // keeps the topic.
        let kept = self.history.as_mut().is_some_and(|h| !h.is_empty_now());
        if !self.removed && !touched && self.subs.is_empty() && self.retained.is_none() && !kept {
            self.removed = true;
            if self.history.take().is_some()
                && let Some(w) = &self.writer
            {
                let forget = crate::store::history_writes::delete(&self.name, 0, u64::MAX);
                let _ = w.submit_detached(vec![forget]);
            }
        }
        self.removed
    }

    /// The retained message, if any.
    pub(crate) fn retained(&self) -> Option<Arc<Published>> {
        self.retained.clone()
    }

    /// Subscriptions and whether a retained message is held.
    pub(crate) fn summary(&self) -> (usize, bool, u64) {
        (self.subs.len(), self.retained.is_some(), self.seq)
    }

    /// Adds a subscription that resumes from `position` (epoch, offset):
    /// the kept messages after the offset first, then the live ones (one
    /// task: none between the two, none twice). The retained message goes
    /// first only when nothing was recovered. The [`Recovery`] says what
    /// happened.
    pub(crate) fn subscribe_recovering(
        &mut self,
        sub: Subscription,
        position: Option<(&str, u64)>,
    ) -> Result<Recovery, Gone> {
        if self.removed {
            return Err(Gone);
        }
        let (recovery, missed) = match &mut self.history {
            Some(h) => h.recover(position, self.seq),
            None => (Recovery::none_kept(self.seq), Vec::new()),
        };
        if !recovery.recovered {
            self.subscribe(sub)?;
            return Ok(recovery);
        }
        self.touched = true;
        let mut recovery = recovery;
        if sub.is_cancelled() || self.subs.contains(&sub) {
            return Ok(recovery.missed("the subscription ended, or exists already".into()));
        }
        // What the subscriber's buffer would not take is not recovered.
        let mut dropped = 0usize;
        for m in &missed {
            match sub.sink.deliver(&sub, m) {
                DeliveryOutcome::Queued | DeliveryOutcome::Crowded => {}
                DeliveryOutcome::Dropped => dropped += 1,
                DeliveryOutcome::Closed => {
                    return Ok(recovery.missed("the subscriber went during the replay".into()));
                }
            }
        }
        crate::maps::push_snug(&mut self.subs, sub);
        if dropped > 0 {
            recovery = recovery.missed(format!(
                "{dropped} of the {} missed messages did not fit the subscriber's buffer \
                 (its slow-consumer policy dropped them)",
                missed.len()
            ));
        }
        Ok(recovery)
    }

    /// Up to `limit` kept messages after offset `since`; `None` when the
    /// topic keeps no history.
    pub(crate) fn history_page(&mut self, since: u64, limit: usize) -> Option<HistoryPage> {
        if self.removed {
            // Swept while the read was on its way (its history went with
            // it): the same page as a topic not there, not "no history".
            return Some(HistoryPage::nothing());
        }
        let seq = self.seq;
        self.history.as_mut().map(|h| h.page(since, limit, seq))
    }

    /// Kept messages, when the topic keeps a history.
    pub(crate) fn history_len(&self) -> Option<usize> {
        self.history.as_ref().map(|h| h.len())
    }

    /// Installs a history read back from the store at start (a new epoch
    /// if `renew`); the topic's offsets continue after it.
    pub(crate) fn restore_history(
        &mut self,
        decl: &HistoryDecl,
        epoch: Option<(String, u64)>,
        stored: Vec<StoredEntry>,
        renew: bool,
    ) {
        let (mut h, latest) = History::restored(decl, &self.name, epoch, stored, renew);
        if self.seq > latest {
            // The retained message (written at once) is ahead of the
            // history (written a second at a time): the offsets between
            // are gone, so the kept ones are no unbroken run up to now.
            h.forget_kept();
        }
        self.seq = self.seq.max(latest);
        self.history = Some(Box::new(h));
    }

    /// Follows a changed `[[history]]`: starts a history (new epoch),
    /// takes new limits, or ends it and forgets what it stored.
    pub(crate) fn set_history(&mut self, decl: Option<&HistoryDecl>) {
        match (&mut self.history, decl) {
            (Some(h), Some(d)) => h.reconfigure(d),
            (None, Some(d)) => self.history = Some(Box::new(History::new(d, self.seq))),
            (None, None) => {}
            (Some(_), None) => {
                self.history = None;
                if let Some(w) = &self.writer {
                    let forget = crate::store::history_writes::delete(&self.name, 0, u64::MAX);
                    if let Err(e) = w.submit_detached(vec![forget]) {
                        tracing::warn!(topic = %self.name, "history not forgotten on disk: {e}");
                    }
                }
            }
        }
    }

    /// Hands the history's new messages and trims to the store writer.
    /// Returns whether anything was left unwritten (the writer refused:
    /// the next flush tries again).
    pub(crate) fn flush_history(&mut self) -> bool {
        let Some(h) = &mut self.history else {
            return false;
        };
        let Some(writer) = &self.writer else {
            // No store: the new messages only get payloads of their own.
            h.unshare_new();
            return false;
        };
        let (writes, mark, messages): (_, FlushMark, _) = h.flush(&self.name, self.seq);
        if writes.is_empty() {
            return false;
        }
        match writer.submit_detached(writes) {
            Ok(()) => {
                self.metrics.history_written.add(messages);
                false
            }
            Err(_) => {
                h.unflush(mark);
                true
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A history read that reaches a topic the sweep has just removed
    /// (its history gone with it) gets the page of a topic not there, not
    /// "no history is kept" (which the route answers with 404).
    #[test]
    fn a_swept_topics_history_page_is_the_empty_one() {
        let decl = HistoryDecl {
            filter: "chat/#".into(),
            size: 10,
            ttl_s: 1,
        };
        let metrics = Arc::new(crate::metrics::Metrics::default());
        let mut t = TopicState::new(
            "chat/brief".into(),
            Vec::new(),
            None,
            metrics,
            Some(&decl),
            false,
        );
        assert!(!t.remove_if_idle(), "touched since its making: kept once");
        assert!(t.remove_if_idle(), "idle, nothing kept: swept");
        let page = t.history_page(0, 10).expect("a page, not no history");
        assert!(page.epoch.is_empty() && page.messages.is_empty() && page.complete);
    }
}
