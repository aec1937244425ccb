//! Transactions: a session stages publishes, enqueues and acks, then
//! commits them together. The commit runs in three steps over the queues
//! involved: prepare (checks, reserves, collects the store writes), one
//! writer submission for all of them (one sled batch of queue messages:
//! all or nothing on disk), then apply on each queue. A crash before the
//! batch is durable leaves nothing; after it, everything. Topic publishes
//! (not persisted) go out after the apply. A failure before the batch is
//! durable aborts every prepared queue and changes nothing.

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
