//! `GET /admin/rules` (the rules in force with their counters) and
//! `POST /admin/rules/reload` (read the config file's `[[rules]]` again,
//! as `SIGHUP` does). Both need the admin right.

use actix_web::{HttpResponse, web};
use serde::Serialize;

use super::AppState;
use super::credentials::Caller;
use super::error::{ApiError, HttpCode};
use crate::rules::{ReloadError, RuleReport};

/// The body of both routes.
#[derive(Debug, Serialize)]
struct RulesReply {
    /// The rules in force, in the order they run.
    rules: Vec<RuleReport>,
}

/// `GET /admin/rules`: 200 with every rule, its hits and each action's
/// runs, failures and (for forwards) backends.
pub(crate) async fn list(
    caller: Caller,
    app: web::Data<AppState>,
) -> Result<HttpResponse, ApiError> {
    caller.admin("read", "/admin/rules")?;
    Ok(HttpResponse::Ok().json(RulesReply {
        rules: app.rules.report(),
    }))
}

/// `POST /admin/rules/reload`: 200 with the new rules; 409
/// `no_config_file` when the broker was started without one; 422
/// `invalid_config` naming the rule and field when the file is refused
/// (the old rules stay).
pub(crate) async fn reload(
    caller: Caller,
    app: web::Data<AppState>,
) -> Result<HttpResponse, ApiError> {
    caller.admin("reload", "rules")?;
    let rules = app.rules.clone();
    let reloaded = web::block(move || rules.reload())
        .await
        .map_err(|e| ApiError::coded(crate::protocol::frame::ErrorCode::Internal, e.to_string()))?;
    match reloaded {
        Ok(n) => {
            tracing::info!(rules = n, "rules reloaded");
            Ok(HttpResponse::Ok().json(RulesReply {
                rules: app.rules.report(),
            }))
        }
        Err(ReloadError::NoFile) => Err(ApiError::http(
            HttpCode::NoConfigFile,
            ReloadError::NoFile.to_string(),
        )),
        Err(ReloadError::Config(e)) => {
            tracing::warn!("rules not reloaded, the old ones stay: {e}");
            Err(ApiError::http(HttpCode::InvalidConfig, e.to_string()))
        }
    }
}
