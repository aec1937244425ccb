//! Transactions: a session stages publishes, enqueues and acks, then
//! commits them together. The commit runs in three steps over the queues
//! involved: prepare (checks, reserves, collects the store writes), one
//! writer submission for all of them (one sled batch of queue messages:
//! all or nothing on disk), then apply on each queue. A crash before the
//! batch is durable leaves nothing; after it, everything. Topic publishes
//! (not persisted) go out after the apply. A failure before the batch is
//! durable aborts every prepared queue and changes nothing.
//!
//! # Design notes
//!
//! ## Staging
//! The session stages (`session/txn.rs`). While a transaction (`OpenTxn`)
//! is open, `publish`, `enqueue`, `ack` and `nack` are checked as far as
//! that needs no queue (sizes, names, priority, id counts, that the
//! consumer exists), answered by a `receipt`, and kept: publishes, enqueues
//! and acks in a `TxnOps` (one `TxnAck` per delivery id), nacks beside it.
//! Every other frame takes effect at once (`reject` and `touch` included).
//! Staging submits no task and writes nothing: the broker sees the
//! transaction only at the commit. `session.max_transaction_ops` bounds
//! what one transaction holds, and the end of a session rolls back an open
//! one.
//!
//! ## The commit
//! `commit` groups the enqueues and acks by queue in a `BTreeMap`, so that
//! queues are visited in name order, refuses queues homed on another node,
//! and takes a transaction number. Then:
//!
//! 1. Prepare, a task on each queue in turn (`QueueState::prepare`,
//!    `broker/queue/txn.rs`). It refuses, changing nothing, if the queue was
//!    deleted, if its messages plus those prepared by other commits plus
//!    these would pass `max_length`, or if an acked id is not in flight to
//!    its consumer or is locked by another commit. Otherwise it locks each
//!    acked delivery (the ack timeout, a consumer's cancel and ordinary
//!    settles skip or refuse a locked delivery), stamps each enqueue with
//!    the queue's next seq and keeps it in `prepared`, invisible (a refill
//!    that meets it on disk leaves it alone), and returns the writes: the
//!    `qmsg` puts and, per acked message, its `qmsg` and `qdel` deletes.
//! 2. One store writer submission with every queue's writes, awaited.
//! 3. Apply, a high-lane task on each prepared queue: the prepared messages
//!    are admitted (held, or counted as on disk past `memory_window`), the
//!    locked deliveries removed as acked, and the queue dispatches.
//!
//! Then the staged publishes go through `publish_from` with the session's
//! source (rules included), one after the other, and the session applies
//! the staged nacks and sends the `receipt`. A failure in step 1 or 2 runs
//! `abort` (high lane) on every queue prepared so far: the prepared
//! messages are dropped, their seqs left unused, the locked deliveries
//! unlocked (one whose consumer left meanwhile goes back to the queue). The
//! session then gives the transaction's acked and nacked deliveries back,
//! as a `rollback` does.
//!
//! ## Why a crash leaves all or nothing
//! Nothing visible changes before the batch is durable: prepared messages
//! are not ready, and locked deliveries stay in flight. The writer applies
//! a group as one sled batch per tree, and every queue's messages live in
//! one tree, `qmsg`, so all of a transaction's enqueues and ack deletes
//! there are one `sled::Batch`, applied atomically. A crash before it is
//! durable leaves the store as it was (the locked deliveries come back
//! ready at the start, like any delivery in flight at a crash); after it,
//! the start finds every write. The `qdel` deletes are a second batch; a
//! crash between the two leaves `qdel` records without a message, which
//! the start deletes as orphans. If a queue refuses its apply task after
//! the batch is durable, the failure is logged: the writes are on disk and
//! the queue shows them at the next start. If the writer reports a failure
//! after sled applied the batch (a failed flush), the commit is aborted in
//! memory while its writes may be on disk. Topic publishes are not
//! persisted: a crash after the batch and before they go out loses them.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use super::queue::{Incoming, QueueHandle, StagedAck, now_ms};
use super::{Broker, BrokerError, Enqueue, Publish};

static NEXT_TXN: AtomicU64 = AtomicU64::new(1);

/// One ack staged in a transaction.
#[derive(Debug, Clone)]
pub struct TxnAck {
    /// The queue.
    pub queue: String,
    /// The consumer's sink.
    pub sink: u64,
    /// The consumer id.
    pub sub: String,
    /// The delivery id.
    pub id: u64,
}

/// What a transaction staged, in order.
#[derive(Debug, Clone, Default)]
pub struct TxnOps {
    /// Topic publishes (not retained).
    pub publishes: Vec<Publish>,
    /// Queue enqueues.
    pub enqueues: Vec<Enqueue>,
    /// Acks of queue deliveries.
    pub acks: Vec<TxnAck>,
}

impl TxnOps {
    /// Operations staged.
    pub fn len(&self) -> usize {
        self.publishes.len() + self.enqueues.len() + self.acks.len()
    }

    /// Whether nothing is staged.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[derive(Default)]
struct PerQueue {
    enqueues: Vec<Incoming>,
    acks: Vec<StagedAck>,
}

impl Broker {
    /// Commits a transaction (its publishes go through the rules as
    /// `source`'s): returns once its queue writes are durable
    /// (one batch) and applied, and its publishes are out.
    ///
    /// # Errors
    /// An invalid name or priority, an ack of a delivery no longer in
    /// flight to its consumer, a full or overloaded queue, or a store
    /// failure: then nothing took effect.
    pub async fn commit(&self, ops: TxnOps, source: &super::Source<'_>) -> Result<(), BrokerError> {
        for p in &ops.publishes {
            self.check_topic(&p.topic)?;
        }
        let mut by_queue: BTreeMap<String, PerQueue> = BTreeMap::new();
        for e in ops.enqueues {
            if e.priority > 9 {
                return Err(BrokerError::InvalidPriority(e.priority));
            }
            by_queue
                .entry(e.queue)
                .or_default()
                .enqueues
                .push(Incoming::new(e.priority, e.headers, e.payload, e.ttl_ms));
        }
        for a in ops.acks {
            by_queue.entry(a.queue).or_default().acks.push(StagedAck {
                sink: a.sink,
                sub: Arc::from(a.sub),
                id: a.id,
            });
        }
        if let Some((name, (_, home))) = by_queue
            .keys()
            .find_map(|name| self.home_elsewhere(name).map(|h| (name, h)))
        {
            return Err(BrokerError::Invalid(format!(
                "queue {name:?} lives on node {home:?}: a transaction takes only this node's queues"
            )));
        }
        let txn = NEXT_TXN.fetch_add(1, Ordering::Relaxed);
        let mut prepared: Vec<QueueHandle> = Vec::new();
        let mut writes = Vec::new();
        for (name, per) in by_queue {
            let create = !per.enqueues.is_empty();
            let queue = match self.queue(&name, create) {
                Ok(Some(q)) => q,
                Ok(None) => {
                    self.abort(txn, &prepared).await;
                    return Err(BrokerError::UnknownQueue(name));
                }
                Err(e) => {
                    self.abort(txn, &prepared).await;
                    return Err(e);
                }
            };
            let PerQueue { enqueues, acks } = per;
            let result = queue
                .tq
                .submit(move |q| q.prepare(txn, enqueues, &acks, now_ms()))
                .await;
            match result {
                Ok(Ok(w)) => {
                    writes.extend(w);
                    prepared.push(queue);
                }
                Ok(Err(e)) => {
                    self.abort(txn, &prepared).await;
                    return Err(e.into());
                }
                Err(e) => {
                    self.abort(txn, &prepared).await;
                    return Err(e.into());
                }
            }
        }
        if let (Some(w), false) = (&self.inner.writer, writes.is_empty()) {
            let durable = match w.submit(writes) {
                Ok(d) => d.await.map_err(BrokerError::Store),
                Err(e) => Err(BrokerError::StoreBusy(e)),
            };
            if let Err(e) = durable {
                self.abort(txn, &prepared).await;
                return Err(e);
            }
        }
        for q in &prepared {
            // High lane: the commit is durable; make it visible before
            // anything queued behind it.
            if let Err(e) = q.tq.submit_high(move |s| s.apply(txn, now_ms())).await {
                tracing::error!(
                    "a committed transaction could not be applied to a queue (it is on disk and returns at the next start): {e}"
                );
            }
        }
        for p in ops.publishes {
            if let Err(e) = self.publish_from(p, source).await {
                tracing::warn!("a committed transaction's publish failed: {e}");
            }
        }
        Ok(())
    }

    async fn abort(&self, txn: u64, prepared: &[QueueHandle]) {
        for q in prepared {
            if let Err(e) = q.tq.submit_high(move |s| s.abort(txn, now_ms())).await {
                tracing::error!("aborting a transaction on a queue failed: {e}");
            }
        }
    }
}
