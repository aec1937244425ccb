//! The admin API's overview, topics and session routes (queues' and
//! jobs' admin routes live with them). Every route needs the admin right
//! and logs what it changes with the principal.

use actix_web::{HttpRequest, HttpResponse, web};
use serde::{Deserialize, Serialize};

use super::credentials::Caller;
use super::error::HttpCode;
use super::health::Health;
use super::topics::query;
use super::{ApiError, AppState};
use crate::auth::Right;

/// Most topics one `GET /admin/topics` page lists.
const MAX_TOPIC_PAGE: usize = 1000;

/// `GET /admin/overview`: the broker at a glance.
#[derive(Debug, Serialize)]
pub struct Overview {
    /// The broker's version.
    pub version: &'static str,
    /// Seconds since it started.
    pub uptime_s: u64,
    /// Live sessions by protocol.
    pub sessions: SessionCounts,
    /// Topics that exist now.
    pub topics: usize,
    /// Wildcard subscriptions.
    pub wildcard_subscriptions: usize,
    /// Queues (dead-letter queues included).
    pub queues: usize,
    /// Jobs and workers.
    pub jobs: Option<crate::broker::jobs::JobsInfo>,
    /// Messages published since start.
    pub published: u64,
    /// Deliveries queued since start.
    pub delivered: u64,
    /// Resident memory in bytes.
    pub resident_bytes: Option<u64>,
    /// Clients denied since start, by why (every way in together).
    pub denials: Denied,
    /// The cluster at a glance, when this node is in one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cluster: Option<crate::cluster::ClusterSummary>,
}

/// Clients denied since start, by why: what a brute-force attempt looks
/// like on the dashboard.
#[derive(Debug, Default, Serialize)]
pub struct Denied {
    /// Wrong, unknown or expired credentials.
    pub bad_credentials: u64,
    /// Refused unchecked while their address was locked out.
    pub blocked: u64,
    /// Refused unchecked: password checks saturated.
    pub busy: u64,
    /// Closed for bringing no credentials in time.
    pub no_credentials_in_time: u64,
}

/// Sessions by protocol.
#[derive(Debug, Default, Serialize)]
pub struct SessionCounts {
    /// Native protocol sessions.
    pub native: usize,
    /// MQTT sessions (WebSocket, TCP and TLS).
    pub mqtt: usize,
    /// The embedding app's typed sockets, all types together.
    pub sockets: usize,
}

pub(crate) async fn overview(
    caller: Caller,
    app: web::Data<AppState>,
    health: web::Data<Health>,
) -> Result<HttpResponse, ApiError> {
    caller.require(Right::Admin)?;
    let sessions = app.sessions.list();
    Ok(HttpResponse::Ok().json(overview_of(&app, &health, &sessions).await))
}

/// `GET /admin/cluster`: this node's view of its cluster (nodes heard,
/// the NATS link's state, the filters it listens to, what crossed);
/// `enabled: false` on a single node. Needs the admin right.
pub(crate) async fn cluster(
    caller: Caller,
    app: web::Data<AppState>,
) -> Result<HttpResponse, ApiError> {
    caller.require(Right::Admin)?;
    let status = match &app.cluster {
        Some(c) => c.status().await,
        None => crate::cluster::ClusterStatus {
            state: "off",
            ..Default::default()
        },
    };
    Ok(HttpResponse::Ok().json(status))
}

/// The overview as `GET /admin/overview` answers it, given the live
/// sessions; the dashboard's stream sends the same (and lists the
/// sessions once for both), so both are built here.
pub(crate) async fn overview_of(
    app: &AppState,
    health: &Health,
    live: &[crate::session::SessionInfo],
) -> Overview {
    let mut sessions = SessionCounts::default();
    for s in live {
        match s.kind {
            "native" => sessions.native += 1,
            "mqtt" => sessions.mqtt += 1,
            _ => sessions.sockets += 1,
        }
    }
    let stats = app.broker.stats();
    let m = app.broker.metrics();
    Overview {
        version: env!("CARGO_PKG_VERSION"),
        uptime_s: health.report().uptime_ms / 1000,
        sessions,
        topics: stats.topics,
        wildcard_subscriptions: stats.wildcard_subscriptions,
        queues: app.broker.queues().queue_names().len(),
        jobs: app.jobs.info().await.ok(),
        published: m.published.get(),
        delivered: m.delivered.get(),
        resident_bytes: crate::metrics::process::read().resident_bytes,
        denials: {
            use crate::auth::Denial;
            let d = app.auth.denials();
            Denied {
                bad_credentials: d.of(Denial::Bad),
                blocked: d.of(Denial::Blocked),
                busy: d.of(Denial::Busy),
                no_credentials_in_time: d.of(Denial::NoCredentialsInTime),
            }
        },
        cluster: app.cluster.as_ref().map(crate::cluster::Cluster::summary),
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct TopicsQuery {
    /// Only topics this filter matches.
    filter: Option<String>,
    /// The page after this name (the previous page's `next`).
    after: Option<String>,
    /// Page size, 1 to 1000 (default 100).
    limit: Option<usize>,
}

/// One topic in `GET /admin/topics`.
#[derive(Debug, Serialize)]
pub struct TopicRow {
    /// The topic.
    pub name: String,
    /// Subscriptions (exact and wildcard) on it.
    pub subscribers: usize,
    /// Whether it holds a retained message.
    pub retained: bool,
    /// Messages published to it (its last sequence number).
    pub published: u64,
}

/// A page of `GET /admin/topics`.
#[derive(Debug, Serialize)]
pub struct TopicPage {
    /// The topics, in name order.
    pub topics: Vec<TopicRow>,
    /// Pass as `after` for the next page; absent on the last.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub next: Option<String>,
}

pub(crate) async fn topics(
    caller: Caller,
    req: HttpRequest,
    app: web::Data<AppState>,
) -> Result<HttpResponse, ApiError> {
    caller.require(Right::Admin)?;
    let q: TopicsQuery = query(&req)?;
    let limit = q.limit.unwrap_or(100);
    if limit == 0 || limit > MAX_TOPIC_PAGE {
        return Err(ApiError::http(
            HttpCode::InvalidQuery,
            format!("limit must be between 1 and {MAX_TOPIC_PAGE}"),
        ));
    }
    if let Some(f) = &q.filter {
        app.broker
            .check_filter(f)
            .map_err(|e| ApiError::coded(e.code(), format!("filter: {e}")))?;
    }
    let names = app
        .broker
        .topic_names(q.filter.as_deref(), q.after.as_deref(), limit + 1);
    let more = names.len() > limit;
    let mut rows = Vec::with_capacity(names.len().min(limit));
    for name in names.into_iter().take(limit) {
        // A topic swept since the names were read is left out.
        if let Some((subscribers, retained, published)) = app.broker.topic_info(&name).await {
            rows.push(TopicRow {
                name,
                subscribers,
                retained,
                published,
            });
        }
    }
    let next = more.then(|| rows.last().map(|r| r.name.clone())).flatten();
    Ok(HttpResponse::Ok().json(TopicPage { topics: rows, next }))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct CloseQuery {
    /// Deliver what is queued first (default true).
    drain: Option<bool>,
}

/// `POST /admin/sessions/{id}/close?drain=true`: 204, or 404 for no such
/// live session.
pub(crate) async fn close_session(
    caller: Caller,
    req: HttpRequest,
    id: web::Path<String>,
    app: web::Data<AppState>,
) -> Result<HttpResponse, ApiError> {
    caller.admin("close session", &id)?;
    let q: CloseQuery = query(&req)?;
    let not_found = || ApiError::http(HttpCode::NotFound, format!("no live session {id:?}"));
    let uuid: uuid::Uuid = id.parse().map_err(|_| not_found())?;
    let drain = q.drain.unwrap_or(true);
    if app
        .sessions
        .close(uuid, 1008, crate::session::close_reason::ADMIN, drain)
    {
        Ok(HttpResponse::NoContent().finish())
    } else {
        Err(not_found())
    }
}
