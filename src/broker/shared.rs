//! Shared subscriptions: a group of subscribers splits one filter's
//! messages, each message going to one member. A group is a queue
//! `$shared/<group>/<filter, escaped>` bound to the filter, kept in
//! memory only, whose members are its competing consumers: deliveries
//! spread round robin over the members with credit, a member that leaves
//! gives its unacknowledged deliveries back to the others, and the last
//! member's leaving ends the group (the queue and its binding go).

use super::calls::MAX_PREFETCH;
use super::queue::now_ms;
use super::sink::Subscription;
use super::{BrokerError, DurableSubs};
use crate::routing;

/// Prefix of the queues that carry shared subscription groups.
pub const SHARED_PREFIX: &str = "$shared/";

/// Credit of each member of a shared subscription.
pub const SHARED_PREFETCH: u32 = 100;

/// The queue carrying group `group`'s shared subscription to `filter`:
/// the filter's wildcards and `%` are escaped (`%2B`, `%23`, `%25`) so
/// that the name is a topic name and two filters never share it.
///
/// # Errors
/// [`BrokerError::Invalid`] for an empty group or one with `/`, `+`, `#`
/// or NUL (MQTT's rule for share names); an invalid name.
pub fn shared_queue_name(group: &str, filter: &str) -> Result<String, BrokerError> {
    if group.is_empty() || group.contains(['/', '+', '#', '\0']) {
        return Err(BrokerError::Invalid(format!(
            "share name {group:?}: must be non-empty, without '/', '+', '#' or NUL"
        )));
    }
    let mut name = String::with_capacity(SHARED_PREFIX.len() + group.len() + filter.len() + 8);
    name.push_str(SHARED_PREFIX);
    name.push_str(group);
    name.push('/');
    for c in filter.chars() {
        match c {
            '+' => name.push_str("%2B"),
            '#' => name.push_str("%23"),
            '%' => name.push_str("%25"),
            c => name.push(c),
        }
    }
    routing::TopicLimits::WIDEST
        .check_topic(&name)
        .map_err(BrokerError::InvalidTopic)?;
    Ok(name)
}

/// Whether `name` is a shared subscription group's queue (kept in memory
/// only, with no dead-letter queue).
pub(super) fn is_shared(name: &str) -> bool {
    name.starts_with(SHARED_PREFIX)
}

impl DurableSubs<'_> {
    /// Adds `member` (its `filter` must be the group's queue name, see
    /// [`shared_queue_name`]) to group `group`'s shared subscription to
    /// `filter`, creating the group if it has no members.
    ///
    /// # Errors
    /// An invalid group, filter or prefetch; a duplicate member; an
    /// overloaded queue.
    pub async fn join_shared(
        self,
        group: &str,
        filter: &str,
        member: Subscription,
        prefetch: u32,
    ) -> Result<(), BrokerError> {
        self.check_filter(filter)?;
        if prefetch == 0 || prefetch > MAX_PREFETCH {
            return Err(BrokerError::InvalidPrefetch(prefetch));
        }
        let name = shared_queue_name(group, filter)?;
        if *member.filter != *name {
            return Err(BrokerError::Invalid(format!(
                "the member must name the queue {name:?}"
            )));
        }
        // Joins and leaves one at a time: a leave that ends a group never
        // deletes the queue under a join.
        let _membership = self.inner.shared.lock().await;
        let queue = self.queue(&name, true)?.ok_or(BrokerError::Contended)?;
        if self.bound_filters(&name) != [filter] {
            self.bind(&name, &queue, &[filter.to_owned()]).await?;
        }
        Ok(queue
            .tq
            .submit(move |q| q.consume(member, prefetch, now_ms()))
            .await??)
    }
    /// Takes member `id` of `sink` out of group `group`'s shared
    /// subscription to `filter`; its unacknowledged deliveries go to the
    /// other members. The last member's leaving ends the group.
    ///
    /// # Errors
    /// An invalid group, or the queue refusing the tasks.
    pub async fn leave_shared(
        self,
        group: &str,
        filter: &str,
        sink: u64,
        id: &str,
    ) -> Result<(), BrokerError> {
        let name = shared_queue_name(group, filter)?;
        let _membership = self.inner.shared.lock().await;
        let Some(queue) = self.queue(&name, false)? else {
            return Ok(());
        };
        let owned: std::sync::Arc<str> = id.into();
        let left = queue
            .tq
            .submit_high(move |q| {
                let _ = q.cancel(sink, &owned, now_ms());
                q.info().consumers
            })
            .await?;
        if left == 0 {
            self.unbind(&name).await;
            self.queues().delete_queue(&name).await?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_escape_wildcards_and_refuse_bad_groups() {
        assert_eq!(
            shared_queue_name("g", "a/+/#").unwrap(),
            "$shared/g/a/%2B/%23"
        );
        // A literal "%2B" level is not the wildcard's name.
        assert_ne!(
            shared_queue_name("g", "a/%2B").unwrap(),
            shared_queue_name("g", "a/+").unwrap()
        );
        for bad in ["", "a/b", "a+", "#", "a\0"] {
            assert!(shared_queue_name(bad, "t").is_err(), "{bad:?}");
        }
    }
}
