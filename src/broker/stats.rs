//! What the broker counts for metrics and the admin API: task-queue
//! totals over its resources, topic counts, the store's numbers.

use std::sync::Arc;

use super::Broker;
use crate::store::WriterHandle;

/// Task-queue counters summed over the broker's resources (topics and
/// queues), for metrics: how often submitting threads ran tasks inline
/// against how often workers did, refusals, and the deepest queue now.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct TaskqTotals {
    /// Tasks run inline by a submitting thread.
    pub inline_runs: u64,
    /// Tasks run by scheduler workers.
    pub worker_runs: u64,
    /// Submissions refused at `max_depth` (overloaded).
    pub refused: u64,
    /// Tasks that panicked.
    pub panics: u64,
    /// The most tasks one resource holds now (running plus queued).
    pub deepest: usize,
    /// The most tasks one resource ever held.
    pub deepest_ever: usize,
}

impl TaskqTotals {
    /// Adds one resource's counters.
    pub fn add(&mut self, s: &crate::taskq::QueueStats) {
        self.inline_runs += s.inline_runs;
        self.worker_runs += s.worker_runs;
        self.refused += s.refused;
        self.panics += s.panics;
        self.deepest = self.deepest.max(s.depth);
        self.deepest_ever = self.deepest_ever.max(s.depth_high_water);
    }

    /// Adds a retired resource's counters (its depth is gone with it).
    pub(super) fn retire(&mut self, s: &crate::taskq::QueueStats) {
        let (deepest, ever) = (self.deepest, self.deepest_ever);
        self.add(s);
        self.deepest = deepest;
        self.deepest_ever = ever.max(s.depth_high_water);
    }
}

/// Counts for metrics and the admin API.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct BrokerStats {
    /// Topics that exist now.
    pub topics: usize,
    /// Wildcard subscriptions.
    pub wildcard_subscriptions: usize,
}

impl Broker {
    /// The counters the hot paths add to, shared with the transports.
    pub fn metrics(&self) -> &Arc<crate::metrics::Metrics> {
        &self.inner.metrics
    }

    /// The task-queue scheduler's counters.
    pub fn scheduler_stats(&self) -> crate::taskq::SchedulerStats {
        self.inner.scheduler.stats()
    }

    /// Keeps a removed topic's or queue's task-queue counters in the totals.
    pub(super) fn retire(&self, s: &crate::taskq::QueueStats) {
        self.write().retired.retire(s);
    }

    /// The task-queue counters of every topic and queue (those removed
    /// since start included), read at scrape time: the resources count
    /// with plain per-resource counters, nothing is summed on the hot
    /// path.
    pub fn taskq_totals(&self) -> TaskqTotals {
        let mut t = {
            let reg = self.read();
            let mut t = reg.retired;
            for topic in reg.topics.values() {
                t.add(&topic.stats());
            }
            t
        };
        let reg = self.inner.queues.read();
        for q in reg.queues.values() {
            t.add(&q.tq.stats());
        }
        t
    }

    /// What the store writer measured of its commits; `None` without a
    /// store.
    pub fn store_stats(&self) -> Option<&crate::metrics::StoreStats> {
        self.inner.writer.as_ref().map(WriterHandle::stats)
    }

    /// Current counts: topics and wildcard subscriptions.
    pub fn stats(&self) -> BrokerStats {
        let reg = self.read();
        BrokerStats {
            topics: reg.topics.len(),
            wildcard_subscriptions: reg.wildcards.len(),
        }
    }
}
