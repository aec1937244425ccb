//! The WebSocket read side shared by every endpoint: decodes frames with
//! [`FrameCodec`] (actix-http's codec, the common data frame read in front
//! of it; bounded by `max_frame`), answers pings, assembles
//! fragmented messages, keeps the connection alive with pings and closes
//! it when it falls silent, and hands each complete message to the
//! endpoint's [`Handler`].

use std::future::{Future, poll_fn};
use std::sync::Arc;
use std::task::Poll;
use std::time::{Duration, Instant};

use actix_codec::Decoder;
use actix_http::ws::{Frame, Item, ProtocolError};
use actix_web::body::BodyStream;
use actix_web::{HttpMessage, HttpRequest, HttpResponse, web};
use bytes::{Bytes, BytesMut};
use futures_util::future::LocalBoxFuture;

use super::raw::{self, ByteSource, Handover, RawUpgrade};
use super::source::ByteFeed;
use crate::wsframe::FrameCodec;

use crate::config::SessionConfig;
use crate::protocol::codec::Format;
use crate::protocol::frame::Priority;
use crate::session::{CLOSE_EXPIRED, CloseRequest, OutFrame, Outbound, OutboundStream};

/// How long a read buffer is kept after a burst of traffic, for the next.
const BUFFER_LINGER: Duration = Duration::from_secs(1);
/// Longest a draining close waits for the client to read what is queued.
const DRAIN_TIMEOUT: Duration = Duration::from_secs(10);

/// Most a burst of traffic reads before a read loop yields to the
/// thread's other tasks (see `Reader::burst`).
pub(crate) const BURST_BYTES: usize = 64 * 1024;

/// How a burst of traffic ended.
enum Burst {
    /// The connection is over.
    Stop,
    /// Nothing more was ready.
    Drained,
    /// [`BURST_BYTES`] were read and more may be ready: yield first.
    More,
}

/// Whether the read loop goes on.
pub(crate) enum Flow {
    Go,
    Stop,
}

/// A WebSocket data message's kind: what the frame's opcode says, before
/// any endpoint decides what the bytes mean (JSON or bincode for the
/// native protocol; only binary is MQTT).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum MessageKind {
    /// A text message (UTF-8).
    Text,
    /// A binary message.
    Binary,
}

/// What an endpoint does with a connection's messages.
pub(crate) trait Handler {
    /// The connection's outbound queue.
    fn outbound(&self) -> &Arc<Outbound>;
    /// A complete data message, read at `now`.
    async fn message(&mut self, kind: MessageKind, bytes: Bytes, now: Instant) -> Flow;
    /// How long the connection may stay silent.
    fn idle_timeout(&self) -> Duration;
    /// When the connection counts as silent, given when its last bytes
    /// arrived (an endpoint may count only its own messages): the read
    /// loop closes it (1001) at that instant, whatever the ping interval.
    fn idle_deadline(&self, last_heard: Instant) -> Instant {
        last_heard + self.idle_timeout()
    }
    /// When the connection's credential expires (a JWT's `exp`): the read
    /// loop closes it then ([`CLOSE_EXPIRED`]), after
    /// [`Handler::expired`]. Asked again after each message, so a
    /// refresh moves it.
    fn expires_at(&self) -> Option<Instant> {
        None
    }
    /// The credential expired (or none came in time): tell the client, if
    /// the protocol can, and say how to close.
    fn expired(&mut self) -> (u16, &'static str) {
        (CLOSE_EXPIRED, "credentials expired")
    }
    /// Whether the connection's credential was withdrawn (a key reload):
    /// how to close it, after telling the client. Asked after each read.
    fn revoked(&mut self) -> Option<(u16, &'static str)> {
        None
    }
    /// Bytes arrived (counted per protocol).
    fn received(&self, _bytes: usize) {}
    /// The read loop is closing the connection for silence.
    fn idle_closed(&mut self) {}
    /// Polled with the socket: `Ready` when the app handed the
    /// connection something ([`crate::sockets::Sockets::tell`]), which
    /// [`Handler::event`] then takes. Never, by default.
    fn poll_event(&mut self, _cx: &mut std::task::Context<'_>) -> std::task::Poll<()> {
        std::task::Poll::Pending
    }
    /// Handles what [`Handler::poll_event`] found.
    async fn event(&mut self) -> Flow {
        Flow::Go
    }
    /// The read side ended (the client left, closed, or broke a rule).
    async fn end(self);
}

struct Reader<H> {
    handler: Box<H>,
    /// When the chunk being decoded arrived (one clock read per read, not
    /// per frame).
    now: Instant,
    max_frame: usize,
    /// A fragmented message being assembled: its encoding and bytes.
    partial: Option<(MessageKind, BytesMut)>,
}

impl<H: Handler> Reader<H> {
    /// The next instant the loop must look at the connection: its idle
    /// deadline or its credential's expiry, whichever is first.
    fn deadline(&self, last_heard: Instant) -> Instant {
        let idle = self.handler.idle_deadline(last_heard);
        self.handler.expires_at().map_or(idle, |at| idle.min(at))
    }

    fn close(&self, code: u16, reason: impl Into<String>, drain: bool) {
        self.handler.outbound().close(CloseRequest {
            code,
            reason: reason.into(),
            drain,
        });
    }

    /// Handles what is in `buf`, then whatever else has already arrived,
    /// until the source has nothing ready (or the connection ends or is
    /// closing): a burst of traffic. The read loop boxes this future once
    /// per burst: held inline, the handler's largest future (several KiB
    /// for a native or MQTT session) would be part of every connection's
    /// read loop for as long as it lives, idle or not; boxed, it exists
    /// only while bytes flow, and a busy connection allocates it once per
    /// burst, not per read. A burst ends when the source has nothing
    /// ready, or once it has read [`BURST_BYTES`]: then the read loop
    /// yields, so that the tasks this traffic woke (the subscribers'
    /// writers on this thread) write before more is read. Without that
    /// bound a fast publisher was read until the runtime's cooperative
    /// budget ran out (megabytes), and what it published piled up in the
    /// subscribers' outbound queues faster than they were written.
    async fn burst<S: ByteFeed>(
        &mut self,
        buf: &mut BytesMut,
        codec: &mut FrameCodec,
        source: &mut S,
        last_heard: &mut Instant,
    ) -> Burst {
        let mut read = 0;
        loop {
            if let Flow::Stop = self.frames(buf, codec).await {
                return Burst::Stop;
            }
            if !S::BURSTS || self.handler.outbound().is_closing() {
                return Burst::Drained;
            }
            if read >= BURST_BYTES {
                return Burst::More;
            }
            match poll_fn(|cx| Poll::Ready(source.poll_append(buf, cx))).await {
                Poll::Ready(Some(n)) => {
                    read += n;
                    self.handler.received(n);
                    *last_heard = Instant::now();
                    self.now = *last_heard;
                }
                Poll::Ready(None) => return Burst::Stop,
                Poll::Pending => return Burst::Drained,
            }
        }
    }

    /// Decodes and handles every whole frame in `buf`.
    async fn frames(&mut self, buf: &mut BytesMut, codec: &mut FrameCodec) -> Flow {
        loop {
            // actix-http's codec checks max_size only once a frame is
            // whole, buffering it all first: refuse on the header.
            if announced_len(buf).is_some_and(|len| len > self.max_frame as u64) {
                self.close(1009, "frame larger than max_frame", false);
                return Flow::Stop;
            }
            match codec.decode(buf) {
                Ok(Some(frame)) => {
                    if let Flow::Stop = self.frame(frame).await {
                        return Flow::Stop;
                    }
                }
                Ok(None) => return Flow::Go,
                Err(ProtocolError::Overflow) => {
                    self.close(1009, "frame larger than max_frame", false);
                    return Flow::Stop;
                }
                Err(e) => {
                    self.close(1002, format!("protocol error: {e}"), false);
                    return Flow::Stop;
                }
            }
        }
    }

    async fn frame(&mut self, frame: Frame) -> Flow {
        if self.partial.is_some() && matches!(frame, Frame::Text(_) | Frame::Binary(_)) {
            self.close(
                1002,
                "protocol error: a new message inside a fragmented one",
                false,
            );
            return Flow::Stop;
        }
        match frame {
            Frame::Text(b) => self.handler.message(MessageKind::Text, b, self.now).await,
            Frame::Binary(b) => self.handler.message(MessageKind::Binary, b, self.now).await,
            Frame::Continuation(item) => self.continuation(item).await,
            Frame::Ping(b) => {
                let _ = self
                    .handler
                    .outbound()
                    .push(Priority::High, OutFrame::pong(b));
                Flow::Go
            }
            Frame::Pong(_) => Flow::Go,
            Frame::Close(reason) => {
                // Echo the client's code (RFC 6455 §5.5.1) when it may be
                // sent on the wire; answer a code that may not with 1002.
                let code = match reason.map(|r| u16::from(r.code)) {
                    None => 1000,
                    Some(c @ (1000..=1003 | 1007..=1011 | 3000..=4999)) => c,
                    Some(_) => 1002,
                };
                self.close(code, "", false);
                Flow::Stop
            }
        }
    }

    async fn continuation(&mut self, item: Item) -> Flow {
        let (start, bytes, last) = match item {
            Item::FirstText(b) => (Some(MessageKind::Text), b, false),
            Item::FirstBinary(b) => (Some(MessageKind::Binary), b, false),
            Item::Continue(b) => (None, b, false),
            Item::Last(b) => (None, b, true),
        };
        match (start, self.partial.as_mut()) {
            (Some(kind), None) => {
                self.partial = Some((kind, BytesMut::from(&bytes[..])));
            }
            (None, Some((_, acc))) => {
                if acc.len() + bytes.len() > self.max_frame {
                    self.close(1009, "fragmented message larger than max_frame", false);
                    return Flow::Stop;
                }
                acc.extend_from_slice(&bytes);
            }
            _ => {
                self.close(1002, "protocol error: unexpected continuation frame", false);
                return Flow::Stop;
            }
        }
        if last {
            if let Some((kind, acc)) = self.partial.take() {
                return self.handler.message(kind, acc.freeze(), self.now).await;
            }
        }
        Flow::Go
    }
}

/// The payload length a WebSocket frame header at the start of `buf`
/// announces, once enough of the header has arrived (RFC 6455 §5.2: a
/// 7-bit length, or 126 then 16 bits, or 127 then 64 bits).
fn announced_len(buf: &[u8]) -> Option<u64> {
    let len7 = buf.get(1)? & 0x7f;
    match len7 {
        126 => Some(u64::from(u16::from_be_bytes([*buf.get(2)?, *buf.get(3)?]))),
        127 => {
            let bytes: [u8; 8] = buf.get(2..10)?.try_into().ok()?;
            Some(u64::from_be_bytes(bytes))
        }
        n => Some(u64::from(n)),
    }
}

/// A connection's outbound queue, bounded and policed per `[session]`.
pub(crate) fn outbound(cfg: &SessionConfig, format: Format) -> Arc<Outbound> {
    Outbound::new(
        cfg.outbound_limit,
        cfg.slow_consumer,
        cfg.write_quantum,
        format,
    )
}

/// Completes an accepted upgrade. Through the `wharf` server's upgrade
/// hook ([`RawUpgrade`]) the connection is handed over to run on its own
/// reader and writer ([`super::raw`]); otherwise (Wharf's routes in an
/// app's own `HttpServer`) the read side runs `handler` on this worker
/// and the response body writes its outbound queue. Both run
/// [`read_loop`].
pub(crate) fn serve<H: Handler + 'static>(
    req: &HttpRequest,
    mut builder: actix_http::ResponseBuilder,
    payload: web::Payload,
    handler: H,
    cfg: &SessionConfig,
    metrics: Arc<crate::metrics::Metrics>,
) -> Result<HttpResponse, actix_web::Error> {
    let out = handler.outbound().clone();
    let ping = Duration::from_secs(cfg.ping_interval_s);
    let max_frame = cfg.max_frame;
    // Boxed before the closure and the future below capture it: a future
    // keeps what it captured for its whole life, so a handler captured by
    // value would sit in every connection's task twice (~650 B).
    let handler = Box::new(handler);
    if req.extensions().contains::<RawUpgrade>() {
        let run = move |io: Box<dyn raw::Io>, first: BytesMut| -> LocalBoxFuture<'static, ()> {
            Box::pin(async move {
                let (rd, wr) = tokio::io::split(io);
                let writer = actix_rt::spawn(raw::write_loop(out, wr, metrics));
                let source = ByteSource::new(rd, first.freeze(), Some(writer));
                read_loop(source, handler, max_frame, ping).await;
            })
        };
        let mut res = HttpResponse::from(builder.finish()).map_into_boxed_body();
        res.extensions_mut().insert(Handover(Box::new(run)));
        return Ok(res);
    }
    actix_web::rt::spawn(read_loop(payload, handler, max_frame, ping));
    let writer = OutboundStream::new(out).counted(metrics);
    let response = builder.message_body(BodyStream::new(writer))?;
    Ok(HttpResponse::from(response).map_into_boxed_body())
}

/// Reads the connection until it ends, then ends the handler and the
/// writer (after what is queued, bounded by a drain timeout). `source`
/// gives the bytes as they arrive, in chunks of any size. The handler
/// comes boxed: a future keeps its arguments for its whole life, so a
/// handler passed by value would sit in every connection's read loop
/// twice (as the argument and as the reader's field). For the same reason
/// this is an `async` block, not an `async fn`, whose future keeps every
/// argument twice (as passed and as the local it is moved to).
#[allow(clippy::manual_async_fn)] // on purpose: see above
pub(crate) fn read_loop<H: Handler, S: ByteFeed>(
    mut source: S,
    handler: Box<H>,
    max_frame: usize,
    ping_interval: Duration,
) -> impl Future<Output = ()> {
    async move {
        let mut codec = FrameCodec::server(max_frame);
        let mut buf = BytesMut::new();
        let mut last_heard = Instant::now();
        // One timer for the connection's three deadlines, armed at the
        // earliest (a timer each cost ~220 B per idle connection):
        // - the next ping, first due one interval from now (not at once: a
        //   first tick waits for the timer's next millisecond, which held
        //   every new connection's first frame ~1 ms);
        // - the idle deadline: when it comes it is looked up again (bytes may
        //   have come since), so a busy connection costs no timer work per
        //   read;
        // - letting the read buffer go: it outlives a burst (a busy
        //   connection reuses it rather than allocate per read), but not
        //   idleness.
        let mut ping_at = last_heard + ping_interval;
        let mut idle_at = last_heard + Duration::from_secs(365 * 24 * 3600);
        let mut linger_at: Option<Instant> = None;
        // Armed at the earliest deadline: its own deadline is the one
        // armed (no copy of it beside it in every connection's state).
        let mut timer = std::pin::pin!(actix_rt::time::sleep_until(ping_at.min(idle_at).into()));
        // Which of a read and a handler's event is looked at first,
        // alternately: neither starves the other (as `select!`'s random
        // order, whose state is bigger).
        let mut read_first = true;
        let mut reader = Reader {
            now: last_heard,
            handler,
            max_frame,
            partial: None,
        };
        'conn: loop {
            if !buf.is_empty() {
                let burst = reader.burst(&mut buf, &mut codec, &mut source, &mut last_heard);
                match Box::pin(burst).await {
                    Burst::Stop => break 'conn,
                    Burst::Drained => {}
                    Burst::More => actix_rt::task::yield_now().await,
                }
                if linger_at.is_none() {
                    linger_at = Some(Instant::now() + BUFFER_LINGER);
                }
            }
            if reader.handler.outbound().is_closing() {
                break;
            }
            // The deadline moves earlier when a handler's timeout shrinks (an
            // MQTT CONNECT's keep-alive): re-arm then, never on mere traffic.
            {
                let due = reader.deadline(last_heard);
                if due < idle_at {
                    idle_at = due;
                }
                let next = earliest(ping_at, idle_at, linger_at);
                if next < timer.deadline().into_std() {
                    timer.as_mut().reset(next.into());
                }
            }
            read_first = !read_first;
            // The timer first, so that a client that never stops sending
            // is still held to its deadlines.
            let woke = poll_fn(|cx| {
                if timer.as_mut().poll(cx).is_ready() {
                    return Poll::Ready(Woke::Timer);
                }
                if !read_first && reader.handler.poll_event(cx).is_ready() {
                    return Poll::Ready(Woke::Event);
                }
                if let Poll::Ready(read) = source.poll_append(&mut buf, cx) {
                    return Poll::Ready(Woke::Read(read));
                }
                if read_first && reader.handler.poll_event(cx).is_ready() {
                    return Poll::Ready(Woke::Event);
                }
                Poll::Pending
            });
            // Matched as it comes, not bound: nothing of the wait stays in
            // the loop's state while what woke it is handled.
            match woke.await {
                Woke::Read(read) => match read {
                    Some(n) => {
                        crate::tidy::traffic();
                        reader.handler.received(n);
                        last_heard = Instant::now();
                        reader.now = last_heard;
                        if let Some((code, reason)) = reader.handler.revoked() {
                            reader.close(code, reason, true);
                            break 'conn;
                        }
                    }
                    None => break 'conn,
                },
                Woke::Event => {
                    // Boxed for the reason given in Reader::burst.
                    if let Flow::Stop = Box::pin(reader.handler.event()).await {
                        break 'conn;
                    }
                }
                Woke::Timer => {
                    // Whatever was due by the deadline the timer fired at is
                    // due (the wall clock may lag a paused test clock).
                    let now = Instant::now().max(timer.deadline().into_std());
                    if linger_at.is_some_and(|at| now >= at) {
                        linger_at = None;
                        if buf.is_empty() {
                            // Decoded frames keep what they need of the last
                            // chunk; an idle connection holds no buffer.
                            buf = BytesMut::new();
                        }
                    }
                    if now >= ping_at {
                        let _ = reader
                            .handler
                            .outbound()
                            .push(Priority::High, OutFrame::ping());
                        ping_at += ping_interval;
                        if ping_at <= now {
                            // Late (a stalled worker): one ping, not the
                            // missed ones in a row.
                            ping_at = now + ping_interval;
                        }
                    }
                    if now >= idle_at {
                        if reader.handler.expires_at().is_some_and(|at| now >= at) {
                            let (code, reason) = reader.handler.expired();
                            reader.close(code, reason, true);
                            break 'conn;
                        }
                        if now >= reader.handler.idle_deadline(last_heard) {
                            reader.handler.idle_closed();
                            reader.close(1001, crate::session::close_reason::IDLE, false);
                            break 'conn;
                        }
                        idle_at = reader.deadline(last_heard);
                    }
                    timer
                        .as_mut()
                        .reset(earliest(ping_at, idle_at, linger_at).into());
                }
            }
        }
        let out = reader.handler.outbound().clone();
        // The client is gone or done: end the writer too (after what is queued),
        // so the connection does not linger until the shutdown timeout.
        out.close(CloseRequest {
            code: 1000,
            reason: String::new(),
            drain: true,
        });
        Box::pin((*reader.handler).end()).await;
        // A draining close may wait on a client that does not read: bound it.
        // The timer ends with the drain: held for its whole timeout, it kept
        // every closed connection's outbound queue for 10 s.
        if !out.is_finished() {
            actix_rt::spawn(async move {
                let finished = poll_fn(|cx| out.poll_finished(cx));
                if actix_rt::time::timeout(DRAIN_TIMEOUT, finished)
                    .await
                    .is_err()
                {
                    out.abort(1001, "close drain timed out");
                }
            });
        }
    }
}

/// What woke a connection's read loop.
enum Woke {
    /// Bytes were appended to the buffer (how many), or the stream ended.
    Read(Option<usize>),
    /// The handler has an event ([`Handler::poll_event`]).
    Event,
    /// The timer's deadline came.
    Timer,
}

/// The earliest of a connection's deadlines.
fn earliest(ping_at: Instant, idle_at: Instant, linger_at: Option<Instant>) -> Instant {
    let first = ping_at.min(idle_at);
    linger_at.map_or(first, |at| first.min(at))
}

#[cfg(test)]
mod tests {
    use std::cell::Cell;
    use std::rc::Rc;

    use super::*;

    /// Takes the first message, notes the (paused) clock, and stops.
    struct FirstMessage {
        out: Arc<Outbound>,
        at: Rc<Cell<Option<actix_rt::time::Instant>>>,
    }

    impl Handler for FirstMessage {
        fn outbound(&self) -> &Arc<Outbound> {
            &self.out
        }
        async fn message(&mut self, _: MessageKind, _: Bytes, _: Instant) -> Flow {
            self.at.set(Some(actix_rt::time::Instant::now()));
            Flow::Stop
        }
        fn idle_timeout(&self) -> Duration {
            Duration::from_secs(60)
        }
        async fn end(self) {}
    }

    use crate::transport::source::append;
    use std::task::Context;

    /// Bytes that have arrived already, then nothing.
    struct Arrived(Option<Vec<u8>>);

    impl ByteFeed for Arrived {
        fn poll_append(&mut self, buf: &mut BytesMut, _: &mut Context<'_>) -> Poll<Option<usize>> {
            match self.0.take() {
                Some(data) => Poll::Ready(Some(append(buf, &data))),
                None => Poll::Pending,
            }
        }
    }

    /// A new connection's first frame is handled without waiting for a
    /// timer: on a paused clock (advanced half a millisecond, off the
    /// timer's grid) the handler sees the instant the loop started. The
    /// ping interval's first tick, awaited before the loop, held every
    /// connection's first frame until the next millisecond.
    #[test]
    fn a_first_frame_waits_for_no_timer() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .start_paused(true)
            .build()
            .expect("a runtime");
        let at = Rc::new(Cell::new(None));
        let local = tokio::task::LocalSet::new();
        let started = local.block_on(&rt, {
            let at = at.clone();
            async move {
                tokio::time::advance(Duration::from_micros(500)).await;
                let started = actix_rt::time::Instant::now();
                let cfg = SessionConfig::default();
                let handler = FirstMessage {
                    out: outbound(&cfg, Format::Json),
                    at,
                };
                // A masked text frame, as a client sends it.
                let mut frame = vec![0x81, 0x80 | 2, 0, 0, 0, 0];
                frame.extend_from_slice(b"{}");
                let source = Arrived(Some(frame));
                read_loop(source, Box::new(handler), 1 << 20, Duration::from_secs(30)).await;
                started
            }
        });
        assert_eq!(at.get(), Some(started), "the frame waited for the clock");
    }

    /// One timer serves the pings and the idle deadline: on a paused
    /// clock, a silent connection gets a ping every interval (25 s) and is
    /// closed at its idle deadline (60 s), not before and not later.
    #[test]
    fn one_timer_pings_every_interval_and_closes_at_the_idle_deadline() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .start_paused(true)
            .build()
            .expect("a runtime");
        let local = tokio::task::LocalSet::new();
        let cfg = SessionConfig::default();
        let out = outbound(&cfg, Format::Json);
        let (started, ended) = local.block_on(&rt, {
            let out = out.clone();
            async move {
                let started = actix_rt::time::Instant::now();
                let handler = FirstMessage {
                    out,
                    at: Rc::new(Cell::new(None)),
                };
                read_loop(
                    Arrived(None),
                    Box::new(handler),
                    1 << 20,
                    Duration::from_secs(25),
                )
                .await;
                (started, actix_rt::time::Instant::now())
            }
        });
        let lasted = ended - started;
        assert!(
            lasted >= Duration::from_secs(60) && lasted < Duration::from_secs(61),
            "closed after {lasted:?}, not at the 60 s idle deadline"
        );
        assert!(out.is_closing(), "the silent connection is closed");
        assert_eq!(out.take_queued().len(), 2, "a ping at 25 s and one at 50 s");
    }

    #[test]
    fn announced_lengths() {
        assert_eq!(announced_len(&[]), None);
        assert_eq!(announced_len(&[0x82]), None);
        assert_eq!(announced_len(&[0x82, 0x80 | 5]), Some(5));
        assert_eq!(announced_len(&[0x82, 0x80 | 126, 1]), None);
        assert_eq!(announced_len(&[0x82, 0x80 | 126, 1, 0]), Some(256));
        let mut h = vec![0x82, 0x80 | 127];
        h.extend_from_slice(&(1u64 << 40).to_be_bytes()[..7]);
        assert_eq!(announced_len(&h), None, "one length byte missing");
        h.push(0);
        assert_eq!(announced_len(&h), Some(1 << 40));
    }
}
