//! Replacing what a queue holds with another copy of it: a cluster node
//! that takes over a queue whose home was lost installs the messages the
//! replicated journal held, in place of whatever its own store had of
//! the queue (an earlier tenure's). Runs in the queue's task, like
//! everything that changes it.

use super::{QueueState, now_ms};
use crate::broker::sink::Subscription;
use crate::store::queues::{PRIORITIES, StoredMessage};

impl QueueState {
    /// Forgets every message held (in memory, delayed, in flight, on
    /// disk) and holds `messages` instead, the first `memory_window` of
    /// them in delivery order in memory and the rest counted as on disk,
    /// where the caller wrote them all before. Consumers stay, with
    /// nothing in flight, and are served from the new messages.
    pub(crate) fn install(&mut self, mut messages: Vec<StoredMessage>) {
        let now = now_ms();
        self.ready = Default::default();
        self.ready_len = 0;
        self.delayed.clear();
        self.inflight.clear();
        for c in &mut self.consumers {
            c.inflight = 0;
            c.blocked = false;
        }
        self.expiring = 0;
        self.spilled = [0; PRIORITIES];
        self.loaded_upto = [0; PRIORITIES];
        self.loaded_extra.clear();
        // A refill read asked before would bring the old messages back.
        self.refill_epoch += 1;
        self.refilling = false;
        self.dedupe = None;
        // Delivery ids the old home gave out are never given out again:
        // a late ack of one must not settle a new delivery.
        self.next_delivery = self.next_delivery.max(now << 16);
        messages.sort_unstable_by_key(|m| (std::cmp::Reverse(m.priority.min(9)), m.seq));
        let next_seq = messages.iter().map(|m| m.seq + 1).max().unwrap_or(1);
        let window = self.opts.memory_window.max(1);
        let mut spilled = [0u64; PRIORITIES];
        let mut loaded_upto = [0u64; PRIORITIES];
        let mut loaded = Vec::with_capacity(messages.len().min(window));
        for m in messages {
            let p = usize::from(m.priority.min(9));
            // As at a start: past the window only messages delivered or
            // delayed before are loaded (their state must not be lost).
            let stateful = m.deliveries > 0 || m.not_before_ms > 0;
            if loaded.len() >= window && !stateful {
                spilled[p] += 1;
                continue;
            }
            if spilled[p] == 0 {
                loaded_upto[p] = m.seq;
            }
            loaded.push(m);
        }
        self.restore(loaded, spilled, loaded_upto, next_seq);
        self.dispatch(now);
        self.after();
    }

    /// Takes every consumer out (their deliveries go back), for a node
    /// that no longer serves the queue: the subscriptions and their
    /// credit, to attach them where it is served now.
    pub(crate) fn take_consumers(&mut self) -> Vec<(Subscription, u32)> {
        let now = now_ms();
        let taken: Vec<_> = self.consumers.drain(..).collect();
        let mut out = Vec::with_capacity(taken.len());
        for c in taken {
            self.return_all_of(c.cid, now);
            out.push((c.sub, c.prefetch));
        }
        self.after();
        out
    }
}
