//! MQTT over a plain byte stream: TCP (`[mqtt] tcp_bind`, 1883) or TLS
//! over it (`[mqtt] tls_bind`, 8883). The same [`MqttSession`] as
//! `/mqtt`, with the same limits, keep-alive, authentication (CONNECT's
//! credentials only: there is no upgrade request) and persistence; only
//! the framing differs: the outbound queue writes raw bytes
//! ([`Outbound::set_raw`]) and the reader hands whatever arrived to the
//! session, which reassembles packets across reads.
//!
//! What an idle connection holds is kept small on purpose (benches/README.md,
//! "What an idle connection holds"): each connection is one task of
//! 512 B ([`spawn`]), holding its loop's future inline, and its writer task
//! exists only while the connection is not quiet ([`Writer`]). A plain TCP
//! connection quiet for `[mqtt] park_after_ms` leaves its task too: it is
//! parked ([`Parked`], `park.rs`) until it reads, is sent something or
//! reaches its deadline.

use std::future::{Future, poll_fn};
use std::net::IpAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use bytes::Bytes;
use futures_core::Stream;
use tokio::io::{AsyncRead, AsyncWrite, ReadHalf, WriteHalf};
use tokio::time::Sleep;

use super::AppState;
use super::park::{Lot, Parkable};
use super::raw::{ByteSource, Handed, Held, write_loop};
use super::wsloop::{BURST_BYTES, outbound};
use crate::metrics::Protocol;
use crate::protocol::codec::Format;
use crate::session::mqtt::MqttSession;
use crate::session::{CloseRequest, Outbound, RateLimiter, close_reason};

/// Longest the writer may take to send what is queued once the
/// connection ends.
const DRAIN_TIMEOUT: Duration = Duration::from_secs(10);
/// Longest a TLS handshake may take.
pub(crate) const TLS_HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// Serves one MQTT connection on `stream` in a task of its own, counted
/// in `handed`: past its `[server] max_connections`, or once the server
/// is stopping, the connection is closed at once. In a task of its own, not in actix-server's
/// connection task, so that the connection's future sits inline in one
/// 512 B allocation (tokio's task cells are 128-aligned: a future of at
/// most 408 B) rather than boxed beside actix-server's task (256 B more
/// per connection); the server's count and its graceful stop are
/// `handed`'s then.
pub(crate) fn spawn<S: Socket>(
    stream: S,
    peer: Option<IpAddr>,
    app: &AppState,
    handed: &Arc<Handed>,
) {
    let Some(held) = handed.enter() else {
        if handed.is_shut() {
            tracing::debug!(?peer, "closing an MQTT connection: the broker is stopping");
        } else {
            tracing::info!(
                ?peer,
                max = handed.max(),
                "closing an MQTT connection: the broker holds its [server] max_connections MQTT connections"
            );
        }
        return;
    };
    if let Some(conn) = serve(stream, peer, app, held) {
        actix_rt::spawn(conn);
    }
}

/// Sets one MQTT connection up, here rather than in the future that runs
/// it (`None` when it is refused at once): a future keeps its arguments
/// for its whole life (the app's state, 120 B, and the session's config).
fn serve<S: Socket>(
    stream: S,
    peer: Option<IpAddr>,
    app: &AppState,
    held: Held,
) -> Option<impl Future<Output = ()> + 'static> {
    // Counted against its address until CONNECT authenticates it; past
    // the address's share the connection is closed at once (MQTT has no
    // answer before CONNECT).
    let unproven = app.auth.admit_unproven(peer, crate::auth::Way::Mqtt).ok()?;
    let cfg = &app.session_config;
    let out = outbound(cfg, Format::Bincode);
    out.disable_notices();
    out.set_raw();
    let session = MqttSession::new(
        app.broker.clone(),
        app.sessions.clone(),
        out.clone(),
        cfg.clone(),
    )
    .with_auth(app.auth.clone(), None, peer)
    .holding(unproven)
    .with_flow(crate::session::mqtt::Flow::of(&app.config.mqtt));
    app.broker.metrics().connections.add(Protocol::MqttTcp, 1);
    let (rd, wr) = tokio::io::split(stream);
    let rate = RateLimiter::new(cfg.rate_per_s, cfg.rate_burst);
    // Reads hold no buffer between them: an idle connection costs none.
    let source = ByteSource::bare(rd);
    // No writer yet: the loop starts one when the CONNACK is queued.
    let conn = Conn {
        session,
        source,
        writer: Writer::Idle(wr),
        _held: held,
    };
    Some(run(conn, rate))
}

/// A stream MQTT is served on: plain TCP, which can be parked, or TLS
/// over it, which cannot (its state is rustls's, not a socket's).
pub(crate) trait Socket: AsyncRead + AsyncWrite + Unpin + 'static {
    /// Whether a quiet connection on it may be parked.
    const PARKS: bool;
    /// The socket, out of tokio's hands: to park it.
    ///
    /// # Errors
    /// It cannot be taken out of tokio's epoll set (it is closed then).
    fn into_std(self) -> std::io::Result<std::net::TcpStream>;
}

impl Socket for tokio::net::TcpStream {
    const PARKS: bool = true;

    fn into_std(self) -> std::io::Result<std::net::TcpStream> {
        tokio::net::TcpStream::into_std(self)
    }
}

impl Socket for tokio_rustls::server::TlsStream<tokio::net::TcpStream> {
    const PARKS: bool = false;

    fn into_std(self) -> std::io::Result<std::net::TcpStream> {
        Err(std::io::ErrorKind::Unsupported.into())
    }
}

/// What a connection's loop woke for.
enum Woke {
    /// Its deadline (keep-alive, credential expiry, or the writer's
    /// linger) came.
    Timer,
    /// Frames were queued while no writer ran.
    Wanted,
    /// A read ended: bytes, the end of the stream, or an error.
    Read(Option<std::io::Result<Bytes>>),
}

/// The connection's writer. The loop starts it when frames are queued or
/// a read comes, asks it to retire at the loop's next timer tick (at most
/// [`WRITER_LINGER`] later), and it retires at its first moment with
/// nothing queued: the task and its state (~256 B) are not held by a
/// quiet connection, and the next frame or read starts a new one.
enum Writer<W> {
    /// Writing, or waiting for frames.
    Running(actix_rt::task::JoinHandle<Option<W>>),
    /// Asked to retire at its next idle moment.
    Retiring(actix_rt::task::JoinHandle<Option<W>>),
    /// Retired: the write half, until frames come.
    Idle(W),
    /// Ended with the connection (its close written, or a write failed).
    Gone,
}

impl<W: AsyncWrite + Unpin + 'static> Writer<W> {
    /// Makes sure a writer runs: starts one if it had retired, takes back
    /// a retirement asked for and not yet done. Before frames go out, and
    /// before a read is handled (its handling may wait, on a held publish
    /// or the rate, and what it or others queue meanwhile must be
    /// written). Whether the loop should look again in [`WRITER_LINGER`]
    /// (a writer was started or kept on).
    fn keep(&mut self, session: &MqttSession) -> bool {
        let (kept, writer) = match std::mem::replace(self, Writer::Gone) {
            Writer::Idle(wr) => (true, Writer::Running(spawn_writer(session, wr))),
            // Not yet retired (`Conn::poll_wait` saw to that, and the
            // writer runs on this thread): it will not now.
            Writer::Retiring(h) => {
                session.outbound().keep_writer();
                (true, Writer::Running(h))
            }
            other => (false, other),
        };
        *self = writer;
        kept
    }

    /// Asks a running writer to retire at its next idle moment; any other
    /// state is left as it is.
    fn ask_to_retire(&mut self, out: &Outbound) {
        *self = match std::mem::replace(self, Writer::Gone) {
            Writer::Running(h) => {
                out.retire_writer();
                Writer::Retiring(h)
            }
            other => other,
        };
    }
}

/// What a connection's loop waits on, together: the wait borrows it
/// once (a closure that borrowed each part would keep a pointer to each
/// in the loop's state, in every idle connection).
struct Conn<S> {
    session: MqttSession,
    source: ByteSource<ReadHalf<S>, ()>,
    writer: Writer<WriteHalf<S>>,
    /// The connection's place in the server's count, given back when the
    /// loop ends.
    _held: Held,
}

impl<S: Socket> Conn<S> {
    /// What comes first: the timer (so that a client that never stops
    /// sending is still held to its credential's expiry), frames for a
    /// retired writer, or a read. A writer that retires starts the park's
    /// clock: the timer is brought forward to `park_after` from then.
    fn poll_wait(&mut self, mut timer: Pin<&mut Sleep>, cx: &mut Context<'_>) -> Poll<Woke> {
        if timer.as_mut().poll(cx).is_ready() {
            return Poll::Ready(Woke::Timer);
        }
        if let Writer::Retiring(h) = &mut self.writer {
            match Pin::new(&mut *h).poll(cx) {
                Poll::Ready(done) => {
                    self.writer = match done {
                        Ok(Some(wr)) => Writer::Idle(wr),
                        _ => Writer::Gone,
                    };
                    if let (Writer::Idle(_), Some(after)) = (&self.writer, self.park_after()) {
                        let at = Instant::now() + after;
                        if at < timer.deadline().into_std() {
                            timer.as_mut().reset(at.into());
                            if timer.as_mut().poll(cx).is_ready() {
                                return Poll::Ready(Woke::Timer);
                            }
                        }
                    }
                }
                // Ended, but tokio's budget holds its result back until the
                // loop is polled again (it is woken for that): nothing is
                // read meanwhile, so that a read is never handled while the
                // writer's state is unknown.
                Poll::Pending if h.is_finished() => return Poll::Pending,
                Poll::Pending => {}
            }
        }
        if matches!(self.writer, Writer::Idle(_))
            && self.session.outbound().poll_wanted(cx).is_ready()
        {
            return Poll::Ready(Woke::Wanted);
        }
        Pin::new(&mut self.source).poll_next(cx).map(Woke::Read)
    }

    /// How long a quiet connection runs before it is parked, if it may
    /// be: plain TCP, and parking not turned off.
    fn park_after(&self) -> Option<Duration> {
        if S::PARKS {
            self._held.park_after()
        } else {
            None
        }
    }
}

/// Longest a writer runs after it starts (or is kept on) before it is
/// asked to retire (it retires when next it finds nothing queued; an
/// earlier keep-alive or expiry tick asks sooner). A busy connection
/// starts one again at its next frame or read: about one task spawned
/// per connection per second.
const WRITER_LINGER: Duration = Duration::from_secs(1);

/// Reads the connection until it ends, then ends the session and the
/// writer (after what is queued, bounded by [`DRAIN_TIMEOUT`]). An
/// `async` block, not an `async fn`: the future of an `async fn` keeps
/// each argument twice (as it was passed and as the local it is moved
/// to), which for the session alone is ~400 B per connection. What the
/// loop holds is every idle connection's (the outbound queue and the
/// metrics are reached through the session, the timer's deadline is the
/// one it keeps, and the wait is a `poll_fn` rather than a `select!`,
/// whose state is bigger): it sits in an allocation of 512 B.
#[allow(clippy::manual_async_fn)] // on purpose: see above
fn run<S: Socket>(mut conn: Conn<S>, mut rate: RateLimiter) -> impl Future<Output = ()> {
    async move {
        // The loop's locals in a block of their own, so that what the
        // close holds afterwards shares their room in the future. Whether
        // the loop ended to park the connection rather than close it.
        let park = {
            // One timer, armed at the earliest of the keep-alive deadline,
            // the credential's expiry and the writer's linger, moved only
            // when that comes earlier (as in the WebSocket read loop):
            // traffic costs no timer work.
            // Boxed (96 B): inline, it would take the loop's future past
            // 408 B, and so its task past 512.
            // A quiet connection is looked at again when it may be parked.
            let first = match conn.park_after() {
                Some(after) => deadline(&conn.session).min(Instant::now() + after),
                None => deadline(&conn.session),
            };
            let mut timer = Box::pin(actix_rt::time::sleep_until(first.into()));
            let mut unyielded: u32 = 0;
            loop {
                if conn.session.outbound().is_closing() {
                    break false;
                }
                {
                    let next = deadline(&conn.session);
                    if next < timer.deadline().into_std() {
                        timer.as_mut().reset(next.into());
                    }
                }
                // The wait only says what came: a read is handled after it,
                // so that nothing of the wait lives on in the loop's state
                // while the read's handling waits.
                let woke = poll_fn(|cx| conn.poll_wait(timer.as_mut(), cx));
                // Matched as it comes, not bound: a binding the chunk is moved
                // out of would stay in the loop's state.
                let chunk = match woke.await {
                    Woke::Read(None | Some(Err(_))) => break false,
                    Woke::Read(Some(Ok(chunk))) => {
                        if conn.writer.keep(&conn.session) {
                            linger(timer.as_mut());
                        }
                        chunk
                    }
                    Woke::Wanted => {
                        if conn.writer.keep(&conn.session) {
                            linger(timer.as_mut());
                        }
                        continue;
                    }
                    Woke::Timer => {
                        let now = Instant::now();
                        if conn.session.expires_at().is_some_and(|at| now >= at) {
                            close(
                                conn.session.outbound(),
                                crate::session::CLOSE_EXPIRED,
                                "credentials expired".into(),
                            );
                            break false;
                        }
                        if now >= conn.session.idle_deadline() {
                            conn.session.idle_closed();
                            close(
                                conn.session.outbound(),
                                1001,
                                close_reason::KEEP_ALIVE.into(),
                            );
                            break false;
                        }
                        // Quiet since its writer retired (which set the
                        // timer for this tick), or since it was resumed.
                        if matches!(conn.writer, Writer::Idle(_))
                            && conn.park_after().is_some()
                            && lot_ready()
                        {
                            break true;
                        }
                        conn.writer.ask_to_retire(conn.session.outbound());
                        timer.as_mut().reset(deadline(&conn.session).into());
                        continue;
                    }
                };
                // Boxed: held inline, the session's future (and the read's
                // locals) would be part of every connection's state, idle or
                // not.
                let handled = Box::pin(on_read(&mut conn.session, &mut rate, chunk));
                let Some(got) = handled.await else {
                    break false;
                };
                // Let the writers this traffic woke run before more is read (as
                // the WebSocket read loop's bursts do).
                unyielded = unyielded.saturating_add(got);
                if unyielded as usize >= BURST_BYTES {
                    unyielded = 0;
                    actix_rt::task::yield_now().await;
                }
            }
        };
        if park {
            park_quiet(conn, rate);
            return;
        }
        let out = conn.session.outbound().clone();
        out.close(CloseRequest {
            code: 1000,
            reason: String::new(),
            drain: true,
        });
        let metrics = conn.session.metrics().clone();
        Box::pin(conn.session.end()).await;
        // Boxed, as the pause above.
        Box::pin(drain(conn.writer, out, metrics)).await;
    }
}

/// A quiet plain-TCP connection out of its task: its session, its rate,
/// its place in the server's count and its socket, out of tokio's epoll
/// set (216 B where its task, its timer and tokio's registration of its
/// socket were ~860 B).
pub(crate) struct Parked {
    session: MqttSession,
    /// The rate limiter's tokens and time ([`RateLimiter::parked`]; its
    /// rate and burst are the session's config): 12 B where the limiter
    /// is 40 (two fields, not a tuple, so that the tokens share the
    /// socket's padding).
    tokens: f32,
    rated_at: crate::session::Stamp,
    held: Held,
    socket: std::net::TcpStream,
}

thread_local! {
    /// This worker's lot of parked connections, started at the first
    /// park on the thread (and again if its runtime stopped since).
    static LOT: std::cell::RefCell<Option<Lot<Parked>>> = const { std::cell::RefCell::new(None) };
    /// Until when this thread starts no lot, after one could not be (out
    /// of file descriptors, say): its quiet connections stay unparked
    /// meanwhile, rather than each try and fail at every tick.
    static NO_LOT_UNTIL: std::cell::Cell<Option<Instant>> = const { std::cell::Cell::new(None) };
}

/// How long a thread that could not start a lot waits to try again.
const NO_LOT_BACKOFF: Duration = Duration::from_secs(60);

/// Whether a quiet connection on this thread can be parked: its lot runs,
/// or one may be started.
fn lot_ready() -> bool {
    LOT.with_borrow(|lot| lot.as_ref().is_some_and(Lot::is_open))
        || NO_LOT_UNTIL
            .get()
            .is_none_or(|until| Instant::now() >= until)
}

/// Parks a quiet connection in its thread's lot (its writer has retired,
/// and nothing is queued). Resumed at once if no lot can take it.
fn park_quiet<S: Socket>(conn: Conn<S>, rate: RateLimiter) {
    let Conn {
        session,
        source,
        writer,
        _held: held,
    } = conn;
    let wr = match writer {
        Writer::Idle(wr) => wr,
        // The loop parks only a connection whose writer is idle; any other
        // goes on running.
        writer => {
            let conn = Conn {
                session,
                source,
                writer,
                _held: held,
            };
            actix_rt::spawn(run(conn, rate));
            return;
        }
    };
    let socket = match source.into_inner().unsplit(wr).into_std() {
        Ok(socket) => socket,
        Err(e) => {
            tracing::info!("an MQTT connection lost its socket as it was parked: {e}");
            return end_socketless(session, held);
        }
    };
    let (tokens, rated_at) = rate.parked();
    let parked = Box::new(Parked {
        session,
        tokens,
        rated_at,
        held,
        socket,
    });
    parked
        .session
        .metrics()
        .parked
        .fetch_add(1, Ordering::Relaxed);
    let refused = LOT.with_borrow_mut(|lot| {
        if !lot.as_ref().is_some_and(Lot::is_open) {
            *lot = Lot::start()
                .inspect_err(|e| {
                    NO_LOT_UNTIL.set(Some(Instant::now() + NO_LOT_BACKOFF));
                    tracing::warn!(
                        "quiet MQTT connections on this thread stay unparked for {NO_LOT_BACKOFF:?}: {e}"
                    );
                })
                .ok();
        }
        match lot {
            Some(lot) => lot.park(parked).err(),
            None => Some(parked),
        }
    });
    if let Some(parked) = refused {
        parked.resume();
    }
}

impl Parkable for Parked {
    fn fd(&self) -> std::os::fd::RawFd {
        use std::os::fd::AsRawFd;
        self.socket.as_raw_fd()
    }

    fn deadline(&self) -> Instant {
        deadline(&self.session)
    }

    fn want(&self, waker: &std::task::Waker) -> bool {
        let mut cx = Context::from_waker(waker);
        self.session.outbound().poll_wanted(&mut cx).is_ready()
    }

    fn abandon(self: Box<Self>) {
        // As the task of a connection not parked is dropped with the
        // runtime: the session is not ended.
        self.session
            .metrics()
            .parked
            .fetch_sub(1, Ordering::Relaxed);
    }

    fn resume(self: Box<Self>) {
        let Parked {
            session,
            tokens,
            rated_at,
            held,
            socket,
        } = *self;
        session.metrics().parked.fetch_sub(1, Ordering::Relaxed);
        let cfg = session.config();
        let rate = RateLimiter::resumed(cfg.rate_per_s, cfg.rate_burst, (tokens, rated_at));
        match tokio::net::TcpStream::from_std(socket) {
            Ok(stream) => run_again(session, rate, held, stream),
            Err(e) => {
                tracing::warn!("a parked MQTT connection could not be resumed: {e}");
                end_socketless(session, held);
            }
        }
    }
}

/// Gives a connection its loop again, in a task of its own.
fn run_again(session: MqttSession, rate: RateLimiter, held: Held, stream: tokio::net::TcpStream) {
    let (rd, wr) = tokio::io::split(stream);
    let conn = Conn {
        session,
        source: ByteSource::bare(rd),
        writer: Writer::Idle(wr),
        _held: held,
    };
    actix_rt::spawn(run(conn, rate));
}

/// Ends the session of a connection whose socket is gone.
fn end_socketless(session: MqttSession, held: Held) {
    session
        .outbound()
        .abort(1011, "the connection's socket was lost");
    actix_rt::spawn(async move {
        Box::pin(session.end()).await;
        drop(held);
    });
}

/// Brings the loop's timer forward to [`WRITER_LINGER`] from now, when
/// the writer it just started or kept on is to be asked to retire.
fn linger(timer: Pin<&mut Sleep>) {
    let at = Instant::now() + WRITER_LINGER;
    if at < timer.deadline().into_std() {
        timer.reset(at.into());
    }
}

/// Starts a writer for the connection's outbound queue on `wr`.
fn spawn_writer<W: AsyncWrite + Unpin + 'static>(
    session: &MqttSession,
    wr: W,
) -> actix_rt::task::JoinHandle<Option<W>> {
    let metrics = session.metrics().clone();
    actix_rt::spawn(write_loop(session.outbound().clone(), wr, metrics))
}

/// Writes what is queued and the close once the connection ends, through
/// the writer if one runs (or retires), a new one if it had retired:
/// within [`DRAIN_TIMEOUT`], since a client that stopped reading must not
/// hold the connection.
async fn drain<W: AsyncWrite + Unpin + 'static>(
    mut writer: Writer<W>,
    out: Arc<Outbound>,
    metrics: Arc<crate::metrics::Metrics>,
) {
    let until = tokio::time::Instant::now() + DRAIN_TIMEOUT;
    loop {
        writer = match writer {
            Writer::Running(h) | Writer::Retiring(h) => {
                let abort = h.abort_handle();
                match tokio::time::timeout_at(until, h).await {
                    Err(_) => {
                        out.abort(1001, "close drain timed out");
                        abort.abort();
                        return;
                    }
                    // Retired before the close was asked for: the close
                    // still needs a writer.
                    Ok(Ok(Some(wr))) => Writer::Idle(wr),
                    Ok(_) => return,
                }
            }
            Writer::Idle(wr) => {
                if tokio::time::timeout_at(until, write_loop(out.clone(), wr, metrics.clone()))
                    .await
                    .is_err()
                {
                    out.abort(1001, "close drain timed out");
                }
                return;
            }
            Writer::Gone => return,
        };
    }
}

/// Hands one read to the session, then slows the connection down past
/// its rate: the bytes read, or `None` when the connection must close
/// (already asked of the session's outbound queue).
async fn on_read(session: &mut MqttSession, rate: &mut RateLimiter, chunk: Bytes) -> Option<u32> {
    crate::tidy::traffic();
    if let Some(c) = session.revoked() {
        close(session.outbound(), c.code, c.reason);
        return None;
    }
    let metrics = session.metrics();
    metrics.frames_in.add(Protocol::MqttTcp, 1);
    metrics.bytes_in.add(Protocol::MqttTcp, chunk.len() as u64);
    let now = Instant::now();
    let got = u32::try_from(chunk.len()).unwrap_or(u32::MAX);
    if let Err(c) = session.data(chunk, now).await {
        close(session.outbound(), c.code, c.reason);
        return None;
    }
    // Past the rate, slowed (not read) rather than closed. Over TCP the
    // rate counts reads (a read holds many packets), and a read of nothing
    // but acknowledgements of deliveries counts for nothing.
    let charged = session.take_charged().min(1);
    let pause = rate.charge(now, charged);
    if !pause.is_zero() {
        session.metrics().rate_limited.add(1);
        actix_rt::time::sleep(pause).await;
    }
    Some(got)
}

/// When the connection must be looked at: its keep-alive deadline or its
/// credential's expiry, whichever is first.
fn deadline(session: &MqttSession) -> Instant {
    let idle = session.idle_deadline();
    session.expires_at().map_or(idle, |at| idle.min(at))
}

fn close(out: &Outbound, code: u16, reason: String) {
    if code != 1000 {
        tracing::info!(code, "closing an MQTT TCP connection: {reason}");
    }
    out.close(CloseRequest {
        code,
        reason,
        drain: true,
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::transport::output_size;

    /// Every idle MQTT/TCP connection holds its loop's future in a task of
    /// its own: at 408 B or less the task is 512 B (tokio's cells are
    /// 128-aligned), one byte more and it is 640.
    #[test]
    fn an_mqtt_tcp_connection_s_loop_fits_a_512_byte_task() {
        let run: fn(_, _) -> _ = run::<tokio::net::TcpStream>;
        let size = output_size(run);
        assert!(size <= 408, "the connection's future is {size} B");
    }

    /// Every parked connection is one `Parked` box: at 217 B or less it
    /// is in mimalloc's 224 B class, beside the long-lived outbound
    /// queues (200 B). Not the 256 B class: that one's pages hold the
    /// writers' tasks and tokio's socket registrations, which a
    /// connection frees as it parks, and a box there kept them from
    /// going back in three runs of eight (~1,700 B a connection at 5,000
    /// against ~1,510; in the 320 B class, 1,556-1,565 in every run,
    /// against 1,457-1,468 here). benches/README.md,
    /// "mimalloc's classes" and "A parked connection in the 224 B class".
    #[test]
    fn a_parked_connection_fits_a_224_byte_allocation() {
        let size = std::mem::size_of::<Parked>();
        assert!(size <= 217, "a parked connection is {size} B");
    }
}
