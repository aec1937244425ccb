//! Failed authentications counted per source address, so that guessing
//! passwords or tokens from one address is slowed to a few tries a window.
//!
//! An attempt is counted *before* its credential is checked
//! ([`Failures::reserve`]) and given back if it succeeds
//! ([`Failures::release`]): guesses sent all at once cannot all be
//! checked while the first are still hashing, so at most `max` are ever
//! checked per address and window.

use std::collections::HashMap;
use std::net::IpAddr;
use std::time::{Duration, Instant};

use parking_lot::Mutex;

/// Most addresses tracked at once; past it, expired entries are dropped
/// and, if none has expired, new addresses are not tracked (the table is
/// bounded even under a flood from many addresses).
const MAX_TRACKED: usize = 65_536;

/// Failures per address within a window.
#[derive(Debug)]
pub struct Failures {
    max: u32,
    window: Duration,
    seen: Mutex<HashMap<IpAddr, (u32, Instant)>>,
}

impl Failures {
    /// At most `max` failures per `window` per address; 0 = no limit.
    pub fn new(max: u32, window: Duration) -> Failures {
        Failures {
            max,
            window,
            seen: Mutex::new(HashMap::new()),
        }
    }

    /// Whether `ip` has used up its failures for the current window
    /// (what [`Failures::reserve`] refuses; for tests).
    #[cfg(test)]
    pub fn blocked(&self, ip: IpAddr) -> bool {
        if self.max == 0 {
            return false;
        }
        let seen = self.seen.lock();
        seen.get(&ip)
            .is_some_and(|(n, since)| *n >= self.max && since.elapsed() < self.window)
    }

    /// Counts an attempt from `ip` before its credential is checked:
    /// `false` (nothing counted) when `ip` has used up its attempts for
    /// this window, so the credential must not be checked. A successful
    /// attempt gives its count back with [`Failures::release`]; a failed
    /// one keeps it.
    pub fn reserve(&self, ip: IpAddr) -> bool {
        if self.max == 0 {
            return true;
        }
        let mut seen = self.seen.lock();
        if seen.len() >= MAX_TRACKED && !seen.contains_key(&ip) {
            let window = self.window;
            seen.retain(|_, (_, since)| since.elapsed() < window);
            if seen.len() >= MAX_TRACKED {
                // Not tracked (the table is full of live entries): the
                // table stays bounded; the attempt goes ahead.
                return true;
            }
        }
        let entry = seen.entry(ip).or_insert((0, Instant::now()));
        if entry.1.elapsed() >= self.window {
            *entry = (0, Instant::now());
        }
        if entry.0 >= self.max {
            return false;
        }
        entry.0 += 1;
        true
    }

    /// Gives back a reserved attempt that succeeded (or was not checked).
    pub fn release(&self, ip: IpAddr) {
        if self.max == 0 {
            return;
        }
        if let Some(entry) = self.seen.lock().get_mut(&ip) {
            entry.0 = entry.0.saturating_sub(1);
        }
    }

    /// Attempts counted against `ip` in this window (failed ones and
    /// those being checked).
    pub fn count(&self, ip: IpAddr) -> u32 {
        let seen = self.seen.lock();
        seen.get(&ip)
            .filter(|(_, since)| since.elapsed() < self.window)
            .map_or(0, |(n, _)| *n)
    }

    /// Counts a failure from `ip` (an attempt that was not reserved);
    /// returns the count in this window.
    #[cfg(test)]
    pub fn record(&self, ip: IpAddr) -> u32 {
        if self.reserve(ip) {
            self.count(ip)
        } else {
            self.max
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blocks_after_max_in_a_window() {
        let f = Failures::new(3, Duration::from_secs(60));
        let ip: IpAddr = [10, 0, 0, 1].into();
        let other: IpAddr = [10, 0, 0, 2].into();
        for n in 1..=3 {
            assert!(!f.blocked(ip));
            assert_eq!(f.record(ip), n);
        }
        assert!(f.blocked(ip));
        assert!(!f.blocked(other), "per address");
    }

    #[test]
    fn reserved_attempts_block_before_they_fail_and_successes_give_theirs_back() {
        let f = Failures::new(3, Duration::from_secs(60));
        let ip: IpAddr = [10, 0, 0, 1].into();
        // Three attempts in flight at once: the fourth is refused before
        // any of them has failed.
        assert!(f.reserve(ip) && f.reserve(ip) && f.reserve(ip));
        assert!(!f.reserve(ip));
        assert!(f.blocked(ip));
        // One succeeds: its count comes back, one more may be checked.
        f.release(ip);
        assert_eq!(f.count(ip), 2);
        assert!(f.reserve(ip));
        assert!(!f.reserve(ip));
    }

    #[test]
    fn window_ends() {
        let f = Failures::new(1, Duration::ZERO);
        let ip: IpAddr = [10, 0, 0, 1].into();
        f.record(ip);
        assert!(!f.blocked(ip), "a zero window has always ended");
    }

    #[test]
    fn zero_means_no_limit() {
        let f = Failures::new(0, Duration::from_secs(60));
        let ip: IpAddr = [10, 0, 0, 1].into();
        for _ in 0..100 {
            f.record(ip);
        }
        assert!(!f.blocked(ip));
    }
}
