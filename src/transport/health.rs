//! `GET /health`: liveness, version and uptime, for load balancers and
//! people.

use std::time::Instant;

use actix_web::{HttpResponse, web};
use serde::{Deserialize, Serialize};
use uuid::Uuid;

/// What `/health` reports on: when this broker started and which instance
/// it is (a fresh id per start, so clients can tell a restart).
#[derive(Debug, Clone)]
pub struct Health {
    started: Instant,
    instance: Uuid,
}

impl Health {
    /// Starts the uptime clock now and picks a new instance id.
    pub fn new() -> Self {
        Health {
            started: Instant::now(),
            instance: Uuid::now_v7(),
        }
    }

    /// The current report.
    pub fn report(&self) -> HealthReport {
        HealthReport {
            status: "ok".into(),
            version: env!("CARGO_PKG_VERSION").into(),
            uptime_ms: u64::try_from(self.started.elapsed().as_millis()).unwrap_or(u64::MAX),
            instance: self.instance,
        }
    }
}

impl Default for Health {
    fn default() -> Self {
        Health::new()
    }
}

/// The JSON body of `GET /health`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HealthReport {
    /// Always `"ok"` when the broker answers.
    pub status: String,
    /// The crate version of the running broker.
    pub version: String,
    /// Milliseconds since the broker started.
    pub uptime_ms: u64,
    /// A UUID v7 chosen at start; changes on every restart.
    pub instance: Uuid,
}

pub(crate) async fn get(health: web::Data<Health>) -> HttpResponse {
    HttpResponse::Ok().json(health.report())
}
