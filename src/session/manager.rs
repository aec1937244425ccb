//! The registry of live sessions: list them, find one by client id (or an
//! app's typed socket by its type and id), send a frame to one, close them
//! all. Used by shutdown, the admin API and embedding apps.

use std::any::Any;
use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicU8, AtomicU32, Ordering};
use std::time::SystemTime;

use parking_lot::RwLock;
use uuid::Uuid;

use super::outbound::{CloseRequest, Outbound, OutboundStats, PushError};
use crate::protocol::codec::Format;
use crate::protocol::frame::{Priority, ServerFrame};

struct Entry {
    /// `native`, `mqtt`, or a typed socket's [`crate::sockets::SocketType::KIND`].
    kind: &'static str,
    /// Boxed strings (16 B, not 24): with them an entry is 104 B, which
    /// mimalloc serves from its 112 B class rather than its 128 B one.
    client_id: Box<str>,
    principal: Option<Box<str>>,
    out: Arc<Outbound>,
    since: SystemTime,
    /// Reported by the session after each change (it owns the maps).
    subscriptions: AtomicU32,
    consumers: AtomicU32,
    /// A typed socket's event sender (a `tokio::sync::mpsc::Sender` of
    /// its type's events), for [`crate::sockets::Sockets::tell`].
    tell: Option<Arc<dyn Any + Send + Sync>>,
    /// Taken over by a newer MQTT connection of its client: 0 not, 1 by
    /// one that resumes the session, 2 by a clean start.
    taken_over: AtomicU8,
}

/// The sessions, and the typed sockets indexed by (kind, id) so an app
/// that sends to one socket among many does not scan them all.
#[derive(Default)]
struct Registry {
    /// Boxed entries: the table keeps room for up to twice the sessions,
    /// and a slot of 136 B per room was ~240 B per session at 18,900.
    map: HashMap<Uuid, Box<Entry>>,
    typed: HashMap<&'static str, HashMap<String, Vec<Uuid>>>,
    /// The other sessions by a hash of their client id: every MQTT
    /// CONNECT looks its client up, which scanned every session (O(n) per
    /// connect under the registry's lock). A hash, not the id, so that
    /// the index holds no copy of each id; lookups compare the entries'
    /// ids. Seeded per registry: client ids are the clients' choice.
    by_client: HashMap<u64, Ids>,
    client_hash: foldhash::fast::RandomState,
}

/// The sessions under one client-id hash: almost always one. Native
/// clients may share an id on purpose (MQTT's take each other over), as
/// many as they like: a set, so that each leaves in O(1); boxed, so that
/// the common case's slot is 32 B, not 48.
enum Ids {
    One(Uuid),
    // The extra allocation is for the rare case only, on purpose.
    #[allow(clippy::box_collection)]
    Many(Box<HashSet<Uuid, foldhash::fast::RandomState>>),
}

impl Registry {
    fn client_key(&self, client_id: &str) -> u64 {
        use std::hash::BuildHasher;
        self.client_hash.hash_one(client_id)
    }

    /// Indexes session `id` under its client id.
    fn index(&mut self, id: Uuid, client_id: &str) {
        let key = self.client_key(client_id);
        match self.by_client.entry(key) {
            std::collections::hash_map::Entry::Vacant(v) => {
                v.insert(Ids::One(id));
            }
            std::collections::hash_map::Entry::Occupied(mut o) => {
                let ids = o.get_mut();
                match ids {
                    Ids::One(first) => {
                        *ids = Ids::Many(Box::new([*first, id].into_iter().collect()))
                    }
                    Ids::Many(all) => {
                        all.insert(id);
                    }
                }
            }
        }
    }

    /// Takes session `id` out of the index of its client id.
    fn unindex(&mut self, id: Uuid, client_id: &str) {
        let key = self.client_key(client_id);
        let emptied = match self.by_client.get_mut(&key) {
            Some(Ids::One(one)) => *one == id,
            Some(Ids::Many(all)) => {
                all.remove(&id);
                if all.len() == 1 {
                    if let Some(last) = all.iter().next().copied() {
                        self.by_client.insert(key, Ids::One(last));
                    }
                }
                false
            }
            None => false,
        };
        if emptied {
            self.by_client.remove(&key);
            crate::maps::shrink_if_sparse(&mut self.by_client);
        }
    }

    /// The sessions indexed under `client_id`'s hash (their ids may
    /// differ: compare).
    fn under(&self, client_id: &str) -> Vec<Uuid> {
        match self.by_client.get(&self.client_key(client_id)) {
            Some(Ids::One(id)) => vec![*id],
            Some(Ids::Many(all)) => all.iter().copied().collect(),
            None => Vec::new(),
        }
    }
}

/// A typed socket as the app reaches it: its session id, its outbound
/// queue and its event sender.
pub(crate) struct Target {
    pub(crate) out: Arc<Outbound>,
    pub(crate) tell: Option<Arc<dyn Any + Send + Sync>>,
}

/// A session as the registry reports it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct SessionInfo {
    /// Server-chosen id.
    pub id: Uuid,
    /// What it speaks: `native`, `mqtt`, or the kind of an app's typed
    /// socket.
    pub kind: &'static str,
    /// The client's id.
    pub client_id: String,
    /// Who it authenticated as (`anonymous` when it presented nothing;
    /// absent until it authenticates).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub principal: Option<String>,
    /// Seconds since the Unix epoch when it connected.
    pub since_unix_s: u64,
    /// The same in milliseconds (for a takeover across nodes, which
    /// closes only connections older than the one that took over).
    #[serde(skip)]
    pub since_unix_ms: u64,
    /// Its topic subscriptions (durable ones included).
    pub subscriptions: u32,
    /// Its queue consumers.
    pub consumers: u32,
    /// Its outbound counters.
    pub outbound: OutboundStats,
}

/// Live sessions. Cheap to clone: one pointer, 8 B in every session
/// (a parked MQTT/TCP connection keeps one).
#[derive(Clone, Default)]
pub struct Sessions(Arc<Shared>);

/// What every [`Sessions`] handle shares.
#[derive(Default)]
struct Shared {
    map: RwLock<Registry>,
    later: super::Later,
}

impl Entry {
    fn new(
        kind: &'static str,
        client_id: String,
        out: Arc<Outbound>,
        tell: Option<Arc<dyn Any + Send + Sync>>,
    ) -> Entry {
        Entry {
            kind,
            client_id: client_id.into_boxed_str(),
            principal: None,
            out,
            since: SystemTime::now(),
            subscriptions: AtomicU32::new(0),
            consumers: AtomicU32::new(0),
            tell,
            taken_over: AtomicU8::new(0),
        }
    }
}

impl Sessions {
    /// An empty registry.
    pub fn new() -> Self {
        Self::default()
    }

    pub(crate) fn insert(
        &self,
        id: Uuid,
        kind: &'static str,
        client_id: String,
        out: Arc<Outbound>,
    ) {
        let mut reg = self.0.map.write();
        let entry = Entry::new(kind, client_id, out, None);
        if let Some(old) = reg.map.remove(&id) {
            // Ids are made fresh for each session; never seen, but the
            // index must not keep a stale entry.
            if old.tell.is_none() {
                reg.unindex(id, &old.client_id);
            }
        }
        reg.index(id, &entry.client_id);
        reg.map.insert(id, Box::new(entry));
    }

    /// Registers an app's typed socket under its kind and id, with its
    /// principal and event sender.
    pub(crate) fn insert_typed(
        &self,
        id: Uuid,
        kind: &'static str,
        key: String,
        principal: String,
        out: Arc<Outbound>,
        tell: Arc<dyn Any + Send + Sync>,
    ) {
        let mut entry = Entry::new(kind, key.clone(), out, Some(tell));
        entry.principal = Some(principal.into_boxed_str());
        let mut reg = self.0.map.write();
        reg.map.insert(id, Box::new(entry));
        reg.typed
            .entry(kind)
            .or_default()
            .entry(key)
            .or_default()
            .push(id);
    }

    /// The typed sockets of `kind` with id `key` (every one of the kind
    /// when `key` is `None`).
    pub(crate) fn targets(&self, kind: &str, key: Option<&str>) -> Vec<Target> {
        let reg = self.0.map.read();
        let target = |id: &Uuid| {
            reg.map.get(id).map(|e| Target {
                out: e.out.clone(),
                tell: e.tell.clone(),
            })
        };
        match key {
            Some(key) => reg
                .typed
                .get(kind)
                .and_then(|ids| ids.get(key))
                .map_or_else(Vec::new, |ids| ids.iter().filter_map(target).collect()),
            None => reg
                .map
                .iter()
                .filter(|(_, e)| e.kind == kind && e.tell.is_some())
                .filter_map(|(id, _)| target(id))
                .collect(),
        }
    }

    /// The typed sockets of `kind` with id `key` (every one of the kind
    /// when `key` is `None`), as the registry reports them.
    pub(crate) fn find_typed(&self, kind: &str, key: Option<&str>) -> Vec<SessionInfo> {
        let reg = self.0.map.read();
        let ids: Vec<Uuid> = match key {
            Some(key) => reg
                .typed
                .get(kind)
                .and_then(|ids| ids.get(key))
                .cloned()
                .unwrap_or_default(),
            None => reg
                .map
                .iter()
                .filter(|(_, e)| e.kind == kind && e.tell.is_some())
                .map(|(id, _)| *id)
                .collect(),
        };
        ids.iter()
            .filter_map(|id| reg.map.get(id).map(|e| Self::info(*id, e)))
            .collect()
    }

    pub(crate) fn set_client_id(&self, id: Uuid, client_id: String) {
        let mut reg = self.0.map.write();
        let Some(e) = reg.map.get_mut(&id) else {
            return;
        };
        if *e.client_id == *client_id {
            return;
        }
        let old = std::mem::replace(&mut e.client_id, client_id.into_boxed_str());
        if e.tell.is_none() {
            let new = e.client_id.clone();
            reg.unindex(id, &old);
            reg.index(id, &new);
        }
    }

    pub(crate) fn set_principal(&self, id: Uuid, principal: &str) {
        if let Some(e) = self.0.map.write().map.get_mut(&id) {
            if e.principal.as_deref() != Some(principal) {
                e.principal = Some(principal.into());
            }
        }
    }

    /// The session's counts of subscriptions and queue consumers, for
    /// `GET /admin/sessions` (a shared lock and two stores).
    pub(crate) fn set_counts(&self, id: Uuid, subscriptions: usize, consumers: usize) {
        let clamp = |n: usize| u32::try_from(n).unwrap_or(u32::MAX);
        if let Some(e) = self.0.map.read().map.get(&id) {
            e.subscriptions
                .store(clamp(subscriptions), Ordering::Relaxed);
            e.consumers.store(clamp(consumers), Ordering::Relaxed);
        }
    }

    /// Marks a session as taken over by a newer connection of its client
    /// (`clean`: one that started clean), which its end reads even when
    /// its connection had closed already and so never saw the takeover's
    /// close reason.
    pub(crate) fn mark_taken_over(&self, id: Uuid, clean: bool) {
        if let Some(e) = self.0.map.read().map.get(&id) {
            e.taken_over.store(1 + u8::from(clean), Ordering::SeqCst);
        }
    }

    /// Whether a session was taken over, and whether by a clean start.
    pub(crate) fn taken_over(&self, id: Uuid) -> Option<bool> {
        match self
            .0
            .map
            .read()
            .map
            .get(&id)?
            .taken_over
            .load(Ordering::SeqCst)
        {
            0 => None,
            n => Some(n == 2),
        }
    }

    pub(crate) fn remove(&self, id: Uuid) {
        let mut reg = self.0.map.write();
        if let Some(e) = reg.map.remove(&id) {
            if e.tell.is_none() {
                reg.unindex(id, &e.client_id);
            }
            if let (true, Some(keys)) = (e.tell.is_some(), reg.typed.get_mut(e.kind)) {
                if let Some(ids) = keys.get_mut(&*e.client_id) {
                    ids.retain(|i| *i != id);
                    if ids.is_empty() {
                        keys.remove(&*e.client_id);
                    }
                }
            }
            crate::maps::shrink_if_sparse(&mut reg.map);
        }
    }

    /// Number of live sessions.
    pub fn len(&self) -> usize {
        self.0.map.read().map.len()
    }

    /// Whether no session is live.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn info(id: Uuid, e: &Entry) -> SessionInfo {
        let since_unix_ms = e
            .since
            .duration_since(SystemTime::UNIX_EPOCH)
            .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX));
        SessionInfo {
            id,
            kind: e.kind,
            client_id: e.client_id.to_string(),
            principal: e.principal.as_deref().map(str::to_owned),
            since_unix_s: since_unix_ms / 1000,
            since_unix_ms,
            subscriptions: e.subscriptions.load(Ordering::Relaxed),
            consumers: e.consumers.load(Ordering::Relaxed),
            outbound: e.out.stats(),
        }
    }

    /// Every live session.
    pub fn list(&self) -> Vec<SessionInfo> {
        self.0
            .map
            .read()
            .map
            .iter()
            .map(|(id, e)| Self::info(*id, e))
            .collect()
    }

    /// The sessions of a client id (a client may connect more than once).
    pub fn find_by_client(&self, client_id: &str) -> Vec<SessionInfo> {
        let reg = self.0.map.read();
        reg.under(client_id)
            .into_iter()
            .filter_map(|id| reg.map.get(&id).map(|e| (id, e)))
            .filter(|(_, e)| e.tell.is_none() && *e.client_id == *client_id)
            .map(|(id, e)| Self::info(id, e))
            .collect()
    }

    /// Sends a frame to one session.
    ///
    /// # Errors
    /// [`PushError::Closed`] if no such session is live, or as
    /// [`Outbound::push`].
    pub fn send(&self, id: Uuid, format: Format, frame: &ServerFrame) -> Result<(), PushError> {
        let out = self.0.map.read().map.get(&id).map(|e| e.out.clone());
        match out {
            Some(out) => out.push_frame(Priority::High, format, frame),
            None => Err(PushError::Closed),
        }
    }

    /// Closes one session: after its queue drains (`drain`), or at once.
    /// Returns whether the session was live.
    pub fn close(&self, id: Uuid, code: u16, reason: &str, drain: bool) -> bool {
        let out = self.0.map.read().map.get(&id).map(|e| e.out.clone());
        match out {
            Some(out) => {
                out.close(CloseRequest {
                    code,
                    reason: reason.to_owned(),
                    drain,
                });
                true
            }
            None => false,
        }
    }

    /// Actions sessions left to run after they end (MQTT 5's delayed
    /// wills and session expiry), cancelled when their client returns.
    pub fn later(&self) -> &super::Later {
        &self.0.later
    }

    /// Asks every session to close (used at shutdown); what sessions left
    /// pending ([`Sessions::later`]) is dropped.
    pub fn close_all(&self, code: u16, reason: &str, drain: bool) {
        self.0.later.close();
        let outs: Vec<Arc<Outbound>> = self
            .0
            .map
            .read()
            .map
            .values()
            .map(|e| e.out.clone())
            .collect();
        for out in outs {
            out.close(CloseRequest {
                code,
                reason: reason.to_owned(),
                drain,
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::SlowConsumer;
    use crate::protocol::frame::{Ping, ServerFrame};

    /// Every session holds one boxed entry: at 104 B it is a 112 B
    /// allocation (mimalloc's 112 B class takes blocks of up to 105 B,
    /// measured), at 120 it was 128.
    #[test]
    fn an_entry_fits_a_112_byte_allocation() {
        let size = std::mem::size_of::<Entry>();
        assert!(size <= 104, "a session's entry is {size} B");
    }

    #[test]
    fn list_find_send_close() {
        let sessions = Sessions::new();
        let a = Outbound::new(1 << 20, SlowConsumer::DropOldest, 16, Format::Json);
        let b = Outbound::new(1 << 20, SlowConsumer::DropOldest, 16, Format::Json);
        let (ida, idb) = (Uuid::now_v7(), Uuid::now_v7());
        sessions.insert(ida, "native", "anon".into(), a.clone());
        sessions.insert(idb, "native", "anon".into(), b.clone());
        sessions.set_client_id(ida, "sensor-1".into());
        assert_eq!(sessions.len(), 2);
        let found = sessions.find_by_client("sensor-1");
        assert_eq!(found.len(), 1);
        assert_eq!(found[0].id, ida);
        let pong = ServerFrame::Pong(Ping { rid: Some(1) });
        sessions.send(ida, Format::Json, &pong).unwrap();
        assert_eq!(a.stats().queued, 1);
        assert_eq!(b.stats().queued, 0);
        assert_eq!(
            sessions.send(Uuid::now_v7(), Format::Json, &pong),
            Err(PushError::Closed)
        );
        assert!(sessions.close(ida, 1000, "admin", false));
        assert!(a.is_closing() && !b.is_closing());
        sessions.close_all(1001, "bye", true);
        assert!(b.is_closing());
        sessions.remove(ida);
        assert_eq!(sessions.list().len(), 1);
    }

    /// The client-id index answers as a scan of every session would,
    /// through inserts, renames (hello), shared ids and removals.
    #[test]
    fn finding_by_client_id_agrees_with_a_scan() {
        let sessions = Sessions::new();
        let out = Outbound::new(1 << 20, SlowConsumer::DropOldest, 16, Format::Json);
        let ids: Vec<Uuid> = (0..600).map(|_| Uuid::now_v7()).collect();
        for (i, id) in ids.iter().enumerate() {
            // Two sessions per client id, and some one of their own.
            let client = if i % 3 == 0 {
                format!("own-{i}")
            } else {
                format!("c{}", i % 200)
            };
            sessions.insert(*id, "mqtt", client, out.clone());
        }
        for id in ids.iter().step_by(7) {
            sessions.set_client_id(*id, "renamed".into());
        }
        for id in ids.iter().step_by(5) {
            sessions.remove(*id);
        }
        let scan = |client: &str| {
            let mut found: Vec<Uuid> = sessions
                .list()
                .into_iter()
                .filter(|s| s.client_id == client)
                .map(|s| s.id)
                .collect();
            found.sort();
            found
        };
        let clients = (0..200)
            .map(|i| format!("c{i}"))
            .chain((0..600).map(|i| format!("own-{i}")))
            .chain(["renamed".to_owned(), "nobody".to_owned()]);
        let mut seen = 0;
        for client in clients {
            let mut found: Vec<Uuid> = sessions
                .find_by_client(&client)
                .iter()
                .map(|s| s.id)
                .collect();
            found.sort();
            assert_eq!(found, scan(&client), "client {client}");
            seen += found.len();
        }
        assert_eq!(seen, sessions.len(), "every session found under its id");
        assert!(!sessions.find_by_client("renamed").is_empty());
        for id in &ids {
            sessions.remove(*id);
        }
        assert!(sessions.0.map.read().by_client.is_empty());
        // A session registered again under its own id keeps one entry.
        let id = Uuid::now_v7();
        sessions.insert(id, "native", "same".into(), out.clone());
        sessions.insert(id, "native", "same".into(), out.clone());
        assert_eq!(sessions.find_by_client("same").len(), 1);
        sessions.remove(id);
        assert!(sessions.find_by_client("same").is_empty());
        assert!(sessions.0.map.read().by_client.is_empty());
    }
}
