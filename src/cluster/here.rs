//! Calls for a queue (or the jobs) whose home is this node by the
//! failover's routing, but whose lease this node does not hold yet
//! (`failover.rs`): each takes the lease and the queue over first, then
//! runs here through the broker, which now finds the queue local. And
//! this node's consumers of queues whose home moved follow them.

use std::sync::Arc;
use std::time::Instant;

use super::failover::claim;
use super::home::{AdminOp, Answer, Call, JOBS_HOME_KEY};
use super::remote::CALL_TIMEOUT;
use super::{Cluster, Shared};
use crate::broker::hooks::Answering;
use crate::broker::jobs::JobError;
use crate::broker::{Broker, BrokerError, Enqueue, Settlement, Subscription};

fn stopping() -> BrokerError {
    BrokerError::Remote {
        code: crate::protocol::frame::ErrorCode::Overloaded,
        message: "the node is stopping".into(),
    }
}

/// Takes `queue` over here (if its home is this node and it is not yet
/// held), then gives the broker.
async fn taken(shared: &Arc<Shared>, queue: &str) -> Result<Broker, BrokerError> {
    if let Some((key, node)) = shared.failover_home(queue)
        && node == shared.node
    {
        claim(shared, &key).await?;
    }
    shared.broker.upgrade().ok_or_else(stopping)
}

impl Cluster {
    /// Whether the jobs move between nodes (failover with `members`):
    /// then a node installs them when it takes their lease, not from its
    /// own store at start.
    pub fn moves_jobs(&self) -> bool {
        self.shared.failover.is_some() && self.home_of(JOBS_HOME_KEY).is_some()
    }

    /// Where the jobs resource lives now: `None` for this node, after
    /// taking it over if this node is next in line for it (failover).
    ///
    /// # Errors
    /// The takeover failing (another node holds the lease, NATS or
    /// JetStream failing).
    pub(super) async fn jobs_place(&self) -> Result<Option<String>, JobError> {
        match self.home_elsewhere(JOBS_HOME_KEY) {
            Some(node) if node == self.shared.node => {
                claim(&self.shared, JOBS_HOME_KEY)
                    .await
                    .map_err(|e| JobError::Remote {
                        code: e.code(),
                        message: e.to_string(),
                    })?;
                Ok(None)
            }
            other => Ok(other),
        }
    }

    /// Whether a call for a queue homed on `home` is this node's to take
    /// over and serve.
    pub(super) fn is_here(&self, home: &str) -> bool {
        home == self.shared.node
    }

    /// An enqueue, once the queue is taken over.
    pub(super) fn enqueue_here(&self, msg: Enqueue) -> Answering<u64> {
        let shared = self.shared.clone();
        Box::pin(async move {
            let broker = taken(&shared, &msg.queue).await?;
            broker.queues().enqueue_durable(msg).await
        })
    }

    /// Runs `task` on the link's runtime.
    pub(super) fn spawn_here(&self, task: impl std::future::Future<Output = ()> + Send + 'static) {
        self.shared.runtime.spawn(task);
    }

    /// An enqueue without waiting, once the queue is taken over.
    pub(super) fn enqueue_detached_here(&self, msg: Enqueue) {
        let shared = self.shared.clone();
        self.shared.runtime.spawn(async move {
            if let Ok(broker) = taken(&shared, &msg.queue).await {
                broker.queues().enqueue_detached(msg);
            }
        });
    }

    /// A settle, once the queue is taken over.
    pub(super) fn settle_here(
        &self,
        queue: &str,
        sink: u64,
        id: &str,
        ids: Vec<u64>,
        how: Settlement,
    ) -> Answering<()> {
        let (shared, queue, id) = (self.shared.clone(), queue.to_owned(), id.to_owned());
        Box::pin(async move {
            let broker = taken(&shared, &queue).await?;
            if let Some(durable) = broker.queues().settle(&queue, sink, &id, ids, how).await? {
                durable.await.map_err(BrokerError::Store)?;
            }
            Ok(())
        })
    }

    /// A consumer attached, once the queue is taken over.
    pub(super) async fn consume_here(
        &self,
        queue: &str,
        sub: Subscription,
        prefetch: u32,
    ) -> Result<(), BrokerError> {
        let broker = taken(&self.shared, queue).await?;
        broker.queues().consume(queue, sub, prefetch).await
    }

    /// A consumer detached, once the queue is taken over.
    pub(super) async fn cancel_here(
        &self,
        queue: &str,
        sink: u64,
        id: &str,
    ) -> Result<(), BrokerError> {
        let broker = taken(&self.shared, queue).await?;
        broker.queues().cancel_consumer(queue, sink, id).await
    }

    /// An operator's operation, once the queue is taken over.
    pub(super) async fn admin_here(
        &self,
        queue: &str,
        op: AdminOp,
    ) -> Result<serde_json::Value, BrokerError> {
        let broker = taken(&self.shared, queue).await?;
        match super::serve::admin_answer(&broker, queue, op).await {
            Answer::Value { value } => Ok(value),
            Answer::Error { code, message } => Err(BrokerError::Remote { code, message }),
            _ => Ok(serde_json::Value::Null),
        }
    }

    /// Moves this node's consumers of queues whose home changed (a
    /// takeover) to the new home: attached there under the same token,
    /// or, when the new home is this node, to the queue here.
    pub(super) async fn follow_homes(&self) {
        let s = &self.shared;
        let moved: Vec<(u64, String, String)> = s
            .remotes
            .local
            .lock()
            .by_token
            .iter()
            .filter_map(|(token, l)| {
                let (_, node) = s.failover_home(&l.queue)?;
                // One with this node as its home came off a queue this
                // node lost: attached here once the queue is back.
                (node != l.home || node == s.node).then(|| (*token, l.queue.clone(), node))
            })
            .collect();
        for (token, queue, home) in moved {
            if home == s.node {
                let Ok(broker) = taken(s, &queue).await else {
                    continue;
                };
                let local = {
                    let mut local = s.remotes.local.lock();
                    let l = local.by_token.remove(&token);
                    if let Some(l) = &l {
                        local.by_sub.remove(&(
                            l.queue.clone(),
                            l.sub.sink.id(),
                            l.sub.id.to_string(),
                        ));
                    }
                    l
                };
                let Some(l) = local else { continue };
                match broker.queues().consume(&queue, l.sub, l.prefetch).await {
                    Ok(()) => {
                        tracing::info!(queue = %queue, "cluster: a consumer follows its queue to this node")
                    }
                    Err(e) => {
                        tracing::warn!(queue = %queue, "cluster: a consumer could not follow its queue here: {e}")
                    }
                }
                continue;
            }
            let found = s
                .remotes
                .local
                .lock()
                .by_token
                .get(&token)
                .map(|l| (l.prefetch, l.sub.id.to_string()));
            let Some((prefetch, id)) = found else {
                continue;
            };
            let call = Call::Consume {
                queue: queue.clone(),
                prefetch,
                node: s.node.clone(),
                token,
                id,
            };
            match self.call(&home, &call, &[], CALL_TIMEOUT).await {
                Ok(Answer::Ok) => {
                    if let Some(l) = s.remotes.local.lock().by_token.get_mut(&token) {
                        l.home = home.clone();
                        l.since = Instant::now();
                    }
                    tracing::info!(queue = %queue, home = %home, "cluster: a consumer follows its queue to its new home");
                }
                other => {
                    tracing::debug!(queue = %queue, home = %home, "cluster: a consumer could not follow its queue yet: {other:?}")
                }
            }
        }
    }
}
