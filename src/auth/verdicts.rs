//! A session's publish verdicts by topic, so that a principal whose
//! rights are narrower than `#` does not walk its filters on every
//! publish. One per session (native or MQTT), cleared when its principal
//! changes.

use std::collections::HashMap;

use super::{Principal, Right};

/// Most topics remembered; past it the cache starts over.
const MAX_TOPICS: usize = 1024;

/// Publish verdicts by topic.
#[derive(Debug, Default)]
pub struct PublishVerdicts {
    /// Made at the first verdict: a session whose principal may publish
    /// anywhere (or that never publishes) holds 8 B, not a table's 40
    /// (so boxed on purpose).
    #[allow(clippy::box_collection)]
    by_topic: Option<Box<HashMap<Box<str>, bool, foldhash::fast::RandomState>>>,
}

impl PublishVerdicts {
    /// Whether `p` may publish to `topic`, from the cache when it can.
    pub fn may(&mut self, p: &Principal, topic: &str) -> bool {
        if !p.grants().publish_walks() {
            // Presence events are the broker's to publish, whatever the
            // grants say.
            return !topic.starts_with(crate::routing::PRESENCE_PREFIX);
        }
        let by_topic = self.by_topic.get_or_insert_default();
        if let Some(ok) = by_topic.get(topic) {
            return *ok;
        }
        let ok = p.may(Right::Publish(topic));
        if by_topic.len() >= MAX_TOPICS {
            by_topic.clear();
        }
        by_topic.insert(topic.into(), ok);
        ok
    }

    /// Forgets every verdict (the principal changed).
    pub fn clear(&mut self) {
        self.by_topic = None;
    }
}
