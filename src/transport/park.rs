//! Parking: a quiet connection leaves its task for a lot that holds it as
//! one small struct, so that an idle connection costs no task, no timer
//! and no tokio registration of its socket (benches/README.md, "Quiet
//! MQTT/TCP connections parked").
//!
//! A lot runs one task on its thread. It watches every parked socket in
//! an epoll set of its own (the set is the lot's one registration with
//! tokio), a wake-up per parked item (a waker the item hands to whatever
//! may want it back: its outbound queue) and each item's deadline. The
//! first of the three to come hands the item back ([`Parkable::resume`]),
//! which gives it a task again. The lot knows nothing of what it holds.
//!
//! The lot's state lives in its task: when the task ends (the worker's
//! runtime stops) what it holds is dropped with it, as the tasks of
//! connections that were not parked are; a later [`Lot::park`] on the
//! thread fails, and the caller starts a new lot.

use std::cell::RefCell;
use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::future::poll_fn;
use std::os::fd::RawFd;
use std::rc::{Rc, Weak};
use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};
use std::time::{Duration, Instant};

use futures_util::task::AtomicWaker;
use mio::unix::SourceFd;
use mio::{Interest, Token};
use tokio::io::unix::AsyncFd;

use crate::maps::shrink_sparse;

/// What a lot holds: a quiet connection, taken out of its task.
pub(crate) trait Parkable: 'static {
    /// The socket watched while parked: a read (or the peer's hang-up)
    /// hands the item back.
    fn fd(&self) -> RawFd;
    /// When the item must be handed back though nothing came (its
    /// keep-alive deadline, its credential's expiry).
    fn deadline(&self) -> Instant;
    /// Hands `waker` to what may want the item back (its outbound queue,
    /// when frames are queued for it); whether it is wanted already.
    fn want(&self, waker: &Waker) -> bool;
    /// Gives the item a task again. Called on the lot's thread, in its
    /// task.
    fn resume(self: Box<Self>);
    /// Drops the item with the lot, whose task ended with its thread's
    /// runtime.
    fn abandon(self: Box<Self>);
}

/// A lot of parked items on one thread: [`Lot::park`] hands one in, its
/// socket, its waker or its deadline hands it back.
pub(crate) struct Lot<T: Parkable> {
    /// The lot's state, owned by its task.
    inner: Weak<RefCell<Inner<T>>>,
    shared: Arc<Shared>,
}

/// What any thread may touch: the items wanted back, and the lot task's
/// waker.
struct Shared {
    /// (slot, generation) of each item whose waker was called.
    woken: parking_lot::Mutex<Vec<(u32, u32)>>,
    task: AtomicWaker,
}

/// One place in the lot. The generation (the lot's count of parks when
/// the item came) tells a stale wake-up or deadline, of an item that has
/// left the slot since, from a live one.
struct Slot<T> {
    generation: u32,
    item: Option<Box<T>>,
}

struct Inner<T: Parkable> {
    /// The epoll set's registry (the set itself is the task's).
    registry: mio::Registry,
    /// Every place, the vacant ones at the end dropped (and the room
    /// given back once most of it is unused: once a storm's places have
    /// emptied from the top, the lot keeps nothing of its size; a place
    /// still held high up keeps those below it).
    slots: Vec<Slot<T>>,
    /// Vacant places below the end, lowest first (so that the end empties
    /// as the lot does); some may lie past the end since, and are skipped.
    free: BinaryHeap<Reverse<u32>>,
    /// Parks so far: the next item's generation.
    parks: u32,
    /// Each parked item's deadline, and those of items that left since
    /// (dropped when they come, or when they outnumber the live ones).
    deadlines: BinaryHeap<Reverse<(Instant, u32, u32)>>,
    parked: usize,
    /// What the task's timer is set for.
    armed: Option<Instant>,
}

/// The waker a parked item hands out: says which item is wanted back.
struct WantedBack {
    shared: Arc<Shared>,
    slot: u32,
    generation: u32,
}

impl Wake for WantedBack {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.shared.woken.lock().push((self.slot, self.generation));
        self.shared.task.wake();
    }
}

/// Most readiness events taken from the epoll set at once.
const EVENTS: usize = 256;
/// Items handed back in one pass of the lot's task (a pass may take up to
/// [`EVENTS`] more, from one read of the set); the rest wait for its next
/// pass, after those handed back have run.
const BATCH: usize = 256;

impl<T: Parkable> Lot<T> {
    /// A new lot, its task spawned on this thread's arbiter.
    ///
    /// # Errors
    /// The epoll set cannot be made or registered with tokio.
    pub(crate) fn start() -> std::io::Result<Lot<T>> {
        let poll = mio::Poll::new()?;
        let registry = poll.registry().try_clone()?;
        // SAFETY: `mio::Poll` owns its epoll descriptor for its whole life
        // and never replaces it, and the `AsyncFd` owns the `Poll`: the
        // descriptor stays open and the same until the `AsyncFd` is dropped.
        #[allow(unsafe_code)]
        let set = unsafe { AsyncFd::register_with_interest(poll, tokio::io::Interest::READABLE)? };
        let inner = Rc::new(RefCell::new(Inner {
            registry,
            slots: Vec::new(),
            free: BinaryHeap::new(),
            parks: 0,
            deadlines: BinaryHeap::new(),
            parked: 0,
            armed: None,
        }));
        let shared = Arc::new(Shared {
            woken: parking_lot::Mutex::new(Vec::new()),
            task: AtomicWaker::new(),
        });
        let lot = Lot {
            inner: Rc::downgrade(&inner),
            shared: shared.clone(),
        };
        actix_rt::spawn(watch(set, inner, shared));
        Ok(lot)
    }

    /// Whether the lot's task still runs (it ends with its thread's
    /// runtime).
    pub(crate) fn is_open(&self) -> bool {
        self.inner.strong_count() > 0
    }

    /// Parks `item` until its socket is readable, its waker is called or
    /// its deadline comes. Handed back when the lot cannot hold it (its
    /// task ended, or its socket cannot be watched).
    ///
    /// # Errors
    /// The item, not parked.
    pub(crate) fn park(&self, item: Box<T>) -> Result<(), Box<T>> {
        let Some(inner) = self.inner.upgrade() else {
            return Err(item);
        };
        let mut g = inner.borrow_mut();
        let slot = match g.vacant() {
            Some(slot) => slot,
            None => match u32::try_from(g.slots.len()) {
                Ok(slot) => {
                    g.slots.push(Slot {
                        generation: 0,
                        item: None,
                    });
                    slot
                }
                Err(_) => return Err(item),
            },
        };
        let fd = item.fd();
        if let Err(e) =
            g.registry
                .register(&mut SourceFd(&fd), Token(slot as usize), Interest::READABLE)
        {
            tracing::debug!("a quiet connection stays unparked: {e}");
            g.free.push(Reverse(slot));
            g.trim();
            return Err(item);
        }
        g.parks = g.parks.wrapping_add(1);
        let generation = g.parks;
        g.slots[slot as usize].generation = generation;
        let deadline = item.deadline();
        let waker = Waker::from(Arc::new(WantedBack {
            shared: self.shared.clone(),
            slot,
            generation,
        }));
        let wanted = item.want(&waker);
        g.slots[slot as usize].item = Some(item);
        g.parked += 1;
        g.deadlines.push(Reverse((deadline, slot, generation)));
        g.trim();
        let sooner = g.armed.is_none_or(|at| deadline < at);
        drop(g);
        if wanted {
            self.shared.woken.lock().push((slot, generation));
        }
        if wanted || sooner {
            self.shared.task.wake();
        }
        Ok(())
    }
}

impl<T: Parkable> Drop for Inner<T> {
    fn drop(&mut self) {
        for slot in &mut self.slots {
            if let Some(item) = slot.item.take() {
                item.abandon();
            }
        }
    }
}

impl<T: Parkable> Inner<T> {
    /// Takes the item out of `slot` (if `generation` is still its own):
    /// unwatched, its slot free for another.
    fn take(&mut self, slot: u32, generation: Option<u32>) -> Option<Box<T>> {
        let s = self.slots.get_mut(slot as usize)?;
        if generation.is_some_and(|g| g != s.generation) {
            return None;
        }
        let item = s.item.take()?;
        // Ignored: a socket the set no longer has needs no unwatching (and
        // it is registered with tokio again next).
        let _ = self.registry.deregister(&mut SourceFd(&item.fd()));
        self.free.push(Reverse(slot));
        self.parked -= 1;
        Some(item)
    }

    /// The lowest vacant place below the end, if any.
    fn vacant(&mut self) -> Option<u32> {
        while let Some(Reverse(slot)) = self.free.pop() {
            if (slot as usize) < self.slots.len() {
                return Some(slot);
            }
        }
        None
    }

    /// Drops the vacant places at the end and the deadlines of items no
    /// longer parked, and gives back room mostly unused: what the lot
    /// holds follows what is parked now, not the most ever parked.
    fn trim(&mut self) {
        while self.slots.last().is_some_and(|s| s.item.is_none()) {
            self.slots.pop();
        }
        if self.deadlines.len() > 2 * self.parked + 64 {
            let slots = &self.slots;
            self.deadlines.retain(|Reverse((_, slot, generation))| {
                slots
                    .get(*slot as usize)
                    .is_some_and(|s| s.generation == *generation && s.item.is_some())
            });
        }
        // Every vacant place below the end is in `free` once; the rest of
        // it lies past the end.
        let end = self.slots.len();
        if self.free.len() > 2 * (end - self.parked) + 64 {
            self.free.retain(|Reverse(slot)| (*slot as usize) < end);
        }
        shrink_sparse(&mut self.slots, KEEP);
        shrink_sparse(&mut self.free, KEEP);
        shrink_sparse(&mut self.deadlines, KEEP);
    }
}

/// Room the lot's lists keep whatever their use.
const KEEP: usize = 64;

/// The lot's task: hands back what its sockets, wakers and deadlines
/// ask for; never ends on its own (it is dropped with its thread's
/// runtime, and what it holds with it).
async fn watch<T: Parkable>(
    mut set: AsyncFd<mio::Poll>,
    inner: Rc<RefCell<Inner<T>>>,
    shared: Arc<Shared>,
) {
    let mut events = mio::Events::with_capacity(EVENTS);
    let mut timer = Box::pin(tokio::time::sleep(Duration::from_secs(86_400)));
    let mut due: Vec<Box<T>> = Vec::new();
    poll_fn(|cx: &mut Context<'_>| -> Poll<()> {
        shared.task.register(cx.waker());
        // Whether the timer came (it must be set anew, even for the same
        // deadline).
        let mut fired = false;
        loop {
            let more = {
                let mut g = inner.borrow_mut();
                readable(&mut set, &mut events, &mut g, &mut due, cx);
                if due.len() < BATCH {
                    let mut woken = std::mem::take(&mut *shared.woken.lock());
                    while due.len() < BATCH {
                        let Some((slot, generation)) = woken.pop() else {
                            break;
                        };
                        due.extend(g.take(slot, Some(generation)));
                    }
                    if !woken.is_empty() {
                        shared.woken.lock().append(&mut woken);
                    }
                }
                let now = Instant::now();
                while due.len() < BATCH {
                    let Some(&Reverse((at, slot, generation))) = g.deadlines.peek() else {
                        break;
                    };
                    if at > now {
                        break;
                    }
                    g.deadlines.pop();
                    due.extend(g.take(slot, Some(generation)));
                }
                if !due.is_empty() {
                    g.trim();
                }
                let next = g.deadlines.peek().map(|Reverse((at, _, _))| *at);
                if fired || next != g.armed {
                    g.armed = next;
                    let at = next.unwrap_or(now + Duration::from_secs(86_400));
                    timer.as_mut().reset(at.into());
                }
                due.len() >= BATCH
            };
            // Outside the borrow: a resumed item may park again at once.
            for item in due.drain(..) {
                item.resume();
            }
            if more {
                // A storm (a mass disconnect, a broadcast to every parked
                // connection): let the resumed run before more are, and
                // keep the thread's run queue short.
                cx.waker().wake_by_ref();
                return Poll::Pending;
            }
            if timer.as_mut().poll(cx).is_pending() {
                return Poll::Pending;
            }
            fired = true;
        }
    })
    .await;
}

/// Takes the items of readable sockets out of the set into `due`, until
/// it holds a [`BATCH`].
fn readable<T: Parkable>(
    set: &mut AsyncFd<mio::Poll>,
    events: &mut mio::Events,
    g: &mut Inner<T>,
    due: &mut Vec<Box<T>>,
    cx: &mut Context<'_>,
) {
    loop {
        let mut guard = match set.poll_read_ready_mut(cx) {
            Poll::Ready(Ok(guard)) => guard,
            Poll::Ready(Err(e)) => {
                tracing::warn!("the parked connections' epoll set failed: {e}");
                return;
            }
            Poll::Pending => return,
        };
        if due.len() >= BATCH {
            // Left ready: the next pass takes the rest.
            return;
        }
        events.clear();
        match guard.get_inner_mut().poll(events, Some(Duration::ZERO)) {
            Ok(()) if events.is_empty() => guard.clear_ready(),
            Ok(()) => {
                for e in events.iter() {
                    let Ok(slot) = u32::try_from(e.token().0) else {
                        continue;
                    };
                    due.extend(g.take(slot, None));
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => {
                tracing::warn!("the parked connections' epoll set failed: {e}");
                guard.clear_ready();
                return;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use std::os::fd::AsRawFd;
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// A parked socket that counts its resumptions and why it was wanted.
    struct Item {
        sock: std::net::TcpStream,
        deadline: Instant,
        want: Arc<parking_lot::Mutex<Option<Waker>>>,
        resumed: Arc<AtomicUsize>,
    }

    impl Parkable for Item {
        fn fd(&self) -> RawFd {
            self.sock.as_raw_fd()
        }
        fn deadline(&self) -> Instant {
            self.deadline
        }
        fn want(&self, waker: &Waker) -> bool {
            *self.want.lock() = Some(waker.clone());
            false
        }
        fn resume(self: Box<Self>) {
            self.resumed.fetch_add(1, Ordering::SeqCst);
        }
        fn abandon(self: Box<Self>) {}
    }

    fn pair() -> (std::net::TcpStream, std::net::TcpStream) {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let a = std::net::TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (b, _) = l.accept().unwrap();
        b.set_nonblocking(true).unwrap();
        (a, b)
    }

    async fn until(n: &AtomicUsize, want: usize) {
        let deadline = Instant::now() + Duration::from_secs(10);
        while n.load(Ordering::SeqCst) < want {
            assert!(Instant::now() < deadline, "not resumed");
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    /// Each of the three ways back hands back only its own item, once.
    #[actix_rt::test]
    async fn a_read_a_waker_or_a_deadline_hands_an_item_back() {
        let lot = Lot::<Item>::start().unwrap();
        let far = Instant::now() + Duration::from_secs(3600);
        let mut peers = Vec::new();
        let mut counts = Vec::new();
        let mut wants = Vec::new();
        for deadline in [far, far, Instant::now() + Duration::from_millis(50)] {
            let (a, b) = pair();
            let resumed = Arc::new(AtomicUsize::new(0));
            let want = Arc::new(parking_lot::Mutex::new(None));
            let item = Item {
                sock: b,
                deadline,
                want: want.clone(),
                resumed: resumed.clone(),
            };
            assert!(lot.park(Box::new(item)).is_ok());
            peers.push(a);
            counts.push(resumed);
            wants.push(want);
        }
        // The deadline.
        until(&counts[2], 1).await;
        assert_eq!(counts[0].load(Ordering::SeqCst), 0);
        assert_eq!(counts[1].load(Ordering::SeqCst), 0);
        // A read.
        peers[0].write_all(b"x").unwrap();
        until(&counts[0], 1).await;
        assert_eq!(counts[1].load(Ordering::SeqCst), 0);
        // The waker.
        let w = wants[1].lock().take().unwrap();
        w.wake_by_ref();
        until(&counts[1], 1).await;
        // A stale wake-up for slot 1 must not take what parks there next:
        // the lot is empty again, and takes its lowest places first, so a
        // filler takes slot 0 and the next item slot 1.
        let (_e, f) = pair();
        let filler = Item {
            sock: f,
            deadline: far,
            want: Arc::new(parking_lot::Mutex::new(None)),
            resumed: Arc::new(AtomicUsize::new(0)),
        };
        assert!(lot.park(Box::new(filler)).is_ok());
        let (a, b) = pair();
        let again = Arc::new(AtomicUsize::new(0));
        let item = Item {
            sock: b,
            deadline: far,
            want: Arc::new(parking_lot::Mutex::new(None)),
            resumed: again.clone(),
        };
        assert!(lot.park(Box::new(item)).is_ok());
        w.wake();
        // Wake-ups are handled before deadlines: once this one's deadline
        // has handed it back, the stale wake-up was seen.
        let (_c, d) = pair();
        let sentinel = Arc::new(AtomicUsize::new(0));
        let item = Item {
            sock: d,
            deadline: Instant::now(),
            want: Arc::new(parking_lot::Mutex::new(None)),
            resumed: sentinel.clone(),
        };
        assert!(lot.park(Box::new(item)).is_ok());
        until(&sentinel, 1).await;
        assert_eq!(again.load(Ordering::SeqCst), 0);
        drop(a);
        // The peer's hang-up is a read.
        until(&again, 1).await;
        for c in &counts {
            assert_eq!(c.load(Ordering::SeqCst), 1);
        }
    }
}
