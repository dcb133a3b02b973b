//! `POST /api/v1/tenants`: the system administrator creates tenants.

use axum::extract::State;
use axum::routing::post;
use axum::{Json, Router};
use gantry_core::catalog::{CreatedTenant, TenantInput};

use crate::AppState;
use crate::envelope::{Envelope, ok};
use crate::error::{ApiResult, ErrorBody};
use crate::extract::{AppJson, Auth};

pub fn routes() -> Router<AppState> {
    Router::new().route("/tenants", post(create))
}

/// Creates a tenant and returns its administrator's token (shown this once).
#[utoipa::path(post, path = "/api/v1/tenants", tag = "Tenants", request_body = TenantInput,
    responses((status = 200, body = Envelope<CreatedTenant>), (status = 400, body = ErrorBody),
              (status = 403, description = "not the system administrator", body = ErrorBody),
              (status = 409, description = "name taken", body = ErrorBody)))]
pub async fn create(
    State(s): State<AppState>,
    Auth(who): Auth,
    AppJson(input): AppJson<TenantInput>,
) -> ApiResult<Json<Envelope<CreatedTenant>>> {
    Ok(ok(s.services.catalog.create_tenant(&who, input).await?))
}
