//! A queue's messages beyond its memory window: refills read back from the
//! store through the writer thread, and the ready messages a redrive or
//! a move takes away and may put back.

use super::*;

impl QueueState {
    /// Asks the store writer for spilled messages of the highest priority
    /// that runs low in memory (one read at a time).
    pub(super) fn request_refill(&mut self) {
        if self.refilling || self.deleted {
            return;
        }
        let (Some(writer), Some(me)) = (&self.writer, &self.me) else {
            return;
        };
        let low = (self.opts.memory_window / 4).max(1);
        let Some(p) = (0..PRIORITIES)
            .rev()
            .find(|&p| self.spilled[p] > 0 && self.ready[p].len() < low)
        else {
            return;
        };
        let limit = self
            .opts
            .memory_window
            .saturating_sub(self.ready_len)
            .max(REFILL_MIN);
        let (me, shared, epoch) = (me.clone(), self.shared.clone(), self.refill_epoch);
        let range = records::range_after(self.id, p as u8, self.loaded_upto[p]);
        let reply = Box::new(move |result: ReadResult| {
            // A queue dropped meanwhile (shutdown, deletion) needs nothing.
            let Some(tq) = me.upgrade() else {
                return;
            };
            let sent = tq.execute(Lane::High, move |q: &mut QueueState| {
                q.refilled(p, limit, epoch, result, now_ms());
            });
            if sent.is_err() {
                shared.refill_lost.store(true, Ordering::Release);
                shared.needs_tick.store(true, Ordering::Release);
            }
        });
        match writer.read(MESSAGES_TREE, range, limit, reply) {
            Ok(()) => self.refilling = true,
            Err(e) => {
                tracing::warn!(queue = %self.name, "refill from disk postponed: {e}");
                self.shared.refill_lost.store(true, Ordering::Release);
            }
        }
    }

    /// The store writer's answer to a refill read (asked for in
    /// `epoch`: an answer from before a purge is dropped).
    pub(crate) fn refilled(
        &mut self,
        p: usize,
        limit: usize,
        epoch: u64,
        result: ReadResult,
        now: u64,
    ) {
        if epoch != self.refill_epoch {
            return;
        }
        self.refilling = false;
        match result {
            Err(e) => {
                tracing::error!(queue = %self.name, "reading spilled messages failed: {e}");
                self.shared.refill_lost.store(true, Ordering::Release);
            }
            Ok(pairs) => {
                let complete = pairs.len() < limit;
                for (k, v) in pairs {
                    let Some((_, m)) = decode_message(&k, &v) else {
                        tracing::warn!(queue = %self.name, key = ?k, "skipping an undecodable spilled message");
                        continue;
                    };
                    self.loaded_upto[p] = self.loaded_upto[p].max(m.seq);
                    if self.loaded_extra.remove(&m.seq) || self.is_prepared(m.seq) {
                        continue;
                    }
                    self.spilled[p] = self.spilled[p].saturating_sub(1);
                    self.hold(m);
                }
                if complete {
                    // Everything on disk above loaded_upto is in memory now.
                    self.spilled[p] = 0;
                }
            }
        }
        self.dispatch(now);
        self.after();
    }

    /// Takes up to `max` ready messages (for moving them elsewhere), with
    /// the writes that delete them here.
    pub(crate) fn take_ready(&mut self, max: usize) -> Vec<(StoredMessage, Vec<Write>)> {
        let mut out = Vec::new();
        for p in (0..PRIORITIES).rev() {
            while out.len() < max {
                let Some(m) = self.ready[p].pop_front() else {
                    break;
                };
                self.ready_len -= 1;
                self.unhold(&m);
                self.stats.moved += 1;
                let removal = match &self.writer {
                    Some(_) => records::delete_message(self.id, m.priority, m.seq).into(),
                    None => Vec::new(),
                };
                out.push((m, removal));
            }
        }
        self.request_refill();
        self.after();
        out
    }

    /// Puts back messages [`QueueState::take_ready`] took but could not
    /// place.
    pub(crate) fn put_back(&mut self, messages: Vec<StoredMessage>, now: u64) {
        for m in messages {
            self.stats.moved = self.stats.moved.saturating_sub(1);
            self.hold(m);
        }
        self.dispatch(now);
        self.after();
    }
}
