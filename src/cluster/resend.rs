//! Publishes in flight when NATS is lost: what a node sent last is kept
//! for a moment and sent again once NATS is back ([`Sent`]), and what a
//! node receives twice is dropped ([`Seen`]). No I/O here.
//!
//! A NATS server that dies (killed, or its machine) takes with it what
//! was still in its socket and its memory, and the client drops what it
//! had not written yet: messages a node sent but nobody received, which
//! no counter can see. So every topic publish a node sends carries its
//! process's epoch and a sequence number (`Wharf-Seq`), the node keeps
//! the last [`KEEP_COUNT`] it sent (at most [`KEEP_BYTES`]),
//! and after a reconnect it sends again those it sent within
//! [`KEEP_FOR`] before it lost NATS. A receiver remembers, per origin
//! process, the highest number it had and which of the [`SEEN_WINDOW`]
//! before it: a copy it had is dropped, one it never had is published.
//! NATS keeps one connection's messages in order for a subscriber, so
//! only the messages sent again can come below the highest number.

use std::collections::{HashMap, VecDeque};
use std::time::{Duration, Instant};

/// Most publishes kept to send again.
pub(super) const KEEP_COUNT: usize = 8192;
/// Most bytes (subjects and payloads) kept to send again.
pub(super) const KEEP_BYTES: usize = 4 << 20;
/// How long before NATS was lost a publish is still sent again: long
/// enough for anything written to a dying connection, short enough that
/// a node subscribing after it is not sent old news.
pub(super) const KEEP_FOR: Duration = Duration::from_secs(2);
/// How many numbers below the highest a receiver tells had from not
/// (as many as are kept, so every copy sent again is told apart).
pub(super) const SEEN_WINDOW: u64 = KEEP_COUNT as u64;
/// Most origin processes a receiver remembers (anything that may
/// publish on NATS can number its messages); past it, it starts over.
const MAX_ORIGINS: usize = 1024;

const WORDS: usize = (SEEN_WINDOW / 64) as usize;

/// A publish kept to send again.
#[derive(Debug)]
pub(super) struct Kept<T> {
    /// When it was sent.
    pub at: Instant,
    /// The bytes it holds (subject and payload).
    pub size: usize,
    /// What to send again.
    pub item: T,
}

/// What this node sent lately, numbered in the order it was sent.
#[derive(Debug)]
pub(super) struct Sent<T> {
    next: u64,
    kept: VecDeque<Kept<T>>,
    bytes: usize,
}

impl<T> Default for Sent<T> {
    fn default() -> Self {
        Sent {
            next: 0,
            kept: VecDeque::new(),
            bytes: 0,
        }
    }
}

impl<T> Sent<T> {
    /// The next publish's number (from 1).
    pub fn number(&mut self) -> u64 {
        self.next += 1;
        self.next
    }

    /// Keeps `item`, sent at `at`, dropping the oldest past the bounds.
    pub fn keep(&mut self, at: Instant, size: usize, item: T) {
        self.kept.push_back(Kept { at, size, item });
        self.bytes += size;
        while self.kept.len() > KEEP_COUNT || (self.bytes > KEEP_BYTES && self.kept.len() > 1) {
            self.drop_oldest();
        }
    }

    fn drop_oldest(&mut self) {
        if let Some(old) = self.kept.pop_front() {
            self.bytes -= old.size;
        }
    }

    /// Forgets what was sent before `at` minus [`KEEP_FOR`] (NATS is up
    /// at `at`: older publishes reached it).
    pub fn forget_before(&mut self, at: Instant) {
        let Some(from) = at.checked_sub(KEEP_FOR) else {
            return;
        };
        while self.kept.front().is_some_and(|k| k.at < from) {
            self.drop_oldest();
        }
    }

    /// What was sent within [`KEEP_FOR`] before `lost` (NATS was lost
    /// then), oldest first: to send again.
    pub fn since(&self, lost: Instant) -> impl Iterator<Item = &Kept<T>> {
        let from = lost.checked_sub(KEEP_FOR);
        self.kept
            .iter()
            .filter(move |k| from.is_none_or(|from| k.at >= from))
    }

    /// How many are kept.
    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.kept.len()
    }
}

/// One origin process's numbers as a receiver has them.
struct Origin {
    last: u64,
    /// Bit `n % SEEN_WINDOW`: whether number `n` (within the window below
    /// `last`) was had.
    bits: Box<[u64; WORDS]>,
}

impl Origin {
    fn new(seq: u64) -> Origin {
        let mut o = Origin {
            last: seq,
            bits: Box::new([0; WORDS]),
        };
        o.set(seq);
        o
    }

    fn slot(n: u64) -> (usize, u64) {
        let i = n % SEEN_WINDOW;
        ((i / 64) as usize, 1 << (i % 64))
    }

    fn set(&mut self, n: u64) {
        let (w, b) = Self::slot(n);
        self.bits[w] |= b;
    }

    fn has(&self, n: u64) -> bool {
        let (w, b) = Self::slot(n);
        self.bits[w] & b != 0
    }

    fn clear(&mut self, n: u64) {
        let (w, b) = Self::slot(n);
        self.bits[w] &= !b;
    }
}

/// What a receiver had from each origin process, to drop a copy sent
/// again.
#[derive(Default)]
pub(super) struct Seen {
    origins: HashMap<u64, Origin, foldhash::fast::RandomState>,
}

impl Seen {
    /// Whether message `seq` of the process `epoch` is new here (and
    /// notes it). A process not known yet starts over: what it sends is
    /// new.
    pub fn fresh(&mut self, epoch: u64, seq: u64) -> bool {
        let Some(o) = self.origins.get_mut(&epoch) else {
            if self.origins.len() >= MAX_ORIGINS {
                self.origins.clear();
            }
            self.origins.insert(epoch, Origin::new(seq));
            return true;
        };
        if seq > o.last {
            if seq - o.last >= SEEN_WINDOW {
                o.bits.fill(0);
            } else {
                for n in o.last + 1..seq {
                    o.clear(n);
                }
            }
            o.last = seq;
            o.set(seq);
            return true;
        }
        if o.last - seq >= SEEN_WINDOW || o.has(seq) {
            return false;
        }
        o.set(seq);
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_was_sent_lately_is_kept_within_its_bounds() {
        let mut sent = Sent::default();
        let t0 = Instant::now();
        for i in 0..(KEEP_COUNT + 10) {
            let n = sent.number();
            assert_eq!(n, i as u64 + 1);
            sent.keep(t0, 10, n);
        }
        assert_eq!(sent.len(), KEEP_COUNT);
        assert_eq!(sent.since(t0).next().map(|k| k.item), Some(11));
        // Bytes bound: one big payload pushes out all before it but
        // itself stays.
        sent.keep(t0, KEEP_BYTES + 1, 0);
        assert_eq!(sent.len(), 1);
        // Only what was sent within KEEP_FOR before NATS was lost.
        let mut sent = Sent::default();
        sent.keep(t0, 1, 1);
        sent.keep(t0 + Duration::from_secs(5), 1, 2);
        sent.keep(t0 + Duration::from_secs(6), 1, 3);
        let lost = t0 + Duration::from_secs(6);
        let again: Vec<u64> = sent.since(lost).map(|k| k.item).collect();
        assert_eq!(again, [2, 3]);
        // NATS up at 6.5 s: what was sent before 4.5 s is forgotten.
        sent.forget_before(t0 + Duration::from_millis(6_500));
        assert_eq!(sent.len(), 2);
    }

    #[test]
    fn a_copy_had_is_dropped_and_one_never_had_is_taken_once() {
        let mut seen = Seen::default();
        // 1..=10 arrive except 7 (lost with NATS), and 11, 12 were in the
        // client's buffer and come first after the reconnect.
        for n in (1..=10).filter(|n| *n != 7) {
            assert!(seen.fresh(5, n));
        }
        assert!(seen.fresh(5, 11));
        assert!(seen.fresh(5, 12));
        // Then what a sent within KEEP_FOR is sent again: only 7 is new.
        let again: Vec<u64> = (3..=12).filter(|n| seen.fresh(5, *n)).collect();
        assert_eq!(again, [7]);
        assert!(!seen.fresh(5, 7), "taken once");
        // Numbers another process sent are its own.
        assert!(seen.fresh(9, 7));
        assert!(seen.fresh(6, 1));
        assert!(!seen.fresh(6, 1));
    }

    #[test]
    fn numbers_at_the_ends_of_the_range_neither_overflow_nor_grow_the_state() {
        let mut seen = Seen::default();
        assert!(seen.fresh(1, 0));
        assert!(seen.fresh(1, u64::MAX));
        assert!(!seen.fresh(1, u64::MAX));
        assert!(!seen.fresh(1, 0), "far below the window");
        assert!(seen.fresh(1, u64::MAX - 1), "within it, not had");
        // Every epoch a sender makes up costs one origin, up to the bound.
        for epoch in 0..(MAX_ORIGINS as u64 * 3) {
            assert!(seen.fresh(epoch + 10, 1));
        }
        assert!(seen.origins.len() <= MAX_ORIGINS);
    }

    #[test]
    fn the_window_slides_and_what_fell_out_of_it_is_dropped() {
        let mut seen = Seen::default();
        assert!(seen.fresh(1, 1));
        // A jump past the whole window: nothing below it is known had.
        assert!(seen.fresh(1, 1 + SEEN_WINDOW * 3));
        let top = 1 + SEEN_WINDOW * 3;
        assert!(seen.fresh(1, top - 5), "within the window, not had");
        // The oldest number the window still tells: it shares its slot
        // with top + 2.
        assert!(seen.fresh(1, top - SEEN_WINDOW + 2));
        assert!(!seen.fresh(1, top - SEEN_WINDOW), "too old to tell");
        // A small step clears the slots it passes (they held numbers a
        // window older).
        assert!(seen.fresh(1, top + 3));
        assert!(seen.fresh(1, top + 1));
        assert!(seen.fresh(1, top + 2));
        assert!(!seen.fresh(1, top + 2));
    }
}
