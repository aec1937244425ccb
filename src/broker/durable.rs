//! Bindings and durable subscriptions: topic filters whose messages a
//! [`BindSink`] copies into a queue (declared with `bind` in `[[queues]]`,
//! or made by a durable subscription), and the durable subscriptions
//! themselves, each a queue `$durable/<client id>/<subscription id>` bound
//! to one filter, its binding kept in the store with the queue.
//!
//! # Design notes
//!
//! ## Bindings
//! A binding is an ordinary topic subscription whose sink is a `BindSink`:
//! its `deliver` runs inside the topic's task, so it submits the queue's
//! enqueue with `execute` (priority 0, the `topic` header, and for MQTT
//! publishes `mqtt-qos`, `mqtt-retain`, `mqtt-origin`) and returns without
//! waiting for the task or its write; a queue too busy to take it makes
//! the delivery `Dropped`. The retained copy a new subscription gets is
//! history, not news, and is not enqueued. The publisher's receipt does
//! not wait for the bound queues' writes. `declare_queues` creates the
//! `[[queues]]` and binds their `bind` filters at start, except for queues
//! homed on another node, whose home does it.
//!
//! ## Durable subscriptions
//! `durable_queue_name` is `$durable/<client id>/<subscription id>`; both
//! ids are non-empty and free of `/`, `+`, `#` and NUL, so two pairs never
//! give one name. The queue has no dead-letter queue and no delivery
//! limit. `subscribe_durable` creates it on first use; when the filter
//! differs from the one bound it binds the new filter (replacing the old
//! binding; the backlog stays) and writes the queue's `queues` record again
//! with `{"bind":[filter]}`, awaiting its `Durable`; then the subscription
//! consumes the queue with its `prefetch` credit (`DURABLE_PREFETCH` by
//! default), so deliveries, settling, ack timeouts and redelivery are a
//! queue's. A native session refuses a durable subscribe (`invalid_field`)
//! when `hello` named no client, and keys it by the principal's namespace.
//! A session that ends cancels its consumer only; `unsubscribe_durable`
//! unbinds, cancels the consumer and deletes the queue with its record and
//! backlog. At start `restore_queues` binds again the queues whose record
//! holds filters, before the server accepts connections.
//!
//! This is interest tracking by copies: each subscription's queue holds
//! its own copy of each matching message, deleted when that subscription
//! acks it or ends, so nothing that no subscription wants stays on disk.
//! The price is one stored copy, and one write, per durable subscription
//! and message.
//!
//! ## Shared subscriptions
//! `$share/{group}/{filter}` (MQTT) is a queue `$shared/<group>/<filter,
//! escaped>` bound like a durable subscription's, but held in memory only
//! (no store writes, no dead-letter queue), whose members are its
//! consumers with `SHARED_PREFETCH` credit each (`shared.rs`): round robin
//! over members with credit gives the balance, and a leaving member's
//! deliveries go to the next. Joins and leaves of every group go one at a
//! time through one async mutex, so a leave that finds no member left
//! deletes the queue and its binding without racing a join; deliveries
//! never take that mutex.

use std::sync::Arc;

use super::calls::MAX_PREFETCH;
use super::queue::{Incoming, QueueHandle, now_ms};
use super::sink::{DeliveryOutcome, Sink, Subscription, next_sink_id};
use super::{Broker, BrokerError, DurableSubs, Published};
use crate::config::QueueDecl;
use crate::routing;
use crate::store::queues as records;
use crate::taskq::Lane;

/// Header a bound queue adds to each copied topic message: the topic.
pub const TOPIC_HEADER: &str = "topic";

/// Header a bound queue adds to a copied message published with an MQTT
/// QoS above 0: the QoS.
pub const QOS_HEADER: &str = "mqtt-qos";

/// Header a bound queue adds to a copied message its publisher sent with
/// the retain flag: `1` (for MQTT 5's retain as published).
pub const RETAIN_HEADER: &str = "mqtt-retain";

/// Header a bound queue adds to a copied message an MQTT connection
/// published: that connection, as [`origin_tag`] writes it (for MQTT 5's
/// no local).
pub const ORIGIN_HEADER: &str = "mqtt-origin";

/// The [`ORIGIN_HEADER`] value of the connection whose sink is `sink`:
/// the sink id after a number drawn once per process, so a message kept
/// across a restart is never taken for a new connection's own.
pub fn origin_tag(sink: u64) -> String {
    static BOOT: std::sync::LazyLock<u64> = std::sync::LazyLock::new(|| {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64);
        nanos ^ (u64::from(std::process::id()) << 32)
    });
    format!("{:016x}-{sink}", *BOOT)
}

/// Prefix of the queues that hold durable subscriptions:
/// `$durable/<client id>/<subscription id>`.
pub const DURABLE_PREFIX: &str = "$durable/";

/// Credit of a durable subscription that does not ask for one.
pub const DURABLE_PREFETCH: u32 = 100;

/// What the store keeps with a queue: the filters bound to it when they
/// were not declared in config (durable subscriptions).
#[derive(Debug, Default, serde::Serialize, serde::Deserialize)]
pub(super) struct StoredMeta {
    #[serde(default)]
    pub(super) bind: Vec<String>,
}

/// Copies the messages of bound topic filters into a queue.
struct BindSink {
    id: u64,
    name: Arc<str>,
    queue: QueueHandle,
}

impl Sink for BindSink {
    fn id(&self) -> u64 {
        self.id
    }

    fn deliver(&self, _sub: &Subscription, msg: &Arc<Published>) -> DeliveryOutcome {
        if msg.retained {
            // A retained copy is history, not news: not enqueued again.
            return DeliveryOutcome::Queued;
        }
        let mut headers = msg.headers.clone();
        headers.insert(TOPIC_HEADER.into(), msg.topic.to_string());
        if msg.qos > 0 {
            headers.insert(QOS_HEADER.into(), msg.qos.to_string());
        }
        if msg.retain_flag {
            headers.insert(RETAIN_HEADER.into(), "1".into());
        }
        if msg.origin != 0 {
            headers.insert(ORIGIN_HEADER.into(), origin_tag(msg.origin));
        }
        // A payload of its own: a queue may keep the message for long, and
        // a payload read off a connection is a slice of its read buffer.
        let payload = bytes::Bytes::copy_from_slice(&msg.payload);
        let incoming = Incoming::new(0, headers, payload, None);
        let name = self.name.clone();
        let sent = self.queue.tq.execute(Lane::Normal, move |q| {
            if let Err(e) = q.enqueue(incoming, now_ms()) {
                tracing::warn!(queue = %name, "bound queue refused a topic message: {e:?}");
            }
        });
        match sent {
            Ok(()) => DeliveryOutcome::Queued,
            Err(_) => DeliveryOutcome::Dropped,
        }
    }

    fn is_closed(&self) -> bool {
        false
    }
}

/// The queue holding durable subscription `sub` of client `client`.
///
/// # Errors
/// [`BrokerError::InvalidDurable`] if either name has a character that
/// would make the queue name ambiguous (`/`, `+`, `#`, NUL) or is empty.
pub fn durable_queue_name(client: &str, sub: &str) -> Result<String, BrokerError> {
    let bad = |s: &str| s.is_empty() || s.contains(['/', '+', '#', '\0']);
    if bad(client) || bad(sub) {
        return Err(BrokerError::InvalidDurable(
            "client id and subscription id must be non-empty without '/', '+', '#' or NUL".into(),
        ));
    }
    let name = format!("{DURABLE_PREFIX}{client}/{sub}");
    // A derived name: its parts are bounded where they enter (client ids,
    // subscription ids); here only its shape is checked.
    routing::TopicLimits::WIDEST
        .check_topic(&name)
        .map_err(BrokerError::InvalidTopic)?;
    Ok(name)
}

impl DurableSubs<'_> {
    /// Creates the declared queues and subscribes each to its bound topic
    /// filters.
    ///
    /// # Errors
    /// A filter that is not valid, or a topic refusing the subscription.
    pub async fn declare_queues(self, declared: &[QueueDecl]) -> Result<(), BrokerError> {
        for d in declared {
            if self.home_elsewhere(&d.name).is_some() {
                // Its home creates and binds it.
                continue;
            }
            let Some(queue) = self.queue(&d.name, true)? else {
                continue;
            };
            self.bind(&d.name, &queue, &d.bind).await?;
        }
        Ok(())
    }
    /// Subscribes durably: the queue `$durable/<client>/<consumer.id>`
    /// (see [`durable_queue_name`]; `consumer.filter` must be that name)
    /// collects the messages of `filter` from now on, across disconnects
    /// and restarts, and `consumer` consumes it with `prefetch` credit.
    /// Subscribing again (after a reconnect) resumes the backlog; with
    /// another filter the binding is replaced and the backlog kept.
    ///
    /// # Errors
    /// An invalid filter or name, or a refused subscription or consumer.
    pub async fn subscribe_durable(
        self,
        client: &str,
        filter: &str,
        consumer: Subscription,
        prefetch: u32,
    ) -> Result<(), BrokerError> {
        self.check_filter(filter)?;
        if prefetch == 0 || prefetch > MAX_PREFETCH {
            return Err(BrokerError::InvalidPrefetch(prefetch));
        }
        let name = durable_queue_name(client, &consumer.id)?;
        if *consumer.filter != *name {
            return Err(BrokerError::InvalidDurable(format!(
                "the consumer must name the queue {name:?}"
            )));
        }
        let queue = self.queue(&name, true)?.ok_or(BrokerError::Contended)?;
        if self.bound_filters(&name) != [filter] {
            self.bind(&name, &queue, &[filter.to_owned()]).await?;
            if let Some(w) = &self.inner.writer {
                let meta = serde_json::to_vec(&StoredMeta {
                    bind: vec![filter.to_owned()],
                })
                .map_err(|e| {
                    BrokerError::Store(crate::store::CommitError(format!(
                        "encoding a binding: {e}"
                    )))
                })?;
                w.submit(vec![records::put_queue(&name, queue.id, &meta)])?
                    .await
                    .map_err(BrokerError::Store)?;
            }
        }
        Ok(queue
            .tq
            .submit(move |q| q.consume(consumer, prefetch, now_ms()))
            .await??)
    }
    /// The durable subscriptions of `client`: (subscription id, filters).
    pub fn durable_subscriptions(self, client: &str) -> Vec<(String, Vec<String>)> {
        let prefix = format!("{DURABLE_PREFIX}{client}/");
        let reg = self.inner.queues.read();
        let mut out: Vec<(String, Vec<String>)> = reg
            .binds
            .iter()
            .filter_map(|(name, subs)| {
                let id = name.strip_prefix(&prefix)?;
                Some((
                    id.to_owned(),
                    subs.iter().map(|s| s.filter.to_string()).collect(),
                ))
            })
            .collect();
        out.sort();
        out
    }
    /// Ends a durable subscription for good: the binding, the consumer of
    /// `sink` if attached, and the backlog are deleted.
    ///
    /// # Errors
    /// The queue refusing the tasks, or the store failing the deletes.
    pub async fn unsubscribe_durable(
        self,
        client: &str,
        sub_id: &str,
        sink: u64,
    ) -> Result<bool, BrokerError> {
        let name = durable_queue_name(client, sub_id)?;
        self.unbind(&name).await;
        let _ = self.queues().cancel_consumer(&name, sink, sub_id).await;
        self.queues().delete_queue(&name).await
    }
}

impl Broker {
    /// Makes `filters` the topic filters copied into `queue` (replacing
    /// any it had).
    pub(super) async fn bind(
        &self,
        name: &str,
        queue: &QueueHandle,
        filters: &[String],
    ) -> Result<(), BrokerError> {
        self.unbind(name).await;
        let mut subs = Vec::with_capacity(filters.len());
        for filter in filters {
            let sink = Arc::new(BindSink {
                id: next_sink_id(),
                name: name.into(),
                queue: queue.clone(),
            });
            let sub = Subscription::new(
                sink,
                &format!("bind:{name}"),
                filter,
                crate::broker::SubTag::None,
                None,
            );
            if let Err(e) = self.subscribe(sub.clone()).await {
                for s in subs {
                    self.drop_binding(s).await;
                }
                return Err(e);
            }
            subs.push(sub);
        }
        self.queue_registry().binds.insert(name.to_owned(), subs);
        Ok(())
    }
    /// Stops copying topic messages into the queue `name`.
    pub(super) async fn unbind(&self, name: &str) {
        let old = self.queue_registry().binds.remove(name).unwrap_or_default();
        for sub in old {
            self.drop_binding(sub).await;
        }
    }
    async fn drop_binding(&self, sub: Subscription) {
        sub.cancel();
        let _ = self.unsubscribe(sub.sink.id(), &sub.id, &sub.filter).await;
    }
    /// The filters bound to a queue.
    pub(super) fn bound_filters(&self, name: &str) -> Vec<String> {
        self.inner
            .queues
            .read()
            .binds
            .get(name)
            .map(|subs| subs.iter().map(|s| s.filter.to_string()).collect())
            .unwrap_or_default()
    }
}
