//! actix-web routes: what Wharf exposes over HTTP. Handlers turn typed
//! errors into HTTP statuses with a JSON body in one place ([`ApiError`]).

mod error;
mod health;

pub use error::ApiError;
pub use health::{Health, HealthReport};

use actix_web::web;

/// Mounts Wharf's HTTP routes on an actix `App` or scope. The caller must
/// have registered a `web::Data<Health>`.
pub fn routes(cfg: &mut web::ServiceConfig) {
    cfg.service(
        web::resource("/health")
            .route(web::get().to(health::get))
            .default_service(web::to(error::method_not_allowed)),
    );
}

/// The answer for paths no route matches: 404 with a JSON error body.
pub async fn not_found() -> ApiError {
    error::not_found().await
}
