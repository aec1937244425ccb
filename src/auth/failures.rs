//! Failed authentications counted per source address, so that guessing
//! passwords or tokens from one address is slowed to a few tries a window.

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

    /// Whether `ip` has used up its failures for the current window.
    pub fn blocked(&self, ip: IpAddr) -> bool {
        if self.max == 0 {
            return false;
        }
        let seen = self.seen.lock();
        seen.get(&ip)
            .is_some_and(|(n, since)| *n >= self.max && since.elapsed() < self.window)
    }

    /// Counts a failure from `ip`; returns the count in this window.
    pub fn record(&self, ip: IpAddr) -> u32 {
        if self.max == 0 {
            return 0;
        }
        let mut seen = self.seen.lock();
        if seen.len() >= MAX_TRACKED && !seen.contains_key(&ip) {
            let window = self.window;
            seen.retain(|_, (_, since)| since.elapsed() < window);
            if seen.len() >= MAX_TRACKED {
                return 0;
            }
        }
        let entry = seen.entry(ip).or_insert((0, Instant::now()));
        if entry.1.elapsed() >= self.window {
            *entry = (0, Instant::now());
        }
        entry.0 += 1;
        entry.0
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
