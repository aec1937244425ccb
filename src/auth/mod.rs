//! Authentication and permissions: who a client is ([`Principal`]) and
//! what it may do ([`Grants`]). Every endpoint turns what the client
//! presented into a [`Credential`], asks [`Auth::authenticate`] (or takes
//! [`Auth::anonymous`] when it presented nothing), and checks each
//! operation with [`Principal::may`]. Nothing here touches a socket.
//!
//! Credentials: users with argon2id password hashes (verified on the
//! blocking pool, a few at a time, and remembered for a while so a
//! reconnecting device does not pay the hash again), static tokens known
//! by their SHA-256, and JWTs ([`jwt`]). Failed attempts are counted per
//! source address ([`Failures`]).
//!
//! # Design notes
//!
//! Where each endpoint checks: native sessions in `session/ops/permit.rs`,
//! before the dispatch (and before a transaction stages the frame), with
//! `hello` and `refresh` authenticating; MQTT at CONNECT (the password,
//! else the upgrade's credentials, else anonymous), SUBSCRIBE (0x80 per
//! refused filter), PUBLISH (acknowledged and dropped) and the will's
//! topic; HTTP in the `Caller` extractor (`transport/credentials.rs`),
//! before a body is read, each handler naming the right it needs; the
//! WebSocket upgrades use the same function and also read `?token=`.
//!
//! A principal whose `publish` right is `#` is answered from a flag, at no
//! cost on the hot path; narrower principals keep a per-session cache of
//! publish verdicts by topic (`verdicts.rs`: at most 1,024 topics, cleared
//! when full). Subscriptions are checked once, when made
//! (`routing::covers_levels`: every topic the filter matches, an allowed
//! filter matches too). Permission filters match level by level without
//! MQTT's `$` rule, so `#` grants `$` topics too.
//!
//! argon2id verification is slow on purpose (about 20 MiB and tens of
//! milliseconds): it runs on actix's blocking pool, at most two at once (a
//! third waits up to 5 s, then `Busy`), and a verified user and SHA-256 of
//! the password are remembered for 5 minutes (at most 4,096). Failed
//! attempts are counted per source address (`Failures`, a bounded table);
//! past `max_failures` in the window the address is refused before any
//! check.
//!
//! A JWT's `exp` becomes the session's deadline: the read loop's one timer
//! is armed at the earlier of the idle deadline and the expiry, so expiry
//! costs no timer of its own, and `refresh` moves it. Lasting client state
//! is keyed by `Principal::namespace` (`~via:name~client` for an
//! authenticated principal), so two principals using one client id never
//! share durable subscriptions or persistent MQTT sessions, and MQTT
//! takeover happens only within a principal. The exposure rule (no open
//! non-loopback listener when nothing was said about authentication) is
//! `AuthConfig::check_exposure`: the binary calls it before binding,
//! `wharf::serve` after.

mod denials;
mod failures;
mod gate;
mod grants;
mod hashing;
pub mod jwt;
mod unproven;
mod verdicts;

pub use failures::Failures;
pub use grants::{Grants, Right};
pub use hashing::hash_password;
use hashing::{DUMMY_HASH, MAX_HASHING, dummy_hash};
pub use unproven::Unproven;
pub use verdicts::PublishVerdicts;

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use parking_lot::Mutex;
use sha2::{Digest, Sha256};

use crate::config::ConfigError;
use crate::config::auth::AuthConfig;
pub use crate::config::auth::check_principal_name;
pub use denials::{Denial, Denials, Way};

/// How a principal proved who it is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Via {
    /// Nothing: anonymous access was allowed.
    Anonymous,
    /// A user name and password.
    Password,
    /// A static API token.
    Token,
    /// A JSON Web Token.
    Jwt,
}

impl Via {
    /// The name in logs and `/admin/sessions`.
    pub fn as_str(self) -> &'static str {
        match self {
            Via::Anonymous => "anonymous",
            Via::Password => "password",
            Via::Token => "token",
            Via::Jwt => "jwt",
        }
    }
}

/// Who a connection or request acts as, with what it may do. Cheap to
/// clone.
#[derive(Debug, Clone)]
pub struct Principal(Arc<PrincipalInner>);

#[derive(Debug)]
struct PrincipalInner {
    name: String,
    via: Via,
    grants: Grants,
    /// When a JWT's `exp` passes.
    expires: Option<SystemTime>,
    /// The JWKS key that verified its JWT, if one did: a reload that
    /// withdraws the key ends the sessions it verified.
    key: Option<[u8; 32]>,
}

impl Principal {
    fn new(name: &str, via: Via, grants: Grants, expires: Option<SystemTime>) -> Principal {
        Principal(Arc::new(PrincipalInner {
            name: name.to_owned(),
            via,
            grants,
            expires,
            key: None,
        }))
    }

    /// Whether a reload of the keys can withdraw its credential (a JWT
    /// verified by a JWKS key): only such connections need watching.
    pub fn revocable(&self) -> bool {
        self.0.key.is_some()
    }

    /// A principal proven by a JWT.
    fn from_jwt(c: jwt::Claims) -> Principal {
        Principal(Arc::new(PrincipalInner {
            name: c.subject,
            via: Via::Jwt,
            grants: c.grants,
            expires: c.expires,
            key: c.key,
        }))
    }

    /// The user, token or JWT subject name (`anonymous` for anonymous
    /// clients).
    pub fn name(&self) -> &str {
        &self.0.name
    }

    /// Who it is, all told: the name and how it authenticated
    /// (`password:alice`, `token:billing`, `jwt:device-17`, or
    /// `anonymous`), so a JWT whose `sub` happens to equal a token's name
    /// is not that token's principal. Takeover, `refresh` and lasting
    /// state compare this.
    pub fn id(&self) -> String {
        match self.0.via {
            Via::Anonymous => "anonymous".to_owned(),
            via => format!("{}:{}", via.as_str(), self.0.name),
        }
    }

    /// How it authenticated.
    pub fn via(&self) -> Via {
        self.0.via
    }

    /// Whether it may do `right`.
    pub fn may(&self, right: Right<'_>) -> bool {
        self.0.grants.may(right)
    }

    /// Its compiled permissions.
    pub fn grants(&self) -> &Grants {
        &self.0.grants
    }

    /// When its credential stops being valid (a JWT's `exp`).
    pub fn expires(&self) -> Option<SystemTime> {
        self.0.expires
    }

    /// The name under which a client's lasting state (durable
    /// subscriptions, MQTT persistent sessions) is kept: the client id
    /// for anonymous clients, and `~id~client` for others (`id` as
    /// [`Principal::id`]), so two principals using the same client id
    /// never share or take over each other's state.
    pub fn namespace(&self, client: &str) -> String {
        if self.0.via == Via::Anonymous {
            return match client.strip_prefix('~') {
                // Cannot be mistaken for a principal's namespace.
                Some(rest) => format!("%7E{rest}"),
                None => client.to_owned(),
            };
        }
        let id = self.id();
        let mut s = String::with_capacity(id.len() + client.len() + 2);
        s.push('~');
        for c in id.chars() {
            match c {
                '%' => s.push_str("%25"),
                '~' => s.push_str("%7E"),
                '/' => s.push_str("%2F"),
                '+' => s.push_str("%2B"),
                '#' => s.push_str("%23"),
                '\0' => s.push_str("%00"),
                c => s.push(c),
            }
        }
        s.push('~');
        s.push_str(client);
        s
    }

    /// The instant of [`Principal::expires`] on the monotonic clock.
    pub fn expires_at(&self) -> Option<Instant> {
        let exp = self.0.expires?;
        let left = exp.duration_since(SystemTime::now()).unwrap_or_default();
        Some(Instant::now() + left)
    }
}

/// What a client presented.
#[derive(Debug, Clone, Copy)]
pub enum Credential<'a> {
    /// A bearer token: a static token or a JWT.
    Token(&'a str),
    /// A user name and password (MQTT CONNECT, HTTP Basic). When no user
    /// has the name, the password is tried as a token.
    Password {
        /// The user name.
        user: &'a str,
        /// The password.
        password: &'a [u8],
    },
}

/// Why authentication failed. The message says what a client may know;
/// details go to the log only.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AuthError {
    /// No credentials, and anonymous clients are not allowed.
    #[error("credentials are required")]
    Missing,
    /// The credentials are wrong, expired or unknown.
    #[error("bad credentials")]
    Bad,
    /// This address failed too often; it must wait.
    #[error("too many failed authentications from this address; try again later")]
    TooManyFailures,
    /// Password checks are all busy.
    #[error("authentication is busy; try again")]
    Busy,
    /// This address holds its `max_unauthenticated_per_address`
    /// connections that have not authenticated yet.
    #[error(
        "too many connections from this address are waiting to authenticate; \
         authenticate those first, or try again later"
    )]
    TooManyUnauthenticated,
}

/// How long a verified user name and password are remembered.
const VERIFIED_TTL: Duration = Duration::from_secs(300);
/// Most remembered verifications.
const MAX_VERIFIED: usize = 4096;

struct User {
    phc: String,
    principal: Principal,
}

struct Inner {
    anonymous: Option<Principal>,
    users: HashMap<String, User>,
    tokens: HashMap<[u8; 32], Principal>,
    jwt: Option<jwt::Verifier>,
    failures: Failures,
    /// Failed authentications, for metrics.
    failed: crate::metrics::Counter,
    /// Attempts refused because the address was blocked, for metrics.
    blocked: crate::metrics::Counter,
    /// The pool password checks run on, fair between addresses.
    hashing: Arc<gate::Gate>,
    /// Password checks running or waiting, per address
    /// ([`MAX_HASHING_PER_PEER`]); entries go when they reach 0.
    hashing_by_peer: Mutex<HashMap<IpAddr, u32>>,
    /// Denials by why and way in (metrics, dashboard).
    denials: Denials,
    /// (user, SHA-256 of the password) verified, and when.
    verified: Mutex<HashMap<(String, [u8; 32]), Instant>>,
    /// Password hashes checked (argon2 runs), for tests that a path pays
    /// for one.
    hashes_checked: std::sync::atomic::AtomicU64,
    /// Connections not yet authenticated, per address.
    unproven: unproven::Table,
    /// Bumped by each reload of the keys: a session that sees it move
    /// asks [`Auth::still_verified`] once.
    generation: std::sync::atomic::AtomicU32,
}

/// The verifier every endpoint shares. Cheap to clone.
#[derive(Clone)]
pub struct Auth(Arc<Inner>);

impl std::fmt::Debug for Auth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Auth")
            .field("anonymous", &self.0.anonymous.is_some())
            .field("users", &self.0.users.len())
            .field("tokens", &self.0.tokens.len())
            .field("jwt", &self.0.jwt.is_some())
            .finish()
    }
}

impl Auth {
    /// Builds the verifier from a validated `[auth]` (reading JWT key
    /// files). Anonymous clients are let in when `anonymous` says so, or,
    /// unset, when no credential is configured (the listeners having been
    /// checked with [`AuthConfig::check_exposure`]).
    ///
    /// # Errors
    /// [`ConfigError::Invalid`] for a key file that cannot be read or used.
    pub fn new(cfg: &AuthConfig) -> Result<Auth, ConfigError> {
        let anonymous = cfg.anonymous.unwrap_or(!cfg.has_credentials()).then(|| {
            Principal::new(
                "anonymous",
                Via::Anonymous,
                Grants::new(&cfg.anonymous_permissions, "anonymous"),
                None,
            )
        });
        let users = cfg
            .users
            .iter()
            .map(|u| {
                let user = User {
                    phc: u.password_hash.clone(),
                    principal: Principal::new(
                        &u.name,
                        Via::Password,
                        Grants::new(&u.allow, &u.name),
                        None,
                    ),
                };
                (u.name.clone(), user)
            })
            .collect();
        let mut tokens = HashMap::new();
        for (i, t) in cfg.tokens.iter().enumerate() {
            let digest = hex32(&t.token_sha256).ok_or_else(|| ConfigError::Invalid {
                key: format!("auth.tokens[{i}].token_sha256"),
                reason: "must be 64 hex digits".into(),
            })?;
            let p = Principal::new(&t.name, Via::Token, Grants::new(&t.allow, &t.name), None);
            tokens.insert(digest, p);
        }
        let jwt = if cfg.jwt.enabled() {
            Some(jwt::Verifier::new(&cfg.jwt)?)
        } else {
            None
        };
        Ok(Auth(Arc::new(Inner {
            anonymous,
            users,
            tokens,
            jwt,
            failures: Failures::new(cfg.max_failures, Duration::from_secs(cfg.failure_window_s)),
            failed: crate::metrics::Counter::default(),
            blocked: crate::metrics::Counter::default(),
            hashing: gate::Gate::new(MAX_HASHING),
            hashing_by_peer: Mutex::new(HashMap::new()),
            denials: Denials::default(),
            verified: Mutex::new(HashMap::new()),
            hashes_checked: std::sync::atomic::AtomicU64::new(0),
            generation: std::sync::atomic::AtomicU32::new(0),
            unproven: unproven::Table::new(cfg.max_unauthenticated_per_address),
        })))
    }

    /// Anonymous access on a loopback-only broker with no `[auth]`: every
    /// right, as before authentication existed. For tests and embedding,
    /// and what a session holds until the transport gives it the broker's
    /// own: one verifier shared by the whole process, so a new session
    /// allocates nothing for it.
    pub fn open() -> Auth {
        static OPEN: std::sync::OnceLock<Auth> = std::sync::OnceLock::new();
        OPEN.get_or_init(|| match Auth::new(&AuthConfig::default()) {
            Ok(auth) => auth,
            // The default has no key files to read.
            Err(e) => unreachable!("the default [auth] is valid: {e}"),
        })
        .clone()
    }

    /// The anonymous principal, when anonymous clients are let in.
    pub fn anonymous(&self) -> Option<Principal> {
        self.0.anonymous.clone()
    }

    /// Whether clients must present credentials.
    pub fn required(&self) -> bool {
        self.0.anonymous.is_none()
    }

    /// Who presented nothing: the anonymous principal, or
    /// [`AuthError::Missing`].
    ///
    /// # Errors
    /// [`AuthError::Missing`] when anonymous clients are not let in.
    pub fn without_credentials(&self) -> Result<Principal, AuthError> {
        self.anonymous().ok_or(AuthError::Missing)
    }

    /// Failed authentications so far (metrics).
    pub fn failures_total(&self) -> u64 {
        self.0.failed.get()
    }

    /// Denials by why and way in (metrics, dashboard).
    pub fn denials(&self) -> &Denials {
        &self.0.denials
    }

    /// Counts a denial decided outside [`Auth::authenticate`]: a
    /// connection closed for bringing no credentials in time.
    pub fn deny(&self, denial: Denial, way: Way) {
        self.0.denials.add(denial, way);
    }

    /// Attempts refused because their address was blocked (metrics).
    pub fn blocked_total(&self) -> u64 {
        self.0.blocked.get()
    }

    /// Re-reads the JWKS file (on SIGHUP), keeping the old keys if the
    /// new file is bad. Returns how many keys are in force.
    ///
    /// # Errors
    /// Why the file was not taken.
    pub fn reload(&self) -> Result<usize, String> {
        match &self.0.jwt {
            Some(v) => {
                let n = v.reload()?;
                self.0
                    .generation
                    .fetch_add(1, std::sync::atomic::Ordering::Release);
                Ok(n)
            }
            None => Ok(0),
        }
    }

    /// Counts a connection from `peer` that has not authenticated yet,
    /// until the returned guard is dropped (when it authenticates or
    /// closes); `Ok(None)` when nothing needs counting (the broker lets
    /// anonymous clients in, or the address is unknown).
    ///
    /// # Errors
    /// [`AuthError::TooManyUnauthenticated`] when `peer` holds its
    /// `[auth] max_unauthenticated_per_address` (counted as a `busy`
    /// denial for `way`).
    pub fn admit_unproven(
        &self,
        peer: Option<IpAddr>,
        way: Way,
    ) -> Result<Option<Unproven>, AuthError> {
        let Some(ip) = peer.filter(|_| self.required()) else {
            return Ok(None);
        };
        match self.0.unproven.admit(ip) {
            Some(u) => Ok(Some(u)),
            None => {
                self.0.denials.add(Denial::Busy, way);
                tracing::warn!(target: "wharf::auth", peer = %ip, "connection refused: too many from this address waiting to authenticate");
                Err(AuthError::TooManyUnauthenticated)
            }
        }
    }

    /// How many times the keys were reloaded: sessions compare it with
    /// the value they last saw (one atomic load) before asking
    /// [`Auth::still_verified`].
    pub fn generation(&self) -> u32 {
        self.0.generation.load(std::sync::atomic::Ordering::Acquire)
    }

    /// Whether a key reload since `seen` (a session's last look at
    /// [`Auth::generation`], updated here) withdrew the key that verified
    /// `p`: one atomic load when the keys did not move. What every kind
    /// of session asks after each read.
    pub fn withdrawn_since(&self, seen: &mut u32, p: Option<&Principal>) -> bool {
        let now = self.generation();
        if now == *seen {
            return false;
        }
        *seen = now;
        p.is_some_and(|p| !self.still_verified(p))
    }

    /// Whether the key that verified `p`'s credential is still in force:
    /// `false` for a JWT whose JWKS key a reload withdrew, so that its
    /// session is ended rather than kept on a key no longer trusted.
    pub fn still_verified(&self, p: &Principal) -> bool {
        match (&p.0.key, &self.0.jwt) {
            (None, _) => true,
            (Some(fp), Some(v)) => v.has_key(fp),
            (Some(_), None) => false,
        }
    }

    /// Who `credential` proves the client to be. `peer` is the source
    /// address, for counting failures; failures are logged with it.
    /// `way` is how the client came in, for the denial counts.
    ///
    /// # Errors
    /// [`AuthError::Bad`] for wrong credentials,
    /// [`AuthError::TooManyFailures`] while `peer` is blocked,
    /// [`AuthError::Busy`] when password checks are saturated.
    pub async fn authenticate(
        &self,
        credential: Credential<'_>,
        peer: Option<IpAddr>,
        way: Way,
    ) -> Result<Principal, AuthError> {
        // The attempt is counted before the credential is checked, so
        // that guesses sent at once cannot all be checked (at most
        // `max_failures` per address and window); a success gives it back.
        if let Some(ip) = peer
            && !self.0.failures.reserve(ip)
        {
            self.0.blocked.add(1);
            self.0.denials.add(Denial::Blocked, way);
            tracing::warn!(target: "wharf::auth", peer = ?peer, "authentication refused: too many failures");
            return Err(AuthError::TooManyFailures);
        }
        let release = || {
            if let Some(ip) = peer {
                self.0.failures.release(ip);
            }
        };
        let (user, result) = match credential {
            Credential::Token(t) => ("", self.token(t)),
            Credential::Password { user, password } => {
                (user, self.password(user, password, peer).await)
            }
        };
        match result {
            Ok(p) => {
                release();
                Ok(p)
            }
            Err((AuthError::Busy, why)) => {
                release();
                self.0.denials.add(Denial::Busy, way);
                tracing::warn!(target: "wharf::auth", peer = ?peer, user, "authentication not attempted: {why}");
                Err(AuthError::Busy)
            }
            Err((e, why)) => {
                self.0.failed.add(1);
                self.0.denials.add(Denial::Bad, way);
                let failures = peer.map_or(0, |ip| self.0.failures.count(ip));
                tracing::warn!(target: "wharf::auth", peer = ?peer, user, failures, "authentication failed: {why}");
                Err(e)
            }
        }
    }

    fn token(&self, token: &str) -> Result<Principal, (AuthError, String)> {
        let digest: [u8; 32] = Sha256::digest(token.as_bytes()).into();
        if let Some(p) = self.0.tokens.get(&digest) {
            return Ok(p.clone());
        }
        match &self.0.jwt {
            Some(v) if token.matches('.').count() == 2 => v
                .verify(token)
                .map(Principal::from_jwt)
                .map_err(|why| (AuthError::Bad, format!("JWT refused: {why}"))),
            _ if self.0.users.is_empty() && self.0.tokens.is_empty() && self.0.jwt.is_none() => {
                Err((
                    AuthError::Bad,
                    "no users or tokens are configured ([auth]): connect without credentials, \
                 or add [[auth.users]] or [[auth.tokens]]"
                        .into(),
                ))
            }
            _ => Err((AuthError::Bad, "unknown token".into())),
        }
    }

    async fn password(
        &self,
        user: &str,
        password: &[u8],
        peer: Option<IpAddr>,
    ) -> Result<Principal, (AuthError, String)> {
        if let Err(why) = check_principal_name(user) {
            return Err((AuthError::Bad, format!("the user name {why}")));
        }
        let Some(u) = self.0.users.get(user) else {
            // Not a user: the password may be a token or a JWT (MQTT
            // clients can only send tokens this way).
            let as_token = std::str::from_utf8(password).ok().map(|t| self.token(t));
            if let Some(Ok(p)) = as_token {
                return Ok(p);
            }
            // As slow as a wrong password for a real user, so that the
            // time taken does not tell which user names exist.
            if !self.0.users.is_empty() {
                let phc = match DUMMY_HASH.get() {
                    Some(phc) => phc.clone(),
                    // Made once, off the async thread (a hash is slow on
                    // purpose).
                    None => actix_web::rt::task::spawn_blocking(|| dummy_hash().to_owned())
                        .await
                        .unwrap_or_default(),
                };
                let _ = self.check_hash(phc, password, peer).await?;
            }
            return Err(match as_token {
                Some(Err(e)) if !self.0.users.is_empty() => {
                    (e.0, format!("unknown user {user:?} ({})", e.1))
                }
                Some(Err(e)) => e,
                _ => (AuthError::Bad, format!("unknown user {user:?}")),
            });
        };
        let digest: [u8; 32] = Sha256::digest(password).into();
        let key = (user.to_owned(), digest);
        {
            let verified = self.0.verified.lock();
            if verified
                .get(&key)
                .is_some_and(|t| t.elapsed() < VERIFIED_TTL)
            {
                return Ok(u.principal.clone());
            }
        }
        if !self.check_hash(u.phc.clone(), password, peer).await? {
            return Err((AuthError::Bad, format!("wrong password for user {user:?}")));
        }
        let mut verified = self.0.verified.lock();
        if verified.len() >= MAX_VERIFIED {
            verified.retain(|_, t| t.elapsed() < VERIFIED_TTL);
            if verified.len() >= MAX_VERIFIED {
                verified.clear();
            }
        }
        verified.insert(key, Instant::now());
        Ok(u.principal.clone())
    }
}

/// A new random API token: 32 bytes from the OS, base64url.
pub fn new_token() -> String {
    use argon2::password_hash::rand_core::{OsRng, RngCore};
    use base64::Engine as _;
    let mut bytes = [0u8; 32];
    OsRng.fill_bytes(&mut bytes);
    format!(
        "wharf_{}",
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes)
    )
}

/// The SHA-256 of `token` in hex: what `[[auth.tokens]] token_sha256`
/// holds.
pub fn token_digest(token: &str) -> String {
    Sha256::digest(token.as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

fn hex32(s: &str) -> Option<[u8; 32]> {
    if s.len() != 64 {
        return None;
    }
    let mut out = [0u8; 32];
    for (i, byte) in out.iter_mut().enumerate() {
        *byte = u8::from_str_radix(s.get(2 * i..2 * i + 2)?, 16).ok()?;
    }
    Some(out)
}

#[cfg(test)]
mod tests;
