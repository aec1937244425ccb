//! Which topics the other nodes want, so that a publish nobody elsewhere
//! reads never goes to NATS (interest-based forwarding).
//!
//! Each node tells the others the filters it listens to on NATS, on
//! `{prefix}.sys.interest` ([`Said`]): one change at a time, each with the
//! next version of its set (a new process starts at version 0 with no
//! filter), or its whole set in parts when asked
//! (`{prefix}.sys.tell.{node}`) or when it is back on NATS. Its hellos say
//! its version, so a change missed is noticed by the next two hellos.
//!
//! A node forwards a publish when some other node's filter matches the
//! topic. It forwards everything while it cannot be sure what the others
//! want: for [`WARM_UP`] after it (re)connects to NATS (a node it has not
//! heard yet may be listening), and while any node it hears has filters
//! it does not know (a node older than this exchange, a gap in a node's
//! versions, a whole set still coming).
//!
//! A node that starts listening to a filter waits, bounded, until every
//! node heard lately that speaks this exchange has acknowledged the
//! change (`{prefix}.sys.ack.{node}`, answering the change's reply
//! subject): a publish anywhere after its subscribe returns is heard. A
//! node that starts asks one running node which nodes are up
//! (`{prefix}.sys.roll`), so that its first subscribes wait for them too.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use parking_lot::{Mutex, RwLock};
use serde::{Deserialize, Serialize};

use crate::routing::FilterTrie;

/// How long after connecting (or coming back to) NATS a node forwards
/// everything: longer than a hello's period, so every node alive has said
/// hello (and its version) meanwhile.
pub(super) const WARM_UP: Duration = Duration::from_secs(4);
/// Most filters kept for one node; past it, that node's filters count as
/// unknown (everything is forwarded).
const MAX_FILTERS: usize = 1 << 20;
/// Longest filter kept (longer ones make the node's set unknown).
const MAX_FILTER_LEN: usize = 65_536;
/// Longest a whole set's parts may take to come before it is asked for
/// again (they are sent one after another).
const STAGING_LIMIT: Duration = Duration::from_secs(2);
/// Bytes of filters per part of a whole set (NATS's max_payload is 1 MiB
/// by default).
const PART_BYTES: usize = 64 * 1024;

/// What a node says of its filters on `{prefix}.sys.interest`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(super) struct Said {
    /// The node's name.
    pub node: String,
    /// Its process's random id (versions count per process).
    pub instance: String,
    /// The version of its set once this is taken.
    pub version: u64,
    /// A part of its whole set (from 0; part 0 replaces what was known),
    /// rather than a change.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub part: Option<u32>,
    /// More parts of this whole set follow.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub more: bool,
    /// Filters added (in a part: filters of the set).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub add: Vec<String>,
    /// Filters removed.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub remove: Vec<String>,
}

impl Said {
    /// Its bytes.
    pub(super) fn encode(&self) -> bytes::Bytes {
        serde_json::to_vec(self).unwrap_or_default().into()
    }
}

/// A node's answer to a change or a whole set (`{prefix}.sys.ack.{node}`):
/// from now on it forwards what that version of the set wants.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(super) struct Ack {
    /// The node answering.
    pub node: String,
    /// The version it took.
    pub version: u64,
}

/// A running node's answer to a starting node's `{prefix}.sys.roll`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(super) struct Roll {
    /// The node answering.
    pub node: String,
    /// The other nodes it heard lately that speak this exchange.
    pub peers: Vec<String>,
}

/// What this node has told the others of its own filters: the link's
/// loop notes each change and sends them after each command.
#[derive(Debug, Default)]
pub(super) struct Told {
    version: u64,
    add: Vec<String>,
    remove: Vec<String>,
}

impl Told {
    /// Notes a filter listened to; returns the version that will say so.
    pub(super) fn added(&mut self, filter: &str) -> u64 {
        self.remove.retain(|f| f != filter);
        self.add.push(filter.to_owned());
        self.version + 1
    }

    /// Notes a filter no longer listened to.
    pub(super) fn removed(&mut self, filter: &str) {
        self.add.retain(|f| f != filter);
        self.remove.push(filter.to_owned());
    }

    /// The version the others know once what was noted is sent.
    pub(super) fn version(&self) -> u64 {
        self.version + u64::from(!self.add.is_empty() || !self.remove.is_empty())
    }

    /// The change to send, if any (taking the next version).
    pub(super) fn change(&mut self, node: &str, instance: &str) -> Option<Said> {
        if self.add.is_empty() && self.remove.is_empty() {
            return None;
        }
        self.version += 1;
        Some(Said {
            node: node.to_owned(),
            instance: instance.to_owned(),
            version: self.version,
            part: None,
            more: false,
            add: std::mem::take(&mut self.add),
            remove: std::mem::take(&mut self.remove),
        })
    }

    /// The whole set `filters` in parts, at the current version (send
    /// [`Told::change`] first).
    pub(super) fn whole<'a>(
        &self,
        node: &str,
        instance: &str,
        filters: impl Iterator<Item = &'a String>,
    ) -> Vec<Said> {
        let part = |n: usize| Said {
            node: node.to_owned(),
            instance: instance.to_owned(),
            version: self.version,
            part: Some(n as u32),
            more: false,
            add: Vec::new(),
            remove: Vec::new(),
        };
        let mut parts = vec![part(0)];
        let mut bytes = 0;
        for f in filters {
            if bytes > 0 && bytes + f.len() > PART_BYTES {
                if let Some(last) = parts.last_mut() {
                    last.more = true;
                }
                parts.push(part(parts.len()));
                bytes = 0;
            }
            bytes += f.len() + 3;
            if let Some(last) = parts.last_mut() {
                last.add.push(f.clone());
            }
        }
        parts
    }
}

/// Another node's filters as known here.
#[derive(Debug)]
struct Peer {
    name: Arc<str>,
    instance: String,
    /// The version of its set known here; `None`: not known (everything
    /// is forwarded while so).
    known: Option<u64>,
    filters: HashSet<String>,
    /// A whole set arriving: its version, the next part, its filters.
    staging: Option<(u64, u32, Vec<String>)>,
    /// When its first part came: a set whose parts stop coming (one was
    /// lost) is asked for again at a hello past [`STAGING_LIMIT`].
    staged_at: Instant,
    /// A version its hello said that was not known here yet.
    suspect: Option<u64>,
    /// Its hellos say a version (an older node's do not).
    speaks: bool,
}

/// The others' filters, and what this node's own changes wait for.
#[derive(Debug)]
pub(super) struct Interest {
    /// Set while everything is forwarded (see the module's notes).
    open: AtomicBool,
    /// `[cluster] forward_all`: everything is always forwarded.
    all: bool,
    state: RwLock<State>,
    /// Publishes no other node wanted, not sent to NATS (sharded: every
    /// such publish adds to it, from any thread).
    pub not_wanted: crate::metrics::Counter,
    /// What the others acknowledged of this node's changes.
    acks: Mutex<HashMap<String, Acked>>,
    acked: tokio::sync::Notify,
}

#[derive(Debug)]
struct State {
    peers: HashMap<String, Peer>,
    /// Every peer's filters, each under the peers' names.
    trie: FilterTrie<Arc<str>>,
    warm_until: Instant,
}

/// A peer's acknowledgements of this node's changes.
#[derive(Debug, Default)]
struct Acked {
    version: u64,
    /// A wait for it ran out: not waited for again until it acknowledges
    /// something (a node that says hello but never answers must not hold
    /// every subscribe back).
    silent: bool,
}

/// What taking a message or a hello calls for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Next {
    /// Nothing more.
    Done,
    /// Ask the node for its whole set.
    Ask,
}

impl Peer {
    fn new(name: &str, instance: &str, known: Option<u64>) -> Peer {
        Peer {
            name: name.into(),
            instance: instance.to_owned(),
            known,
            filters: HashSet::new(),
            staging: None,
            staged_at: Instant::now(),
            suspect: None,
            speaks: true,
        }
    }
}

impl State {
    /// Replaces `peer`'s filters with `filters`.
    fn install(trie: &mut FilterTrie<Arc<str>>, peer: &mut Peer, filters: Vec<String>) {
        for f in peer.filters.drain() {
            trie.remove(&f, &peer.name);
        }
        for f in filters {
            trie.insert(&f, peer.name.clone());
            peer.filters.insert(f);
        }
    }

    /// Forgets what `peer`'s filters are.
    fn unknown(trie: &mut FilterTrie<Arc<str>>, peer: &mut Peer) {
        for f in peer.filters.drain() {
            trie.remove(&f, &peer.name);
        }
        peer.known = None;
        peer.staging = None;
        peer.suspect = None;
    }

    /// The entry for `node`'s process `instance` in `peers`: a process
    /// not known before starts at version 0 with no filter (a replaced
    /// process's filters leave `trie`).
    fn peer<'a>(
        peers: &'a mut HashMap<String, Peer>,
        trie: &mut FilterTrie<Arc<str>>,
        node: &str,
        instance: &str,
    ) -> &'a mut Peer {
        let peer = peers
            .entry(node.to_owned())
            .or_insert_with(|| Peer::new(node, instance, Some(0)));
        if peer.instance != instance {
            Self::unknown(trie, peer);
            peer.instance = instance.to_owned();
            peer.known = Some(0);
        }
        peer
    }

    /// Whether everything must be forwarded.
    fn open(&self, now: Instant) -> bool {
        now < self.warm_until || self.peers.values().any(|p| p.known.is_none())
    }
}

impl Interest {
    /// A node that just connected (everything forwarded for [`WARM_UP`],
    /// or always with `all`).
    pub(super) fn new(all: bool) -> Interest {
        Interest {
            open: AtomicBool::new(true),
            all,
            state: RwLock::new(State {
                peers: HashMap::new(),
                trie: FilterTrie::new(),
                warm_until: Instant::now() + WARM_UP,
            }),
            not_wanted: Default::default(),
            acks: Mutex::new(HashMap::new()),
            acked: tokio::sync::Notify::new(),
        }
    }

    /// Whether a publish on `topic` must go to NATS: some other node
    /// wants it, or this node cannot be sure. On every publish.
    pub(super) fn wants(&self, topic: &str) -> bool {
        if self.open.load(Ordering::Acquire) {
            return true;
        }
        // Again under the lock: a reconnect (or a node gone unknown)
        // forgets filters and opens in one write, which may have come
        // between the load above and this read; the filters alone would
        // then say nobody wants a publish that must go (seen once in CI:
        // 1 of 4,000 lost across a NATS restart).
        let state = self.state.read();
        self.open.load(Ordering::Acquire) || state.trie.any_match(topic)
    }

    /// Sets [`Interest::open`] from `state` (under its write lock, so a
    /// publish that reads the filters sees them current).
    fn settle(&self, state: &State) {
        self.open
            .store(self.all || state.open(Instant::now()), Ordering::Release);
    }

    /// Takes a node's change or part of its whole set; says whether its
    /// whole set must be asked for. Invalid or oversized sets leave the
    /// node's filters unknown.
    pub(super) fn said(&self, said: Said) -> Next {
        let mut guard = self.state.write();
        let state = &mut *guard;
        let trie = &mut state.trie;
        let peer = State::peer(&mut state.peers, trie, &said.node, &said.instance);
        peer.speaks = true;
        // Checked before anything is taken: a set past the bounds is not
        // kept at all.
        let too_big = said.add.iter().any(|f| f.len() > MAX_FILTER_LEN)
            || (said.part.is_none() && peer.filters.len() + said.add.len() > MAX_FILTERS);
        let next = match said.part {
            _ if too_big => {
                State::unknown(trie, peer);
                Next::Done
            }
            // A whole set sent before a change already taken.
            Some(_) if peer.known.is_some_and(|k| k > said.version) => Next::Done,
            Some(part) => {
                if part == 0 {
                    // A set newer than the one known: not known until
                    // every part is in.
                    if peer.known.is_some_and(|k| k < said.version) {
                        State::unknown(trie, peer);
                    }
                    peer.staging = Some((said.version, 0, Vec::new()));
                    peer.staged_at = Instant::now();
                }
                match peer.staging.as_mut() {
                    Some((v, next, filters)) if *v == said.version && *next == part => {
                        *next += 1;
                        filters.extend(said.add);
                        if filters.len() > MAX_FILTERS {
                            State::unknown(trie, peer);
                        } else if !said.more {
                            let (version, _, filters) = peer.staging.take().unwrap_or_default();
                            State::install(trie, peer, filters);
                            peer.known = Some(version);
                            peer.suspect = None;
                        }
                        Next::Done
                    }
                    // A part missed: the whole set again.
                    _ => {
                        peer.staging = None;
                        Next::Ask
                    }
                }
            }
            None => match peer.known {
                Some(k) if k >= said.version => Next::Done,
                Some(k) if k + 1 == said.version => {
                    for f in said.remove {
                        if peer.filters.remove(&f) {
                            trie.remove(&f, &peer.name);
                        }
                    }
                    for f in said.add {
                        if !peer.filters.contains(&f) {
                            trie.insert(&f, peer.name.clone());
                            peer.filters.insert(f);
                        }
                    }
                    peer.known = Some(said.version);
                    Next::Done
                }
                // A change missed: its whole set is needed.
                Some(_) => {
                    State::unknown(trie, peer);
                    Next::Ask
                }
                None if peer.staging.is_some() => Next::Done,
                None => Next::Ask,
            },
        };
        self.settle(state);
        next
    }

    /// Takes what a hello says of its node's filters (`version`: `None`
    /// from a node older than this exchange, whose filters are never
    /// known). Says whether its whole set must be asked for: its filters
    /// are not known, or a version it said two hellos running is still
    /// not.
    pub(super) fn hello(&self, node: &str, instance: &str, version: Option<u64>) -> Next {
        let mut guard = self.state.write();
        let state = &mut *guard;
        let trie = &mut state.trie;
        let peer = state
            .peers
            .entry(node.to_owned())
            .or_insert_with(|| Peer::new(node, instance, None));
        if peer.instance != instance {
            State::unknown(trie, peer);
            peer.instance = instance.to_owned();
        }
        peer.speaks = version.is_some();
        let next = match (version, peer.known) {
            (None, _) => {
                State::unknown(trie, peer);
                Next::Done
            }
            (Some(0), None) if peer.staging.is_none() => {
                peer.known = Some(0);
                Next::Done
            }
            (Some(_), None)
                if peer.staging.is_some() && peer.staged_at.elapsed() < STAGING_LIMIT =>
            {
                Next::Done
            }
            (Some(_), None) => {
                peer.staging = None;
                Next::Ask
            }
            (Some(v), Some(k)) if k >= v => {
                peer.suspect = None;
                Next::Done
            }
            (Some(v), Some(k)) => {
                if peer.suspect.is_some_and(|s| s > k) {
                    State::unknown(trie, peer);
                    Next::Ask
                } else {
                    peer.suspect = Some(v);
                    Next::Done
                }
            }
        };
        self.settle(state);
        next
    }

    /// NATS is back (or came for the first time): what the others said
    /// meanwhile may be lost, so everything is forwarded until each node
    /// has sent its whole set again, and for [`WARM_UP`].
    pub(super) fn reconnected(&self) -> Vec<String> {
        let mut guard = self.state.write();
        let state = &mut *guard;
        state.warm_until = Instant::now() + WARM_UP;
        let trie = &mut state.trie;
        let mut ask = Vec::new();
        for (node, peer) in state.peers.iter_mut() {
            if peer.speaks {
                State::unknown(trie, peer);
                ask.push(node.clone());
            }
        }
        self.settle(state);
        ask
    }

    /// At each hello tick: the warm-up may be over.
    pub(super) fn tick(&self) {
        let state = self.state.read();
        self.settle(&state);
    }

    /// Forgets nodes that left or were not heard for long (`keep` says
    /// which stay).
    pub(super) fn retain(&self, keep: impl Fn(&str) -> bool) {
        let mut guard = self.state.write();
        let state = &mut *guard;
        let trie = &mut state.trie;
        state.peers.retain(|node, peer| {
            let kept = keep(node);
            if !kept {
                State::unknown(trie, peer);
            }
            kept
        });
        self.settle(state);
        drop(guard);
        self.acks.lock().retain(|node, _| keep(node));
    }

    /// Nodes heard from that a starting node's roll call named: they
    /// speak this exchange, and their filters are asked for.
    pub(super) fn named(&self, nodes: &[String]) {
        let mut guard = self.state.write();
        for node in nodes {
            guard
                .peers
                .entry(node.clone())
                .or_insert_with(|| Peer::new(node, "", None));
        }
        self.settle(&guard);
    }

    /// Other nodes' filters, by node (`None`: not known, everything is
    /// forwarded), and whether everything is forwarded now.
    pub(super) fn status(&self) -> (std::collections::BTreeMap<String, Option<usize>>, bool) {
        let state = self.state.read();
        let filters = state
            .peers
            .iter()
            .map(|(n, p)| (n.clone(), p.known.map(|_| p.filters.len())))
            .collect();
        (filters, self.open.load(Ordering::Acquire))
    }

    /// The nodes that speak this exchange, of `up`.
    pub(super) fn speaking(&self, up: &[String]) -> Vec<String> {
        let state = self.state.read();
        up.iter()
            .filter(|n| state.peers.get(*n).is_some_and(|p| p.speaks))
            .cloned()
            .collect()
    }

    /// Takes a node's acknowledgement of this node's changes.
    pub(super) fn ack(&self, ack: Ack) {
        let mut acks = self.acks.lock();
        let a = acks.entry(ack.node).or_default();
        a.version = a.version.max(ack.version);
        a.silent = false;
        drop(acks);
        self.acked.notify_waiters();
    }

    /// Waits until every node of `up` that speaks this exchange has
    /// taken this node's `version`, at most `limit`; those that did not
    /// are not waited for again until they acknowledge something.
    pub(super) async fn wait_acked(&self, up: &[String], version: u64, limit: Duration) {
        if version == 0 {
            return;
        }
        let peers = self.speaking(up);
        let deadline = tokio::time::Instant::now() + limit;
        loop {
            let notified = self.acked.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            let missing: Vec<&String> = {
                let acks = self.acks.lock();
                peers
                    .iter()
                    .filter(|p| {
                        acks.get(*p)
                            .is_none_or(|a| !a.silent && a.version < version)
                    })
                    .collect()
            };
            if missing.is_empty() {
                return;
            }
            if tokio::time::timeout_at(deadline, notified).await.is_err() {
                tracing::warn!(
                    ?missing,
                    "cluster: these nodes did not take a new filter in time; a publish there \
                     may not reach this node until they do"
                );
                let mut acks = self.acks.lock();
                for p in missing {
                    let a = acks.entry(p.clone()).or_default();
                    if a.version < version {
                        a.silent = true;
                    }
                }
                return;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn change(node: &str, version: u64, add: &[&str], remove: &[&str]) -> Said {
        Said {
            node: node.into(),
            instance: "i".into(),
            version,
            part: None,
            more: false,
            add: add.iter().map(|s| s.to_string()).collect(),
            remove: remove.iter().map(|s| s.to_string()).collect(),
        }
    }

    /// Node b's whole set of 20,000 filters (`t/00000000`...) at version
    /// 7, in parts.
    fn large_set() -> Vec<Said> {
        let filters: Vec<String> = (0..20_000).map(|n| format!("t/{n:08}")).collect();
        let t = Told {
            version: 7,
            ..Default::default()
        };
        t.whole("b", "i", filters.iter())
    }

    /// An interest past its warm-up.
    fn warm() -> Interest {
        let i = Interest::new(false);
        i.state.write().warm_until = Instant::now();
        i.tick();
        i
    }

    #[test]
    fn everything_is_forwarded_while_warming_up_then_only_what_others_want() {
        let i = Interest::new(false);
        assert!(i.wants("a/b"));
        let all = Interest::new(true);
        all.state.write().warm_until = Instant::now();
        all.tick();
        assert!(all.wants("a/b"), "forward_all");
        let i = warm();
        assert!(!i.wants("a/b"));
        assert_eq!(i.said(change("b", 1, &["a/+"], &[])), Next::Done);
        assert!(i.wants("a/b"));
        assert!(!i.wants("c/d"));
        assert!(!i.wants("$SYS/x"));
        assert_eq!(i.said(change("b", 2, &["c/d"], &["a/+"])), Next::Done);
        assert!(!i.wants("a/b"));
        assert!(i.wants("c/d"));
    }

    #[test]
    fn a_missed_change_forwards_everything_until_the_whole_set_comes() {
        let i = warm();
        i.said(change("b", 1, &["x"], &[]));
        assert_eq!(i.said(change("b", 3, &["y"], &[])), Next::Ask);
        assert!(i.wants("anything"));
        let t = Told {
            version: 3,
            ..Default::default()
        };
        let filters = ["x".to_string(), "y".to_string()];
        for part in t.whole("b", "i", filters.iter()) {
            i.said(part);
        }
        assert!(i.wants("x") && i.wants("y"));
        assert!(!i.wants("z"));
        // An old change after the whole set is ignored.
        assert_eq!(i.said(change("b", 2, &["z"], &[])), Next::Done);
        assert!(!i.wants("z"));
    }

    #[test]
    fn a_whole_set_in_parts_is_taken_once_every_part_came_in_order() {
        let i = warm();
        let parts = large_set();
        assert!(parts.len() > 2, "{} parts", parts.len());
        assert!(parts.iter().all(|p| p.encode().len() < 2 * PART_BYTES));
        // Out of order: not taken, asked again.
        i.said(parts[0].clone());
        assert_eq!(i.said(parts[2].clone()), Next::Ask);
        assert!(i.wants("nothing/wanted"));
        for p in parts {
            i.said(p);
        }
        assert!(i.wants("t/00019999"));
        assert!(!i.wants("nothing/wanted"));
        assert_eq!(i.status().0.get("b"), Some(&Some(20_000)));
    }

    #[test]
    fn a_new_process_starts_from_nothing_and_an_older_node_opens_everything() {
        let i = warm();
        i.said(change("b", 1, &["x"], &[]));
        // b restarted: its new process's first change applies to nothing.
        let mut c = change("b", 1, &["y"], &[]);
        c.instance = "j".into();
        i.said(c);
        assert!(!i.wants("x") && i.wants("y"));
        // A node whose hello says no version: everything goes.
        assert_eq!(i.hello("old", "", None), Next::Done);
        assert!(i.wants("x"));
        i.retain(|n| n != "old");
        assert!(!i.wants("x"));
    }

    #[test]
    fn hellos_ask_for_unknown_sets_and_for_versions_missed_twice() {
        let i = warm();
        assert_eq!(i.hello("b", "i", Some(0)), Next::Done);
        assert!(!i.wants("x"));
        assert_eq!(i.hello("c", "k", Some(5)), Next::Ask);
        assert!(i.wants("x"));
        i.retain(|n| n != "c");
        // b says version 2 while 0 is known: a change may be on its way.
        assert_eq!(i.hello("b", "i", Some(2)), Next::Done);
        assert!(!i.wants("x"));
        assert_eq!(i.hello("b", "i", Some(2)), Next::Ask);
        assert!(i.wants("x"));
    }

    #[test]
    fn a_whole_set_whose_parts_stopped_coming_is_asked_for_again() {
        let i = warm();
        let parts = large_set();
        i.said(parts[0].clone());
        // While its parts come, a hello asks for nothing more.
        assert_eq!(i.hello("b", "i", Some(7)), Next::Done);
        i.state.write().peers.get_mut("b").unwrap().staged_at -= STAGING_LIMIT;
        assert_eq!(i.hello("b", "i", Some(7)), Next::Ask);
        assert!(i.wants("t/00000001"), "everything, until the set is in");
        for p in parts {
            i.said(p);
        }
        assert!(!i.wants("x") && i.wants("t/00000001"));
    }

    /// What another node says is bounded: a filter longer than any
    /// configuration accepts, or more filters than a node may keep, leave
    /// that node's filters unknown (everything is forwarded) rather than
    /// growing the trie.
    #[test]
    fn oversized_filters_and_sets_are_not_kept() {
        let i = warm();
        let long = "x".repeat(MAX_FILTER_LEN + 1);
        assert_eq!(i.said(change("b", 1, &[long.as_str()], &[])), Next::Done);
        assert!(i.wants("anything"));
        assert_eq!(i.status().0.get("b"), Some(&None));
        assert!(i.state.read().trie.is_empty());
        let many: Vec<String> = (0..=MAX_FILTERS).map(|n| format!("m/{n}")).collect();
        let mut c = change("c", 1, &[], &[]);
        c.add = many;
        i.said(c);
        assert_eq!(i.status().0.get("c"), Some(&None));
        assert!(i.state.read().trie.is_empty(), "nothing of c's kept");
    }

    #[test]
    fn a_reconnect_asks_every_node_again() {
        let i = warm();
        i.hello("b", "i", Some(0));
        assert!(!i.wants("x"));
        assert_eq!(i.reconnected(), vec!["b".to_string()]);
        assert!(i.wants("x"));
    }

    #[test]
    fn told_changes_carry_consecutive_versions() {
        let mut t = Told::default();
        assert_eq!(t.change("a", "i"), None);
        assert_eq!(t.added("x"), 1);
        assert_eq!(t.added("y"), 1);
        assert_eq!(t.version(), 1);
        let c = t.change("a", "i").unwrap();
        assert_eq!((c.version, c.add.len()), (1, 2));
        t.removed("x");
        assert_eq!(t.change("a", "i").unwrap().version, 2);
        assert_eq!(t.whole("a", "i", std::iter::empty()).len(), 1);
    }

    #[tokio::test]
    async fn a_wait_ends_when_every_speaking_node_acked() {
        let i = Arc::new(warm());
        i.hello("b", "i", Some(0));
        i.hello("old", "", None);
        let up = vec!["b".to_string(), "old".to_string()];
        let waiter = {
            let (i, up) = (i.clone(), up.clone());
            tokio::spawn(async move { i.wait_acked(&up, 3, Duration::from_secs(30)).await })
        };
        i.ack(Ack {
            node: "b".into(),
            version: 2,
        });
        tokio::task::yield_now().await;
        assert!(!waiter.is_finished());
        i.ack(Ack {
            node: "b".into(),
            version: 3,
        });
        tokio::time::timeout(Duration::from_secs(10), waiter)
            .await
            .expect("the wait ends")
            .unwrap();
        // A node that never answers is waited for once, then not.
        i.hello("c", "k", Some(0));
        let up = vec!["c".to_string()];
        let t = Instant::now();
        i.wait_acked(&up, 4, Duration::from_millis(50)).await;
        assert!(t.elapsed() >= Duration::from_millis(50));
        tokio::time::timeout(
            Duration::from_secs(10),
            i.wait_acked(&up, 5, Duration::from_secs(30)),
        )
        .await
        .expect("a silent node is not waited for");
    }
}
