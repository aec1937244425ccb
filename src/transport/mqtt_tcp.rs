//! MQTT over a plain byte stream: TCP (`[mqtt] tcp_bind`, 1883) or TLS
//! over it (`[mqtt] tls_bind`, 8883). The same [`MqttSession`] as
//! `/mqtt`, with the same limits, keep-alive, authentication (CONNECT's
//! credentials only: there is no upgrade request) and persistence; only
//! the framing differs: the outbound queue writes raw bytes
//! ([`Outbound::set_raw`]) and the reader hands whatever arrived to the
//! session, which reassembles packets across reads.

use std::future::{Future, poll_fn};
use std::net::IpAddr;
use std::pin::Pin;
use std::task::Poll;
use std::time::{Duration, Instant};

use bytes::Bytes;
use futures_core::Stream;
use futures_util::future::LocalBoxFuture;
use tokio::io::{AsyncRead, AsyncWrite};

use super::AppState;
use super::raw::{ByteSource, write_loop};
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

/// Serves one MQTT connection on `stream`: sets it up here, and returns
/// the future that runs it until it ends (`None` when the connection is
/// refused at once). Set up outside the future, and boxed: a future keeps
/// its arguments for its whole life (the app's state, 120 B, and the
/// session's config), and a future returned unboxed to actix-server would
/// sit in the connection's task twice (its service wrapper keeps the
/// future it was given beside the one it awaits): together ~1.8 KiB of
/// every idle connection.
pub(crate) fn serve<S>(
    stream: S,
    peer: Option<IpAddr>,
    app: &AppState,
) -> Option<LocalBoxFuture<'static, ()>>
where
    S: AsyncRead + AsyncWrite + Unpin + 'static,
{
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
    let metrics = app.broker.metrics().clone();
    metrics.connections.add(Protocol::MqttTcp, 1);
    let (rd, wr) = tokio::io::split(stream);
    let writer = actix_rt::spawn(write_loop(out, wr, metrics));
    let rate = RateLimiter::new(cfg.rate_per_s, cfg.rate_burst);
    // Reads hold no buffer between them: an idle connection costs none.
    let source = ByteSource::new(rd, Bytes::new(), None);
    Some(Box::pin(run(session, source, writer, rate)))
}

/// What a connection's loop woke for.
enum Woke {
    /// Its deadline (keep-alive or credential expiry) came.
    Timer,
    /// A read ended: bytes, the end of the stream, or an error.
    Read(Option<std::io::Result<Bytes>>),
}

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
fn run<R>(
    mut session: MqttSession,
    mut source: ByteSource<R>,
    writer: actix_rt::task::JoinHandle<()>,
    mut rate: RateLimiter,
) -> impl Future<Output = ()>
where
    R: AsyncRead + Unpin,
{
    async move {
        // The loop's locals in a block of their own, so that what the
        // close holds afterwards shares their room in the future.
        {
            // One timer, armed at the earlier of the keep-alive deadline and the
            // credential's expiry, moved only when that comes earlier (as in the
            // WebSocket read loop): traffic costs no timer work.
            let mut timer = std::pin::pin!(actix_rt::time::sleep_until(deadline(&session).into()));
            let mut unyielded: u32 = 0;
            loop {
                if session.outbound().is_closing() {
                    break;
                }
                {
                    let next = deadline(&session);
                    if next < timer.deadline().into_std() {
                        timer.as_mut().reset(next.into());
                    }
                }
                // The wait only says what came: a read is handled after it,
                // so that nothing of the wait lives on in the loop's state
                // while the read's handling waits. The timer first, so that a
                // client that never stops sending is still held to its
                // credential's expiry.
                let woke = poll_fn(|cx| {
                    if timer.as_mut().poll(cx).is_ready() {
                        return Poll::Ready(Woke::Timer);
                    }
                    Pin::new(&mut source).poll_next(cx).map(Woke::Read)
                });
                // Matched as it comes, not bound: a binding the chunk is moved
                // out of would stay in the loop's state.
                let chunk = match woke.await {
                    Woke::Read(None | Some(Err(_))) => break,
                    Woke::Read(Some(Ok(chunk))) => chunk,
                    Woke::Timer => {
                        let now = Instant::now();
                        if session.expires_at().is_some_and(|at| now >= at) {
                            close(
                                session.outbound(),
                                crate::session::CLOSE_EXPIRED,
                                "credentials expired".into(),
                            );
                            break;
                        }
                        if now >= session.idle_deadline() {
                            session.idle_closed();
                            close(session.outbound(), 1001, close_reason::KEEP_ALIVE.into());
                            break;
                        }
                        timer.as_mut().reset(deadline(&session).into());
                        continue;
                    }
                };
                // Boxed: held inline, the session's future (and the read's
                // locals) would be part of every connection's state, idle or
                // not.
                let handled = Box::pin(on_read(&mut session, &mut rate, chunk));
                let Some(got) = handled.await else { break };
                // Let the writers this traffic woke run before more is read (as
                // the WebSocket read loop's bursts do).
                unyielded = unyielded.saturating_add(got);
                if unyielded as usize >= BURST_BYTES {
                    unyielded = 0;
                    actix_rt::task::yield_now().await;
                }
            }
        }
        let out = session.outbound().clone();
        out.close(CloseRequest {
            code: 1000,
            reason: String::new(),
            drain: true,
        });
        Box::pin(session.end()).await;
        // A client that stopped reading must not hold the connection.
        let abort = writer.abort_handle();
        // Boxed, as the pause above.
        if Box::pin(actix_rt::time::timeout(DRAIN_TIMEOUT, writer))
            .await
            .is_err()
        {
            out.abort(1001, "close drain timed out");
            abort.abort();
        }
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

    /// Every idle MQTT/TCP connection holds its loop's future in one
    /// allocation: at 512 B or less it is in mimalloc's 512 B class, one
    /// byte more and it is in the 640 B one.
    #[test]
    fn an_mqtt_tcp_connection_s_loop_fits_a_512_byte_block() {
        let size = output_size(run::<tokio::io::ReadHalf<tokio::net::TcpStream>>);
        assert!(size <= 512, "the connection's future is {size} B");
    }
}
