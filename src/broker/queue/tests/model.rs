//! The model: a plain in-memory queue that the real one is checked against.

use super::*;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum St {
    Ready,
    Delayed,
    InFlight,
    Acked,
    /// In the dead-letter queue.
    Dead(DeadReason),
    /// Deleted unconsumed (expired with `expired = "drop"`, or no
    /// dead-letter queue).
    Discarded(DeadReason),
    /// Taken by `take_ready` and not put back (moved to another queue).
    Moved,
}

#[derive(Debug)]
pub(super) struct MMsg {
    pub(super) priority: u8,
    pub(super) enqueued: u64,
    pub(super) expires: u64,
    pub(super) deliveries: u32,
    pub(super) not_before: u64,
    pub(super) st: St,
}

impl MMsg {
    pub(super) fn expired(&self, now: u64) -> bool {
        self.expires > 0 && now >= self.expires
    }
}

#[derive(Debug)]
pub(super) struct MFlight {
    pub(super) seq: u64,
    pub(super) cid: u64,
    pub(super) deadline: u64,
}

#[derive(Debug)]
pub(super) struct MCons {
    /// Index in the harness's sinks.
    pub(super) sink: usize,
    pub(super) sink_id: u64,
    pub(super) sub: String,
    pub(super) cid: u64,
    pub(super) prefetch: u32,
    pub(super) attached: bool,
    pub(super) inflight: u32,
    pub(super) blocked: bool,
    /// Its `Subscription` was cancelled (the session let go of it before
    /// the queue's cancel task).
    pub(super) unsubscribed: bool,
}

impl MCons {
    pub(super) fn eligible(&self) -> bool {
        self.attached && !self.blocked && !self.unsubscribed && self.inflight < self.prefetch
    }
}

pub(super) struct Model {
    pub(super) opts: QueueOptions,
    pub(super) has_dlq: bool,
    pub(super) msgs: BTreeMap<u64, MMsg>,
    /// Delivery order: highest priority first, then lowest seq.
    pub(super) ready: BTreeSet<(Reverse<u8>, u64)>,
    /// (not before, seq).
    pub(super) delayed: BTreeSet<(u64, u64)>,
    pub(super) inflight: BTreeMap<u64, MFlight>,
    /// Every consumer ever attached, in attach order.
    pub(super) cons: Vec<MCons>,
    pub(super) next_seq: u64,
    pub(super) next_cid: u64,
    pub(super) next_delivery: u64,
    pub(super) last_scan: u64,
    pub(super) stats: QueueCounters,
    /// Delivery id -> seq, for every delivery ever made.
    pub(super) delivered: BTreeMap<u64, u64>,
    /// What the sequence exercised (summed over all cases and checked, so
    /// that the generator cannot quietly stop reaching a path).
    pub(super) cov: BTreeMap<&'static str, u64>,
}

impl Model {
    pub(super) fn new(opts: QueueOptions, has_dlq: bool) -> Model {
        Model {
            opts,
            has_dlq,
            msgs: BTreeMap::new(),
            ready: BTreeSet::new(),
            delayed: BTreeSet::new(),
            inflight: BTreeMap::new(),
            cons: Vec::new(),
            next_seq: 1,
            next_cid: 1,
            next_delivery: 1,
            last_scan: 0,
            stats: QueueCounters::default(),
            delivered: BTreeMap::new(),
            cov: BTreeMap::new(),
        }
    }

    pub(super) fn hit(&mut self, what: &'static str) {
        *self.cov.entry(what).or_default() += 1;
    }

    pub(super) fn held(&self) -> usize {
        self.ready.len() + self.delayed.len() + self.inflight.len()
    }

    /// Messages held in memory that carry an expiry.
    pub(super) fn expiring(&self) -> usize {
        self.msgs
            .values()
            .filter(|m| m.expires > 0 && matches!(m.st, St::Ready | St::Delayed | St::InFlight))
            .count()
    }

    /// Whether the broker's ticker has to visit the queue.
    pub(super) fn busy(&self) -> bool {
        !self.inflight.is_empty()
            || !self.delayed.is_empty()
            || self.expiring() > 0
            || self.cons.iter().any(|c| c.attached && c.blocked)
    }

    pub(super) fn attached(&self, sink_id: u64, sub: &str) -> Option<usize> {
        self.cons
            .iter()
            .position(|c| c.attached && c.sink_id == sink_id && c.sub == sub)
    }

    pub(super) fn cons_by_cid(&mut self, cid: u64) -> Option<&mut MCons> {
        self.cons.iter_mut().find(|c| c.attached && c.cid == cid)
    }

    pub(super) fn in_flight_of(&self, cid: u64) -> Vec<u64> {
        self.inflight
            .iter()
            .filter(|(_, f)| f.cid == cid)
            .map(|(&id, _)| id)
            .collect()
    }

    pub(super) fn make_ready(&mut self, seq: u64) {
        let m = self.msgs.get_mut(&seq).unwrap();
        m.st = St::Ready;
        m.not_before = 0;
        let p = m.priority;
        self.ready.insert((Reverse(p), seq));
        if self
            .ready
            .range((Reverse(p), seq + 1)..=(Reverse(p), u64::MAX))
            .next()
            .is_some()
        {
            self.hit("back ahead of younger messages");
        }
    }

    pub(super) fn enqueue(
        &mut self,
        priority: u8,
        ttl: Option<u64>,
        now: u64,
    ) -> Result<u64, QueueError> {
        if self.held() as u64 >= self.opts.max_length {
            self.hit("enqueue refused: full");
            self.stats.refused += 1;
            return Err(QueueError::Full(self.opts.max_length));
        }
        // The publisher's TTL, capped by the queue's.
        let ttl = match (ttl.filter(|&t| t > 0), self.opts.ttl_ms) {
            (Some(a), 0) => a,
            (Some(a), b) => a.min(b),
            (None, b) => b,
        };
        let seq = self.next_seq;
        self.next_seq += 1;
        self.stats.enqueued += 1;
        self.msgs.insert(
            seq,
            MMsg {
                priority: priority.min(9),
                enqueued: now,
                expires: if ttl > 0 { now + ttl } else { 0 },
                deliveries: 0,
                not_before: 0,
                st: St::Ready,
            },
        );
        self.make_ready(seq);
        Ok(seq)
    }

    pub(super) fn dead_letter(&mut self, seq: u64, reason: DeadReason) {
        let drop = reason == DeadReason::Expired && self.opts.expired == ExpiredPolicy::Drop;
        let m = self.msgs.get_mut(&seq).unwrap();
        if drop || !self.has_dlq {
            m.st = St::Discarded(reason);
            self.stats.discarded += 1;
            self.hit("discarded");
        } else {
            m.st = St::Dead(reason);
            self.stats.dead_lettered += 1;
            self.hit(match reason {
                DeadReason::MaxDeliveries => "dead-lettered: max-deliveries",
                DeadReason::Rejected => "dead-lettered: rejected",
                DeadReason::Expired => "dead-lettered: expired",
            });
        }
    }

    /// A delivery came back (nack, ack timeout, consumer gone).
    pub(super) fn give_back(&mut self, seq: u64, delay: Option<u64>, now: u64) {
        self.stats.returned += 1;
        let deliveries = self.msgs[&seq].deliveries;
        if self.opts.max_deliveries > 0 && deliveries >= self.opts.max_deliveries {
            self.dead_letter(seq, DeadReason::MaxDeliveries);
            return;
        }
        // The backoff schedule by delivery count, the last step repeating.
        let delay = delay.unwrap_or_else(|| {
            let steps = &self.opts.backoff_ms;
            let i = (deliveries as usize).saturating_sub(1);
            steps.get(i).or(steps.last()).copied().unwrap_or(0)
        });
        if delay > 0 {
            self.hit("returned with a delay");
            let nb = now + delay;
            let m = self.msgs.get_mut(&seq).unwrap();
            m.st = St::Delayed;
            m.not_before = nb;
            self.delayed.insert((nb, seq));
        } else {
            self.make_ready(seq);
        }
    }

    pub(super) fn return_all_of(&mut self, cid: u64, now: u64) {
        for id in self.in_flight_of(cid) {
            let f = self.inflight.remove(&id).unwrap();
            self.give_back(f.seq, Some(0), now);
        }
    }

    /// Takes the next ready message in delivery order, dead-lettering the
    /// expired ones ahead of it.
    pub(super) fn pop_ready(&mut self, now: u64) -> Option<u64> {
        while let Some((_, seq)) = self.ready.pop_first() {
            if self.msgs[&seq].expired(now) {
                self.hit("expired at dispatch");
                self.dead_letter(seq, DeadReason::Expired);
                continue;
            }
            return Some(seq);
        }
        None
    }

    /// Replays a dispatch against the deliveries the sinks saw.
    pub(super) fn dispatch(
        &mut self,
        log: &mut VecDeque<Attempt>,
        sinks: &[Arc<TestSink>],
        now: u64,
    ) -> Result<(), String> {
        if !self.cons.iter().any(|c| c.attached) {
            return Ok(());
        }
        let mut closed = false;
        loop {
            if !self.cons.iter().any(MCons::eligible) {
                break;
            }
            let top = self.ready.first().map(|k| k.0);
            if self.ready.last().map(|k| k.0) != top {
                self.hit("offer among several priorities");
            }
            let Some(seq) = self.pop_ready(now) else {
                break;
            };
            let Some(a) = log.pop_front() else {
                return Err(format!(
                    "a consumer has credit and seq {seq} is ready, but nothing was offered"
                ));
            };
            let ci = self
                .attached(a.sink, &a.sub)
                .ok_or_else(|| format!("{a:?} went to a consumer that is not attached"))?;
            let m = &self.msgs[&seq];
            ensure!(
                a.seq == seq,
                "{a:?}: the next ready message (priority first, then seq) is seq {seq} (p{})",
                m.priority
            );
            ensure!(
                self.cons[ci].eligible(),
                "{a:?} went to a consumer without credit or blocked: {:?}",
                self.cons[ci]
            );
            ensure!(
                a.deliveries == m.deliveries + 1,
                "{a:?}: its count should be {}",
                m.deliveries + 1
            );
            ensure!(
                !m.expired(now),
                "{a:?}: delivered at {now}, expired at {}",
                m.expires
            );
            ensure!(
                a.priority == m.priority
                    && a.enqueued_ms == m.enqueued
                    && a.expires_ms == m.expires
                    && a.not_before_ms == 0
                    && a.payload == payload(seq),
                "{a:?}: not the message enqueued as seq {seq}: {m:?}"
            );
            ensure!(
                a.id == self.next_delivery,
                "{a:?}: the delivery id should be {}",
                self.next_delivery
            );
            match a.outcome {
                DeliveryOutcome::Queued | DeliveryOutcome::Crowded => {
                    self.hit(if a.deliveries > 1 {
                        "redelivered"
                    } else {
                        "delivered"
                    });
                    ensure!(
                        !self.delivered.contains_key(&a.id),
                        "{a:?}: delivery id reused"
                    );
                    self.next_delivery += 1;
                    self.stats.delivered += 1;
                    if a.deliveries > 1 {
                        self.stats.redelivered += 1;
                    }
                    self.delivered.insert(a.id, seq);
                    let m = self.msgs.get_mut(&seq).unwrap();
                    m.deliveries += 1;
                    m.st = St::InFlight;
                    let c = &mut self.cons[ci];
                    c.inflight += 1;
                    ensure!(c.inflight <= c.prefetch, "over prefetch: {c:?}");
                    let cid = c.cid;
                    self.inflight.insert(
                        a.id,
                        MFlight {
                            seq,
                            cid,
                            deadline: now + self.opts.ack_timeout_ms,
                        },
                    );
                }
                DeliveryOutcome::Dropped | DeliveryOutcome::Closed => {
                    self.hit(if a.outcome == DeliveryOutcome::Closed {
                        "offer to a closed sink"
                    } else {
                        "offer to a full sink"
                    });
                    self.make_ready(seq);
                    self.cons[ci].blocked = true;
                    closed |= a.outcome == DeliveryOutcome::Closed;
                }
            }
        }
        if closed {
            let gone: Vec<u64> = self
                .cons
                .iter()
                .filter(|c| c.attached && (c.unsubscribed || sinks[c.sink].is_closed()))
                .map(|c| c.cid)
                .collect();
            for &cid in &gone {
                self.cons_by_cid(cid).unwrap().attached = false;
            }
            for cid in gone {
                if !self.in_flight_of(cid).is_empty() {
                    self.hit("closed consumer's deliveries returned");
                }
                self.return_all_of(cid, now);
            }
            self.dispatch(log, sinks, now)?;
        }
        Ok(())
    }

    /// `take_ready`: the first `max` ready messages in delivery order
    /// (expired or not).
    pub(super) fn take_ready(&mut self, max: usize) -> Vec<u64> {
        let mut out = Vec::new();
        while out.len() < max {
            let Some((_, seq)) = self.ready.pop_first() else {
                break;
            };
            self.msgs.get_mut(&seq).unwrap().st = St::Moved;
            out.push(seq);
        }
        out
    }

    /// Checks that every id is in flight to this consumer.
    pub(super) fn owned(&self, sink_id: u64, sub: &str, ids: &[u64]) -> Result<usize, QueueError> {
        let ci = self
            .attached(sink_id, sub)
            .ok_or(QueueError::UnknownConsumer)?;
        let cid = self.cons[ci].cid;
        let unknown: Vec<u64> = ids
            .iter()
            .copied()
            .filter(|id| self.inflight.get(id).is_none_or(|f| f.cid != cid))
            .collect();
        if unknown.is_empty() {
            Ok(ci)
        } else {
            Err(QueueError::UnknownDelivery(unknown))
        }
    }

    /// Settles `ids` of consumer `ci` (validated); returns the acked seqs.
    pub(super) fn settle(&mut self, ci: usize, ids: &[u64], how: How, now: u64) -> Vec<u64> {
        let mut acked = Vec::new();
        if let How::Touch(extend) = how {
            let deadline = now + extend.unwrap_or(self.opts.ack_timeout_ms);
            for id in ids {
                self.inflight.get_mut(id).unwrap().deadline = deadline;
            }
            return acked;
        }
        for id in ids {
            let Some(f) = self.inflight.remove(id) else {
                continue; // a repeated id
            };
            let c = &mut self.cons[ci];
            c.inflight -= 1;
            c.blocked = false;
            match how {
                How::Ack => {
                    self.msgs.get_mut(&f.seq).unwrap().st = St::Acked;
                    self.stats.acked += 1;
                    acked.push(f.seq);
                }
                How::Nack(delay) => {
                    self.stats.nacked += 1;
                    self.give_back(f.seq, delay, now)
                }
                How::Reject => self.dead_letter(f.seq, DeadReason::Rejected),
                How::Touch(_) => unreachable!(),
            }
        }
        acked
    }

    /// Deadlines, as `tick` runs them (before its dispatch).
    pub(super) fn tick(&mut self, now: u64) {
        for c in &mut self.cons {
            c.blocked = false;
        }
        let late: Vec<u64> = self
            .inflight
            .iter()
            .filter(|(_, f)| f.deadline <= now)
            .map(|(&id, _)| id)
            .collect();
        for id in late {
            self.hit("ack timeout");
            self.stats.timed_out += 1;
            let f = self.inflight.remove(&id).unwrap();
            if let Some(c) = self.cons_by_cid(f.cid) {
                c.inflight -= 1;
            }
            self.give_back(f.seq, Some(0), now);
        }
        while let Some(&(nb, seq)) = self.delayed.first() {
            if nb > now {
                break;
            }
            self.delayed.pop_first();
            self.hit("delay over");
            self.make_ready(seq);
        }
        if self.expiring() > 0 && now >= self.last_scan + SCAN_EVERY {
            self.last_scan = now;
            let expired: Vec<(Reverse<u8>, u64)> = self
                .ready
                .iter()
                .filter(|(_, seq)| self.msgs[seq].expired(now))
                .copied()
                .collect();
            for k in expired {
                self.hit("expired by the scan");
                self.ready.remove(&k);
                self.dead_letter(k.1, DeadReason::Expired);
            }
        }
    }
}
