//! The live operator dashboard: `GET /dashboard` serves a page whose
//! assets are compiled into the binary (no CDN, it works offline), and
//! `GET /admin/stream` feeds it a snapshot of the broker once a second as
//! Server-Sent Events. The page holds no data and needs no credentials;
//! the stream needs the admin right, like the admin routes it draws on.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, ready};
use std::time::{Duration, SystemTime};

use actix_web::body::MessageBody;
use actix_web::http::header;
use actix_web::{HttpRequest, HttpResponse, web};
use bytes::Bytes;
use serde::Serialize;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use super::admin::{Overview, overview_of};
use super::credentials::Caller;
use super::health::Health;
use super::{ApiError, AppState};
use crate::auth::Right;
use crate::broker::QueueInfo;
use crate::broker::jobs::JobsInfo;
use crate::protocol::frame::ErrorCode;
use crate::session::SessionInfo;

/// Most `GET /admin/stream` responses open at once, so that dashboards
/// left open cannot take a worker's time without bound.
pub const MAX_STREAMS: usize = 16;

/// How long one stream lasts; the page reconnects, so a principal whose
/// rights were revoked is checked again within this time.
pub const STREAM_LIFETIME: Duration = Duration::from_secs(3600);

/// How often the stream sends a snapshot: the page's rates are per
/// second, and a person watching needs no more.
pub const STREAM_PERIOD: Duration = Duration::from_secs(1);

/// Most sessions one snapshot lists (the oldest first), so that a broker
/// with many connections does not send megabytes a second.
pub const MAX_STREAM_SESSIONS: usize = 200;

/// Most queues one snapshot lists (in name order), for the same reason.
pub const MAX_STREAM_QUEUES: usize = 500;

const INDEX_HTML: &str = include_str!("../../assets/dashboard/index.html");
const APP_JS: &str = include_str!("../../assets/dashboard/app.js");
const STYLE_CSS: &str = include_str!("../../assets/dashboard/style.css");
const FAVICON_SVG: &str = include_str!("../../assets/dashboard/favicon.svg");

/// Scripts and styles from this origin only, data only from this origin,
/// no framing: the page runs no inline code and loads nothing foreign.
const CSP: &str = "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self'; \
                   connect-src 'self'; object-src 'none'; base-uri 'self'; form-action 'none'; \
                   frame-ancestors 'none'";

/// Where the page's `<base href>` goes: the page finds its assets and the
/// API relative to it, so it works where an app mounts the routes under a
/// scope (`/broker/dashboard`).
const BASE_SLOT: &str = "{{BASE}}";

/// The slots of [`MAX_STREAMS`] concurrent streams, one per [`AppState`].
/// Closing them at shutdown ends every open stream within a tick, so that
/// an open dashboard does not hold up a graceful stop.
pub(crate) fn stream_slots() -> Arc<Semaphore> {
    Arc::new(Semaphore::new(MAX_STREAMS))
}

/// An embedded asset with the headers every dashboard response carries.
fn asset(content_type: &'static str, body: impl MessageBody + 'static) -> HttpResponse {
    HttpResponse::Ok()
        .insert_header((header::CONTENT_TYPE, content_type))
        .insert_header((header::CACHE_CONTROL, "no-cache"))
        .insert_header((header::CONTENT_SECURITY_POLICY, CSP))
        .insert_header((header::X_CONTENT_TYPE_OPTIONS, "nosniff"))
        .insert_header((header::REFERRER_POLICY, "no-referrer"))
        .body(body)
}

/// `GET /dashboard` and `/dashboard/`: the page, its base the
/// dashboard's own directory (`/dashboard/`, under whatever scope).
pub(crate) async fn page(req: HttpRequest) -> HttpResponse {
    let mut base = req.path().trim_end_matches('/').to_owned();
    base.push('/');
    asset(
        "text/html; charset=utf-8",
        INDEX_HTML.replacen(BASE_SLOT, &attribute(&base), 1),
    )
}

/// `text` escaped for a double-quoted HTML attribute.
fn attribute(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '"' => out.push_str("&quot;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// `GET /dashboard/app.js`.
pub(crate) async fn app_js() -> HttpResponse {
    asset("text/javascript; charset=utf-8", APP_JS)
}

/// `GET /dashboard/style.css`.
pub(crate) async fn style_css() -> HttpResponse {
    asset("text/css; charset=utf-8", STYLE_CSS)
}

/// `GET /dashboard/favicon.svg`.
pub(crate) async fn favicon() -> HttpResponse {
    asset("image/svg+xml", FAVICON_SVG)
}

/// One event of `GET /admin/stream`: what the admin routes answer, at
/// one instant, so that the page needs one connection instead of four
/// polls.
#[derive(Debug, Serialize)]
pub struct Snapshot {
    /// When it was taken, in milliseconds since the Unix epoch.
    pub t: u64,
    /// As `GET /admin/overview`.
    pub overview: Overview,
    /// As `GET /queues` (at most [`MAX_STREAM_QUEUES`]).
    pub queues: Vec<QueueInfo>,
    /// As `GET /admin/sessions` (at most [`MAX_STREAM_SESSIONS`], the
    /// oldest first).
    pub sessions: Vec<SessionInfo>,
    /// As `GET /admin/jobs`; null when the jobs resource did not answer.
    pub jobs: Option<JobsInfo>,
}

fn unix_ms() -> u64 {
    SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// Takes a snapshot and frames it as one SSE event.
async fn event(caller: Arc<Caller>, app: web::Data<AppState>, health: web::Data<Health>) -> Bytes {
    let mut sessions = app.sessions.list();
    let overview = overview_of(&app, &health, &sessions).await;
    let queues = super::queues::visible(&caller, &app, MAX_STREAM_QUEUES).await;
    sessions.sort_unstable_by_key(|s| (s.since_unix_s, s.id));
    sessions.truncate(MAX_STREAM_SESSIONS);
    let snapshot = Snapshot {
        t: unix_ms(),
        jobs: overview.jobs,
        overview,
        queues,
        sessions,
    };
    // JSON has no raw newlines outside strings, and serde_json escapes
    // them inside: the event is one `data:` line.
    let mut out = b"data: ".to_vec();
    if serde_json::to_writer(&mut out, &snapshot).is_err() {
        // Not reachable with these types; an SSE comment keeps the
        // stream well-formed regardless.
        return Bytes::from_static(b": snapshot failed\n\n");
    }
    out.extend_from_slice(b"\n\n");
    Bytes::from(out)
}

type Building = Pin<Box<dyn Future<Output = Bytes>>>;

/// The body of `GET /admin/stream`. actix drops it when the client goes
/// away; dropping it frees its slot.
struct Events {
    caller: Arc<Caller>,
    app: web::Data<AppState>,
    health: web::Data<Health>,
    tick: tokio::time::Interval,
    end: Pin<Box<tokio::time::Sleep>>,
    building: Option<Building>,
    _slot: OwnedSemaphorePermit,
}

impl futures_core::Stream for Events {
    type Item = Result<Bytes, std::convert::Infallible>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = self.get_mut();
        // Past its hour, or the broker is shutting down (it closes the
        // slots; the tick polls here at least once a second).
        if this.end.as_mut().poll(cx).is_ready() || this.app.streams.is_closed() {
            return Poll::Ready(None);
        }
        loop {
            if let Some(building) = this.building.as_mut() {
                let bytes = ready!(building.as_mut().poll(cx));
                this.building = None;
                return Poll::Ready(Some(Ok(bytes)));
            }
            ready!(this.tick.poll_tick(cx));
            this.building = Some(Box::pin(event(
                this.caller.clone(),
                this.app.clone(),
                this.health.clone(),
            )));
        }
    }
}

/// `GET /admin/stream`: 200 `text/event-stream`, one snapshot at once
/// and then one a second for at most an hour; 401/403 without the admin
/// right, 503 `overloaded` past [`MAX_STREAMS`].
pub(crate) async fn stream(
    caller: Caller,
    app: web::Data<AppState>,
    health: web::Data<Health>,
) -> Result<HttpResponse, ApiError> {
    caller.require(Right::Admin)?;
    let slot = app.streams.clone().try_acquire_owned().map_err(|_| {
        ApiError::coded(
            ErrorCode::Overloaded,
            format!("at most {MAX_STREAMS} admin streams may be open at once"),
        )
    })?;
    let mut tick = tokio::time::interval(STREAM_PERIOD);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let events = Events {
        caller: Arc::new(caller),
        app,
        health,
        tick,
        end: Box::pin(tokio::time::sleep(STREAM_LIFETIME)),
        building: None,
        _slot: slot,
    };
    Ok(event_stream(events))
}

/// A `text/event-stream` response streaming `events`: not cached, passed
/// on by proxies as it comes, the connection closed with it. Every
/// Server-Sent Events route answers with it.
pub(crate) fn event_stream<S>(events: S) -> HttpResponse
where
    S: futures_core::Stream<Item = Result<Bytes, std::convert::Infallible>> + 'static,
{
    HttpResponse::Ok()
        .insert_header((header::CONTENT_TYPE, "text/event-stream"))
        .insert_header((header::CACHE_CONTROL, "no-cache"))
        .insert_header((header::X_CONTENT_TYPE_OPTIONS, "nosniff"))
        // Proxies (nginx) must pass events on as they come.
        .insert_header(("x-accel-buffering", "no"))
        // The connection ends with the stream: an idle keep-alive would
        // hold up a graceful stop for its timeout.
        .force_close()
        .streaming(events)
}

#[cfg(test)]
mod tests {
    use super::attribute;

    #[test]
    fn a_base_path_cannot_leave_its_attribute() {
        assert_eq!(attribute("/broker/dashboard/"), "/broker/dashboard/");
        assert_eq!(
            attribute(r#"/a"><script>x</script>&'/"#),
            "/a&quot;&gt;&lt;script&gt;x&lt;/script&gt;&amp;&#39;/"
        );
    }

    #[test]
    fn the_page_has_one_base_slot_and_no_inline_script() {
        assert_eq!(super::INDEX_HTML.matches(super::BASE_SLOT).count(), 1);
        let scripts = super::INDEX_HTML.matches("<script").count();
        assert_eq!(scripts, super::INDEX_HTML.matches("<script src=").count());
        assert!(
            !super::INDEX_HTML.contains(" style="),
            "no inline styles (CSP)"
        );
        assert!(
            !super::INDEX_HTML.contains(" on"),
            "no inline handlers (CSP)"
        );
    }
}
