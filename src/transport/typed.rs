//! An app's typed sockets ([`crate::sockets`]) on the WebSocket read and
//! write loops every endpoint shares: the upgrade checks origin and
//! credentials, asks the type's `on_open`, registers the socket, and then
//! hands it complete messages and the app's events, one at a time.

use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use actix_web::{HttpRequest, HttpResponse, web};
use bytes::Bytes;

use super::wsloop::{Flow, Handler, MessageKind, outbound, serve};
use super::{ApiError, AppState};
use crate::config::SessionConfig;
use crate::metrics::{Metrics, Protocol};
use crate::protocol::codec::Format;
use crate::protocol::frame::ErrorCode;
use crate::session::{CloseRequest, Outbound, RateLimiter, Verdict};
use crate::sockets::{Closed, Open, Socket, SocketMessage, SocketType};

/// `GET {path}` for socket type `T`.
pub(crate) async fn upgrade<T: SocketType>(
    req: HttpRequest,
    payload: web::Payload,
    app: web::Data<AppState>,
) -> Result<HttpResponse, actix_web::Error> {
    let builder =
        actix_http::ws::handshake(req.head()).map_err(|e| super::ws::handshake_error(&req, e))?;
    super::origin::upgrade(&req, &app.config.server)?;
    // A typed socket has no hello frame: credentials come with the
    // upgrade (Authorization, or ?token=), or the broker must let
    // anonymous clients in.
    let Some(principal) =
        super::credentials::principal(&req, &app, true, crate::auth::Way::Socket).await?
    else {
        return Err(ApiError::coded(
            ErrorCode::Unauthorized,
            "credentials required: Authorization: Bearer or Basic, or ?token=".into(),
        )
        .into());
    };
    let cfg = app.session_config.clone();
    let out = outbound(&cfg, Format::Json);
    // The app's protocol is its own: no `dropped` notices in it (the
    // drops are counted in the session's stats).
    out.disable_notices();
    let socket = Socket::new(
        T::KIND,
        principal.clone(),
        out,
        app.broker.clone(),
        app.sessions.clone(),
        cfg.max_subscriptions,
    );
    let open = Open {
        request: &req,
        principal: &principal,
    };
    let state = match T::on_open(&open, &socket).await {
        Ok(state) => state,
        Err(refusal) => {
            tracing::debug!(kind = T::KIND, peer = ?req.peer_addr(), "socket refused: {}", refusal.message);
            return Err(ApiError {
                status: refusal.status,
                code: refusal.code,
                message: refusal.message,
            }
            .into());
        }
    };
    let (tell, events) = tokio::sync::mpsc::channel(T::EVENT_BUFFER.max(1));
    socket.register(state.id().to_owned(), tell);
    tracing::debug!(kind = T::KIND, id = socket.id(), "socket opened");
    let metrics = app.broker.metrics().clone();
    metrics.connections.add(Protocol::Socket, 1);
    let revocation = principal
        .revocable()
        .then(|| Box::new((app.auth.clone(), principal.clone(), app.auth.generation())));
    let handler = Typed {
        expires: principal.expires_at(),
        revocation,
        state: Some(state),
        socket,
        events,
        pending: None,
        rate: RateLimiter::new(cfg.rate_per_s, cfg.rate_burst),
        cfg: cfg.clone(),
        metrics: metrics.clone(),
    };
    serve(&req, builder, payload, handler, &cfg, metrics)
}

/// One typed socket's connection.
struct Typed<T: SocketType> {
    /// The app's state; taken only by `end`.
    state: Option<T>,
    socket: Socket,
    events: tokio::sync::mpsc::Receiver<T::Event>,
    /// An event [`Handler::poll_event`] took, for [`Handler::event`].
    pending: Option<T::Event>,
    expires: Option<Instant>,
    /// For a credential a key reload can withdraw: the verifier, the
    /// principal and the reloads seen (boxed: most sockets have none).
    revocation: Option<Box<(crate::auth::Auth, crate::auth::Principal, u32)>>,
    rate: RateLimiter,
    cfg: Arc<SessionConfig>,
    metrics: Arc<Metrics>,
}

impl<T: SocketType> Typed<T> {
    fn close(&self, code: u16, reason: &str) -> Flow {
        self.socket.outbound().close(CloseRequest {
            code,
            reason: reason.to_owned(),
            drain: true,
        });
        Flow::Stop
    }
}

impl<T: SocketType> Handler for Typed<T> {
    fn outbound(&self) -> &Arc<Outbound> {
        self.socket.outbound()
    }

    fn idle_timeout(&self) -> Duration {
        Duration::from_secs(self.cfg.idle_timeout_s)
    }

    fn expires_at(&self) -> Option<Instant> {
        self.expires
    }

    fn revoked(&mut self) -> Option<(u16, &'static str)> {
        let (auth, principal, seen) = &mut **self.revocation.as_mut()?;
        auth.withdrawn_since(seen, Some(principal))
            .then_some((crate::session::CLOSE_EXPIRED, "credentials revoked"))
    }

    fn received(&self, bytes: usize) {
        self.metrics.bytes_in.add(Protocol::Socket, bytes as u64);
    }

    fn poll_event(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        match self.events.poll_recv(cx) {
            Poll::Ready(Some(event)) => {
                self.pending = Some(event);
                Poll::Ready(())
            }
            // The registry holds a sender while the socket lives: no
            // sender means nothing more will come.
            Poll::Ready(None) | Poll::Pending => Poll::Pending,
        }
    }

    async fn event(&mut self) -> Flow {
        if let (Some(event), Some(state)) = (self.pending.take(), self.state.as_mut()) {
            state.on_event(&self.socket, event).await;
        }
        Flow::Go
    }

    async fn message(&mut self, kind: MessageKind, bytes: Bytes, now: Instant) -> Flow {
        self.metrics.frames_in.add(Protocol::Socket, 1);
        match self.rate.check(now) {
            Verdict::Allow => {}
            Verdict::Refuse => {
                // Past the rate a message is not handed to the socket;
                // far past it the connection is closed.
                self.metrics.rate_limited.add(1);
                return Flow::Go;
            }
            Verdict::Close => {
                self.metrics.rate_limited.add(1);
                return self.close(1008, crate::session::close_reason::RATE_LIMIT);
            }
        }
        let message = match kind {
            MessageKind::Binary => SocketMessage::Binary(bytes),
            MessageKind::Text => match String::from_utf8(bytes.to_vec()) {
                Ok(text) => SocketMessage::Text(text),
                Err(_) => return self.close(1007, "text message is not valid UTF-8"),
            },
        };
        if let Some(state) = self.state.as_mut() {
            state.on_message(&self.socket, message).await;
        }
        Flow::Go
    }

    async fn end(mut self) {
        let (code, reason) = self
            .socket
            .outbound()
            .close_reason()
            .map_or((None, String::new()), |(c, r)| (Some(c), r));
        if let Some(state) = self.state.take() {
            state.on_close(&self.socket, Closed { code, reason }).await;
        }
        self.socket.end().await;
        tracing::debug!(kind = T::KIND, id = self.socket.id(), "socket closed");
    }
}

/// A socket's path asked with another method than GET.
pub(crate) use super::error::method_not_allowed;
