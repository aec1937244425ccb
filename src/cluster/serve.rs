//! The home's side of queues and jobs homed here: answering calls from
//! other nodes (`{prefix}.home.{node}`), and handing deliveries from
//! other homes to this node's consumers (`{prefix}.deliver.{node}`). The
//! caller's side is `remote.rs`.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use futures_util::StreamExt;

use super::home::{AdminOp, Answer, Call, Delivered, JobCall, unframe};
use super::remote::{MAX_CALLS, MAX_KNOWN, MAX_REMOTE_CONSUMERS, RemoteConsumer, RemoteSink};
use super::{Cluster, Shared};
use crate::broker::jobs::{JobError, JobFilter, Jobs};
use crate::broker::{
    Broker, BrokerError, DeliveryOutcome, Enqueue, QueuedDelivery, SubTag, Subscription,
    WeakBroker, next_sink_id,
};
use crate::protocol::frame::ErrorCode;
use crate::store::queues::StoredMessage;

/// Serves calls from other nodes and deliveries to this node's consumers
/// of their queues, until the link's runtime ends.
pub(super) async fn serve(
    shared: Arc<Shared>,
    broker: WeakBroker,
    mut calls: async_nats::Subscriber,
    mut deliveries: async_nats::Subscriber,
    mut replies: async_nats::Subscriber,
) {
    loop {
        tokio::select! {
            Some(msg) = calls.next() => {
                let reply = msg.reply.clone();
                let parsed = unframe::<Call>(&msg.payload);
                // Calls that may wait long (a dequeue's long poll, a
                // drain) have slots of their own, so they cannot take
                // every slot from enqueues and settles.
                let slots = match &parsed {
                    Ok((Call::Job { call: JobCall::Dequeue { wait_ms, .. } }, _)) if *wait_ms > 0 => {
                        &shared.remotes.waits
                    }
                    Ok((Call::Admin { op: AdminOp::Drain { wait_ms }, .. }, _)) if *wait_ms > 0 => {
                        &shared.remotes.waits
                    }
                    _ => &shared.remotes.calls,
                };
                let Ok(permit) = slots.clone().try_acquire_owned() else {
                    if let Some(reply) = reply {
                        let busy = Answer::Error {
                            code: ErrorCode::Overloaded,
                            message: format!("node {:?} serves {MAX_CALLS} calls of this kind already", shared.node),
                        };
                        let _ = shared.client.publish(reply, json(&busy)).await;
                    }
                    continue;
                };
                let (shared, broker) = (shared.clone(), broker.clone());
                tokio::spawn(async move {
                    let answer = match parsed {
                        Ok((call, payload)) => answer(&shared, &broker, call, payload).await,
                        Err(e) => refused(ErrorCode::Malformed, format!("not a call: {e}")),
                    };
                    if let Some(reply) = reply {
                        let _ = shared.client.publish(reply, json(&answer)).await;
                    } else if let Answer::Error { message, .. } = answer {
                        tracing::debug!("cluster: a call from another node was refused: {message}");
                    }
                    drop(permit);
                });
            }
            Some(msg) = deliveries.next() => deliver(&shared, &msg.payload),
            Some(msg) = replies.next() => {
                let id = msg.subject.rsplit('.').next().and_then(|t| t.parse::<u64>().ok());
                let waiting = id.and_then(|id| shared.remotes.waiting.lock().remove(&id));
                if let Some((_, tx)) = waiting {
                    let _ = tx.send(msg);
                }
            }
            else => break,
        }
    }
}

fn json(answer: &Answer) -> Bytes {
    serde_json::to_vec(answer).unwrap_or_default().into()
}

fn refused(code: ErrorCode, message: impl Into<String>) -> Answer {
    Answer::Error {
        code,
        message: message.into(),
    }
}

fn broker_refused(e: &BrokerError) -> Answer {
    refused(e.code(), e.to_string())
}

/// What this node, as a home, answers to one call.
async fn answer(shared: &Arc<Shared>, broker: &WeakBroker, call: Call, payload: Bytes) -> Answer {
    if !shared.remotes.ready.load(Ordering::Acquire) {
        // Its store is not restored yet: nothing may touch the queues.
        return refused(
            ErrorCode::Overloaded,
            format!("node {:?} is starting", shared.node),
        );
    }
    if let Some(queue) = call.queue()
        && let Some((key, node)) = shared.failover_home(queue)
    {
        if node != shared.node {
            return refused(
                ErrorCode::Overloaded,
                format!(
                    "{queue:?} lives on node {node:?} now, not on {:?}",
                    shared.node
                ),
            );
        }
        if let Err(e) = super::failover::claim(shared, &key).await {
            return broker_refused(&e);
        }
    } else if let Some(queue) = call.queue() {
        let home = shared.remotes.homes.get().and_then(|h| h.home_of(queue));
        if home != Some(shared.node.as_str()) {
            return refused(
                ErrorCode::Internal,
                format!(
                    "{queue:?} lives on {home:?} by node {:?}'s cluster.members, not here: \
                     the nodes' configurations differ",
                    shared.node
                ),
            );
        }
    }
    let Some(broker) = broker.upgrade() else {
        return refused(ErrorCode::Overloaded, "the node is stopping");
    };
    match call {
        Call::Enqueue {
            queue,
            priority,
            headers,
            ttl_ms,
        } => {
            let msg = Enqueue {
                queue,
                payload,
                headers,
                priority,
                ttl_ms,
            };
            match broker.queues().enqueue_durable(msg).await {
                Ok(seq) => Answer::Seq { seq },
                Err(e) => broker_refused(&e),
            }
        }
        Call::Consume {
            queue,
            prefetch,
            node,
            token,
            id,
        } => {
            if shared.remotes.remote.lock().len() >= MAX_REMOTE_CONSUMERS {
                return refused(
                    ErrorCode::Overloaded,
                    format!(
                        "node {:?} serves {MAX_REMOTE_CONSUMERS} remote consumers already",
                        shared.node
                    ),
                );
            }
            let key = (node.clone(), token);
            let old = shared.remotes.remote.lock().remove(&key);
            if let Some(old) = old {
                old.sink.closed.store(true, Ordering::Release);
                let _ = broker
                    .queues()
                    .cancel_consumer(&old.queue, old.sink.id, &old.id)
                    .await;
            }
            let sink = Arc::new(RemoteSink {
                id: next_sink_id(),
                subject: format!("{}.deliver.{node}", shared.prefix),
                token,
                shared: Arc::downgrade(shared),
                closed: AtomicBool::new(false),
            });
            let sub = Subscription::new(sink.clone(), &id, "", SubTag::None, None);
            // Recorded first: a settle may follow the first delivery
            // before this call's answer reaches the caller.
            shared.remotes.remote.lock().insert(
                key.clone(),
                RemoteConsumer {
                    queue: queue.clone(),
                    sink,
                    id,
                    since: Instant::now(),
                },
            );
            match broker.queues().consume(&queue, sub, prefetch).await {
                Ok(()) => Answer::Ok,
                Err(e) => {
                    shared.remotes.remote.lock().remove(&key);
                    broker_refused(&e)
                }
            }
        }
        Call::Cancel { queue, node, token } => {
            let Some(c) = shared.remotes.remote.lock().remove(&(node, token)) else {
                return Answer::Ok;
            };
            c.sink.closed.store(true, Ordering::Release);
            let _ = queue;
            match broker
                .queues()
                .cancel_consumer(&c.queue, c.sink.id, &c.id)
                .await
            {
                Ok(()) | Err(BrokerError::UnknownConsumer | BrokerError::UnknownQueue(_)) => {
                    Answer::Ok
                }
                Err(e) => broker_refused(&e),
            }
        }
        Call::Settle {
            queue,
            node,
            token,
            ids,
            how,
        } => {
            let found = shared
                .remotes
                .remote
                .lock()
                .get(&(node, token))
                .map(|c| (c.sink.id, c.id.clone()));
            let Some((sink, id)) = found else {
                return broker_refused(&BrokerError::UnknownConsumer);
            };
            match broker.queues().settle(&queue, sink, &id, ids, how).await {
                Ok(Some(durable)) => match durable.await {
                    Ok(()) => Answer::Ok,
                    Err(e) => broker_refused(&BrokerError::Store(e)),
                },
                Ok(None) => Answer::Ok,
                Err(e) => broker_refused(&e),
            }
        }
        Call::Admin { queue, op } => admin_answer(&broker, &queue, op).await,
        Call::Known { node, tokens } => {
            if tokens.len() > MAX_KNOWN {
                return refused(
                    ErrorCode::InvalidField,
                    format!(
                        "{} tokens: ask about at most {MAX_KNOWN} at once",
                        tokens.len()
                    ),
                );
            }
            let remote = shared.remotes.remote.lock();
            let unknown: Vec<u64> = tokens
                .into_iter()
                .filter(|t| !remote.contains_key(&(node.clone(), *t)))
                .collect();
            Answer::Value {
                value: serde_json::to_value(unknown).unwrap_or_default(),
            }
        }
        Call::Job { call } => match shared.remotes.jobs.get() {
            Some(jobs) => job_answer(jobs, call).await,
            None => refused(ErrorCode::Internal, "this node serves no jobs"),
        },
    }
}

/// Runs an operator's call on a queue here, its home.
pub(super) async fn admin_answer(broker: &Broker, queue: &str, op: AdminOp) -> Answer {
    fn value<T: serde::Serialize>(r: Result<T, BrokerError>) -> Answer {
        match r {
            Ok(v) => Answer::Value {
                value: serde_json::to_value(v).unwrap_or_default(),
            },
            Err(e) => broker_refused(&e),
        }
    }
    match op {
        AdminOp::Info => value(Ok(broker.queues().queue_info(queue).await)),
        AdminOp::Purge => value(broker.queues().purge_queue(queue).await),
        AdminOp::Delete => value(broker.queues().delete_queue(queue).await),
        AdminOp::Drain { wait_ms } => {
            let wait = Duration::from_millis(wait_ms.min(crate::broker::MAX_DRAIN_WAIT_MS));
            value(broker.queues().drain_queue(queue, wait).await)
        }
        AdminOp::Redrive { to } => value(broker.queues().redrive(queue, to.as_deref()).await),
    }
}

/// Runs a jobs call here, the jobs resource's home.
async fn job_answer(jobs: &Jobs, call: JobCall) -> Answer {
    fn value<T: serde::Serialize>(r: Result<T, JobError>) -> Answer {
        match r {
            Ok(v) => Answer::Value {
                value: serde_json::to_value(v).unwrap_or_default(),
            },
            Err(e) => refused(e.code(), e.to_string()),
        }
    }
    match call {
        JobCall::Enqueue { new } => value(jobs.enqueue(new).await),
        JobCall::Status { id } => value(jobs.status(id).await),
        JobCall::List {
            status,
            kind,
            after,
            limit,
        } => {
            let filter = JobFilter {
                status,
                kind,
                after,
                limit,
            };
            value(jobs.list(filter, |_| true).await)
        }
        JobCall::Retry { id } => value(jobs.retry(id).await),
        JobCall::Cancel { id } => value(jobs.cancel(id).await),
        JobCall::Register { kinds, owner } => value(jobs.register(kinds, owner).await),
        JobCall::Ping { worker, owner } => value(jobs.ping(worker, owner).await),
        JobCall::Dequeue {
            worker,
            owner,
            wait_ms,
        } => value(
            jobs.dequeue(worker, owner, Duration::from_millis(wait_ms))
                .await,
        ),
        JobCall::Outcome {
            id,
            worker,
            owner,
            token,
            outcome,
            error,
        } => value(jobs.outcome(id, worker, owner, token, outcome, error).await),
        JobCall::Info => value(jobs.info().await),
    }
}

/// A delivery from a queue's home to a consumer on this node.
fn deliver(shared: &Arc<Shared>, body: &Bytes) {
    let (d, payload) = match unframe::<Delivered>(body) {
        Ok(d) => d,
        Err(e) => {
            shared.counters.invalid.fetch_add(1, Ordering::Relaxed);
            tracing::debug!("cluster: an unreadable delivery: {e}");
            return;
        }
    };
    let local = shared
        .remotes
        .local
        .lock()
        .by_token
        .get(&d.token)
        .map(|l| l.sub.clone());
    let outcome = match &local {
        Some(sub) if !sub.is_cancelled() => {
            let message = StoredMessage {
                seq: d.seq,
                priority: d.priority,
                headers: d.headers,
                payload,
                enqueued_ms: d.enqueued_ms,
                expires_ms: d.expires_ms,
                deliveries: d.deliveries,
                not_before_ms: d.not_before_ms,
            };
            let delivery = QueuedDelivery {
                queue: &d.queue,
                id: d.id,
                message: &message,
            };
            sub.sink.deliver_queued(sub, &delivery)
        }
        _ => DeliveryOutcome::Closed,
    };
    match outcome {
        DeliveryOutcome::Queued | DeliveryOutcome::Crowded => {}
        // Still in flight at the home: it comes back after its ack
        // timeout.
        DeliveryOutcome::Dropped => {
            tracing::debug!(queue = %d.queue, "cluster: a remote delivery was dropped by a slow consumer");
        }
        DeliveryOutcome::Closed => {
            {
                let mut l = shared.remotes.local.lock();
                if let Some(gone) = l.by_token.remove(&d.token) {
                    l.by_sub
                        .remove(&(gone.queue, gone.sub.sink.id(), gone.sub.id.to_string()));
                }
            }
            let cluster = Cluster {
                shared: shared.clone(),
            };
            let call = cluster.cancel_call(&d.queue, d.token);
            cluster.tell(&d.from, &call, &[]);
        }
    }
}
