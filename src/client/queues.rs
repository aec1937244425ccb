//! The client's queue operations: enqueue with a durable confirmation,
//! consume with prefetch, and settle deliveries.

use std::time::Duration;

use tokio::sync::oneshot;

use super::{Client, ClientError, Command, Route, wait};
use crate::protocol::frame::{
    ClientFrame, Consume, DeleteQueue, EnqueueFrame, Headers, Nack, QueueDelivery, ServerFrame,
    Settle, Subscribe, Touch, Txn,
};

/// What [`Client::delete_queue`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Deleted {
    /// The queue is gone.
    Removed,
    /// A drain is under way: the queue takes no more messages and is
    /// removed once these are settled.
    Draining {
        /// Messages not yet delivered.
        waiting: u64,
        /// Messages delivered and not yet settled.
        in_flight: u64,
    },
}

/// Options of one enqueue beyond queue and payload.
#[derive(Debug, Clone, Default)]
pub struct EnqueueOptions {
    /// Headers.
    pub headers: Headers,
    /// 0 (default) to 9; higher is delivered first.
    pub priority: u8,
    /// Time to live in ms.
    pub ttl_ms: Option<u64>,
}

impl EnqueueOptions {
    /// The same options naming the message `id` for deduplication (the
    /// `msg-id` header): an enqueue sent again with the same id within
    /// the queue's `dedupe_window_ms` is answered with the first one's
    /// seq and stores nothing, so a call that failed with a timeout or
    /// `outcome_unknown` can be retried safely.
    pub fn msg_id(mut self, id: impl Into<String>) -> Self {
        self.headers
            .insert(crate::broker::MSG_ID_HEADER.into(), id.into());
        self
    }
}

/// The deliveries of one consumer, in the order the queue sends them.
pub struct Consumer {
    id: String,
    rx: super::stream::Rx<QueueDelivery>,
}

impl std::fmt::Debug for Consumer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Consumer").field("id", &self.id).finish()
    }
}

impl Consumer {
    /// The consumer id (the `sub` of its deliveries; what settling takes).
    pub fn id(&self) -> &str {
        &self.id
    }

    /// The next delivery; `None` once the connection is closed.
    pub async fn recv(&mut self) -> Option<QueueDelivery> {
        std::future::poll_fn(|cx| self.rx.poll_next(cx)).await
    }

    /// The next delivery if one arrives within `timeout`.
    pub async fn recv_timeout(&mut self, timeout: Duration) -> Option<QueueDelivery> {
        actix_rt::time::timeout(timeout, self.recv())
            .await
            .ok()
            .flatten()
    }

    /// A delivery already received, without waiting.
    pub fn try_recv(&mut self) -> Option<QueueDelivery> {
        self.rx.try_next()
    }
}

impl Client {
    /// Puts a message on a queue and waits until the broker has it on
    /// disk; returns its id (seq) in the queue.
    ///
    /// # Errors
    /// The server refusing (invalid name, queue full, payload too large),
    /// a timeout, or a closed connection.
    pub async fn enqueue(
        &self,
        queue: &str,
        payload: impl Into<Vec<u8>>,
    ) -> Result<u64, ClientError> {
        self.enqueue_with(queue, payload.into(), EnqueueOptions::default())
            .await
    }

    /// [`Client::enqueue`] with headers, priority and time to live.
    ///
    /// # Errors
    /// As [`Client::enqueue`].
    pub async fn enqueue_with(
        &self,
        queue: &str,
        payload: Vec<u8>,
        options: EnqueueOptions,
    ) -> Result<u64, ClientError> {
        let rid = self.next_id();
        let frame = ClientFrame::Enqueue(EnqueueFrame {
            queue: queue.to_owned(),
            payload,
            headers: options.headers,
            priority: options.priority,
            ttl_ms: options.ttl_ms,
            rid: Some(rid),
        });
        match self.request(frame, Some(rid)).await? {
            ServerFrame::Enqueued(e) => Ok(e.seq),
            // Staged in a transaction: the id is assigned at commit.
            ServerFrame::Receipt(_) => Ok(0),
            other => Err(ClientError::Connect(format!(
                "expected enqueued, got {other:?}"
            ))),
        }
    }

    /// Removes a queue (needs the `admin` right). Without `drain`, at once
    /// and with what it holds; with `drain`, it takes no more messages and
    /// is removed once its consumers have settled what it holds, waiting
    /// up to `wait` (at most 60 s, and less than the client's request
    /// timeout) before answering [`Deleted::Draining`].
    ///
    /// # Errors
    /// `unknown_queue`, `forbidden`, a timeout or a closed connection.
    pub async fn delete_queue(
        &self,
        queue: &str,
        drain: bool,
        wait: Duration,
    ) -> Result<Deleted, ClientError> {
        let rid = self.next_id();
        let frame = ClientFrame::DeleteQueue(DeleteQueue {
            queue: queue.to_owned(),
            drain,
            wait_ms: u64::try_from(wait.as_millis()).unwrap_or(u64::MAX),
            rid: Some(rid),
        });
        match self.request(frame, Some(rid)).await? {
            ServerFrame::Receipt(_) => Ok(Deleted::Removed),
            ServerFrame::Draining(d) => Ok(Deleted::Draining {
                waiting: d.waiting,
                in_flight: d.in_flight,
            }),
            other => Err(ClientError::Connect(format!(
                "expected receipt or draining, got {other:?}"
            ))),
        }
    }

    /// Opens a transaction: publishes, enqueues, acks and nacks sent until
    /// [`Client::commit`] are staged (confirmed as staged) and take effect
    /// together at the commit. Inside one, [`Client::enqueue`] returns 0.
    ///
    /// # Errors
    /// `transaction_state` if one is open, a timeout, or a closed
    /// connection.
    pub async fn begin(&self) -> Result<(), ClientError> {
        self.txn(ClientFrame::Begin).await
    }

    /// Commits the open transaction; returns once it is durable and in
    /// effect.
    ///
    /// # Errors
    /// The server refusing (an ack of a delivery no longer in flight, a
    /// full queue, no open transaction): nothing took effect.
    pub async fn commit(&self) -> Result<(), ClientError> {
        self.txn(ClientFrame::Commit).await
    }

    /// Discards the open transaction; staged acks give their deliveries
    /// back.
    ///
    /// # Errors
    /// `transaction_state` if none is open, a timeout, or a closed
    /// connection.
    pub async fn rollback(&self) -> Result<(), ClientError> {
        self.txn(ClientFrame::Rollback).await
    }

    async fn txn(&self, make: fn(Txn) -> ClientFrame) -> Result<(), ClientError> {
        let rid = self.next_id();
        self.request(make(Txn { rid: Some(rid) }), Some(rid))
            .await
            .map(|_| ())
    }

    /// Starts an enqueue and returns at once; the answer arrives later
    /// through the returned future, so many can be in flight (pipelined).
    ///
    /// # Errors
    /// [`ClientError::Closed`] now; the future gives the server's answer.
    pub async fn enqueue_pipelined(
        &self,
        queue: &str,
        payload: Vec<u8>,
        options: EnqueueOptions,
    ) -> Result<impl std::future::Future<Output = Result<u64, ClientError>> + use<>, ClientError>
    {
        let rid = self.next_id();
        let frame = ClientFrame::Enqueue(EnqueueFrame {
            queue: queue.to_owned(),
            payload,
            headers: options.headers,
            priority: options.priority,
            ttl_ms: options.ttl_ms,
            rid: Some(rid),
        });
        let (reply, rx) = oneshot::channel();
        self.commands
            .send(Command::Request {
                frame,
                rid: Some(rid),
                reply,
            })
            .await
            .map_err(|_| ClientError::Closed)?;
        let timeout = self.options.timeout;
        Ok(async move {
            match wait(rx, timeout).await? {
                ServerFrame::Enqueued(e) => Ok(e.seq),
                other => Err(ClientError::Connect(format!(
                    "expected enqueued, got {other:?}"
                ))),
            }
        })
    }

    /// Consumes a queue with `prefetch` credit; confirmed before it
    /// returns. Deliveries are buffered up to the subscription buffer.
    ///
    /// # Errors
    /// The server refusing (invalid name or prefetch), a timeout, or a
    /// closed connection.
    pub async fn consume(&self, queue: &str, prefetch: u32) -> Result<Consumer, ClientError> {
        let id = format!("c{}", self.next_id());
        let rid = self.next_id();
        let (tx, rx) = super::stream::channel(self.options.subscription_buffer);
        let frame = ClientFrame::Consume(Consume {
            id: id.clone(),
            queue: queue.to_owned(),
            prefetch,
            rid: Some(rid),
        });
        self.open_route(frame, &id, rid, Route::Deliveries(tx))
            .await?;
        Ok(Consumer { id, rx })
    }

    /// Subscribes durably to a topic filter under the name `id`: messages
    /// published while this client (same client id in
    /// [`ClientOptions::client_id`](super::ClientOptions), which is
    /// required) is away are kept and delivered when it subscribes again
    /// with the same `id`. Deliveries are acknowledged like a queue's;
    /// [`Client::cancel`] ends the subscription and deletes its backlog.
    ///
    /// # Errors
    /// As [`Client::consume`]; `invalid_field` without a client id.
    pub async fn subscribe_durable(
        &self,
        id: &str,
        filter: &str,
        prefetch: u32,
    ) -> Result<Consumer, ClientError> {
        let rid = self.next_id();
        let (tx, rx) = super::stream::channel(self.options.subscription_buffer);
        let frame = ClientFrame::Subscribe(Subscribe {
            id: id.to_owned(),
            filter: filter.to_owned(),
            rid: Some(rid),
            durable: true,
            prefetch: Some(prefetch),
            recover: None,
        });
        self.open_route(frame, id, rid, Route::Deliveries(tx))
            .await?;
        Ok(Consumer {
            id: id.to_owned(),
            rx,
        })
    }

    /// Stops consuming; the consumer's unacknowledged deliveries go back
    /// to the queue. For a durable subscription: ends it for good and
    /// deletes its backlog.
    ///
    /// # Errors
    /// As [`Client::consume`].
    pub async fn cancel(&self, consumer: Consumer) -> Result<(), ClientError> {
        // Its stream goes first: a full one would keep the connection
        // from reading the receipt (what it held goes back to the queue
        // with the cancel, unacknowledged).
        let Consumer { id, rx } = consumer;
        drop(rx);
        self.close_route(id).await
    }

    async fn settle(
        &self,
        make: impl FnOnce(Option<u64>) -> ClientFrame,
        confirm: bool,
    ) -> Result<(), ClientError> {
        if confirm {
            let rid = self.next_id();
            self.request(make(Some(rid)), Some(rid)).await.map(|_| ())
        } else {
            self.commands
                .send(Command::Send(make(None)))
                .await
                .map_err(|_| ClientError::Closed)
        }
    }

    /// Acknowledges deliveries of `consumer` and waits until the deletes
    /// are on disk.
    ///
    /// # Errors
    /// The server refusing (unknown delivery), a timeout, or a closed
    /// connection.
    pub async fn ack(&self, consumer: &str, ids: &[u64]) -> Result<(), ClientError> {
        let (sub, ids) = (consumer.to_owned(), ids.to_vec());
        self.settle(|rid| ClientFrame::Ack(Settle { sub, ids, rid }), true)
            .await
    }

    /// Acknowledges without waiting for an answer (an error arrives via
    /// [`Client::next_error`]).
    ///
    /// # Errors
    /// [`ClientError::Closed`].
    pub async fn ack_nowait(&self, consumer: &str, ids: &[u64]) -> Result<(), ClientError> {
        let (sub, ids) = (consumer.to_owned(), ids.to_vec());
        self.settle(|rid| ClientFrame::Ack(Settle { sub, ids, rid }), false)
            .await
    }

    /// Gives deliveries back, for redelivery after `delay_ms` (`None`: the
    /// queue's backoff schedule).
    ///
    /// # Errors
    /// As [`Client::ack`].
    pub async fn nack(
        &self,
        consumer: &str,
        ids: &[u64],
        delay_ms: Option<u64>,
    ) -> Result<(), ClientError> {
        let (sub, ids) = (consumer.to_owned(), ids.to_vec());
        self.settle(
            |rid| {
                ClientFrame::Nack(Nack {
                    sub,
                    ids,
                    delay_ms,
                    rid,
                })
            },
            true,
        )
        .await
    }

    /// Sends deliveries to the dead-letter queue.
    ///
    /// # Errors
    /// As [`Client::ack`].
    pub async fn reject(&self, consumer: &str, ids: &[u64]) -> Result<(), ClientError> {
        let (sub, ids) = (consumer.to_owned(), ids.to_vec());
        self.settle(|rid| ClientFrame::Reject(Settle { sub, ids, rid }), true)
            .await
    }

    /// Extends deliveries' ack deadline to `extend_ms` from now (`None`:
    /// the queue's ack timeout).
    ///
    /// # Errors
    /// As [`Client::ack`].
    pub async fn touch(
        &self,
        consumer: &str,
        ids: &[u64],
        extend_ms: Option<u64>,
    ) -> Result<(), ClientError> {
        let (sub, ids) = (consumer.to_owned(), ids.to_vec());
        self.settle(
            |rid| {
                ClientFrame::Touch(Touch {
                    sub,
                    ids,
                    extend_ms,
                    rid,
                })
            },
            true,
        )
        .await
    }
}
