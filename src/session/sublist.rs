//! A connection's subscriptions, found by one of their names: a list, not
//! a map. Most connections hold one or a few subscriptions, and a hash
//! map's first room (four slots of ~130 B) would be a large part of what
//! an idle connection costs; only subscribing and unsubscribing look one
//! up, through at most `[session] max_subscriptions`.

use std::marker::PhantomData;

use crate::broker::Subscription;

/// Which of a subscription's names finds it in a [`SubList`].
pub(crate) trait SubKey {
    /// The name `sub` is found by.
    fn key(sub: &Subscription) -> &str;
}

/// Native sessions find a subscription by the id the client gave it.
pub(crate) struct ById;

impl SubKey for ById {
    fn key(sub: &Subscription) -> &str {
        &sub.id
    }
}

/// MQTT sessions hold one subscription per filter.
pub(crate) struct ByFilter;

impl SubKey for ByFilter {
    fn key(sub: &Subscription) -> &str {
        &sub.filter
    }
}

/// Subscriptions, at most one per key.
pub(crate) struct SubList<K> {
    list: Vec<Subscription>,
    key: PhantomData<K>,
}

impl<K> Default for SubList<K> {
    fn default() -> Self {
        SubList {
            list: Vec::new(),
            key: PhantomData,
        }
    }
}

impl<K: SubKey> SubList<K> {
    /// Whether a subscription has this key.
    pub(crate) fn contains(&self, key: &str) -> bool {
        self.list.iter().any(|s| K::key(s) == key)
    }

    /// Adds `sub`, replacing (and returning) the one with its key.
    pub(crate) fn insert(&mut self, sub: Subscription) -> Option<Subscription> {
        let old = self.remove(K::key(&sub));
        crate::maps::push_snug(&mut self.list, sub);
        old
    }

    /// Takes out the subscription with this key.
    pub(crate) fn remove(&mut self, key: &str) -> Option<Subscription> {
        let at = self.list.iter().position(|s| K::key(s) == key)?;
        Some(self.list.swap_remove(at))
    }

    /// How many there are.
    pub(crate) fn len(&self) -> usize {
        self.list.len()
    }

    /// Every subscription, in no particular order.
    pub(crate) fn iter(&self) -> impl Iterator<Item = &Subscription> {
        self.list.iter()
    }

    /// Takes them all out (the connection ends).
    pub(crate) fn take_all(&mut self) -> Vec<Subscription> {
        std::mem::take(&mut self.list)
    }
}

impl<K> IntoIterator for SubList<K> {
    type Item = Subscription;
    type IntoIter = std::vec::IntoIter<Subscription>;

    fn into_iter(self) -> Self::IntoIter {
        self.list.into_iter()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::broker::{Sink, SubTag};
    use crate::config::SlowConsumer;
    use crate::protocol::codec::Format;
    use crate::session::Outbound;

    fn sub(sink: &std::sync::Arc<dyn Sink>, id: &str, filter: &str) -> Subscription {
        Subscription::new(sink.clone(), id, filter, SubTag::None, None)
    }

    #[test]
    fn one_per_key_found_by_its_key_and_replaced_by_a_new_one() {
        let sink: std::sync::Arc<dyn Sink> =
            Outbound::new(1024, SlowConsumer::DropOldest, 16, Format::Json);
        let mut by_id = SubList::<ById>::default();
        assert!(by_id.insert(sub(&sink, "a", "x/#")).is_none());
        assert!(by_id.insert(sub(&sink, "b", "x/#")).is_none());
        assert!(by_id.contains("a") && by_id.contains("b") && !by_id.contains("x/#"));
        let old = by_id.insert(sub(&sink, "a", "y")).expect("replaced");
        assert_eq!(&*old.filter, "x/#");
        assert_eq!(by_id.len(), 2);
        assert_eq!(
            by_id.remove("a").map(|s| s.filter.to_string()),
            Some("y".into())
        );
        assert!(by_id.remove("a").is_none());
        let mut by_filter = SubList::<ByFilter>::default();
        by_filter.insert(sub(&sink, "s", "x/#"));
        assert!(by_filter.contains("x/#") && !by_filter.contains("s"));
        assert_eq!(by_filter.take_all().len(), 1);
        assert_eq!(by_filter.len(), 0);
    }
}
