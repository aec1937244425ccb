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

use std::sync::Arc;
use std::time::{Duration, Instant};

use actix_web::http::{StatusCode, header};
use actix_web::{HttpRequest, HttpResponse, web};
use bytes::Bytes;

use super::error::HttpCode;
use super::wsloop::{Flow, Handler, MessageKind, outbound, serve};
use super::{ApiError, AppState};
use crate::config::SessionConfig;
use crate::metrics::{Metrics, Protocol};
use crate::protocol::codec::{Format, decode_client};
use crate::protocol::frame::{ClientFrame, ErrorCode};
use crate::session::{CloseRequest, Next, Outbound, RateLimiter, Session, Verdict};

/// Subprotocols the server accepts, in order of preference.
const SUBPROTOCOLS: [(&str, Format); 2] =
    [("wharf.bin", Format::Bincode), ("wharf.json", Format::Json)];

/// The subprotocols a WebSocket upgrade offers, lower-cased.
pub(crate) fn offered_subprotocols(headers: &header::HeaderMap) -> Vec<String> {
    headers
        .get_all(header::SEC_WEBSOCKET_PROTOCOL)
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(',').map(|p| p.trim().to_ascii_lowercase()))
        .collect()
}

fn negotiate(req: &HttpRequest) -> (Format, Option<&'static str>) {
    let offered = offered_subprotocols(req.headers());
    for (name, format) in SUBPROTOCOLS {
        if offered.iter().any(|p| p == name) {
            return (format, Some(name));
        }
    }
    (Format::Json, None)
}

/// A refused upgrade as an HTTP error, logged with the reason: a client
/// whose upgrade fails otherwise learns nothing from the broker's log.
pub(crate) fn handshake_error(req: &HttpRequest, e: actix_http::ws::HandshakeError) -> ApiError {
    use actix_http::ws::HandshakeError as H;
    tracing::info!(peer = ?req.peer_addr(), path = req.path(), "refused a WebSocket upgrade: {e}");
    let status = match e {
        H::NoWebsocketUpgrade | H::NoConnectionUpgrade => StatusCode::UPGRADE_REQUIRED,
        _ => StatusCode::BAD_REQUEST,
    };
    ApiError {
        status,
        ..ApiError::http(
            HttpCode::WebsocketHandshake,
            format!("not a valid WebSocket upgrade: {e}"),
        )
    }
}

pub(crate) async fn upgrade(
    req: HttpRequest,
    payload: web::Payload,
    app: web::Data<AppState>,
) -> Result<HttpResponse, actix_web::Error> {
    let mut builder =
        actix_http::ws::handshake(req.head()).map_err(|e| handshake_error(&req, e))?;
    super::origin::upgrade(&req, &app.config.server)?;
    let (format, chosen) = negotiate(&req);
    if let Some(name) = chosen {
        builder.insert_header((header::SEC_WEBSOCKET_PROTOCOL, name));
    }
    // Credentials on the upgrade; without them (and without anonymous
    // access) the first frame must be a hello with a token.
    // Not yet authenticated: counted against its address until `hello`.
    let super::credentials::Upgrader {
        principal,
        peer,
        unproven,
    } = super::credentials::upgrader(&req, &app, crate::auth::Way::Native).await?;
    let cfg = app.session_config.clone();
    let out = outbound(&cfg, format);
    let session = Session::new(
        app.broker.clone(),
        app.sessions.clone(),
        out.clone(),
        cfg.clone(),
    )
    .with_jobs(app.jobs.clone())
    .with_auth(app.auth.clone(), principal, peer)
    .holding(unproven);
    tracing::debug!(session = %session.id(), ?format, "websocket session opened");
    let metrics = app.broker.metrics().clone();
    metrics.connections.add(Protocol::Native, 1);
    let native = Native {
        rate: RateLimiter::new(cfg.rate_per_s, cfg.rate_burst),
        session,
        cfg: cfg.clone(),
        metrics: metrics.clone(),
    };
    serve(&req, builder, payload, native, &cfg, metrics)
}

/// The native protocol's side of a connection: rate limit, decode,
/// [`Session::handle`].
struct Native {
    session: Session,
    cfg: Arc<SessionConfig>,
    rate: RateLimiter,
    metrics: Arc<Metrics>,
}

impl Handler for Native {
    fn outbound(&self) -> &Arc<Outbound> {
        self.session.outbound()
    }

    fn idle_timeout(&self) -> Duration {
        Duration::from_secs(self.cfg.idle_timeout_s)
    }

    fn expires_at(&self) -> Option<Instant> {
        self.session.expires_at()
    }

    fn received(&self, bytes: usize) {
        self.metrics.bytes_in.add(Protocol::Native, bytes as u64);
    }

    fn expired(&mut self) -> (u16, &'static str) {
        self.session.expired()
    }

    fn revoked(&mut self) -> Option<(u16, &'static str)> {
        self.session.revoked()
    }

    async fn message(&mut self, kind: MessageKind, bytes: Bytes, now: Instant) -> Flow {
        // Text frames are JSON, binary frames bincode.
        let format = match kind {
            MessageKind::Text => Format::Json,
            MessageKind::Binary => Format::Bincode,
        };
        self.metrics.frames_in.add(Protocol::Native, 1);
        let decoded = decode_client(format, &bytes);
        // Settling what the broker delivered is bounded by the consumer's
        // prefetch: never rate-limited, or a fast consumer would be cut
        // off for keeping up.
        let settles = matches!(
            decoded,
            Ok(ClientFrame::Ack(_)
                | ClientFrame::Nack(_)
                | ClientFrame::Reject(_)
                | ClientFrame::Touch(_))
        );
        match if settles {
            Verdict::Allow
        } else {
            self.rate.check(now)
        } {
            Verdict::Allow => {}
            Verdict::Refuse => {
                self.metrics.rate_limited.add(1);
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
                self.metrics.rate_limited.add(1);
                // Drain, so the rate_limited errors reach the client first.
                self.session.outbound().close(CloseRequest {
                    code: 1008,
                    reason: crate::session::close_reason::RATE_LIMIT.into(),
                    drain: true,
                });
                return Flow::Stop;
            }
        }
        match decoded {
            Err(e) => {
                self.session.error(format, e.code, e.message, e.rid);
                Flow::Go
            }
            Ok(frame) => match self.session.handle(format, frame).await {
                Next::Continue => Flow::Go,
                Next::Close { drain } => {
                    self.session.outbound().close(CloseRequest {
                        code: 1000,
                        reason: "closed by client".into(),
                        drain,
                    });
                    Flow::Stop
                }
                Next::Refused { code, reason } => {
                    // Drain: the error saying why goes first.
                    self.session.outbound().close(CloseRequest {
                        code,
                        reason: reason.into(),
                        drain: true,
                    });
                    Flow::Stop
                }
            },
        }
    }

    async fn end(self) {
        let id = self.session.id();
        self.session.end().await;
        tracing::debug!(session = %id, "websocket session ended");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::transport::output_size;
    use crate::transport::raw::{ByteSource, Io};

    /// Every idle handed-over native WebSocket holds its read loop's
    /// future in a task of its own: at 408 B or less the task is 512 B
    /// (tokio's cells are 128-aligned), one byte more and it is 640.
    #[test]
    fn a_handed_over_websocket_s_read_loop_fits_a_512_byte_task() {
        let read_loop: fn(_, _, _, _) -> _ =
            super::super::wsloop::read_loop::<Native, ByteSource<tokio::io::ReadHalf<Box<dyn Io>>>>;
        let size = output_size(read_loop);
        assert!(size <= 408, "the read loop's future is {size} B");
    }
}
