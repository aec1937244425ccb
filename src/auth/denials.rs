//! Denials counted by why and by the way in, so that a brute-force
//! attempt is seen on `/metrics` (`wharf_auth_denials_total{reason,way}`)
//! and on the dashboard, not only in the log.

use std::sync::atomic::{AtomicU64, Ordering};

/// How a client came in, for the denial counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Way {
    /// The native protocol (`/ws`: its upgrade or its `hello`).
    Native,
    /// MQTT (CONNECT, or its WebSocket upgrade), any listener.
    Mqtt,
    /// An HTTP route.
    Http,
    /// An embedding app's typed socket upgrade.
    Socket,
}

/// Why a client was denied.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Denial {
    /// Wrong, unknown or expired credentials.
    Bad,
    /// Refused unchecked: its address failed too often (a lockout).
    Blocked,
    /// Refused unchecked: password checks were saturated, or its address
    /// had its share of them or of connections not yet authenticated.
    Busy,
    /// Closed for bringing no credentials within `hello_timeout_s`.
    NoCredentialsInTime,
}

const WAYS: [Way; 4] = [Way::Native, Way::Mqtt, Way::Http, Way::Socket];
const DENIALS: [Denial; 4] = [
    Denial::Bad,
    Denial::Blocked,
    Denial::Busy,
    Denial::NoCredentialsInTime,
];

impl Way {
    /// Its label value.
    pub fn as_str(self) -> &'static str {
        match self {
            Way::Native => "native",
            Way::Mqtt => "mqtt",
            Way::Http => "http",
            Way::Socket => "socket",
        }
    }
}

impl Denial {
    /// Its label value.
    pub fn as_str(self) -> &'static str {
        match self {
            Denial::Bad => "bad_credentials",
            Denial::Blocked => "blocked",
            Denial::Busy => "busy",
            Denial::NoCredentialsInTime => "no_credentials_in_time",
        }
    }
}

/// The counts, one per (denial, way).
#[derive(Debug, Default)]
pub struct Denials {
    counts: [[AtomicU64; 4]; 4],
}

impl Denials {
    /// Counts one.
    pub fn add(&self, denial: Denial, way: Way) {
        self.counts[denial as usize][way as usize].fetch_add(1, Ordering::Relaxed);
    }

    /// One count.
    pub fn get(&self, denial: Denial, way: Way) -> u64 {
        self.counts[denial as usize][way as usize].load(Ordering::Relaxed)
    }

    /// Every series, `(reason, way, count)`, zeros included (so a scraper
    /// sees each series from the start).
    pub fn series(&self) -> Vec<(&'static str, &'static str, u64)> {
        DENIALS
            .iter()
            .flat_map(|&d| WAYS.iter().map(move |&w| (d, w)))
            .map(|(d, w)| (d.as_str(), w.as_str(), self.get(d, w)))
            .collect()
    }

    /// All denials of one kind, every way in.
    pub fn of(&self, denial: Denial) -> u64 {
        WAYS.iter().map(|&w| self.get(denial, w)).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_by_reason_and_way() {
        let d = Denials::default();
        d.add(Denial::Bad, Way::Mqtt);
        d.add(Denial::Bad, Way::Mqtt);
        d.add(Denial::Blocked, Way::Http);
        assert_eq!(d.get(Denial::Bad, Way::Mqtt), 2);
        assert_eq!(d.of(Denial::Bad), 2);
        assert_eq!(d.of(Denial::Blocked), 1);
        let s = d.series();
        assert_eq!(s.len(), 16);
        assert!(s.contains(&("bad_credentials", "mqtt", 2)));
        assert!(s.contains(&("no_credentials_in_time", "native", 0)));
    }
}
