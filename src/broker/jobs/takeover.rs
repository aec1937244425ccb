//! What a cluster node needs to take the jobs resource over from a lost
//! home, or to let it go (`[cluster] failover`, `cluster/failover.rs`):
//! the job records its own store holds, installing the records the
//! replicated journal held in place of them, and forgetting the jobs when
//! another node serves them. The jobs do not know who asks.

use super::{JobError, JobRecord, Jobs, now_ms};
use crate::store::jobs::{self as records, JOBS_TREE, StoredJob};

impl Jobs {
    /// Every job record this node's store holds (for a journal that
    /// starts empty while the jobs already have records here).
    ///
    /// # Errors
    /// The store writer refusing or failing the read.
    pub async fn stored_records(&self) -> Result<Vec<StoredJob>, JobError> {
        let Some(w) = &self.writer else {
            return Ok(Vec::new());
        };
        let pairs = w
            .read_later(JOBS_TREE, records::all(), usize::MAX)
            .map_err(|_| JobError::StoreBusy)?
            .await?;
        Ok(pairs
            .into_iter()
            .filter_map(|(k, v)| Some((<[u8; 16]>::try_from(k.as_slice()).ok()?, v)))
            .collect())
    }

    /// Replaces every job this node holds with `stored` (records as the
    /// store keeps them): written to the store first (the old records
    /// deleted in the same batch), then installed as after a restart
    /// (unfinished jobs queued again, attempts kept; workers must
    /// register again). Returns how many were installed.
    ///
    /// # Errors
    /// The store refusing or failing the batch, or the resource refusing
    /// the task.
    pub async fn install(&self, stored: Vec<StoredJob>) -> Result<usize, JobError> {
        let jobs = read_records(&stored);
        if let Some(w) = &self.writer {
            // The records that read, as they were given.
            let kept: std::collections::HashSet<[u8; 16]> =
                jobs.iter().map(|j| j.id.into_bytes()).collect();
            let mut writes = Vec::with_capacity(1 + kept.len());
            writes.push(records::delete_all());
            writes.extend(
                stored
                    .into_iter()
                    .filter(|(id, _)| kept.contains(id))
                    .map(|(id, record)| records::put(&id, record)),
            );
            w.submit(writes)
                .map_err(|_| JobError::StoreBusy)?
                .await
                .map_err(JobError::Store)?;
        }
        let n = jobs.len();
        self.tq
            .submit(move |s| {
                s.reset();
                s.restore(jobs, now_ms());
            })
            .await?;
        Ok(n)
    }

    /// Forgets every job and worker in memory (another node serves the
    /// jobs now; the store keeps what it has until they are installed
    /// here again). Parked dequeues end with `worker_expired`.
    ///
    /// # Errors
    /// The resource refusing the task.
    pub async fn forget(&self) -> Result<(), JobError> {
        Ok(self.tq.submit(|s| s.reset()).await?)
    }
}

/// The records that read as jobs, each under its own id.
pub(super) fn read_records(stored: &[StoredJob]) -> Vec<JobRecord> {
    stored
        .iter()
        .filter_map(|(id, bytes)| match serde_json::from_slice::<JobRecord>(bytes) {
            Ok(j) if j.id.as_bytes() == id => Some(j),
            Ok(_) | Err(_) => {
                tracing::warn!(job = %uuid::Uuid::from_bytes(*id), "skipping an unreadable job record");
                None
            }
        })
        .collect()
}
