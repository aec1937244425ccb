//! A session's transaction: between `begin` and `commit`, publishes,
//! enqueues, acks and nacks are staged here instead of taking effect
//! (each answered with a `receipt` when it has a rid). `commit` hands the
//! staged publishes, enqueues and acks to [`Broker::commit`], which makes
//! them take effect together once durable, then applies the staged nacks.
//! `rollback`, a failed commit, or the end of the session discards them:
//! staged acks and nacks give their deliveries back to their queues.
//! `reject` and `touch` are not staged.

use bytes::Bytes;

use super::{Next, Session};
use crate::broker::{Enqueue, MAX_IDS, Publish, Settlement, Sink as _, TxnAck, TxnOps};
use crate::protocol::codec::Format;
use crate::protocol::frame::{ClientFrame, ErrorCode};

/// A nack staged in a transaction.
#[derive(Debug, Clone)]
pub(super) struct StagedNack {
    queue: String,
    sub: String,
    ids: Vec<u64>,
    delay_ms: Option<u64>,
}

/// What a session's open transaction holds.
#[derive(Debug, Default)]
pub(super) struct OpenTxn {
    ops: TxnOps,
    nacks: Vec<StagedNack>,
}

impl OpenTxn {
    fn len(&self) -> usize {
        self.ops.len() + self.nacks.iter().map(|n| n.ids.len()).sum::<usize>()
    }
}

/// What [`Session::stage`] did with a frame.
pub(super) enum Staged {
    /// Handled (staged, refused, or a transaction frame).
    Done(Next),
    /// Not a transactional frame: handle it as usual.
    Pass(ClientFrame),
}

impl Session {
    /// Handles transaction frames, and stages transactional frames while a
    /// transaction is open.
    pub(super) async fn stage(&mut self, format: Format, frame: ClientFrame) -> Staged {
        match frame {
            ClientFrame::Begin(t) => {
                if self.txn.is_some() {
                    self.error(
                        format,
                        ErrorCode::TransactionState,
                        "a transaction is already open",
                        t.rid,
                    );
                } else {
                    self.txn = Some(Box::default());
                    self.receipt(format, t.rid);
                }
                Staged::Done(Next::Continue)
            }
            ClientFrame::Commit(t) => {
                let Some(txn) = self.txn.take() else {
                    self.error(
                        format,
                        ErrorCode::TransactionState,
                        "no open transaction",
                        t.rid,
                    );
                    return Staged::Done(Next::Continue);
                };
                let OpenTxn { ops, nacks } = *txn;
                let acks = ops.acks.clone();
                match self.broker.commit(ops, &self.source()).await {
                    Ok(()) => {
                        self.apply_nacks(nacks).await;
                        self.receipt(format, t.rid);
                    }
                    Err(e) => {
                        // Nothing took effect: the commit's acks and the
                        // staged nacks give their deliveries back.
                        self.give_back(acks, nacks).await;
                        self.broker_error(format, e, t.rid);
                    }
                }
                Staged::Done(Next::Continue)
            }
            ClientFrame::Rollback(t) => {
                match self.txn.take() {
                    Some(txn) => {
                        self.roll_back(*txn).await;
                        self.receipt(format, t.rid);
                    }
                    None => {
                        self.error(
                            format,
                            ErrorCode::TransactionState,
                            "no open transaction",
                            t.rid,
                        );
                    }
                }
                Staged::Done(Next::Continue)
            }
            frame if self.txn.is_none() => Staged::Pass(frame),
            ClientFrame::Publish(p) => {
                let rid = p.rid;
                if let Some(refusal) = self.refuse_payload(p.payload.len()) {
                    self.error(format, ErrorCode::PayloadTooLarge, refusal, rid);
                } else if p.retain {
                    self.error(
                        format,
                        ErrorCode::InvalidField,
                        "retain: retained publishes cannot be part of a transaction",
                        rid,
                    );
                } else if let Err(e) = self.broker.topic_limits().check_topic(&p.topic) {
                    self.error(format, ErrorCode::InvalidTopic, format!("topic: {e}"), rid);
                } else {
                    let publish = Publish {
                        topic: p.topic,
                        payload: Bytes::from(p.payload),
                        headers: p.headers,
                        retain: false,
                        priority: p.priority,
                        qos: 0,
                        origin: 0,
                    };
                    self.push_op(format, rid, 1, |t| t.ops.publishes.push(publish));
                }
                Staged::Done(Next::Continue)
            }
            ClientFrame::Enqueue(e) => {
                let rid = e.rid;
                if let Some(refusal) = self.refuse_payload(e.payload.len()) {
                    self.error(format, ErrorCode::PayloadTooLarge, refusal, rid);
                } else if let Err(err) = self.broker.topic_limits().check_topic(&e.queue) {
                    self.error(
                        format,
                        ErrorCode::InvalidTopic,
                        format!("queue: {err}"),
                        rid,
                    );
                } else if e.priority > 9 {
                    self.error(format, ErrorCode::InvalidField, "priority: 0 to 9", rid);
                } else {
                    let enqueue = Enqueue {
                        queue: e.queue,
                        payload: Bytes::from(e.payload),
                        headers: e.headers,
                        priority: e.priority,
                        ttl_ms: e.ttl_ms,
                    };
                    self.push_op(format, rid, 1, |t| t.ops.enqueues.push(enqueue));
                }
                Staged::Done(Next::Continue)
            }
            ClientFrame::Ack(a) => {
                if let Some(queue) = self.consumer_queue(format, &a.sub, a.ids.len(), a.rid) {
                    let sink = self.out.id();
                    let acks: Vec<TxnAck> = a
                        .ids
                        .iter()
                        .map(|&id| TxnAck {
                            queue: queue.clone(),
                            sink,
                            sub: a.sub.clone(),
                            id,
                        })
                        .collect();
                    self.push_op(format, a.rid, acks.len(), |t| t.ops.acks.extend(acks));
                }
                Staged::Done(Next::Continue)
            }
            ClientFrame::Nack(n) => {
                if let Some(queue) = self.consumer_queue(format, &n.sub, n.ids.len(), n.rid) {
                    let nack = StagedNack {
                        queue,
                        sub: n.sub,
                        ids: n.ids,
                        delay_ms: n.delay_ms,
                    };
                    let count = nack.ids.len();
                    self.push_op(format, n.rid, count, |t| t.nacks.push(nack));
                }
                Staged::Done(Next::Continue)
            }
            frame => Staged::Pass(frame),
        }
    }

    /// The queue of consumer `sub`, if it exists and `count` ids are
    /// acceptable; otherwise an error is sent.
    fn consumer_queue(
        &self,
        format: Format,
        sub: &str,
        count: usize,
        rid: Option<u64>,
    ) -> Option<String> {
        if count == 0 || count > MAX_IDS {
            self.error(
                format,
                ErrorCode::InvalidField,
                format!("ids: give 1 to {MAX_IDS}"),
                rid,
            );
            return None;
        }
        match self.consumers.get(sub) {
            Some(c) => Some(c.filter.to_string()),
            None => {
                self.error(
                    format,
                    ErrorCode::UnknownSubscription,
                    format!("no consumer {sub:?}"),
                    rid,
                );
                None
            }
        }
    }

    /// Stages `count` operations with `add`, or refuses past the bound.
    fn push_op(
        &mut self,
        format: Format,
        rid: Option<u64>,
        count: usize,
        add: impl FnOnce(&mut OpenTxn),
    ) {
        let max = self.config.max_transaction_ops;
        let Some(txn) = self.txn.as_mut() else {
            return;
        };
        if txn.len() + count > max {
            self.error(
                format,
                ErrorCode::TransactionTooLarge,
                format!("a transaction holds at most {max} operations"),
                rid,
            );
            return;
        }
        add(txn);
        self.receipt(format, rid);
    }

    async fn apply_nacks(&self, nacks: Vec<StagedNack>) {
        let sink = self.out.id();
        for n in nacks {
            if let Err(e) = self
                .broker
                .queues()
                .settle(&n.queue, sink, &n.sub, n.ids, Settlement::Nack(n.delay_ms))
                .await
            {
                tracing::debug!("a committed transaction's nack found nothing to give back: {e}");
            }
        }
    }

    /// Discards a transaction: its acked and nacked deliveries go back.
    pub(super) async fn roll_back(&self, txn: OpenTxn) {
        self.give_back(txn.ops.acks, txn.nacks).await;
    }

    /// Staged acks and nacks give their deliveries back at once.
    async fn give_back(&self, acks: Vec<TxnAck>, nacks: Vec<StagedNack>) {
        for a in acks {
            let _ = self
                .broker
                .queues()
                .settle(
                    &a.queue,
                    a.sink,
                    &a.sub,
                    vec![a.id],
                    Settlement::Nack(Some(0)),
                )
                .await;
        }
        let back = nacks
            .into_iter()
            .map(|n| StagedNack {
                delay_ms: Some(0),
                ..n
            })
            .collect();
        self.apply_nacks(back).await;
    }
}
