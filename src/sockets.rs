//! Typed sockets: an embedding app's own kinds of WebSocket connection (a
//! `CustomerSocket`, an `OrderSocket`), each a [`SocketType`] mounted at
//! a path with [`crate::Wharf::socket`]. The app writes what its sockets
//! do with a message; Wharf gives them its session machinery: the
//! credentials on the upgrade, the outbound queue with its high and normal
//! lanes, fairness quantum, bound and slow-consumer policy, close, abort
//! and drain-and-close, the frame rate limit, the idle timeout and
//! keep-alive pings, and topic subscriptions and publishes checked against
//! the principal's permissions. The session manager finds the sockets by
//! type and id ([`Sockets`]), so the rest of the app can send to one,
//! tell it an event, or close it.
//!
//! # Design notes
//!
//! A typed socket is a third `Handler` of the read loop every WebSocket
//! endpoint shares (`transport/wsloop.rs`), beside the native and the MQTT
//! ones (`transport/typed.rs`), so it gets the same frames, fragments,
//! idle timeout, pings, expiry and outbound writer without a copy of any
//! of them. The upgrade checks the origin and the credentials (a typed
//! socket has no `hello` frame: 401 without credentials unless anonymous
//! clients are let in), then runs `on_open` before the 101, so a refusal
//! is a plain HTTP error. The socket is then registered in `Sessions`
//! under its kind and id, with the sender of a bounded event channel
//! (`EVENT_BUFFER`); `Sessions` keeps an index kind, id, session ids, so
//! `Sockets::send` and `tell` do not scan every session. The read loop
//! polls the event channel beside the socket (`Handler::poll_event`), so
//! `on_message` and `on_event` never run at once and the socket's state
//! needs no lock. Sends from the app go into the socket's `Outbound`
//! (lanes, bound, slow-consumer policy). A topic subscription the socket
//! makes is an ordinary `Subscription` with that outbound queue as its
//! sink, delivering native `message` frames in JSON; its publishes go
//! through `Broker::publish_from` with ingress `socket`, after the
//! principal's `publish` right is checked, like every other way in.

use std::future::Future;
use std::marker::PhantomData;
use std::sync::{Arc, OnceLock};

use actix_web::HttpRequest;
use actix_web::http::StatusCode;
use bytes::Bytes;
use parking_lot::Mutex;
use uuid::Uuid;

use crate::auth::{Principal, Right};
use crate::broker::{
    Broker, BrokerError, Ingress, Publish, PublishOutcome, Sink as _, Source, SubTag, Subscription,
};
use crate::protocol::codec::{self, Format};
use crate::protocol::frame::Priority;
use crate::session::{
    CloseRequest, OutFrame, Outbound, OutboundStats, PushError, SessionInfo, Sessions,
    encoding_slot,
};

/// An app's kind of socket: its state is `Self`, made when a client
/// connects and dropped when it leaves. The methods run on the
/// connection's worker thread, one at a time, so `&mut self` needs no
/// lock; a method that awaits holds up only its own connection.
pub trait SocketType: Sized + 'static {
    /// The type's name: [`Sockets`] and `GET /admin/sessions` (`kind`)
    /// know its sockets by it. Unique per app; not `native` or `mqtt`.
    const KIND: &'static str;
    /// How many events ([`Sockets::tell`]) may wait for one socket;
    /// past it a tell is refused for that socket.
    const EVENT_BUFFER: usize = 64;
    /// What the app tells its sockets ([`Sockets::tell`]); `()` for none.
    type Event: Clone + Send + 'static;

    /// A client connected: make the socket's state, or refuse the
    /// upgrade with an HTTP error. The credentials were checked already
    /// ([`Open::principal`]); the socket may send from here (it goes out
    /// once the upgrade completes).
    fn on_open(open: &Open<'_>, socket: &Socket) -> impl Future<Output = Result<Self, Refusal>>;

    /// The socket's id in the app (a customer's id, an order's):
    /// [`Sockets`] finds it by this. Asked once, after `on_open`; more
    /// than one socket may share an id (a customer's two tabs).
    fn id(&self) -> &str;

    /// A complete message from the client.
    fn on_message(&mut self, socket: &Socket, message: SocketMessage) -> impl Future<Output = ()>;

    /// An event the app told this socket ([`Sockets::tell`]).
    fn on_event(&mut self, socket: &Socket, event: Self::Event) -> impl Future<Output = ()> {
        let _ = (socket, event);
        async {}
    }

    /// The connection ended (the client left or closed, the socket or
    /// the app closed it, or the broker is stopping). Its subscriptions
    /// end after this returns.
    fn on_close(self, socket: &Socket, closed: Closed) -> impl Future<Output = ()> {
        let _ = (socket, closed);
        async {}
    }
}

/// A WebSocket data message, as a client sent it or as a socket sends it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SocketMessage {
    /// A text message (valid UTF-8: a client's invalid text closes its
    /// connection with 1007).
    Text(String),
    /// A binary message.
    Binary(Bytes),
}

impl From<&str> for SocketMessage {
    fn from(s: &str) -> Self {
        SocketMessage::Text(s.to_owned())
    }
}

impl From<String> for SocketMessage {
    fn from(s: String) -> Self {
        SocketMessage::Text(s)
    }
}

impl From<Bytes> for SocketMessage {
    fn from(b: Bytes) -> Self {
        SocketMessage::Binary(b)
    }
}

impl From<Vec<u8>> for SocketMessage {
    fn from(b: Vec<u8>) -> Self {
        SocketMessage::Binary(b.into())
    }
}

impl SocketMessage {
    fn frame(self) -> OutFrame {
        match self {
            SocketMessage::Text(s) => OutFrame::data(Format::Json, Bytes::new(), s.into()),
            SocketMessage::Binary(b) => OutFrame::data(Format::Bincode, Bytes::new(), b),
        }
    }
}

/// What a socket's [`SocketType::on_open`] sees of the upgrade.
pub struct Open<'a> {
    pub(crate) request: &'a HttpRequest,
    pub(crate) principal: &'a Principal,
}

impl Open<'_> {
    /// The upgrade request: headers, query string, peer address.
    pub fn request(&self) -> &HttpRequest {
        self.request
    }

    /// A segment of the mounted path (`{id}` in `/customers/{id}`).
    pub fn path_param(&self, name: &str) -> Option<&str> {
        self.request.match_info().get(name)
    }

    /// Who connected (`anonymous` when the broker lets anonymous clients
    /// in and none presented credentials).
    pub fn principal(&self) -> &Principal {
        self.principal
    }
}

/// An upgrade a socket type refused: the HTTP status and the
/// `{"error": {"code", "message"}}` body the client gets.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    /// The HTTP status.
    pub status: StatusCode,
    /// A short machine-readable code (`forbidden`, `not_found`, ...).
    pub code: &'static str,
    /// What a person reads.
    pub message: String,
}

impl Refusal {
    /// A refusal with any status and code.
    pub fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> Self {
        Refusal {
            status,
            code,
            message: message.into(),
        }
    }

    /// 403 `forbidden`: the principal may not open this socket.
    pub fn forbidden(message: impl Into<String>) -> Self {
        Self::new(StatusCode::FORBIDDEN, "forbidden", message)
    }

    /// 404 `not_found`: what the socket is about does not exist.
    pub fn not_found(message: impl Into<String>) -> Self {
        Self::new(StatusCode::NOT_FOUND, "not_found", message)
    }

    /// 400 `invalid_field`: the upgrade's path or query is wrong.
    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, "invalid_field", message)
    }
}

/// How a socket's connection ended, for [`SocketType::on_close`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Closed {
    /// The close code sent or echoed (1000 normal, 1001 going away or
    /// shutdown, 1008 rate limit, ...), if a close was asked for.
    pub code: Option<u16>,
    /// The close reason, if any.
    pub reason: String,
}

/// Why a socket's publish or subscription was refused.
#[derive(Debug, thiserror::Error)]
pub enum SocketError {
    /// The principal lacks the right.
    #[error("{principal:?} may not {right} {object:?}")]
    Forbidden {
        /// Who asked.
        principal: String,
        /// The right missing (`publish`, `subscribe`).
        right: &'static str,
        /// The topic or filter.
        object: String,
    },
    /// The socket holds `[session] max_subscriptions` already.
    #[error("more than {0} subscriptions")]
    TooManySubscriptions(usize),
    /// The broker refused (an invalid topic or filter, overload).
    #[error(transparent)]
    Broker(#[from] BrokerError),
}

/// One connection of a typed socket: what its methods use to send, close,
/// publish and subscribe. Cheap to clone (a task of the socket's own may
/// keep one).
#[derive(Clone)]
pub struct Socket(Arc<SocketInner>);

struct SocketInner {
    id: Uuid,
    kind: &'static str,
    key: OnceLock<String>,
    principal: Principal,
    out: Arc<Outbound>,
    broker: Broker,
    sessions: Sessions,
    max_subscriptions: usize,
    /// By filter; `None` while a subscribe is under way.
    subs: Mutex<std::collections::HashMap<String, Option<Subscription>>>,
}

impl Socket {
    pub(crate) fn new(
        kind: &'static str,
        principal: Principal,
        out: Arc<Outbound>,
        broker: Broker,
        sessions: Sessions,
        max_subscriptions: usize,
    ) -> Socket {
        Socket(Arc::new(SocketInner {
            id: Uuid::now_v7(),
            kind,
            key: OnceLock::new(),
            principal,
            out,
            broker,
            sessions,
            max_subscriptions,
            subs: Mutex::default(),
        }))
    }

    /// The session's id (as `GET /admin/sessions` lists it).
    pub fn session_id(&self) -> Uuid {
        self.0.id
    }

    /// The socket type's [`SocketType::KIND`].
    pub fn kind(&self) -> &'static str {
        self.0.kind
    }

    /// The socket's [`SocketType::id`] (empty until `on_open` returned).
    pub fn id(&self) -> &str {
        self.0.key.get().map_or("", String::as_str)
    }

    /// Who connected.
    pub fn principal(&self) -> &Principal {
        &self.0.principal
    }

    /// Sends on the normal lane, behind what is queued; subject to the
    /// outbound bound and `[session] slow_consumer`.
    ///
    /// # Errors
    /// The queue is full (policy `close`, or a message larger than the
    /// bound) or the socket is closing.
    pub fn send(&self, message: impl Into<SocketMessage>) -> Result<(), PushError> {
        self.0.out.push(Priority::Normal, message.into().frame())
    }

    /// Sends on the high lane: ahead of normal-lane messages, within the
    /// fairness quantum.
    ///
    /// # Errors
    /// As [`Socket::send`].
    pub fn send_urgent(&self, message: impl Into<SocketMessage>) -> Result<(), PushError> {
        self.0.out.push(Priority::High, message.into().frame())
    }

    /// Closes the connection with `code` after what is queued is written.
    pub fn close(&self, code: u16, reason: &str) {
        self.0.out.close(CloseRequest {
            code,
            reason: reason.to_owned(),
            drain: true,
        });
    }

    /// Closes the connection with `code` at once, dropping what is queued.
    pub fn abort(&self, code: u16, reason: &str) {
        self.0.out.abort(code, reason);
    }

    /// The outbound queue's counters (queued, written, dropped).
    pub fn stats(&self) -> OutboundStats {
        self.0.out.stats()
    }

    /// Publishes to `topic` as this socket's principal: rules see protocol
    /// `socket`, the socket's id as client id, and the principal.
    ///
    /// # Errors
    /// [`SocketError::Forbidden`] without the `publish` right on the topic;
    /// the broker's refusal (invalid topic, overload).
    pub async fn publish(
        &self,
        topic: &str,
        payload: impl Into<Bytes>,
    ) -> Result<PublishOutcome, SocketError> {
        self.check(Right::Publish(topic))?;
        let msg = Publish {
            topic: topic.to_owned(),
            payload: payload.into(),
            origin: self.0.out.id(),
            ..Publish::default()
        };
        let source = Source {
            ingress: Ingress::Socket,
            client_id: Some(self.id()),
            principal: Some(self.0.principal.name()),
        };
        Ok(self.0.broker.publish_from(msg, &source).await?)
    }

    /// Subscribes the socket to `filter`: each matching message reaches
    /// the client as a native-protocol `message` frame in JSON (a text
    /// message; proto/README.md), with `sub` set to the filter. Subscribing
    /// twice to one filter is one subscription.
    ///
    /// # Errors
    /// [`SocketError::Forbidden`] without the `subscribe` right;
    /// [`SocketError::TooManySubscriptions`]; an invalid filter.
    pub async fn subscribe(&self, filter: &str) -> Result<(), SocketError> {
        self.check(Right::Subscribe(filter))?;
        {
            let mut subs = self.0.subs.lock();
            if subs.contains_key(filter) {
                return Ok(());
            }
            if subs.len() >= self.0.max_subscriptions {
                return Err(SocketError::TooManySubscriptions(self.0.max_subscriptions));
            }
            // Reserved while the topics take it, so a concurrent
            // subscribe (from a task of the app's) does not add another.
            subs.insert(filter.to_owned(), None);
        }
        let sub = Subscription::new(
            self.0.out.clone(),
            filter,
            filter,
            SubTag::Prefix(codec::message_prefix(Format::Json, filter)),
            Some(encoding_slot(Format::Json)),
        );
        if let Err(e) = self.0.broker.subscribe(sub.clone()).await {
            self.0.subs.lock().remove(filter);
            return Err(e.into());
        }
        let kept = {
            let mut subs = self.0.subs.lock();
            match subs.get_mut(filter) {
                Some(slot) => {
                    *slot = Some(sub.clone());
                    Some(subs.len())
                }
                None => None,
            }
        };
        match kept {
            Some(n) => self.0.sessions.set_counts(self.0.id, n, 0),
            // Unsubscribed (or ended) meanwhile: undo.
            None => {
                sub.cancel();
                self.0
                    .broker
                    .unsubscribe(self.0.out.id(), filter, filter)
                    .await?;
            }
        }
        Ok(())
    }

    /// Ends the subscription to `filter`; whether there was one.
    ///
    /// # Errors
    /// A topic too busy to take the unsubscribe (deliveries stopped at
    /// once all the same).
    pub async fn unsubscribe(&self, filter: &str) -> Result<bool, SocketError> {
        let (removed, n) = {
            let mut subs = self.0.subs.lock();
            (subs.remove(filter), subs.len())
        };
        let Some(sub) = removed else {
            return Ok(false);
        };
        self.0.sessions.set_counts(self.0.id, n, 0);
        // A subscribe still under way undoes itself when it finds its
        // reservation gone.
        if let Some(sub) = sub {
            sub.cancel();
            self.0
                .broker
                .unsubscribe(self.0.out.id(), filter, filter)
                .await?;
        }
        Ok(true)
    }

    fn check(&self, right: Right<'_>) -> Result<(), SocketError> {
        if self.0.principal.may(right) {
            return Ok(());
        }
        Err(SocketError::Forbidden {
            principal: self.0.principal.name().to_owned(),
            right: right.name(),
            object: right.object().unwrap_or_default().to_owned(),
        })
    }

    pub(crate) fn outbound(&self) -> &Arc<Outbound> {
        &self.0.out
    }

    /// Registers the socket under its type and id, with the sender of
    /// its events.
    pub(crate) fn register<E: Send + 'static>(
        &self,
        key: String,
        tell: tokio::sync::mpsc::Sender<E>,
    ) {
        let _ = self.0.key.set(key.clone());
        self.0.sessions.insert_typed(
            self.0.id,
            self.0.kind,
            key,
            self.0.principal.id(),
            self.0.out.clone(),
            Arc::new(tell),
        );
    }

    /// Ends the subscriptions and leaves the registry.
    pub(crate) async fn end(&self) {
        let subs: Vec<Subscription> = self.0.subs.lock().drain().filter_map(|(_, s)| s).collect();
        for sub in subs {
            sub.cancel();
            let _ = self
                .0
                .broker
                .unsubscribe(self.0.out.id(), &sub.id, &sub.filter)
                .await;
        }
        self.0.sessions.remove(self.0.id);
    }
}

/// How many sockets a send, tell or close reached.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Reached {
    /// Sockets that took it.
    pub sockets: usize,
    /// Sockets that refused it: their queue or event buffer was full, or
    /// they were closing.
    pub refused: usize,
}

/// The live sockets of one type, as the rest of the app finds them
/// ([`crate::Wharf::sockets`]). Cheap to clone; usable from any thread.
pub struct Sockets<T> {
    sessions: Sessions,
    _type: PhantomData<fn() -> T>,
}

impl<T> Clone for Sockets<T> {
    fn clone(&self) -> Self {
        Sockets {
            sessions: self.sessions.clone(),
            _type: PhantomData,
        }
    }
}

impl<T: SocketType> Sockets<T> {
    pub(crate) fn new(sessions: Sessions) -> Self {
        Sockets {
            sessions,
            _type: PhantomData,
        }
    }

    /// The sockets with id `id` (as [`SocketType::id`] gave it).
    pub fn find(&self, id: &str) -> Vec<SessionInfo> {
        self.sessions.find_typed(T::KIND, Some(id))
    }

    /// Every live socket of the type.
    pub fn list(&self) -> Vec<SessionInfo> {
        self.sessions.find_typed(T::KIND, None)
    }

    /// Sends `message` to the client of every socket with id `id`, on the
    /// normal lane.
    pub fn send(&self, id: &str, message: impl Into<SocketMessage>) -> Reached {
        self.push(Some(id), Priority::Normal, message.into())
    }

    /// [`Sockets::send`] on the high lane.
    pub fn send_urgent(&self, id: &str, message: impl Into<SocketMessage>) -> Reached {
        self.push(Some(id), Priority::High, message.into())
    }

    /// Sends `message` to the client of every socket of the type.
    pub fn broadcast(&self, message: impl Into<SocketMessage>) -> Reached {
        self.push(None, Priority::Normal, message.into())
    }

    /// Hands `event` to [`SocketType::on_event`] of every socket with id
    /// `id`, without waiting; a socket whose event buffer
    /// ([`SocketType::EVENT_BUFFER`]) is full refuses it.
    pub fn tell(&self, id: &str, event: T::Event) -> Reached {
        let mut reached = Reached::default();
        for target in self.sessions.targets(T::KIND, Some(id)) {
            let sent = target
                .tell
                .as_ref()
                .and_then(|t| t.downcast_ref::<tokio::sync::mpsc::Sender<T::Event>>())
                .is_some_and(|tx| tx.try_send(event.clone()).is_ok());
            if sent {
                reached.sockets += 1;
            } else {
                reached.refused += 1;
            }
        }
        reached
    }

    /// Closes every socket with id `id`, after what is queued; how many.
    pub fn close(&self, id: &str, code: u16, reason: &str) -> usize {
        let targets = self.sessions.targets(T::KIND, Some(id));
        for target in &targets {
            target.out.close(CloseRequest {
                code,
                reason: reason.to_owned(),
                drain: true,
            });
        }
        targets.len()
    }

    fn push(&self, id: Option<&str>, lane: Priority, message: SocketMessage) -> Reached {
        let frame = message.frame();
        let mut reached = Reached::default();
        for target in self.sessions.targets(T::KIND, id) {
            match target.out.push(lane, frame.clone()) {
                Ok(()) => reached.sockets += 1,
                Err(_) => reached.refused += 1,
            }
        }
        reached
    }
}
