//! Queues for embedding apps: enqueue from your handlers, and consume a
//! queue with one of your actors. Each delivery arrives as a
//! [`QueueMessage`] that carries its own [`Settler`]: the actor acks,
//! nacks, rejects or touches through it, from its handler or later (for
//! example after an async job finishes).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use actix::prelude::*;
use bytes::Bytes;

use super::Wharf;
use crate::broker::{
    Broker, BrokerError, DeliveryOutcome, Enqueue, QueuedDelivery, Settlement, Sink, Subscription,
    WeakBroker, next_sink_id,
};
use crate::protocol::frame::Headers;

/// A queue delivery for an actor consuming with [`Wharf::consume`].
#[derive(Debug, Clone, Message)]
#[rtype(result = "()")]
pub struct QueueMessage {
    /// The queue.
    pub queue: Arc<str>,
    /// The message's id (seq) in the queue.
    pub seq: u64,
    /// Times it has been delivered, this time included.
    pub count: u32,
    /// Its priority (0-9).
    pub priority: u8,
    /// Headers.
    pub headers: Headers,
    /// Payload (shared with the queue, not copied).
    pub payload: Bytes,
    /// Settles this delivery.
    pub settler: Settler,
}

/// Settles one delivery. Cheap to clone; each call is a task on the queue.
#[derive(Clone)]
pub struct Settler {
    broker: Broker,
    queue: Arc<str>,
    sink: u64,
    sub: Arc<str>,
    delivery: u64,
}

impl std::fmt::Debug for Settler {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Settler")
            .field("queue", &self.queue)
            .field("delivery", &self.delivery)
            .finish_non_exhaustive()
    }
}

impl Settler {
    async fn settle(&self, how: Settlement) -> Result<(), BrokerError> {
        let durable = self
            .broker
            .queues()
            .settle(&self.queue, self.sink, &self.sub, vec![self.delivery], how)
            .await?;
        if let Some(d) = durable {
            d.await.map_err(BrokerError::Store)?;
        }
        Ok(())
    }

    /// The delivery id.
    pub fn delivery(&self) -> u64 {
        self.delivery
    }

    /// Done: the message is deleted; returns once that is on disk.
    ///
    /// # Errors
    /// [`BrokerError::UnknownDelivery`] if it is no longer in flight to
    /// this consumer (timed out, already settled).
    pub async fn ack(&self) -> Result<(), BrokerError> {
        self.settle(Settlement::Ack).await
    }

    /// Give it back, for redelivery after `delay_ms` (`None`: the queue's
    /// backoff schedule).
    ///
    /// # Errors
    /// As [`Settler::ack`].
    pub async fn nack(&self, delay_ms: Option<u64>) -> Result<(), BrokerError> {
        self.settle(Settlement::Nack(delay_ms)).await
    }

    /// Send it to the dead-letter queue.
    ///
    /// # Errors
    /// As [`Settler::ack`].
    pub async fn reject(&self) -> Result<(), BrokerError> {
        self.settle(Settlement::Reject).await
    }

    /// Still working: the ack deadline moves to `extend_ms` from now
    /// (`None`: the queue's ack timeout).
    ///
    /// # Errors
    /// As [`Settler::ack`].
    pub async fn touch(&self, extend_ms: Option<u64>) -> Result<(), BrokerError> {
        self.settle(Settlement::Touch(extend_ms)).await
    }
}

/// An actor's consumer. The consumer holds the actor's address, so the
/// actor lives as long as it consumes (the code that started it need not
/// keep its `Addr`). Dropping this handle does not end it; call
/// [`ActorConsumer::cancel`] (or stop the actor with `ctx.stop()`: its
/// deliveries then go back to the queue on the next dispatch or tick).
pub struct ActorConsumer {
    queue: String,
    sub: Subscription,
    broker: Broker,
}

impl ActorConsumer {
    /// Stops consuming; unacknowledged deliveries go back to the queue.
    /// Cancelling a consumer whose actor has stopped (and which the queue
    /// has detached already) is not an error.
    ///
    /// # Errors
    /// The queue refusing the task.
    pub async fn cancel(self) -> Result<(), BrokerError> {
        self.sub.cancel();
        match self
            .broker
            .queues()
            .cancel_consumer(&self.queue, self.sub.sink.id(), &self.sub.id)
            .await
        {
            Err(BrokerError::UnknownConsumer) => Ok(()),
            other => other,
        }
    }
}

struct ConsumerSink {
    id: u64,
    /// The one queue it consumes (shared by every delivery's settler).
    queue: Arc<str>,
    /// Strong: the consumer keeps its actor alive until it is cancelled or
    /// the actor stops itself (`ctx.stop()`).
    recipient: Recipient<QueueMessage>,
    /// Weak: the broker holds this sink, which must not hold it back.
    broker: WeakBroker,
    closed: AtomicBool,
}

impl Sink for ConsumerSink {
    fn id(&self) -> u64 {
        self.id
    }

    fn deliver(
        &self,
        _sub: &Subscription,
        _msg: &Arc<crate::broker::Published>,
    ) -> DeliveryOutcome {
        // Consumers take queue deliveries only.
        DeliveryOutcome::Closed
    }

    fn deliver_queued(&self, sub: &Subscription, d: &QueuedDelivery<'_>) -> DeliveryOutcome {
        let recipient = &self.recipient;
        let Some(broker) = self.broker.upgrade() else {
            self.closed.store(true, Ordering::Relaxed);
            return DeliveryOutcome::Closed;
        };
        let queue = self.queue.clone();
        let m = d.message;
        let msg = QueueMessage {
            queue: queue.clone(),
            seq: m.seq,
            count: m.deliveries,
            priority: m.priority,
            headers: m.headers.clone(),
            payload: m.payload.clone(),
            settler: Settler {
                broker,
                queue,
                sink: self.id,
                sub: sub.id.clone(),
                delivery: d.id,
            },
        };
        match recipient.try_send(msg) {
            Ok(()) => DeliveryOutcome::Queued,
            // The queue keeps it and offers it again.
            Err(SendError::Full(_)) => DeliveryOutcome::Dropped,
            Err(SendError::Closed(_)) => {
                self.closed.store(true, Ordering::Relaxed);
                DeliveryOutcome::Closed
            }
        }
    }

    fn is_closed(&self) -> bool {
        self.closed.load(Ordering::Relaxed) || !self.recipient.connected()
    }
}

impl Wharf {
    /// Puts a message on a queue (created on first use) and returns its
    /// id once it is durable (see [`Queues::enqueue`](crate::broker::Queues::enqueue) for every option).
    ///
    /// # Errors
    /// An invalid name, a full or overloaded queue, a store failure.
    pub async fn enqueue(
        &self,
        queue: impl Into<String>,
        payload: impl Into<Bytes>,
    ) -> Result<u64, BrokerError> {
        self.broker()
            .queues()
            .enqueue_durable(Enqueue {
                queue: queue.into(),
                payload: payload.into(),
                ..Enqueue::default()
            })
            .await
    }

    /// Deletes a queue and what it holds at once; `false` if there was no
    /// such queue.
    ///
    /// # Errors
    /// An overloaded queue, a store failure.
    pub async fn delete_queue(&self, queue: &str) -> Result<bool, BrokerError> {
        self.broker().queues().delete_queue(queue).await
    }

    /// Removes a queue after its consumers have taken and settled what it
    /// holds (it takes no more messages from now on), waiting up to `wait`
    /// for that; past it the queue is removed when it empties (see
    /// [`Queues::drain_queue`](crate::broker::Queues::drain_queue)).
    ///
    /// # Errors
    /// An overloaded queue, a store failure.
    pub async fn drain_queue(
        &self,
        queue: &str,
        wait: std::time::Duration,
    ) -> Result<crate::broker::Drain, BrokerError> {
        self.broker().queues().drain_queue(queue, wait).await
    }

    /// Makes an actor a consumer of `queue` with `prefetch` credit: each
    /// delivery arrives as a [`QueueMessage`] (by `try_send`: a full
    /// mailbox leaves the message in the queue, offered again shortly).
    /// The actor settles each through [`QueueMessage::settler`]. The
    /// consumer keeps the actor alive until [`ActorConsumer::cancel`] or
    /// until the actor stops itself.
    ///
    /// # Errors
    /// An invalid name or prefetch, an overloaded queue.
    pub async fn consume(
        &self,
        queue: &str,
        recipient: Recipient<QueueMessage>,
        prefetch: u32,
    ) -> Result<ActorConsumer, BrokerError> {
        let sink = Arc::new(ConsumerSink {
            id: next_sink_id(),
            queue: queue.into(),
            recipient,
            broker: self.broker().downgrade(),
            closed: AtomicBool::new(false),
        });
        let id = format!("actor-{}", sink.id);
        let sub = Subscription::new(sink, &id, queue, crate::broker::SubTag::None, None);
        self.broker()
            .queues()
            .consume(queue, sub.clone(), prefetch)
            .await?;
        Ok(ActorConsumer {
            queue: queue.to_owned(),
            sub,
            broker: self.broker().clone(),
        })
    }
}
