//! actix-web routes: what Wharf exposes over HTTP and WebSocket. Handlers
//! turn typed errors into HTTP statuses with a JSON body in one place
//! ([`ApiError`]).
//!
//! # Design notes
//!
//! ## The read loop
//! One WebSocket read side serves every endpoint (`wsloop.rs`): native
//! (`ws.rs`), MQTT (`mqtt.rs`) and an app's typed sockets (`typed.rs`) are
//! each a `Handler`. `read_loop` reads from a `ByteFeed` (`source.rs`: the
//! socket itself, or actix-web's request payload), decodes frames with
//! `wsframe::FrameCodec` (bounded by `session.max_frame`: a frame whose
//! header announces more is refused before its bytes are buffered),
//! answers pings, assembles fragmented messages, sends a ping every
//! `ping_interval_s`, hands each complete message to `Handler::message`,
//! and calls `Handler::end` when the read side ends. It closes a connection
//! (1001) at its handler's idle deadline, or at the credential's expiry if
//! earlier. One timer serves the idle deadline, the next ping and letting
//! the read buffer go, armed at the earliest and looked at again only when
//! it fires or when a deadline moves earlier: no timer work per read.
//!
//! A future keeps its arguments and the state of what it awaits for as long
//! as it lives, so a connection would carry its handler twice and its
//! largest message future while it waits for bytes. So `serve` boxes the
//! handler, the connections' loops are `async` blocks rather than `async
//! fn`s (whose futures keep each argument twice: as passed and as the
//! local it moves to), a connection's future handed to actix-server is
//! boxed (its service wrapper keeps the future beside the one it awaits),
//! and bytes are handled in a boxed burst (`Reader::burst`): what
//! is buffered, then, when the source is the socket, whatever else has
//! arrived, until the source answers `Pending` or `BURST_BYTES` (64 KiB)
//! have been read; then the loop yields, so the writers this traffic woke
//! write before more is read (MQTT over TCP yields the same way). Read on
//! until tokio's cooperative budget ran out, a fast publisher's burst was
//! megabytes, which piled up in its subscribers' outbound queues (430 MB
//! resident in an MQTT/WS 1 -> 1 run, and a third of its throughput). The
//! read buffer is kept for a second after a burst (`BUFFER_LINGER`), then
//! dropped.
//!
//! The MQTT handler closes on a text message (1003), feeds binary ones to
//! `MqttSession::data`, and closes a connection past the rate with 1008
//! (dropping frames would break the packet stream). MQTT over TCP and TLS
//! (`mqtt_tcp.rs`) runs the same session on a byte stream: an actix-server
//! of its own (`server.rs`, as many workers as HTTP) accepts on `[mqtt]
//! tcp_bind` and `tls_bind` (the `[server.tls]` certificate, no ALPN); the
//! reader hands whatever arrived to `MqttSession::data`, the outbound queue
//! writes raw bytes (`Outbound::set_raw`), and one timer per connection
//! serves the keep-alive and the credential's expiry. A plain-TCP
//! connection quiet for `[mqtt] park_after_ms` is parked (`park.rs`): out
//! of any task, its socket in its worker's lot, until it is wanted.
//!
//! ## Lean WebSockets
//! A WebSocket served the actix-web way keeps actix-http's read and write
//! buffers (8 KiB each) while its response body streams. With `[server]
//! lean_websockets` (the default) the server (`server.rs` builds
//! actix-web's `HttpServer` by hand for this) registers an upgrade service
//! with actix-http (`raw.rs`): an upgrade request still runs through the
//! same routes (a second instance of the app per worker), marked
//! `RawUpgrade`; `wsloop::serve` answers 101 with a `Handover` instead of a
//! body stream; the upgrade service writes the 101, takes the socket and
//! the bytes read past the request head, drops the rest of actix-http's
//! state, and runs the same `read_loop` over a `ByteSource` (reads land in
//! one 64 KiB scratch buffer per worker thread; only what arrived is kept)
//! with `write_loop`, each in a task of its own (actix-http's dispatcher
//! ends at the 101; the server counts these connections itself, against
//! `max_connections` and for its graceful stop). Refusals are written whole and
//! the connection closed; another upgrade (h2c) gets its route's answer,
//! then the connection closes. Apps that mount the routes in their own
//! `HttpServer` keep the actix-web path. An idle WebSocket connection then
//! costs about 3.0 KiB, an MQTT/TCP one about 2.2 (benches/README.md has
//! the numbers and what each still holds). It was off by default while
//! MQTT over WebSocket 1 -> 1 ran 30% slower on it, until bursts were
//! bounded at 64 KiB; both paths now run at the same rate. An MQTT/TCP
//! connection runs in a task of its own too (counted by the server the
//! same way), and its writer retires once the connection has been quiet
//! for about a second (`Outbound::retire_writer`): the loop waits for
//! frames in its place (`Outbound::poll_wanted`) and starts a writer
//! again when they come, or when a read comes.
//!
//! ## Memory after connections close
//! mimalloc gives freed pages back only when the owning thread next calls
//! into it, and an idle worker makes no call: the library runs the hook the
//! binary hands it (`tidy.rs`, `alloc_tidy.rs`, which say why and what was
//! measured) on HTTP and MQTT workers in the seconds after their traffic
//! stops (reads and writes are counted per thread, `tidy::traffic`) and on
//! task-queue workers once idle, never while busy; the purge's system calls
//! happen on the binary's own `wharf-alloc` thread. A draining close's
//! timer ends when the writer finishes (`Outbound::poll_finished`) rather
//! than hold the outbound queue for its whole 10 s, and the registries
//! (sessions, topics, the trie's children) shrink their tables when
//! three-quarters empty (`maps::shrink_if_sparse`).
//!
//! ## The dashboard
//! `GET /dashboard` (`dashboard.rs`) is one HTML page, one script and one
//! stylesheet from `assets/dashboard/`, compiled in with `include_str!`: no
//! CDN, no file lookup at run time, the same version as the broker. The
//! script is plain JavaScript with no build step, and draws its charts as
//! SVG polylines itself: a chart library would have been ~50 KB and an npm
//! step for two line charts. Every string is set with `textContent`, and
//! the Content-Security-Policy (`default-src 'self'`, no inline script)
//! refuses an injected script anyway. The data comes from `GET
//! /admin/stream`, Server-Sent Events carrying the admin routes' answers
//! once a second (built by the same functions), read with `fetch()` rather
//! than `EventSource`, which cannot send an `Authorization` header: a token
//! travels as `Bearer`, never in a URL or a cookie, and a 401 is a status
//! the page can act on. The stream is a `Stream` of its own (an `Interval`
//! and the snapshot future; nothing spawned, dropped when the client
//! leaves), holds one of `MAX_STREAMS` (16) permits, lasts at most
//! `STREAM_LIFETIME` (an hour), and ends within a tick of shutdown.
//!
//! ## Errors
//! `error.rs` is where errors become HTTP answers: `ApiError` (a status, a
//! code, a message, as `{"error":{"code","message"}}`), the status of each
//! protocol `ErrorCode` (`http_status`, so a code has one status on every
//! route) and the codes only HTTP has (`HttpCode`). Handlers take the
//! `Caller` extractor (`credentials.rs`), which authenticates before a body
//! is read (401, 403, 429), and reads bodies through `BodyReader`
//! (`body.rs`: bounded in size, time and number read at once).

mod admin;
mod body;
mod client_js;
mod credentials;
mod dashboard;
mod error;
mod health;
mod jobs;
mod metrics;
mod mqtt;
pub(crate) mod mqtt_tcp;
mod origin;
mod park;
mod queues;
pub(crate) mod raw;
mod rules;
mod source;
mod sse;
mod topics;
pub(crate) mod typed;
mod ws;
mod wsloop;

use std::sync::Arc;

pub use crate::protocol::jobs::{JobEnqueued, OutcomeReply, Registered};
pub use admin::{Denied, Overview, SessionCounts, TopicPage, TopicRow};
pub use body::BodyReader;
pub use client_js::CLIENT_JS;
pub(crate) use dashboard::stream_slots;
pub use dashboard::{
    MAX_STREAM_QUEUES, MAX_STREAM_SESSIONS, MAX_STREAMS, STREAM_LIFETIME, STREAM_PERIOD, Snapshot,
};
pub use error::ApiError;
pub use health::{Health, HealthReport};
pub use queues::{BrowseReply, BrowsedMessage, EnqueueReply, MoveReply, PurgeReply, RedriveReply};
pub(crate) use sse::sse_slots;
pub use topics::{HEADER_PREFIX, HistoryMessage, HistoryReply, MAX_HISTORY_PAGE, PublishReply};

use actix_web::web;

use crate::broker::Broker;
use crate::broker::jobs::Jobs;
use crate::config::Config;
use crate::session::Sessions;

/// What the routes share: the broker, the live sessions and the config.
#[derive(Clone)]
pub struct AppState {
    /// The broker core.
    pub broker: Broker,
    /// Jobs and workers.
    pub jobs: Jobs,
    /// Live WebSocket sessions.
    pub sessions: Sessions,
    /// The configuration in force.
    pub config: Arc<Config>,
    /// How request bodies are read (size, time and concurrency bounds).
    pub bodies: BodyReader,
    /// Who may connect and what each principal may do.
    pub auth: crate::auth::Auth,
    /// Slots for the dashboard's `GET /admin/stream`, so that open
    /// dashboards are bounded ([`MAX_STREAMS`]).
    pub(crate) streams: Arc<tokio::sync::Semaphore>,
    /// Slots for `GET /sse` event streams (each holds a subscription).
    pub(crate) sse: Arc<tokio::sync::Semaphore>,
    /// The rules (`GET /admin/rules`, their reload).
    pub rules: Arc<crate::rules::Rules>,
    /// The cluster this node is part of (`GET /admin/cluster`).
    pub cluster: Option<crate::cluster::Cluster>,
    /// `[session]`, shared by every connection's session: one copy, not
    /// ~100 B in each idle connection.
    pub(crate) session_config: Arc<crate::config::SessionConfig>,
}

/// Mounts Wharf's routes on an actix `App` or scope. The caller must have
/// registered `web::Data<Health>` and `web::Data<AppState>`.
pub fn routes(cfg: &mut web::ServiceConfig) {
    cfg.service(
        web::resource("/health")
            .route(web::get().to(health::get))
            .default_service(web::to(error::method_not_allowed)),
    )
    .service(
        web::resource("/ws")
            .route(web::get().to(ws::upgrade))
            .default_service(web::to(error::method_not_allowed)),
    )
    .service(
        web::resource("/")
            .guard(actix_web::guard::fn_guard(mqtt::offers_mqtt))
            .route(web::get().to(mqtt::upgrade_at_root)),
    )
    .service(
        web::resource("/mqtt")
            .route(web::get().to(mqtt::upgrade))
            .default_service(web::to(error::method_not_allowed)),
    )
    .service(
        web::resource("/metrics")
            .route(web::get().to(metrics::get))
            .default_service(web::to(error::method_not_allowed)),
    )
    .service(
        web::resource("/client.js")
            .route(web::get().to(client_js::client_js))
            .default_service(web::to(error::method_not_allowed)),
    )
    .service(
        web::resource(["/dashboard", "/dashboard/"])
            .route(web::get().to(dashboard::page))
            .default_service(web::to(error::method_not_allowed)),
    )
    .service(
        web::resource("/dashboard/app.js")
            .route(web::get().to(dashboard::app_js))
            .default_service(web::to(error::method_not_allowed)),
    )
    .service(
        web::resource("/dashboard/style.css")
            .route(web::get().to(dashboard::style_css))
            .default_service(web::to(error::method_not_allowed)),
    )
    .service(
        web::resource("/dashboard/favicon.svg")
            .route(web::get().to(dashboard::favicon))
            .default_service(web::to(error::method_not_allowed)),
    )
    .service(
        web::resource("/admin/stream")
            .route(web::get().to(dashboard::stream))
            .default_service(web::to(error::method_not_allowed)),
    )
    .service(
        web::resource("/admin/sessions")
            .route(web::get().to(list_sessions))
            .default_service(web::to(error::method_not_allowed)),
    )
    .service(
        web::resource("/admin/sessions/{id}/close")
            .route(web::post().to(admin::close_session))
            .default_service(web::to(error::method_not_allowed)),
    )
    .service(
        web::resource("/admin/rules")
            .route(web::get().to(rules::list))
            .default_service(web::to(error::method_not_allowed)),
    )
    .service(
        web::resource("/admin/rules/reload")
            .route(web::post().to(rules::reload))
            .default_service(web::to(error::method_not_allowed)),
    )
    .service(
        web::resource("/admin/overview")
            .route(web::get().to(admin::overview))
            .default_service(web::to(error::method_not_allowed)),
    )
    .service(
        web::resource("/admin/cluster")
            .route(web::get().to(admin::cluster))
            .default_service(web::to(error::method_not_allowed)),
    )
    .service(
        web::resource("/admin/topics")
            .route(web::get().to(admin::topics))
            .default_service(web::to(error::method_not_allowed)),
    )
    .service(
        web::resource("/jobs")
            .route(web::post().to(jobs::enqueue))
            .route(web::get().to(jobs::list))
            .default_service(web::to(error::method_not_allowed)),
    )
    .service(
        web::resource("/jobs/{id}/retry")
            .route(web::post().to(jobs::retry))
            .default_service(web::to(error::method_not_allowed)),
    )
    .service(
        web::resource("/jobs/{id}/cancel")
            .route(web::post().to(jobs::cancel))
            .default_service(web::to(error::method_not_allowed)),
    )
    .service(
        web::resource("/jobs/{id}/outcome")
            .route(web::post().to(jobs::outcome))
            .default_service(web::to(error::method_not_allowed)),
    )
    .service(
        web::resource("/jobs/{id}")
            .route(web::get().to(jobs::status))
            .default_service(web::to(error::method_not_allowed)),
    )
    .service(
        web::resource("/workers")
            .route(web::post().to(jobs::register))
            .default_service(web::to(error::method_not_allowed)),
    )
    .service(
        web::resource("/workers/{id}/ping")
            .route(web::post().to(jobs::ping))
            .default_service(web::to(error::method_not_allowed)),
    )
    .service(
        web::resource("/workers/{id}/dequeue")
            .route(web::post().to(jobs::dequeue))
            .default_service(web::to(error::method_not_allowed)),
    )
    .service(
        web::resource("/admin/jobs")
            .route(web::get().to(jobs::info))
            .default_service(web::to(error::method_not_allowed)),
    )
    .service(
        web::resource("/queues")
            .route(web::get().to(queues::list))
            .default_service(web::to(error::method_not_allowed)),
    )
    .service(
        web::resource("/queues/{name:.+}/messages/{id}/move")
            .route(web::post().to(queues::move_message))
            .default_service(web::to(error::method_not_allowed)),
    )
    .service(
        web::resource("/queues/{name:.+}/messages")
            .route(web::post().to(queues::enqueue))
            .route(web::get().to(queues::browse))
            .route(web::delete().to(queues::purge))
            .default_service(web::to(error::method_not_allowed)),
    )
    .service(
        web::resource("/queues/{name:.+}/redrive")
            .route(web::post().to(queues::redrive))
            .default_service(web::to(error::method_not_allowed)),
    )
    .service(
        web::resource("/queues/{name:.+}")
            .route(web::get().to(queues::info))
            .route(web::delete().to(queues::delete))
            .default_service(web::to(error::method_not_allowed)),
    )
    .service(
        web::resource("/topics/{name:.+}/presence")
            .route(web::get().to(topics::presence))
            .route(web::post().to(topics::publish_to_presence_name))
            .default_service(web::to(error::method_not_allowed)),
    )
    .service(
        web::resource("/topics/{name:.+}/history")
            .route(web::get().to(topics::history))
            .route(web::post().to(topics::publish_to_history_name))
            .default_service(web::to(error::method_not_allowed)),
    )
    .service(
        web::resource("/topics/{name:.+}")
            .route(web::post().to(topics::publish))
            .default_service(web::to(error::method_not_allowed)),
    )
    .service(
        web::resource("/sse")
            .route(web::get().to(sse::stream))
            .default_service(web::to(error::method_not_allowed)),
    );
}

/// `GET /admin/sessions`: every live session with its outbound counters.
async fn list_sessions(
    caller: credentials::Caller,
    app: web::Data<AppState>,
) -> Result<actix_web::HttpResponse, ApiError> {
    caller.admin("read", "/admin/sessions")?;
    Ok(actix_web::HttpResponse::Ok().json(app.sessions.list()))
}

/// The answer for paths no route matches: 404 with a JSON error body.
pub async fn not_found(req: actix_web::HttpRequest) -> ApiError {
    error::not_found(req).await
}

/// The size of what `f` returns, without calling it: how the tests hold
/// a connection's loop to the allocation class it was sized for.
#[cfg(test)]
pub(crate) fn output_size<F: Returns>(_: F) -> usize {
    std::mem::size_of::<F::Output>()
}

/// A function's return type, for [`output_size`].
#[cfg(test)]
pub(crate) trait Returns {
    type Output;
}

#[cfg(test)]
impl<A, B, T> Returns for fn(A, B) -> T {
    type Output = T;
}

#[cfg(test)]
impl<A, B, C, T> Returns for fn(A, B, C) -> T {
    type Output = T;
}

#[cfg(test)]
impl<A, B, C, D, T> Returns for fn(A, B, C, D) -> T {
    type Output = T;
}
