//! Password checks: argon2 on the blocking pool, at most
//! [`MAX_HASHING`] at once on a pool fair between addresses
//! ([`super::gate`]), with a bounded share per address, and a dummy hash
//! for unknown users so the time taken does not tell which exist.

use std::collections::HashMap;
use std::net::IpAddr;
use std::time::Duration;

use parking_lot::Mutex;

use super::{Auth, AuthError};

/// Most argon2 verifications running at once: each takes ~20 MiB and a
/// core for tens of milliseconds. Waiting checks are served fairly
/// between addresses ([`gate`]).
pub(super) const MAX_HASHING: usize = 2;

/// Most password checks one address may have running or waiting at once:
/// past it its next one is refused as busy at once, so that a flood from
/// one address holds a bounded part of the line (which serves addresses
/// with fewer checks in hand first).
pub(super) const MAX_HASHING_PER_PEER: u32 = 4;
/// Longest a password check waits for a turn.
const HASH_WAIT: Duration = Duration::from_secs(5);
impl Auth {
    /// Whether `password` matches `phc`, checked on the blocking pool
    /// under the bound on concurrent password checks.
    pub(super) async fn check_hash(
        &self,
        phc: String,
        password: &[u8],
        peer: Option<IpAddr>,
    ) -> Result<bool, (AuthError, String)> {
        // One address's share of the checks, running or waiting; how many
        // it had in hand ranks this one in the line (fewest first).
        let (_share, rank) = match peer {
            Some(ip) => {
                let (share, rank) =
                    PeerShare::take(&self.0.hashing_by_peer, ip).ok_or_else(|| {
                        (
                            AuthError::Busy,
                            "too many password checks from this address at once".to_owned(),
                        )
                    })?;
                (Some(share), rank)
            }
            None => (None, 0),
        };
        let permit = self
            .0
            .hashing
            .acquire(rank, HASH_WAIT)
            .await
            .ok_or_else(|| (AuthError::Busy, "password checks are saturated".to_owned()))?;
        let pw = password.to_vec();
        self.0
            .hashes_checked
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        // The permit goes with the hash: if this request is dropped, the
        // next check still waits until the hash has finished.
        let ok = actix_web::rt::task::spawn_blocking(move || {
            let ok = verify_password(&phc, &pw);
            drop(permit);
            ok
        })
        .await
        .unwrap_or(false);
        Ok(ok)
    }
}

/// One password check of an address, counted while it runs or waits.
struct PeerShare<'a> {
    map: &'a Mutex<HashMap<IpAddr, u32>>,
    ip: IpAddr,
}

impl<'a> PeerShare<'a> {
    /// Counts a check for `ip`, with how many it had in hand before;
    /// `None` when it has its share already.
    fn take(map: &'a Mutex<HashMap<IpAddr, u32>>, ip: IpAddr) -> Option<(PeerShare<'a>, u32)> {
        let mut m = map.lock();
        let n = m.entry(ip).or_insert(0);
        if *n >= MAX_HASHING_PER_PEER {
            return None;
        }
        let before = *n;
        *n += 1;
        Some((PeerShare { map, ip }, before))
    }
}

impl Drop for PeerShare<'_> {
    fn drop(&mut self) {
        let mut m = self.map.lock();
        if let Some(n) = m.get_mut(&self.ip) {
            *n -= 1;
            if *n == 0 {
                m.remove(&self.ip);
            }
        }
    }
}

/// A hash of no one's password, made once: an unknown user's password is
/// checked against it, as long as a known user's.
pub(super) fn dummy_hash() -> &'static str {
    DUMMY_HASH.get_or_init(|| hash_password(b"wharf: no such user").unwrap_or_default())
}

/// [`dummy_hash`]'s hash, once made.
pub(super) static DUMMY_HASH: std::sync::OnceLock<String> = std::sync::OnceLock::new();

/// Whether `password` matches the PHC string `phc`.
fn verify_password(phc: &str, password: &[u8]) -> bool {
    use argon2::PasswordVerifier;
    match argon2::PasswordHash::new(phc) {
        Ok(hash) => argon2::Argon2::default()
            .verify_password(password, &hash)
            .is_ok(),
        Err(_) => false,
    }
}

/// An argon2id PHC string for `password` with a fresh salt: what
/// `wharf passwd` prints for `[[auth.users]] password_hash`.
///
/// # Errors
/// If hashing fails (it does not with the default parameters).
pub fn hash_password(password: &[u8]) -> Result<String, String> {
    use argon2::PasswordHasher;
    use argon2::password_hash::SaltString;
    use argon2::password_hash::rand_core::OsRng;
    let salt = SaltString::generate(&mut OsRng);
    argon2::Argon2::default()
        .hash_password(password, &salt)
        .map(|h| h.to_string())
        .map_err(|e| e.to_string())
}
