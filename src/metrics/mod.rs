//! What the broker counts for operators: [`Metrics`], the counters the
//! hot paths add to (sharded: [`Counter`]), and readings of the process
//! taken at scrape time ([`process`]). `GET /metrics`
//! (`transport/metrics.rs`) folds these with the gauges other parts
//! already keep (topics, sessions, queues, jobs, task queues) into the
//! Prometheus text format through the `prometheus-client` crate.
//!
//! # Design notes
//!
//! ## Counting on the hot path
//! Only events on the hot paths are counted here: connections, frames and
//! bytes by protocol (the transports), publishes and what they reached
//! (`Metrics::publish`, once per publish from its outcome, not per
//! delivery), bytes written (`OutboundStream`). A `Counter` is 64
//! cache-padded shards: each of the first 63 threads that count owns one
//! and adds with a relaxed load and store (no locked instruction, no cache
//! line shared with another thread); later threads share the last with
//! `fetch_add`; a scrape sums the shards. Counting a publish costs about
//! 1 ns (`benches/counters.rs`). The price is memory: 8 KiB per counter,
//! under 150 KiB for the 18 counters of a broker.
//!
//! ## Everything else, at scrape time
//! `transport/metrics.rs` reads the rest from what already keeps it: the
//! broker's stats and queue infos, `Jobs::info` and `Jobs::census` (jobs by
//! kind and status in one pass, never on the jobs' hot path), the
//! sessions, the scheduler's counters, the authentication failures,
//! `process` (`/proc/self`) and the store's directory. Task-queue series
//! sum each topic's and queue's own counters, which the claim holder
//! already writes with a plain store; topics and queues removed since start
//! are folded into a retired total under the registry lock, so the sums
//! only grow. The store writer times each group's flush and fsync and
//! counts its submissions into `Histogram`s (fixed buckets in atomics, one
//! observation per group, not per message).
//!
//! The exposition format is `prometheus-client`'s (the Prometheus
//! project's Rust client): its `Collector` encodes values computed on the
//! spot, so the hot paths keep their own counters and the format is the
//! crate's. The `metrics` facade would have put an atomic of its own behind
//! every counter. No series is labelled by topic (their number is
//! unbounded), and per-queue and per-kind series are capped (100, the rest
//! summed as `other`).

mod counter;
mod histogram;
pub mod process;

pub use counter::{Counter, shard};
pub use histogram::{Histogram, StoreStats};

/// How a connection reached the broker: the `protocol` label.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Protocol {
    /// The native protocol over WebSocket (`/ws`).
    Native,
    /// MQTT over WebSocket (`/mqtt`, `/`).
    MqttWs,
    /// MQTT over TCP or TLS.
    MqttTcp,
    /// An embedding app's typed sockets ([`crate::sockets`]).
    Socket,
}

impl Protocol {
    /// Every protocol, in label order.
    pub const ALL: [Protocol; 4] = [
        Protocol::Native,
        Protocol::MqttWs,
        Protocol::MqttTcp,
        Protocol::Socket,
    ];

    /// The label value.
    pub fn as_str(self) -> &'static str {
        match self {
            Protocol::Native => "native",
            Protocol::MqttWs => "mqtt_ws",
            Protocol::MqttTcp => "mqtt_tcp",
            Protocol::Socket => "socket",
        }
    }

    fn index(self) -> usize {
        self as usize
    }
}

/// A counter per protocol.
#[derive(Debug, Default)]
pub struct PerProtocol([Counter; 4]);

impl PerProtocol {
    /// Adds `n` for `p`.
    #[inline]
    pub fn add(&self, p: Protocol, n: u64) {
        self.0[p.index()].add(n);
    }

    /// The count for `p`.
    pub fn get(&self, p: Protocol) -> u64 {
        self.0[p.index()].get()
    }
}

/// The broker's counters. One per broker, shared (`Arc`) by everything
/// that counts; every field only grows.
#[derive(Debug, Default)]
pub struct Metrics {
    /// Connections accepted, by protocol.
    pub connections: PerProtocol,
    /// Frames (WebSocket messages, or reads of an MQTT TCP stream)
    /// received, by protocol.
    pub frames_in: PerProtocol,
    /// Bytes received on WebSocket and MQTT connections, by protocol.
    pub bytes_in: PerProtocol,
    /// Bytes written to WebSocket and MQTT connections.
    pub bytes_out: Counter,
    /// Frames refused or connections closed for going past the rate.
    pub rate_limited: Counter,
    /// MQTT publishes whose acknowledgement waited for a subscriber that
    /// was behind (`[mqtt] slow_subscriber = "hold"`).
    pub mqtt_publishes_held: Counter,
    /// MQTT subscribers disconnected for keeping a publisher waiting past
    /// `[mqtt] hold_timeout_ms`.
    pub mqtt_subscribers_expelled: Counter,
    /// Messages published to topics (every way in).
    pub published: Counter,
    /// Deliveries queued to subscribers.
    pub delivered: Counter,
    /// Deliveries the slow-consumer policy dropped.
    pub dropped_slow: Counter,
    /// Publishes that reached no subscriber.
    pub unrouted: Counter,
    /// Retained messages held now (a gauge: topics add and take away as
    /// retained publishes set and clear them; off the hot path).
    pub retained: std::sync::atomic::AtomicI64,
    /// Topic history messages handed to the store (`[[history]]`).
    pub history_written: Counter,
    /// Connection writers running now (a gauge, kept by
    /// `OutboundStream`): one per WebSocket, and one per MQTT/TCP
    /// connection with traffic in about the last second (a quiet one
    /// retires its writer).
    pub writers: std::sync::atomic::AtomicI64,
    /// MQTT/TCP connections parked now (a gauge): quiet for `[mqtt]
    /// park_after_ms`, held out of any task until they read, are sent
    /// something or reach their deadline.
    pub parked: std::sync::atomic::AtomicI64,
}

impl Metrics {
    /// Counts one publish and what it reached.
    #[inline]
    pub fn publish(&self, delivered: usize, dropped: usize) {
        let i = shard();
        self.published.add_at(i, 1);
        if delivered > 0 {
            self.delivered.add_at(i, delivered as u64);
        }
        if dropped > 0 {
            self.dropped_slow.add_at(i, dropped as u64);
        }
        if delivered == 0 && dropped == 0 {
            self.unrouted.add_at(i, 1);
        }
    }
}
