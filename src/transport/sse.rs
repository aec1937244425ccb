//! `GET /sse?topic=FILTER`: a topic's (or a filter's) messages as
//! Server-Sent Events, for browsers (`EventSource`) and `curl -N` alike:
//! one `message` event per message; a comment every 15 s so proxies keep
//! the stream open; a `dropped` event when the reader fell behind
//! ([`BUFFER`] messages waiting) and messages were dropped for it.
//! Credentials come as for a WebSocket upgrade (an `Authorization`
//! header, or `?token=`, since `EventSource` cannot send headers), and so
//! do the `Host` and `Origin` checks; the principal needs `subscribe` on
//! the filter.
//!
//! An event's `id` is the message's position: `topic@seq`, and
//! `topic@offset:epoch` on a topic that keeps a history (`[[history]]`).
//! A browser that reconnects sends the last one back (`Last-Event-ID`):
//! on a topic with history the stream resumes there (the missed messages
//! first, then the live ones) and begins with a `recovery` event saying
//! `recovered: true`; anywhere else (a filter, a topic without history,
//! another epoch, a position pushed out of the history) the `recovery`
//! event says `recovered: false` and why, rather than silently missing
//! what came between.

use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use actix_web::{HttpRequest, HttpResponse, web};
use base64::Engine as _;
use bytes::Bytes;
use serde::Deserialize;
use tokio::sync::{OwnedSemaphorePermit, Semaphore, mpsc};

use super::{ApiError, AppState};
use crate::auth::{Right, Way};
use crate::broker::{DeliveryOutcome, Published, Sink, SubTag, Subscription, next_sink_id};
use crate::protocol::frame::ErrorCode;

/// Messages waiting for one stream's reader; past it they are dropped
/// (and the reader told how many).
const BUFFER: usize = 1024;
/// Most streams open at once (each holds a subscription and a buffer).
const MAX_STREAMS: usize = 10_000;
/// How often an idle stream sends a comment.
const HEARTBEAT: Duration = Duration::from_secs(15);
/// How often a stream looks whether the broker is stopping (a graceful
/// stop waits for open responses: an idle stream must not hold it up).
const STOP_CHECK: Duration = Duration::from_secs(1);

/// The slots of [`MAX_STREAMS`] concurrent event streams.
pub(crate) fn sse_slots() -> Arc<Semaphore> {
    Arc::new(Semaphore::new(MAX_STREAMS))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct SseQuery {
    /// The topic or filter.
    topic: String,
    /// A token, for clients that cannot send `Authorization`.
    #[serde(default)]
    #[allow(dead_code)]
    token: Option<String>,
}

/// Where a subscription's messages go: the stream's buffer.
struct SseSink {
    id: u64,
    tx: mpsc::Sender<Arc<Published>>,
    closed: AtomicBool,
    dropped: AtomicU64,
}

impl Sink for SseSink {
    fn id(&self) -> u64 {
        self.id
    }

    fn deliver(&self, _sub: &Subscription, msg: &Arc<Published>) -> DeliveryOutcome {
        match self.tx.try_send(msg.clone()) {
            Ok(()) => DeliveryOutcome::Queued,
            Err(mpsc::error::TrySendError::Full(_)) => {
                self.dropped.fetch_add(1, Ordering::Relaxed);
                DeliveryOutcome::Dropped
            }
            Err(mpsc::error::TrySendError::Closed(_)) => {
                self.closed.store(true, Ordering::Relaxed);
                DeliveryOutcome::Closed
            }
        }
    }

    fn is_closed(&self) -> bool {
        self.closed.load(Ordering::Relaxed) || self.tx.is_closed()
    }
}

/// One message as an event: `id: topic@seq`, the message as JSON (the
/// payload as text, or base64 with `"encoding":"base64"` when it is not
/// UTF-8).
fn message_event(m: &Published) -> Bytes {
    let mut o = serde_json::json!({"topic": &*m.topic, "seq": m.seq});
    match std::str::from_utf8(&m.payload) {
        Ok(text) => o["payload"] = text.into(),
        Err(_) => {
            o["payload"] = base64::engine::general_purpose::STANDARD
                .encode(&m.payload)
                .into();
            o["encoding"] = "base64".into();
        }
    }
    if !m.headers.is_empty() {
        o["headers"] = serde_json::to_value(&m.headers).unwrap_or_default();
    }
    if m.retained {
        o["retained"] = true.into();
    }
    let id = match &m.epoch {
        Some(epoch) => format!("{}@{}:{epoch}", m.topic, m.seq),
        None => format!("{}@{}", m.topic, m.seq),
    };
    Bytes::from(format!("id: {id}\nevent: message\ndata: {o}\n\n"))
}

/// The position a `Last-Event-ID` names on `topic` (`topic@offset:epoch`),
/// if it names one there.
fn position<'a>(last_id: &'a str, topic: &str) -> Option<(&'a str, u64)> {
    let (t, at) = last_id.rsplit_once('@')?;
    let (offset, epoch) = at.split_once(':')?;
    (t == topic && !epoch.is_empty()).then_some((epoch, offset.parse().ok()?))
}

/// The `recovery` event that begins a resumed stream.
fn recovery_event(r: &crate::broker::Recovery) -> Bytes {
    let mut o = serde_json::json!({
        "recovered": r.recovered,
        "epoch": r.epoch,
        "offset": r.offset,
        "replayed": r.replayed,
    });
    if let Some(reason) = &r.reason {
        o["reason"] = reason.as_str().into();
    }
    Bytes::from(format!("event: recovery\ndata: {o}\n\n"))
}

/// The body: events as messages arrive, heartbeats between them, until
/// the client goes (actix drops the body), its credential expires, or
/// the broker shuts down. Dropping it ends the subscription.
struct Events {
    rx: mpsc::Receiver<Arc<Published>>,
    sink: Arc<SseSink>,
    sub: Subscription,
    /// Drops already told to the reader.
    told: u64,
    /// An event to send first (a `recovery` answer).
    first: Option<Bytes>,
    heartbeat: tokio::time::Interval,
    stop_check: tokio::time::Interval,
    expires: Option<Pin<Box<tokio::time::Sleep>>>,
    app: web::Data<AppState>,
    _slot: OwnedSemaphorePermit,
}

impl Drop for Events {
    fn drop(&mut self) {
        // Effective at once; the topics drop it as they can.
        self.sub.cancel();
        self.sink.closed.store(true, Ordering::Relaxed);
    }
}

impl futures_core::Stream for Events {
    type Item = Result<Bytes, std::convert::Infallible>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = self.get_mut();
        if let Some(first) = this.first.take() {
            return Poll::Ready(Some(Ok(first)));
        }
        // The broker stopping closes the admin streams' slots: these end
        // with them (looked at once a second, and at every wake-up).
        while this.stop_check.poll_tick(cx).is_ready() {}
        if this.app.streams.is_closed()
            || this
                .expires
                .as_mut()
                .is_some_and(|e| e.as_mut().poll(cx).is_ready())
        {
            return Poll::Ready(None);
        }
        let dropped = this.sink.dropped.load(Ordering::Relaxed);
        if dropped > this.told {
            let n = dropped - this.told;
            this.told = dropped;
            let e = format!("event: dropped\ndata: {{\"count\":{n}}}\n\n");
            return Poll::Ready(Some(Ok(Bytes::from(e))));
        }
        match this.rx.poll_recv(cx) {
            Poll::Ready(Some(m)) => {
                this.heartbeat.reset();
                return Poll::Ready(Some(Ok(message_event(&m))));
            }
            Poll::Ready(None) => return Poll::Ready(None),
            Poll::Pending => {}
        }
        match this.heartbeat.poll_tick(cx) {
            Poll::Ready(_) => Poll::Ready(Some(Ok(Bytes::from_static(b": keep-alive\n\n")))),
            Poll::Pending => Poll::Pending,
        }
    }
}

/// `GET /sse?topic=FILTER`: 200 `text/event-stream`; 401 without
/// credentials where they are required, 403 without `subscribe` on the
/// filter (or from a foreign `Origin` or `Host`), 400 for a bad filter,
/// 503 `overloaded` past [`MAX_STREAMS`].
pub(crate) async fn stream(
    req: HttpRequest,
    app: web::Data<AppState>,
) -> Result<HttpResponse, ApiError> {
    super::origin::upgrade(&req, &app.config.server)?;
    let q = web::Query::<SseQuery>::from_query(req.query_string()).map_err(|e| {
        ApiError::coded(
            ErrorCode::InvalidField,
            format!("query: {e} (expected ?topic=FILTER, and ?token= if needed)"),
        )
    })?;
    let Some(principal) = super::credentials::principal(&req, &app, true, Way::Http).await? else {
        return Err(ApiError::coded(
            ErrorCode::Unauthorized,
            "credentials are required: Authorization: Bearer TOKEN or Basic, or ?token=".into(),
        ));
    };
    let filter = q.into_inner().topic;
    app.broker
        .check_filter(&filter)
        .map_err(|e| ApiError::coded(e.code(), format!("topic: {e}")))?;
    if !principal.may(Right::Subscribe(&filter)) {
        return Err(ApiError::coded(
            ErrorCode::Forbidden,
            format!("{:?} may not subscribe {filter:?}", principal.name()),
        ));
    }
    let slot = app.sse.clone().try_acquire_owned().map_err(|_| {
        ApiError::coded(
            ErrorCode::Overloaded,
            format!("at most {MAX_STREAMS} event streams may be open at once"),
        )
    })?;
    let last_id = req
        .headers()
        .get("last-event-id")
        .map(|v| v.to_str().unwrap_or_default().to_owned());
    // A resumed stream's buffer also holds what it replays.
    let replay = app.config.history.iter().map(|h| h.size).max().unwrap_or(0);
    // Only a position this stream can resume from raises it.
    let resumes = last_id
        .as_deref()
        .is_some_and(|l| position(l, &filter).is_some());
    let (tx, rx) = mpsc::channel(BUFFER + if resumes { replay } else { 0 });
    let sink = Arc::new(SseSink {
        id: next_sink_id(),
        tx,
        closed: AtomicBool::new(false),
        dropped: AtomicU64::new(0),
    });
    let sub = Subscription::new(sink.clone(), "sse", &filter, SubTag::None, None);
    let first = match &last_id {
        // A reconnect asks to resume: where the topic keeps a history,
        // from the position it names.
        Some(last) if !crate::routing::is_wildcard(&filter) => {
            let recovery = app
                .broker
                .history()
                .subscribe_recovering(sub.clone(), position(last, &filter))
                .await
                .map_err(|e| ApiError::coded(e.code(), e.to_string()))?;
            let mut r = recovery;
            if r.reason.is_some() && r.epoch.is_empty() {
                r.reason = Some(
                    "no history is kept for this topic: messages published while \
                     disconnected are not replayed"
                        .into(),
                );
            }
            Some(recovery_event(&r))
        }
        other => {
            app.broker
                .subscribe(sub.clone())
                .await
                .map_err(|e| ApiError::coded(e.code(), e.to_string()))?;
            other.as_ref().map(|_| {
                Bytes::from_static(
                    b"event: recovery\ndata: {\"recovered\":false,\"reason\":\"a filter with wildcards is not resumed: messages published while disconnected are not replayed\"}\n\n",
                )
            })
        }
    };
    let mut heartbeat =
        tokio::time::interval_at(tokio::time::Instant::now() + HEARTBEAT, HEARTBEAT);
    heartbeat.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut stop_check = tokio::time::interval(STOP_CHECK);
    stop_check.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let expires = principal
        .expires_at()
        .map(|at| Box::pin(tokio::time::sleep_until(at.into())));
    let events = Events {
        rx,
        sink,
        sub,
        told: 0,
        first,
        heartbeat,
        stop_check,
        expires,
        app,
        _slot: slot,
    };
    Ok(super::dashboard::event_stream(events))
}
