//! The bounded pool password checks run on, served fairly between
//! addresses: a waiting check is ranked by how many checks its address
//! already had running or waiting when it asked, and the lowest rank goes
//! first (then the oldest). An address flooding with guesses always has
//! checks in hand, so its next ones rank behind a login from an address
//! with none: a flood from a few addresses cannot keep another's login
//! waiting for more than about one check, however deep the flood's queue.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use tokio::sync::oneshot;

/// The pool: `free` permits, and the checks waiting for one by rank.
#[derive(Debug)]
pub(super) struct Gate {
    state: Mutex<State>,
}

#[derive(Debug)]
struct State {
    free: usize,
    /// Asked so far: the tie-break within a rank (oldest first).
    asked: u64,
    /// Waiting checks by (rank, order of asking).
    waiting: BTreeMap<(u32, u64), oneshot::Sender<Permit>>,
}

/// A turn to run one check; the next waiting check gets it when dropped.
#[derive(Debug)]
pub(super) struct Permit {
    /// `None` once handed back (defused: a permit no one took).
    gate: Option<Arc<Gate>>,
}

impl Gate {
    /// A pool of `permits` checks at once.
    pub(super) fn new(permits: usize) -> Arc<Gate> {
        Arc::new(Gate {
            state: Mutex::new(State {
                free: permits,
                asked: 0,
                waiting: BTreeMap::new(),
            }),
        })
    }

    /// A permit, waiting at most `wait` behind checks of lower `rank`
    /// (the number its address had in hand when it asked) and older ones
    /// of the same; `None` if none came in time.
    pub(super) async fn acquire(self: &Arc<Gate>, rank: u32, wait: Duration) -> Option<Permit> {
        let (key, mut rx) = {
            let mut st = self.state.lock();
            if st.free > 0 {
                st.free -= 1;
                return Some(Permit {
                    gate: Some(self.clone()),
                });
            }
            let key = (rank, st.asked);
            st.asked += 1;
            let (tx, rx) = oneshot::channel();
            st.waiting.insert(key, tx);
            (key, rx)
        };
        match tokio::time::timeout(wait, &mut rx).await {
            Ok(Ok(permit)) => Some(permit),
            Ok(Err(_)) => None,
            Err(_) => {
                // Gone from the line; a permit sent meanwhile is in the
                // channel and goes on to the next when `rx` drops.
                self.state.lock().waiting.remove(&key);
                None
            }
        }
    }

    /// Hands a freed permit to the best waiting check, or back to the
    /// pool.
    fn release(self: &Arc<Gate>) {
        let mut st = self.state.lock();
        while let Some((_, tx)) = st.waiting.pop_first() {
            let permit = Permit {
                gate: Some(self.clone()),
            };
            match tx.send(permit) {
                Ok(()) => return,
                // The waiter gave up: defuse the permit (its drop must not
                // release under this lock) and try the next.
                Err(mut unsent) => unsent.gate = None,
            }
        }
        st.free += 1;
    }

    /// Permits free now (for tests).
    #[cfg(test)]
    pub(super) fn free(&self) -> usize {
        self.state.lock().free
    }
}

impl Drop for Permit {
    fn drop(&mut self) {
        if let Some(gate) = self.gate.take() {
            gate.release();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn the_lowest_rank_goes_first_then_the_oldest() {
        let gate = Gate::new(1);
        let held = gate.acquire(0, Duration::from_secs(1)).await.unwrap();
        let order = Arc::new(Mutex::new(Vec::new()));
        let mut waiters = Vec::new();
        // A flood's checks (rank 3, asked first), then a login (rank 0).
        for (name, rank) in [("flood-a", 3), ("flood-b", 3), ("login", 0)] {
            let (gate, order) = (gate.clone(), order.clone());
            waiters.push(tokio::spawn(async move {
                let p = gate.acquire(rank, Duration::from_secs(5)).await;
                order.lock().push(name);
                drop(p);
            }));
            tokio::task::yield_now().await;
        }
        drop(held);
        for w in waiters {
            w.await.unwrap();
        }
        assert_eq!(*order.lock(), ["login", "flood-a", "flood-b"]);
        assert_eq!(gate.free(), 1);
    }

    #[tokio::test]
    async fn a_waiter_that_gives_up_leaves_its_permit_to_the_next() {
        let gate = Gate::new(1);
        let held = gate.acquire(0, Duration::from_secs(1)).await.unwrap();
        assert!(gate.acquire(0, Duration::from_millis(10)).await.is_none());
        let next = {
            let gate = gate.clone();
            tokio::spawn(async move { gate.acquire(1, Duration::from_secs(5)).await.is_some() })
        };
        tokio::task::yield_now().await;
        drop(held);
        assert!(next.await.unwrap());
        assert_eq!(gate.free(), 1, "no permit lost or made");
    }
}
