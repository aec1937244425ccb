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
mod error;
mod histories;
mod history;
mod hold;
pub mod hooks;
mod inspect;
pub mod jobs;
mod message;
mod presence;
mod presences;
mod publish;
mod queue;
mod queues;
mod shared;
mod sink;
mod stats;
mod takeover;
mod topic;
mod topics;
mod txn;

use std::collections::HashMap;
use std::sync::Arc;

use parking_lot::{RwLock, RwLockReadGuard, RwLockWriteGuard};

pub use calls::{Enqueue, MAX_PREFETCH, Settlement};
pub use durable::{
    DURABLE_PREFETCH, DURABLE_PREFIX, ORIGIN_HEADER, QOS_HEADER, RETAIN_HEADER, TOPIC_HEADER,
    durable_queue_name, origin_tag,
};
pub use error::BrokerError;
pub use histories::TopicHistory;
pub use history::{HistoryEntry, HistoryPage, Recovery};
pub use hold::Hold;
pub use inspect::{MAX_BROWSE, Moved, PeekedMessage, QueuePage};
pub use message::{EncodingSlot, Published};
pub use presence::{Member, PresencePage, Who};
pub use presences::TopicPresence;
pub use publish::{Ingress, Publish, Source};
pub use queue::MSG_ID_HEADER;
pub use queue::{
    DEAD_LETTER_DELIVERIES, DEAD_LETTER_FROM, DEAD_LETTER_REASON, DEAD_LETTER_SEQ, MessageState,
    QueueCounters, QueueInfo, now_ms,
};
pub use queues::{DLQ_SUFFIX, Drain, MAX_DRAIN_WAIT_MS, MAX_IDS};
pub use shared::{SHARED_PREFETCH, SHARED_PREFIX, shared_queue_name};
pub use sink::{
    DeliveryOutcome, MqttSubOptions, QueuedDelivery, Sink, SubTag, Subscription, next_sink_id,
};
pub use stats::{BrokerStats, TaskqTotals};
pub use topic::PublishOutcome;
pub use txn::{TxnAck, TxnOps};

use crate::config::TopicsConfig;
use crate::routing::{FilterTrie, TopicLimits};
use crate::store::WriterHandle;
use crate::taskq::{SchedulerHandle, TaskQueue};
use topic::TopicState;

type Topic = TaskQueue<TopicState>;

/// How often queues with deadlines (ack timeouts, delays, expiry) are
/// visited: the granularity of those timers.
pub const QUEUE_TICK: std::time::Duration = std::time::Duration::from_millis(50);

/// The broker's queues part ([`Broker::queues`]): enqueue, consume,
/// settle, and the operators' tools (info, purge, browse, move, redrive,
/// drain, delete). A view that borrows the broker: cheap to make and to
/// copy, made afresh at each use (`broker.queues().enqueue(..)`). It
/// derefs to the broker so that its methods reach the broker's own
/// helpers.
#[derive(Clone, Copy)]
pub struct Queues<'a>(&'a Broker);

impl std::ops::Deref for Queues<'_> {
    type Target = Broker;

    fn deref(&self) -> &Broker {
        self.0
    }
}

/// The broker's part for subscriptions that a queue backs
/// ([`Broker::durable`]): declared queues' bindings, durable
/// subscriptions (`$durable/...`) and MQTT shared subscriptions
/// (`$share/...`). A view, as [`Queues`].
#[derive(Clone, Copy)]
pub struct DurableSubs<'a>(&'a Broker);

impl std::ops::Deref for DurableSubs<'_> {
    type Target = Broker;

    fn deref(&self) -> &Broker {
        self.0
    }
}

impl Broker {
    /// The queues part: enqueue, consume, settle, and the operators'
    /// queue tools.
    pub fn queues(&self) -> Queues<'_> {
        Queues(self)
    }

    /// The part for subscriptions backed by queues: bindings, durable and
    /// shared subscriptions.
    pub fn durable(&self) -> DurableSubs<'_> {
        DurableSubs(self)
    }
}

/// The broker: cheap to clone, shared by every connection. Its methods
/// come in parts, each in a file of its own; the parts with many methods
/// are views of their own, made at each use:
///
/// - **Topics** (`broker/topics.rs`, on `Broker`): [`Broker::publish`],
///   [`Broker::publish_from`], [`Broker::subscribe`],
///   [`Broker::unsubscribe`], [`Broker::retained_matching`],
///   [`Broker::topic_info`], [`Broker::topic_names`],
///   [`Broker::sweep_idle`], [`Broker::restore_retained`], and the name
///   checks ([`Broker::check_topic`], [`Broker::check_filter`]).
/// - **Counts** (`broker/stats.rs`, on `Broker`): [`Broker::stats`],
///   [`Broker::taskq_totals`], [`Broker::metrics`] and the like.
/// - **Hooks** (`broker/hooks.rs`): [`Broker::set_publish_hook`] (the
///   rules), [`Broker::set_remote`] (the cluster).
/// - **Transactions** (`broker/txn.rs`): [`Broker::commit`].
/// - **Topic history** ([`Broker::history`], a [`TopicHistory`] view;
///   `broker/histories.rs`, the state in `broker/history.rs`): the
///   `[[history]]` entries, recovering subscribes, reads and flushes.
/// - **Presence** ([`Broker::presence`], a [`TopicPresence`] view;
///   `broker/presences.rs`, the state in `broker/presence.rs`): who is
///   subscribed to a topic, joins and leaves.
/// - **Queues** ([`Broker::queues`], a [`Queues`] view;
///   `broker/queues.rs` and `broker/inspect.rs`): enqueue and its
///   variants, consume, settle, cancel, info, names, redrive, drain,
///   delete, purge, browse, move, and the ticks, configuration and
///   restore of queues.
/// - **Queue-backed subscriptions** ([`Broker::durable`], a
///   [`DurableSubs`] view; `broker/durable.rs` and `broker/shared.rs`):
///   declared queues' bindings, durable subscriptions, MQTT shared
///   subscriptions.
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
    /// `[[history]]`: which topics keep their last messages.
    history: RwLock<Arc<Vec<crate::config::HistoryDecl>>>,
    /// `[[presence]]`: which topics know who subscribes to them.
    presence: RwLock<Arc<Vec<crate::config::PresenceDecl>>>,
    /// Whether any `[[history]]` or `[[presence]]` entry is in force, so
    /// that a broker without them takes no lock to find out (a publish to
    /// a topic nobody wants, every subscribe).
    history_on: std::sync::atomic::AtomicBool,
    presence_on: std::sync::atomic::AtomicBool,
}

#[derive(Default)]
struct Registry {
    topics: HashMap<Arc<str>, Topic>,
    wildcards: FilterTrie<Subscription>,
    /// The task-queue counters of topics and queues removed since start,
    /// so that the totals only grow.
    retired: TaskqTotals,
    /// The topics that keep a history, which the flush visits.
    history: std::collections::HashSet<Arc<str>>,
}

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
                history: RwLock::default(),
                presence: RwLock::default(),
                history_on: std::sync::atomic::AtomicBool::new(false),
                presence_on: std::sync::atomic::AtomicBool::new(false),
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
