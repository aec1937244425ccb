//! `[cluster]`: the NATS servers that join Wharf nodes into one broker,
//! and how this node introduces itself to them.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use super::ConfigError;

/// `[cluster]` settings. With no `nats` servers listed, the broker is a
/// single node and nothing here is used.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ClusterConfig {
    /// NATS server URLs (`nats://127.0.0.1:4222`, `tls://nats.internal`);
    /// empty runs a single node.
    pub nats: Vec<String>,
    /// This node's name, unique in the cluster; empty takes the host
    /// name with a random suffix.
    pub node: String,
    /// The nodes that home queues and the jobs resource (by rendezvous
    /// hashing of the queue's name, or a queue's `home`); other nodes
    /// forward queue and job calls to the home. Empty: every node keeps
    /// its own queues and jobs.
    pub members: Vec<String>,
    /// The first subject tokens of everything Wharf sends on NATS, so
    /// that several clusters can share one NATS (`wharf` gives topics on
    /// `wharf.t.>`).
    pub prefix: String,
    /// Refuse to start when NATS cannot be reached; `false` starts as a
    /// single node and joins when NATS comes.
    pub required: bool,
    /// Cross-node publishes held while NATS is slow or away; past it they
    /// are dropped and counted.
    pub buffer: usize,
    /// Messages from other nodes held per filter while this node catches
    /// up; past it they are lost and counted (core NATS cannot slow the
    /// publisher down).
    pub inbound_buffer: usize,
    /// How long a start waits for NATS, and a subscribe for NATS (and
    /// the other nodes) to confirm it, in milliseconds.
    pub connect_timeout_ms: u64,
    /// Send every topic publish to NATS, whether another node listens to
    /// its topic or not: for NATS clients that read `{prefix}.t.>`
    /// themselves. Off, a publish goes to NATS only when another node has
    /// a matching filter.
    pub forward_all: bool,
    /// NATS user name (with `password`).
    pub user: String,
    /// NATS password (with `user`).
    pub password: String,
    /// NATS token.
    pub token: String,
    /// A NATS `.creds` file (JWT and NKEY seed), as `nsc` writes them.
    pub creds: PathBuf,
    /// CA certificate (PEM) that NATS's TLS certificate must chain to;
    /// empty takes the system's.
    pub tls_ca: PathBuf,
    /// Client certificate (PEM) for NATS servers that verify clients,
    /// with `tls_key`.
    pub tls_cert: PathBuf,
    /// The client certificate's private key (PEM).
    pub tls_key: PathBuf,
    /// Use TLS even when the URL says `nats://`.
    pub tls_required: bool,
    /// Queues and the jobs survive the loss of their home node: each
    /// queue's writes (and the job records) are also kept in a JetStream
    /// stream (the journal), the home is the member holding the lease (a
    /// JetStream message it renews), and when the home is lost the next
    /// member takes the lease, rebuilds the queue (or the jobs) from the
    /// journal and serves it. Needs `members` and JetStream on NATS;
    /// costs a NATS round trip per confirmed enqueue or ack
    /// (group-committed).
    pub failover: bool,
    /// How long a lease lasts unless renewed, in milliseconds: a lost
    /// home's queues and jobs move after about this long.
    pub lease_ms: u64,
    /// JetStream replicas of the journal and the leases (3 on a
    /// three-server NATS cluster; 1 on one server).
    pub replicas: usize,
}

impl Default for ClusterConfig {
    fn default() -> Self {
        ClusterConfig {
            nats: Vec::new(),
            node: String::new(),
            members: Vec::new(),
            prefix: "wharf".into(),
            required: true,
            buffer: 65_536,
            inbound_buffer: 262_144,
            connect_timeout_ms: 5_000,
            forward_all: false,
            user: String::new(),
            password: String::new(),
            token: String::new(),
            creds: PathBuf::new(),
            tls_ca: PathBuf::new(),
            tls_cert: PathBuf::new(),
            tls_key: PathBuf::new(),
            tls_required: false,
            failover: false,
            lease_ms: 10_000,
            replicas: 1,
        }
    }
}

impl ClusterConfig {
    /// Whether this node is part of a cluster.
    pub fn enabled(&self) -> bool {
        !self.nats.is_empty()
    }

    /// Checks ranges and combinations, naming the key at fault.
    ///
    /// # Errors
    /// [`ConfigError::Invalid`].
    pub fn validate(&self) -> Result<(), ConfigError> {
        let invalid = |key: &str, reason: String| ConfigError::Invalid {
            key: format!("cluster.{key}"),
            reason,
        };
        for (i, url) in self.nats.iter().enumerate() {
            if let Err(e) = url.parse::<async_nats::ServerAddr>() {
                return Err(invalid(
                    &format!("nats[{i}]"),
                    format!("not a NATS server address ({url:?}): {e}"),
                ));
            }
        }
        if !valid_prefix(&self.prefix) {
            return Err(invalid(
                "prefix",
                "must be NATS subject tokens (printable ASCII, no '*' or '>', \
                 separated by single dots)"
                    .into(),
            ));
        }
        if !self.node.is_empty() && (self.node.contains('.') || !valid_prefix(&self.node)) {
            return Err(invalid(
                "node",
                "must be printable ASCII without '.', '*' or '>'".into(),
            ));
        }
        for (i, m) in self.members.iter().enumerate() {
            if m.is_empty() || m.contains('.') || !valid_prefix(m) {
                return Err(invalid(
                    &format!("members[{i}]"),
                    "a node name: printable ASCII without '.', '*' or '>'".into(),
                ));
            }
            if self.members[..i].contains(m) {
                return Err(invalid(
                    &format!("members[{i}]"),
                    format!("{m:?} is listed twice"),
                ));
            }
        }
        if !self.members.is_empty() && self.node.is_empty() {
            return Err(invalid(
                "node",
                "name this node when members are listed (queues are homed by node name)".into(),
            ));
        }
        if self.buffer == 0 || self.buffer > 1 << 24 {
            return Err(invalid("buffer", "must be between 1 and 16777216".into()));
        }
        if self.inbound_buffer == 0 || self.inbound_buffer > 1 << 24 {
            return Err(invalid(
                "inbound_buffer",
                "must be between 1 and 16777216".into(),
            ));
        }
        if self.connect_timeout_ms < 10 || self.connect_timeout_ms > 600_000 {
            return Err(invalid(
                "connect_timeout_ms",
                "must be between 10 and 600000".into(),
            ));
        }
        if self.user.is_empty() != self.password.is_empty() {
            return Err(invalid("user", "user and password go together".into()));
        }
        let ways = [
            !self.user.is_empty(),
            !self.token.is_empty(),
            !self.creds.as_os_str().is_empty(),
        ];
        if ways.iter().filter(|w| **w).count() > 1 {
            return Err(invalid(
                "creds",
                "give one of user and password, token, or creds".into(),
            ));
        }
        if self.failover && (self.members.is_empty() || self.nats.is_empty()) {
            return Err(invalid(
                "failover",
                "needs nats and members (queues fail over between the members)".into(),
            ));
        }
        if !(1_000..=600_000).contains(&self.lease_ms) {
            return Err(invalid(
                "lease_ms",
                "must be between 1000 and 600000".into(),
            ));
        }
        if !(1..=5).contains(&self.replicas) {
            return Err(invalid("replicas", "must be between 1 and 5".into()));
        }
        if self.tls_cert.as_os_str().is_empty() != self.tls_key.as_os_str().is_empty() {
            return Err(invalid(
                "tls_cert",
                "tls_cert and tls_key go together".into(),
            ));
        }
        Ok(())
    }
}

/// Whether a prefix can head NATS subjects (`[cluster] prefix`, node
/// names): dot-separated tokens of printable ASCII without NATS's
/// wildcards (`*`, `>`).
pub fn valid_prefix(prefix: &str) -> bool {
    !prefix.is_empty()
        && prefix.split('.').all(|t| {
            !t.is_empty()
                && t.bytes()
                    .all(|b| (0x21..=0x7e).contains(&b) && !matches!(b, b'.' | b'*' | b'>'))
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn failover_needs_members_and_sane_leases_and_replicas() {
        let mut c = ClusterConfig {
            nats: vec!["nats://127.0.0.1:4222".into()],
            node: "a".into(),
            failover: true,
            ..ClusterConfig::default()
        };
        let key = |c: &ClusterConfig| match c.validate() {
            Err(ConfigError::Invalid { key, .. }) => key,
            other => panic!("{other:?}"),
        };
        assert_eq!(key(&c), "cluster.failover");
        c.members = vec!["a".into(), "b".into()];
        assert!(c.validate().is_ok());
        c.lease_ms = 999;
        assert_eq!(key(&c), "cluster.lease_ms");
        c.lease_ms = 10_000;
        c.replicas = 0;
        assert_eq!(key(&c), "cluster.replicas");
    }
}
