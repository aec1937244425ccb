//! The broker's hooks: how what extends the broker plugs into it without
//! the broker knowing who answers, the way sessions plug in as [`Sink`](super::Sink)s.
//!
//! - [`PublishHook`]: sees every publish before the local topics do, and
//!   may edit it, copy it elsewhere or drop it. The rules (`[[rules]]`)
//!   implement it.
//! - [`Remote`]: the other nodes. A publish is handed to it after the
//!   hook, and a queue's calls go to it when the queue's home is another
//!   node. The cluster (`[cluster]`) implements it, and the jobs' own
//!   hook, `jobs::JobsHome`, for the jobs resource.
//!
//! The assembly (`Wharf::start`) installs them, each once, before the
//! broker serves. A broker without hooks is a single node without rules:
//! the publish path then reads two empty cells.

use std::future::Future;
use std::pin::Pin;

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use super::calls::{Enqueue, Settlement};
use super::sink::Subscription;
use super::{Broker, BrokerError, Publish, Source};
use crate::protocol::frame::ErrorCode;

/// A hook's answer to come (`Send`: the broker's futures may be spawned
/// on any thread).
pub type HookFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// A call's answer to come from another node, already sent (`Send`: it
/// may be awaited on another task than the one that sent it).
pub type Answering<T> = Pin<Box<dyn Future<Output = Result<T, BrokerError>> + Send>>;

/// What sees every publish before the local topics: the rules.
pub trait PublishHook: Send + Sync {
    /// Whether the hook has anything to do: the publish path reads only
    /// this when it has not.
    fn active(&self) -> bool;

    /// Runs on `msg` (published by `source`, `depth` republishes deep):
    /// the message to publish to its own topic (maybe edited), or `None`
    /// when it is dropped. May publish and enqueue through `broker`.
    fn apply<'a>(
        &'a self,
        broker: &'a Broker,
        msg: Publish,
        source: &'a Source<'a>,
        depth: u8,
    ) -> HookFuture<'a, Option<Publish>>;
}

/// An operator's operation on a queue homed on another node.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "admin", rename_all = "snake_case")]
pub enum AdminOp {
    /// `Broker::queue_info`.
    Info,
    /// `Broker::purge_queue`.
    Purge,
    /// `Broker::delete_queue`.
    Delete,
    /// `Broker::drain_queue`.
    Drain {
        /// How long to wait for the drain.
        wait_ms: u64,
    },
    /// `Broker::redrive` (the queue is the dead-letter queue).
    Redrive {
        /// Where to, if not back where they came from.
        to: Option<String>,
    },
}

/// The other nodes, as the broker sees them: where a publish goes besides
/// the local topics, and where a queue's (or the jobs') calls go when its
/// home is another node. The cluster implements it; every method answers
/// for one node (`home`), named by [`Remote::home_elsewhere`].
pub trait Remote: Send + Sync {
    /// Hands a message published here (after the publish hook) to the
    /// other nodes, without waiting: they publish it to their own
    /// subscribers.
    fn forward(&self, msg: &Publish);

    /// The node `queue` lives on, when that is not this one (`jobs` for
    /// the jobs resource).
    fn home_elsewhere(&self, queue: &str) -> Option<String>;

    /// Sends an enqueue to `home` now (in order with this node's other
    /// calls); the future answers with its seq once it is durable there.
    ///
    /// # Errors
    /// The call could not be sent (the link's buffer is full).
    fn enqueue_sent(&self, home: &str, msg: Enqueue) -> Result<Answering<u64>, BrokerError>;

    /// Sends an enqueue to `home` without waiting for anything.
    fn enqueue_detached(&self, home: &str, msg: Enqueue);

    /// Sends a settle of `ids` (deliveries of consumer `id` on `sink`) to
    /// `home` now; the future answers once it is done there.
    ///
    /// # Errors
    /// No such consumer here, or the call could not be sent.
    fn settle_sent(
        &self,
        home: &str,
        queue: &str,
        sink: u64,
        id: &str,
        ids: Vec<u64>,
        how: Settlement,
    ) -> Result<Answering<()>, BrokerError>;

    /// Settles without waiting.
    fn settle_detached(
        &self,
        home: &str,
        queue: &str,
        sink: u64,
        id: &str,
        ids: Vec<u64>,
        how: Settlement,
    );

    /// Attaches `sub` as a consumer of `queue` on `home`; its deliveries
    /// come back to this node and go to `sub`'s sink.
    fn consume<'a>(
        &'a self,
        home: &'a str,
        queue: &'a str,
        sub: Subscription,
        prefetch: u32,
    ) -> HookFuture<'a, Result<(), BrokerError>>;

    /// Detaches consumer `id` of `sink` from `queue` on `home`.
    fn cancel<'a>(
        &'a self,
        home: &'a str,
        queue: &'a str,
        sink: u64,
        id: &'a str,
    ) -> HookFuture<'a, Result<(), BrokerError>>;

    /// An operator's call on `queue` on `home`: its answer as JSON.
    fn admin<'a>(
        &'a self,
        home: &'a str,
        queue: &'a str,
        op: AdminOp,
    ) -> HookFuture<'a, Result<serde_json::Value, BrokerError>>;

    /// Makes sure publishes on `filter` from other nodes are heard here,
    /// before a local subscription to it starts (bounded by the
    /// cluster's confirm timeout).
    fn want<'a>(&'a self, filter: &'a str) -> HookFuture<'a, ()>;

    /// Tells the other nodes that the MQTT client `client` (of
    /// `principal`) connected here, so that they close its older
    /// connections (`clean`: and end its session).
    fn announce_connect(&self, client: &str, principal: &str, clean: bool);
}

/// An operator's call on a queue on `home`, its answer read as `T`.
///
/// # Errors
/// The home's refusal or silence, or an answer that does not read as `T`.
pub(crate) async fn admin_at<T: DeserializeOwned>(
    remote: &dyn Remote,
    home: &str,
    queue: &str,
    op: AdminOp,
) -> Result<T, BrokerError> {
    let value = remote.admin(home, queue, op).await?;
    serde_json::from_value(value).map_err(|e| BrokerError::Remote {
        code: ErrorCode::Internal,
        message: format!("an unreadable answer from node {home:?}: {e}"),
    })
}
