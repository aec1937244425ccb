//! The harness: the queue, its model, and the checks between them.

use super::*;

pub(super) struct Harness {
    pub(super) q: QueueState,
    pub(super) shared: Arc<QueueShared>,
    pub(super) dlq: Option<QueueHandle>,
    pub(super) log: Log,
    pub(super) sinks: Vec<Arc<TestSink>>,
    pub(super) m: Model,
    pub(super) now: u64,
    /// Seqs found in the dead-letter queue so far.
    pub(super) dlq_seen: BTreeSet<u64>,
    /// Times each seq was acked, from the ids of successful acks.
    pub(super) acks: BTreeMap<u64, u32>,
    /// Messages taken out by `take_ready`, not yet put back.
    pub(super) outside: Vec<StoredMessage>,
    /// Each model consumer's subscription.
    pub(super) subs: Vec<Subscription>,
}

impl Harness {
    pub(super) fn new(cfg: &Cfg) -> Harness {
        let shared = Arc::new(QueueShared::default());
        let dlq = cfg.dlq.then(dead_letter_queue);
        let q = QueueState::new(
            NAME.into(),
            1,
            cfg.options(),
            None,
            dlq.clone(),
            shared.clone(),
        );
        Harness {
            q,
            shared,
            dlq,
            log: Log::default(),
            sinks: Vec::new(),
            m: Model::new(cfg.options(), cfg.dlq),
            now: T0,
            dlq_seen: BTreeSet::new(),
            acks: BTreeMap::new(),
            outside: Vec::new(),
            subs: Vec::new(),
        }
    }

    /// Replays the dispatch that followed a task; every offer must be
    /// accounted for.
    pub(super) fn replay_dispatch(&mut self) -> Result<(), String> {
        let mut log = take_log(&self.log);
        self.m.dispatch(&mut log, &self.sinks, self.now)?;
        ensure!(log.is_empty(), "offers the model did not expect: {log:?}");
        Ok(())
    }

    pub(super) fn nothing_offered(&self) -> Result<(), String> {
        let log = take_log(&self.log);
        ensure!(log.is_empty(), "a refused task delivered: {log:?}");
        Ok(())
    }

    pub(super) fn enqueue(&mut self, priority: u8, ttl: Option<u64>) -> Result<(), String> {
        let got = self
            .q
            .enqueue(incoming(self.m.next_seq, priority, ttl), self.now)
            .map(|(seq, durable)| {
                assert!(durable.is_none(), "no writer, no durable");
                seq
            });
        let want = self.m.enqueue(priority, ttl, self.now);
        ensure!(
            got == want,
            "enqueue p{priority} ttl {ttl:?}: got {got:?}, model {want:?}"
        );
        match got {
            Ok(_) => self.replay_dispatch(),
            Err(_) => self.nothing_offered(),
        }
    }

    pub(super) fn consume(
        &mut self,
        sink: usize,
        sub: String,
        prefetch: u32,
    ) -> Result<(), String> {
        let sink_id = self.sinks[sink].id;
        let subscription = subscription(&self.sinks[sink], &sub);
        let got = self.q.consume(subscription.clone(), prefetch, self.now);
        let want = match self.m.attached(sink_id, &sub) {
            Some(_) => Err(QueueError::DuplicateConsumer),
            None => Ok(()),
        };
        ensure!(
            got == want,
            "consume {sink_id}/{sub}: got {got:?}, model {want:?}"
        );
        if got.is_err() {
            self.m.hit("consume refused: duplicate");
            return self.nothing_offered();
        }
        self.m.cons.push(MCons {
            sink,
            sink_id,
            sub,
            cid: self.m.next_cid,
            prefetch,
            attached: true,
            inflight: 0,
            blocked: false,
            unsubscribed: false,
        });
        self.subs.push(subscription);
        self.m.next_cid += 1;
        self.replay_dispatch()
    }

    pub(super) fn new_sink(&mut self) -> usize {
        self.sinks.push(TestSink::new(&self.log));
        self.sinks.len() - 1
    }

    pub(super) fn cancel(&mut self, sink_id: u64, sub: &str) -> Result<(), String> {
        let got = self.q.cancel(sink_id, sub, self.now);
        let ci = self.m.attached(sink_id, sub);
        let want = ci.map(|_| ()).ok_or(QueueError::UnknownConsumer);
        ensure!(
            got == want,
            "cancel {sink_id}/{sub}: got {got:?}, model {want:?}"
        );
        let Some(ci) = ci else {
            return self.nothing_offered();
        };
        self.m.cons[ci].attached = false;
        let cid = self.m.cons[ci].cid;
        self.m.return_all_of(cid, self.now);
        self.replay_dispatch()
    }

    pub(super) fn settle(
        &mut self,
        sink_id: u64,
        sub: &str,
        ids: &[u64],
        how: How,
    ) -> Result<(), String> {
        let now = self.now;
        let got = match how {
            How::Ack => self.q.ack(sink_id, sub, ids, now).map(|d| {
                assert!(d.is_none(), "no writer, no durable");
            }),
            How::Nack(delay) => self.q.nack(sink_id, sub, ids, delay, now),
            How::Reject => self.q.reject(sink_id, sub, ids, now),
            How::Touch(extend) => self.q.touch(sink_id, sub, ids, extend, now),
        };
        let want = self.m.owned(sink_id, sub, ids);
        self.m.hit(match &want {
            Ok(_) => match how {
                How::Ack => "ack",
                How::Nack(_) => "nack",
                How::Reject => "reject",
                How::Touch(_) => "touch",
            },
            Err(QueueError::UnknownConsumer) => "settle refused: unknown consumer",
            Err(_) => "settle refused: unknown delivery",
        });
        ensure!(
            got == want.clone().map(|_| ()),
            "{how:?} {ids:?} by {sink_id}/{sub}: got {got:?}, model {want:?}"
        );
        let Ok(ci) = want else {
            return self.nothing_offered();
        };
        if how == How::Ack {
            let mut distinct = ids.to_vec();
            distinct.sort_unstable();
            distinct.dedup();
            for id in distinct {
                *self.acks.entry(self.m.delivered[&id]).or_default() += 1;
            }
        }
        let acked = self.m.settle(ci, ids, how, now);
        for seq in acked {
            ensure!(
                self.acks[&seq] == 1,
                "seq {seq} acked {} times",
                self.acks[&seq]
            );
        }
        if matches!(how, How::Touch(_)) {
            // Touch dispatches nothing.
            return self.nothing_offered();
        }
        self.replay_dispatch()
    }

    pub(super) fn advance(&mut self, ms: u64) -> Result<(), String> {
        self.now += ms;
        // As the broker's ticker: only queues that ask for it.
        if self.shared.needs_tick.load(Ordering::Acquire) {
            self.q.tick(self.now);
            self.m.tick(self.now);
            self.replay_dispatch()
        } else {
            self.nothing_offered()
        }
    }

    pub(super) fn live_sinks(&self) -> Vec<usize> {
        (0..self.sinks.len())
            .filter(|&s| !self.sinks[s].is_closed())
            .collect()
    }

    /// Attached consumers whose sink is still connected.
    pub(super) fn active(&self) -> Vec<usize> {
        (0..self.m.cons.len())
            .filter(|&ci| self.m.cons[ci].attached && !self.sinks[self.m.cons[ci].sink].is_closed())
            .collect()
    }

    pub(super) fn step(&mut self, op: &Op) -> Result<(), String> {
        match *op {
            Op::Enqueue { priority, ttl } => self.enqueue(priority, ttl)?,
            Op::Consume {
                prefetch,
                pick,
                mode,
            } => {
                let pick = usize::from(pick);
                let live = self.live_sinks();
                let cancelled: Vec<usize> = (0..self.m.cons.len())
                    .filter(|&ci| {
                        let c = &self.m.cons[ci];
                        !c.attached
                            && !self.sinks[c.sink].is_closed()
                            && self.m.attached(c.sink_id, &c.sub).is_none()
                    })
                    .collect();
                let attached: Vec<usize> = (0..self.m.cons.len())
                    .filter(|&ci| self.m.cons[ci].attached)
                    .collect();
                let n = self.m.cons.len();
                match mode {
                    2 if !live.is_empty() => {
                        let sink = live[pick % live.len()];
                        self.consume(sink, format!("c{n}"), prefetch)?;
                    }
                    3 if !cancelled.is_empty() => {
                        let c = &self.m.cons[cancelled[pick % cancelled.len()]];
                        let (sink, sub) = (c.sink, c.sub.clone());
                        self.consume(sink, sub, prefetch)?;
                    }
                    4 if !attached.is_empty() => {
                        let c = &self.m.cons[attached[pick % attached.len()]];
                        let (sink, sub) = (c.sink, c.sub.clone());
                        self.consume(sink, sub, prefetch)?;
                    }
                    _ => {
                        let sink = self.new_sink();
                        self.consume(sink, format!("c{n}"), prefetch)?;
                    }
                }
            }
            Op::Cancel { pick } => {
                if !self.m.cons.is_empty() {
                    // Attached or not (then refused).
                    let c = &self.m.cons[usize::from(pick) % self.m.cons.len()];
                    let (sink_id, sub) = (c.sink_id, c.sub.clone());
                    self.cancel(sink_id, &sub)?;
                }
            }
            Op::Unsubscribe { pick, cancel } => {
                let attached: Vec<usize> = (0..self.m.cons.len())
                    .filter(|&ci| self.m.cons[ci].attached)
                    .collect();
                if !attached.is_empty() {
                    let ci = attached[usize::from(pick) % attached.len()];
                    self.subs[ci].cancel();
                    self.m.cons[ci].unsubscribed = true;
                    self.m.hit("unsubscribed");
                    if cancel {
                        let (sink_id, sub) = (self.m.cons[ci].sink_id, self.m.cons[ci].sub.clone());
                        self.cancel(sink_id, &sub)?;
                    }
                }
            }
            Op::Disconnect { pick } => {
                let live = self.live_sinks();
                if !live.is_empty() {
                    let s = live[usize::from(pick) % live.len()];
                    self.sinks[s].closed.store(true, Ordering::Relaxed);
                }
            }
            Op::Full { pick, on } => {
                if !self.sinks.is_empty() {
                    let s = usize::from(pick) % self.sinks.len();
                    self.sinks[s].full.store(on, Ordering::Relaxed);
                }
            }
            Op::Settle {
                pick,
                how,
                mask,
                repeat,
            } => {
                let with_some: Vec<usize> = self
                    .active()
                    .into_iter()
                    .filter(|&ci| self.m.cons[ci].inflight > 0)
                    .collect();
                if !with_some.is_empty() {
                    let c = &self.m.cons[with_some[usize::from(pick) % with_some.len()]];
                    let mine = self.m.in_flight_of(c.cid);
                    let mut ids: Vec<u64> = mine
                        .iter()
                        .enumerate()
                        .filter(|(i, _)| mask & (1 << (i % 8)) != 0)
                        .map(|(_, &id)| id)
                        .collect();
                    if ids.is_empty() {
                        ids.push(mine[usize::from(mask) % mine.len()]);
                    }
                    if mask & 0x80 != 0 {
                        ids.reverse();
                    }
                    if repeat {
                        ids.push(ids[0]);
                    }
                    let (sink_id, sub) = (c.sink_id, c.sub.clone());
                    self.settle(sink_id, &sub, &ids, how)?;
                }
            }
            Op::Wrong {
                pick,
                how,
                kind,
                with_own,
            } => self.wrong(usize::from(pick), how, kind, with_own)?,
            Op::Advance { ms } => self.advance(ms)?,
            Op::Take { max } => self.take(usize::from(max))?,
            Op::PutBack { mask } => self.put_back(mask)?,
        }
        self.check()
    }

    /// Takes ready messages out (to move them elsewhere).
    pub(super) fn take(&mut self, max: usize) -> Result<(), String> {
        let taken = self.q.take_ready(max);
        let want = self.m.take_ready(max);
        let got: Vec<u64> = taken.iter().map(|(x, _)| x.seq).collect();
        ensure!(
            got == want,
            "take_ready({max}): queue {got:?}, model {want:?}"
        );
        for (x, removal) in taken {
            let mm = &self.m.msgs[&x.seq];
            ensure!(
                removal.is_empty()
                    && x.deliveries == mm.deliveries
                    && x.priority == mm.priority
                    && x.enqueued_ms == mm.enqueued
                    && x.expires_ms == mm.expires
                    && x.not_before_ms == 0
                    && x.payload == payload(x.seq),
                "taken {x:?}, model {mm:?}"
            );
            self.outside.push(x);
        }
        self.nothing_offered()
    }

    /// Puts back some of the messages taken out; the others are gone.
    pub(super) fn put_back(&mut self, mask: u8) -> Result<(), String> {
        let mut back = Vec::new();
        for (i, x) in std::mem::take(&mut self.outside).into_iter().enumerate() {
            if mask & (1 << (i % 8)) != 0 {
                self.m.hit("put back");
                back.push(x);
            } else {
                self.m.hit("moved away");
            }
        }
        for x in &back {
            self.m.make_ready(x.seq);
        }
        self.q.put_back(back, self.now);
        // Messages that are ready again go to consumers with credit.
        self.replay_dispatch()
    }

    /// Settles ids that are not the consumer's: refused, nothing changes.
    pub(super) fn wrong(
        &mut self,
        pick: usize,
        how: How,
        kind: u8,
        with_own: bool,
    ) -> Result<(), String> {
        let active = self.active();
        let cancelled: Vec<usize> = (0..self.m.cons.len())
            .filter(|&ci| {
                let c = &self.m.cons[ci];
                !c.attached && self.m.attached(c.sink_id, &c.sub).is_none()
            })
            .collect();
        let (ci, expect_unknown_consumer) = if kind == 3 && !cancelled.is_empty() {
            (cancelled[pick % cancelled.len()], true)
        } else if !active.is_empty() {
            (active[pick % active.len()], false)
        } else {
            return Ok(());
        };
        let (sink_id, sub, cid) = {
            let c = &self.m.cons[ci];
            (c.sink_id, c.sub.clone(), c.cid)
        };
        let others: Vec<u64> = self
            .m
            .inflight
            .iter()
            .filter(|(_, f)| f.cid != cid)
            .map(|(&id, _)| id)
            .collect();
        let settled: Vec<u64> = self
            .m
            .delivered
            .keys()
            .copied()
            .filter(|id| !self.m.inflight.contains_key(id))
            .collect();
        let foreign = match kind {
            0 if !others.is_empty() => others[pick % others.len()],
            1 if !settled.is_empty() => settled[pick % settled.len()],
            3 if expect_unknown_consumer && !self.m.delivered.is_empty() => {
                // Whatever it had, it has no more.
                let ids: Vec<u64> = self.m.delivered.keys().copied().collect();
                ids[pick % ids.len()]
            }
            _ => self.m.next_delivery + (pick as u64 % 3),
        };
        let mut ids = vec![foreign];
        if with_own {
            if let Some(&own) = self.m.in_flight_of(cid).first() {
                if pick % 2 == 0 {
                    ids.insert(0, own);
                } else {
                    ids.push(own);
                }
            }
        }
        let before = self.q.info();
        let want = if expect_unknown_consumer {
            Err(QueueError::UnknownConsumer)
        } else {
            Err(QueueError::UnknownDelivery(vec![foreign]))
        };
        ensure!(
            self.m.owned(sink_id, &sub, &ids).map(|_| ()) == want,
            "test bug: {ids:?} are not foreign to {sink_id}/{sub}"
        );
        self.settle(sink_id, &sub, &ids, how)?;
        ensure!(
            self.q.info() == before,
            "a refused {how:?} changed the queue"
        );
        Ok(())
    }

    /// Compares the queue with the model, and the dead-letter queue with
    /// what the model dead-lettered.
    pub(super) fn check(&mut self) -> Result<(), String> {
        let (q, m) = (&self.q, &self.m);
        // Ready: per priority, oldest first.
        for p in 0..PRIORITIES {
            let got = ready_seqs(q, p);
            let want: Vec<u64> = m
                .ready
                .iter()
                .filter(|(r, _)| usize::from(r.0) == p)
                .map(|&(_, s)| s)
                .collect();
            ensure!(got == want, "ready p{p}: queue {got:?}, model {want:?}");
            for x in &q.ready[p] {
                let mm = &m.msgs[&x.seq];
                ensure!(
                    usize::from(x.priority) == p
                        && x.enqueued_ms == mm.enqueued
                        && x.deliveries == mm.deliveries
                        && x.expires_ms == mm.expires
                        && x.not_before_ms == 0,
                    "ready {x:?}, model {mm:?}"
                );
            }
        }
        ensure!(
            q.ready_len == m.ready.len(),
            "ready_len {} vs {}",
            q.ready_len,
            m.ready.len()
        );
        // Delayed.
        let got: Vec<(u64, u64)> = q.delayed.keys().copied().collect();
        let want: Vec<(u64, u64)> = m.delayed.iter().copied().collect();
        ensure!(got == want, "delayed: queue {got:?}, model {want:?}");
        for (&(nb, seq), x) in &q.delayed {
            let mm = &m.msgs[&seq];
            ensure!(
                x.seq == seq && x.not_before_ms == nb && x.deliveries == mm.deliveries,
                "delayed {x:?}, model {mm:?}"
            );
        }
        // In flight.
        let got: BTreeMap<u64, (u64, u64, u64, u32)> = q
            .inflight
            .iter()
            .map(|(&id, f)| (id, (f.msg.seq, f.consumer, f.deadline_ms, f.msg.deliveries)))
            .collect();
        let want: BTreeMap<u64, (u64, u64, u64, u32)> = m
            .inflight
            .iter()
            .map(|(&id, f)| (id, (f.seq, f.cid, f.deadline, m.msgs[&f.seq].deliveries)))
            .collect();
        ensure!(
            got == want,
            "in flight (id: seq, consumer, deadline, count): queue {got:?}, model {want:?}"
        );
        let mut seqs: Vec<u64> = q.inflight.values().map(|f| f.msg.seq).collect();
        seqs.sort_unstable();
        let n = seqs.len();
        seqs.dedup();
        ensure!(seqs.len() == n, "a message is in flight twice: {got:?}");
        // Consumers.
        let got: Vec<(u64, u64, String, u32, u32, bool)> = q
            .consumers
            .iter()
            .map(|c| {
                let id = c.sub.id.to_string();
                (
                    c.cid,
                    c.sub.sink.id(),
                    id,
                    c.prefetch,
                    c.inflight,
                    c.blocked,
                )
            })
            .collect();
        let want: Vec<(u64, u64, String, u32, u32, bool)> = m
            .cons
            .iter()
            .filter(|c| c.attached)
            .map(|c| {
                (
                    c.cid,
                    c.sink_id,
                    c.sub.clone(),
                    c.prefetch,
                    c.inflight,
                    c.blocked,
                )
            })
            .collect();
        ensure!(
            got == want,
            "consumers (cid, sink, sub, prefetch, in flight, blocked): queue {got:?}, model {want:?}"
        );
        for c in &q.consumers {
            let n = q.inflight.values().filter(|f| f.consumer == c.cid).count();
            ensure!(
                n as u32 == c.inflight && c.inflight <= c.prefetch,
                "consumer {} has {n} in flight, counts {}, prefetch {}",
                c.cid,
                c.inflight,
                c.prefetch
            );
        }
        // Numbers.
        let info = q.info();
        ensure!(
            info.depth == (m.ready.len() + m.delayed.len()) as u64
                && info.ready == m.ready.len() as u64
                && info.delayed == m.delayed.len() as u64
                && info.on_disk == 0
                && info.in_flight == m.inflight.len() as u64
                && info.consumers == m.cons.iter().filter(|c| c.attached).count() as u64,
            "info {info:?}; model ready {} delayed {} in flight {}",
            m.ready.len(),
            m.delayed.len(),
            m.inflight.len()
        );
        // `moved` counts what take_ready took and put_back did not return.
        let mut want = m.stats;
        want.moved = m.msgs.values().filter(|mm| mm.st == St::Moved).count() as u64;
        ensure!(
            info.stats == want,
            "stats {:?}, model {:?}",
            info.stats,
            want
        );
        let (mut acked, mut dead, mut discarded, mut held, mut moved) = (0, 0, 0, 0, 0);
        for mm in m.msgs.values() {
            match mm.st {
                St::Acked => acked += 1,
                St::Dead(_) => dead += 1,
                St::Discarded(_) => discarded += 1,
                St::Moved => moved += 1,
                St::Ready | St::Delayed | St::InFlight => held += 1,
            }
        }
        let s = info.stats;
        ensure!(s.moved == moved, "moved {} vs model {moved}", s.moved);
        ensure!(
            s.acked + s.dead_lettered + s.discarded + moved + info.depth + info.in_flight
                == s.enqueued,
            "messages lost or invented: {info:?}, moved away {moved}"
        );
        ensure!(
            acked == s.acked
                && dead == s.dead_lettered
                && discarded == s.discarded
                && held == info.depth + info.in_flight,
            "model states acked {acked} dead {dead} discarded {discarded} held {held}; {info:?}"
        );
        ensure!(
            q.expiring == m.expiring(),
            "expiring {} vs {}",
            q.expiring,
            m.expiring()
        );
        // No stall: a consumer that may take a message never waits while
        // one is ready.
        let idle: Vec<u64> = q
            .consumers
            .iter()
            .filter(|c| !c.blocked && c.inflight < c.prefetch && !c.sub.is_cancelled())
            .map(|c| c.cid)
            .collect();
        ensure!(
            q.ready_len == 0 || idle.is_empty(),
            "consumers {idle:?} have credit but ready messages wait: {:?}",
            (0..PRIORITIES)
                .rev()
                .map(|p| ready_seqs(q, p))
                .collect::<Vec<_>>()
        );
        let needs_tick = self.shared.needs_tick.load(Ordering::Acquire);
        ensure!(
            needs_tick == m.busy(),
            "needs_tick {needs_tick}, model busy {}",
            m.busy()
        );
        // The dead-letter queue: exactly the model's dead-lettered set.
        if let Some(dlq) = &self.dlq {
            let arrived = on_dlq(dlq, |d| d.take_ready(usize::MAX));
            for (x, _) in arrived {
                let h = &x.headers;
                ensure!(
                    h.get(DEAD_LETTER_FROM).map(String::as_str) == Some(NAME),
                    "dead-lettered without its origin: {x:?}"
                );
                let seq: u64 = h
                    .get(DEAD_LETTER_SEQ)
                    .and_then(|s| s.parse().ok())
                    .ok_or_else(|| format!("dead-lettered without a seq: {x:?}"))?;
                let mm = m
                    .msgs
                    .get(&seq)
                    .ok_or_else(|| format!("invented dead letter: {x:?}"))?;
                let St::Dead(reason) = mm.st else {
                    return Err(format!("seq {seq} dead-lettered, model: {mm:?}; {x:?}"));
                };
                ensure!(self.dlq_seen.insert(seq), "seq {seq} dead-lettered twice");
                ensure!(
                    h.get(DEAD_LETTER_REASON).map(String::as_str) == Some(reason.as_str()),
                    "seq {seq} dead-lettered as {:?}, model: {reason:?}",
                    h.get(DEAD_LETTER_REASON)
                );
                ensure!(
                    h.get(DEAD_LETTER_DELIVERIES) == Some(&mm.deliveries.to_string())
                        && h.get("n") == Some(&seq.to_string())
                        && x.payload == payload(seq)
                        && x.priority == mm.priority
                        && x.enqueued_ms == mm.enqueued
                        && x.expires_ms == 0,
                    "seq {seq} dead-lettered altered: {x:?}, model {mm:?}"
                );
            }
            ensure!(
                self.dlq_seen.len() as u64 == dead,
                "the dead-letter queue got {} messages, the model dead-lettered {dead}",
                self.dlq_seen.len()
            );
            let dinfo = on_dlq(dlq, |d| d.info());
            ensure!(
                dinfo.stats.enqueued == dead && dinfo.depth == 0,
                "dead-letter queue {dinfo:?}, model dead-lettered {dead}"
            );
        }
        Ok(())
    }

    /// Everything left is consumed: every seq ends acked, dead-lettered or
    /// discarded.
    pub(super) fn drain(&mut self) -> Result<(), String> {
        // What a redrive still holds has moved away.
        self.put_back(0)?;
        for s in &self.sinks {
            s.full.store(false, Ordering::Relaxed);
        }
        for ci in 0..self.m.cons.len() {
            if self.m.cons[ci].attached {
                let (sink_id, sub) = (self.m.cons[ci].sink_id, self.m.cons[ci].sub.clone());
                self.cancel(sink_id, &sub)?;
                self.check()?;
            }
        }
        let sink = self.new_sink();
        let sink_id = self.sinks[sink].id;
        self.consume(sink, "drain".into(), 10_000)?;
        self.check()?;
        for _ in 0..20 {
            if self.m.held() == 0 {
                break;
            }
            let ci = self.m.attached(sink_id, "drain").unwrap();
            let ids = self.m.in_flight_of(self.m.cons[ci].cid);
            if !ids.is_empty() {
                self.settle(sink_id, "drain", &ids, How::Ack)?;
                self.check()?;
            }
            // Past every delay, ack timeout and TTL.
            self.advance(60_000)?;
            self.check()?;
        }
        let info = self.q.info();
        ensure!(
            self.m.held() == 0 && info.depth == 0 && info.in_flight == 0,
            "the queue does not drain: {info:?}, model holds {}",
            self.m.held()
        );
        let s = info.stats;
        let moved = self.m.msgs.values().filter(|mm| mm.st == St::Moved).count() as u64;
        ensure!(
            s.acked + s.dead_lettered + s.discarded + moved == s.enqueued,
            "totals: {s:?}, moved away {moved}"
        );
        ensure!(
            s.enqueued == self.m.msgs.len() as u64,
            "enqueued {} vs {}",
            s.enqueued,
            self.m.msgs.len()
        );
        for (&seq, mm) in &self.m.msgs {
            match mm.st {
                St::Acked => ensure!(self.acks.get(&seq) == Some(&1), "seq {seq} acks"),
                St::Dead(_) => ensure!(self.dlq_seen.contains(&seq), "seq {seq} not in the DLQ"),
                St::Discarded(_) | St::Moved => {
                    ensure!(
                        !self.dlq_seen.contains(&seq),
                        "seq {seq} {:?} but in the DLQ",
                        mm.st
                    );
                }
                st => return Err(format!("seq {seq} still {st:?}")),
            }
            if !matches!(mm.st, St::Acked) {
                ensure!(
                    !self.acks.contains_key(&seq),
                    "seq {seq} acked and {:?}",
                    mm.st
                );
            }
        }
        Ok(())
    }
}
