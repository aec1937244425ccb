//! `[auth]`: who may connect ([`AuthConfig`]) and what each principal may
//! do ([`Permissions`]). Checked at start; the `auth` module turns it into
//! the verifier the endpoints call.

use std::net::SocketAddr;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use super::ConfigError;
use crate::routing::TopicLimits;

/// `[auth]` settings.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct AuthConfig {
    /// Whether clients without credentials are let in (with
    /// `anonymous_permissions`). Unset: only while no users, tokens or JWT
    /// keys are configured and every listener is on a loopback address;
    /// a non-loopback listener then refuses to start.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub anonymous: Option<bool>,
    /// What anonymous clients may do.
    pub anonymous_permissions: Permissions,
    /// `[[auth.users]]`: names with argon2id password hashes.
    pub users: Vec<UserConfig>,
    /// `[[auth.tokens]]`: static API tokens, kept as SHA-256 digests.
    pub tokens: Vec<TokenConfig>,
    /// `[auth.jwt]`: JSON Web Tokens and the keys that sign them.
    pub jwt: JwtConfig,
    /// Failed authentications one source IP may make per
    /// `failure_window_s` before it is refused outright until the window
    /// ends; 0 = no limit.
    pub max_failures: u32,
    /// The window of `max_failures`, in seconds.
    pub failure_window_s: u64,
    /// Connections one source IP may hold that have not authenticated
    /// yet (no `hello` token, no MQTT CONNECT) while authentication is
    /// required; past it new ones are refused (429, or closed at once on
    /// MQTT/TCP); 0 = no limit.
    pub max_unauthenticated_per_address: u32,
}

impl Default for AuthConfig {
    fn default() -> Self {
        AuthConfig {
            anonymous: None,
            anonymous_permissions: Permissions::everything(),
            users: Vec::new(),
            tokens: Vec::new(),
            jwt: JwtConfig::default(),
            max_failures: 10,
            failure_window_s: 60,
            max_unauthenticated_per_address: 64,
        }
    }
}

/// What a principal may do: topic filters for topics, name patterns
/// (filters over `/`-separated names) for queues and job kinds, and the
/// admin right. `%u` in a filter stands for the principal's name. Empty
/// lists allow nothing.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Permissions {
    /// Topics it may publish to.
    pub publish: Vec<String>,
    /// Filters it may subscribe with: a subscription is allowed when one
    /// of these covers its whole filter (`home/+/temp` does not allow
    /// `home/#`).
    pub subscribe: Vec<String>,
    /// Queues it may enqueue to.
    pub enqueue: Vec<String>,
    /// Queues it may consume (and settle deliveries of); a durable
    /// subscription needs this for its filter too.
    pub consume: Vec<String>,
    /// Job kinds it may enqueue (and whose jobs' status it may read).
    pub enqueue_jobs: Vec<String>,
    /// Job kinds it may work on as a worker.
    pub work_jobs: Vec<String>,
    /// Admin routes, queue deletion, purge and redrive, and every job.
    pub admin: bool,
}

impl Permissions {
    /// Every right: what anonymous clients get on a loopback-only broker
    /// with no `[auth]`, as before authentication existed.
    pub fn everything() -> Permissions {
        let all = || vec!["#".to_owned()];
        Permissions {
            publish: all(),
            subscribe: all(),
            enqueue: all(),
            consume: all(),
            enqueue_jobs: all(),
            work_jobs: all(),
            admin: true,
        }
    }

    /// The lists by key, for checks and messages.
    pub fn lists(&self) -> [(&'static str, &Vec<String>); 6] {
        [
            ("publish", &self.publish),
            ("subscribe", &self.subscribe),
            ("enqueue", &self.enqueue),
            ("consume", &self.consume),
            ("enqueue_jobs", &self.enqueue_jobs),
            ("work_jobs", &self.work_jobs),
        ]
    }

    /// Checks every pattern is a valid filter, naming the first bad one.
    ///
    /// # Errors
    /// [`ConfigError::Invalid`] with `key.list[i]`.
    pub fn validate(&self, key: &str) -> Result<(), ConfigError> {
        for (list, filters) in self.lists() {
            for (i, f) in filters.iter().enumerate() {
                // `%u` is replaced by a name that passes the topic checks.
                let probe = f.replace("%u", "u");
                if let Err(e) = TopicLimits::WIDEST.check_filter(&probe) {
                    return Err(ConfigError::Invalid {
                        key: format!("{key}.{list}[{i}]"),
                        reason: format!("not a valid filter: {e}"),
                    });
                }
            }
        }
        Ok(())
    }
}

/// Whether `name` may name a principal (a user, a token, a JWT's `sub`,
/// an MQTT user name). A name stands for `%u` in grants' filters, so it
/// must match only itself there: no wildcard (`+`, `#`), no level
/// separator (`/`), no `$` (system topics), no NUL or control character.
///
/// # Errors
/// Why it may not, for the error that names the source.
pub fn check_principal_name(name: &str) -> Result<(), &'static str> {
    if name.contains(['+', '#']) {
        return Err("contains a topic wildcard (+ or #)");
    }
    if name.contains('/') {
        return Err("contains a topic level separator (/)");
    }
    if name.contains('$') {
        return Err("contains $");
    }
    if name.chars().any(char::is_control) {
        return Err("contains NUL or a control character");
    }
    Ok(())
}

/// One `[[auth.users]]` entry: a person or device that logs in with a
/// password (MQTT CONNECT, HTTP Basic).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UserConfig {
    /// The user name.
    pub name: String,
    /// An argon2id PHC string (`$argon2id$v=19$...`), as `wharf passwd`
    /// prints.
    pub password_hash: String,
    /// What the user may do.
    #[serde(default)]
    pub allow: Permissions,
}

/// One `[[auth.tokens]]` entry: a service's API token, known only by its
/// digest.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TokenConfig {
    /// A name for logs and `%u`.
    pub name: String,
    /// The token's SHA-256, in hex (`printf %s TOKEN | sha256sum`).
    pub token_sha256: String,
    /// What the token may do.
    #[serde(default)]
    pub allow: Permissions,
}

/// `[auth.jwt]`: tokens signed by an identity provider or the app's own
/// backend.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct JwtConfig {
    /// `[[auth.jwt.keys]]`: verification keys given in the config.
    pub keys: Vec<JwtKeyConfig>,
    /// A JWKS file (`{"keys": [...]}`) read at start and again on SIGHUP;
    /// empty = none.
    pub jwks_file: PathBuf,
    /// The `iss` a token must carry; empty = not checked.
    pub issuer: String,
    /// The `aud` a token must carry; empty = not checked.
    pub audience: String,
    /// Seconds of clock skew allowed on `exp` and `nbf`.
    pub leeway_s: u64,
    /// The claim holding the token's permissions (shaped like
    /// [`Permissions`]); a token without it may do nothing.
    pub claim: String,
    /// The most any token may grant: a token's permissions are
    /// intersected with these.
    pub ceiling: Permissions,
}

impl Default for JwtConfig {
    fn default() -> Self {
        JwtConfig {
            keys: Vec::new(),
            jwks_file: PathBuf::new(),
            issuer: String::new(),
            audience: String::new(),
            leeway_s: 30,
            claim: "wharf".into(),
            ceiling: Permissions::everything(),
        }
    }
}

impl JwtConfig {
    /// Whether JWTs are accepted at all.
    pub fn enabled(&self) -> bool {
        !self.keys.is_empty() || !self.jwks_file.as_os_str().is_empty()
    }
}

/// One `[[auth.jwt.keys]]` entry.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct JwtKeyConfig {
    /// The `kid` tokens signed with this key name; empty = any.
    pub kid: String,
    /// `HS256`, `HS384`, `HS512`, `RS256`, `RS384`, `RS512`, `PS256`,
    /// `ES256`, `ES384` or `EdDSA`: the only algorithm this key verifies
    /// (no other is accepted, so an RSA public key is never used as an
    /// HMAC secret).
    pub algorithm: String,
    /// The shared secret of an HS* key.
    pub secret: String,
    /// A PEM file with the public key of an RS*, PS*, ES* or EdDSA key.
    pub public_key_file: PathBuf,
}

impl AuthConfig {
    /// Whether any credential is configured.
    pub fn has_credentials(&self) -> bool {
        !self.users.is_empty() || !self.tokens.is_empty() || self.jwt.enabled()
    }

    /// Whether anonymous clients are let in, given whether every listener
    /// is on a loopback address.
    pub fn anonymous_allowed(&self, loopback_only: bool) -> bool {
        self.anonymous
            .unwrap_or(loopback_only && !self.has_credentials())
    }

    /// Refuses to serve `listeners` when one is reachable from the
    /// network and nothing was said about authentication: the broker
    /// would be open to anyone.
    ///
    /// # Errors
    /// [`ConfigError::Invalid`] naming `auth.anonymous`.
    pub fn check_exposure(&self, listeners: &[SocketAddr]) -> Result<(), ConfigError> {
        let open = listeners.iter().find(|a| !a.ip().is_loopback());
        match open {
            Some(addr) if self.anonymous.is_none() && !self.has_credentials() => {
                Err(ConfigError::Invalid {
                    key: "auth.anonymous".into(),
                    reason: format!(
                        "listening on {addr}, which is not a loopback address, with no \
                         authentication would let anyone on the network in: configure \
                         [[auth.users]], [[auth.tokens]] or [auth.jwt], or set \
                         auth.anonymous = true to allow it on purpose"
                    ),
                })
            }
            _ => Ok(()),
        }
    }

    /// Checks names, digests, hashes, keys and patterns, naming the first
    /// bad key.
    ///
    /// # Errors
    /// [`ConfigError::Invalid`].
    pub fn validate(&self) -> Result<(), ConfigError> {
        let invalid = |key: String, reason: String| ConfigError::Invalid { key, reason };
        self.anonymous_permissions
            .validate("auth.anonymous_permissions")?;
        let mut names = std::collections::HashSet::new();
        for (i, u) in self.users.iter().enumerate() {
            let key = format!("auth.users[{i}]");
            if u.name.is_empty() || u.name.contains(':') {
                return Err(invalid(
                    format!("{key}.name"),
                    "must be non-empty and without ':'".into(),
                ));
            }
            if let Err(why) = check_principal_name(&u.name) {
                return Err(invalid(format!("{key}.name"), why.into()));
            }
            if !names.insert(u.name.as_str()) {
                return Err(invalid(
                    format!("{key}.name"),
                    format!("user {:?} is listed twice", u.name),
                ));
            }
            if let Err(e) = argon2::PasswordHash::new(&u.password_hash) {
                return Err(invalid(
                    format!("{key}.password_hash"),
                    format!("not a PHC password hash ({e}); make one with `wharf passwd`"),
                ));
            }
            u.allow.validate(&format!("{key}.allow"))?;
        }
        for (i, t) in self.tokens.iter().enumerate() {
            let key = format!("auth.tokens[{i}]");
            if t.name.is_empty() {
                return Err(invalid(format!("{key}.name"), "must not be empty".into()));
            }
            if let Err(why) = check_principal_name(&t.name) {
                return Err(invalid(format!("{key}.name"), why.into()));
            }
            if t.token_sha256.len() != 64 || !t.token_sha256.bytes().all(|b| b.is_ascii_hexdigit())
            {
                return Err(invalid(
                    format!("{key}.token_sha256"),
                    "must be 64 hex digits (the token's SHA-256)".into(),
                ));
            }
            t.allow.validate(&format!("{key}.allow"))?;
        }
        self.jwt.ceiling.validate("auth.jwt.ceiling")?;
        if self.jwt.leeway_s > 3600 {
            return Err(invalid(
                "auth.jwt.leeway_s".into(),
                "must be at most 3600".into(),
            ));
        }
        if self.jwt.claim.is_empty() {
            return Err(invalid("auth.jwt.claim".into(), "must not be empty".into()));
        }
        if self.failure_window_s == 0 || self.failure_window_s > 86_400 {
            return Err(invalid(
                "auth.failure_window_s".into(),
                "must be between 1 and 86400".into(),
            ));
        }
        Ok(())
    }
}
