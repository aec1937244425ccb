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
//! their delivery state), keyed by the queue's id in this store, and the
//! `jobs` tree (the jobs resource's records), under [`JOBS_ID`].

use std::sync::Arc;
use std::sync::OnceLock;

use tokio::sync::oneshot;

use super::jobs::JOBS_TREE;
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

/// The id the job records' writes go to a replica under, as if the jobs
/// were one more queue: the one id the queue registry never hands out
/// (it stops counting below it), so that a replica can follow the jobs
/// resource with the queues (`[cluster] failover` moves both).
pub const JOBS_ID: u32 = u32::MAX;

/// The id of the queue a write belongs to, when it is one a replica may
/// take: a message or delivery record, or a whole queue's range; or
/// [`JOBS_ID`] for a job record (or a range of them).
pub(super) fn queue_of(w: &Write) -> Option<u32> {
    if let Write::Put { tree, .. } | Write::Delete { tree, .. } | Write::DeleteRange { tree, .. } =
        w
        && *tree == JOBS_TREE
    {
        return Some(JOBS_ID);
    }
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

    #[test]
    fn job_records_go_under_the_jobs_id() {
        use crate::store::jobs;
        assert_eq!(
            queue_of(&jobs::put(&[3; 16], b"{}".to_vec())),
            Some(JOBS_ID)
        );
        assert_eq!(queue_of(&jobs::delete(&[3; 16])), Some(JOBS_ID));
        assert_eq!(queue_of(&jobs::delete_all()), Some(JOBS_ID));
    }
}
