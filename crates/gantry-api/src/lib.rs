//! Gantry's REST API: the axum router over the core services, its error mapping and its
//! OpenAPI document.

mod alarms;
mod audit;
mod control;
mod desired;
mod devices;
mod envelope;
mod error;
mod events;
mod every_request;
pub mod extract;
mod health;
pub mod limit;
pub mod metrics;
mod models;
pub mod openapi;
mod param_schemas;
mod projects;
pub mod request_log;
mod routes;
mod series;
mod sign_in;
mod stream;
mod tenants;
mod users;
mod webhooks;
pub mod wire;

/// The query-parameter types of the listings, so the fuzz targets parse query strings into the
/// very types the handlers take.
pub mod query {
    pub use crate::alarms::AlarmListParams;
    pub use crate::audit::AuditParams;
    pub use crate::control::LogParams;
    pub use crate::desired::PendingParams;
    pub use crate::events::{AttributeParams, EventParams};
    pub use crate::models::ModelListParams;
    pub use crate::projects::{DeviceParams, ProjectListParams};
    pub use crate::routes::RouteListParams;
    pub use crate::series::SeriesParams;
    pub use crate::users::UserListParams;
    pub use crate::webhooks::WebhookListParams;
}

use std::sync::Arc;

use axum::Router;
use axum::extract::DefaultBodyLimit;
use gantry_core::Services;
use utoipa::OpenApi;
use utoipa_swagger_ui::SwaggerUi;

pub use error::{ApiError, ErrorBody, ReturnCode};
pub use extract::{AppJson, PeerAddr};

/// What every handler gets: the core services, the request metrics and the rate limiter,
/// behind one `Arc`, since axum clones the state several times for each request.
#[derive(Clone)]
pub struct AppState(Arc<StateParts>);

/// The parts of `AppState`, which its handlers reach through it.
pub struct StateParts {
    pub services: Arc<Services>,
    pub metrics: Arc<metrics::Metrics>,
    /// None when rate limiting is off.
    pub limiter: Option<Arc<limit::RateLimiter>>,
}

impl AppState {
    pub fn new(parts: StateParts) -> Self {
        Self(Arc::new(parts))
    }
}

impl std::ops::Deref for AppState {
    type Target = StateParts;

    fn deref(&self) -> &StateParts {
        &self.0
    }
}

/// Limits of the HTTP front end, and its OpenAPI document.
#[derive(Clone)]
pub struct ApiConfig {
    /// Largest accepted request body; larger ones get 413.
    pub body_limit: usize,
    /// The document served at `/api-docs/openapi.json`: the API's, plus whatever the binary
    /// merges in for the routes it adds.
    pub openapi: utoipa::openapi::OpenApi,
}

impl Default for ApiConfig {
    fn default() -> Self {
        Self {
            body_limit: 1024 * 1024,
            openapi: openapi::ApiDoc::openapi(),
        }
    }
}

/// The whole HTTP surface: `/api/v1`, health, metrics, the OpenAPI document and Swagger UI.
///
/// The API's routes carry their `/api/v1` prefix themselves rather than being nested under it:
/// a nested router strips the prefix from every request's URI, which no handler reads. Every
/// route passes one middleware, `every_request::around`, for the same reason: axum wraps each
/// route in each layer, and each layer costs every request its own clones and boxed future.
pub fn router(state: AppState, config: &ApiConfig) -> Router {
    let api = Router::new()
        .merge(tenants::routes())
        .merge(models::routes())
        .merge(projects::routes())
        .merge(devices::routes())
        .merge(events::routes())
        .merge(series::routes())
        .merge(control::routes())
        .merge(desired::routes())
        .merge(routes::routes())
        .merge(stream::routes())
        .merge(webhooks::routes())
        .merge(alarms::routes())
        .merge(users::routes())
        .merge(sign_in::routes())
        .merge(audit::routes())
        .layer(DefaultBodyLimit::max(config.body_limit));
    let shared = every_request::Shared {
        state: state.clone(),
        body_limit: config.body_limit,
    };
    Router::new()
        .merge(api)
        .merge(health::routes())
        .merge(SwaggerUi::new("/swagger-ui").url("/api-docs/openapi.json", config.openapi.clone()))
        .fallback(error::no_route)
        .method_not_allowed_fallback(error::method_not_allowed)
        .layer(axum::middleware::from_fn_with_state(shared, every_request::around))
        .with_state(state)
}
