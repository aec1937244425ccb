//! A queue's part in a transaction's commit, in three tasks: `prepare`
//! checks and reserves (staged enqueues get their seqs but stay
//! invisible; acked deliveries are locked so no timeout or disconnect
//! gives them back) and returns the store writes; once the writes of
//! every queue in the transaction are durable in one batch, `apply` makes
//! it all take effect; `abort` undoes a prepare whose commit failed.

use super::{Incoming, QueueError, QueueState};
use crate::store::Write;
use crate::store::queues::{self as records, StoredMessage};

/// One staged ack: whose delivery it is.
#[derive(Debug, Clone)]
pub(crate) struct StagedAck {
    pub(crate) sink: u64,
    pub(crate) sub: std::sync::Arc<str>,
    pub(crate) id: u64,
}

impl QueueState {
    /// Checks and reserves a transaction's operations on this queue;
    /// returns the writes to commit. All or nothing.
    pub(crate) fn prepare(
        &mut self,
        txn: u64,
        enqueues: Vec<Incoming>,
        acks: &[StagedAck],
        now: u64,
    ) -> Result<Vec<Write>, QueueError> {
        if self.deleted {
            return Err(QueueError::Deleted);
        }
        if self.draining && !enqueues.is_empty() {
            return Err(QueueError::Draining);
        }
        let pending: u64 = self.prepared.values().map(|v| v.len() as u64).sum();
        if self.holds() + pending + enqueues.len() as u64 > self.opts.max_length {
            self.stats.refused += enqueues.len() as u64;
            return Err(QueueError::Full(self.opts.max_length));
        }
        // Every ack must name a delivery in flight to its consumer.
        let mut unknown = Vec::new();
        for a in acks {
            let ok = self.consumer_index(a.sink, &a.sub).is_some_and(|ci| {
                let cid = self.consumers[ci].cid;
                self.inflight
                    .get(&a.id)
                    .is_some_and(|f| f.consumer == cid && f.locked.is_none())
            });
            if !ok {
                unknown.push(a.id);
            }
        }
        if !unknown.is_empty() {
            return Err(QueueError::UnknownDelivery(unknown));
        }
        let mut writes = Vec::with_capacity(enqueues.len() + 2 * acks.len());
        for a in acks {
            if let Some(f) = self.inflight.get_mut(&a.id) {
                f.locked = Some(txn);
                if self.writer.is_some() {
                    writes.extend(records::delete_message(self.id, f.msg.priority, f.msg.seq));
                }
            }
        }
        let mut staged = Vec::with_capacity(enqueues.len());
        for m in enqueues {
            let msg = self.stamp(m, now);
            self.next_seq += 1;
            if self.writer.is_some() {
                writes.push(records::put_message(self.id, &msg));
            }
            staged.push(msg);
        }
        self.prepared.insert(txn, staged);
        Ok(writes)
    }

    /// The transaction is durable: its enqueues become visible and its
    /// acks take effect.
    pub(crate) fn apply(&mut self, txn: u64, now: u64) {
        for m in self.prepared.remove(&txn).unwrap_or_default() {
            self.stats.enqueued += 1;
            self.admit(m);
        }
        let acked: Vec<u64> = self
            .inflight
            .iter()
            .filter(|(_, f)| f.locked == Some(txn))
            .map(|(&id, _)| id)
            .collect();
        for id in acked {
            if let Some(f) = self.inflight.remove(&id) {
                if let Some(c) = self.consumers.iter_mut().find(|c| c.cid == f.consumer) {
                    c.inflight = c.inflight.saturating_sub(1);
                    c.blocked = false;
                }
                self.unhold(&f.msg);
                self.stats.acked += 1;
            }
        }
        self.dispatch(now);
        self.after();
    }

    /// The commit failed: prepared enqueues are dropped (their seqs stay
    /// unused) and locked deliveries are unlocked; those whose consumer
    /// left meanwhile go back to the queue.
    pub(crate) fn abort(&mut self, txn: u64, now: u64) {
        self.prepared.remove(&txn);
        let locked: Vec<u64> = self
            .inflight
            .iter()
            .filter(|(_, f)| f.locked == Some(txn))
            .map(|(&id, _)| id)
            .collect();
        for id in locked {
            let gone = match self.inflight.get_mut(&id) {
                Some(f) => {
                    f.locked = None;
                    !self.consumers.iter().any(|c| c.cid == f.consumer)
                }
                None => false,
            };
            if gone {
                if let Some(f) = self.inflight.remove(&id) {
                    self.unhold(&f.msg);
                    self.give_back(f.msg, Some(0), now);
                }
            }
        }
        self.dispatch(now);
        self.after();
    }

    /// Makes a durable message visible: held in memory, or past the
    /// window left on disk.
    pub(super) fn admit(&mut self, msg: StoredMessage) {
        let p = usize::from(msg.priority);
        // A seq at or below loaded_upto belongs to the in-memory prefix (a
        // committed message a refill passed over while it was prepared).
        if self.writer.is_some()
            && msg.seq > self.loaded_upto[p]
            && (self.spilled[p] > 0 || self.ready_len >= self.opts.memory_window)
        {
            self.spilled[p] += 1;
        } else {
            self.loaded_upto[p] = self.loaded_upto[p].max(msg.seq);
            self.hold(msg);
        }
    }
}

impl QueueState {
    /// Whether `seq` is a prepared, not yet visible message (a refill
    /// that reads it from disk must leave it to `apply`).
    pub(super) fn is_prepared(&self, seq: u64) -> bool {
        self.prepared
            .values()
            .any(|v| v.iter().any(|m| m.seq == seq))
    }
}
