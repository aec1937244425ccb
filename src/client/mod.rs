//! An async Rust client for the native protocol (bincode by default), used
//! by the tests, the benchmark and the examples.
//!
//! It runs on actix's runtime: create and use it inside an actix system
//! (`#[actix_web::main]`, `actix_rt::System::new()`); its background task is
//! spawned there. That task owns the socket (TCP_NODELAY set, writes
//! batched); the [`Client`] handle sends commands to it through a bounded
//! channel.
//!
//! Read your subscriptions: when one's buffer
//! ([`ClientOptions::subscription_buffer`]) is full, the task stops reading
//! the socket, which is what lets the server's slow-consumer policy act, but
//! it also holds back receipts and pongs, so requests time out until the
//! subscription is read (or dropped). Every wait has a timeout
//! ([`ClientOptions::timeout`]).
//!
//! ```no_run
//! # async fn demo() -> Result<(), wharf::client::ClientError> {
//! use wharf::client::{Client, ClientOptions};
//! let client = Client::connect("ws://127.0.0.1:7878/ws", ClientOptions::default()).await?;
//! let mut temps = client.subscribe("home/+/temperature").await?;
//! client.publish_confirmed("home/kitchen/temperature", b"21.5".to_vec()).await?;
//! let msg = temps.recv().await.expect("a message");
//! assert_eq!(msg.payload, b"21.5");
//! client.close(true).await?;
//! # Ok(()) }
//! ```

use std::cell::Cell;
use std::rc::Rc;
use std::time::Duration;

mod conn;
mod handshake;
mod jobs;
pub mod mqtt;
mod queues;
mod stream;

pub use jobs::JobCalls;
pub use queues::{Consumer, Deleted, EnqueueOptions};

use tokio::sync::{mpsc, oneshot};

use crate::protocol::codec::Format;
use crate::protocol::frame::{
    ClientFrame, ErrorCode, Headers, Hello, Message, Ping, PresenceQuery, PresenceReply, Priority,
    PublishFrame, QueueDelivery, Recover, ServerFrame, Subscribe, Subscribed, Unsubscribe, Welcome,
};

/// How to connect.
#[derive(Debug, Clone)]
pub struct ClientOptions {
    /// Encoding of frames (bincode unless told otherwise).
    pub format: Format,
    /// Client id sent in `hello`; the server makes one up if `None`.
    pub client_id: Option<String>,
    /// How long any request waits for its answer.
    pub timeout: Duration,
    /// Messages buffered per subscription before the client stops reading
    /// the socket (and the server's slow-consumer policy takes over).
    pub subscription_buffer: usize,
    /// Largest frame accepted from the server.
    pub max_frame: usize,
    /// The credential sent in `hello` (an API token or a JWT), when the
    /// broker requires one.
    pub token: Option<String>,
    /// What to trust for `wss://` URLs (`wharf::tls::client_config(ca)`).
    pub tls: Option<std::sync::Arc<rustls::ClientConfig>>,
}

impl Default for ClientOptions {
    fn default() -> Self {
        ClientOptions {
            format: Format::Bincode,
            client_id: None,
            timeout: Duration::from_secs(10),
            subscription_buffer: 4096,
            max_frame: 16 << 20,
            token: None,
            tls: None,
        }
    }
}

/// Why a client call failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ClientError {
    /// The WebSocket connection could not be made.
    #[error("cannot connect: {0}")]
    Connect(String),
    /// The server answered the request with an `error` frame.
    #[error("server refused: {}: {message}", code.as_str())]
    Server {
        /// The error code.
        code: ErrorCode,
        /// The server's explanation.
        message: String,
    },
    /// No answer within the timeout.
    #[error("no answer within {0:?}")]
    Timeout(Duration),
    /// The connection is closed.
    #[error("connection closed")]
    Closed,
    /// The server answered with a frame the request does not expect (a
    /// broker speaking another version of the protocol).
    #[error("unexpected answer: {0}")]
    Unexpected(String),
}

type Reply = oneshot::Sender<Result<ServerFrame, ClientError>>;

/// Where the frames of one subscription id go.
enum Route {
    Messages(stream::Tx<Message>),
    Deliveries(stream::Tx<QueueDelivery>),
}

enum Command {
    Send(ClientFrame),
    Request {
        frame: ClientFrame,
        rid: Option<u64>,
        reply: Reply,
    },
    Subscribe {
        frame: ClientFrame,
        id: String,
        rid: u64,
        tx: Route,
        reply: Reply,
    },
    Unsubscribe {
        frame: ClientFrame,
        id: String,
        rid: u64,
        reply: Reply,
    },
    Close {
        drain: bool,
        done: oneshot::Sender<()>,
    },
}

/// A connection to a Wharf broker over its native protocol: publish,
/// subscribe, queues, durable subscriptions, transactions and jobs. Not
/// `Send`: it lives on the actix thread that made it.
///
/// # Examples
///
/// ```no_run
/// use wharf::client::{Client, ClientOptions};
///
/// #[actix_web::main]
/// async fn main() -> Result<(), wharf::client::ClientError> {
///     let client = Client::connect("ws://127.0.0.1:7878/ws", ClientOptions::default()).await?;
///     let mut temps = client.subscribe("home/+/temperature").await?;
///     client.publish_confirmed("home/kitchen/temperature", b"21.5".to_vec()).await?;
///     if let Some(msg) = temps.recv().await {
///         println!("{} = {}", msg.topic, String::from_utf8_lossy(&msg.payload));
///     }
///     client.close(true).await
/// }
/// ```
pub struct Client {
    commands: mpsc::Sender<Command>,
    next: Cell<u64>,
    options: ClientOptions,
    welcome: Welcome,
    errors: mpsc::Receiver<(ErrorCode, String)>,
    dropped: Rc<Cell<u64>>,
}

/// The messages of one subscription, in order.
pub struct Subscription {
    id: String,
    rx: stream::Rx<Message>,
}

impl Subscription {
    /// The subscription id.
    pub fn id(&self) -> &str {
        &self.id
    }

    /// The next message; `None` once the connection is closed.
    pub async fn recv(&mut self) -> Option<Message> {
        std::future::poll_fn(|cx| self.rx.poll_next(cx)).await
    }

    /// The next message if one arrives within `timeout`.
    pub async fn recv_timeout(&mut self, timeout: Duration) -> Option<Message> {
        actix_rt::time::timeout(timeout, self.recv())
            .await
            .ok()
            .flatten()
    }

    /// A message already received, without waiting.
    pub fn try_recv(&mut self) -> Option<Message> {
        self.rx.try_next()
    }
}

impl futures_core::Stream for Subscription {
    type Item = Message;

    fn poll_next(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Message>> {
        self.rx.poll_next(cx)
    }
}

impl Client {
    /// Connects to `url` (`ws://host:port/ws`), says `hello` and waits for
    /// `welcome`.
    ///
    /// # Errors
    /// [`ClientError::Connect`], [`ClientError::Timeout`], or the server
    /// refusing the hello.
    pub async fn connect(url: &str, options: ClientOptions) -> Result<Client, ClientError> {
        let protocol = match options.format {
            Format::Json => "wharf.json",
            Format::Bincode => "wharf.bin",
        };
        let connect = handshake::connect(url, protocol, options.max_frame, options.tls.as_ref());
        let framed = actix_rt::time::timeout(options.timeout, connect)
            .await
            .map_err(|_| ClientError::Timeout(options.timeout))??;
        let (commands, rx) = mpsc::channel(1024);
        let (err_tx, err_rx) = mpsc::channel(256);
        let dropped = Rc::new(Cell::new(0));
        let (hello_tx, hello_rx) = oneshot::channel();
        actix_rt::spawn(conn::run(
            framed,
            rx,
            options.format,
            err_tx,
            dropped.clone(),
        ));
        let frame = ClientFrame::Hello(Hello {
            client_id: options.client_id.clone(),
            token: options.token.clone(),
            version: crate::protocol::frame::PROTOCOL_VERSION,
        });
        commands
            .send(Command::Request {
                frame,
                rid: None,
                reply: hello_tx,
            })
            .await
            .map_err(|_| ClientError::Closed)?;
        let welcome = match wait(hello_rx, options.timeout).await? {
            ServerFrame::Welcome(w) => w,
            other => {
                return Err(ClientError::Connect(format!(
                    "expected welcome, got {other:?}"
                )));
            }
        };
        Ok(Client {
            commands,
            next: Cell::new(1),
            options,
            welcome,
            errors: err_rx,
            dropped,
        })
    }

    fn next_id(&self) -> u64 {
        let n = self.next.get();
        self.next.set(n + 1);
        n
    }

    /// The server's `welcome`: session id, client id and limits.
    pub fn welcome(&self) -> &Welcome {
        &self.welcome
    }

    /// Messages the server reported dropped for this session so far.
    pub fn dropped(&self) -> u64 {
        self.dropped.get()
    }

    /// The next error the server sent that answered no request.
    pub async fn next_error(&mut self, timeout: Duration) -> Option<(ErrorCode, String)> {
        actix_rt::time::timeout(timeout, self.errors.recv())
            .await
            .ok()
            .flatten()
    }

    async fn request(
        &self,
        frame: ClientFrame,
        rid: Option<u64>,
    ) -> Result<ServerFrame, ClientError> {
        let (reply, rx) = oneshot::channel();
        self.commands
            .send(Command::Request { frame, rid, reply })
            .await
            .map_err(|_| ClientError::Closed)?;
        wait(rx, self.options.timeout).await
    }

    /// Subscribes to a topic filter; confirmed by the server before it
    /// returns.
    ///
    /// # Errors
    /// The server refusing (invalid filter, too many subscriptions), a
    /// timeout, or a closed connection.
    pub async fn subscribe(&self, filter: &str) -> Result<Subscription, ClientError> {
        let id = format!("s{}", self.next_id());
        let rid = self.next_id();
        let (tx, rx) = stream::channel(self.options.subscription_buffer);
        let frame = ClientFrame::Subscribe(Subscribe {
            id: id.clone(),
            filter: filter.to_owned(),
            rid: Some(rid),
            durable: false,
            prefetch: None,
            recover: None,
        });
        self.open_route(frame, &id, rid, Route::Messages(tx))
            .await?;
        Ok(Subscription { id, rx })
    }

    /// Subscribes to a topic (a name, not a filter) that keeps a history
    /// (`[[history]]`), resuming from `position`: the epoch and offset
    /// (`seq`) of the last message a previous subscription received, or
    /// `None` the first time. The messages missed come first on the
    /// subscription, then the live ones; the [`Subscribed`] answer says
    /// whether everything was recovered and where the topic stands
    /// (keep its epoch, and each message's `seq`, for next time).
    ///
    /// # Errors
    /// As [`Client::subscribe`]; a filter with wildcards is refused.
    pub async fn subscribe_recovering(
        &self,
        topic: &str,
        position: Option<(&str, u64)>,
    ) -> Result<(Subscription, Subscribed), ClientError> {
        let id = format!("s{}", self.next_id());
        let rid = self.next_id();
        let (tx, rx) = stream::channel(self.options.subscription_buffer);
        let (epoch, offset) = position.unwrap_or(("", 0));
        let frame = ClientFrame::Subscribe(Subscribe {
            id: id.clone(),
            filter: topic.to_owned(),
            rid: Some(rid),
            durable: false,
            prefetch: None,
            recover: Some(Recover {
                epoch: epoch.to_owned(),
                offset,
            }),
        });
        match self
            .open_route(frame, &id, rid, Route::Messages(tx))
            .await?
        {
            ServerFrame::Subscribed(s) => Ok((Subscription { id, rx }, s)),
            other => Err(ClientError::Unexpected(format!("{other:?}"))),
        }
    }

    /// Sends a frame that opens subscription (or consumer) `id`, routing
    /// its frames to `route` from the start, and waits for the receipt.
    async fn open_route(
        &self,
        frame: ClientFrame,
        id: &str,
        rid: u64,
        route: Route,
    ) -> Result<ServerFrame, ClientError> {
        let (reply, answer) = oneshot::channel();
        self.commands
            .send(Command::Subscribe {
                frame,
                id: id.to_owned(),
                rid,
                tx: route,
                reply,
            })
            .await
            .map_err(|_| ClientError::Closed)?;
        wait(answer, self.options.timeout).await
    }

    /// Ends subscription (or consumer) `id` and waits for the receipt.
    async fn close_route(&self, id: String) -> Result<(), ClientError> {
        let rid = self.next_id();
        let (reply, answer) = oneshot::channel();
        let frame = ClientFrame::Unsubscribe(Unsubscribe {
            id: id.clone(),
            rid: Some(rid),
        });
        self.commands
            .send(Command::Unsubscribe {
                frame,
                id,
                rid,
                reply,
            })
            .await
            .map_err(|_| ClientError::Closed)?;
        wait(answer, self.options.timeout).await.map(|_| ())
    }

    /// Ends a subscription.
    ///
    /// # Errors
    /// As [`Client::subscribe`].
    pub async fn unsubscribe(&self, sub: Subscription) -> Result<(), ClientError> {
        // Its stream goes first: a full one would keep the connection
        // from reading the receipt.
        let Subscription { id, rx } = sub;
        drop(rx);
        self.close_route(id).await
    }

    /// Publishes without waiting for the server (at most once).
    ///
    /// # Errors
    /// [`ClientError::Closed`].
    pub async fn publish(
        &self,
        topic: &str,
        payload: impl Into<Vec<u8>>,
    ) -> Result<(), ClientError> {
        self.publish_plain(topic, payload.into(), false).await
    }

    /// Publishes and waits for the server's receipt: the message was handed
    /// to every current subscriber.
    ///
    /// # Errors
    /// The server refusing (invalid topic, payload too large), a timeout,
    /// or a closed connection.
    pub async fn publish_confirmed(
        &self,
        topic: &str,
        payload: impl Into<Vec<u8>>,
    ) -> Result<(), ClientError> {
        self.publish_plain(topic, payload.into(), true).await
    }

    /// Publishes a retained message (an empty payload clears the topic's)
    /// and waits for the receipt, which comes once it is on disk.
    ///
    /// # Errors
    /// As [`Client::publish_confirmed`].
    pub async fn publish_retained(
        &self,
        topic: &str,
        payload: impl Into<Vec<u8>>,
    ) -> Result<(), ClientError> {
        let (headers, priority) = (Headers::new(), Priority::Normal);
        self.publish_with(topic, payload.into(), headers, true, priority, true)
            .await
    }

    async fn publish_plain(
        &self,
        topic: &str,
        payload: Vec<u8>,
        confirm: bool,
    ) -> Result<(), ClientError> {
        let (headers, priority) = (Headers::new(), Priority::Normal);
        self.publish_with(topic, payload, headers, false, priority, confirm)
            .await
    }

    /// Publishes with every option.
    ///
    /// # Errors
    /// As [`Client::publish_confirmed`] when `confirm`, else only
    /// [`ClientError::Closed`].
    pub async fn publish_with(
        &self,
        topic: &str,
        payload: Vec<u8>,
        headers: Headers,
        retain: bool,
        priority: Priority,
        confirm: bool,
    ) -> Result<(), ClientError> {
        let rid = confirm.then(|| self.next_id());
        let frame = ClientFrame::Publish(PublishFrame {
            topic: topic.to_owned(),
            payload,
            headers,
            retain,
            priority,
            rid,
        });
        if confirm {
            self.request(frame, rid).await.map(|_| ())
        } else {
            self.commands
                .send(Command::Send(frame))
                .await
                .map_err(|_| ClientError::Closed)
        }
    }

    /// Round trip to the server.
    ///
    /// # Errors
    /// A timeout or a closed connection.
    pub async fn ping(&self) -> Result<(), ClientError> {
        let rid = self.next_id();
        self.request(ClientFrame::Ping(Ping { rid: Some(rid) }), Some(rid))
            .await
            .map(|_| ())
    }

    /// A page of who is subscribed to `topic` (a topic under a
    /// `[[presence]]` entry): at most `limit` members (1 to 1000) after
    /// `after` (a previous page's `next`).
    ///
    /// # Errors
    /// [`ClientError::Server`] with `invalid_field` (no presence kept for
    /// the topic, a bad limit) or `forbidden` (no `subscribe` on it), a
    /// timeout or a closed connection.
    pub async fn presence(
        &self,
        topic: &str,
        after: Option<&str>,
        limit: u32,
    ) -> Result<PresenceReply, ClientError> {
        let rid = self.next_id();
        let q = PresenceQuery {
            topic: topic.to_owned(),
            after: after.map(str::to_owned),
            limit: Some(limit),
            rid,
        };
        match self.request(ClientFrame::Presence(q), Some(rid)).await? {
            ServerFrame::Presence(p) => Ok(p),
            other => Err(ClientError::Unexpected(format!("{other:?}"))),
        }
    }

    /// Presents a fresh token (a JWT about to expire) for the session's
    /// principal; the session then lasts until the new token expires.
    ///
    /// # Errors
    /// [`ClientError::Server`] with `unauthorized` (a bad token) or
    /// `forbidden` (another principal's), a timeout or a closed
    /// connection.
    pub async fn refresh(&self, token: &str) -> Result<(), ClientError> {
        let rid = self.next_id();
        let frame = ClientFrame::Refresh(crate::protocol::frame::Refresh {
            token: token.to_owned(),
            rid: Some(rid),
        });
        self.request(frame, Some(rid)).await.map(|_| ())
    }

    /// Closes the session; with `drain`, the server first delivers what it
    /// has queued (and this waits for it). Returns when the connection is
    /// closed.
    ///
    /// # Errors
    /// A timeout.
    pub async fn close(self, drain: bool) -> Result<(), ClientError> {
        let (done, rx) = oneshot::channel();
        if self
            .commands
            .send(Command::Close { drain, done })
            .await
            .is_err()
        {
            return Ok(());
        }
        match actix_rt::time::timeout(self.options.timeout, rx).await {
            Ok(_) => Ok(()),
            Err(_) => Err(ClientError::Timeout(self.options.timeout)),
        }
    }
}

async fn wait(
    rx: oneshot::Receiver<Result<ServerFrame, ClientError>>,
    timeout: Duration,
) -> Result<ServerFrame, ClientError> {
    match actix_rt::time::timeout(timeout, rx).await {
        Err(_) => Err(ClientError::Timeout(timeout)),
        Ok(Err(_)) => Err(ClientError::Closed),
        Ok(Ok(r)) => r,
    }
}

/// Frames read per wake of the background task before it looks at its
/// commands again.
pub(super) const DISPATCH_BURST: usize = 64;
