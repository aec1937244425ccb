//! Actions that outlive a connection by a while: MQTT 5's delayed will and
//! session expiry. Each is keyed by the session it belongs to, so a client
//! that comes back in time cancels what its last connection left pending;
//! there are at most [`LATER_MAX`] at once, and shutdown aborts them all
//! (a persistent session is then kept until its client returns).

use std::collections::HashMap;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;

/// Delayed actions held at most: past it, an action runs at once.
pub const LATER_MAX: usize = 100_000;

/// One pending action: its task, and what makes it run before its time.
struct Pending {
    id: u64,
    task: tokio::task::AbortHandle,
    now: Option<tokio::sync::oneshot::Sender<()>>,
}

#[derive(Default)]
struct State {
    next: u64,
    /// By key: each pending action.
    tasks: HashMap<String, Vec<Pending>>,
    count: usize,
    closed: bool,
}

/// Pending delayed actions, by session key. Cheap to clone.
#[derive(Clone, Default)]
pub struct Later {
    state: Arc<Mutex<State>>,
}

impl Later {
    /// Runs `action` after `delay` unless [`Later::cancel`] is called for
    /// `key` first. Runs it at once (spawned) when the delay is zero or
    /// [`LATER_MAX`] actions wait already; not at all after shutdown.
    pub fn schedule<F>(&self, key: &str, delay: Duration, action: F)
    where
        F: Future<Output = ()> + 'static,
    {
        let mut st = self.state.lock();
        if st.closed {
            return;
        }
        if delay.is_zero() || st.count >= LATER_MAX {
            drop(st);
            actix_rt::spawn(action);
            return;
        }
        st.next += 1;
        let id = st.next;
        let this = self.clone();
        let owned = key.to_owned();
        let (now, early) = tokio::sync::oneshot::channel::<()>();
        let task = actix_rt::spawn(async move {
            // The delay, or [`Later::fire`] before it.
            let _ = actix_rt::time::timeout(delay, early).await;
            // Forget it first: the action may schedule again.
            this.forget(&owned, id);
            action.await;
        });
        st.tasks.entry(key.to_owned()).or_default().push(Pending {
            id,
            task: task.abort_handle(),
            now: Some(now),
        });
        st.count += 1;
    }

    fn forget(&self, key: &str, id: u64) {
        let mut st = self.state.lock();
        let Some(list) = st.tasks.get_mut(key) else {
            return;
        };
        let before = list.len();
        list.retain(|p| p.id != id);
        let removed = before - list.len();
        if list.is_empty() {
            st.tasks.remove(key);
        }
        st.count -= removed;
    }

    /// Cancels what is pending for `key` (its client is back); returns
    /// how many actions were cancelled.
    pub fn cancel(&self, key: &str) -> usize {
        let mut st = self.state.lock();
        let list = st.tasks.remove(key).unwrap_or_default();
        st.count -= list.len();
        for p in &list {
            p.task.abort();
        }
        list.len()
    }

    /// Runs what is pending for `key` now instead of at its time; returns
    /// how many actions were due.
    pub fn fire(&self, key: &str) -> usize {
        let mut st = self.state.lock();
        let Some(list) = st.tasks.get_mut(key) else {
            return 0;
        };
        let mut fired = 0;
        for p in list.iter_mut() {
            if let Some(now) = p.now.take() {
                let _ = now.send(());
                fired += 1;
            }
        }
        fired
    }

    /// How many actions are pending.
    pub fn len(&self) -> usize {
        self.state.lock().count
    }

    /// Whether none is pending.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Aborts every pending action and refuses new ones (shutdown).
    pub fn close(&self) {
        let mut st = self.state.lock();
        st.closed = true;
        st.count = 0;
        for (_, list) in st.tasks.drain() {
            for p in list {
                p.task.abort();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    #[actix_rt::test]
    async fn runs_after_the_delay_unless_cancelled() {
        let later = Later::default();
        let ran = Arc::new(AtomicUsize::new(0));
        for key in ["a", "b"] {
            let ran = ran.clone();
            later.schedule(key, Duration::from_millis(20), async move {
                ran.fetch_add(1, Ordering::SeqCst);
            });
        }
        assert_eq!(later.len(), 2);
        assert_eq!(later.cancel("b"), 1);
        for _ in 0..500 {
            if ran.load(Ordering::SeqCst) == 1 && later.is_empty() {
                break;
            }
            actix_rt::time::sleep(Duration::from_millis(5)).await;
        }
        assert_eq!(ran.load(Ordering::SeqCst), 1);
        assert!(later.is_empty());
        // Fired early: runs at once, not after its hour.
        let r = ran.clone();
        later.schedule("d", Duration::from_secs(3600), async move {
            r.fetch_add(1, Ordering::SeqCst);
        });
        assert_eq!(later.fire("d"), 1);
        for _ in 0..500 {
            if ran.load(Ordering::SeqCst) == 2 && later.is_empty() {
                break;
            }
            actix_rt::time::sleep(Duration::from_millis(5)).await;
        }
        assert_eq!(ran.load(Ordering::SeqCst), 2);
        assert!(later.is_empty());
        later.close();
        let r = ran.clone();
        later.schedule("c", Duration::ZERO, async move {
            r.fetch_add(1, Ordering::SeqCst);
        });
        actix_rt::time::sleep(Duration::from_millis(20)).await;
        assert_eq!(ran.load(Ordering::SeqCst), 2, "nothing runs after close");
    }
}
