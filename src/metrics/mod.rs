//! What the broker counts for operators: [`Metrics`], the counters the
//! hot paths add to (sharded: [`Counter`]), and readings of the process
//! taken at scrape time ([`process`]). `GET /metrics`
//! (`transport/metrics.rs`) folds these with the gauges other parts
//! already keep (topics, sessions, queues, jobs, task queues) into the
//! Prometheus text format through the `prometheus-client` crate.

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
