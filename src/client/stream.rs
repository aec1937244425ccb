//! A subscription's (or consumer's) stream from the connection's task to
//! the application: frames handed over in batches, as many at once as one
//! read brought, bounded in items.
//!
//! One hand-over per item through a bounded `mpsc` cost a subscriber ~360
//! instructions a message (a semaphore's atomic take, the list's push and
//! wake, and a lock to give the permit back on every receive); a batch
//! pays the channel once. The bound is still counted in items, and room
//! comes back with each item taken, as it did: the receiver publishes how
//! many items it has taken (one store), the sender counts what it sent,
//! and a sender short of room sends what fits and waits for the rest (the
//! backpressure: the socket is not read meanwhile), woken by the receiver
//! only while it waits.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::task::{Context, Poll, ready};

use tokio::sync::{Notify, mpsc};

/// Largest batch: a read burst's frames, or the bound when it is smaller.
const MAX_BATCH: usize = super::DISPATCH_BURST;

/// A stream holding at most `bound` items (at least one).
pub(crate) fn channel<T>(bound: usize) -> (Tx<T>, Rx<T>) {
    let bound = bound.max(1);
    let shared = Arc::new(Shared {
        taken: AtomicUsize::new(0),
        waiting: AtomicBool::new(false),
        closed: AtomicBool::new(false),
        wake: Notify::new(),
    });
    let (tx, rx) = mpsc::unbounded_channel();
    (
        Tx {
            tx,
            shared: shared.clone(),
            bound,
            sent: AtomicUsize::new(0),
            max_batch: bound.min(MAX_BATCH),
        },
        Rx {
            rx,
            batch: Vec::new().into_iter(),
            taken: 0,
            shared,
        },
    )
}

/// What both ends see.
struct Shared {
    /// Items the receiver has taken, in all.
    taken: AtomicUsize,
    /// The sender waits for room: the receiver wakes it on each take.
    waiting: AtomicBool,
    /// The receiver is gone.
    closed: AtomicBool,
    wake: Notify,
}

/// The connection task's end.
pub(crate) struct Tx<T> {
    tx: mpsc::UnboundedSender<Vec<T>>,
    shared: Arc<Shared>,
    bound: usize,
    /// Items sent, in all (only this end writes it).
    sent: AtomicUsize,
    /// Most items one batch should hold.
    pub(crate) max_batch: usize,
}

impl<T> Tx<T> {
    /// Room for this many more items now.
    fn room(&self) -> usize {
        let unread = self
            .sent
            .load(Ordering::Relaxed)
            .wrapping_sub(self.shared.taken.load(Ordering::SeqCst));
        self.bound.saturating_sub(unread)
    }

    fn hand_over(&self, batch: Vec<T>) {
        self.sent.fetch_add(batch.len(), Ordering::Relaxed);
        let _ = self.tx.send(batch);
    }

    /// Hands `batch` over: what fits at once, the rest as the application
    /// takes items. Dropped when the receiving end is gone.
    pub(crate) async fn send(&self, mut batch: Vec<T>) {
        loop {
            if self.shared.closed.load(Ordering::Relaxed) {
                return;
            }
            let room = self.room();
            if room >= batch.len() {
                return self.hand_over(batch);
            }
            if room > 0 {
                let rest = batch.split_off(room);
                self.hand_over(std::mem::replace(&mut batch, rest));
            }
            // Say we wait, then look again: a take between the two either
            // sees the flag and wakes us, or is seen here.
            let woken = self.shared.wake.notified();
            self.shared.waiting.store(true, Ordering::SeqCst);
            if self.room() == 0 && !self.shared.closed.load(Ordering::SeqCst) {
                woken.await;
            }
            self.shared.waiting.store(false, Ordering::SeqCst);
        }
    }
}

/// The application's end.
pub(crate) struct Rx<T> {
    rx: mpsc::UnboundedReceiver<Vec<T>>,
    /// What is left of the batch being handed out.
    batch: std::vec::IntoIter<T>,
    /// Items taken, in all (published in `Shared::taken`).
    taken: usize,
    shared: Arc<Shared>,
}

impl<T> Rx<T> {
    /// The next item, waiting for one; `None` once the sender is gone and
    /// everything it sent was taken.
    pub(crate) fn poll_next(&mut self, cx: &mut Context<'_>) -> Poll<Option<T>> {
        loop {
            if let Some(item) = self.take() {
                return Poll::Ready(Some(item));
            }
            match ready!(self.rx.poll_recv(cx)) {
                Some(batch) => self.batch = batch.into_iter(),
                None => return Poll::Ready(None),
            }
        }
    }

    /// An item already received, without waiting.
    pub(crate) fn try_next(&mut self) -> Option<T> {
        loop {
            if let Some(item) = self.take() {
                return Some(item);
            }
            self.batch = self.rx.try_recv().ok()?.into_iter();
        }
    }

    /// The next item of the current batch; its room given back at once.
    fn take(&mut self) -> Option<T> {
        let item = self.batch.next()?;
        if self.batch.len() == 0 {
            // Not kept until the next batch comes.
            self.batch = Vec::new().into_iter();
        }
        self.taken = self.taken.wrapping_add(1);
        self.shared.taken.store(self.taken, Ordering::SeqCst);
        if self.shared.waiting.load(Ordering::SeqCst) {
            self.shared.wake.notify_one();
        }
        Some(item)
    }
}

impl<T> Drop for Rx<T> {
    /// Wakes a sender waiting for room that will never come.
    fn drop(&mut self) {
        self.shared.closed.store(true, Ordering::SeqCst);
        self.shared.wake.notify_one();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures_util::FutureExt;

    #[actix_rt::test]
    async fn items_arrive_in_order_and_the_bound_holds() {
        let (tx, mut rx) = channel::<u32>(5);
        assert_eq!(tx.max_batch, 5);
        tx.send(vec![1, 2, 3]).now_or_never().expect("room for 3");
        tx.send(vec![4, 5]).now_or_never().expect("room for 2 more");
        // Full: the next batch waits for the application.
        let mut blocked = Box::pin(tx.send(vec![6]));
        assert!((&mut blocked).now_or_never().is_none());
        // Room comes back with each item taken, not with a whole batch.
        assert_eq!(rx.try_next(), Some(1));
        blocked.await;
        for want in [2, 3, 4, 5, 6] {
            assert_eq!(rx.try_next(), Some(want));
        }
        assert_eq!(rx.try_next(), None);
        drop(tx);
        assert_eq!(std::future::poll_fn(|cx| rx.poll_next(cx)).await, None);
    }

    #[actix_rt::test]
    async fn what_fits_goes_at_once_and_the_rest_as_room_comes() {
        let (tx, mut rx) = channel::<u32>(3);
        tx.send(vec![1, 2]).now_or_never().expect("room for 2");
        let mut blocked = Box::pin(tx.send(vec![3, 4, 5]));
        assert!((&mut blocked).now_or_never().is_none());
        // 3 went at once; 4 and 5 each as an item is taken.
        assert_eq!(rx.try_next(), Some(1));
        assert_eq!(rx.try_next(), Some(2));
        assert_eq!(rx.try_next(), Some(3));
        blocked.await;
        assert_eq!(rx.try_next(), Some(4));
        assert_eq!(rx.try_next(), Some(5));
        assert_eq!(rx.try_next(), None);
    }

    /// A consumer that took one delivery and waits for its ack's receipt
    /// (which the connection reads after the next delivery) must not wait
    /// on the rest of its batch.
    #[actix_rt::test]
    async fn an_item_taken_makes_room_at_once() {
        let (tx, mut rx) = channel::<u32>(2);
        tx.send(vec![1, 2]).now_or_never().expect("room for 2");
        assert_eq!(rx.try_next(), Some(1));
        tx.send(vec![3]).now_or_never().expect("room for 1 again");
        assert_eq!(rx.try_next(), Some(2));
        assert_eq!(rx.try_next(), Some(3));
    }

    /// A waiting sender is woken by a take from another thread.
    #[test]
    fn a_take_elsewhere_wakes_a_waiting_sender() {
        let (tx, mut rx) = channel::<u32>(1);
        let taker = std::thread::spawn(move || {
            let mut got = Vec::new();
            while got.len() < 1000 {
                match rx.try_next() {
                    Some(v) => got.push(v),
                    None => std::thread::yield_now(),
                }
            }
            got
        });
        actix_rt::System::new().block_on(async {
            for i in 0..1000 {
                actix_rt::time::timeout(std::time::Duration::from_secs(10), tx.send(vec![i]))
                    .await
                    .expect("woken within 10 s");
            }
        });
        assert_eq!(taker.join().unwrap(), (0..1000).collect::<Vec<_>>());
    }

    #[actix_rt::test]
    async fn a_sender_waiting_for_room_is_released_when_the_receiver_goes() {
        let (tx, rx) = channel::<u32>(1);
        assert_eq!(tx.max_batch, 1);
        tx.send(vec![1]).now_or_never().expect("room for 1");
        let mut blocked = Box::pin(tx.send(vec![2]));
        assert!((&mut blocked).now_or_never().is_none());
        drop(rx);
        blocked.now_or_never().expect("not waiting any more");
    }
}
