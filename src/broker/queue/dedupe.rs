//! Exactly-once enqueue under retries. An enqueue whose headers carry a
//! message id ([`MSG_ID_HEADER`]) that the queue already took within its
//! `dedupe_window_ms` is answered with the first one's seq and stored
//! nothing, so a client that got no answer (a timeout, `outcome_unknown`,
//! a dropped connection) sends the same message again without making a
//! duplicate. Like JetStream's `Nats-Msg-Id`, the id is the client's to
//! choose and to keep unique.
//!
//! A repeat is confirmed once the store has committed everything
//! submitted before it (an empty group behind the first message's), so
//! it is never confirmed before the message it names is on disk.
//!
//! The ids are the queue's state, kept in its task like the rest: the
//! ids seen in the window, at most [`MAX_IDS`] of at most
//! [`MAX_ID_BYTES`] (the oldest forgotten first), made again at start
//! from the messages the store gives back into memory (not those past
//! `memory_window`, nor those already consumed). Only a client's enqueue
//! is checked: a message moved between queues (dead-lettered, redriven,
//! moved) keeps its id and is never taken for a repeat. In a cluster the
//! id travels with the message's headers to the queue's home, which
//! decides.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;

use crate::protocol::frame::Headers;
use crate::store::queues::StoredMessage;

/// The header that names a message for deduplication.
pub const MSG_ID_HEADER: &str = "msg-id";

/// Most ids one queue remembers at once.
pub const MAX_IDS: usize = 100_000;

/// Longest id deduplicated, in bytes: a longer one makes no promise (it
/// would be kept in memory for the whole window).
pub const MAX_ID_BYTES: usize = 256;

/// The ids a queue took lately, each with the seq it got.
#[derive(Debug, Default)]
pub(crate) struct Dedupe {
    seen: HashMap<Arc<str>, u64>,
    /// (when taken, id), oldest first.
    order: VecDeque<(u64, Arc<str>)>,
}

impl Dedupe {
    fn forget_before(&mut self, oldest: u64) {
        while self.order.front().is_some_and(|(at, _)| *at < oldest) {
            if let Some((_, id)) = self.order.pop_front() {
                self.seen.remove(&id);
            }
        }
    }

    fn remember(&mut self, id: &str, seq: u64, at: u64) {
        if self.seen.contains_key(id) {
            return;
        }
        if self.order.len() >= MAX_IDS
            && let Some((_, old)) = self.order.pop_front()
        {
            self.seen.remove(&old);
        }
        let id: Arc<str> = id.into();
        self.seen.insert(id.clone(), seq);
        self.order.push_back((at, id));
    }
}

impl super::QueueState {
    /// The answer to an enqueue that repeats one the queue took (a
    /// client's enqueue only: a move carries the source's delete), if it
    /// does: the first one's seq, confirmed once everything submitted
    /// before, the first one included, is on disk (an empty group behind
    /// it).
    #[allow(clippy::type_complexity)]
    pub(crate) fn repeat_of(
        &mut self,
        m: &super::Incoming,
        now: u64,
    ) -> Option<Result<(u64, Option<crate::store::Durable>), super::QueueError>> {
        if !m.with.is_empty() {
            return None;
        }
        let seq = self.duplicate_of(&m.headers, now)?;
        let durable = self.writer.as_ref().map(|w| w.submit(Vec::new()));
        Some(
            durable
                .transpose()
                .map(|d| (seq, d))
                .map_err(super::QueueError::Store),
        )
    }

    /// The seq of the message an enqueue with `headers` repeats, if it
    /// carries an id the queue took within its window.
    pub(crate) fn duplicate_of(&mut self, headers: &Headers, now: u64) -> Option<u64> {
        let window = self.opts.dedupe_window_ms;
        if window == 0 {
            return None;
        }
        let id = headers.get(MSG_ID_HEADER)?;
        let d = self.dedupe.as_mut()?;
        // Ids are forgotten on the way, so the map shrinks as they age.
        d.forget_before(now.saturating_sub(window));
        d.seen.get(id.as_str()).copied()
    }

    /// Remembers the id of a message just taken (or given back by the
    /// store), if it has one and is inside the window.
    pub(crate) fn remember_id(&mut self, m: &StoredMessage, now: u64) {
        let window = self.opts.dedupe_window_ms;
        if window == 0 || m.enqueued_ms.saturating_add(window) < now {
            return;
        }
        if let Some(id) = m
            .headers
            .get(MSG_ID_HEADER)
            .filter(|id| id.len() <= MAX_ID_BYTES)
        {
            self.dedupe
                .get_or_insert_with(Box::default)
                .remember(id, m.seq, m.enqueued_ms);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_forgotten_past_the_window_and_past_the_bound() {
        let mut d = Dedupe::default();
        d.remember("a", 1, 1_000);
        d.remember("b", 2, 2_000);
        d.remember("a", 9, 2_500);
        assert_eq!(d.seen.get("a"), Some(&1), "the first seq stays");
        d.forget_before(1_500);
        assert_eq!((d.seen.get("a"), d.seen.get("b")), (None, Some(&2)));
        for i in 0..MAX_IDS as u64 + 10 {
            d.remember(&i.to_string(), i, 3_000 + i);
        }
        assert_eq!(d.seen.len(), MAX_IDS);
        assert!(!d.seen.contains_key("0") && d.seen.contains_key("10"));
    }
}
