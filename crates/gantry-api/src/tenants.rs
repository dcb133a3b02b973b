//! Tenants: the system administrator creates and lists them; administrators rotate their tokens.

use axum::extract::{Path, State};
use axum::routing::{get, post};
use axum::{Json, Router};
use gantry_core::ids::TenantId;
use gantry_core::records::Tenant;

use crate::AppState;
use crate::envelope::{Envelope, Paged, ok, paged};
use crate::error::{ApiResult, ErrorBody};
use crate::extract::{AppJson, AppQuery, Auth, OptionalJson, page};
use crate::wire::{CreatedTenant, RotateInput, TenantInput};

pub fn routes() -> Router<AppState> {
    Router::new()
        .route("/api/v1/tenants", get(list).post(create))
        .route("/api/v1/tenants/{tenantId}/adminToken/rotate", post(rotate))
}

/// Creates a tenant and returns its administrator's token (shown this once).
#[utoipa::path(post, path = "/api/v1/tenants", operation_id = "createTenant", tag = "Tenants", request_body = TenantInput,
    responses((status = 200, body = Envelope<CreatedTenant>), (status = 400, body = ErrorBody),
              (status = 403, description = "not the system administrator", body = ErrorBody),
              (status = 409, description = "name taken", body = ErrorBody)))]
#[tracing::instrument(name = "createTenant", skip_all)]
pub async fn create(
    State(s): State<AppState>,
    Auth(who): Auth,
    AppJson(input): AppJson<TenantInput>,
) -> ApiResult<Json<Envelope<CreatedTenant>>> {
    Ok(ok(s.services.catalog.create_tenant(&who, &input.name).await?.into()))
}

/// Paging of the tenant listing.
#[derive(Debug, serde::Deserialize, utoipa::IntoParams)]
#[serde(rename_all = "camelCase")]
#[into_params(parameter_in = Query)]
pub struct TenantListParams {
    /// Records per page, 1 to 1000 (default 20).
    #[param(minimum = 1, maximum = 1000)]
    page_size: Option<i64>,
    /// Page number from 1 (default 1).
    #[param(minimum = 1, maximum = 4294967295.0)]
    page_no: Option<i64>,
}

/// Lists tenants, oldest first (the default tenant among them), without their tokens: every
/// tenant for the system administrator, its own for a tenant administrator; application and
/// device tokens get 403.
#[utoipa::path(get, path = "/api/v1/tenants", operation_id = "listTenants", tag = "Tenants", params(TenantListParams),
    responses((status = 200, body = Envelope<Paged<Tenant>>), (status = 400, body = ErrorBody), (status = 401, body = ErrorBody),
              (status = 403, description = "not an administrator token", body = ErrorBody)))]
pub async fn list(
    State(s): State<AppState>,
    Auth(who): Auth,
    AppQuery(q): AppQuery<TenantListParams>,
) -> ApiResult<Json<Envelope<Paged<Tenant>>>> {
    let page = page(q.page_no, q.page_size, 20)?;
    Ok(paged(s.services.catalog.list_tenants(&who, page).await?))
}

/// Replaces the tenant's administrator token and returns the tenant with the new `adminToken`
/// (shown this once). The default tenant's administrator is the system administrator: rotating
/// it replaces the system administrator's token (until a restart with `GANTRY_ADMIN_TOKEN` set,
/// which sets that token again). The old token stops working at once, or after `graceSeconds`
/// (0 to 86400). The system administrator may rotate any tenant's, a tenant administrator its
/// own (another tenant's is 404); application and device tokens get 403.
#[utoipa::path(post, path = "/api/v1/tenants/{tenantId}/adminToken/rotate", operation_id = "rotateAdminToken", tag = "Tenants",
    request_body(content = Option<RotateInput>, description = "optional; `graceSeconds` defaults to 0"),
    params(("tenantId" = String, Path)),
    responses((status = 200, body = Envelope<CreatedTenant>), (status = 400, description = "graceSeconds out of range", body = ErrorBody),
              (status = 401, body = ErrorBody), (status = 403, description = "not an administrator token", body = ErrorBody),
              (status = 404, body = ErrorBody)))]
#[tracing::instrument(name = "rotateAdminToken", skip_all, fields(tenant = %id))]
pub async fn rotate(
    State(s): State<AppState>,
    Auth(who): Auth,
    Path(id): Path<String>,
    OptionalJson(input): OptionalJson<RotateInput>,
) -> ApiResult<Json<Envelope<CreatedTenant>>> {
    Ok(ok(s
        .services
        .catalog
        .rotate_admin_token(&who, &TenantId::from_string(id), input.grace_seconds)
        .await?
        .into()))
}
