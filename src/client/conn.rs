//! The client's background task: owns the socket, writes what the
//! [`Client`](super::Client) handle sends it, reads frames and routes each
//! to the request waiting for it or to its subscription's stream, a
//! batch per read burst.

use std::cell::Cell;
use std::collections::HashMap;
use std::rc::Rc;

use actix_http::ws;
use bytes::Bytes;
use futures_util::{FutureExt, SinkExt, StreamExt};
use tokio::sync::{mpsc, oneshot};

use super::{ClientError, Command, DISPATCH_BURST, Reply, Route, handshake};
use crate::protocol::codec::{self, Format};
use crate::protocol::frame::{ClientFrame, Close, ErrorCode, Message, QueueDelivery, ServerFrame};

/// The background task: owns the socket, sends commands, dispatches
/// frames.
pub(super) async fn run(
    mut framed: handshake::Connection,
    mut commands: mpsc::Receiver<Command>,
    format: Format,
    errors: mpsc::Sender<(ErrorCode, String)>,
    dropped: Rc<Cell<u64>>,
) {
    let mut w = Waiting::default();
    let encode = |frame: &ClientFrame| -> ws::Message {
        let bytes = Bytes::from(codec::encode_client(format, frame));
        match format {
            Format::Json => match bytestring::ByteString::try_from(bytes) {
                Ok(text) => ws::Message::Text(text),
                Err(_) => ws::Message::Nop,
            },
            Format::Bincode => ws::Message::Binary(bytes),
        }
    };
    'conn: loop {
        tokio::select! {
            cmd = commands.recv(), if w.closing.is_none() => {
                let frame = match cmd {
                    None => {
                        // Every handle is gone: close, and stop taking commands.
                        w.closing = Some(oneshot::channel().0);
                        ClientFrame::Close(Close { drain: false })
                    }
                    Some(cmd) => w.take(cmd),
                };
                // Write every command already waiting, then flush once:
                // many frames per write.
                if framed.feed(encode(&frame)).await.is_err() {
                    break;
                }
                let mut batch = 1;
                while batch < 256 && w.closing.is_none() {
                    let Ok(cmd) = commands.try_recv() else { break };
                    let frame = w.take(cmd);
                    if framed.feed(encode(&frame)).await.is_err() {
                        break;
                    }
                    batch += 1;
                }
                if framed.flush().await.is_err() {
                    break;
                }
            }
            incoming = framed.next() => {
                // Then every frame already read, before the next select:
                // a subscriber's deliveries arrive many per read.
                let mut next = Some(incoming);
                let mut handled = 0;
                while let Some(incoming) = next.take() {
                    match incoming {
                        Some(Ok(ws::Frame::Text(b) | ws::Frame::Binary(b))) => {
                            dispatch(&mut w, format, &errors, &dropped, b).await;
                        }
                        Some(Ok(ws::Frame::Ping(b))) => {
                            if framed.send(ws::Message::Pong(b)).await.is_err() {
                                break 'conn;
                            }
                        }
                        Some(Ok(ws::Frame::Close(_)) | Err(_)) | None => break 'conn,
                        Some(Ok(_)) => {}
                    }
                    handled += 1;
                    if handled < DISPATCH_BURST {
                        next = framed.next().now_or_never();
                    }
                }
                // What the burst gathered, before the task waits again.
                flush(&mut w).await;
            }
        }
    }
    // Frames read before the connection ended are still the application's.
    flush(&mut w).await;
    if let Some(done) = w.closing {
        let _ = done.send(());
    }
}

/// Hands one server frame to whoever waits for it: a subscription's
/// batch (handed over when the burst ends, or sooner, waiting when its
/// stream is full: the socket is not read while the application is
/// behind), a request's reply, or the error stream.
async fn dispatch(
    w: &mut Waiting,
    format: Format,
    errors: &mpsc::Sender<(ErrorCode, String)>,
    dropped: &Cell<u64>,
    data: Bytes,
) {
    // A subscriber's deliveries, decoded borrowed: nothing is copied for
    // a subscription that is gone, and the owned message is built once.
    if format == Format::Bincode
        && let Some(m) = codec::decode_message(&data)
    {
        if joins::<Message>(w, m.sub).await {
            w.batch.messages.push(m.to_message());
        }
        return;
    }
    let frame = match codec::decode_server(format, &data)
        .or_else(|_| codec::decode_server(other(format), &data))
    {
        Ok(f) => f,
        Err(e) => {
            let _ = errors.try_send((e.code, format!("undecodable server frame: {e}")));
            return;
        }
    };
    match frame {
        ServerFrame::Message(m) => {
            if joins::<Message>(w, &m.sub).await {
                w.batch.messages.push(m);
            }
        }
        ServerFrame::Delivery(d) => {
            if joins::<QueueDelivery>(w, &d.sub).await {
                w.batch.deliveries.push(d);
            }
        }
        // Everything else after the deliveries read before it (a
        // receipt may end the subscription they are for).
        other => {
            flush(w).await;
            answer(w, errors, dropped, other);
        }
    }
}

/// Hands a frame that is not a delivery to whoever waits for it.
fn answer(
    w: &mut Waiting,
    errors: &mpsc::Sender<(ErrorCode, String)>,
    dropped: &Cell<u64>,
    frame: ServerFrame,
) {
    match frame {
        // Delivered by `dispatch`.
        ServerFrame::Message(_) | ServerFrame::Delivery(_) => {}
        // Answers that only end a wait.
        frame @ (ServerFrame::Enqueued(_)
        | ServerFrame::JobReply(_)
        | ServerFrame::Draining(_)
        | ServerFrame::Presence(_)
        | ServerFrame::Pong(_)) => {
            if let Some(reply) = frame.rid().and_then(|rid| w.pending.remove(&rid)) {
                let _ = reply.send(Ok(frame));
            }
        }
        ServerFrame::Receipt(r) => {
            w.sub_rids.remove(&r.rid);
            if let Some(id) = w.unsub_rids.remove(&r.rid) {
                w.subs.remove(&id);
            }
            if let Some(reply) = w.pending.remove(&r.rid) {
                let _ = reply.send(Ok(ServerFrame::Receipt(r)));
            }
        }
        ServerFrame::Subscribed(f) => {
            if let Some(rid) = f.rid {
                w.sub_rids.remove(&rid);
                if let Some(reply) = w.pending.remove(&rid) {
                    let _ = reply.send(Ok(ServerFrame::Subscribed(f)));
                }
            }
        }
        ServerFrame::Welcome(welcome) => {
            if let Some(reply) = w.hello.take() {
                let _ = reply.send(Ok(ServerFrame::Welcome(welcome)));
            }
        }
        ServerFrame::Error(e) => {
            let waiting = e.rid.and_then(|rid| {
                if let Some(id) = w.sub_rids.remove(&rid) {
                    w.subs.remove(&id);
                }
                w.unsub_rids.remove(&rid);
                w.pending.remove(&rid)
            });
            match waiting.or_else(|| w.hello.take()) {
                Some(reply) => {
                    let _ = reply.send(Err(ClientError::Server {
                        code: e.code,
                        message: e.message,
                    }));
                }
                None => {
                    let _ = errors.try_send((e.code, e.message));
                }
            }
        }
        ServerFrame::Dropped(d) => dropped.set(dropped.get().saturating_add(d.count)),
        // The broker ended a subscription: its stream ends (`recv` gives
        // `None`), and the application hears why on the error stream.
        ServerFrame::Ended(e) => {
            w.subs.remove(&e.sub);
            let _ = errors.try_send((
                e.code,
                format!("subscription {:?} ended: {}", e.sub, e.message),
            ));
        }
    }
}

/// The frames of one subscription (or consumer) read in the current
/// burst and not yet handed over: a stream takes them in one batch.
#[derive(Default)]
struct Batch {
    /// The subscription id they are for (its allocation reused).
    sub: String,
    /// Most the batch may hold (its stream's [`stream::Tx::max_batch`]).
    max: usize,
    messages: Vec<Message>,
    deliveries: Vec<QueueDelivery>,
}

/// A frame a subscription's stream carries.
trait Routed: Sized {
    /// The batch's list of this kind.
    fn list(batch: &mut Batch) -> &mut Vec<Self>;
    /// Most one batch of this kind may hold on `route`; `None` when the
    /// route carries the other kind.
    fn max_batch(route: &Route) -> Option<usize>;
}

impl Routed for Message {
    fn list(batch: &mut Batch) -> &mut Vec<Self> {
        &mut batch.messages
    }
    fn max_batch(route: &Route) -> Option<usize> {
        match route {
            Route::Messages(tx) => Some(tx.max_batch),
            Route::Deliveries(_) => None,
        }
    }
}

impl Routed for QueueDelivery {
    fn list(batch: &mut Batch) -> &mut Vec<Self> {
        &mut batch.deliveries
    }
    fn max_batch(route: &Route) -> Option<usize> {
        match route {
            Route::Deliveries(tx) => Some(tx.max_batch),
            Route::Messages(_) => None,
        }
    }
}

/// Whether a frame of kind `T` for subscription `sub` joins the batch
/// (the caller then builds and adds it): the batch is handed over first
/// when it is for another subscription or full, and no frame joins for a
/// subscription that is gone or of the other kind.
async fn joins<T: Routed>(w: &mut Waiting, sub: &str) -> bool {
    if w.batch.sub != sub || T::list(&mut w.batch).len() >= w.batch.max {
        flush(w).await;
        let Some(max) = w.subs.get(sub).and_then(T::max_batch) else {
            return false;
        };
        w.batch.sub.clear();
        w.batch.sub.push_str(sub);
        w.batch.max = max;
        T::list(&mut w.batch).reserve_exact(max);
    }
    true
}

/// A batch made with room for a burst, cut to what it holds when that is
/// far less: a slow application's stream may hold thousands of small
/// batches, each of which would otherwise keep room for 64.
fn fitted<T>(mut batch: Vec<T>) -> Vec<T> {
    if batch.len() * 4 <= batch.capacity() {
        batch.shrink_to_fit();
    }
    batch
}

/// Hands the gathered batch to its stream, waiting for room when the
/// application is behind (the backpressure: the socket is not read
/// meanwhile); dropped when its subscription has ended.
async fn flush(w: &mut Waiting) {
    let batch = &mut w.batch;
    // The next frame looks its route up again (a receipt or an error
    // may end it meanwhile).
    batch.max = 0;
    if batch.messages.is_empty() && batch.deliveries.is_empty() {
        return;
    }
    match w.subs.get(&batch.sub) {
        Some(Route::Messages(tx)) if !batch.messages.is_empty() => {
            tx.send(fitted(std::mem::take(&mut batch.messages))).await;
        }
        Some(Route::Deliveries(tx)) if !batch.deliveries.is_empty() => {
            tx.send(fitted(std::mem::take(&mut batch.deliveries))).await;
        }
        _ => {}
    }
    batch.messages.clear();
    batch.deliveries.clear();
}

/// What the background task is waiting for: answers by request id, the
/// hello, subscriptions by id, and the close.
#[derive(Default)]
struct Waiting {
    pending: HashMap<u64, Reply>,
    hello: Option<Reply>,
    /// Looked up for every delivery: a fast hasher (ids are the
    /// client's own).
    subs: HashMap<String, Route, foldhash::fast::RandomState>,
    /// Subscriptions awaiting their receipt, by request id.
    sub_rids: HashMap<u64, String>,
    unsub_rids: HashMap<u64, String>,
    closing: Option<oneshot::Sender<()>>,
    /// Deliveries read in this burst, not yet handed over.
    batch: Batch,
}

impl Waiting {
    /// Records what a command waits for and returns the frame to send.
    fn take(&mut self, cmd: Command) -> ClientFrame {
        match cmd {
            Command::Send(frame) => frame,
            Command::Request { frame, rid, reply } => {
                match rid {
                    Some(rid) => {
                        self.pending.insert(rid, reply);
                    }
                    None => self.hello = Some(reply),
                }
                frame
            }
            Command::Subscribe {
                frame,
                id,
                rid,
                tx,
                reply,
            } => {
                // Route messages for it at once: a retained message may be
                // written before the receipt.
                self.subs.insert(id.clone(), tx);
                self.sub_rids.insert(rid, id);
                self.pending.insert(rid, reply);
                frame
            }
            Command::Unsubscribe {
                frame,
                id,
                rid,
                reply,
            } => {
                self.unsub_rids.insert(rid, id);
                self.pending.insert(rid, reply);
                frame
            }
            Command::Close { drain, done } => {
                self.closing = Some(done);
                ClientFrame::Close(Close { drain })
            }
        }
    }
}

fn other(format: Format) -> Format {
    match format {
        Format::Json => Format::Bincode,
        Format::Bincode => Format::Json,
    }
}
