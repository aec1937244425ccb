//! A subscription's (or consumer's) stream from the connection's task to
//! the application: frames handed over in batches, as many at once as one
//! read brought, bounded in items.
//!
//! One hand-over per item through a bounded `mpsc` cost a subscriber ~360
//! instructions a message (a semaphore's atomic take, the list's push and
//! wake, and a lock to give the permit back on every receive); a batch
//! pays that once. The bound is still counted in items: the sender takes
//! a permit for each item of a batch before it sends it (waiting for room
//! when the application is behind, which is the backpressure: the socket
//! is not read meanwhile), and the receiver gives a batch's permits back
//! once it has handed out the batch's last item.

use std::sync::Arc;
use std::task::{Context, Poll, ready};

use tokio::sync::{Semaphore, TryAcquireError, mpsc};

/// Largest batch: a read burst's frames, or the bound when it is smaller.
const MAX_BATCH: usize = super::DISPATCH_BURST;

/// A stream holding at most `bound` items (at least one).
pub(crate) fn channel<T>(bound: usize) -> (Tx<T>, Rx<T>) {
    let bound = bound.clamp(1, Semaphore::MAX_PERMITS);
    let room = Arc::new(Semaphore::new(bound));
    let (tx, rx) = mpsc::unbounded_channel();
    (
        Tx {
            tx,
            room: room.clone(),
            max_batch: bound.min(MAX_BATCH),
        },
        Rx {
            rx,
            batch: Vec::new().into_iter(),
            held: 0,
            room,
        },
    )
}

/// The connection task's end.
pub(crate) struct Tx<T> {
    tx: mpsc::UnboundedSender<Vec<T>>,
    room: Arc<Semaphore>,
    /// Most items one batch may hold: never more than the bound, so a
    /// batch always fits once the application has caught up.
    pub(crate) max_batch: usize,
}

impl<T> Tx<T> {
    /// Hands `batch` (at most [`Tx::max_batch`] items) over, waiting for
    /// room first. Dropped when the receiving end is gone.
    pub(crate) async fn send(&self, batch: Vec<T>) {
        let Ok(n) = u32::try_from(batch.len()) else {
            return;
        };
        match self.room.try_acquire_many(n) {
            Ok(permits) => permits.forget(),
            Err(TryAcquireError::NoPermits) => match self.room.acquire_many(n).await {
                Ok(permits) => permits.forget(),
                Err(_) => return,
            },
            Err(TryAcquireError::Closed) => return,
        }
        let _ = self.tx.send(batch);
    }
}

/// The application's end.
pub(crate) struct Rx<T> {
    rx: mpsc::UnboundedReceiver<Vec<T>>,
    /// What is left of the batch being handed out.
    batch: std::vec::IntoIter<T>,
    /// Permits of the batch being handed out, given back when it is done.
    held: usize,
    room: Arc<Semaphore>,
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
                Some(batch) => self.start(batch),
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
            let batch = self.rx.try_recv().ok()?;
            self.start(batch);
        }
    }

    /// The next item of the current batch; the batch's room given back
    /// with its last item.
    fn take(&mut self) -> Option<T> {
        let item = self.batch.next();
        if self.batch.len() == 0 && self.held > 0 {
            self.room.add_permits(std::mem::take(&mut self.held));
        }
        item
    }

    fn start(&mut self, batch: Vec<T>) {
        self.held = batch.len();
        self.batch = batch.into_iter();
    }
}

impl<T> Drop for Rx<T> {
    /// Wakes a sender waiting for room that will never come.
    fn drop(&mut self) {
        self.room.close();
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
        assert_eq!(rx.try_next(), Some(1));
        assert_eq!(rx.try_next(), Some(2));
        // A batch's room comes back only with its last item.
        assert!((&mut blocked).now_or_never().is_none());
        assert_eq!(rx.try_next(), Some(3));
        blocked.await;
        for want in [4, 5, 6] {
            assert_eq!(rx.try_next(), Some(want));
        }
        assert_eq!(rx.try_next(), None);
        drop(tx);
        assert_eq!(std::future::poll_fn(|cx| rx.poll_next(cx)).await, None);
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
