//! Putting jobs into the state from records (at start, or when this node
//! takes the jobs over from another: `[cluster] failover`) and taking
//! them all out (when another node serves them).

use super::JobsState;
use crate::broker::jobs::{JobRecord, JobStatus};

impl JobsState {
    /// Forgets every job, worker and waiting dequeue (the jobs are
    /// installed anew, or served by another node); the counters stay.
    pub(crate) fn reset(&mut self) {
        self.jobs.clear();
        self.ready.clear();
        self.retrying.clear();
        self.deadlines.clear();
        self.workers.clear();
        self.waiting.clear();
        self.finished.clear();
    }

    /// Installs the records read back at start: unfinished jobs are queued
    /// again (their workers are gone), finished ones stay queryable.
    pub(crate) fn restore(&mut self, mut jobs: Vec<JobRecord>, now: u64) {
        jobs.sort_by_key(|j| (j.created_ms, j.id));
        for mut j in jobs {
            let id = j.id;
            match j.status {
                _ if j.is_finished() => {
                    self.finished.insert((j.updated_ms, id));
                    self.jobs.insert(id, j);
                }
                _ => {
                    j.status = JobStatus::Queued;
                    j.worker = None;
                    j.started_ms = None;
                    j.retry_at_ms = None;
                    j.updated_ms = now;
                    self.jobs.insert(id, j);
                    self.make_ready(id);
                }
            }
        }
    }
}
