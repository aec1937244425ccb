//! The broker core: topics as resources, and the registry that finds them.
//!
//! Each topic is a [`TaskQueue`] owning a `TopicState` (its subscriptions,
//! retained message and sequence number); publish, subscribe and
//! unsubscribe are tasks on it, so one publisher's messages reach every
//! subscriber in the order they were published. The registry maps names to
//! topics and keeps wildcard subscriptions in a [`FilterTrie`]: a topic
//! copies the matching wildcard subscriptions when it is created, and a new
//! wildcard subscription is added to every existing matching topic. Both
//! happen under the registry's lock, so no topic misses a subscription.
//!
//! Publishing needs only a read lock to find the topic; fan-out happens in
//! the topic's task and never copies the payload.

mod calls;
mod durable;
pub mod hooks;
mod inspect;
pub mod jobs;
mod message;
mod queue;
mod queues;
mod shared;
mod sink;
mod topic;
mod txn;

use std::collections::HashMap;
use std::sync::Arc;

use parking_lot::{RwLock, RwLockReadGuard, RwLockWriteGuard};

use bytes::Bytes;

pub use calls::{Enqueue, MAX_PREFETCH, Settlement};
pub use durable::{
    DURABLE_PREFETCH, DURABLE_PREFIX, ORIGIN_HEADER, QOS_HEADER, RETAIN_HEADER, TOPIC_HEADER,
    durable_queue_name, origin_tag,
};
pub use inspect::{MAX_BROWSE, Moved, PeekedMessage, QueuePage};
pub use message::{EncodingSlot, Published};
pub use queue::{
    DEAD_LETTER_DELIVERIES, DEAD_LETTER_FROM, DEAD_LETTER_REASON, DEAD_LETTER_SEQ, MessageState,
    QueueCounters, QueueInfo, now_ms,
};
pub use queues::{DLQ_SUFFIX, Drain, MAX_DRAIN_WAIT_MS, MAX_IDS};
pub use shared::{SHARED_PREFETCH, SHARED_PREFIX, shared_queue_name};
pub use sink::{
    DeliveryOutcome, MqttSubOptions, QueuedDelivery, Sink, SubTag, Subscription, next_sink_id,
};
pub use topic::PublishOutcome;
pub use txn::{TxnAck, TxnOps};

use crate::config::TopicsConfig;
use crate::protocol::frame::{ErrorCode, Headers, Priority};
use crate::routing::{self, FilterTrie, TopicError, TopicLimits};
use crate::store::{RetainedRecord, SubmitError, WriterHandle};
use crate::taskq::{SchedulerHandle, TaskError, TaskQueue};
use topic::{Gone, NotPublished, TopicState};

type Topic = TaskQueue<TopicState>;

/// Why a broker operation failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BrokerError {
    /// The topic name is not valid.
    #[error("invalid topic: {0}")]
    InvalidTopic(TopicError),
    /// The filter is not valid.
    #[error("invalid filter: {0}")]
    InvalidFilter(TopicError),
    /// The topic's task queue refused or lost the task.
    #[error(transparent)]
    Task(#[from] TaskError),
    /// The store failed the write (its commit error kept as the source).
    #[error(transparent)]
    Store(#[from] crate::store::CommitError),
    /// The store writer is too far behind to take the write; try again.
    #[error(transparent)]
    StoreBusy(SubmitError),
    /// Creating the topic would pass `topics.max_topics`.
    #[error("too many topics: at most {0}")]
    TooManyTopics(usize),
    /// The topic was removed and re-created under the operation more times
    /// than it retries; try again.
    #[error("topic is being removed and re-created; try again")]
    Contended,
    /// The queue holds `max_length` messages.
    #[error("queue full: it holds its maximum of {0} messages")]
    QueueFull(u64),
    /// The queue is draining before its removal (`DELETE
    /// /queues/{name}?drain=true`): it takes no more messages.
    #[error("the queue is draining before its removal: it takes no more messages")]
    QueueDraining,
    /// These delivery ids are not in flight to this consumer (already
    /// settled, timed out, or never delivered to it).
    #[error("unknown delivery ids {0:?}: not in flight to this consumer")]
    UnknownDelivery(Vec<u64>),
    /// The consumer id is already consuming this queue.
    #[error("this consumer id is already consuming the queue")]
    DuplicateConsumer,
    /// No consumer with this id on this queue.
    #[error("no such consumer on the queue")]
    UnknownConsumer,
    /// No queue has this name.
    #[error("no queue named {0:?}")]
    UnknownQueue(String),
    /// Priorities are 0 to 9.
    #[error("priority {0} is out of range 0-9")]
    InvalidPriority(u8),
    /// Prefetch must be 1 to [`MAX_PREFETCH`].
    #[error("prefetch {0} is out of range 1-10000")]
    InvalidPrefetch(u32),
    /// An ack, nack, reject or touch names 1 to [`MAX_IDS`] deliveries.
    #[error("{0} delivery ids: give 1 to 10000")]
    InvalidIds(usize),
    /// A durable subscription cannot be named from this client id and
    /// subscription id.
    #[error("durable subscription: {0}")]
    InvalidDurable(String),
    /// The message is delivered and not yet settled: it cannot move.
    #[error("message {0} is in flight to a consumer; it can move once it is settled or returned")]
    MessageInFlight(u64),
    /// No message with this id in the queue.
    #[error("no message {0} in the queue")]
    UnknownMessage(u64),
    /// A request that makes no sense as asked (a move to the queue itself).
    #[error("{0}")]
    Invalid(String),
    /// The queue's home node refused the call (with the code it gave).
    #[error("{message}")]
    Remote {
        /// The home's error code.
        code: ErrorCode,
        /// The home's reason.
        message: String,
    },
    /// The queue's home node did not answer (down, or NATS away); try
    /// again.
    #[error("the queue's home node {home:?} did not answer: {reason}")]
    HomeUnreachable {
        /// The home.
        home: String,
        /// What the NATS client said.
        reason: String,
    },
}

impl BrokerError {
    /// The error code this error has on every transport (native `error`
    /// frames; HTTP derives its status from it).
    pub fn code(&self) -> ErrorCode {
        match self {
            BrokerError::InvalidTopic(_) => ErrorCode::InvalidTopic,
            BrokerError::InvalidFilter(_) => ErrorCode::InvalidFilter,
            BrokerError::Task(TaskError::Overloaded { .. })
            | BrokerError::Contended
            | BrokerError::StoreBusy(_) => ErrorCode::Overloaded,
            BrokerError::TooManyTopics(_) => ErrorCode::TooManyTopics,
            BrokerError::Task(_) | BrokerError::Store(_) => ErrorCode::Internal,
            BrokerError::QueueFull(_) => ErrorCode::QueueFull,
            BrokerError::QueueDraining => ErrorCode::Conflict,
            BrokerError::UnknownDelivery(_) => ErrorCode::UnknownDelivery,
            BrokerError::DuplicateConsumer => ErrorCode::DuplicateSubscription,
            BrokerError::UnknownConsumer => ErrorCode::UnknownSubscription,
            BrokerError::UnknownQueue(_) => ErrorCode::UnknownQueue,
            BrokerError::InvalidPriority(_)
            | BrokerError::InvalidPrefetch(_)
            | BrokerError::InvalidIds(_)
            | BrokerError::InvalidDurable(_)
            | BrokerError::Invalid(_) => ErrorCode::InvalidField,
            BrokerError::MessageInFlight(_) => ErrorCode::Conflict,
            BrokerError::UnknownMessage(_) => ErrorCode::UnknownMessage,
            BrokerError::Remote { code, .. } => *code,
            BrokerError::HomeUnreachable { .. } => ErrorCode::Overloaded,
        }
    }
}

/// How often queues with deadlines (ack timeouts, delays, expiry) are
/// visited: the granularity of those timers.
pub const QUEUE_TICK: std::time::Duration = std::time::Duration::from_millis(50);

/// A message to publish.
#[derive(Debug, Clone, Default)]
pub struct Publish {
    /// Topic name, without wildcards.
    pub topic: String,
    /// Payload bytes (shared, not copied, by the fan-out).
    pub payload: Bytes,
    /// Headers.
    pub headers: Headers,
    /// Keep as the topic's retained message; an empty payload clears it.
    pub retain: bool,
    /// Lane at the subscribers.
    pub priority: Priority,
    /// MQTT quality of service asked for by the publisher (0-2); an MQTT
    /// subscriber gets the lower of this and its subscription's. Native
    /// publishes are 0.
    pub qos: u8,
    /// The publishing connection's sink id, 0 for none (native, HTTP and
    /// embedded publishes): MQTT 5's "no local" compares it.
    pub origin: u64,
}

/// How a message came in, for rules that match on it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ingress {
    /// The native protocol (`/ws`).
    Native,
    /// MQTT, over any listener.
    Mqtt,
    /// `POST /topics/{name}`.
    Http,
    /// The embedding app ([`crate::Wharf::publish`], or the broker itself).
    Embedded,
    /// An app's typed socket ([`crate::sockets::Socket::publish`]).
    Socket,
}

impl Ingress {
    /// Its name in rules (`protocol = "mqtt"`).
    pub fn as_str(self) -> &'static str {
        match self {
            Ingress::Native => "native",
            Ingress::Mqtt => "mqtt",
            Ingress::Http => "http",
            Ingress::Embedded => "embedded",
            Ingress::Socket => "socket",
        }
    }

    /// The ingress named `name`.
    pub fn parse(name: &str) -> Option<Ingress> {
        [
            Ingress::Native,
            Ingress::Mqtt,
            Ingress::Http,
            Ingress::Embedded,
            Ingress::Socket,
        ]
        .into_iter()
        .find(|i| i.as_str() == name)
    }
}

/// Who published a message and how: what rules see of the publisher
/// (borrowed from the connection, so it costs nothing when no rule runs).
#[derive(Debug, Clone, Copy)]
pub struct Source<'a> {
    /// The way in.
    pub ingress: Ingress,
    /// The client id of the connection, if it has one.
    pub client_id: Option<&'a str>,
    /// The authenticated principal's name, if any.
    pub principal: Option<&'a str>,
}

impl Source<'static> {
    /// A publish by the embedding app.
    pub const EMBEDDED: Source<'static> = Source {
        ingress: Ingress::Embedded,
        client_id: None,
        principal: None,
    };
}

/// The broker: cheap to clone, shared by every connection. Its methods
/// come in six parts, each in a file of its own:
///
/// - **Topics** (`broker/mod.rs`): [`Broker::publish`],
///   [`Broker::subscribe`], [`Broker::unsubscribe`],
///   [`Broker::retained_matching`], [`Broker::topic_info`],
///   [`Broker::stats`], [`Broker::sweep_idle`], [`Broker::restore_retained`],
///   and the name checks ([`Broker::check_topic`], [`Broker::check_filter`]).
/// - **Queues** (`broker/queues.rs`): [`Broker::enqueue`] and its
///   variants, [`Broker::consume`], [`Broker::settle`],
///   [`Broker::cancel_consumer`], [`Broker::queue_info`],
///   [`Broker::queue_names`], [`Broker::redrive`], [`Broker::delete_queue`],
///   [`Broker::tick_queues`], [`Broker::configure_queues`],
///   [`Broker::restore_queues`].
/// - **Operators' queue tools** (`broker/inspect.rs`):
///   [`Broker::purge_queue`], [`Broker::browse_queue`],
///   [`Broker::move_message`].
/// - **Bindings and durable subscriptions** (`broker/durable.rs`):
///   [`Broker::declare_queues`], [`Broker::subscribe_durable`],
///   [`Broker::unsubscribe_durable`], [`Broker::durable_subscriptions`].
/// - **Shared subscriptions** (`broker/shared.rs`): [`Broker::join_shared`],
///   [`Broker::leave_shared`].
/// - **Transactions** (`broker/txn.rs`): [`Broker::commit`].
///
/// Jobs are a resource of their own ([`jobs::Jobs`]), not part of it.
#[derive(Clone)]
pub struct Broker {
    inner: Arc<Inner>,
}

struct Inner {
    scheduler: SchedulerHandle,
    registry: RwLock<Registry>,
    /// Where retained messages are persisted; `None` keeps them in memory.
    writer: Option<WriterHandle>,
    /// Most topics that may exist at once.
    max_topics: usize,
    /// Bounds on the names and filters that enter through this broker.
    limits: TopicLimits,
    /// Queues by name, with their options.
    queues: RwLock<queues::QueueRegistry>,
    /// What the hot paths count (`GET /metrics`).
    metrics: Arc<crate::metrics::Metrics>,
    /// Held while a member joins or leaves a shared subscription.
    shared: tokio::sync::Mutex<()>,
    /// What sees every publish first (the rules), once installed.
    publish_hook: std::sync::OnceLock<Arc<dyn hooks::PublishHook>>,
    /// The other nodes (the cluster), once installed.
    remote: std::sync::OnceLock<Arc<dyn hooks::Remote>>,
}

#[derive(Default)]
struct Registry {
    topics: HashMap<Arc<str>, Topic>,
    wildcards: FilterTrie<Subscription>,
    /// The task-queue counters of topics and queues removed since start,
    /// so that the totals only grow.
    retired: TaskqTotals,
}

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
    fn retire(&mut self, s: &crate::taskq::QueueStats) {
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

/// A retry bound for a task that keeps finding its topic removed; each
/// retry creates the topic afresh, so more than one is already unusual.
const GONE_RETRIES: usize = 8;

impl Broker {
    /// A broker whose topics run on `scheduler`'s workers and keep
    /// retained messages in memory only.
    pub fn new(scheduler: SchedulerHandle) -> Self {
        Self::build(scheduler, None, &TopicsConfig::default())
    }

    /// A broker that persists retained messages through a store writer,
    /// with `topics`' limits (most topics, name bounds). Call
    /// [`Broker::restore_retained`] with what the store holds before
    /// serving.
    pub fn with_store(
        scheduler: SchedulerHandle,
        writer: WriterHandle,
        topics: &TopicsConfig,
    ) -> Self {
        Self::build(scheduler, Some(writer), topics)
    }

    fn build(
        scheduler: SchedulerHandle,
        writer: Option<WriterHandle>,
        topics: &TopicsConfig,
    ) -> Self {
        Broker {
            inner: Arc::new(Inner {
                scheduler,
                registry: RwLock::new(Registry::default()),
                writer,
                max_topics: topics.max_topics,
                limits: topics.limits(),
                queues: RwLock::new(queues::QueueRegistry::default()),
                shared: tokio::sync::Mutex::new(()),
                metrics: Arc::default(),
                publish_hook: std::sync::OnceLock::new(),
                remote: std::sync::OnceLock::new(),
            }),
        }
    }

    /// The bounds on topic names, filters and queue names this broker
    /// accepts (`[topics] max_levels`, `max_name_bytes`), for the
    /// transports to check a name before they act on it.
    pub fn topic_limits(&self) -> TopicLimits {
        self.inner.limits
    }

    /// Checks a topic name against this broker's limits.
    ///
    /// # Errors
    /// [`BrokerError::InvalidTopic`].
    pub fn check_topic(&self, name: &str) -> Result<(), BrokerError> {
        self.inner
            .limits
            .check_topic(name)
            .map_err(BrokerError::InvalidTopic)
    }

    /// Checks a topic filter against this broker's limits.
    ///
    /// # Errors
    /// [`BrokerError::InvalidFilter`].
    pub fn check_filter(&self, filter: &str) -> Result<(), BrokerError> {
        self.inner
            .limits
            .check_filter(filter)
            .map_err(BrokerError::InvalidFilter)
    }

    /// Re-creates topics with their retained messages, as read back from
    /// the store at start.
    pub async fn restore_retained(&self, records: Vec<RetainedRecord>) -> Result<(), BrokerError> {
        for r in records {
            if TopicLimits::WIDEST.check_topic(&r.topic).is_err() {
                tracing::warn!(topic = %r.topic, "skipping a stored retained message with an invalid topic");
                continue;
            }
            // What the store holds is served even past a lowered limit.
            let Some(topic) = self.topic(&r.topic, true, false)? else {
                continue;
            };
            topic
                .submit(move |t| t.restore_retained(r.seq, r.payload, r.headers))
                .await?;
        }
        Ok(())
    }

    /// The topic registry, to look up. A `parking_lot` lock, like the
    /// queue registry's: held only for map operations, never across an
    /// await or a task, so a plain blocking lock is right and one kind of
    /// lock serves both.
    fn read(&self) -> RwLockReadGuard<'_, Registry> {
        self.inner.registry.read()
    }

    /// The topic registry, to change.
    fn write(&self) -> RwLockWriteGuard<'_, Registry> {
        self.inner.registry.write()
    }

    /// The topic named `name`, created (with its matching wildcard
    /// subscriptions) if `create` and it does not exist.
    fn topic(&self, name: &str, create: bool, limited: bool) -> Result<Option<Topic>, BrokerError> {
        {
            let reg = self.read();
            if let Some(t) = reg.topics.get(name) {
                return Ok(Some(t.clone()));
            }
            // A publish to a name nobody wants needs no write lock.
            if !create {
                let mut wanted = false;
                reg.wildcards.for_each_match(name, |s| {
                    wanted |= !s.is_cancelled() && !s.sink.is_closed();
                });
                if !wanted {
                    return Ok(None);
                }
            }
        }
        let mut reg = self.write();
        if let Some(t) = reg.topics.get(name) {
            return Ok(Some(t.clone()));
        }
        let mut subs = Vec::new();
        reg.wildcards.for_each_match(name, |s| {
            if !s.is_cancelled() && !s.sink.is_closed() {
                subs.push(s.clone());
            }
        });
        if !create && subs.is_empty() {
            return Ok(None);
        }
        if limited && reg.topics.len() >= self.inner.max_topics {
            return Err(BrokerError::TooManyTopics(self.inner.max_topics));
        }
        let name: Arc<str> = name.into();
        let topic = TaskQueue::new(
            TopicState::new(
                name.clone(),
                subs,
                self.inner.writer.clone(),
                self.inner.metrics.clone(),
            ),
            &self.inner.scheduler,
        );
        reg.topics.insert(name, topic.clone());
        Ok(Some(topic))
    }

    /// Drops a removed topic's registry entry (if it is still this topic),
    /// so a retry finds or creates the live one instead of the stale one.
    fn forget(&self, name: &str, topic: &Topic) {
        let mut reg = self.write();
        if reg.topics.get(name).is_some_and(|t| t.same(topic)) {
            reg.topics.remove(name);
            crate::maps::shrink_if_sparse(&mut reg.topics);
            reg.retired.retire(&topic.stats());
        }
    }

    /// Publishes a message: stamps it with the topic's next sequence number,
    /// keeps it if retained, and queues it for every matching subscription.
    /// A publish to a topic nobody subscribes to and that keeps nothing is
    /// a no-op. With a store, a retained publish returns once the retained
    /// message is durable.
    ///
    /// # Errors
    /// An invalid topic name, or the topic's queue refusing the task
    /// (overloaded).
    pub async fn publish(&self, msg: Publish) -> Result<PublishOutcome, BrokerError> {
        self.publish_at(msg, &Source::EMBEDDED, 0).await
    }

    /// [`Broker::publish`] for a connection: `source` is what rules see of
    /// the publisher. A message a rule drops is published nowhere (the
    /// outcome counts no delivery).
    ///
    /// # Errors
    /// As [`Broker::publish`].
    pub async fn publish_from(
        &self,
        msg: Publish,
        source: &Source<'_>,
    ) -> Result<PublishOutcome, BrokerError> {
        self.publish_at(msg, source, 0).await
    }

    /// Installs what sees every publish before the local topics (the
    /// rules). Once only; a second hook is handed back.
    ///
    /// # Errors
    /// The hook given, if one is installed already.
    pub fn set_publish_hook(
        &self,
        hook: Arc<dyn hooks::PublishHook>,
    ) -> Result<(), Arc<dyn hooks::PublishHook>> {
        self.inner.publish_hook.set(hook)
    }

    /// Joins this broker to other nodes (a cluster): from now on its
    /// publishes go to them too, and calls for queues homed there are
    /// sent there. Once only; a second remote is handed back.
    ///
    /// # Errors
    /// The remote given, if one is installed already.
    pub fn set_remote(&self, remote: Arc<dyn hooks::Remote>) -> Result<(), Arc<dyn hooks::Remote>> {
        self.inner.remote.set(remote)
    }

    /// The other nodes, if this broker is one of a cluster.
    pub fn remote(&self) -> Option<&Arc<dyn hooks::Remote>> {
        self.inner.remote.get()
    }

    /// Whether a local subscription still uses `filter` (a wildcard
    /// subscription under exactly that filter, or any subscription to
    /// that topic): the cluster drops the NATS subscriptions of filters
    /// nobody here uses.
    pub(crate) async fn has_subscribers(&self, filter: &str) -> bool {
        if routing::is_wildcard(filter) {
            return self
                .read()
                .wildcards
                .any_at(filter, |s| !s.is_cancelled() && !s.sink.is_closed());
        }
        let Some(topic) = self.read().topics.get(filter).cloned() else {
            return false;
        };
        // A topic too busy to answer is taken as still wanted.
        topic
            .submit(|t| t.summary())
            .await
            .map_or(true, |(subs, _, _)| subs > 0)
    }

    /// Publishes a message another node of the cluster published: to
    /// local subscribers only, without rules (they ran on that node) and
    /// without sending it back out.
    ///
    /// # Errors
    /// As [`Broker::publish`].
    pub(crate) async fn publish_remote(&self, msg: Publish) -> Result<PublishOutcome, BrokerError> {
        self.check_topic(&msg.topic)?;
        self.publish_local(msg).await
    }

    /// A publish `depth` republishes deep in a chain of rules.
    pub(crate) async fn publish_at(
        &self,
        msg: Publish,
        source: &Source<'_>,
        depth: u8,
    ) -> Result<PublishOutcome, BrokerError> {
        self.check_topic(&msg.topic)?;
        // The hook (the rules) first: it may edit, copy or drop. Its
        // future is boxed by the hook, so it costs nothing in size to a
        // publish that has no hook.
        let msg = match self.inner.publish_hook.get() {
            Some(hook) if hook.active() => match hook.apply(self, msg, source, depth).await {
                Some(msg) => msg,
                None => return Ok(PublishOutcome::default()),
            },
            _ => msg,
        };
        // Then the other nodes, without waiting; then the local topics.
        if let Some(remote) = self.inner.remote.get() {
            remote.forward(&msg);
        }
        self.publish_local(msg).await
    }

    /// A publish to this node's subscribers (and retained store).
    async fn publish_local(&self, msg: Publish) -> Result<PublishOutcome, BrokerError> {
        let Publish {
            topic: name,
            payload,
            headers,
            retain,
            priority,
            qos,
            origin,
        } = msg;
        let mut message = Some((payload, headers));
        for _ in 0..GONE_RETRIES {
            let Some(topic) = self.topic(&name, retain, true)? else {
                // No topic and no subscriber: nothing to keep.
                self.inner.metrics.publish(0, 0);
                return Ok(PublishOutcome::default());
            };
            let Some((payload, headers)) = message.take() else {
                break;
            };
            match topic
                .submit(move |t| t.publish(payload, headers, priority, retain, qos, origin))
                .await?
            {
                Ok((outcome, None)) => {
                    self.inner
                        .metrics
                        .publish(outcome.delivered, outcome.dropped);
                    return Ok(outcome);
                }
                Ok((outcome, Some(durable))) => {
                    durable.await.map_err(BrokerError::Store)?;
                    self.inner
                        .metrics
                        .publish(outcome.delivered, outcome.dropped);
                    return Ok(outcome);
                }
                // The topic was removed under us: it hands the message back.
                Err(NotPublished::Gone(payload, headers)) => {
                    self.forget(&name, &topic);
                    message = Some((payload, headers));
                }
                Err(NotPublished::Store(e)) => return Err(BrokerError::StoreBusy(e)),
            }
        }
        Err(BrokerError::Contended)
    }

    /// Subscribes `sub` to its filter: on every matching topic, existing or
    /// created later. Each matching topic's retained message is delivered
    /// first.
    ///
    /// # Errors
    /// An invalid filter, or a topic queue refusing the task.
    pub async fn subscribe(&self, sub: Subscription) -> Result<(), BrokerError> {
        self.check_filter(&sub.filter)?;
        if let Some(remote) = self.inner.remote.get() {
            // Before the local subscribe: by the time it returns, a
            // publish on any node is heard here.
            remote.want(&sub.filter).await;
        }
        if !routing::is_wildcard(&sub.filter) {
            return self.subscribe_exact(sub).await;
        }
        let matching: Vec<Topic> = {
            let mut reg = self.write();
            reg.wildcards.insert(&sub.filter, sub.clone());
            reg.topics
                .iter()
                .filter(|(name, _)| routing::matches(&sub.filter, name))
                .map(|(_, t)| t.clone())
                .collect()
        };
        for topic in matching {
            let s = sub.clone();
            // A topic removed meanwhile is fine: if it is created again it
            // copies the subscription from the trie.
            if let Err(e) = topic.submit(move |t| t.subscribe(s)).await {
                // All or nothing: the cancel stops deliveries at once, the
                // unsubscribe tidies the topics that took it.
                sub.cancel();
                let _ = self.unsubscribe(sub.sink.id(), &sub.id, &sub.filter).await;
                return Err(e.into());
            }
        }
        Ok(())
    }

    async fn subscribe_exact(&self, sub: Subscription) -> Result<(), BrokerError> {
        for _ in 0..GONE_RETRIES {
            let Some(topic) = self.topic(&sub.filter, true, true)? else {
                continue;
            };
            let s = sub.clone();
            match topic.submit(move |t| t.subscribe(s)).await? {
                Ok(()) => return Ok(()),
                Err(Gone) => self.forget(&sub.filter, &topic),
            }
        }
        Err(BrokerError::Contended)
    }

    /// Ends the subscription `id` of `sink` on `filter`.
    ///
    /// # Errors
    /// A topic queue refusing the task.
    pub async fn unsubscribe(&self, sink: u64, id: &str, filter: &str) -> Result<(), BrokerError> {
        let topics: Vec<Topic> = if routing::is_wildcard(filter) {
            let mut reg = self.write();
            reg.wildcards
                .remove_by(filter, |s| s.sink.id() == sink && &*s.id == id);
            reg.topics
                .iter()
                .filter(|(name, _)| routing::matches(filter, name))
                .map(|(_, t)| t.clone())
                .collect()
        } else {
            self.read()
                .topics
                .get(filter)
                .cloned()
                .into_iter()
                .collect()
        };
        let id: Arc<str> = id.into();
        // Every topic is asked even if one refuses; the first error is
        // reported. (A caller that cancelled the subscription first gets no
        // more deliveries either way.)
        let mut first_error = None;
        for topic in topics {
            let id = id.clone();
            if let Err(e) = topic.submit(move |t| t.unsubscribe(sink, &id)).await {
                first_error.get_or_insert(e);
            }
        }
        match first_error {
            Some(e) => Err(e.into()),
            None => Ok(()),
        }
    }

    /// Removes topics with no subscriptions and no retained message that
    /// nothing has used since the previous sweep. Called every idle
    /// timeout, it removes topics idle for between one and two timeouts.
    /// Returns how many were removed.
    pub async fn sweep_idle(&self) -> usize {
        // Wildcard subscriptions whose subscriber is gone (an actor that
        // stopped, a session that ended without unsubscribing).
        let dead = self
            .write()
            .wildcards
            .retain(|s| !s.is_cancelled() && !s.sink.is_closed());
        if dead > 0 {
            tracing::debug!(dead, "dead wildcard subscriptions dropped");
        }
        let topics: Vec<(Arc<str>, Topic)> = self
            .read()
            .topics
            .iter()
            .map(|(n, t)| (n.clone(), t.clone()))
            .collect();
        let mut removed = 0;
        for (name, topic) in topics {
            if let Ok(true) = topic.submit(|t| t.remove_if_idle()).await {
                self.forget(&name, &topic);
                removed += 1;
            }
        }
        removed
    }

    /// The counters the hot paths add to, shared with the transports.
    pub fn metrics(&self) -> &Arc<crate::metrics::Metrics> {
        &self.inner.metrics
    }

    /// The task-queue scheduler's counters.
    pub fn scheduler_stats(&self) -> crate::taskq::SchedulerStats {
        self.inner.scheduler.stats()
    }

    /// Keeps a removed topic's or queue's task-queue counters in the totals.
    fn retire(&self, s: &crate::taskq::QueueStats) {
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

    /// The retained messages of every existing topic matching `filter`.
    ///
    /// # Errors
    /// An invalid filter.
    pub async fn retained_matching(
        &self,
        filter: &str,
    ) -> Result<Vec<Arc<Published>>, BrokerError> {
        self.check_filter(filter)?;
        let topics: Vec<Topic> = self
            .read()
            .topics
            .iter()
            .filter(|(name, _)| routing::matches(filter, name))
            .map(|(_, t)| t.clone())
            .collect();
        let mut out = Vec::new();
        for t in topics {
            if let Ok(Some(m)) = t.submit(|t| t.retained()).await {
                out.push(m);
            }
        }
        Ok(out)
    }

    /// A page of topic names in name order: those after `after`,
    /// matching `filter` if given, at most `limit`. For the admin API:
    /// each call walks the registry (no index is kept for it).
    pub fn topic_names(
        &self,
        filter: Option<&str>,
        after: Option<&str>,
        limit: usize,
    ) -> Vec<String> {
        let reg = self.read();
        let mut names: Vec<&str> = reg
            .topics
            .keys()
            .map(|n| &**n)
            .filter(|n| after.is_none_or(|a| *n > a))
            .filter(|n| filter.is_none_or(|f| routing::matches(f, n)))
            .collect();
        names.sort_unstable();
        names.truncate(limit);
        names.into_iter().map(str::to_owned).collect()
    }

    /// Subscriptions, retained flag and last sequence number of a topic.
    pub async fn topic_info(&self, name: &str) -> Option<(usize, bool, u64)> {
        let topic = self.read().topics.get(name).cloned()?;
        topic.submit(|t| t.summary()).await.ok()
    }
}

/// A broker handle that does not keep the broker alive: for sinks the
/// broker itself holds (which would otherwise form a cycle).
#[derive(Clone)]
pub struct WeakBroker {
    inner: std::sync::Weak<Inner>,
}

impl WeakBroker {
    /// The broker, if it still exists.
    pub fn upgrade(&self) -> Option<Broker> {
        self.inner.upgrade().map(|inner| Broker { inner })
    }
}

impl Broker {
    /// A handle that does not keep the broker alive.
    pub fn downgrade(&self) -> WeakBroker {
        WeakBroker {
            inner: Arc::downgrade(&self.inner),
        }
    }
}

impl std::fmt::Debug for Broker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Broker")
            .field("stats", &self.stats())
            .finish()
    }
}

#[cfg(test)]
mod tests;
