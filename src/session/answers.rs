//! Answers a session sends later (a durable write's confirmation, a call
//! to a queue on another node, a job request), all run by one task per
//! session instead of a task each.
//!
//! Why: the store writer completes a whole commit group at once, from its
//! own thread. With a task per answer, the connection's I/O thread ran the
//! first woken answer, then the connection's writer (woken by that
//! answer's frame, and ahead in the local run queue), then the next
//! answer: one `send` per confirmation. With one task, every answer that
//! completed together is pushed before the writer runs, and goes out in
//! one `send` (measured in benches/README.md, "Durable queues").

use std::cell::OnceCell;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::task::{Context, Poll};

use futures_util::StreamExt as _;
use futures_util::stream::FuturesUnordered;
use tokio::sync::mpsc;

type Answer = Pin<Box<dyn Future<Output = ()>>>;

/// One session's answers in flight; at most `limit` at once (past it,
/// [`Answers::run`] waits for the answer itself, so a client that
/// pipelines is slowed instead of buffered without bound).
pub(super) struct Answers {
    /// Hands answers to the runner task, started with the first answer.
    /// Unbounded in type only: `count` bounds it.
    tx: OnceCell<mpsc::UnboundedSender<Answer>>,
    count: Arc<AtomicUsize>,
    limit: usize,
}

impl Answers {
    /// No answers yet; at most `limit` in flight.
    pub(super) fn new(limit: usize) -> Self {
        Answers {
            tx: OnceCell::new(),
            count: Arc::new(AtomicUsize::new(0)),
            limit,
        }
    }

    /// Runs `answer` on the session's answer task, or inline (awaited
    /// here) when `limit` answers are in flight already or the task is
    /// gone.
    pub(super) async fn run(&self, answer: impl Future<Output = ()> + 'static) {
        if self.count.load(Ordering::Acquire) >= self.limit {
            answer.await;
            return;
        }
        let tx = self.tx.get_or_init(|| {
            let (tx, rx) = mpsc::unbounded_channel();
            actix_rt::spawn(Runner {
                rx,
                running: FuturesUnordered::new(),
                open: true,
            });
            tx
        });
        self.count.fetch_add(1, Ordering::AcqRel);
        let count = self.count.clone();
        let counted: Answer = Box::pin(async move {
            answer.await;
            count.fetch_sub(1, Ordering::AcqRel);
        });
        if let Err(mpsc::error::SendError(answer)) = tx.send(counted) {
            answer.await;
        }
    }
}

/// The task: takes new answers and polls those in flight, so answers
/// woken together run together. It ends once the session is gone (the
/// sender dropped) and every answer has been sent.
struct Runner {
    rx: mpsc::UnboundedReceiver<Answer>,
    running: FuturesUnordered<Answer>,
    open: bool,
}

impl Future for Runner {
    type Output = ();

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let this = self.get_mut();
        while this.open {
            match this.rx.poll_recv(cx) {
                Poll::Ready(Some(answer)) => this.running.push(answer),
                Poll::Ready(None) => this.open = false,
                Poll::Pending => break,
            }
        }
        while let Poll::Ready(Some(())) = this.running.poll_next_unpin(cx) {}
        if !this.open && this.running.is_empty() {
            Poll::Ready(())
        } else {
            Poll::Pending
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[actix_rt::test]
    async fn answers_run_and_the_limit_makes_the_caller_wait() {
        let answers = Answers::new(2);
        let (release, gate) = tokio::sync::watch::channel(false);
        let done = Arc::new(AtomicUsize::new(0));
        for _ in 0..2 {
            let (mut gate, done) = (gate.clone(), done.clone());
            answers
                .run(async move {
                    let _ = gate.wait_for(|open| *open).await;
                    done.fetch_add(1, Ordering::AcqRel);
                })
                .await;
        }
        // Both are in flight, neither has run to its end.
        assert_eq!(answers.count.load(Ordering::Acquire), 2);
        assert_eq!(done.load(Ordering::Acquire), 0);
        // The third runs inline: it completes before `run` returns.
        let inline = done.clone();
        answers
            .run(async move {
                inline.fetch_add(10, Ordering::AcqRel);
            })
            .await;
        assert_eq!(done.load(Ordering::Acquire), 10);
        release.send(true).expect("gate");
        for _ in 0..10_000 {
            if answers.count.load(Ordering::Acquire) == 0 {
                break;
            }
            tokio::task::yield_now().await;
        }
        assert_eq!(done.load(Ordering::Acquire), 12);
    }
}
