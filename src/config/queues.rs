//! Queue settings: `[queue_defaults]` ([`QueueOptions`]) and each
//! `[[queues]]` entry ([`QueueDecl`]), with their checks.

use serde::{Deserialize, Serialize};

use super::ConfigError;

/// What happens to a queue message whose time to live passes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ExpiredPolicy {
    /// Move it to the dead-letter queue (reason `expired`).
    #[default]
    DeadLetter,
    /// Delete it.
    Drop,
}

/// A queue's options (`[queue_defaults]`, or one `[[queues]]` entry).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct QueueOptions {
    /// Milliseconds a delivery may stay unacknowledged before it goes back
    /// to the queue (a consumer extends it with `touch`).
    pub ack_timeout_ms: u64,
    /// Deliveries after which a message that comes back (nack, timeout,
    /// consumer gone) goes to the dead-letter queue; 0 = no limit.
    pub max_deliveries: u32,
    /// The dead-letter queue's name; empty = `<name>.dlq`.
    pub dead_letter: String,
    /// Delays before redelivery after a nack without a delay, by delivery
    /// count (the last repeats); empty = at once.
    pub backoff_ms: Vec<u64>,
    /// Milliseconds a message lives in the queue; 0 = for ever. A message
    /// may ask for less.
    pub ttl_ms: u64,
    /// `dead_letter` or `drop`: what happens to expired messages.
    pub expired: ExpiredPolicy,
    /// Most messages the queue holds (ready, delayed and in flight); an
    /// enqueue past it is refused with `queue_full`.
    pub max_length: u64,
    /// Messages kept in memory; the rest wait on disk and are read back as
    /// consumers catch up.
    pub memory_window: usize,
    /// Milliseconds during which an enqueue that repeats a message id
    /// (header `msg-id`) the queue already took is answered with the
    /// first one's seq and stores nothing; 0 = no deduplication.
    pub dedupe_window_ms: u64,
}

impl Default for QueueOptions {
    fn default() -> Self {
        QueueOptions {
            ack_timeout_ms: 30_000,
            max_deliveries: 5,
            dead_letter: String::new(),
            backoff_ms: vec![1_000, 5_000, 30_000],
            ttl_ms: 0,
            expired: ExpiredPolicy::DeadLetter,
            max_length: 1_000_000,
            memory_window: 10_000,
            dedupe_window_ms: 120_000,
        }
    }
}

/// One `[[queues]]` entry: a queue that exists from the start. Options it
/// does not set come from `[queue_defaults]`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct QueueDecl {
    /// The queue's name.
    pub name: String,
    /// Topic filters whose messages are copied into the queue.
    #[serde(default)]
    pub bind: Vec<String>,
    /// See [`QueueOptions::ack_timeout_ms`].
    #[serde(default)]
    pub ack_timeout_ms: Option<u64>,
    /// See [`QueueOptions::max_deliveries`].
    #[serde(default)]
    pub max_deliveries: Option<u32>,
    /// See [`QueueOptions::dead_letter`].
    #[serde(default)]
    pub dead_letter: Option<String>,
    /// See [`QueueOptions::backoff_ms`].
    #[serde(default)]
    pub backoff_ms: Option<Vec<u64>>,
    /// See [`QueueOptions::ttl_ms`].
    #[serde(default)]
    pub ttl_ms: Option<u64>,
    /// See [`QueueOptions::expired`].
    #[serde(default)]
    pub expired: Option<ExpiredPolicy>,
    /// See [`QueueOptions::max_length`].
    #[serde(default)]
    pub max_length: Option<u64>,
    /// See [`QueueOptions::memory_window`].
    #[serde(default)]
    pub memory_window: Option<usize>,
    /// See [`QueueOptions::dedupe_window_ms`].
    #[serde(default)]
    pub dedupe_window_ms: Option<u64>,
    /// The cluster node that holds this queue (one of `cluster.members`);
    /// unset: chosen by rendezvous hashing of the name.
    #[serde(default)]
    pub home: Option<String>,
}

impl QueueDecl {
    /// The entry's options, with `defaults` for what it leaves out.
    pub fn options(&self, defaults: &QueueOptions) -> QueueOptions {
        let d = defaults.clone();
        QueueOptions {
            ack_timeout_ms: self.ack_timeout_ms.unwrap_or(d.ack_timeout_ms),
            max_deliveries: self.max_deliveries.unwrap_or(d.max_deliveries),
            dead_letter: self.dead_letter.clone().unwrap_or(d.dead_letter),
            backoff_ms: self.backoff_ms.clone().unwrap_or(d.backoff_ms),
            ttl_ms: self.ttl_ms.unwrap_or(d.ttl_ms),
            expired: self.expired.unwrap_or(d.expired),
            max_length: self.max_length.unwrap_or(d.max_length),
            memory_window: self.memory_window.unwrap_or(d.memory_window),
            dedupe_window_ms: self.dedupe_window_ms.unwrap_or(d.dedupe_window_ms),
        }
    }
}

impl QueueOptions {
    pub(super) fn validate(
        &self,
        key: &str,
        limits: &crate::routing::TopicLimits,
    ) -> Result<(), ConfigError> {
        let invalid = |field: &str, reason: &str| ConfigError::Invalid {
            key: format!("{key}.{field}"),
            reason: reason.to_owned(),
        };
        if self.ack_timeout_ms == 0 || self.ack_timeout_ms > 86_400_000 {
            return Err(invalid("ack_timeout_ms", "must be between 1 and 86400000"));
        }
        if self.backoff_ms.len() > 64 || self.backoff_ms.iter().any(|&b| b > 86_400_000) {
            return Err(invalid(
                "backoff_ms",
                "at most 64 steps, each at most 86400000",
            ));
        }
        if self.max_length == 0 {
            return Err(invalid("max_length", "must be at least 1"));
        }
        if self.dedupe_window_ms > 86_400_000 {
            return Err(invalid(
                "dedupe_window_ms",
                "must be at most 86400000 (a day)",
            ));
        }
        if self.memory_window == 0 || self.memory_window > 10_000_000 {
            return Err(invalid("memory_window", "must be between 1 and 10000000"));
        }
        if !self.dead_letter.is_empty() {
            limits
                .check_topic(&self.dead_letter)
                .map_err(|e| invalid("dead_letter", &format!("not a valid queue name: {e}")))?;
        }
        Ok(())
    }
}
