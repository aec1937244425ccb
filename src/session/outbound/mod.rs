//! A session's outbound queue: two lanes (high before normal), bounded in
//! bytes, with the slow-consumer policy applied at the bound; and the
//! writer that drains it into WebSocket frames, many per write.
//!
//! Producers (topic tasks on any thread, the session's own replies) call
//! [`Outbound::push`], which never blocks. The writer is the HTTP response
//! body ([`OutboundStream`]): actix polls it when the socket can take more,
//! so a client that does not read stops the draining, the queue fills, and
//! the policy (drop oldest, or disconnect) applies to that session alone.
//!
//! # Design notes
//!
//! ## Which writer drains it
//! With `[server] lean_websockets` (the default), and for MQTT over TCP,
//! the connection runs on Wharf's own reader and writer
//! (`transport/raw.rs`): `raw::write_loop` calls `OutboundStream::poll_fill`
//! with a batch of `WRITE_BATCH` (32 KiB, actix-http's write buffer size),
//! so it lays quantum after quantum while frames are ready, makes one
//! system call per 32 KiB at most, and then yields to the worker's other
//! connections. Connections served inside actix-http (an app's own
//! `HttpServer`, or `lean_websockets` off) have `OutboundStream` as their
//! response body, one quantum per poll, and actix-http's dispatcher gathers
//! them. A quantum is up to `session.write_quantum` frames, high lane
//! first, each a WebSocket header followed by the frame's head (a
//! subscription's prefix) and its shared body. Yielding after every full
//! quantum was measured: 20-25% fewer deliveries/s in the 1 -> 50 fan-out,
//! for no gain in fairness.
//!
//! ## A writer that retires
//! An MQTT/TCP connection's read loop asks its writer to retire
//! ([`Outbound::retire_writer`]) a second after starting it. The writer
//! finishes what is queued, and at its first idle moment (both lanes
//! empty, no close, decided under the lock) ends without finishing the
//! queue and hands its socket back. The loop then waits in the writer's
//! place ([`Outbound::poll_wanted`] registers the loop's waker where the
//! writer's was), and the next push or close wakes it to start a writer
//! again; so does the next read (`Outbound::keep_writer` takes back a
//! retirement not yet done), since a read's handling may wait and what
//! is queued meanwhile must go out. So a quiet connection holds no writer
//! task, and a busy one pays about one spawn a second.
//!
//! ## The bound and the policy
//! `session.outbound_limit` bounds both lanes together. `push` applies the
//! slow-consumer policy at the bound: `drop_oldest` evicts normal-lane
//! frames only, counts them, and writes a `dropped` notice (in the format
//! the client last used) ahead of the next frames; `disconnect` asks for a
//! close with 1008 and drops what is queued. A frame that could not fit
//! even with the normal lane empty is refused alone. `push_if_room` never
//! applies the policy: what does not fit is refused (`Dropped`), for
//! producers that keep what they offer and offer it again (queue
//! deliveries, MQTT QoS 1 and 2), so `drop_oldest` never loses a queue
//! delivery. MQTT connections send no `dropped` notices
//! (`disable_notices`).
//!
//! ## Closing
//! `close` keeps the first request; a draining close writes what is queued,
//! then the close frame. The read loop gives a draining close 10 s, then
//! aborts it (`abort`), and its timer ends as soon as the writer finishes
//! (`poll_finished`), so a closed connection's memory is not held for the
//! whole 10 s. `set_farewell` registers what a protocol writes just before
//! any close, whoever asks for it (MQTT 5's DISCONNECT with a reason code).
//! `set_raw` writes data frames without WebSocket headers and leaves the
//! control frames and the close out (MQTT over TCP). When the writer goes
//! (`OutboundStream` dropped) the queue is marked finished: producers get
//! `Closed`, and topics forget the session's subscriptions at their next
//! publish.

use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::{AtomicU8, Ordering};
use std::task::{Context, Poll, Waker};

use bytes::{Bytes, BytesMut};
use parking_lot::Mutex;

use crate::broker::{
    DeliveryOutcome, EncodingSlot, Published, QueuedDelivery, Sink, SubTag, Subscription,
    next_sink_id,
};
use crate::config::SlowConsumer;
use crate::protocol::codec::{self, Format};
use crate::protocol::frame::{Dropped, Priority, ServerFrame};
use crate::wsframe;

mod stream;

pub use stream::OutboundStream;
pub(crate) use stream::WRITE_BATCH;

/// One queued WebSocket frame: its opcode and payload in parts (a message's
/// per-subscription prefix and shared body, so nothing is copied until the
/// writer lays it into the write buffer).
#[derive(Debug, Clone)]
pub struct OutFrame {
    opcode: u8,
    head: Bytes,
    body: Bytes,
}

impl OutFrame {
    /// A text (JSON) or binary (bincode) frame, by format.
    pub fn data(format: Format, head: Bytes, body: Bytes) -> Self {
        let opcode = match format {
            Format::Json => wsframe::TEXT,
            Format::Bincode => wsframe::BINARY,
        };
        OutFrame { opcode, head, body }
    }

    /// A pong answering a WebSocket ping.
    pub fn pong(payload: Bytes) -> Self {
        OutFrame {
            opcode: wsframe::PONG,
            head: Bytes::new(),
            body: payload,
        }
    }

    /// A WebSocket ping (keep-alive).
    pub fn ping() -> Self {
        OutFrame {
            opcode: wsframe::PING,
            head: Bytes::new(),
            body: Bytes::new(),
        }
    }

    fn size(&self) -> usize {
        let len = self.head.len() + self.body.len();
        len + wsframe::header_len(len)
    }
}

/// Why a frame was not queued.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum PushError {
    /// The queue was full and the policy dropped this frame (counted).
    #[error("outbound queue full; frame dropped")]
    Dropped,
    /// The session is closing or closed.
    #[error("session closed")]
    Closed,
}

impl From<Result<(), PushError>> for DeliveryOutcome {
    /// What a push means to the resource that delivered.
    fn from(pushed: Result<(), PushError>) -> Self {
        match pushed {
            Ok(()) => DeliveryOutcome::Queued,
            Err(PushError::Dropped) => DeliveryOutcome::Dropped,
            Err(PushError::Closed) => DeliveryOutcome::Closed,
        }
    }
}

/// How a session is closed: status code, reason, and whether queued frames
/// go out first.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CloseRequest {
    /// WebSocket close code.
    pub code: u16,
    /// Reason text, for people.
    pub reason: String,
    /// Deliver what is queued before the close frame.
    pub drain: bool,
}

/// The last data a protocol writes before a connection closes, made from
/// the close's code and reason (MQTT 5's DISCONNECT with a reason code).
pub type Farewell = Box<dyn Fn(u16, &str) -> Bytes + Send + Sync>;

#[derive(Default)]
struct State {
    high: VecDeque<OutFrame>,
    normal: VecDeque<OutFrame>,
    /// Bytes waiting in both lanes.
    bytes: usize,
    /// Of which in the high lane (dropping normal frames cannot free them).
    high_bytes: usize,
    dropped_unreported: u64,
    /// Frames queued and dropped so far ([`OutboundStats`]): counted
    /// under the lock each push takes anyway, not with atomics of their
    /// own (one locked instruction less per delivery).
    queued: u64,
    dropped: u64,
    /// The close asked for, boxed: every connection's queue holds the
    /// slot, few hold a close, and 24 B less keeps the queue in a smaller
    /// allocation class than tokio's socket registrations and writer
    /// tasks, which a quiet connection frees (benches/README.md).
    close: Option<Box<CloseRequest>>,
    finished: bool,
    /// The writer is asked to end at its next idle moment
    /// ([`Outbound::retire_writer`]).
    retire: bool,
    waker: Option<Waker>,
    /// Who waits for the writer to finish (a draining close's timer).
    finish_waker: Option<Waker>,
    farewell: Option<Farewell>,
}

/// Counters of one session's outbound side.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct OutboundStats {
    /// Frames queued.
    pub queued: u64,
    /// Frames dropped by the slow-consumer policy.
    pub dropped: u64,
    /// Bytes waiting now.
    pub pending_bytes: usize,
}

/// A lane's first room, in frames (what `VecDeque` makes room for at a
/// first push of frames this size).
const FIRST_ROOM: usize = 4;

/// The handle producers push to. Shared (`Arc`) by the session, the topics
/// it subscribes to, and the writer.
pub struct Outbound {
    id: u64,
    state: Mutex<State>,
    limit: usize,
    policy: SlowConsumer,
    /// Frames per quantum: a `u32` keeps the queue at 200 B (see
    /// `an_outbound_queue_fits_a_224_byte_allocation`).
    quantum: u32,
    /// Format for notices the server sends on its own (`dropped`): the one
    /// the client last used.
    notice_format: AtomicU8,
    /// Whether `dropped` notices are written (native protocol only).
    notices: std::sync::atomic::AtomicBool,
    /// Raw framing (MQTT over TCP): data frames are written as their bytes
    /// alone, WebSocket control frames (pings, pongs, the close) not at
    /// all.
    raw: std::sync::atomic::AtomicBool,
}

impl Outbound {
    /// An empty queue of at most `limit` bytes.
    pub fn new(limit: usize, policy: SlowConsumer, quantum: usize, format: Format) -> Arc<Self> {
        Arc::new(Outbound {
            id: next_sink_id(),
            state: Mutex::new(State::default()),
            limit,
            policy,
            quantum: u32::try_from(quantum.max(1)).unwrap_or(u32::MAX),
            notice_format: AtomicU8::new(format_byte(format)),
            notices: std::sync::atomic::AtomicBool::new(true),
            raw: std::sync::atomic::AtomicBool::new(false),
        })
    }

    /// Queues a frame, applying the slow-consumer policy at the bound.
    ///
    /// # Errors
    /// [`PushError::Dropped`] if the policy dropped it, [`PushError::Closed`]
    /// if the session is closing (or the policy just closed it).
    pub fn push(&self, lane: Priority, frame: OutFrame) -> Result<(), PushError> {
        self.push_inner(lane, frame, false)
    }

    /// Queues a frame only if it fits under the bound as things stand:
    /// no policy applies and nothing is counted as dropped. For frames the
    /// producer keeps and offers again later (queue deliveries).
    ///
    /// # Errors
    /// [`PushError::Dropped`] if it does not fit now, [`PushError::Closed`]
    /// if the session is closing.
    pub fn push_if_room(&self, lane: Priority, frame: OutFrame) -> Result<(), PushError> {
        self.push_inner(lane, frame, true)
    }

    fn push_inner(&self, lane: Priority, frame: OutFrame, if_room: bool) -> Result<(), PushError> {
        let size = frame.size();
        let mut st = self.state.lock();
        if st.close.is_some() || st.finished {
            return Err(PushError::Closed);
        }
        if if_room && st.bytes + size > self.limit {
            return Err(PushError::Dropped);
        }
        if size > self.limit.saturating_sub(st.high_bytes) {
            // This frame cannot fit even with the normal lane empty (a
            // payload that grew in encoding, or a full high lane): refuse
            // it alone rather than punish the session for it.
            st.dropped_unreported += 1;
            st.dropped += 1;
            return Err(PushError::Dropped);
        }
        if st.bytes + size > self.limit {
            match self.policy {
                SlowConsumer::DropOldest => {
                    while st.bytes + size > self.limit {
                        let Some(old) = st.normal.pop_front() else {
                            break;
                        };
                        st.bytes -= old.size();
                        st.dropped_unreported += 1;
                        st.dropped += 1;
                    }
                }
                SlowConsumer::Disconnect => {
                    st.close = Some(Box::new(CloseRequest {
                        code: 1008,
                        reason: format!(
                            "slow consumer: more than {} bytes waiting to be read",
                            self.limit
                        ),
                        drain: false,
                    }));
                    let waker = st.waker.take();
                    drop(st);
                    if let Some(w) = waker {
                        w.wake();
                    }
                    return Err(PushError::Closed);
                }
            }
        }
        st.bytes += size;
        match lane {
            Priority::High => {
                st.high_bytes += size;
                st.high.push_back(frame);
            }
            Priority::Normal => st.normal.push_back(frame),
        }
        st.queued += 1;
        let waker = st.waker.take();
        drop(st);
        if let Some(w) = waker {
            w.wake();
        }
        Ok(())
    }

    /// Queues a server frame encoded in `format` (replies, errors).
    ///
    /// # Errors
    /// As [`Outbound::push`].
    pub fn push_frame(
        &self,
        lane: Priority,
        format: Format,
        frame: &ServerFrame,
    ) -> Result<(), PushError> {
        let bytes = codec::encode_server(format, frame);
        self.push(lane, OutFrame::data(format, Bytes::new(), bytes.into()))
    }

    /// Asks the writer to close the connection: after the queue drains, or
    /// at once. The first request wins; later ones are ignored.
    pub fn close(&self, request: CloseRequest) {
        let mut st = self.state.lock();
        if st.close.is_none() && !st.finished {
            st.close = Some(Box::new(request));
        }
        let waker = st.waker.take();
        drop(st);
        if let Some(w) = waker {
            w.wake();
        }
    }

    /// Turns a draining close into an immediate one (or closes at once):
    /// used when a drain takes longer than it may.
    pub fn abort(&self, code: u16, reason: &str) {
        let mut st = self.state.lock();
        let finished = st.finished;
        match st.close.as_mut() {
            Some(c) => c.drain = false,
            None if !finished => {
                st.close = Some(Box::new(CloseRequest {
                    code,
                    reason: reason.to_owned(),
                    drain: false,
                }));
            }
            None => {}
        }
        let waker = st.waker.take();
        drop(st);
        if let Some(w) = waker {
            w.wake();
        }
    }

    /// Whether the writer has finished (close frame written or connection
    /// dropped).
    pub fn is_finished(&self) -> bool {
        self.state.lock().finished
    }

    /// `Ready` once the writer has finished: lets a draining close's timer
    /// end with the drain rather than hold the connection's memory for
    /// its whole timeout.
    pub fn poll_finished(&self, cx: &mut Context<'_>) -> Poll<()> {
        let mut st = self.state.lock();
        if st.finished {
            return Poll::Ready(());
        }
        st.finish_waker = Some(cx.waker().clone());
        Poll::Pending
    }

    /// The most bytes it holds (`session.outbound_limit`).
    pub fn limit(&self) -> usize {
        self.limit
    }

    /// The code and reason of the close asked for, if any.
    pub fn close_reason(&self) -> Option<(u16, String)> {
        self.state
            .lock()
            .close
            .as_ref()
            .map(|c| (c.code, c.reason.clone()))
    }

    /// Whether a close was requested or done.
    pub fn is_closing(&self) -> bool {
        let st = self.state.lock();
        st.close.is_some() || st.finished
    }

    /// Writes frames without WebSocket framing, for a protocol carried on
    /// a plain byte stream (MQTT over TCP); call before the writer starts.
    pub fn set_raw(&self) {
        self.raw.store(true, Ordering::Relaxed);
    }

    /// Sets (or with `None` clears) what is written just before the close,
    /// whoever asks for the close: a protocol that says goodbye in its own
    /// packets (MQTT 5) learns of closes made by the registry, the
    /// keep-alive timer or the slow-consumer policy.
    pub fn set_farewell(&self, farewell: Option<Farewell>) {
        self.state.lock().farewell = farewell;
    }

    /// Stops `dropped` notices: for protocols that have none (MQTT).
    pub fn disable_notices(&self) {
        self.notices.store(false, Ordering::Relaxed);
    }

    /// Records the format the client last used, for server notices.
    pub fn set_notice_format(&self, format: Format) {
        self.notice_format
            .store(format_byte(format), Ordering::Relaxed);
    }

    /// The format the client last used: what server notices go out in.
    pub fn notice_format(&self) -> Format {
        format_from(self.notice_format.load(Ordering::Relaxed))
    }

    /// Current counters.
    pub fn stats(&self) -> OutboundStats {
        let st = self.state.lock();
        OutboundStats {
            queued: st.queued,
            dropped: st.dropped,
            pending_bytes: st.bytes,
        }
    }

    /// Marks the session gone (connection dropped): producers get `Closed`
    /// and topics forget its subscriptions.
    pub fn mark_finished(&self) {
        let mut st = self.state.lock();
        st.finished = true;
        st.high.clear();
        st.normal.clear();
        st.bytes = 0;
        st.high_bytes = 0;
        let waker = st.finish_waker.take();
        drop(st);
        if let Some(w) = waker {
            w.wake();
        }
    }

    /// Takes every queued frame, high lane first as the writer takes them,
    /// each as its bytes (head then body): how unit tests read what a
    /// session sent without a socket.
    #[cfg(test)]
    pub(crate) fn take_queued(&self) -> Vec<Vec<u8>> {
        let mut guard = self.state.lock();
        let st = &mut *guard;
        let frames: Vec<Vec<u8>> = st
            .high
            .drain(..)
            .chain(st.normal.drain(..))
            .map(|f| [f.head.as_ref(), f.body.as_ref()].concat())
            .collect();
        st.bytes = 0;
        st.high_bytes = 0;
        frames
    }

    /// Fills `buf` with up to a quantum of frames. `Ready(Laid)` when
    /// frames were laid, `Ready(Finished)` when the close frame was written
    /// (the stream then ends), `Ready(Retired)` when nothing is queued and
    /// the writer was asked to retire (only if `may_retire`: nothing laid
    /// yet that it must write), `Pending` with the waker registered when
    /// there is nothing to write.
    fn drain_into(
        &self,
        buf: &mut BytesMut,
        may_retire: bool,
        cx: &mut Context<'_>,
    ) -> Poll<Drained> {
        let raw = self.raw.load(Ordering::Relaxed);
        let mut st = self.state.lock();
        if st.finished {
            return Poll::Ready(Drained::Finished);
        }
        let aborting = st.close.as_ref().is_some_and(|c| !c.drain);
        if aborting {
            st.high.clear();
            st.normal.clear();
            st.bytes = 0;
            st.high_bytes = 0;
        }
        let mut written = 0;
        if st.dropped_unreported > 0 && !self.notices.load(Ordering::Relaxed) {
            st.dropped_unreported = 0;
        }
        if st.dropped_unreported > 0 && !aborting {
            let format = format_from(self.notice_format.load(Ordering::Relaxed));
            let notice = ServerFrame::Dropped(Dropped {
                count: st.dropped_unreported,
            });
            let bytes = codec::encode_server(format, &notice);
            let f = OutFrame::data(format, Bytes::new(), bytes.into());
            write_frame(buf, &f, raw);
            st.dropped_unreported = 0;
            written += 1;
        }
        while written < self.quantum as usize {
            let f = match st.high.pop_front() {
                Some(f) => {
                    st.high_bytes -= f.size();
                    f
                }
                None => match st.normal.pop_front() {
                    Some(f) => f,
                    None => break,
                },
            };
            st.bytes -= f.size();
            write_frame(buf, &f, raw);
            written += 1;
        }
        if written > 0 {
            crate::tidy::traffic();
            return Poll::Ready(Drained::Laid);
        }
        if st.close.is_some() {
            if let (Some(f), Some(close)) = (st.farewell.take(), &st.close) {
                let bytes = f(close.code, &close.reason);
                write_frame(
                    buf,
                    &OutFrame::data(Format::Bincode, Bytes::new(), bytes),
                    raw,
                );
            }
        }
        if let Some(close) = &st.close {
            if !raw {
                wsframe::write_close(buf, close.code, &close.reason);
            }
            st.finished = true;
            if let Some(w) = st.finish_waker.take() {
                w.wake();
            }
            return Poll::Ready(Drained::Finished);
        }
        // Both lanes are empty. A lane's first room (four slots of 72 B)
        // goes too, so that a connection that only ever had a few frames
        // at a time (an idle subscriber: its CONNACK, its SUBACK) holds
        // no queue; a lane that grew past it is a busy connection's, kept
        // (given back at every wake-up, a fan-out's writers paid an
        // allocation per delivery or two: broker CPU +25% at 1 -> 50).
        if (1..=FIRST_ROOM).contains(&st.normal.capacity()) {
            st.normal = VecDeque::new();
        }
        if (1..=FIRST_ROOM).contains(&st.high.capacity()) {
            st.high = VecDeque::new();
        }
        if may_retire && st.retire {
            // Decided under the lock with both lanes empty: a push after
            // it finds no writer's waker and wakes whoever waits in
            // `poll_wanted` instead.
            st.retire = false;
            st.waker = None;
            return Poll::Ready(Drained::Retired);
        }
        st.waker = Some(cx.waker().clone());
        Poll::Pending
    }

    /// Asks the writer to end at its next idle moment (both lanes empty,
    /// no close asked for), handing its socket back to the connection's
    /// read loop, which then waits for frames with [`Outbound::poll_wanted`]
    /// and starts a writer again when they come: an idle connection holds
    /// no writer task. Wakes a writer that waits, so that it retires now.
    pub fn retire_writer(&self) {
        let mut st = self.state.lock();
        st.retire = true;
        let waker = st.waker.take();
        drop(st);
        if let Some(w) = waker {
            w.wake();
        }
    }

    /// Takes back a retirement asked for with [`Outbound::retire_writer`]
    /// and not yet done: the connection's loop needs its writer after
    /// all (a read came, whose handling may wait).
    pub fn keep_writer(&self) {
        self.state.lock().retire = false;
    }

    /// For a connection whose writer retired: `Ready` when there is
    /// something for a writer to do (frames queued, a close asked for, the
    /// queue finished), `Pending` with the waker registered, in the
    /// writer's place, otherwise: a push or a close wakes it (marking the
    /// queue finished does not; the loop learns of that at its next
    /// wake-up, as it always did).
    pub fn poll_wanted(&self, cx: &mut Context<'_>) -> Poll<()> {
        let mut st = self.state.lock();
        if !st.high.is_empty()
            || !st.normal.is_empty()
            || st.close.is_some()
            || st.finished
            || st.dropped_unreported > 0
        {
            return Poll::Ready(());
        }
        if !st.waker.as_ref().is_some_and(|w| w.will_wake(cx.waker())) {
            st.waker = Some(cx.waker().clone());
        }
        Poll::Pending
    }
}

/// What one [`Outbound::drain_into`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Drained {
    /// Laid frames into the buffer.
    Laid,
    /// Laid the close (or the queue was already finished): the stream ends.
    Finished,
    /// Nothing queued, and the writer was asked to retire.
    Retired,
}

/// Lays one frame into the write buffer: as a WebSocket frame, or (raw)
/// its bytes alone, control frames left out.
fn write_frame(buf: &mut BytesMut, f: &OutFrame, raw: bool) {
    if !raw {
        wsframe::write(buf, f.opcode, &[&f.head, &f.body]);
    } else if f.opcode == wsframe::TEXT || f.opcode == wsframe::BINARY {
        buf.extend_from_slice(&f.head);
        buf.extend_from_slice(&f.body);
    }
}

fn format_byte(f: Format) -> u8 {
    match f {
        Format::Json => 0,
        Format::Bincode => 1,
    }
}

fn format_from(b: u8) -> Format {
    if b == 1 {
        Format::Bincode
    } else {
        Format::Json
    }
}

/// The native format a subscription's encoding slot stands for.
fn slot_format(slot: Option<EncodingSlot>) -> Format {
    match slot {
        Some(EncodingSlot::NativeBincode) => Format::Bincode,
        _ => Format::Json,
    }
}

/// The encoding slot of a native format in [`Published::encoded`].
pub fn encoding_slot(format: Format) -> EncodingSlot {
    match format {
        Format::Json => EncodingSlot::NativeJson,
        Format::Bincode => EncodingSlot::NativeBincode,
    }
}

impl Sink for Outbound {
    fn id(&self) -> u64 {
        self.id
    }

    fn deliver(&self, sub: &Subscription, msg: &Arc<Published>) -> DeliveryOutcome {
        let format = slot_format(sub.encoding());
        let body = msg.encoded(encoding_slot(format), |m| {
            codec::message_body(format, &m.topic, m.seq, &m.payload, &m.headers, m.retained)
        });
        let prefix = match sub.tag() {
            SubTag::Prefix(p) => p.clone(),
            _ => Bytes::new(),
        };
        self.push(msg.priority, OutFrame::data(format, prefix, body))
            .into()
    }

    fn is_closed(&self) -> bool {
        self.is_closing()
    }

    fn deliver_queued(&self, sub: &Subscription, d: &QueuedDelivery<'_>) -> DeliveryOutcome {
        let format = slot_format(sub.encoding());
        let m = d.message;
        // One encode per delivery, from borrowed fields (each delivery goes
        // to one consumer, so there is nothing to share).
        let body = codec::delivery_frame(
            format,
            &codec::DeliveryRef {
                sub: &sub.id,
                queue: d.queue,
                id: d.id,
                seq: m.seq,
                count: m.deliveries,
                priority: m.priority,
                payload: &m.payload,
                headers: &m.headers,
            },
        );
        // High lane: the drop-oldest policy never discards a delivery (the
        // queue would only time it out); past the bound the queue keeps
        // the message and offers it again after this consumer's next ack.
        self.push_if_room(
            Priority::High,
            OutFrame::data(format, Bytes::new(), body.into()),
        )
        .into()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(len: usize) -> OutFrame {
        OutFrame::data(Format::Bincode, Bytes::new(), Bytes::from(vec![0u8; len]))
    }

    /// Every connection holds one queue in an `Arc`: at 200 B or less it
    /// is a 224 B allocation (mimalloc's 224 B class takes blocks of up to
    /// 217 B, measured; the `Arc` adds 16), apart from tokio's socket
    /// registrations and writer tasks (256 B), which a quiet connection
    /// frees, so that their pages can empty (benches/README.md).
    #[test]
    fn an_outbound_queue_fits_a_224_byte_allocation() {
        let size = std::mem::size_of::<Outbound>();
        assert!(size <= 200, "the outbound queue is {size} B");
    }

    #[test]
    fn drop_oldest_makes_room_and_counts() {
        let out = Outbound::new(1000, SlowConsumer::DropOldest, 8, Format::Json);
        for _ in 0..10 {
            out.push(Priority::Normal, frame(98)).unwrap();
        }
        assert_eq!(out.stats().pending_bytes, 1000);
        out.push(Priority::Normal, frame(98)).unwrap();
        let st = out.stats();
        assert_eq!((st.dropped, st.pending_bytes), (1, 1000));
    }

    #[test]
    fn a_frame_larger_than_the_room_is_refused_alone() {
        for policy in [SlowConsumer::DropOldest, SlowConsumer::Disconnect] {
            let out = Outbound::new(1000, policy, 8, Format::Json);
            out.push(Priority::Normal, frame(98)).unwrap();
            assert_eq!(
                out.push(Priority::Normal, frame(2000)),
                Err(PushError::Dropped)
            );
            // Nothing else was evicted and the session is not closed.
            assert_eq!(out.stats().pending_bytes, 100);
            assert!(!out.is_closing(), "{policy:?}");
            // High-lane bytes cannot be freed by evicting normal frames.
            for _ in 0..8 {
                out.push(Priority::High, frame(98)).unwrap();
            }
            assert_eq!(
                out.push(Priority::Normal, frame(298)),
                Err(PushError::Dropped)
            );
            assert_eq!(out.stats().pending_bytes, 900);
        }
    }

    /// Counts its wake-ups.
    struct Wakes(std::sync::atomic::AtomicUsize);

    impl std::task::Wake for Wakes {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    #[test]
    fn a_drain_timer_learns_when_the_writer_finishes() {
        let wakes = Arc::new(Wakes(std::sync::atomic::AtomicUsize::new(0)));
        let waker = Waker::from(wakes.clone());
        let mut cx = Context::from_waker(&waker);
        let woken = || wakes.0.load(Ordering::SeqCst);
        // A draining close: the queued frame goes first, then the close.
        let out = Outbound::new(1000, SlowConsumer::DropOldest, 8, Format::Json);
        out.push(Priority::Normal, frame(10)).unwrap();
        out.close(CloseRequest {
            code: 1000,
            reason: String::new(),
            drain: true,
        });
        assert!(out.poll_finished(&mut cx).is_pending());
        let mut buf = BytesMut::new();
        assert_eq!(
            out.drain_into(&mut buf, true, &mut cx),
            Poll::Ready(Drained::Laid)
        );
        assert!(
            out.poll_finished(&mut cx).is_pending(),
            "a frame is not the end"
        );
        let before = woken();
        assert_eq!(
            out.drain_into(&mut buf, true, &mut cx),
            Poll::Ready(Drained::Finished)
        );
        assert!(woken() > before, "the close frame wakes the timer");
        assert!(out.poll_finished(&mut cx).is_ready());
        // The connection dropped before anything was written.
        let out = Outbound::new(1000, SlowConsumer::DropOldest, 8, Format::Json);
        assert!(out.poll_finished(&mut cx).is_pending());
        let before = woken();
        out.mark_finished();
        assert!(woken() > before, "a dropped connection wakes the timer");
        assert!(out.poll_finished(&mut cx).is_ready());
    }

    /// A writer that waits with both lanes empty leaves an idle
    /// connection no queue room, but keeps a lane that grew (a busy
    /// connection's, which would otherwise allocate at every wake-up).
    #[test]
    fn a_waiting_writer_gives_back_only_a_first_room() {
        let wakes = Arc::new(Wakes(std::sync::atomic::AtomicUsize::new(0)));
        let waker = Waker::from(wakes);
        let mut cx = Context::from_waker(&waker);
        let rooms = |out: &Outbound| {
            let st = out.state.lock();
            (st.high.capacity(), st.normal.capacity())
        };
        let out = Outbound::new(1 << 20, SlowConsumer::DropOldest, 64, Format::Json);
        out.push(Priority::High, frame(10)).unwrap();
        out.push(Priority::Normal, frame(10)).unwrap();
        let mut buf = BytesMut::new();
        assert_eq!(
            out.drain_into(&mut buf, true, &mut cx),
            Poll::Ready(Drained::Laid)
        );
        assert!(rooms(&out).0 > 0 && rooms(&out).1 > 0);
        assert!(out.drain_into(&mut buf, true, &mut cx).is_pending());
        assert_eq!(
            rooms(&out),
            (0, 0),
            "an idle connection holds no queue room"
        );
        for _ in 0..20 {
            out.push(Priority::Normal, frame(10)).unwrap();
        }
        assert_eq!(
            out.drain_into(&mut buf, true, &mut cx),
            Poll::Ready(Drained::Laid)
        );
        assert!(out.drain_into(&mut buf, true, &mut cx).is_pending());
        assert!(rooms(&out).1 > FIRST_ROOM, "a lane that grew is kept");
    }

    /// A writer asked to retire finishes what is queued first, then
    /// retires at its first idle moment, and the frames that come after
    /// wake whoever waits in its place.
    #[test]
    fn a_retiring_writer_ends_only_when_nothing_is_queued() {
        let wakes = Arc::new(Wakes(std::sync::atomic::AtomicUsize::new(0)));
        let waker = Waker::from(wakes.clone());
        let mut cx = Context::from_waker(&waker);
        let woken = || wakes.0.load(Ordering::SeqCst);
        let out = Outbound::new(1000, SlowConsumer::DropOldest, 8, Format::Json);
        let mut buf = BytesMut::new();
        assert!(out.drain_into(&mut buf, true, &mut cx).is_pending());
        out.push(Priority::Normal, frame(10)).unwrap();
        let before = woken();
        out.retire_writer();
        assert_eq!(
            out.drain_into(&mut buf, true, &mut cx),
            Poll::Ready(Drained::Laid),
            "what is queued is written first"
        );
        assert!(
            out.drain_into(&mut buf, false, &mut cx).is_pending(),
            "not while a batch is being laid"
        );
        assert_eq!(
            out.drain_into(&mut buf, true, &mut cx),
            Poll::Ready(Drained::Retired)
        );
        assert!(!out.is_closing(), "the connection lives on");
        assert!(out.poll_wanted(&mut cx).is_pending());
        assert_eq!(woken(), before);
        out.push(Priority::Normal, frame(10)).unwrap();
        assert!(
            woken() > before,
            "a frame wakes the one waiting in its place"
        );
        assert!(out.poll_wanted(&mut cx).is_ready());
        // The next writer runs as usual, and is not retired again unasked.
        assert_eq!(
            out.drain_into(&mut buf, true, &mut cx),
            Poll::Ready(Drained::Laid)
        );
        assert!(out.drain_into(&mut buf, true, &mut cx).is_pending());
        // A close is wanted too.
        out.close(CloseRequest {
            code: 1000,
            reason: String::new(),
            drain: true,
        });
        assert!(out.poll_wanted(&mut cx).is_ready());
    }

    #[test]
    fn disconnect_policy_closes_when_the_queue_is_full() {
        let out = Outbound::new(1000, SlowConsumer::Disconnect, 8, Format::Json);
        for _ in 0..10 {
            out.push(Priority::Normal, frame(98)).unwrap();
        }
        assert_eq!(
            out.push(Priority::Normal, frame(98)),
            Err(PushError::Closed)
        );
        assert!(out.is_closing());
    }
}
