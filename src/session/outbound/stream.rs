//! The writer's side of an outbound queue: [`OutboundStream`], which lays
//! what is queued into write batches (module docs of `outbound`, "Which
//! writer drains it" and "A writer that retires").

use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::task::{Context, Poll};

use bytes::{Bytes, BytesMut};

use super::{Drained, Outbound};

/// The writer: the WebSocket response body, a stream of write batches.
pub struct OutboundStream {
    out: Arc<Outbound>,
    buf: BytesMut,
    done: bool,
    /// Ended at a retirement ([`Outbound::retire_writer`]): the queue
    /// lives on for the next writer, so dropping this stream does not
    /// finish it.
    retired: bool,
    /// Where written bytes are counted, if anywhere.
    metrics: Option<Arc<crate::metrics::Metrics>>,
}

impl OutboundStream {
    /// The writer for `out`.
    pub fn new(out: Arc<Outbound>) -> Self {
        OutboundStream {
            out,
            // Grown on first write: an idle connection holds no write buffer.
            buf: BytesMut::new(),
            done: false,
            retired: false,
            metrics: None,
        }
    }

    /// Counts the bytes it writes in `metrics` (`wharf_sent_bytes`), and
    /// itself among the writers running (`wharf_connection_writers`)
    /// until it is dropped.
    pub fn counted(mut self, metrics: Arc<crate::metrics::Metrics>) -> Self {
        metrics.writers.fetch_add(1, Ordering::Relaxed);
        self.metrics = Some(metrics);
        self
    }
}

/// Bytes a writer that owns its socket gathers before it writes (more
/// when one quantum is larger): actix-http's write buffer size, so that a
/// busy connection makes one system call per 32 KiB rather than one per
/// quantum.
pub(crate) const WRITE_BATCH: usize = 32 * 1024;

impl OutboundStream {
    /// Lays what is ready into `buf`, quantum after quantum while frames
    /// are ready and fewer than `batch` bytes are laid (one quantum when
    /// `batch` is 0). `Ready(true)` when something was laid,
    /// `Ready(false)` when the stream is over and nothing was, `Pending`
    /// (waker registered) when nothing is ready. A writer that owns its
    /// socket passes `WRITE_BATCH` (32 KiB) and the same buffer every time, so
    /// that it writes once per batch, as actix-http's writer does, and
    /// reuses the buffer while the connection is busy.
    pub fn poll_fill(
        &mut self,
        buf: &mut BytesMut,
        batch: usize,
        cx: &mut Context<'_>,
    ) -> Poll<bool> {
        if self.done {
            return Poll::Ready(false);
        }
        let start = buf.len();
        let mut polled = self.out.drain_into(buf, start == 0, cx);
        while let Poll::Ready(Drained::Laid) = polled {
            if buf.len() - start >= batch {
                break;
            }
            polled = self.out.drain_into(buf, false, cx);
            if polled.is_pending() {
                polled = Poll::Ready(Drained::Laid);
                break;
            }
        }
        match polled {
            Poll::Pending => Poll::Pending,
            Poll::Ready(drained) => {
                self.done = drained != Drained::Laid;
                self.retired = drained == Drained::Retired;
                let laid = buf.len() - start;
                if let (Some(m), 1..) = (&self.metrics, laid) {
                    m.bytes_out.add(laid as u64);
                }
                Poll::Ready(laid > 0)
            }
        }
    }

    /// Whether it ended because its writer was asked to retire rather
    /// than because the connection is over.
    pub fn is_retired(&self) -> bool {
        self.retired
    }
}

impl futures_core::Stream for OutboundStream {
    type Item = Result<Bytes, std::convert::Infallible>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = self.get_mut();
        let mut buf = std::mem::take(&mut this.buf);
        // One quantum per poll: actix-http's writer, which polls a body
        // stream, gathers up to its own write buffer's size itself.
        let polled = this.poll_fill(&mut buf, 0, cx);
        let item = match polled {
            Poll::Pending => Poll::Pending,
            Poll::Ready(false) => Poll::Ready(None),
            Poll::Ready(true) => Poll::Ready(Some(Ok(buf.split().freeze()))),
        };
        this.buf = buf;
        item
    }
}

impl Drop for OutboundStream {
    fn drop(&mut self) {
        // The connection is gone: stop accepting frames for it (unless
        // this writer only retired, and the connection lives on).
        if !self.retired {
            self.out.mark_finished();
        }
        if let Some(m) = &self.metrics {
            m.writers.fetch_sub(1, Ordering::Relaxed);
        }
    }
}
