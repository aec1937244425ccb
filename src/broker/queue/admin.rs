//! A queue's operator tasks: purge (every message not in flight, on disk
//! too), browse (a page of messages by id, without consuming), and taking
//! one message out to move it elsewhere.
//!
//! Messages past the memory window live only on disk; these tasks never
//! read the disk themselves. Browse and move return what the caller must
//! read through the store writer, and a second task settles the move once
//! the disk copy is known.

use super::*;

/// Where a message is when an operator looks at it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MessageState {
    /// In memory, waiting for a consumer.
    Ready,
    /// In memory, waiting for its redelivery delay.
    Delayed,
    /// Delivered, waiting for an ack.
    InFlight,
    /// Kept only on disk (past the memory window).
    OnDisk,
}

/// What a browse found in memory, and where the disk must be read.
#[derive(Debug, Default)]
pub(crate) struct BrowseSnapshot {
    /// In-memory messages with an id of at least `from`, lowest ids first,
    /// at most `limit`.
    pub(crate) memory: Vec<(StoredMessage, MessageState)>,
    /// Per priority with messages on disk only: the first seq to read.
    pub(crate) disk: Vec<(u8, u64)>,
    /// Seqs a disk read may return that are not on-disk-only messages (in
    /// memory out of order, or prepared by a committing transaction).
    pub(crate) skip: HashSet<u64>,
    /// The queue's id in the store's keys.
    pub(crate) id: u32,
}

/// The answer of [`QueueState::take_one`].
#[derive(Debug)]
pub(crate) enum Taken {
    /// Out of the queue, with the writes that delete it here (to commit
    /// with its copy elsewhere).
    Message(StoredMessage, Vec<Write>),
    /// Delivered and not yet settled: it cannot move.
    InFlight,
    /// Possibly on disk only, at one of these priorities.
    OnDisk(Vec<u8>),
    /// No such message.
    Missing,
}

impl QueueState {
    /// Deletes every message that is not in flight (ready, delayed and on
    /// disk) and returns how many went, with the [`Durable`] of the
    /// deletes. Deliveries in flight stay and settle as usual; a nack or
    /// timeout brings them back afterwards. Messages of committing
    /// transactions are not touched.
    pub(crate) fn purge(&mut self) -> Result<(u64, Option<Durable>), QueueError> {
        if self.deleted {
            return Err(QueueError::Deleted);
        }
        let on_disk: u64 = self.spilled.iter().sum();
        let purged = self.ready_len as u64 + self.delayed.len() as u64 + on_disk;
        let last = self.next_seq.saturating_sub(1);
        let durable = match &self.writer {
            Some(w) if last > 0 => Some(
                w.submit(self.purge_writes(last))
                    .map_err(QueueError::Store)?,
            ),
            _ => None,
        };
        self.ready = Default::default();
        self.ready_len = 0;
        self.delayed.clear();
        self.spilled = [0; PRIORITIES];
        self.loaded_upto = [last; PRIORITIES];
        self.loaded_extra.clear();
        self.expiring = self
            .inflight
            .values()
            .filter(|f| f.msg.expires_ms > 0)
            .count();
        // A refill read before the deletes would bring purged messages
        // back: its answer is ignored.
        self.refill_epoch += 1;
        self.refilling = false;
        self.stats.purged += purged;
        self.after();
        Ok((purged, durable))
    }

    /// Range deletes of both trees over seqs 1..=`last` of every priority,
    /// around the messages that stay (in flight, or prepared).
    fn purge_writes(&self, last: u64) -> Vec<Write> {
        let mut keep: [Vec<u64>; PRIORITIES] = Default::default();
        let staying = self
            .inflight
            .values()
            .map(|f| &f.msg)
            .chain(self.prepared.values().flatten());
        for m in staying {
            keep[usize::from(m.priority.min(9))].push(m.seq);
        }
        let mut writes = Vec::new();
        for (p, seqs) in keep.iter_mut().enumerate() {
            seqs.sort_unstable();
            let mut from = 1u64;
            for &k in seqs.iter().chain(std::iter::once(&last.saturating_add(1))) {
                if k > from {
                    for tree in [MESSAGES_TREE, records::DELIVERIES_TREE] {
                        writes.push(Write::DeleteRange {
                            tree,
                            from: records::message_key(self.id, p as u8, from),
                            to: records::message_key(self.id, p as u8, k - 1),
                        });
                    }
                }
                from = from.max(k.saturating_add(1));
            }
        }
        writes
    }

    /// The in-memory part of a browse from id `from`, at most `limit`
    /// messages, and the disk ranges the caller must read for the rest.
    pub(crate) fn browse(&self, from: u64, limit: usize) -> Result<BrowseSnapshot, QueueError> {
        if self.deleted {
            return Err(QueueError::Deleted);
        }
        let ready = self
            .ready
            .iter()
            .flatten()
            .map(|m| (m, MessageState::Ready));
        let delayed = self.delayed.values().map(|m| (m, MessageState::Delayed));
        let inflight = self
            .inflight
            .values()
            .map(|f| (&f.msg, MessageState::InFlight));
        let mut found: Vec<(&StoredMessage, MessageState)> = ready
            .chain(delayed)
            .chain(inflight)
            .filter(|(m, _)| m.seq >= from)
            .collect();
        if found.len() > limit {
            found.select_nth_unstable_by_key(limit, |(m, _)| m.seq);
            found.truncate(limit);
        }
        found.sort_unstable_by_key(|(m, _)| m.seq);
        let disk = (0..PRIORITIES)
            .filter(|&p| self.spilled[p] > 0)
            .map(|p| (p as u8, from.max(self.loaded_upto[p].saturating_add(1))))
            .collect();
        let skip = self
            .loaded_extra
            .iter()
            .copied()
            .chain(self.prepared.values().flatten().map(|m| m.seq))
            .filter(|&s| s >= from)
            .collect();
        Ok(BrowseSnapshot {
            memory: found.into_iter().map(|(m, s)| (m.clone(), s)).collect(),
            disk,
            skip,
            id: self.id,
        })
    }

    /// Takes message `seq` out to move it: from memory if it is there, or
    /// says at which priorities it may wait on disk (the caller reads it
    /// and calls [`QueueState::take_spilled`]).
    pub(crate) fn take_one(&mut self, seq: u64) -> Result<Taken, QueueError> {
        if self.deleted {
            return Err(QueueError::Deleted);
        }
        if self.inflight.values().any(|f| f.msg.seq == seq) || self.is_prepared(seq) {
            return Ok(Taken::InFlight);
        }
        for p in 0..PRIORITIES {
            let q = &mut self.ready[p];
            let at = q.partition_point(|m| m.seq < seq);
            if q.get(at).is_some_and(|m| m.seq == seq) {
                if let Some(m) = q.remove(at) {
                    self.ready_len -= 1;
                    return Ok(self.taken(m));
                }
            }
        }
        let delayed = self.delayed.keys().find(|k| k.1 == seq).copied();
        if let Some(m) = delayed.and_then(|k| self.delayed.remove(&k)) {
            return Ok(self.taken(m));
        }
        let candidates: Vec<u8> = (0..PRIORITIES)
            .filter(|&p| {
                self.spilled[p] > 0
                    && seq > self.loaded_upto[p]
                    && !self.loaded_extra.contains(&seq)
            })
            .map(|p| p as u8)
            .collect();
        Ok(if candidates.is_empty() || seq >= self.next_seq {
            Taken::Missing
        } else {
            Taken::OnDisk(candidates)
        })
    }

    /// Takes a message read from disk out of the queue, if it is still
    /// there only (else as [`QueueState::take_one`] finds it now). Its
    /// seq stays in `loaded_extra` so that a refill read meanwhile skips
    /// it; [`QueueState::forget_moved`] drops it once the move is durable.
    pub(crate) fn take_spilled(&mut self, m: StoredMessage) -> Result<Taken, QueueError> {
        let p = usize::from(m.priority.min(9));
        let only_on_disk = self.spilled[p] > 0
            && m.seq > self.loaded_upto[p]
            && !self.loaded_extra.contains(&m.seq);
        if !only_on_disk || self.deleted {
            return match self.take_one(m.seq)? {
                Taken::OnDisk(_) => Ok(Taken::Missing),
                other => Ok(other),
            };
        }
        self.spilled[p] -= 1;
        self.loaded_extra.insert(m.seq);
        self.stats.moved += 1;
        let removal = records::delete_message(self.id, m.priority, m.seq).into();
        Ok(Taken::Message(m, removal))
    }

    /// A moved message's deletes are durable: no refill can return it any
    /// more.
    pub(crate) fn forget_moved(&mut self, seq: u64) {
        self.loaded_extra.remove(&seq);
    }

    fn taken(&mut self, m: StoredMessage) -> Taken {
        self.unhold(&m);
        self.stats.moved += 1;
        let removal = match &self.writer {
            Some(_) => records::delete_message(self.id, m.priority, m.seq).into(),
            None => Vec::new(),
        };
        self.request_refill();
        self.after();
        Taken::Message(m, removal)
    }
}
