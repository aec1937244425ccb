//! WebSocket connections on Wharf's own reader and writer, below
//! actix-web: what keeps an idle connection small.
//!
//! A WebSocket served the actix-web way (a streaming request body in, a
//! streaming response body out) keeps actix-http's read and write
//! buffers, 8 KiB each, for as long as the connection lives. With
//! `[server] lean_websockets`, the `wharf` server instead registers an
//! upgrade service with actix-http
//! ([`upgrade_factory`]): an upgrade request still runs through the same
//! actix-web routes (extractors, credentials, origin checks, refusals as
//! JSON), but marked [`RawUpgrade`]; the route's
//! [`super::wsloop::serve`] then answers 101 with a [`Handover`] instead
//! of a body stream, and this module writes the 101 itself, drops
//! actix-http's buffers and runs the shared read loop over a
//! [`ByteSource`] and the outbound queue over [`write_loop`], each in a
//! task of its own, so that actix-http's dispatcher ends at the 101
//! rather than await the connection for its life. Such connections left
//! actix-server's count, so the server counts them ([`Handed`]): against
//! `[server] max_connections`, and for its graceful stop. Neither loop
//! holds a buffer while the connection is idle: reads land in one scratch
//! buffer per worker thread and only the bytes that arrived are kept.
//! Apps that embed Wharf's routes in their own `HttpServer` keep the
//! actix-web way; both run the same read loop.

use std::cell::RefCell;
use std::future::{Future, poll_fn};
use std::pin::Pin;
use std::rc::Rc;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use actix_codec::{AsyncRead, AsyncWrite, Framed, ReadBuf};
use actix_http::body::{BodySize, MessageBody};
use actix_http::h1::{Codec, Message};
use actix_http::{ConnectionType, HttpMessage, Request, Response, StatusCode};
use actix_service::{IntoServiceFactory, Service, ServiceFactory, fn_factory, fn_service};
use actix_web::dev::{AppConfig, ServiceResponse};
use bytes::{Bytes, BytesMut};
use futures_core::Stream;
use futures_util::SinkExt;
use futures_util::future::LocalBoxFuture;
use tokio::io::AsyncWriteExt;

use crate::session::{Outbound, OutboundStream, WRITE_BATCH};

/// The size of each worker thread's scratch buffer, not of any
/// connection's: the most one wake-up reads.
const READ_CHUNK: usize = 64 * 1024;
/// Largest body of a refusal (a non-101 answer to an upgrade request)
/// written on this path; routes answer refusals with a short JSON body.
const MAX_REFUSAL_BODY: usize = 64 * 1024;

thread_local! {
    static SCRATCH: RefCell<Box<[u8]>> = RefCell::new(vec![0; READ_CHUNK].into_boxed_slice());
}

/// A WebSocket connection's writer task, which a [`ByteSource`] watches:
/// the connection is over once it ends.
pub(crate) type Writer = actix_rt::task::JoinHandle<Option<tokio::io::WriteHalf<Box<dyn Io>>>>;

/// A byte stream a connection runs on: TCP, or TLS over it.
pub(crate) trait Io: AsyncRead + AsyncWrite + Unpin {}
impl<T: AsyncRead + AsyncWrite + Unpin> Io for T {}

/// Marks an upgrade request that arrived through [`upgrade_factory`]:
/// the route may hand the connection over ([`Handover`]) rather than
/// stream a response body.
#[derive(Clone, Copy, Debug)]
pub(crate) struct RawUpgrade;

/// What a route that accepted a [`RawUpgrade`] puts in its 101 response's
/// extensions: how to run the connection once the 101 is written, given
/// its byte stream and the bytes that came after the request head.
pub(crate) struct Handover(pub(crate) Run);

/// Runs a handed-over connection: its byte stream and what was read past
/// the request head.
pub(crate) type Run = Box<dyn FnOnce(Box<dyn Io>, BytesMut) -> LocalBoxFuture<'static, ()>>;

/// The connection's reads as a stream of chunks, each exactly as long as
/// what arrived: no buffer is held between reads. Ends when the peer
/// closes, on a read error, or once what is around the socket says the
/// connection is over ([`Around`]: a handed-over WebSocket's writer has
/// finished).
pub(crate) struct ByteSource<R, A = Upgraded> {
    rd: R,
    around: A,
}

/// What a [`ByteSource`] reads besides its socket: nothing for MQTT over
/// TCP (`()`, so that its connections hold no room for it), the first
/// bytes and the writer for a handed-over WebSocket ([`Upgraded`]).
pub(crate) trait Around: Unpin {
    /// Bytes to hand out before the socket is read, once.
    fn take_first(&mut self) -> Option<Box<Bytes>>;
    /// Whether the connection is over though the socket is not.
    fn poll_over(&mut self, cx: &mut Context<'_>) -> bool;
}

impl Around for () {
    fn take_first(&mut self) -> Option<Box<Bytes>> {
        None
    }

    fn poll_over(&mut self, _: &mut Context<'_>) -> bool {
        false
    }
}

/// Around a handed-over WebSocket's socket: what the client sent after
/// its request head, and the connection's writer, whose end ends it.
pub(crate) struct Upgraded {
    /// Bytes read before this source took over (a WebSocket upgrade's
    /// first frames), boxed: most connections have none, and the 24 B
    /// saved are in every idle connection's state.
    first: Option<Box<Bytes>>,
    writer: Option<Writer>,
}

impl Around for Upgraded {
    fn take_first(&mut self) -> Option<Box<Bytes>> {
        self.first.take()
    }

    fn poll_over(&mut self, cx: &mut Context<'_>) -> bool {
        if let Some(writer) = self.writer.as_mut() {
            if Pin::new(writer).poll(cx).is_ready() {
                self.writer = None;
                return true;
            }
        }
        false
    }
}

impl<R: AsyncRead + Unpin> ByteSource<R> {
    /// Reads `rd`, starting with `first` (bytes already read), until the
    /// peer or `writer` ends.
    pub(crate) fn new(rd: R, first: Bytes, writer: Option<Writer>) -> Self {
        ByteSource {
            rd,
            around: Upgraded {
                first: (!first.is_empty()).then(|| Box::new(first)),
                writer,
            },
        }
    }
}

impl<R: AsyncRead + Unpin> ByteSource<R, ()> {
    /// Reads `rd` until the peer ends.
    pub(crate) fn bare(rd: R) -> Self {
        ByteSource { rd, around: () }
    }

    /// The reader back (it holds nothing between reads): to park the
    /// connection.
    pub(crate) fn into_inner(self) -> R {
        self.rd
    }
}

impl<R: AsyncRead + Unpin, A: Around> ByteSource<R, A> {
    /// Reads what has arrived and hands it to `take` as one slice; `None`
    /// once the connection is over. Reads until the socket has nothing
    /// more (or the scratch buffer is full): a client that writes each
    /// message on its own is read in one chunk per wake-up, not one per
    /// message, as actix-http's own reader did.
    fn poll_take<T>(
        &mut self,
        cx: &mut Context<'_>,
        take: impl FnOnce(&[u8]) -> T,
    ) -> Poll<Option<std::io::Result<T>>> {
        if let Some(first) = self.around.take_first() {
            return Poll::Ready(Some(Ok(take(&first))));
        }
        if self.around.poll_over(cx) {
            return Poll::Ready(None);
        }
        SCRATCH.with_borrow_mut(|scratch| {
            let mut filled = 0;
            let mut end = None;
            while filled < scratch.len() {
                let mut buf = ReadBuf::new(&mut scratch[filled..]);
                match Pin::new(&mut self.rd).poll_read(cx, &mut buf) {
                    Poll::Pending => break,
                    Poll::Ready(Ok(())) if buf.filled().is_empty() => {
                        end = Some(None);
                        break;
                    }
                    Poll::Ready(Ok(())) => filled += buf.filled().len(),
                    Poll::Ready(Err(e)) => {
                        end = Some(Some(Err(e)));
                        break;
                    }
                }
            }
            match (filled, end) {
                // What was read first; the end is seen again next time.
                (1.., _) => Poll::Ready(Some(Ok(take(&scratch[..filled])))),
                (0, Some(end)) => Poll::Ready(end),
                (0, None) => Poll::Pending,
            }
        })
    }
}

impl<R: AsyncRead + Unpin, A: Around> Stream for ByteSource<R, A> {
    type Item = std::io::Result<Bytes>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        self.get_mut().poll_take(cx, Bytes::copy_from_slice)
    }
}

impl<R: AsyncRead + Unpin, A: Around> super::source::ByteFeed for ByteSource<R, A> {
    fn poll_append(&mut self, buf: &mut BytesMut, cx: &mut Context<'_>) -> Poll<Option<usize>> {
        match self.poll_take(cx, |data| super::source::append(buf, data)) {
            Poll::Pending => Poll::Pending,
            Poll::Ready(Some(Ok(n))) => Poll::Ready(Some(n)),
            Poll::Ready(Some(Err(_)) | None) => Poll::Ready(None),
        }
    }
}

/// Writes the outbound queue to `wr` until it is finished, then shuts the
/// write side down. One buffer, reused while frames keep coming and let
/// go as soon as nothing is ready: a busy connection allocates nothing
/// per write, an idle one holds no buffer. A writer asked to retire
/// ([`Outbound::retire_writer`]) ends at its next idle moment and gives
/// `wr` back, for the next writer.
pub(crate) async fn write_loop<W: AsyncWrite + Unpin>(
    out: Arc<Outbound>,
    mut wr: W,
    metrics: Arc<crate::metrics::Metrics>,
) -> Option<W> {
    let mut stream = OutboundStream::new(out).counted(metrics);
    let mut buf = BytesMut::new();
    loop {
        let laid = poll_fn(|cx| {
            let polled = stream.poll_fill(&mut buf, WRITE_BATCH, cx);
            if polled.is_pending() && buf.capacity() > 0 {
                buf = BytesMut::new();
            }
            polled
        })
        .await;
        if !laid {
            break;
        }
        // Flushed too: TLS keeps what the socket would not take in its own
        // buffer, and nothing else would push it out until the next frame
        // (over plain TCP a flush does nothing).
        if wr.write_all(&buf).await.is_err() || wr.flush().await.is_err() {
            return None;
        }
        buf.clear();
    }
    if stream.is_retired() {
        return Some(wr);
    }
    let _ = wr.shutdown().await;
    None
}

/// actix-http's upgrade service for one worker: every request with
/// `Connection: upgrade` goes through an instance of the app `make_app`
/// builds, marked [`RawUpgrade`]. A 101 that carries a [`Handover`] is
/// written here and the connection runs on its own reader and writer; any
/// other answer (a refusal, a 404) is written whole and the connection
/// closed, since it cannot go back to actix-http.
pub(crate) fn upgrade_factory<T, F, I, S, B>(
    make_app: F,
    handed: Arc<Handed>,
) -> impl ServiceFactory<
    (Request, Framed<T, Codec>),
    Config = (),
    Response = (),
    Error = actix_web::Error,
    InitError = (),
>
where
    T: AsyncRead + AsyncWrite + Unpin + 'static,
    F: Fn() -> I + 'static,
    I: IntoServiceFactory<S, Request>,
    S: ServiceFactory<
            Request,
            Config = AppConfig,
            Response = ServiceResponse<B>,
            Error = actix_web::Error,
            InitError = (),
        > + 'static,
    S::Service: 'static,
    B: MessageBody + 'static,
{
    let make_app = Rc::new(make_app);
    fn_factory(move || {
        let factory = make_app().into_factory();
        let handed = handed.clone();
        async move {
            // The host and address only matter to URL generation, which
            // no WebSocket route uses.
            let app = Rc::new(factory.new_service(AppConfig::default()).await?);
            let handed = handed.clone();
            Ok::<_, ()>(fn_service(
                move |(req, framed): (Request, Framed<T, Codec>)| {
                    let (app, handed) = (app.clone(), handed.clone());
                    async move {
                        if let Some((run, io, first, held)) =
                            Box::pin(upgrade(&*app, &handed, req, framed)).await
                        {
                            // A task of its own: actix-http's dispatcher,
                            // which would await it (~1.3 KiB for the
                            // connection's life), ends now; `held` counts
                            // the connection until it ends.
                            actix_rt::spawn(async move {
                                run(io, first).await;
                                drop(held);
                            });
                        }
                        Ok::<(), actix_web::Error>(())
                    }
                },
            ))
        }
    })
}

/// A connection handed over, ready to run: how, its byte stream, what was
/// read past the request head, and its place in the server's count.
type Accepted = (Run, Box<dyn Io>, BytesMut, Held);

/// The connections one server runs in tasks of its own and that still
/// run: WebSockets handed over (they left actix-server's count when
/// their dispatcher ended at the 101), and MQTT connections (never in
/// it: `mqtt_tcp::spawn`). The server counts them here: against `[server]
/// max_connections` (past it an upgrade is refused with 503 `overloaded`,
/// an MQTT connection closed at once), and for the graceful stop, which
/// waits for them ([`Handed::drained`]).
pub(crate) struct Handed {
    live: AtomicUsize,
    max: usize,
    idle: tokio::sync::Notify,
    /// Set by the graceful stop ([`Handed::shut`]): no more enter.
    shut: std::sync::atomic::AtomicBool,
    /// How long a quiet connection runs before it is parked, if its kind
    /// parks (MQTT over plain TCP, `[mqtt] park_after_ms`).
    park_after: Option<Duration>,
}

/// One handed-over connection's place in [`Handed`], given back on drop.
pub(crate) struct Held(Arc<Handed>);

impl Held {
    /// How long the connection may be quiet before it is parked, if at
    /// all ([`Handed::park_after`]).
    pub(crate) fn park_after(&self) -> Option<Duration> {
        self.0.park_after
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        if self.0.live.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.0.idle.notify_waiters();
        }
    }
}

impl Handed {
    /// A count of none, of at most `max`.
    pub(crate) fn new(max: usize) -> Arc<Self> {
        Handed::parking(max, None)
    }

    /// A count of none, of at most `max`, whose quiet connections are
    /// parked after `park_after` (never if `None`).
    pub(crate) fn parking(max: usize, park_after: Option<Duration>) -> Arc<Self> {
        Arc::new(Handed {
            live: AtomicUsize::new(0),
            max,
            idle: tokio::sync::Notify::new(),
            shut: std::sync::atomic::AtomicBool::new(false),
            park_after,
        })
    }

    /// A place for one more connection, if there is room and the server
    /// is not stopping.
    pub(crate) fn enter(self: &Arc<Self>) -> Option<Held> {
        if self.is_shut() {
            return None;
        }
        self.live
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < self.max).then_some(n + 1)
            })
            .ok()
            .map(|_| Held(self.clone()))
    }

    /// The most connections it counts.
    pub(crate) fn max(&self) -> usize {
        self.max
    }

    /// Lets no more connections in: the graceful stop, for connections
    /// that were accepted before the listener paused but are set up after
    /// (an MQTT TLS handshake that was under way).
    pub(crate) fn shut(&self) {
        self.shut.store(true, Ordering::Release);
    }

    /// Whether [`Handed::shut`] was called.
    pub(crate) fn is_shut(&self) -> bool {
        self.shut.load(Ordering::Acquire)
    }

    /// Connections handed over and still running.
    pub(crate) fn live(&self) -> usize {
        self.live.load(Ordering::Acquire)
    }

    /// Waits until every handed-over connection has ended, at most
    /// `within`; whether they all did.
    pub(crate) async fn drained(&self, within: Duration) -> bool {
        let deadline = actix_rt::time::Instant::now() + within;
        loop {
            let notified = self.idle.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if self.live() == 0 {
                return true;
            }
            if tokio::time::timeout_at(deadline, notified).await.is_err() {
                return self.live() == 0;
            }
        }
    }
}

/// Runs one upgrade request through `app` and writes what it answers; a
/// handover comes back to be run. Boxed by its caller: its state (the
/// request, actix-http's framing, the app's future) is needed only until
/// the 101 is written, not for the connection's life.
async fn upgrade<T, A, B>(
    app: &A,
    handed: &Arc<Handed>,
    req: Request,
    mut framed: Framed<T, Codec>,
) -> Option<Accepted>
where
    T: AsyncRead + AsyncWrite + Unpin + 'static,
    A: Service<Request, Response = ServiceResponse<B>, Error = actix_web::Error>,
    B: MessageBody + 'static,
{
    req.extensions_mut().insert(RawUpgrade);
    let mut res: Response<B> = match app.call(req).await {
        Ok(res) => res.into_parts().1.into(),
        Err(e) => {
            let res = e.error_response();
            let res: Response<actix_web::body::BoxBody> = res.into();
            write_whole(framed, res).await;
            return None;
        }
    };
    let handover = res.extensions_mut().remove::<Handover>();
    match handover {
        Some(Handover(run)) if res.status() == StatusCode::SWITCHING_PROTOCOLS => {
            let Some(held) = handed.enter() else {
                let refusal = crate::transport::ApiError::coded(
                    crate::protocol::frame::ErrorCode::Overloaded,
                    format!(
                        "the broker holds its [server] max_connections WebSocket connections ({})",
                        handed.max
                    ),
                );
                let res: Response<actix_web::body::BoxBody> =
                    actix_web::ResponseError::error_response(&refusal).into();
                write_whole(framed, res).await;
                return None;
            };
            let (head, _) = res.into_parts();
            if framed
                .send(Message::Item((head, BodySize::None)))
                .await
                .is_err()
            {
                return None;
            }
            // What the client sent after its request head (its first
            // frames, if it did not wait for the 101) is read first;
            // actix-http's write buffer and codec go now, not when the
            // connection ends.
            let parts = framed.into_parts();
            Some((run, Box::new(parts.io), parts.read_buf, held))
        }
        _ => {
            if res.status() == StatusCode::SWITCHING_PROTOCOLS {
                // Only Wharf's routes are mounted on this server, and they
                // hand over every upgrade they accept.
                tracing::warn!("an upgrade was accepted without a handover; closing it");
                return None;
            }
            write_whole(framed, res).await;
            None
        }
    }
}

/// Writes `res` with its body (bounded) and closes the connection.
async fn write_whole<T, B>(mut framed: Framed<T, Codec>, res: Response<B>)
where
    T: AsyncRead + AsyncWrite + Unpin,
    B: MessageBody,
{
    let (mut head, body) = res.into_parts();
    let body = match actix_web::body::to_bytes_limited(body, MAX_REFUSAL_BODY).await {
        Ok(Ok(body)) => body,
        _ => Bytes::new(),
    };
    head.head_mut().set_connection_type(ConnectionType::Close);
    let size = BodySize::Sized(body.len() as u64);
    let _ = async {
        framed.send(Message::Item((head, size))).await?;
        if !body.is_empty() {
            framed.send(Message::Chunk(Some(body))).await?;
        }
        framed.send(Message::Chunk(None)).await?;
        framed.close().await
    }
    .await;
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::transport::output_size;

    /// Every busy connection (and every WebSocket) holds a writer task:
    /// at 152 B or less its future makes a 256 B task (tokio's cells are
    /// 128-aligned), one byte more and it is 384.
    #[test]
    fn a_writer_fits_a_256_byte_task() {
        type Tcp = tokio::io::WriteHalf<tokio::net::TcpStream>;
        type Upgraded = tokio::io::WriteHalf<Box<dyn Io>>;
        let tcp: fn(_, _, _) -> _ = write_loop::<Tcp>;
        let upgraded: fn(_, _, _) -> _ = write_loop::<Upgraded>;
        for size in [output_size(tcp), output_size(upgraded)] {
            assert!(size <= 152, "a writer's future is {size} B");
        }
    }
}
