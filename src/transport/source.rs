//! Where a WebSocket read loop's bytes come from, kept apart from both
//! sides that provide them: the socket itself (`raw`, the `wharf`
//! server's handed-over connections) and actix-web's request payload
//! (connections served inside actix-http, `wsloop`).

use std::task::{Context, Poll};

use actix_web::web;
use bytes::BytesMut;
use futures_core::Stream;

/// Where a read loop's bytes come from: the socket itself (the `wharf`
/// server's handed-over connections) or actix-web's request payload.
pub(crate) trait ByteFeed: Unpin {
    /// Whether a burst reads on while bytes are ready. Not for actix-web's
    /// payload: its bytes come from the dispatcher's task, which cannot
    /// run while the read loop's does, so asking again only wakes it.
    const BURSTS: bool = true;
    /// Appends what has arrived to `buf`: how many bytes, or `None` once
    /// the connection is over.
    fn poll_append(&mut self, buf: &mut BytesMut, cx: &mut Context<'_>) -> Poll<Option<usize>>;
}

impl ByteFeed for web::Payload {
    const BURSTS: bool = false;

    fn poll_append(&mut self, buf: &mut BytesMut, cx: &mut Context<'_>) -> Poll<Option<usize>> {
        match std::pin::Pin::new(self).poll_next(cx) {
            Poll::Pending => Poll::Pending,
            Poll::Ready(Some(Ok(bytes))) => {
                let n = bytes.len();
                if buf.capacity() == 0 {
                    // Decoded where it arrived: no copy when not shared.
                    *buf = BytesMut::from(bytes);
                } else {
                    buf.extend_from_slice(&bytes);
                }
                Poll::Ready(Some(n))
            }
            Poll::Ready(Some(Err(_)) | None) => Poll::Ready(None),
        }
    }
}

/// Appends `data` to `buf`; a `buf` without an allocation gets one of
/// exactly `data`'s size.
pub(crate) fn append(buf: &mut BytesMut, data: &[u8]) -> usize {
    if buf.capacity() == 0 {
        *buf = BytesMut::from(data);
    } else {
        buf.extend_from_slice(data);
    }
    data.len()
}
