//! Topic history: the last messages of topics under a `[[history]]`
//! filter, so that a client that was away recovers exactly what it
//! missed, or learns that it cannot.
//!
//! A topic with history keeps its last `size` messages (none older than
//! `ttl_s`) in memory, at first as the same `Arc<Published>` its
//! subscribers got, and in the store (`store/history.rs`). A payload read
//! off a connection is a slice of that connection's read buffer, which
//! it keeps alive; so the flush, once a second, also gives each new kept
//! message a payload of its own (copying only what is still kept: at
//! 2 M msg/s into a history of 10,000, 10,000 copies a second, not 2 M). A message's *offset* is its
//! topic `seq`: consecutive from 1, and continued across restarts. The
//! topic's *epoch* names one unbroken run of offsets: it changes whenever
//! the history may have lost messages (a start after an unclean shutdown,
//! a `[[history]]` entry added or removed), so an offset under an old
//! epoch is never mistaken for a position in the new one.
//!
//! Everything here runs inside the topic's task, like the rest of its
//! state: a recovering subscribe gets the kept messages after its offset
//! and joins the live ones in one task, so no publish falls between the
//! two and none comes twice.
//!
//! The store is written a second at a time (`TopicHistory::flush`,
//! from the broker's ticker, and at shutdown): one submission per topic
//! with its new messages and, as a range delete, those pushed out. Live
//! delivery never waits for the disk. Messages not yet written when the
//! process dies are lost from the history, and the next start gives
//! every topic a new epoch, so no client is told it recovered when it
//! did not.

use std::collections::VecDeque;
use std::sync::Arc;

use super::message::Published;
use super::queue::now_ms;
use crate::config::HistoryDecl;
use crate::protocol::frame::Priority;
use crate::store::{StoredEntry, Write, history_writes};

/// A new epoch: 12 hex digits of randomness (a UUID v7's random tail).
pub(crate) fn fresh_epoch() -> Arc<str> {
    let bytes = uuid::Uuid::now_v7().into_bytes();
    let mut s = String::with_capacity(12);
    for b in &bytes[10..16] {
        s.push_str(&format!("{b:02x}"));
    }
    s.into()
}

/// One kept message.
#[derive(Debug, Clone)]
pub struct HistoryEntry {
    /// When it was published (Unix ms).
    pub time_ms: u64,
    /// The message; its `seq` is its offset.
    pub message: Arc<Published>,
}

/// A topic's history as `GET /topics/{t}/history` reads it.
#[derive(Debug, Clone)]
pub struct HistoryPage {
    /// The topic's epoch.
    pub epoch: String,
    /// The topic's latest offset.
    pub offset: u64,
    /// Whether every message after the asked offset is still kept (false:
    /// some were pushed out, or the offset is ahead of the topic).
    pub complete: bool,
    /// Kept messages after the asked offset, oldest first, up to the
    /// limit.
    pub messages: Vec<HistoryEntry>,
}

impl HistoryPage {
    /// The page of a topic that is not there (never made, or swept): no
    /// epoch, nothing kept.
    pub(crate) fn nothing() -> Self {
        HistoryPage {
            epoch: String::new(),
            offset: 0,
            complete: true,
            messages: Vec::new(),
        }
    }
}

/// What a recovering subscribe found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Recovery {
    /// The topic's epoch ("" when it keeps no history).
    pub epoch: String,
    /// The topic's latest offset when the subscription started.
    pub offset: u64,
    /// Whether every message after the client's position was delivered
    /// (before any live one).
    pub recovered: bool,
    /// Why not, when not.
    pub reason: Option<String>,
    /// How many kept messages were delivered.
    pub replayed: usize,
}

impl Recovery {
    /// The same answer, not recovered after all, for `why`.
    pub(crate) fn missed(mut self, why: String) -> Self {
        self.recovered = false;
        self.reason = Some(why);
        self
    }

    fn not(epoch: &str, offset: u64, reason: String) -> Self {
        Recovery {
            epoch: epoch.to_owned(),
            offset,
            recovered: false,
            reason: Some(reason),
            replayed: 0,
        }
    }

    /// For a topic that keeps no history.
    pub(crate) fn none_kept(offset: u64) -> Self {
        Self::not(
            "",
            offset,
            "no history is kept for this topic (no [[history]] filter matches it)".into(),
        )
    }
}

/// The history state of one topic (inside its `TopicState`).
#[derive(Debug)]
pub(crate) struct History {
    pub(crate) epoch: Arc<str>,
    size: usize,
    ttl_ms: u64,
    kept: VecDeque<HistoryEntry>,
    /// Offsets up to here were handed to the store.
    flushed: u64,
    /// Offsets up to here are gone from the store (or were never written).
    trimmed: u64,
    /// The latest offset the store's epoch record names.
    recorded: u64,
    /// The epoch record is still to be written.
    epoch_unwritten: bool,
}

impl History {
    /// A history that starts now (a new epoch), after offset `latest`.
    pub(crate) fn new(decl: &HistoryDecl, latest: u64) -> Self {
        History {
            epoch: fresh_epoch(),
            size: decl.size,
            ttl_ms: decl.ttl_s.saturating_mul(1000),
            kept: VecDeque::new(),
            flushed: latest,
            trimmed: 0,
            recorded: 0,
            epoch_unwritten: true,
        }
    }

    /// A history read back from the store: its messages (the run after
    /// the last gap, if the store has one), and its epoch unless `renew`
    /// (or none was stored). Returns it and the latest offset.
    pub(crate) fn restored(
        decl: &HistoryDecl,
        topic: &Arc<str>,
        epoch: Option<(String, u64)>,
        mut stored: Vec<StoredEntry>,
        renew: bool,
    ) -> (Self, u64) {
        // The latest offset used: the last stored message, or what the
        // epoch record names (its messages may all be gone).
        let base = epoch.as_ref().map_or(0, |(_, base)| *base);
        let latest = stored.last().map_or(0, |e| e.offset).max(base);
        let epoch = epoch.map(|(e, _)| e);
        // Only an unbroken run up to the latest offset is a history: a
        // client whose offset falls before a gap is told it cannot recover.
        let start = stored
            .windows(2)
            .rposition(|w| w[1].offset != w[0].offset.saturating_add(1))
            .map_or(0, |i| i + 1);
        let fresh = renew || epoch.is_none();
        let mut h = History {
            epoch: match epoch.filter(|_| !renew) {
                Some(e) => e.into(),
                None => fresh_epoch(),
            },
            size: decl.size,
            ttl_ms: decl.ttl_s.saturating_mul(1000),
            kept: VecDeque::with_capacity(stored.len() - start),
            flushed: latest,
            // From the first stored message: the first flush deletes what
            // lies before the kept run (an earlier gap's leftovers too).
            trimmed: stored
                .first()
                .map_or(latest, |e| e.offset.saturating_sub(1)),
            recorded: base,
            epoch_unwritten: fresh,
        };
        for e in stored.drain(start..) {
            let mut m = Published::new(
                topic.clone(),
                e.offset,
                e.payload,
                e.headers,
                Priority::Normal,
                false,
            );
            m.epoch = Some(h.epoch.clone());
            h.kept.push_back(HistoryEntry {
                time_ms: e.time_ms,
                message: Arc::new(m),
            });
        }
        h.trim(now_ms());
        (h, latest)
    }

    /// Drops every kept message (their run is broken): a position among
    /// them is then told it cannot be recovered.
    pub(crate) fn forget_kept(&mut self) {
        self.kept.clear();
    }

    /// Takes a new `[[history]]` entry's size and age limit.
    pub(crate) fn reconfigure(&mut self, decl: &HistoryDecl) {
        self.size = decl.size;
        self.ttl_ms = decl.ttl_s.saturating_mul(1000);
        self.trim(now_ms());
    }

    /// Keeps a message just published.
    pub(crate) fn push(&mut self, message: Arc<Published>) {
        let now = now_ms();
        self.kept.push_back(HistoryEntry {
            time_ms: now,
            message,
        });
        self.trim(now);
    }

    /// Drops what is past the size or the age limit.
    fn trim(&mut self, now: u64) {
        while self.kept.len() > self.size {
            self.kept.pop_front();
        }
        if self.ttl_ms > 0 {
            while self
                .kept
                .front()
                .is_some_and(|e| e.time_ms.saturating_add(self.ttl_ms) <= now)
            {
                self.kept.pop_front();
            }
        }
    }

    /// The kept messages after `offset`, if every one after it is kept;
    /// otherwise why not. `latest` is the topic's latest offset.
    fn after(
        &self,
        offset: u64,
        latest: u64,
    ) -> Result<impl Iterator<Item = &HistoryEntry>, String> {
        if offset > latest {
            return Err(format!(
                "offset {offset} is ahead of the topic (latest {latest}): the history was lost"
            ));
        }
        let oldest = self.kept.front().map_or(latest + 1, |e| e.message.seq);
        if offset + 1 < oldest {
            return Err(format!(
                "messages after offset {offset} are no longer kept (the oldest kept is {oldest})"
            ));
        }
        // Offsets are consecutive: the first wanted is at a known index.
        let skip = usize::try_from(offset + 1 - oldest).unwrap_or(usize::MAX);
        Ok(self.kept.iter().skip(skip))
    }

    /// What a subscriber at (`epoch`, `offset`) missed, to deliver before
    /// the live messages; `latest` is the topic's latest offset.
    pub(crate) fn recover(
        &mut self,
        position: Option<(&str, u64)>,
        latest: u64,
    ) -> (Recovery, Vec<Arc<Published>>) {
        let epoch = self.epoch.to_string();
        let Some((asked, offset)) = position.filter(|(e, _)| !e.is_empty()) else {
            let why = "no position given: nothing to recover (this is the position to keep)";
            return (Recovery::not(&epoch, latest, why.into()), Vec::new());
        };
        if asked != epoch {
            let why =
                format!("the topic's history was reset: epoch {asked:?} is over, {epoch:?} began");
            return (Recovery::not(&epoch, latest, why), Vec::new());
        }
        self.trim(now_ms());
        match self.after(offset, latest) {
            Err(why) => (Recovery::not(&epoch, latest, why), Vec::new()),
            Ok(missed) => {
                let missed: Vec<Arc<Published>> = missed.map(|e| e.message.clone()).collect();
                let recovery = Recovery {
                    epoch,
                    offset: latest,
                    recovered: true,
                    reason: None,
                    replayed: missed.len(),
                };
                (recovery, missed)
            }
        }
    }

    /// Up to `limit` kept messages after `since`.
    pub(crate) fn page(&mut self, since: u64, limit: usize, latest: u64) -> HistoryPage {
        let epoch = self.epoch.to_string();
        self.trim(now_ms());
        let (complete, messages) = match self.after(since, latest) {
            Ok(after) => (true, after.take(limit).cloned().collect()),
            // Pushed out: what is kept after `since` still reads.
            Err(_) if since <= latest => (
                false,
                self.kept
                    .iter()
                    .filter(|e| e.message.seq > since)
                    .take(limit)
                    .cloned()
                    .collect(),
            ),
            Err(_) => (false, Vec::new()),
        };
        HistoryPage {
            epoch,
            offset: latest,
            complete,
            messages,
        }
    }

    /// The store writes that bring the disk up to date with memory (and
    /// the new messages' payloads copied out of the read buffers they
    /// were sliced from, since they are kept): the
    /// epoch if new, messages not yet written, and a range delete of
    /// those pushed out, and how many messages they write. Marked done
    /// at once: a refused submission is retried through
    /// [`History::unflush`].
    /// Without a store: gives the messages kept since the last call
    /// payloads of their own (as [`History::flush`] does before writing
    /// them), so that they no longer hold the read buffers they were
    /// sliced from.
    pub(crate) fn unshare_new(&mut self) {
        self.trim(now_ms());
        for e in self
            .kept
            .iter_mut()
            .filter(|e| e.message.seq > self.flushed)
        {
            e.message = Arc::new(e.message.unshared());
        }
        if let Some(last) = self.kept.back() {
            self.flushed = self.flushed.max(last.message.seq);
        }
    }

    pub(crate) fn flush(&mut self, topic: &str, latest: u64) -> (Vec<Write>, FlushMark, u64) {
        self.trim(now_ms());
        let mark = FlushMark {
            flushed: self.flushed,
            trimmed: self.trimmed,
            recorded: self.recorded,
            epoch_unwritten: self.epoch_unwritten,
        };
        let mut writes = Vec::new();
        if self.epoch_unwritten {
            // A new epoch owns nothing the old one wrote.
            writes.push(history_writes::delete(topic, 0, u64::MAX));
            self.epoch_unwritten = false;
            self.trimmed = 0;
            self.flushed = self
                .kept
                .front()
                .map_or(self.flushed, |e| e.message.seq.saturating_sub(1));
        }
        if mark.epoch_unwritten || latest > self.recorded {
            // The epoch with the latest offset used under it: a restart
            // goes on after it even when no message of it is kept.
            writes.push(history_writes::put_epoch(topic, &self.epoch, latest));
            self.recorded = latest;
        }
        // Offsets up to here are no longer kept: gone from disk too.
        let upto = self
            .kept
            .front()
            .map_or(self.flushed, |e| e.message.seq.saturating_sub(1));
        if upto > self.trimmed && !mark.epoch_unwritten {
            writes.push(history_writes::delete(topic, self.trimmed + 1, upto));
        }
        self.trimmed = self.trimmed.max(upto);
        let mut messages = 0;
        for e in self
            .kept
            .iter_mut()
            .filter(|e| e.message.seq > self.flushed)
        {
            // Kept past a second now: with a payload of its own, so that
            // it no longer holds the read buffer it was sliced from.
            e.message = Arc::new(e.message.unshared());
            let m = &e.message;
            messages += 1;
            writes.push(history_writes::put(
                topic, m.seq, e.time_ms, &m.headers, &m.payload,
            ));
        }
        if let Some(last) = self.kept.back() {
            self.flushed = self.flushed.max(last.message.seq);
        }
        (writes, mark, messages)
    }

    /// Undoes a [`History::flush`] whose writes the store refused, so
    /// the next flush writes them again.
    pub(crate) fn unflush(&mut self, mark: FlushMark) {
        self.flushed = mark.flushed;
        self.trimmed = mark.trimmed;
        self.recorded = mark.recorded;
        self.epoch_unwritten = mark.epoch_unwritten;
    }

    /// Whether nothing is kept once what is past its age is dropped.
    pub(crate) fn is_empty_now(&mut self) -> bool {
        self.trim(now_ms());
        self.kept.is_empty()
    }

    /// How many messages are kept (for operators).
    pub(crate) fn len(&self) -> usize {
        self.kept.len()
    }
}

/// Where a history's store bookkeeping stood before a flush.
#[derive(Debug, Clone, Copy)]
pub(crate) struct FlushMark {
    flushed: u64,
    trimmed: u64,
    recorded: u64,
    epoch_unwritten: bool,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decl(size: usize) -> HistoryDecl {
        HistoryDecl {
            filter: "#".into(),
            size,
            ttl_s: 0,
        }
    }

    fn message(topic: &Arc<str>, seq: u64) -> Arc<Published> {
        Arc::new(Published::new(
            topic.clone(),
            seq,
            bytes::Bytes::from_static(b"m"),
            Default::default(),
            Priority::Normal,
            false,
        ))
    }

    fn epoch_record(writes: &[Write]) -> Option<u64> {
        writes.iter().find_map(|w| match w {
            Write::Put { key, value, .. } if key.ends_with(&[0xFF, 0, 0, 0, 0, 0, 0, 0, 0]) => {
                Some(u64::from_be_bytes(value[..8].try_into().ok()?))
            }
            _ => None,
        })
    }

    #[test]
    fn the_epoch_record_names_the_latest_offset_even_with_nothing_kept() {
        let topic: Arc<str> = "t".into();
        // A history that begins at offset 5 (an entry added by a reload).
        let mut h = History::new(&decl(10), 5);
        let (writes, _, messages) = h.flush(&topic, 5);
        assert_eq!((epoch_record(&writes), messages), (Some(5), 0));
        // Read back with no message: the offsets go on after 5.
        let (back, latest) = History::restored(
            &decl(10),
            &topic,
            Some((h.epoch.to_string(), 5)),
            Vec::new(),
            false,
        );
        assert_eq!((latest, &*back.epoch), (5, &*h.epoch));
        // New messages move the record on at the next flush.
        h.push(message(&topic, 6));
        let (writes, _, messages) = h.flush(&topic, 6);
        assert_eq!((epoch_record(&writes), messages), (Some(6), 1));
        let (writes, _, _) = h.flush(&topic, 6);
        assert!(writes.is_empty(), "nothing new: {writes:?}");
    }

    #[test]
    fn a_restored_run_after_a_gap_is_what_recovers() {
        let topic: Arc<str> = "t".into();
        let entry = |offset| StoredEntry {
            offset,
            time_ms: now_ms(),
            headers: Default::default(),
            payload: bytes::Bytes::from_static(b"m"),
        };
        let stored = vec![entry(1), entry(2), entry(5), entry(6)];
        let (mut h, latest) =
            History::restored(&decl(10), &topic, Some(("e".into(), 6)), stored, false);
        assert_eq!(latest, 6);
        let (r, missed) = h.recover(Some(("e", 4)), 6);
        assert!(r.recovered && missed.len() == 2, "{r:?}");
        let (r, _) = h.recover(Some(("e", 2)), 6);
        assert!(!r.recovered, "3 and 4 are gone: {r:?}");
        // The first flush deletes what lies before the kept run.
        let (writes, _, _) = h.flush(&topic, 6);
        assert!(
            writes
                .iter()
                .any(|w| matches!(w, Write::DeleteRange { .. })),
            "{writes:?}"
        );
    }
}
