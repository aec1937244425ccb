//! A topic's state and the tasks that change it. Everything here runs
//! inside the topic's task queue: one task at a time, never blocking.

use bytes::Bytes;
use std::sync::Arc;

use super::message::Published;
use super::sink::{DeliveryOutcome, Subscription};
use crate::protocol::frame::{Headers, Priority};
use crate::store::{Durable, SubmitError, WriterHandle, retained_writes};

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
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PublishOutcome {
    /// Subscriptions the message was queued for.
    pub delivered: usize,
    /// Subscriptions whose slow-consumer policy dropped it.
    pub dropped: usize,
    /// The message's sequence number on its topic (0 if no topic existed
    /// and nothing was kept).
    pub seq: u64,
}

impl TopicState {
    pub(crate) fn new(
        name: Arc<str>,
        subs: Vec<Subscription>,
        writer: Option<WriterHandle>,
        metrics: Arc<crate::metrics::Metrics>,
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
        let msg = Arc::new(
            Published::new(
                self.name.clone(),
                self.seq,
                payload,
                headers,
                priority,
                false,
            )
            .with_qos(qos.min(2))
            .with_origin(origin, retain),
        );
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
        self.subs.push(sub);
        Ok(())
    }

    /// Removes a subscription if present.
    pub(crate) fn unsubscribe(&mut self, sink: u64, id: &str) {
        self.touched = true;
        self.subs.retain(|s| !(s.sink.id() == sink && &*s.id == id));
    }

    /// Drops subscriptions that were cancelled or whose sink is closed.
    fn forget_closed(&mut self) {
        self.subs
            .retain(|s| !s.is_cancelled() && !s.sink.is_closed());
    }

    /// Marks the topic removed if it has no subscribers and no retained
    /// message and was not touched since the previous sweep.
    pub(crate) fn remove_if_idle(&mut self) -> bool {
        self.forget_closed();
        let touched = std::mem::replace(&mut self.touched, false);
        if !self.removed && !touched && self.subs.is_empty() && self.retained.is_none() {
            self.removed = true;
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
}
