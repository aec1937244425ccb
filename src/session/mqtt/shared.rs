//! An MQTT session's shared subscriptions: `SUBSCRIBE $share/{group}/{filter}`
//! (as Mosquitto, EMQX and MQTT 5 spell it) makes the connection a member
//! of the group's shared subscription ([`Broker::join_shared`]): each
//! message of `filter` goes to one member, QoS 1 and 2 deliveries a member
//! leaves unacknowledged go to another. Memberships end with the
//! connection, persistent session or not: a group is not kept while its
//! members are away.
//!
//! [`Broker::join_shared`]: crate::broker::Broker::join_shared

use super::*;
use crate::broker::{SHARED_PREFETCH, shared_queue_name};

/// The prefix of a shared subscription's filter.
const SHARE: &str = "$share/";

/// Whether a SUBSCRIBE or UNSUBSCRIBE filter names a shared subscription.
pub(super) fn is_share(filter: &str) -> bool {
    filter.starts_with(SHARE)
}

/// `$share/{group}/{filter}` split into group and filter.
fn parse_share(full: &str) -> Option<(&str, &str)> {
    let (group, filter) = full.strip_prefix(SHARE)?.split_once('/')?;
    (!group.is_empty() && !filter.is_empty()).then_some((group, filter))
}

impl MqttSession {
    /// SUBSCRIBE to `$share/{group}/{filter}`: joins the group (again, at
    /// this QoS, if already a member). Needs the subscribe right on
    /// `filter`; no retained messages are sent (MQTT 5 §4.8.2).
    pub(super) async fn subscribe_shared(&mut self, full: String, opts: MqttSubOptions) -> u8 {
        let Some((group, filter)) = parse_share(&full) else {
            return reason::TOPIC_FILTER_INVALID;
        };
        if self.broker.topic_limits().check_filter(filter).is_err() {
            return reason::TOPIC_FILTER_INVALID;
        }
        let allowed = self
            .principal
            .as_ref()
            .is_some_and(|p| p.may(Right::Subscribe(filter)));
        if !allowed {
            tracing::info!(
                principal = self.principal.as_ref().map(|p| p.id()),
                %filter,
                group,
                "MQTT shared subscription refused: not allowed"
            );
            return reason::NOT_AUTHORIZED;
        }
        let Ok(queue) = shared_queue_name(group, filter) else {
            return reason::TOPIC_FILTER_INVALID;
        };
        let (group, filter) = (group.to_owned(), filter.to_owned());
        self.leave_shared(&full).await;
        match &self.connected {
            Some(c) if c.rare().shared.len() < self.cfg.max_subscriptions => {}
            _ => return reason::QUOTA_EXCEEDED,
        }
        let member = Subscription::new(
            self.sink.clone(),
            &full,
            &queue,
            sink::tag(opts),
            Some(crate::broker::EncodingSlot::MqttPublish),
        );
        let joined = self
            .broker
            .durable()
            .join_shared(&group, &filter, member.clone(), SHARED_PREFETCH)
            .await;
        if let Err(e) = joined {
            tracing::debug!(%full, "MQTT shared subscription refused: {e}");
            return reason::UNSPECIFIED_ERROR;
        }
        if let Some(c) = self.connected.as_mut() {
            c.rare_mut().shared.insert(full, member);
        }
        opts.qos
    }

    /// Leaves the shared subscription `full` names; false if not a
    /// member.
    pub(super) async fn leave_shared(&mut self, full: &str) -> bool {
        let Some(member) = self
            .connected
            .as_mut()
            .and_then(|c| c.rare_if_used()?.shared.remove(full))
        else {
            return false;
        };
        leave(&self.broker, self.sink.id, full, member).await;
        true
    }
}

/// Ends one membership: no delivery reaches `member` from now on, and
/// what it holds unacknowledged goes to the other members.
pub(super) async fn leave(broker: &Broker, sink: u64, full: &str, member: Subscription) {
    member.cancel();
    let Some((group, filter)) = parse_share(full) else {
        return;
    };
    if let Err(e) = broker
        .durable()
        .leave_shared(group, filter, sink, &member.id)
        .await
    {
        tracing::warn!(%full, "leaving a shared subscription failed: {e}");
    }
}

#[cfg(test)]
mod share_tests {
    use super::*;

    #[test]
    fn share_filters_split_into_group_and_filter() {
        assert_eq!(parse_share("$share/g/a/+"), Some(("g", "a/+")));
        assert_eq!(parse_share("$share/g/#"), Some(("g", "#")));
        for bad in ["$share/g", "$share//a", "$share/g/", "$sharex/g/a"] {
            assert_eq!(parse_share(bad), None, "{bad}");
        }
        assert!(is_share("$share/g"));
        assert!(!is_share("share/g/a"));
    }
}
