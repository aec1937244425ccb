//! Presence: who is subscribed to a topic under a `[[presence]]` entry.
//!
//! A topic with presence keeps, beside its subscriptions, one member per
//! subscribing connection that said who it is (client id, principal) and
//! since when. Like the rest of the topic's state it is touched only in
//! the topic's tasks: a join right after the subscribe, a leave in the
//! unsubscribe (every way a subscription ends goes through one: a
//! session's end, an `unsubscribe`), and members whose connection went
//! without a word are dropped with its subscriptions. A query reads one
//! page, sorted by client id, so a topic with 100,000 subscribers answers
//! with a count and a page, never one huge frame.
//!
//! Joins and leaves are announced as messages on `$presence/<topic>`
//! (`routing::PRESENCE_PREFIX`), published by the broker after the task
//! that changed the membership (`broker/presences.rs`): any subscriber
//! (native, MQTT, Server-Sent Events) that may subscribe to the topic
//! may subscribe to its events.

use std::collections::HashMap;
use std::sync::Arc;

use super::queue::now_ms;
use super::sink::Subscription;

/// Who a subscriber is, as presence shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Who {
    /// The connection's client id.
    pub client_id: Arc<str>,
    /// The principal it authenticated as (`anonymous` without
    /// authentication).
    pub principal: Arc<str>,
}

/// One member of a topic's presence.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Member {
    /// Who it is.
    pub who: Who,
    /// When it joined (Unix ms).
    pub since_ms: u64,
    /// Its connection (sink id): a client id connected twice is two
    /// members.
    pub connection: u64,
}

/// One page of a topic's presence.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PresencePage {
    /// Members in all.
    pub count: usize,
    /// Up to the page's limit, by client id then connection.
    pub members: Vec<Member>,
    /// Where the next page starts (give it as `after`), if there is one.
    pub next: Option<String>,
}

/// The presence state of one topic (inside its `TopicState`).
#[derive(Debug, Default)]
pub(crate) struct Presence {
    /// By connection: its member, and the subscriptions (ids) it holds
    /// on the topic (a member leaves with its last one).
    members: HashMap<u64, (Member, Vec<Arc<str>>)>,
    /// Members dropped with their closed subscriptions (by a publish or
    /// a sweep) whose leave is still to be announced: the next
    /// unsubscribe on the topic hands them over. At most one per member
    /// that was.
    gone: Vec<Member>,
}

/// A cursor: `connection:client_id` of the last member of a page.
fn cursor(m: &Member) -> String {
    format!("{}:{}", m.connection, m.who.client_id)
}

/// Whether `after` is a cursor a page gave.
pub(crate) fn valid_cursor(after: &str) -> bool {
    parse_cursor(after).is_some()
}

fn parse_cursor(after: &str) -> Option<(&str, u64)> {
    let (connection, client) = after.split_once(':')?;
    Some((client, connection.parse().ok()?))
}

impl Presence {
    /// Adds `sub`'s connection as a member (once per connection);
    /// returns the member if it is new.
    pub(crate) fn join(&mut self, sub: &Subscription, who: Who) -> Option<Member> {
        let connection = sub.sink.id();
        match self.members.get_mut(&connection) {
            Some((_, subs)) => {
                if !subs.contains(&sub.id) {
                    subs.push(sub.id.clone());
                }
                None
            }
            None => {
                let member = Member {
                    who,
                    since_ms: now_ms(),
                    connection,
                };
                self.members
                    .insert(connection, (member.clone(), vec![sub.id.clone()]));
                Some(member)
            }
        }
    }

    /// Takes subscription `id` of connection `sink` away; returns the
    /// members that left: this one if that was its last subscription,
    /// and those dropped earlier without a word.
    pub(crate) fn leave(&mut self, sink: u64, id: &str) -> Vec<Member> {
        let mut left = std::mem::take(&mut self.gone);
        if let Some((_, subs)) = self.members.get_mut(&sink) {
            subs.retain(|s| &**s != id);
            if subs.is_empty()
                && let Some((m, _)) = self.members.remove(&sink)
            {
                left.push(m);
            }
        }
        left
    }

    /// Keeps only the members that still hold one of `live` (the topic's
    /// subscriptions after it dropped the closed ones); the others' leaves
    /// wait for the next unsubscribe. One pass over each.
    pub(crate) fn retain_live(&mut self, live: &[Subscription]) {
        if self.members.is_empty() {
            return;
        }
        let alive: std::collections::HashSet<(u64, &str)> =
            live.iter().map(|s| (s.sink.id(), &*s.id)).collect();
        let gone = &mut self.gone;
        self.members.retain(|sink, (m, subs)| {
            subs.retain(|id| alive.contains(&(*sink, &**id)));
            if subs.is_empty() {
                gone.push(m.clone());
            }
            !subs.is_empty()
        });
    }

    /// Up to `limit` members after `after` (a page's `next`).
    pub(crate) fn page(&self, after: Option<&str>, limit: usize) -> PresencePage {
        let after = after.and_then(parse_cursor);
        let mut members: Vec<&Member> = self
            .members
            .values()
            .map(|(m, _)| m)
            .filter(|m| {
                after.is_none_or(|(client, connection)| {
                    (&*m.who.client_id, m.connection) > (client, connection)
                })
            })
            .collect();
        members.sort_unstable_by(|a, b| {
            (&a.who.client_id, a.connection).cmp(&(&b.who.client_id, b.connection))
        });
        let more = members.len() > limit;
        members.truncate(limit);
        PresencePage {
            count: self.members.len(),
            next: members.last().filter(|_| more).map(|m| cursor(m)),
            members: members.into_iter().cloned().collect(),
        }
    }
}
