//! actix-web routes: what Wharf exposes over HTTP and WebSocket. Handlers
//! turn typed errors into HTTP statuses with a JSON body in one place
//! ([`ApiError`]).

mod admin;
mod body;
mod credentials;
mod dashboard;
mod error;
mod health;
mod jobs;
mod metrics;
mod mqtt;
pub(crate) mod mqtt_tcp;
mod origin;
mod queues;
pub(crate) mod raw;
mod rules;
mod source;
mod topics;
pub(crate) mod typed;
mod ws;
mod wsloop;

use std::sync::Arc;

pub use crate::protocol::jobs::{Enqueued as JobEnqueued, OutcomeReply, Registered};
pub use admin::{Overview, SessionCounts, TopicPage, TopicRow};
pub use body::BodyReader;
pub(crate) use dashboard::stream_slots;
pub use dashboard::{
    MAX_STREAM_QUEUES, MAX_STREAM_SESSIONS, MAX_STREAMS, STREAM_LIFETIME, STREAM_PERIOD, Snapshot,
};
pub use error::ApiError;
pub use health::{Health, HealthReport};
pub use queues::{BrowseReply, BrowsedMessage, EnqueueReply, MoveReply, PurgeReply, RedriveReply};
pub use topics::{HEADER_PREFIX, PublishReply};

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
    /// The rules (`GET /admin/rules`, their reload).
    pub rules: Arc<crate::rules::Rules>,
    /// The cluster this node is part of (`GET /admin/cluster`).
    pub cluster: Option<crate::cluster::Cluster>,
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
        web::resource("/topics/{name:.+}")
            .route(web::post().to(topics::publish))
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
