//! What a cluster node needs to take a queue over from a lost home: the
//! queue's dead-letter queue (which moves with it), and installing the
//! messages the replicated journal held in place of what this node's
//! store had of the queue. The broker does not know who asks (the
//! cluster's failover, `cluster/failover.rs`).

use super::queues::dead_letter_name;
use super::{BrokerError, Queues, Subscription};
use crate::store::Write;
use crate::store::queues::{self as records, DELIVERIES_TREE, MESSAGES_TREE, StoredMessage};

impl Queues<'_> {
    /// The dead-letter queue `name`'s messages go to, if any (its own
    /// configured one, or `<name>.dlq`).
    pub fn dead_letter_of(self, name: &str) -> Option<String> {
        let reg = self.inner.queues.read();
        dead_letter_name(&reg, name).filter(|d| d != name)
    }

    /// Replaces everything this node holds of queue `name` (created if
    /// need be) with `messages`: written to the store first (the old
    /// records deleted in the same batch), then installed in the queue's
    /// task. Returns the queue's id in this node's store.
    ///
    /// # Errors
    /// An invalid name, the store refusing or failing the batch, the
    /// queue refusing the task.
    pub async fn install_queue(
        self,
        name: &str,
        messages: Vec<StoredMessage>,
    ) -> Result<u32, BrokerError> {
        let handle = self
            .queue(name, true)?
            .ok_or_else(|| BrokerError::UnknownQueue(name.to_owned()))?;
        let id = handle.id;
        if let Some(w) = &self.inner.writer {
            let (from, to) = records::queue_range(id);
            let mut writes = Vec::with_capacity(2 + messages.len() * 2);
            for tree in [MESSAGES_TREE, DELIVERIES_TREE] {
                writes.push(Write::DeleteRange {
                    tree,
                    from: from.clone(),
                    to: to.clone(),
                });
            }
            for m in &messages {
                writes.push(records::put_message(id, m));
                if m.deliveries > 0 || m.not_before_ms > 0 {
                    writes.push(records::put_deliveries(id, m));
                }
            }
            w.submit(writes)?.await.map_err(BrokerError::Store)?;
        }
        handle.tq.submit(move |q| q.install(messages)).await?;
        Ok(id)
    }

    /// What this node's store holds of queue `name` (its messages and
    /// their delivery state), as the writes that would store it again,
    /// with the queue's id; `None` when the queue is not here. For a
    /// replica that starts empty while the queue already has messages.
    ///
    /// # Errors
    /// The store writer refusing or failing the reads.
    pub async fn stored_writes(self, name: &str) -> Result<Option<(u32, Vec<Write>)>, BrokerError> {
        let id = match self.inner.queues.read().queues.get(name) {
            Some(h) => h.id,
            None => return Ok(None),
        };
        let Some(w) = &self.inner.writer else {
            return Ok(Some((id, Vec::new())));
        };
        let mut out = Vec::new();
        for tree in [MESSAGES_TREE, DELIVERIES_TREE] {
            let pairs = w
                .read_later(tree, records::queue_range(id), usize::MAX)?
                .await
                .map_err(BrokerError::Store)?;
            out.extend(
                pairs
                    .into_iter()
                    .map(|(key, value)| Write::Put { tree, key, value }),
            );
        }
        Ok(Some((id, out)))
    }

    /// Takes every consumer of this node's queue `name` out (their
    /// deliveries go back): the subscriptions and their credit, for a
    /// node that no longer serves the queue to attach them where it is
    /// served now. None when the queue is not here.
    ///
    /// # Errors
    /// The queue refusing the task.
    pub async fn take_consumers(self, name: &str) -> Result<Vec<(Subscription, u32)>, BrokerError> {
        let Some(handle) = self.inner.queues.read().queues.get(name).cloned() else {
            return Ok(Vec::new());
        };
        Ok(handle.tq.submit(|q| q.take_consumers()).await?)
    }

    /// The name of the queue with id `id` in this node's store, if it
    /// exists here (a scan: for a replica's first look at an id).
    pub fn name_of(self, id: u32) -> Option<String> {
        self.inner
            .queues
            .read()
            .queues
            .iter()
            .find(|(_, h)| h.id == id)
            .map(|(name, _)| name.to_string())
    }
}
