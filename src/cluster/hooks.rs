//! The cluster as the broker's [`Remote`] and the jobs' [`JobsHome`]: the
//! broker calls these without knowing that a cluster answers (see
//! `broker::hooks`).

use std::time::Duration;

use super::{CALL_TIMEOUT, Cluster, wire};
use crate::broker::hooks::{AdminOp, Answering, HookFuture, Remote};
use crate::broker::jobs::{JobCall, JobError, JobsHome};
use crate::broker::{BrokerError, Enqueue, Publish, Settlement, Subscription};

impl Remote for Cluster {
    fn forward(&self, msg: &Publish) {
        Cluster::forward(
            self,
            &msg.topic,
            &msg.payload,
            &msg.headers,
            wire::Flags {
                retain: msg.retain,
                priority: msg.priority,
                qos: msg.qos,
            },
        );
    }

    fn home_elsewhere(&self, queue: &str) -> Option<String> {
        Cluster::home_elsewhere(self, queue)
    }

    fn enqueue_sent(&self, home: &str, msg: Enqueue) -> Result<Answering<u64>, BrokerError> {
        if self.is_here(home) {
            return Ok(self.enqueue_here(msg));
        }
        Cluster::enqueue_sent(self, home, msg)
    }

    fn enqueue_detached(&self, home: &str, msg: Enqueue) {
        if self.is_here(home) {
            return self.enqueue_detached_here(msg);
        }
        self.enqueue_detached_at(home, msg);
    }

    fn settle_sent(
        &self,
        home: &str,
        queue: &str,
        sink: u64,
        id: &str,
        ids: Vec<u64>,
        how: Settlement,
    ) -> Result<Answering<()>, BrokerError> {
        if self.is_here(home) {
            return Ok(self.settle_here(queue, sink, id, ids, how));
        }
        Cluster::settle_sent(self, home, queue, sink, id, ids, how)
    }

    fn settle_detached(
        &self,
        home: &str,
        queue: &str,
        sink: u64,
        id: &str,
        ids: Vec<u64>,
        how: Settlement,
    ) {
        if self.is_here(home) {
            let settled = self.settle_here(queue, sink, id, ids, how);
            self.spawn_here(async move {
                let _ = settled.await;
            });
            return;
        }
        self.settle_detached_at(home, queue, sink, id, ids, how);
    }

    fn consume<'a>(
        &'a self,
        home: &'a str,
        queue: &'a str,
        sub: Subscription,
        prefetch: u32,
    ) -> HookFuture<'a, Result<(), BrokerError>> {
        if self.is_here(home) {
            return Box::pin(self.consume_here(queue, sub, prefetch));
        }
        Box::pin(self.consume_at(home, queue, sub, prefetch))
    }

    fn cancel<'a>(
        &'a self,
        home: &'a str,
        queue: &'a str,
        sink: u64,
        id: &'a str,
    ) -> HookFuture<'a, Result<(), BrokerError>> {
        if self.is_here(home) {
            return Box::pin(self.cancel_here(queue, sink, id));
        }
        Box::pin(self.cancel_at(home, queue, sink, id))
    }

    fn admin<'a>(
        &'a self,
        home: &'a str,
        queue: &'a str,
        op: AdminOp,
    ) -> HookFuture<'a, Result<serde_json::Value, BrokerError>> {
        if self.is_here(home) {
            return Box::pin(self.admin_here(queue, op));
        }
        Box::pin(self.admin_at(home, queue, op))
    }

    fn want<'a>(&'a self, filter: &'a str) -> HookFuture<'a, ()> {
        Box::pin(Cluster::want(self, filter))
    }

    fn announce_connect(&self, client: &str, principal: &str, clean: bool) {
        Cluster::announce_connect(self, client, principal, clean);
    }
}

impl JobsHome for Cluster {
    fn place(&self) -> HookFuture<'_, Result<Option<String>, JobError>> {
        Box::pin(Cluster::jobs_place(self))
    }

    fn call<'a>(
        &'a self,
        home: &'a str,
        call: JobCall,
        limit: Duration,
    ) -> HookFuture<'a, Result<serde_json::Value, JobError>> {
        Box::pin(Cluster::job_call(self, home, call, limit))
    }

    fn call_timeout(&self) -> Duration {
        CALL_TIMEOUT
    }
}
