//! The operator's queue operations: purge, browse and move one message.
//! The queue tasks (`queue/admin.rs`) work on memory; this part reads
//! the messages kept only on disk through the store writer (so a read
//! sees every write submitted before it) and puts the two together.

use std::time::Duration;

use tokio::sync::oneshot;

use super::queue::{BrowseSnapshot, Incoming, MessageState, Taken, now_ms};
use super::{Broker, BrokerError, Queues};
use crate::store::queues::{self as records, MESSAGES_TREE, StoredMessage, decode_message};
use crate::store::{CommitError, ReadResult};

/// Most messages one browse returns.
pub const MAX_BROWSE: usize = 1000;

/// How long a browse or a move waits for the store to read messages
/// kept on disk.
const DISK_READ_TIMEOUT: Duration = Duration::from_secs(10);

/// One message as an operator sees it, with where it is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PeekedMessage {
    /// The message (its `seq` is its id in the queue).
    pub message: StoredMessage,
    /// Ready, delayed, in flight or on disk.
    pub state: MessageState,
}

/// A page of a queue's messages by id.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct QueuePage {
    /// Messages with ids from the page's start, lowest first.
    pub messages: Vec<PeekedMessage>,
    /// The id to start the next page at; `None` when this was the last.
    pub next: Option<u64>,
}

/// Where a moved message went.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Moved {
    /// Its id in the target queue.
    pub id: u64,
}

impl Queues<'_> {
    /// Deletes every message of `queue` that is not in flight (ready,
    /// delayed, and kept on disk) and returns how many went, once the
    /// deletes are durable. Deliveries in flight settle as usual.
    ///
    /// # Errors
    /// An unknown queue, an overloaded queue or store writer, a failed
    /// commit.
    pub async fn purge_queue(self, queue: &str) -> Result<u64, BrokerError> {
        if let Some((remote, home)) = self.home_elsewhere(queue) {
            return super::hooks::admin_at(&*remote, &home, queue, super::hooks::AdminOp::Purge)
                .await;
        }
        let q = self.existing_queue(queue)?;
        let (purged, durable) = q.tq.submit_high(|s| s.purge()).await??;
        if let Some(d) = durable {
            d.await.map_err(BrokerError::Store)?;
        }
        Ok(purged)
    }
    /// Up to `limit` (at most [`MAX_BROWSE`]) messages of `queue` with ids
    /// from `from`, lowest first, in memory or on disk, without consuming
    /// them. Not a transaction: a message settled meanwhile may still
    /// show, one arriving meanwhile may not.
    ///
    /// # Errors
    /// An unknown queue, an overloaded queue or store writer, a failed or
    /// late disk read.
    pub async fn browse_queue(
        self,
        queue: &str,
        from: u64,
        limit: usize,
    ) -> Result<QueuePage, BrokerError> {
        let limit = limit.clamp(1, MAX_BROWSE);
        let q = self.existing_queue(queue)?;
        let snap: BrowseSnapshot = q.tq.submit(move |s| s.browse(from, limit + 1)).await??;
        let mut all: Vec<PeekedMessage> = snap
            .memory
            .into_iter()
            .map(|(message, state)| PeekedMessage { message, state })
            .collect();
        let in_memory: std::collections::HashSet<u64> = all.iter().map(|p| p.message.seq).collect();
        for (priority, start) in snap.disk {
            let range = (
                records::message_key(snap.id, priority, start),
                records::message_key(snap.id, priority, u64::MAX),
            );
            for (k, v) in self.read_disk(range, limit + 1).await? {
                let Some((_, m)) = decode_message(&k, &v) else {
                    continue;
                };
                if snap.skip.contains(&m.seq) || in_memory.contains(&m.seq) {
                    continue;
                }
                all.push(PeekedMessage {
                    message: m,
                    state: MessageState::OnDisk,
                });
            }
        }
        all.sort_unstable_by_key(|p| p.message.seq);
        let next = all.get(limit).map(|p| p.message.seq);
        all.truncate(limit);
        Ok(QueuePage {
            messages: all,
            next,
        })
    }
    /// Moves message `id` of `queue` to `to` (created on first use), with
    /// its headers, priority, first enqueue time and remaining time to
    /// live; its delivery count starts again. The delete here and the
    /// insert there commit in one store batch.
    ///
    /// # Errors
    /// An unknown queue or message, a message in flight, `to` = `queue`,
    /// an invalid target name, a full target, an overloaded queue or
    /// store writer.
    pub async fn move_message(self, queue: &str, id: u64, to: &str) -> Result<Moved, BrokerError> {
        if queue == to {
            return Err(BrokerError::Invalid(
                "the target queue is the message's own".into(),
            ));
        }
        let source = self.existing_queue(queue)?;
        let target = self.queue(to, true)?.ok_or(BrokerError::Contended)?;
        let (m, removal, from_disk) = match source.tq.submit(move |s| s.take_one(id)).await?? {
            Taken::Message(m, removal) => (m, removal, false),
            Taken::InFlight => return Err(BrokerError::MessageInFlight(id)),
            Taken::Missing => return Err(BrokerError::UnknownMessage(id)),
            Taken::OnDisk(priorities) => {
                let Some(found) = self.read_one(source.id, &priorities, id).await? else {
                    return Err(BrokerError::UnknownMessage(id));
                };
                match source.tq.submit(move |s| s.take_spilled(found)).await?? {
                    Taken::Message(m, removal) => (m, removal, true),
                    Taken::InFlight => return Err(BrokerError::MessageInFlight(id)),
                    Taken::Missing | Taken::OnDisk(_) => {
                        return Err(BrokerError::UnknownMessage(id));
                    }
                }
            }
        };
        let now = now_ms();
        let incoming = Incoming {
            priority: m.priority,
            headers: m.headers.clone(),
            payload: m.payload.clone(),
            ttl_ms: (m.expires_ms > 0).then(|| m.expires_ms.saturating_sub(now).max(1)),
            enqueued_ms: Some(m.enqueued_ms),
            with: removal,
        };
        let placed = match target.tq.submit(move |q| q.enqueue(incoming, now)).await {
            Ok(Ok(placed)) => Ok(placed),
            Ok(Err(e)) => Err(BrokerError::from(e)),
            Err(e) => Err(BrokerError::from(e)),
        };
        let (seq, durable) = match placed {
            Ok(placed) => placed,
            Err(e) => {
                // Nothing was written: the message goes back where it was.
                let _ = source
                    .tq
                    .submit(move |s| s.put_back(vec![m], now_ms()))
                    .await;
                return Err(e);
            }
        };
        if let Some(d) = durable {
            d.await.map_err(BrokerError::Store)?;
        }
        if from_disk {
            let _ = source.tq.submit(move |s| s.forget_moved(id)).await;
        }
        Ok(Moved { id: seq })
    }
}

impl Broker {
    fn existing_queue(&self, queue: &str) -> Result<super::queue::QueueHandle, BrokerError> {
        self.queue(queue, false)?
            .ok_or_else(|| BrokerError::UnknownQueue(queue.to_owned()))
    }
    /// Message `seq` of queue `id` read from disk at one of `priorities`.
    async fn read_one(
        &self,
        id: u32,
        priorities: &[u8],
        seq: u64,
    ) -> Result<Option<StoredMessage>, BrokerError> {
        for &p in priorities {
            let key = records::message_key(id, p, seq);
            let pairs = self.read_disk((key.clone(), key), 1).await?;
            if let Some((k, v)) = pairs.first() {
                return Ok(decode_message(k, v).map(|(_, m)| m));
            }
        }
        Ok(None)
    }
    /// Reads up to `limit` pairs of the messages tree through the store
    /// writer, waiting at most [`DISK_READ_TIMEOUT`].
    async fn read_disk(
        &self,
        range: (Vec<u8>, Vec<u8>),
        limit: usize,
    ) -> Result<Vec<(Vec<u8>, Vec<u8>)>, BrokerError> {
        let Some(writer) = &self.inner.writer else {
            return Ok(Vec::new());
        };
        let (tx, rx) = oneshot::channel::<ReadResult>();
        let reply = Box::new(move |result: ReadResult| {
            let _ = tx.send(result);
        });
        writer.read(MESSAGES_TREE, range, limit, reply)?;
        match tokio::time::timeout(DISK_READ_TIMEOUT, rx).await {
            Ok(Ok(result)) => result.map_err(BrokerError::Store),
            Ok(Err(_)) => Err(BrokerError::Store(CommitError(
                "the store writer stopped before answering a read".into(),
            ))),
            Err(_) => Err(BrokerError::Store(CommitError(
                "the store did not answer a read within 10 s".into(),
            ))),
        }
    }
}
