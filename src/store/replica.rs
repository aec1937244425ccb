//! A replica of some queues' writes, kept somewhere other than this disk:
//! the writer hands it each group's writes to the queues it replicates,
//! after they are durable here, with the completions of the submissions
//! that had any, and the replica completes them once its copy is safe.
//! So a confirmed enqueue or ack of a replicated queue is both on this
//! disk and in the replica. The cluster implements it (`[cluster]
//! failover`: a JetStream stream per cluster, `cluster/journal.rs`); the
//! store knows nothing of who answers.
//!
//! Only the `qmsg` and `qdel` trees are replicated (a queue's messages and
//! their delivery state), keyed by the queue's id in this store.

use std::sync::Arc;
use std::sync::OnceLock;

use tokio::sync::oneshot;

use super::queues::{DELIVERIES_TREE, MESSAGES_TREE, parse_key};
use super::write::{CommitError, Write};

/// What copies the writes of some queues before they are confirmed.
pub trait Replica: Send + Sync {
    /// Whether the writes of queue `id` go to the replica (asked for each
    /// write to `qmsg` or `qdel` in a group, on the writer thread: cheap).
    fn replicates(&self, id: u32) -> bool;

    /// Takes one group's writes to replicated queues (with their queue's
    /// id, in the order they were applied here), and the completions of
    /// the submissions they came from: each must be completed, with an
    /// error if the replica could not keep its copy. Must not block.
    fn replicate(&self, writes: Vec<(u32, Write)>, done: Vec<Completion>);
}

/// Where the replica says a submission's writes are safe (or are not).
pub struct Completion(pub(super) oneshot::Sender<Result<(), CommitError>>);

impl Completion {
    /// Completes the submission's `Durable`.
    pub fn complete(self, result: Result<(), CommitError>) {
        let _ = self.0.send(result);
    }
}

/// The writer's cell for the replica: empty (one atomic load per group)
/// until the cluster installs one.
pub(super) type ReplicaCell = Arc<OnceLock<Arc<dyn Replica>>>;

/// The id of the queue a write belongs to, when it is one a replica may
/// take: a message or delivery record, or a whole queue's range.
pub(super) fn queue_of(w: &Write) -> Option<u32> {
    let (tree, key) = match w {
        Write::Put { tree, key, .. } | Write::Delete { tree, key } => (*tree, key.as_slice()),
        Write::DeleteRange { tree, from, to } => {
            // Only a range within one queue (a purge, a deletion).
            if from.get(..4) != to.get(..4) {
                return None;
            }
            (*tree, from.as_slice())
        }
    };
    if tree != MESSAGES_TREE && tree != DELIVERIES_TREE {
        return None;
    }
    match w {
        Write::DeleteRange { .. } => key
            .get(..4)
            .and_then(|b| <[u8; 4]>::try_from(b).ok())
            .map(u32::from_be_bytes),
        _ => parse_key(key).map(|(id, _, _)| id),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::queues::{delete_message, delete_queue, put_queue};

    #[test]
    fn message_records_and_queue_ranges_name_their_queue() {
        let [m, d] = delete_message(7, 3, 42);
        assert_eq!(queue_of(&m), Some(7));
        assert_eq!(queue_of(&d), Some(7));
        let [name, msgs, dels] = delete_queue("q", 9);
        assert_eq!(queue_of(&name), None);
        assert_eq!(queue_of(&msgs), Some(9));
        assert_eq!(queue_of(&dels), Some(9));
        assert_eq!(queue_of(&put_queue("q", 9, b"")), None);
        let wide = Write::DeleteRange {
            tree: MESSAGES_TREE,
            from: vec![0, 0, 0, 1],
            to: vec![0, 0, 0, 2],
        };
        assert_eq!(queue_of(&wide), None);
    }
}
