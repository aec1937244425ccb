//! What nodes say to each other on `{prefix}.sys.hello`, and what a node
//! learns from it: which nodes are alive, whether another process uses
//! this node's name, whether a node lists other `[cluster] members`, and
//! whether the others listen again after NATS came back.
//!
//! A hello is JSON (`{"node", "instance", "members", "ask"}`); a bare node
//! name (what nodes before it sent) is read as a hello from that node.
//! `instance` is a random id per process, so that a second process with
//! the same name is told apart; `ask` asks every node that hears it to say
//! hello at once (a node sends it when it comes back to NATS, to learn
//! without waiting who listens again).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use tokio::sync::watch;

use super::{FILTERS_KEPT_FOR, FORGET_AFTER, LOST_AFTER, Shared};

/// Longest forwarded publishes are held after NATS comes back, waiting
/// for the nodes that were alive to say they listen again.
pub(super) const RESUME_WAIT: Duration = Duration::from_secs(5);
/// Most other processes kept as using this node's name (each is logged
/// once; past it they are still reported, not remembered).
const MAX_SAME_NAME: usize = 64;
/// Most nodes whose process is remembered; past it, those no longer
/// listed as peers are forgotten (anything that may publish on NATS can
/// say hello under any name).
const MAX_INSTANCES: usize = 1024;

/// One hello.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(super) struct Hello {
    /// The node's name.
    pub node: String,
    /// Its process's random id.
    #[serde(default)]
    pub instance: String,
    /// Its `[cluster] members`, as configured.
    #[serde(default)]
    pub members: Vec<String>,
    /// Asks the nodes that hear it to say hello at once.
    #[serde(default)]
    pub ask: bool,
    /// The version of its filters (`interest`); none from older nodes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub interest: Option<u64>,
}

impl Hello {
    /// A hello as sent; `None` for what is not one.
    pub(super) fn parse(payload: &[u8]) -> Option<Hello> {
        let hello = if payload.first() == Some(&b'{') {
            serde_json::from_slice(payload).ok()?
        } else {
            Hello {
                node: std::str::from_utf8(payload).ok()?.to_owned(),
                instance: String::new(),
                members: Vec::new(),
                ask: false,
                interest: None,
            }
        };
        (!hello.node.is_empty() && hello.node.len() <= 256).then_some(hello)
    }

    /// Its bytes.
    pub(super) fn encode(&self) -> bytes::Bytes {
        serde_json::to_vec(self).unwrap_or_default().into()
    }
}

/// What a hello means for this node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Heard {
    /// A peer, as expected.
    Peer,
    /// Another process uses this node's name (NATS never echoes a node's
    /// own messages back to it).
    SameName,
    /// A peer whose `members` differ from this node's.
    OtherMembers(Vec<String>),
    /// A peer heard before as another process: it restarted, and knows
    /// none of this node's consumers of its queues.
    Restarted,
}

/// Records `hello` in `shared`'s peers and says what it means; each
/// conflict is logged once per instance (or members list).
pub(super) fn heard(shared: &Shared, hello: &Hello) -> Heard {
    if hello.node == shared.node {
        let mut seen = shared.conflicts.lock();
        if !seen.same_name.contains(&hello.instance) && seen.same_name.len() < MAX_SAME_NAME {
            seen.same_name.insert(hello.instance.clone());
            tracing::error!(
                node = %hello.node,
                instance = %hello.instance,
                "cluster: another process uses this node's name ([cluster] node): their queues, \
                 deliveries and acks mix; give each node its own name"
            );
        }
        return Heard::SameName;
    }
    shared
        .peers
        .lock()
        .insert(hello.node.clone(), Instant::now());
    if !hello.instance.is_empty() {
        let before = shared
            .conflicts
            .lock()
            .instances
            .insert(hello.node.clone(), hello.instance.clone());
        if before.is_some_and(|b| b != hello.instance) {
            tracing::info!(node = %hello.node, "cluster: a node restarted");
            return Heard::Restarted;
        }
    }
    if hello.instance.is_empty() || hello.members == shared.members {
        shared.conflicts.lock().members.remove(&hello.node);
        return Heard::Peer;
    }
    let mut seen = shared.conflicts.lock();
    if seen.members.get(&hello.node) != Some(&hello.members) {
        tracing::error!(
            node = %hello.node,
            theirs = ?hello.members,
            ours = ?shared.members,
            "cluster: a node lists other [cluster] members: queues are homed differently on \
             each side and may exist twice; give every node the same members"
        );
        seen.members
            .insert(hello.node.clone(), hello.members.clone());
    }
    Heard::OtherMembers(hello.members.clone())
}

/// Takes a hello: records its node ([`heard`]), asks for its filters
/// where they are not known, and attaches this node's consumers again at
/// a home that restarted (its new process knows none of them), now
/// rather than at the next check.
pub(super) async fn on_hello(shared: &Arc<Shared>, h: &Hello) {
    let heard = heard(shared, h);
    if heard != Heard::SameName
        && shared.interest.hello(&h.node, &h.instance, h.interest) == super::interest::Next::Ask
    {
        super::tell::ask(shared, &h.node).await;
    }
    if heard == Heard::Restarted {
        let cluster = super::Cluster {
            shared: shared.clone(),
        };
        let (node, at) = (h.node.clone(), Instant::now());
        tokio::spawn(async move {
            let again = cluster.check_consumers_of(&node, at).await;
            if again > 0 {
                tracing::info!(again, home = %node, "cluster: consumers attached again at a restarted home");
            }
        });
    }
}

/// Takes a bye: a node stopping is no longer listed (it left; a node
/// that vanishes without a word is listed as lost instead), its filters
/// are forgotten, its calls in flight fail now, and its consumers of this
/// node's queues are detached.
pub(super) fn on_bye(shared: &Arc<Shared>, broker: &crate::broker::WeakBroker, bye: &Hello) {
    if bye.node == shared.node || !leaving(shared, bye) {
        return;
    }
    let Some(broker) = broker.upgrade() else {
        return;
    };
    let node = bye.node.as_str();
    shared.peers.lock().remove(node);
    shared.interest.retain(|n| n != node);
    let cluster = super::Cluster {
        shared: shared.clone(),
    };
    cluster.fail_waiting_for(node);
    let node = node.to_owned();
    tokio::spawn(async move {
        cluster.detach_consumers_of(&broker, |n| n == node).await;
    });
}

/// Whether `bye` is from the process this node knows under that name: a
/// bye from another process using the same name (an impostor stopping)
/// must not make this node drop the real one's consumers. A bye without
/// an instance (an older node) is taken as it is.
pub(super) fn leaving(shared: &Shared, bye: &Hello) -> bool {
    if bye.instance.is_empty() {
        return true;
    }
    // The instance stays known: the node's next process is then heard
    // as a restart (its consumers attached again at once).
    match shared.conflicts.lock().instances.get(&bye.node) {
        Some(known) if *known != bye.instance => {
            tracing::warn!(
                node = %bye.node,
                "cluster: a bye from another process with this node's name, ignored"
            );
            false
        }
        _ => true,
    }
}

/// Conflicts seen, for `GET /admin/cluster` and `/metrics`.
#[derive(Debug, Default)]
pub(super) struct Conflicts {
    /// Instances of other processes heard using this node's name.
    pub same_name: std::collections::BTreeSet<String>,
    /// Peers whose members differ, with theirs.
    pub members: BTreeMap<String, Vec<String>>,
    /// The process each peer was last heard as.
    pub instances: std::collections::HashMap<String, String>,
}

/// At each hello tick: forgets nodes not heard for [`FORGET_AFTER`]
/// (and what their hellos said, within [`MAX_INSTANCES`]) and the
/// filters of nodes not heard for [`FILTERS_KEPT_FOR`], and fails at
/// once the calls waiting on nodes not heard for
/// [`LOST_AFTER`] (a long poll's wait plus the call timeout otherwise).
pub(super) fn tidy(shared: &std::sync::Arc<Shared>) {
    let now = Instant::now();
    let lost: Vec<String> = {
        let mut peers = shared.peers.lock();
        peers.retain(|_, seen| now.saturating_duration_since(*seen) < FORGET_AFTER);
        let mut c = shared.conflicts.lock();
        // A peer's other members are shown while it is listed; its process
        // is remembered past its bye (to tell its restart), within a bound.
        c.members.retain(|n, _| peers.contains_key(n));
        if c.instances.len() > MAX_INSTANCES {
            c.instances.retain(|n, _| peers.contains_key(n));
        }
        drop(c);
        peers
            .iter()
            .filter(|(_, seen)| now.saturating_duration_since(**seen) >= LOST_AFTER)
            .map(|(n, _)| n.clone())
            .collect()
    };
    {
        let peers = shared.peers.lock().clone();
        shared.interest.retain(|n| {
            peers
                .get(n)
                .is_some_and(|seen| now.saturating_duration_since(*seen) < FILTERS_KEPT_FOR)
        });
    }
    shared.interest.tick();
    let cluster = super::Cluster {
        shared: shared.clone(),
    };
    for node in lost {
        let failed = cluster.fail_waiting_for(&node);
        if failed > 0 {
            tracing::warn!(node = %node, failed, "cluster: calls to a lost node failed");
        }
    }
}

/// Called by the publish pump when NATS is away: waits until it is back
/// and the nodes listen again ([`until_listening`]).
pub(super) async fn hold_until_heard(shared: &Shared, online: &mut watch::Receiver<bool>) {
    let alive = shared.up();
    tracing::warn!(
        "cluster: NATS is away; publishes for other nodes are held (up to [cluster] buffer) \
         until it is back and they listen again"
    );
    if until_connected(|| super::connected(&shared.client), online).await {
        let connects = shared.client.statistics().connects.load(Ordering::Relaxed);
        until_listening(shared, &alive, connects).await;
    }
}

/// Waits until `connected` says the client is back; false if the client
/// is gone (`online`'s sender dropped). The client's state is the truth:
/// the flag its events set lags it (the events go through a channel of
/// their own), so a flag still up from before the loss would end the
/// wait at once, and the wait for the others to listen would start at
/// the loss, not at the reconnect. A change of the flag only wakes the
/// check early; otherwise the state is asked every 100 ms.
async fn until_connected(connected: impl Fn() -> bool, online: &mut watch::Receiver<bool>) -> bool {
    while !connected() {
        if let Ok(Err(_)) = tokio::time::timeout(Duration::from_millis(100), online.changed()).await
        {
            return false;
        }
    }
    true
}

/// Called by the publish pump when NATS is back (its client's
/// `connects`-th connection): waits until each of the `alive` nodes
/// (those heard within [`LOST_AFTER`] before) has said hello over that
/// connection or a later one ([`still_deaf`]: so its subscriptions are in
/// place again: a node can only be heard once this one is back, and its
/// client subscribes again before it says anything), at most
/// [`RESUME_WAIT`]. Core NATS keeps nothing for a node that is not
/// subscribed: sending what was held before the others listen again
/// would lose it for them.
pub(super) async fn until_listening(shared: &Shared, alive: &[String], connects: u64) {
    let back = Instant::now();
    loop {
        let missing = {
            let returned = *shared.returned.lock();
            still_deaf(alive, &shared.peers.lock(), connects, returned)
        };
        if missing.is_empty() {
            tracing::info!(
                "cluster: NATS is back and the other nodes listen; sending what was held"
            );
            return;
        }
        if back.elapsed() >= RESUME_WAIT {
            tracing::warn!(
                ?missing,
                "cluster: NATS is back but these nodes have not said so within {RESUME_WAIT:?}; \
                 sending what was held, which they may miss"
            );
            return;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Called by the link as it handles NATS's return: every hello read
/// before was handled before (its loop takes hellos first), so one
/// handled from now came over the client's current connection
/// ([`still_deaf`]).
pub(super) fn returned(shared: &Shared) {
    let connects = shared.client.statistics().connects.load(Ordering::Relaxed);
    *shared.returned.lock() = Some((connects, Instant::now()));
}

/// Which of the `alive` nodes (by `peers`, when each was last heard) have
/// not yet said hello over the client's `connects`-th connection or a
/// later one: all of them until the link has handled that connection's
/// start (`returned`: the client's count of connections then, and when),
/// then those not heard since. A hello handled before that may have been
/// read over the old connection before it was lost, and proves nothing.
/// Every hello read before the return is handled before it (the link's
/// loop takes hellos first), so one handled after it came over the new
/// connection.
fn still_deaf(
    alive: &[String],
    peers: &BTreeMap<String, Instant>,
    connects: u64,
    returned: Option<(u64, Instant)>,
) -> Vec<String> {
    let Some((_, at)) = returned.filter(|(n, _)| *n >= connects) else {
        return alive.to_vec();
    };
    alive
        .iter()
        .filter(|n| peers.get(*n).is_none_or(|seen| *seen <= at))
        .cloned()
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A node counts as listening again only once heard after the link
    /// handled NATS's return: a hello handled before may have come over
    /// the old connection.
    #[test]
    fn only_a_hello_after_the_return_says_a_node_listens_again() {
        let t0 = Instant::now();
        let at = |ms| t0 + Duration::from_millis(ms);
        let alive = vec!["b".to_owned(), "c".to_owned()];
        // b heard after the loss (a hello read before it, handled late),
        // c before it.
        let mut peers = BTreeMap::from([("b".to_owned(), at(150)), ("c".to_owned(), at(50))]);
        // The client's second connection: its start not handled yet, or
        // only the first one's.
        assert_eq!(still_deaf(&alive, &peers, 2, None), alive);
        assert_eq!(still_deaf(&alive, &peers, 2, Some((1, at(20)))), alive);
        // Handled at 200: b's hello at 150 does not count.
        assert_eq!(still_deaf(&alive, &peers, 2, Some((2, at(200)))), alive);
        peers.insert("b".to_owned(), at(250));
        assert_eq!(still_deaf(&alive, &peers, 2, Some((2, at(200)))), ["c"]);
        // A later connection's start counts too.
        peers.insert("c".to_owned(), at(260));
        assert!(still_deaf(&alive, &peers, 2, Some((3, at(200)))).is_empty());
    }

    /// A flag still up from before the loss does not end the wait: only
    /// the client's own state does (or the client going away).
    #[test]
    fn the_wait_for_nats_ends_when_the_client_is_back_not_on_a_stale_flag() {
        use std::sync::atomic::{AtomicBool, Ordering};
        // Paused time: the sleeps below advance the clock at once.
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .start_paused(true)
            .build()
            .unwrap();
        rt.block_on(async {
            let (tx, mut online) = watch::channel(true);
            let back = Arc::new(AtomicBool::new(false));
            let waiter = {
                let back = back.clone();
                tokio::spawn(async move {
                    let ok = until_connected(|| back.load(Ordering::SeqCst), &mut online).await;
                    (ok, back.load(Ordering::SeqCst))
                })
            };
            // The flag says up, and changes, while the client is away.
            tokio::time::sleep(Duration::from_millis(250)).await;
            tx.send_replace(true);
            tokio::time::sleep(Duration::from_millis(250)).await;
            assert!(
                !waiter.is_finished(),
                "the wait ended while the client was away"
            );
            back.store(true, Ordering::SeqCst);
            let (ok, was_back) = tokio::time::timeout(Duration::from_secs(5), waiter)
                .await
                .expect("the wait ends within a poll of the client coming back")
                .unwrap();
            assert!(ok && was_back);

            // The client gone: the wait ends, saying so.
            let (tx, mut online) = watch::channel(false);
            drop(tx);
            assert!(!until_connected(|| false, &mut online).await);
        });
    }

    #[test]
    fn a_hello_is_json_or_a_bare_name() {
        let h = Hello {
            node: "a".into(),
            instance: "i1".into(),
            members: vec!["a".into(), "b".into()],
            ask: true,
            interest: Some(3),
        };
        assert_eq!(Hello::parse(&h.encode()), Some(h));
        let old = Hello::parse(b"b").unwrap();
        assert_eq!(
            (old.node.as_str(), old.instance.as_str(), old.ask),
            ("b", "", false)
        );
        assert_eq!(Hello::parse(b""), None);
        assert_eq!(Hello::parse(b"{not json"), None);
    }
}
