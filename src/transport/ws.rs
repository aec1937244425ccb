//! `GET /ws`: the native protocol over WebSocket.
//!
//! The handshake uses actix-http's ws module; the response body is the
//! session's [`OutboundStream`] (our own frame writer, many frames per
//! write), and a task on the connection's worker reads the request payload,
//! decodes WebSocket frames with actix-http's codec (bounded by
//! `max_frame`), decodes native frames and hands them to the [`Session`].
//!
//! Encodings: a text frame is JSON, a binary frame is bincode; replies use
//! the encoding of the frame they answer. Subprotocol `wharf.bin` makes
//! server-initiated notices bincode from the start; `wharf.json` (or none)
//! makes them JSON.

use std::future::poll_fn;
use std::time::{Duration, Instant};

use actix_codec::Decoder;
use actix_http::ws::{Codec, Frame, Item, ProtocolError};
use actix_web::body::BodyStream;
use actix_web::http::{StatusCode, header};
use actix_web::{HttpRequest, HttpResponse, web};
use bytes::{Bytes, BytesMut};
use futures_core::Stream;

use super::{ApiError, AppState};
use crate::config::SessionConfig;
use crate::protocol::codec::{Format, decode_client};
use crate::protocol::frame::ErrorCode;
use crate::session::{
    CloseRequest, Lane, Next, OutFrame, Outbound, OutboundStream, RateLimiter, Session, Verdict,
};

/// Longest a draining close waits for the client to read what is queued.
const DRAIN_TIMEOUT: Duration = Duration::from_secs(10);

/// Subprotocols the server accepts, in order of preference.
const SUBPROTOCOLS: [(&str, Format); 2] =
    [("wharf.bin", Format::Bincode), ("wharf.json", Format::Json)];

fn negotiate(req: &HttpRequest) -> (Format, Option<&'static str>) {
    let offered: Vec<String> = req
        .headers()
        .get_all(header::SEC_WEBSOCKET_PROTOCOL)
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(',').map(|p| p.trim().to_ascii_lowercase()))
        .collect();
    for (name, format) in SUBPROTOCOLS {
        if offered.iter().any(|p| p == name) {
            return (format, Some(name));
        }
    }
    (Format::Json, None)
}

fn handshake_error(e: actix_http::ws::HandshakeError) -> ApiError {
    use actix_http::ws::HandshakeError as H;
    let status = match e {
        H::NoWebsocketUpgrade | H::NoConnectionUpgrade => StatusCode::UPGRADE_REQUIRED,
        _ => StatusCode::BAD_REQUEST,
    };
    ApiError {
        status,
        code: "websocket_handshake",
        message: format!("not a valid WebSocket upgrade: {e}"),
    }
}

pub(crate) async fn upgrade(
    req: HttpRequest,
    payload: web::Payload,
    app: web::Data<AppState>,
) -> Result<HttpResponse, actix_web::Error> {
    let mut builder = actix_http::ws::handshake(req.head()).map_err(handshake_error)?;
    let (format, chosen) = negotiate(&req);
    if let Some(name) = chosen {
        builder.insert_header((header::SEC_WEBSOCKET_PROTOCOL, name));
    }
    let cfg = app.config.session.clone();
    let out = Outbound::new(
        cfg.outbound_limit,
        cfg.slow_consumer,
        cfg.write_quantum,
        format,
    );
    let session = Session::new(
        app.broker.clone(),
        app.sessions.clone(),
        out.clone(),
        cfg.clone(),
    )
    .with_jobs(app.jobs.clone());
    tracing::debug!(session = %session.id(), ?format, "websocket session opened");
    actix_web::rt::spawn(read_loop(payload, session, cfg));
    let response = builder.message_body(BodyStream::new(OutboundStream::new(out)))?;
    Ok(HttpResponse::from(response).map_into_boxed_body())
}

/// Whether the read loop goes on.
enum Flow {
    Go,
    Stop,
}

struct Reader {
    session: Session,
    /// When the chunk being decoded arrived (one clock read per read, not
    /// per frame).
    now: Instant,
    cfg: SessionConfig,
    rate: RateLimiter,
    /// A fragmented message being assembled: its encoding and bytes.
    partial: Option<(Format, BytesMut)>,
}

impl Reader {
    fn close(&self, code: u16, reason: impl Into<String>, drain: bool) {
        self.session.outbound().close(CloseRequest {
            code,
            reason: reason.into(),
            drain,
        });
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
            Frame::Text(b) => self.message(Format::Json, b).await,
            Frame::Binary(b) => self.message(Format::Bincode, b).await,
            Frame::Continuation(item) => self.continuation(item).await,
            Frame::Ping(b) => {
                let _ = self.session.outbound().push(Lane::High, OutFrame::pong(b));
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
            Item::FirstText(b) => (Some(Format::Json), b, false),
            Item::FirstBinary(b) => (Some(Format::Bincode), b, false),
            Item::Continue(b) => (None, b, false),
            Item::Last(b) => (None, b, true),
        };
        match (start, self.partial.as_mut()) {
            (Some(format), None) => {
                self.partial = Some((format, BytesMut::from(&bytes[..])));
            }
            (None, Some((_, acc))) => {
                if acc.len() + bytes.len() > self.cfg.max_frame {
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
            if let Some((format, acc)) = self.partial.take() {
                return self.message(format, acc.freeze()).await;
            }
        }
        Flow::Go
    }

    async fn message(&mut self, format: Format, bytes: Bytes) -> Flow {
        match self.rate.check(self.now) {
            Verdict::Allow => {}
            Verdict::Refuse => {
                self.session.error(
                    format,
                    ErrorCode::RateLimited,
                    format!(
                        "more than {} frames per second; frame ignored",
                        self.cfg.rate_per_s
                    ),
                    None,
                );
                return Flow::Go;
            }
            Verdict::Close => {
                // Drain, so the rate_limited errors reach the client first.
                self.close(1008, "rate limit exceeded", true);
                return Flow::Stop;
            }
        }
        match decode_client(format, &bytes) {
            Err(e) => {
                self.session.error(format, e.code, e.message, None);
                Flow::Go
            }
            Ok(frame) => match self.session.handle(format, frame).await {
                Next::Continue => Flow::Go,
                Next::Close { drain } => {
                    self.close(1000, "closed by client", drain);
                    Flow::Stop
                }
            },
        }
    }
}

async fn read_loop(mut payload: web::Payload, session: Session, cfg: SessionConfig) {
    let mut codec = Codec::new().max_size(cfg.max_frame);
    let mut buf = BytesMut::new();
    let mut ping = actix_rt::time::interval(Duration::from_secs(cfg.ping_interval_s));
    ping.tick().await;
    let idle = Duration::from_secs(cfg.idle_timeout_s);
    let mut last_heard = Instant::now();
    let mut reader = Reader {
        now: last_heard,
        rate: RateLimiter::new(cfg.rate_per_s, cfg.rate_burst),
        session,
        cfg,
        partial: None,
    };
    'conn: loop {
        loop {
            match codec.decode(&mut buf) {
                Ok(Some(frame)) => {
                    if let Flow::Stop = reader.frame(frame).await {
                        break 'conn;
                    }
                }
                Ok(None) => break,
                Err(ProtocolError::Overflow) => {
                    reader.close(1009, "frame larger than max_frame", false);
                    break 'conn;
                }
                Err(e) => {
                    reader.close(1002, format!("protocol error: {e}"), false);
                    break 'conn;
                }
            }
        }
        if reader.session.outbound().is_closing() {
            break;
        }
        tokio::select! {
            chunk = poll_fn(|cx| std::pin::Pin::new(&mut payload).poll_next(cx)) => match chunk {
                Some(Ok(bytes)) => {
                    last_heard = Instant::now();
                    reader.now = last_heard;
                    buf.extend_from_slice(&bytes);
                }
                Some(Err(_)) | None => break 'conn,
            },
            _ = ping.tick() => {
                if last_heard.elapsed() > idle {
                    reader.close(1001, "idle timeout", false);
                    break 'conn;
                }
                let _ = reader.session.outbound().push(Lane::High, OutFrame::ping());
            }
        }
    }
    let id = reader.session.id();
    let out = reader.session.outbound().clone();
    // The client is gone or done: end the writer too (after what is queued),
    // so the connection does not linger until the shutdown timeout.
    out.close(CloseRequest {
        code: 1000,
        reason: String::new(),
        drain: true,
    });
    reader.session.end().await;
    // A draining close may wait on a client that does not read: bound it.
    if !out.is_finished() {
        actix_rt::spawn(async move {
            actix_rt::time::sleep(DRAIN_TIMEOUT).await;
            out.abort(1001, "close drain timed out");
        });
    }
    tracing::debug!(session = %id, "websocket session ended");
}
