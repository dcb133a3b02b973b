//! Message routes: creating and listing a device's routes, refreshing and revoking one.

use axum::extract::{Path, State};
use axum::routing::{delete, post};
use axum::{Json, Router};
use gantry_core::ids::DeviceId;
use gantry_core::route::Route;

use crate::AppState;
use crate::envelope::{Done, Envelope, Paged, done, ok, paged};
use crate::error::{ApiResult, ErrorBody};
use crate::extract::{AppJson, AppQuery, Auth, page};
use crate::wire::RouteInput;

pub fn routes() -> Router<AppState> {
    Router::new()
        .route("/api/v1/devices/{deviceId}/routes", post(create).get(list))
        .route("/api/v1/routes/{routeId}/refresh", post(refresh))
        .route("/api/v1/routes/{routeId}", delete(revoke))
}

/// Paging of the route listing.
#[derive(Debug, serde::Deserialize, utoipa::IntoParams)]
#[serde(rename_all = "camelCase")]
#[into_params(parameter_in = Query)]
pub struct RouteListParams {
    /// Records per page, 1 to 1000 (default 20).
    #[param(minimum = 1, maximum = 1000)]
    page_size: Option<i64>,
    /// Page number from 1 (default 1).
    #[param(minimum = 1, maximum = 4294967295.0)]
    page_no: Option<i64>,
}

/// Creates a route to the device. For WEB and APP the result carries a temporary MQTT identity
/// (the password is shown this once), valid until `expiredTime`: it may publish only to
/// `forwardTopic` and subscribe only to `ackTopic`. For DEVICE, `sourceDeviceId` and
/// `sourceDeviceKey` (that device's accessToken) are required; that device may then publish to
/// the target's inbox and receives acks on its own inbox. Messages along a route are recorded as
/// event logs; with `needResp` the target's acks are forwarded to `ackTopic`. A WEB or APP
/// route is refused (400, `sourceType`) when the server has no listener for that kind of caller.
#[utoipa::path(post, path = "/api/v1/devices/{deviceId}/routes", operation_id = "createRoute", tag = "Routes", request_body = RouteInput,
    params(("deviceId" = String, Path)),
    responses((status = 200, body = Envelope<Route>), (status = 400, body = ErrorBody), (status = 403, body = ErrorBody),
              (status = 404, body = ErrorBody), (status = 409, description = "the device is Locked", body = ErrorBody)))]
#[tracing::instrument(name = "createRoute", skip_all, fields(device = %id))]
pub async fn create(
    State(s): State<AppState>,
    Auth(who): Auth,
    Path(id): Path<String>,
    AppJson(input): AppJson<RouteInput>,
) -> ApiResult<Json<Envelope<Route>>> {
    Ok(ok(s
        .services
        .routes
        .create_route(&who, &DeviceId::from_string(id), input.into())
        .await?))
}

/// Extends a route that has not expired by the route TTL (`--route-ttl`); 409 once expired or
/// while its device is Locked; 404 for a revoked route or one whose device was deleted.
#[utoipa::path(post, path = "/api/v1/routes/{routeId}/refresh", operation_id = "refreshRoute", tag = "Routes", params(("routeId" = String, Path)),
    responses((status = 200, body = Envelope<Route>), (status = 401, body = ErrorBody), (status = 403, body = ErrorBody),
              (status = 404, body = ErrorBody), (status = 409, body = ErrorBody)))]
#[tracing::instrument(name = "refreshRoute", skip_all, fields(route = %id))]
pub async fn refresh(
    State(s): State<AppState>,
    Auth(who): Auth,
    Path(id): Path<String>,
) -> ApiResult<Json<Envelope<Route>>> {
    Ok(ok(s.services.routes.refresh(&who, &id).await?))
}

/// Lists the device's routes that have not expired and were not revoked, newest first (then by
/// id), without their passwords. Administrators and the project's application token.
#[utoipa::path(get, path = "/api/v1/devices/{deviceId}/routes", operation_id = "listRoutes", tag = "Routes", params(("deviceId" = String, Path), RouteListParams),
    responses((status = 200, body = Envelope<Paged<Route>>), (status = 400, body = ErrorBody), (status = 401, body = ErrorBody),
              (status = 403, body = ErrorBody), (status = 404, body = ErrorBody)))]
#[tracing::instrument(name = "listRoutes", skip_all, fields(device = %id))]
pub async fn list(
    State(s): State<AppState>,
    Auth(who): Auth,
    Path(id): Path<String>,
    AppQuery(q): AppQuery<RouteListParams>,
) -> ApiResult<Json<Envelope<Paged<Route>>>> {
    let page = page(q.page_no, q.page_size, 20)?;
    Ok(paged(
        s.services.routes.list(&who, &DeviceId::from_string(id), page).await?,
    ))
}

/// Revokes a route: its temporary identity is disconnected at once and can no longer connect,
/// a DEVICE route no longer lets its source publish, and a later refresh or revoke is 404.
#[utoipa::path(delete, path = "/api/v1/routes/{routeId}", operation_id = "revokeRoute", tag = "Routes", params(("routeId" = String, Path)),
    responses((status = 200, body = Done), (status = 401, body = ErrorBody), (status = 403, body = ErrorBody),
              (status = 404, body = ErrorBody)))]
#[tracing::instrument(name = "revokeRoute", skip_all, fields(route = %id))]
pub async fn revoke(State(s): State<AppState>, Auth(who): Auth, Path(id): Path<String>) -> ApiResult<Json<Done>> {
    s.services.routes.revoke(&who, &id).await?;
    Ok(done())
}
