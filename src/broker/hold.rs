//! Holding a publisher back for subscribers that cannot keep up. A
//! publish that reached crowded sinks ([`DeliveryOutcome::Crowded`]: an
//! MQTT subscriber past its mark of unacknowledged QoS 1 and 2
//! deliveries) carries them in its [`Hold`]; the publishing connection
//! waits on it before it acknowledges the message and reads more from its
//! client. A subscriber's backlog so stays bounded without dropping what
//! a publisher was told was accepted, and the publisher goes at the pace
//! of its slowest QoS 1 subscriber.
//!
//! The wait is bounded: a sink still crowded when the timeout ends is
//! expelled ([`Sink::expel`]), so one stuck subscriber cannot stop its
//! publishers for good. A publisher that is itself crowded as a
//! subscriber is not held (it must read its own acknowledgements), which
//! breaks the cycle of two clients each publishing to the other.
//!
//! [`DeliveryOutcome::Crowded`]: super::DeliveryOutcome::Crowded

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::Sink;

/// How often a held publisher looks again at what else may end its wait
/// (its own connection closing comes without a signal).
const LOOK_AGAIN: Duration = Duration::from_millis(100);

/// The crowded sinks one publish reached: what its publisher waits for
/// ([`Hold::wait`]). Empty (and allocation-free) for nearly every publish.
#[derive(Clone, Default)]
pub struct Hold(Vec<Arc<dyn Sink>>);

impl Hold {
    /// Whether the publish reached no crowded sink.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Adds a sink that answered [`super::DeliveryOutcome::Crowded`]. A
    /// sink with several matching subscriptions comes more than once; the
    /// wait finds it caught up the second time (no search here: the
    /// topic's task must stay linear in its subscribers).
    pub(crate) fn push(&mut self, sink: &Arc<dyn Sink>) {
        self.0.push(sink.clone());
    }

    /// Waits until every sink has room, for the publisher whose own sink
    /// is `own`, at most `timeout` in all; the sinks still crowded then
    /// are expelled. Ends early when `own` closes or becomes crowded.
    pub async fn wait(self, own: &dyn Sink, timeout: Duration) {
        let deadline = Instant::now() + timeout;
        let own_signal = own.signal();
        for sink in self.0 {
            if sink.id() == own.id() {
                continue;
            }
            let Some(signal) = sink.signal() else {
                continue;
            };
            loop {
                // Registered before the looks, so no change between a look
                // and the wait is missed.
                let theirs = signal.notified();
                tokio::pin!(theirs);
                theirs.as_mut().enable();
                let mine = own_signal.as_ref().map(|s| s.notified());
                let mut mine = std::pin::pin!(mine);
                if let Some(n) = mine.as_mut().as_pin_mut() {
                    n.enable();
                }
                if own.is_closed() || own.crowded() {
                    return;
                }
                if !sink.crowded() {
                    break;
                }
                let now = Instant::now();
                if now >= deadline {
                    sink.expel(&format!(
                        "too slow: it kept a publisher waiting {} ms for \
                         acknowledgements of QoS 1 and 2 deliveries",
                        timeout.as_millis()
                    ));
                    break;
                }
                let mine = async {
                    match mine.as_pin_mut() {
                        Some(n) => n.await,
                        None => std::future::pending().await,
                    }
                };
                // Whatever woke it, the looks above say what to do next.
                tokio::select! {
                    () = theirs => {}
                    () = mine => {}
                    () = tokio::time::sleep(LOOK_AGAIN.min(deadline - now)) => {}
                }
            }
        }
    }
}

impl std::fmt::Debug for Hold {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list()
            .entries(self.0.iter().map(|s| s.id()))
            .finish()
    }
}

impl PartialEq for Hold {
    fn eq(&self, other: &Self) -> bool {
        self.0.len() == other.0.len() && self.0.iter().zip(&other.0).all(|(a, b)| a.id() == b.id())
    }
}

impl Eq for Hold {}
