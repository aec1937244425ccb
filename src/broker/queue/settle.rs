//! A queue's settlements: acks, nacks, rejects and touches of deliveries
//! in flight, each all-or-nothing, and where a message goes when it comes
//! back (ready again, delayed, or dead-lettered).

use super::*;

impl QueueState {
    /// Checks that every id is in flight to this consumer.
    pub(super) fn owned(&self, sink: u64, sub: &str, ids: &[u64]) -> Result<usize, QueueError> {
        let ci = self
            .consumer_index(sink, sub)
            .ok_or(QueueError::UnknownConsumer)?;
        let cid = self.consumers[ci].cid;
        let unknown: Vec<u64> = ids
            .iter()
            .copied()
            .filter(|id| {
                self.inflight
                    .get(id)
                    .is_none_or(|f| f.consumer != cid || f.locked.is_some())
            })
            .collect();
        if unknown.is_empty() {
            Ok(ci)
        } else {
            Err(QueueError::UnknownDelivery(unknown))
        }
    }

    pub(super) fn settle(&mut self, ci: usize, id: u64) -> Option<StoredMessage> {
        let f = self.inflight.remove(&id)?;
        let c = &mut self.consumers[ci];
        c.inflight = c.inflight.saturating_sub(1);
        c.blocked = false;
        Some(f.msg)
    }

    /// Acknowledges deliveries: the messages are deleted. All or nothing.
    pub(crate) fn ack(
        &mut self,
        sink: u64,
        sub: &str,
        ids: &[u64],
        now: u64,
    ) -> Result<Option<Durable>, QueueError> {
        let ci = self.owned(sink, sub, ids)?;
        let durable = match &self.writer {
            Some(w) => {
                let mut writes = Vec::with_capacity(ids.len() * 2);
                for id in ids {
                    if let Some(f) = self.inflight.get(id) {
                        writes.extend(records::delete_message(self.id, f.msg.priority, f.msg.seq));
                    }
                }
                Some(w.submit(writes).map_err(QueueError::Store)?)
            }
            None => None,
        };
        for &id in ids {
            if let Some(m) = self.settle(ci, id) {
                self.unhold(&m);
                self.stats.acked += 1;
            }
        }
        self.dispatch(now);
        self.after();
        Ok(durable)
    }

    /// Gives deliveries back: redelivered after `delay_ms`, or after the
    /// backoff schedule's delay when none is given.
    pub(crate) fn nack(
        &mut self,
        sink: u64,
        sub: &str,
        ids: &[u64],
        delay_ms: Option<u64>,
        now: u64,
    ) -> Result<(), QueueError> {
        let ci = self.owned(sink, sub, ids)?;
        for &id in ids {
            if let Some(m) = self.settle(ci, id) {
                self.stats.nacked += 1;
                self.unhold(&m);
                self.give_back(m, delay_ms, now);
            }
        }
        self.dispatch(now);
        self.after();
        Ok(())
    }

    /// Sends deliveries straight to the dead-letter queue.
    pub(crate) fn reject(
        &mut self,
        sink: u64,
        sub: &str,
        ids: &[u64],
        now: u64,
    ) -> Result<(), QueueError> {
        let ci = self.owned(sink, sub, ids)?;
        for &id in ids {
            if let Some(m) = self.settle(ci, id) {
                self.unhold(&m);
                self.dead_letter(m, DeadReason::Rejected);
            }
        }
        self.dispatch(now);
        self.after();
        Ok(())
    }

    /// Extends deliveries' ack deadline to `extend_ms` (default: the ack
    /// timeout) from now.
    pub(crate) fn touch(
        &mut self,
        sink: u64,
        sub: &str,
        ids: &[u64],
        extend_ms: Option<u64>,
        now: u64,
    ) -> Result<(), QueueError> {
        self.owned(sink, sub, ids)?;
        let deadline = now.saturating_add(extend_ms.unwrap_or(self.opts.ack_timeout_ms));
        for id in ids {
            if let Some(f) = self.inflight.get_mut(id) {
                f.deadline_ms = deadline;
            }
        }
        Ok(())
    }

    /// A message comes back from a consumer (its count already raised by
    /// the delivery): dead-lettered past `max_deliveries`, else held again
    /// after `delay_ms` (`None`: the backoff schedule).
    pub(super) fn give_back(&mut self, mut m: StoredMessage, delay_ms: Option<u64>, now: u64) {
        self.stats.returned += 1;
        if self.opts.max_deliveries > 0 && m.deliveries >= self.opts.max_deliveries {
            self.dead_letter(m, DeadReason::MaxDeliveries);
            return;
        }
        let delay = delay_ms.unwrap_or_else(|| backoff_delay(&self.opts.backoff_ms, m.deliveries));
        m.not_before_ms = if delay > 0 {
            now.saturating_add(delay)
        } else {
            0
        };
        if m.not_before_ms > 0 {
            if let Some(w) = &self.writer {
                // Best effort: a lost delay only means an early redelivery.
                let _ = w.submit_detached(vec![records::put_deliveries(self.id, &m)]);
            }
        }
        self.hold(m);
    }

    /// Moves a message to the dead-letter queue (in one store batch with
    /// its delete here), or deletes it when there is none.
    pub(super) fn dead_letter(&mut self, m: StoredMessage, reason: DeadReason) {
        let removal: Vec<Write> = match &self.writer {
            Some(_) => records::delete_message(self.id, m.priority, m.seq).into(),
            None => Vec::new(),
        };
        let expired_drop =
            reason == DeadReason::Expired && self.opts.expired == ExpiredPolicy::Drop;
        let Some(dlq) = self.dlq.clone().filter(|_| !expired_drop) else {
            self.stats.discarded += 1;
            if let Some(w) = &self.writer {
                let _ = w.submit_detached(removal);
            }
            return;
        };
        let mut headers = m.headers;
        headers.insert(DEAD_LETTER_REASON.into(), reason.as_str().into());
        headers.insert(DEAD_LETTER_FROM.into(), self.name.to_string());
        headers.insert(DEAD_LETTER_SEQ.into(), m.seq.to_string());
        headers.insert(DEAD_LETTER_DELIVERIES.into(), m.deliveries.to_string());
        let incoming = Incoming {
            priority: m.priority,
            headers,
            payload: m.payload,
            ttl_ms: None,
            enqueued_ms: Some(m.enqueued_ms),
            with: removal,
        };
        self.stats.dead_lettered += 1;
        let name = self.name.clone();
        let sent = dlq.tq.execute(Lane::Normal, move |d| {
            if let Err(e) = d.enqueue(incoming, now_ms()) {
                tracing::error!(queue = %name, "dead-letter queue refused a message, which stays on disk for the next start: {e:?}");
            }
        });
        if let Err(e) = sent {
            tracing::error!(queue = %self.name, "dead-letter queue overloaded; the message stays on disk for the next start: {e}");
        }
    }
}
