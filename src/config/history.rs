//! `[[history]]`: the topics whose last messages the broker keeps, with
//! offsets and an epoch, so that a client that reconnects can recover
//! what it missed (`recover` on `subscribe`, `GET /topics/{t}/history`,
//! an `EventSource`'s `Last-Event-ID`); and `[[presence]]`, the topics
//! that tell who is subscribed to them.

use serde::{Deserialize, Serialize};

use super::ConfigError;
use crate::routing::{self, TopicLimits};

/// Most messages one topic's history may keep.
pub const MAX_HISTORY_SIZE: usize = 100_000;

fn default_size() -> usize {
    100
}

/// One `[[history]]` entry: topics matching `filter` keep their last
/// `size` messages (and none older than `ttl_s`, when set). The first
/// entry whose filter matches a topic is the one that applies to it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HistoryDecl {
    /// The topics it covers (`+` and `#` wildcards).
    pub filter: String,
    /// Messages kept per topic (1 to 100,000; default 100).
    #[serde(default = "default_size")]
    pub size: usize,
    /// Seconds a message stays in the history; 0 (the default) = until
    /// `size` newer ones push it out.
    #[serde(default)]
    pub ttl_s: u64,
}

impl HistoryDecl {
    /// The entry that applies to `topic` among `decls`: the first whose
    /// filter matches it.
    pub fn for_topic<'a>(decls: &'a [HistoryDecl], topic: &str) -> Option<&'a HistoryDecl> {
        decls.iter().find(|d| routing::matches(&d.filter, topic))
    }

    /// Checks every entry: a valid filter, a size in bounds, a sane ttl.
    ///
    /// # Errors
    /// [`ConfigError::Invalid`] naming the entry and its field.
    pub(super) fn validate_all(
        decls: &[HistoryDecl],
        limits: &TopicLimits,
    ) -> Result<(), ConfigError> {
        for (i, d) in decls.iter().enumerate() {
            let invalid = |field: &str, reason: String| ConfigError::Invalid {
                key: format!("history[{i}].{field}"),
                reason,
            };
            if let Err(e) = limits.check_filter(&d.filter) {
                return Err(invalid("filter", format!("not a valid topic filter: {e}")));
            }
            if d.size == 0 || d.size > MAX_HISTORY_SIZE {
                return Err(invalid(
                    "size",
                    format!("must be between 1 and {MAX_HISTORY_SIZE}"),
                ));
            }
            if d.ttl_s > 10 * 365 * 86_400 {
                return Err(invalid("ttl_s", "must be at most ten years".into()));
            }
        }
        Ok(())
    }
}

/// One `[[presence]]` entry: topics matching `filter` know who is
/// subscribed to them (`GET /topics/{t}/presence`, the native `presence`
/// operation) and announce joins and leaves on `$presence/<topic>`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PresenceDecl {
    /// The topics it covers (`+` and `#` wildcards).
    pub filter: String,
}

impl PresenceDecl {
    /// Whether an entry among `decls` covers `topic`.
    pub fn covers(decls: &[PresenceDecl], topic: &str) -> bool {
        decls.iter().any(|d| routing::matches(&d.filter, topic))
    }

    /// Checks every entry's filter.
    ///
    /// # Errors
    /// [`ConfigError::Invalid`] naming the entry.
    pub(super) fn validate_all(
        decls: &[PresenceDecl],
        limits: &TopicLimits,
    ) -> Result<(), ConfigError> {
        for (i, d) in decls.iter().enumerate() {
            if let Err(e) = limits.check_filter(&d.filter) {
                return Err(ConfigError::Invalid {
                    key: format!("presence[{i}].filter"),
                    reason: format!("not a valid topic filter: {e}"),
                });
            }
            if d.filter.starts_with(routing::PRESENCE_PREFIX) {
                return Err(ConfigError::Invalid {
                    key: format!("presence[{i}].filter"),
                    reason: "names the presence events' own topics".into(),
                });
            }
        }
        Ok(())
    }
}
