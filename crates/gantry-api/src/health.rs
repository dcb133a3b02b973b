//! `GET /healthz` and `GET /metrics`: for load balancers and Prometheus, without a token.

use axum::Router;
use axum::extract::State;
use axum::http::header::CONTENT_TYPE;
use axum::response::IntoResponse;
use axum::routing::get;

use crate::AppState;

pub fn routes() -> Router<AppState> {
    Router::new()
        .route("/healthz", get(healthz))
        .route("/metrics", get(metrics))
}

/// 200 once the server takes requests.
#[utoipa::path(get, path = "/healthz", operation_id = "healthz", tag = "Operations", responses((status = 200, description = "the server takes requests", body = String, content_type = "text/plain")))]
pub async fn healthz() -> &'static str {
    "ok"
}

/// Prometheus text: request counts and latencies per route, and the ingest pipeline's counters.
#[utoipa::path(get, path = "/metrics", operation_id = "metrics", tag = "Operations", responses((status = 200, description = "Prometheus text format", body = String, content_type = "text/plain")))]
pub async fn metrics(State(s): State<AppState>) -> impl IntoResponse {
    ([(CONTENT_TYPE, "text/plain; version=0.0.4")], s.metrics.render().await)
}
