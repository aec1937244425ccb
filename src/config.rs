//! Configuration: one `Config` read from TOML, with every default written in
//! the shipped `config.toml` (embedded in the binary as [`DEFAULT_TOML`]).
//!
//! Configuration flows one way: the binary reads a file (or the embedded
//! defaults), applies command-line overrides, calls [`Config::validate`] and
//! hands the result to [`crate::run`]. Nothing below reads the environment.
//! Unknown keys are refused, and every error names the key at fault.

use std::net::SocketAddr;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use crate::taskq::SchedulerConfig;

pub mod auth;
mod cluster;
mod history;
mod jobs;
mod queues;
mod rules;
mod store;

pub use cluster::{ClusterConfig, valid_prefix};
pub use history::{HistoryDecl, MAX_HISTORY_SIZE, PresenceDecl};
pub use jobs::{JobKindConfig, JobsConfig};
pub use queues::{ExpiredPolicy, QueueDecl, QueueOptions};
pub use rules::RuleDecl;
pub use store::{FlushMode, StoreConfig};

/// The shipped `config.toml`: every key with its default and a comment.
pub const DEFAULT_TOML: &str = include_str!("../config.toml");

/// The whole broker configuration. Missing sections and keys take their
/// defaults; unknown ones are errors.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Config {
    /// `[server]`: the HTTP/WebSocket listener.
    pub server: ServerConfig,
    /// `[scheduler]`: the resource task queues' worker pool.
    pub scheduler: SchedulerConfig,
    /// `[session]`: per-connection limits and the slow-consumer policy.
    pub session: SessionConfig,
    /// `[topics]`: topic lifetime.
    pub topics: TopicsConfig,
    /// `[store]`: where and how the sled database lives.
    pub store: StoreConfig,
    /// `[queue_defaults]`: options of queues created on first use, and of
    /// declared queues for every option they do not set.
    pub queue_defaults: QueueOptions,
    /// `[[queues]]`: queues declared up front, with their options and the
    /// topic filters bound to them.
    pub queues: Vec<QueueDecl>,
    /// `[jobs]`: job workers' leases, retry policies and limits.
    pub jobs: JobsConfig,
    /// `[mqtt]`: MQTT over WebSocket (`GET /mqtt`).
    pub mqtt: MqttConfig,
    /// `[log]`: what the binary logs and how.
    pub log: LogConfig,
    /// `[auth]`: credentials, anonymous access and permissions.
    pub auth: auth::AuthConfig,
    /// `[[rules]]`: matcher trees and the actions they trigger on
    /// published messages (see [`crate::rules`]).
    pub rules: Vec<RuleDecl>,
    /// `[[history]]`: topics whose last messages are kept, with offsets
    /// and an epoch, for clients to recover what they missed.
    pub history: Vec<HistoryDecl>,
    /// `[[presence]]`: topics that know who is subscribed to them.
    pub presence: Vec<PresenceDecl>,
    /// `[cluster]`: the NATS servers that join nodes into one broker.
    pub cluster: ClusterConfig,
    /// The file this was read from, which a rules reload (`SIGHUP`,
    /// `POST /admin/rules/reload`) reads again; `None` for the embedded
    /// defaults and configs built in code.
    #[serde(skip)]
    pub file: Option<PathBuf>,
}

/// `[server]` settings.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ServerConfig {
    /// Address to listen on; port 0 picks a free port (the bound address is
    /// logged).
    pub bind: SocketAddr,
    /// HTTP (I/O) worker threads; 0 means one per two CPU cores, at least
    /// one (see [`ServerConfig::effective_http_workers`]).
    pub http_workers: usize,
    /// Most simultaneous connections per HTTP worker (more wait in the
    /// backlog); with `lean_websockets`, also most WebSocket connections
    /// for the whole server (past it an upgrade gets 503 `overloaded`).
    pub max_connections: usize,
    /// Seconds a graceful shutdown waits for in-flight requests.
    pub shutdown_timeout_s: u64,
    /// Seconds an HTTP request body may take to arrive, whole; a slower
    /// one is answered `408 body_timeout`.
    pub body_timeout_s: u64,
    /// Most HTTP request bodies read at once; past it a request with a
    /// body is answered `503 overloaded`.
    pub max_body_reads: usize,
    /// Whether the `wharf` binary lets the kernel back its memory with
    /// transparent huge pages (where the kernel's THP mode is `always`).
    /// Off by default: huge pages made an idle broker hold ~50 MiB it did
    /// not use, and its memory grow after a load had gone.
    pub huge_pages: bool,
    /// Whether WebSocket connections on the broker's own server leave
    /// actix-http for Wharf's own reader and writer once upgraded, so that
    /// an idle one holds no buffer: about 8 KiB per idle connection
    /// instead of about 16 (benches/README.md, "Memory per idle
    /// connection"), at the same throughput. On by default; off runs
    /// them the way an app that mounts Wharf's routes in its own
    /// `HttpServer` does, through actix-http to the end.
    pub lean_websockets: bool,
    /// Web origins (`https://app.example.com`) whose pages may open
    /// WebSockets to the broker, besides the broker's own; `"*"` allows
    /// every origin. Upgrades and changing HTTP requests (POST, PUT,
    /// PATCH, DELETE) from browsers on other origins get 403.
    pub allowed_origins: Vec<String>,
    /// Host names the broker answers to besides IP addresses and
    /// `localhost` (`broker.example.com`); `"*"` answers to every name.
    /// An upgrade or API request (every route but `/health` and the
    /// dashboard's page) whose `Host` names anything else gets 403, so that a
    /// web page cannot reach a broker on the user's machine through a
    /// name it controls (DNS rebinding).
    pub allowed_hosts: Vec<String>,
    /// `[server.tls]`: serve https and wss instead of http and ws.
    pub tls: TlsConfig,
}

/// `[server.tls]`: the listener's certificate. Both paths empty: plain
/// HTTP; both set: TLS only (rustls, TLS 1.2 and 1.3).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct TlsConfig {
    /// PEM file with the certificate chain, leaf first.
    pub cert: PathBuf,
    /// PEM file with the private key (PKCS#8, PKCS#1 or SEC1).
    pub key: PathBuf,
}

impl TlsConfig {
    /// Whether TLS is configured.
    pub fn enabled(&self) -> bool {
        !self.cert.as_os_str().is_empty() || !self.key.as_os_str().is_empty()
    }
}

impl Default for ServerConfig {
    fn default() -> Self {
        ServerConfig {
            bind: SocketAddr::from(([127, 0, 0, 1], 7878)),
            http_workers: 0,
            max_connections: 25_000,
            shutdown_timeout_s: 10,
            body_timeout_s: 10,
            max_body_reads: 256,
            huge_pages: false,
            lean_websockets: true,
            allowed_origins: Vec::new(),
            allowed_hosts: Vec::new(),
            tls: TlsConfig::default(),
        }
    }
}

/// What happens to a session whose outbound queue is full.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SlowConsumer {
    /// Drop the oldest queued messages to make room, count them, and tell
    /// the client with a `dropped` notice (at-most-once delivery).
    #[default]
    DropOldest,
    /// Close the connection with 1008 and a reason.
    Disconnect,
}

/// `[session]` settings: limits of one WebSocket connection.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SessionConfig {
    /// Largest WebSocket frame accepted, in bytes; larger closes with 1009.
    pub max_frame: usize,
    /// Largest message payload accepted, in bytes (at most `max_frame`).
    pub max_payload: usize,
    /// Bytes queued for one session before the slow-consumer policy applies.
    pub outbound_limit: usize,
    /// `drop_oldest` or `disconnect`.
    pub slow_consumer: SlowConsumer,
    /// Frames laid into the write buffer per turn; a writer takes turns
    /// up to 32 KiB per write before it yields to other connections.
    pub write_quantum: usize,
    /// Frames per second a session may send, on average.
    pub rate_per_s: u32,
    /// Frames a session may send in a burst above the rate.
    pub rate_burst: u32,
    /// Seconds between server pings on a quiet connection.
    pub ping_interval_s: u64,
    /// Seconds without any frame from the client before closing (1001).
    pub idle_timeout_s: u64,
    /// Seconds a connection may stay without credentials: a native
    /// session on a broker that requires authentication must send a
    /// `hello` with a token within it (else an `unauthorized` error and
    /// close 4401), an MQTT connection its CONNECT (else it is closed),
    /// however it answers pings meanwhile.
    pub hello_timeout_s: u64,
    /// Seconds data may stay unacknowledged by the client's TCP stack
    /// (including a zero receive window) before the kernel drops the
    /// connection (TCP_USER_TIMEOUT); 0 leaves the kernel default.
    pub write_timeout_s: u64,
    /// Most subscriptions one session may hold.
    pub max_subscriptions: usize,
    /// Most operations one transaction may stage.
    pub max_transaction_ops: usize,
}

impl Default for SessionConfig {
    fn default() -> Self {
        SessionConfig {
            max_frame: 1 << 20,
            max_payload: 1 << 20,
            outbound_limit: 4 << 20,
            slow_consumer: SlowConsumer::DropOldest,
            write_quantum: 64,
            rate_per_s: 100_000,
            rate_burst: 100_000,
            ping_interval_s: 20,
            idle_timeout_s: 60,
            hello_timeout_s: 10,
            write_timeout_s: 60,
            max_subscriptions: 1000,
            max_transaction_ops: 10_000,
        }
    }
}

/// `[topics]` settings.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct TopicsConfig {
    /// Seconds a topic with no subscribers and no retained message lives
    /// after its last use.
    pub idle_timeout_s: u64,
    /// Most topics that may exist at once; creating one more (by a retained
    /// publish, a subscription to a new name, or a publish to a new name a
    /// wildcard subscription matches) is refused with `too_many_topics`.
    pub max_topics: usize,
    /// Most `/`-separated levels in a topic name, filter or queue name
    /// (1 to 1024); more is refused with `invalid_topic` /
    /// `invalid_filter`.
    pub max_levels: usize,
    /// Most bytes in a topic name, filter or queue name (1 to 65535).
    pub max_name_bytes: usize,
}

impl TopicsConfig {
    /// The bounds every name that enters the broker is checked against.
    pub fn limits(&self) -> crate::routing::TopicLimits {
        crate::routing::TopicLimits {
            max_levels: self.max_levels,
            max_bytes: self.max_name_bytes,
        }
    }
}

impl Default for TopicsConfig {
    fn default() -> Self {
        let limits = crate::routing::TopicLimits::DEFAULT;
        TopicsConfig {
            idle_timeout_s: 60,
            max_topics: 1_000_000,
            max_levels: limits.max_levels,
            max_name_bytes: limits.max_bytes,
        }
    }
}

/// `[mqtt]` settings.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct MqttConfig {
    /// Address of the MQTT-over-TCP listener (1883); empty = none.
    pub tcp_bind: String,
    /// Address of the MQTT-over-TLS listener (8883), used when
    /// `[server.tls]` is set; empty = none.
    pub tls_bind: String,
    /// The plaintext user table of earlier versions: refused (with a
    /// message saying how to move each user to `[[auth.users]]`).
    pub users: std::collections::BTreeMap<String, String>,
    /// What happens when a QoS 1 or 2 subscriber falls `max_inflight`
    /// deliveries behind.
    pub slow_subscriber: SlowSubscriber,
    /// Unacknowledged QoS 1 and 2 deliveries to one subscriber (1 to
    /// 65535) at which `slow_subscriber` applies.
    pub max_inflight: usize,
    /// Longest a publisher is held back for one message (`slow_subscriber
    /// = "hold"`) before the subscribers still behind are disconnected.
    pub hold_timeout_ms: u64,
    /// How long an MQTT/TCP connection (not TLS) stays quiet after its
    /// writer retired (about a second after its last traffic) before it is
    /// parked: held out of any task, its socket out of tokio's hands,
    /// until it reads, is sent something or reaches its keep-alive
    /// deadline or credential expiry. About 0.3-0.5 KiB less per idle
    /// connection; the first packet after a park costs a task spawn. 0 =
    /// never, else 100 to 86,400,000.
    pub park_after_ms: u64,
}

/// `[mqtt] park_after_ms`'s default.
pub const PARK_AFTER_MS: u64 = 1_000;

/// `[mqtt] max_inflight`'s default.
pub const MAX_INFLIGHT: usize = 8192;
/// `[mqtt] hold_timeout_ms`'s default.
pub const HOLD_TIMEOUT_MS: u64 = 10_000;

/// What an MQTT subscriber that does not keep up with its QoS 1 and 2
/// deliveries costs: its publishers' pace, or its messages.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SlowSubscriber {
    /// Hold its publishers back (no PUBACK, nothing more read from them)
    /// until it catches up: nothing a publisher was told was accepted is
    /// dropped.
    #[default]
    Hold,
    /// Drop (and count) further topic deliveries to it: publishers never
    /// wait for a subscriber.
    Drop,
}

impl Default for MqttConfig {
    fn default() -> Self {
        MqttConfig {
            tcp_bind: "127.0.0.1:1883".into(),
            tls_bind: "127.0.0.1:8883".into(),
            users: Default::default(),
            slow_subscriber: SlowSubscriber::Hold,
            max_inflight: MAX_INFLIGHT,
            hold_timeout_ms: HOLD_TIMEOUT_MS,
            park_after_ms: PARK_AFTER_MS,
        }
    }
}

impl MqttConfig {
    /// The TCP listener's address, if any.
    ///
    /// # Errors
    /// [`ConfigError::Invalid`] naming `mqtt.tcp_bind`.
    pub fn tcp_addr(&self) -> Result<Option<SocketAddr>, ConfigError> {
        parse_bind("mqtt.tcp_bind", &self.tcp_bind)
    }

    /// The TLS listener's address, if any (only with `[server.tls]`).
    ///
    /// # Errors
    /// [`ConfigError::Invalid`] naming `mqtt.tls_bind`.
    pub fn tls_addr(&self, tls: &TlsConfig) -> Result<Option<SocketAddr>, ConfigError> {
        if !tls.enabled() {
            return Ok(None);
        }
        parse_bind("mqtt.tls_bind", &self.tls_bind)
    }
}

fn parse_bind(key: &str, value: &str) -> Result<Option<SocketAddr>, ConfigError> {
    if value.is_empty() {
        return Ok(None);
    }
    value.parse().map(Some).map_err(|_| ConfigError::Invalid {
        key: key.into(),
        reason: format!("{value:?} is not an address (IP:port), nor empty"),
    })
}

impl ServerConfig {
    /// The number of HTTP workers to start: `http_workers`, or if 0, one per
    /// two cores (at least one). Each delivery between connections on
    /// different I/O threads costs a cross-thread wake-up; half the cores
    /// leaves the rest to the task-queue workers and the kernel's network
    /// processing. Measured on a 2-core machine, one I/O thread gave both
    /// more throughput and a lower latency tail than two
    /// (benches/README.md).
    pub fn effective_http_workers(&self) -> usize {
        if self.http_workers == 0 {
            let cores = std::thread::available_parallelism().map_or(2, |n| n.get());
            (cores / 2).max(1)
        } else {
            self.http_workers
        }
    }
}

/// How log lines are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    /// Human-readable lines.
    #[default]
    Text,
    /// One JSON object per line, for log collectors.
    Json,
}

/// `[log]` settings.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct LogConfig {
    /// A tracing filter: a level (`info`) or directives
    /// (`wharf=debug,actix_web=warn`). `RUST_LOG` overrides it.
    pub level: String,
    /// `text` or `json`.
    pub format: LogFormat,
}

impl Default for LogConfig {
    fn default() -> Self {
        LogConfig {
            level: "info".into(),
            format: LogFormat::Text,
        }
    }
}

/// A configuration that cannot be used. Every variant names the key.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file could not be read.
    #[error("cannot read config file {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// What the OS said.
        #[source]
        source: std::io::Error,
    },
    /// The TOML is malformed, has an unknown key, or a value of the wrong
    /// type.
    #[error("{key}: {reason}")]
    Parse {
        /// Dotted path of the key (`scheduler.quantum`), `(document)`, or
        /// for a syntax error `TOML syntax error at line L, column C`.
        key: String,
        /// The parser's explanation.
        reason: String,
    },
    /// A value parsed but is out of range.
    #[error("{key}: {reason}")]
    Invalid {
        /// Dotted path of the key.
        key: String,
        /// Why it was refused.
        reason: String,
    },
}

impl Config {
    /// Parses TOML text; missing keys take their defaults.
    ///
    /// # Errors
    /// [`ConfigError::Parse`] naming the key for syntax errors, unknown keys
    /// and wrong types. Values are not range-checked: call [`validate`](Self::validate).
    pub fn from_toml(text: &str) -> Result<Config, ConfigError> {
        let de = toml::Deserializer::new(text);
        serde_path_to_error::deserialize(de).map_err(|e| {
            let path = e.path().to_string();
            let inner = e.into_inner();
            // toml's message is the explanation over one or more lines
            // (`invalid table header` / `expected ...`): made one line.
            let reason = inner
                .message()
                .trim()
                .lines()
                .map(str::trim)
                .filter(|l| !l.is_empty())
                .collect::<Vec<_>>()
                .join(", ");
            let at = inner.span().map(|span| line_col(text, span.start));
            let syntax = (path == "." || path.is_empty()) && text.parse::<toml::Table>().is_err();
            match (syntax, at) {
                // A syntax error has no key: its place is what to look at.
                (true, Some(at)) => ConfigError::Parse {
                    key: format!("TOML syntax error at {at}"),
                    reason,
                },
                (_, at) => {
                    let key = if path == "." || path.is_empty() {
                        "(document)".to_owned()
                    } else {
                        path
                    };
                    let reason = match at {
                        Some(at) => format!("{reason} (at {at})"),
                        None => reason,
                    };
                    ConfigError::Parse { key, reason }
                }
            }
        })
    }

    /// The embedded defaults (the shipped `config.toml`).
    ///
    /// # Errors
    /// Only if the embedded file were broken, which a test rules out.
    pub fn embedded() -> Result<Config, ConfigError> {
        Config::from_toml(DEFAULT_TOML)
    }

    /// Reads and parses a file.
    ///
    /// # Errors
    /// [`ConfigError::Read`] or [`ConfigError::Parse`].
    pub fn from_file(path: &std::path::Path) -> Result<Config, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.to_owned(),
            source,
        })?;
        let mut config = Config::from_toml(&text)?;
        config.file = Some(path.to_owned());
        Ok(config)
    }

    /// Checks ranges and relations, naming the first bad key.
    ///
    /// # Errors
    /// [`ConfigError::Invalid`].
    pub fn validate(&self) -> Result<(), ConfigError> {
        let invalid = |key: &str, reason: &str| ConfigError::Invalid {
            key: key.to_owned(),
            reason: reason.to_owned(),
        };
        if self.server.http_workers > 1024 {
            return Err(invalid("server.http_workers", "must be at most 1024"));
        }
        if self.server.max_connections == 0 {
            return Err(invalid("server.max_connections", "must be at least 1"));
        }
        if self.server.shutdown_timeout_s > 3600 {
            return Err(invalid("server.shutdown_timeout_s", "must be at most 3600"));
        }
        if self.server.body_timeout_s == 0 || self.server.body_timeout_s > 3600 {
            return Err(invalid(
                "server.body_timeout_s",
                "must be between 1 and 3600",
            ));
        }
        let tls = &self.server.tls;
        if tls.enabled() && (tls.cert.as_os_str().is_empty() || tls.key.as_os_str().is_empty()) {
            return Err(invalid(
                "server.tls",
                "needs both cert and key (PEM files), or neither",
            ));
        }
        if self.server.max_body_reads == 0 {
            return Err(invalid("server.max_body_reads", "must be at least 1"));
        }
        self.scheduler
            .validate()
            .map_err(|e| ConfigError::Invalid {
                key: format!("scheduler.{}", e.key),
                reason: e.reason,
            })?;
        let session = &self.session;
        if session.max_frame < 64 || session.max_frame > crate::protocol::codec::MAX_DECODE_BYTES {
            return Err(invalid(
                "session.max_frame",
                "must be between 64 and 16777216 bytes",
            ));
        }
        if session.max_payload == 0 || session.max_payload > session.max_frame {
            return Err(invalid(
                "session.max_payload",
                "must be at least 1 and at most session.max_frame",
            ));
        }
        if session.outbound_limit < session.max_frame {
            return Err(invalid(
                "session.outbound_limit",
                "must be at least session.max_frame",
            ));
        }
        if session.write_quantum == 0 {
            return Err(invalid("session.write_quantum", "must be at least 1"));
        }
        if session.rate_per_s == 0 {
            return Err(invalid("session.rate_per_s", "must be at least 1"));
        }
        if session.ping_interval_s == 0 {
            return Err(invalid("session.ping_interval_s", "must be at least 1"));
        }
        if session.hello_timeout_s == 0 {
            return Err(invalid("session.hello_timeout_s", "must be at least 1"));
        }
        if session.idle_timeout_s <= session.ping_interval_s {
            return Err(invalid(
                "session.idle_timeout_s",
                "must be longer than session.ping_interval_s",
            ));
        }
        if session.max_transaction_ops == 0 {
            return Err(invalid("session.max_transaction_ops", "must be at least 1"));
        }
        if session.write_timeout_s > 3600 {
            return Err(invalid("session.write_timeout_s", "must be at most 3600"));
        }
        if self.mqtt.max_inflight == 0 || self.mqtt.max_inflight > usize::from(u16::MAX) {
            return Err(invalid("mqtt.max_inflight", "must be between 1 and 65535"));
        }
        if self.mqtt.hold_timeout_ms == 0 || self.mqtt.hold_timeout_ms > 3_600_000 {
            return Err(invalid(
                "mqtt.hold_timeout_ms",
                "must be between 1 and 3600000",
            ));
        }
        if self.mqtt.park_after_ms != 0 && !(100..=86_400_000).contains(&self.mqtt.park_after_ms) {
            return Err(invalid(
                "mqtt.park_after_ms",
                "must be between 100 and 86400000 (0: never)",
            ));
        }
        if self.topics.max_topics == 0 {
            return Err(invalid("topics.max_topics", "must be at least 1"));
        }
        if self.topics.idle_timeout_s == 0 {
            return Err(invalid("topics.idle_timeout_s", "must be at least 1"));
        }
        if self.store.data_dir.as_os_str().is_empty() {
            return Err(invalid("store.data_dir", "must not be empty"));
        }
        if self.store.cache_capacity_mb == 0 {
            return Err(invalid("store.cache_capacity_mb", "must be at least 1"));
        }
        if self.store.cache_capacity_mb > 1 << 20 {
            return Err(invalid(
                "store.cache_capacity_mb",
                "must be at most 1048576 (1 TiB)",
            ));
        }
        if self.store.interval_ms == 0 || self.store.interval_ms > 60_000 {
            return Err(invalid("store.interval_ms", "must be between 1 and 60000"));
        }
        let widest = crate::routing::TopicLimits::WIDEST;
        if self.topics.max_levels == 0 || self.topics.max_levels > widest.max_levels {
            return Err(invalid("topics.max_levels", "must be between 1 and 1024"));
        }
        if self.topics.max_name_bytes == 0 || self.topics.max_name_bytes > widest.max_bytes {
            return Err(invalid(
                "topics.max_name_bytes",
                "must be between 1 and 65535",
            ));
        }
        let limits = self.topics.limits();
        self.queue_defaults.validate("queue_defaults", &limits)?;
        HistoryDecl::validate_all(&self.history, &limits)?;
        PresenceDecl::validate_all(&self.presence, &limits)?;
        let jobs = &self.jobs;
        if jobs.worker_lease_ms < 100 || jobs.worker_lease_ms > 86_400_000 {
            return Err(invalid(
                "jobs.worker_lease_ms",
                "must be between 100 and 86400000",
            ));
        }
        if jobs.max_attempts == 0 {
            return Err(invalid("jobs.max_attempts", "must be at least 1"));
        }
        if jobs.max_jobs == 0 || jobs.max_workers == 0 {
            return Err(invalid(
                "jobs.max_jobs",
                "max_jobs and max_workers must be at least 1",
            ));
        }
        if jobs.max_wait_ms > 600_000 {
            return Err(invalid("jobs.max_wait_ms", "must be at most 600000"));
        }
        for (i, k) in jobs.kinds.iter().enumerate() {
            if k.name.is_empty() || k.max_attempts == Some(0) {
                return Err(ConfigError::Invalid {
                    key: format!("jobs.kinds[{i}]"),
                    reason: "needs a name, and max_attempts of at least 1".into(),
                });
            }
        }
        let mut names = std::collections::HashSet::new();
        for (i, q) in self.queues.iter().enumerate() {
            let key = format!("queues[{i}]");
            if let Err(e) = limits.check_topic(&q.name) {
                return Err(ConfigError::Invalid {
                    key: format!("{key}.name"),
                    reason: format!("not a valid queue name: {e}"),
                });
            }
            if !names.insert(q.name.as_str()) {
                return Err(ConfigError::Invalid {
                    key: format!("{key}.name"),
                    reason: format!("queue {:?} is declared twice", q.name),
                });
            }
            for (j, f) in q.bind.iter().enumerate() {
                if let Err(e) = limits.check_filter(f) {
                    return Err(ConfigError::Invalid {
                        key: format!("{key}.bind[{j}]"),
                        reason: format!("not a valid topic filter: {e}"),
                    });
                }
            }
            q.options(&self.queue_defaults).validate(&key, &limits)?;
        }
        self.mqtt.tcp_addr()?;
        self.mqtt.tls_addr(&self.server.tls)?;
        if !self.mqtt.users.is_empty() {
            return Err(invalid(
                "mqtt.users",
                "plaintext passwords are no longer accepted: list each user as \
                 [[auth.users]] with name and password_hash (print a hash with \
                 `wharf passwd`), and give it permissions under [auth.users.allow]",
            ));
        }
        self.auth.validate()?;
        if let Err(e) = tracing_subscriber::EnvFilter::try_new(&self.log.level) {
            return Err(ConfigError::Invalid {
                key: "log.level".into(),
                reason: format!("not a tracing filter: {e}"),
            });
        }
        self.cluster.validate()?;
        for (i, q) in self.queues.iter().enumerate() {
            if let Some(home) = &q.home
                && !self.cluster.members.contains(home)
            {
                return Err(ConfigError::Invalid {
                    key: format!("queues[{i}].home"),
                    reason: format!("{home:?} is not one of cluster.members"),
                });
            }
        }
        if !self.cluster.members.is_empty() {
            self.check_dead_letters_follow_their_queues()?;
        }
        Ok(())
    }
}

impl Config {
    /// With queues on several nodes, a dead-letter queue lives with its
    /// queue: so no two queues may share one, and a queue that is another's
    /// dead-letter queue takes its home from that queue.
    fn check_dead_letters_follow_their_queues(&self) -> Result<(), ConfigError> {
        if !self.queue_defaults.dead_letter.is_empty() {
            return Err(ConfigError::Invalid {
                key: "queue_defaults.dead_letter".into(),
                reason: "with cluster.members, queues live on different nodes and cannot share \
                         one dead-letter queue: leave it empty (each queue gets <name>.dlq)"
                    .into(),
            });
        }
        let mut seen: std::collections::HashMap<&str, &str> = std::collections::HashMap::new();
        for (i, q) in self.queues.iter().enumerate() {
            let Some(dlq) = q.dead_letter.as_deref().filter(|d| !d.is_empty()) else {
                continue;
            };
            if let Some(other) = seen.insert(dlq, &q.name) {
                return Err(ConfigError::Invalid {
                    key: format!("queues[{i}].dead_letter"),
                    reason: format!(
                        "{dlq:?} is also {other:?}'s: with cluster.members a dead-letter queue \
                         lives with its one queue"
                    ),
                });
            }
        }
        for (i, q) in self.queues.iter().enumerate() {
            if q.home.is_some() && seen.contains_key(q.name.as_str()) {
                return Err(ConfigError::Invalid {
                    key: format!("queues[{i}].home"),
                    reason: format!(
                        "{:?} is a dead-letter queue: it lives with its queue",
                        q.name
                    ),
                });
            }
        }
        Ok(())
    }
}

fn line_col(text: &str, offset: usize) -> String {
    let before = &text[..offset.min(text.len())];
    let line = before.matches('\n').count() + 1;
    let col = before.len() - before.rfind('\n').map_or(0, |i| i + 1) + 1;
    format!("line {line}, column {col}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shipped_config_parses_validates_and_equals_the_code_defaults() {
        let shipped = Config::from_toml(DEFAULT_TOML).expect("shipped config.toml parses");
        shipped.validate().expect("shipped config.toml validates");
        assert_eq!(
            shipped,
            Config::default(),
            "config.toml and Default drifted"
        );
    }

    /// The first TOML example in README's section `heading`, parsed and
    /// validated.
    fn readme_example(heading: &str) -> Config {
        let readme = include_str!("../README.md");
        let block = readme
            .split(heading)
            .nth(1)
            .and_then(|s| s.split("```toml\n").nth(1))
            .and_then(|b| b.split("```").next())
            .unwrap_or_else(|| panic!("README has {heading}, with a TOML example"));
        let config = Config::from_toml(block).expect("the example parses");
        config.validate().expect("the example validates");
        config
    }

    /// README's failover example is a config that validates.
    #[test]
    fn the_readme_failover_example_is_a_valid_config() {
        let config = readme_example("### Failover");
        assert!(config.cluster.failover);
        assert_eq!(config.cluster.replicas, 3);
    }

    /// README's example for a QoS 1 subscriber that falls behind is a
    /// config that validates, and bad values are named.
    #[test]
    fn the_readme_slow_subscriber_example_is_a_valid_config() {
        let config = readme_example("### A QoS 1 subscriber that falls behind");
        assert_eq!(config.mqtt.slow_subscriber, SlowSubscriber::Hold);
        for (bad, key) in [
            ("[mqtt]\nmax_inflight = 0\n", "mqtt.max_inflight"),
            ("[mqtt]\nmax_inflight = 65536\n", "mqtt.max_inflight"),
            ("[mqtt]\nhold_timeout_ms = 0\n", "mqtt.hold_timeout_ms"),
            ("[mqtt]\npark_after_ms = 86400001\n", "mqtt.park_after_ms"),
            ("[mqtt]\npark_after_ms = 99\n", "mqtt.park_after_ms"),
        ] {
            let e = Config::from_toml(bad)
                .and_then(|c| c.validate())
                .unwrap_err()
                .to_string();
            assert!(e.contains(key), "{bad}: {e}");
        }
        let e = Config::from_toml("[mqtt]\nslow_subscriber = \"wait\"\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("slow_subscriber") || e.contains("wait"), "{e}");
    }

    #[test]
    fn a_syntax_error_names_its_line_and_column_on_one_line() {
        let e = Config::from_toml("[server]\nbind = \"127.0.0.1:0\"\n[store\n")
            .unwrap_err()
            .to_string();
        assert!(
            e.starts_with("TOML syntax error at line 3, column 7: "),
            "{e}"
        );
        assert!(!e.contains('\n'), "{e}");
        // An unknown key is not a syntax error: it is named.
        let e = Config::from_toml("[srever]\n").unwrap_err().to_string();
        assert!(e.contains("srever") && !e.contains("syntax"), "{e}");
    }

    #[test]
    fn queue_homes_are_members_and_dead_letter_queues_follow_their_queue() {
        let cluster = "[cluster]\nnats = [\"nats://127.0.0.1:4222\"]\nnode = \"a\"\nmembers = [\"a\", \"b\"]\n";
        let check = |more: &str| {
            Config::from_toml(&format!("{cluster}{more}"))
                .and_then(|c| c.validate())
                .err()
                .map(|e| e.to_string())
        };
        assert_eq!(check("[[queues]]\nname = \"q\"\nhome = \"b\"\n"), None);
        for (more, key) in [
            ("[[queues]]\nname = \"q\"\nhome = \"z\"\n", "queues[0].home"),
            (
                "[queue_defaults]\ndead_letter = \"graveyard\"\n",
                "queue_defaults.dead_letter",
            ),
            (
                "[[queues]]\nname = \"p\"\ndead_letter = \"d\"\n[[queues]]\nname = \"q\"\ndead_letter = \"d\"\n",
                "queues[1].dead_letter",
            ),
            (
                "[[queues]]\nname = \"p\"\ndead_letter = \"d\"\n[[queues]]\nname = \"d\"\nhome = \"a\"\n",
                "queues[1].home",
            ),
            ("[cluster]\nmembers = [\"a\", \"a\"]\n", "members[1]"),
        ] {
            let text = if more.starts_with("[cluster]") {
                Config::from_toml(&format!("{more}nats = [\"nats://x:1\"]\nnode = \"a\"\n"))
                    .and_then(|c| c.validate())
                    .err()
                    .map(|e| e.to_string())
            } else {
                check(more)
            };
            let text = text.unwrap_or_else(|| panic!("{more} was accepted"));
            assert!(text.contains(key), "{key}: {text}");
        }
        // Without members, a shared dead-letter queue is fine.
        let single = Config::from_toml("[queue_defaults]\ndead_letter = \"graveyard\"\n").unwrap();
        assert!(single.validate().is_ok());
    }

    #[test]
    fn empty_document_is_all_defaults() {
        assert_eq!(Config::from_toml("").unwrap(), Config::default());
    }

    #[test]
    fn partial_section_keeps_other_defaults() {
        let c = Config::from_toml("[scheduler]\nquantum = 7\n").unwrap();
        assert_eq!(c.scheduler.quantum, 7);
        assert_eq!(c.scheduler.capture_threshold, 10);
        assert_eq!(c.server, ServerConfig::default());
    }

    #[test]
    fn unknown_key_is_refused_by_name() {
        let err = Config::from_toml("[scheduler]\nquantom = 7\n").unwrap_err();
        let text = err.to_string();
        assert!(text.contains("quantom"), "{text}");
        assert!(text.contains("scheduler"), "{text}");
    }

    #[test]
    fn unknown_section_is_refused_by_name() {
        let err = Config::from_toml("[sever]\nbind = \"1.2.3.4:1\"\n").unwrap_err();
        assert!(err.to_string().contains("sever"), "{err}");
    }

    #[test]
    fn wrong_type_names_the_key() {
        let err = Config::from_toml("[scheduler]\nquantum = \"lots\"\n").unwrap_err();
        match err {
            ConfigError::Parse { key, reason } => {
                assert_eq!(key, "scheduler.quantum");
                assert!(reason.contains("line 2"), "{reason}");
            }
            other => panic!("expected a parse error, got {other:?}"),
        }
    }

    #[test]
    fn bad_address_names_the_key() {
        let err = Config::from_toml("[server]\nbind = \"localhost\"\n").unwrap_err();
        assert!(err.to_string().starts_with("server.bind"), "{err}");
    }

    #[test]
    fn out_of_range_values_name_the_key() {
        let cases = [
            ("[scheduler]\nquantum = 0\n", "scheduler.quantum"),
            (
                "[scheduler]\ncapture_threshold = 0\n",
                "scheduler.capture_threshold",
            ),
            ("[scheduler]\nworkers = 5000\n", "scheduler.workers"),
            ("[scheduler]\nmax_depth = 0\n", "scheduler.max_depth"),
            (
                "[store]\ncache_capacity_mb = 0\n",
                "store.cache_capacity_mb",
            ),
            ("[store]\ndata_dir = \"\"\n", "store.data_dir"),
            ("[store]\ninterval_ms = 0\n", "store.interval_ms"),
            ("[server]\nmax_connections = 0\n", "server.max_connections"),
            ("[log]\nlevel = \"wharf=loud\"\n", "log.level"),
            ("[session]\nmax_payload = 99999999\n", "session.max_payload"),
            ("[session]\nidle_timeout_s = 5\n", "session.idle_timeout_s"),
            ("[session]\nmax_frame = 10\n", "session.max_frame"),
            ("[mqtt.users]\nsensor = \"s3cret\"\n", "mqtt.users"),
            ("[auth]\nfailure_window_s = 0\n", "auth.failure_window_s"),
            (
                "[[auth.tokens]]\nname = \"x\"\ntoken_sha256 = \"zz\"\n",
                "auth.tokens[0].token_sha256",
            ),
            (
                "[[auth.users]]\nname = \"x\"\npassword_hash = \"plain\"\n",
                "auth.users[0].password_hash",
            ),
            (
                "[auth.anonymous_permissions]\npublish = [\"a/#/b\"]\n",
                "auth.anonymous_permissions.publish[0]",
            ),
            ("[server.tls]\ncert = \"c.pem\"\n", "server.tls"),
            ("[cluster]\nnats = [\"http://x\"]\n", "cluster.nats[0]"),
            ("[cluster]\nprefix = \"a.*\"\n", "cluster.prefix"),
            ("[cluster]\nnode = \"a.b\"\n", "cluster.node"),
            ("[cluster]\nbuffer = 0\n", "cluster.buffer"),
            ("[cluster]\nuser = \"u\"\n", "cluster.user"),
            ("[cluster]\ntoken = \"t\"\ncreds = \"c\"\n", "cluster.creds"),
        ];
        for (toml, key) in cases {
            let config = Config::from_toml(toml).unwrap();
            let err = config.validate().unwrap_err();
            assert!(err.to_string().starts_with(key), "{toml:?} gave {err}");
        }
    }

    #[test]
    fn bad_enum_value_names_the_key() {
        let err = Config::from_toml("[log]\nformat = \"xml\"\n").unwrap_err();
        assert!(err.to_string().starts_with("log.format"), "{err}");
    }
}
