//! Connections that have not authenticated yet, counted per source
//! address: on a broker that requires authentication, one address may
//! hold at most `[auth] max_unauthenticated_per_address` connections that
//! have not yet sent their `hello` token or MQTT CONNECT, so that it
//! cannot fill the broker with connections that will never log in (each
//! is closed at `hello_timeout_s` anyway; this bounds how many at once).

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Arc;

use parking_lot::Mutex;

/// The count per address; entries go when they reach 0.
#[derive(Debug, Default)]
pub(super) struct Table {
    max: u32,
    held: Arc<Mutex<HashMap<IpAddr, u32>>>,
}

impl Table {
    /// At most `max` per address; 0 = no limit.
    pub(super) fn new(max: u32) -> Table {
        Table {
            max,
            held: Arc::default(),
        }
    }

    /// Counts a connection from `ip` until its [`Unproven`] is dropped;
    /// `None` when `ip` holds its `max` already.
    pub(super) fn admit(&self, ip: IpAddr) -> Option<Unproven> {
        if self.max == 0 {
            return Some(Unproven { held: None, ip });
        }
        let mut held = self.held.lock();
        let n = held.entry(ip).or_insert(0);
        if *n >= self.max {
            return None;
        }
        *n += 1;
        Some(Unproven {
            held: Some(self.held.clone()),
            ip,
        })
    }

    /// Connections of `ip` counted now (for tests).
    #[cfg(test)]
    pub(super) fn held(&self, ip: IpAddr) -> u32 {
        self.held.lock().get(&ip).copied().unwrap_or(0)
    }
}

/// One connection counted against its address until it authenticates or
/// closes (dropped then).
#[derive(Debug)]
pub struct Unproven {
    /// `None` when there is no limit (nothing to give back).
    held: Option<Arc<Mutex<HashMap<IpAddr, u32>>>>,
    ip: IpAddr,
}

impl Drop for Unproven {
    fn drop(&mut self) {
        let Some(held) = &self.held else {
            return;
        };
        let mut held = held.lock();
        if let Some(n) = held.get_mut(&self.ip) {
            *n -= 1;
            if *n == 0 {
                held.remove(&self.ip);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_address_holds_at_most_max_and_gets_them_back() {
        let t = Table::new(2);
        let a: IpAddr = "10.0.0.1".parse().unwrap();
        let b: IpAddr = "10.0.0.2".parse().unwrap();
        let first = t.admit(a).unwrap();
        let _second = t.admit(a).unwrap();
        assert!(t.admit(a).is_none(), "a third from the same address");
        let _other = t.admit(b).expect("another address is not affected");
        drop(first);
        assert_eq!(t.held(a), 1);
        assert!(t.admit(a).is_some(), "a place freed is taken again");
    }
}
