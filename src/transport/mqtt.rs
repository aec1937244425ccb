//! `GET /mqtt`: MQTT 3.1.1 over WebSocket (subprotocol `mqtt`, or
//! `mqttv3.1`). Binary frames carry MQTT bytes, a packet may span frames
//! and a frame may hold several packets. A protocol violation closes only
//! that connection, with a log line saying why.

use std::sync::Arc;
use std::time::{Duration, Instant};

use actix_web::http::header;
use actix_web::{HttpRequest, HttpResponse, web};
use bytes::Bytes;

use super::error::HttpCode;
use super::ws::{handshake_error, offered_subprotocols};
use super::wsloop::{Flow, Handler, MessageKind, outbound, serve};
use super::{ApiError, AppState};
use crate::metrics::{Metrics, Protocol};
use crate::protocol::codec::Format;
use crate::session::mqtt::MqttSession;
use crate::session::{CloseRequest, Outbound, RateLimiter};

/// Subprotocols MQTT clients offer.
const SUBPROTOCOLS: [&str; 2] = ["mqtt", "mqttv3.1"];

fn negotiate(headers: &header::HeaderMap) -> Option<&'static str> {
    let offered = offered_subprotocols(headers);
    SUBPROTOCOLS
        .into_iter()
        .find(|name| offered.iter().any(|p| p == name))
}

struct Mqtt {
    session: MqttSession,
    rate: RateLimiter,
    metrics: Arc<Metrics>,
}

impl Handler for Mqtt {
    fn outbound(&self) -> &Arc<Outbound> {
        self.session.outbound()
    }

    fn idle_timeout(&self) -> Duration {
        self.session.idle_timeout()
    }

    fn idle_deadline(&self, _last_heard: Instant) -> Instant {
        // Keep-alive counts MQTT packets, not WebSocket pongs.
        self.session.idle_deadline()
    }

    fn expires_at(&self) -> Option<Instant> {
        self.session.expires_at()
    }

    fn revoked(&mut self) -> Option<(u16, &'static str)> {
        self.session
            .revoked()
            .map(|_| (crate::session::CLOSE_EXPIRED, "credentials revoked"))
    }

    fn received(&self, bytes: usize) {
        self.metrics.bytes_in.add(Protocol::MqttWs, bytes as u64);
    }

    fn idle_closed(&mut self) {
        self.session.idle_closed();
    }

    async fn message(&mut self, kind: MessageKind, bytes: Bytes, now: Instant) -> Flow {
        if kind == MessageKind::Text {
            return self.close(1003, "MQTT travels in binary frames".into());
        }
        self.metrics.frames_in.add(Protocol::MqttWs, 1);
        if let Err(c) = self.session.data(bytes, now).await {
            return self.close(c.code, c.reason);
        }
        // Past the rate the connection is slowed, not closed: it is not
        // read again until it is back within it (MQTT cannot refuse a
        // packet, and dropping bytes would break the stream).
        let pause = self.rate.charge(now, self.session.take_charged());
        if !pause.is_zero() {
            self.metrics.rate_limited.add(1);
            actix_rt::time::sleep(pause).await;
        }
        Flow::Go
    }

    async fn end(self) {
        self.session.end().await;
    }
}

impl Mqtt {
    fn close(&self, code: u16, reason: String) -> Flow {
        if code != 1000 {
            tracing::info!(code, "closing an MQTT connection: {reason}");
        }
        self.session.outbound().close(CloseRequest {
            code,
            reason,
            drain: true,
        });
        Flow::Stop
    }
}

/// `GET /` with an MQTT subprotocol: MQTT over WebSocket for clients that
/// connect to the root path (MQTT.js and others do by default, and
/// Mosquitto accepts any path).
pub(crate) async fn upgrade_at_root(
    req: HttpRequest,
    payload: web::Payload,
    app: web::Data<AppState>,
) -> Result<HttpResponse, actix_web::Error> {
    upgrade(req, payload, app).await
}

/// Whether a request offers an MQTT subprotocol: the guard of `GET /`,
/// so that an embedding app's own `/` route still gets everything else.
pub(crate) fn offers_mqtt(ctx: &actix_web::guard::GuardContext<'_>) -> bool {
    negotiate(&ctx.head().headers).is_some()
}

/// `GET /mqtt`: MQTT over WebSocket.
pub(crate) async fn upgrade(
    req: HttpRequest,
    payload: web::Payload,
    app: web::Data<AppState>,
) -> Result<HttpResponse, actix_web::Error> {
    let mut builder =
        actix_http::ws::handshake(req.head()).map_err(|e| handshake_error(&req, e))?;
    super::origin::upgrade(&req, &app.config.server)?;
    let Some(protocol) = negotiate(req.headers()) else {
        tracing::info!(
            peer = ?req.peer_addr(),
            path = req.path(),
            "refused an MQTT WebSocket upgrade: no \"mqtt\" subprotocol offered"
        );
        return Err(ApiError::http(
            HttpCode::WebsocketHandshake,
            "MQTT over WebSocket needs the subprotocol \"mqtt\" (or \"mqttv3.1\")",
        )
        .into());
    };
    builder.insert_header((header::SEC_WEBSOCKET_PROTOCOL, protocol));
    // Credentials may come with the upgrade; CONNECT's password wins.
    // Not yet authenticated: counted against its address until CONNECT.
    let super::credentials::Upgrader {
        principal,
        peer,
        unproven,
    } = super::credentials::upgrader(&req, &app, crate::auth::Way::Mqtt).await?;
    let cfg = app.session_config.clone();
    let out = outbound(&cfg, Format::Bincode);
    // MQTT has no `dropped` notice: drops are silent (QoS 0 is at most
    // once).
    out.disable_notices();
    let session = MqttSession::new(
        app.broker.clone(),
        app.sessions.clone(),
        out.clone(),
        cfg.clone(),
    )
    .with_auth(app.auth.clone(), principal, peer)
    .holding(unproven)
    .with_flow(crate::session::mqtt::Flow::of(&app.config.mqtt));
    let metrics = app.broker.metrics().clone();
    metrics.connections.add(Protocol::MqttWs, 1);
    let mqtt = Mqtt {
        session,
        rate: RateLimiter::new(cfg.rate_per_s, cfg.rate_burst),
        metrics: metrics.clone(),
    };
    serve(&req, builder, payload, mqtt, &cfg, metrics)
}
