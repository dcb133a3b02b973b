//! Message routes: `POST /api/v1/devices/{id}/routes` and `POST /api/v1/routes/{id}/refresh`.

use axum::extract::{Path, State};
use axum::routing::post;
use axum::{Json, Router};
use gantry_core::ids::DeviceId;
use gantry_core::routes::{Route, RouteInput};

use crate::AppState;
use crate::envelope::{Envelope, ok};
use crate::error::{ApiResult, ErrorBody};
use crate::extract::{AppJson, Auth};

pub fn routes() -> Router<AppState> {
    Router::new()
        .route("/devices/{deviceId}/routes", post(create))
        .route("/routes/{routeId}/refresh", post(refresh))
}

/// Creates a route to the device. For WEB and APP the result carries a temporary MQTT identity
/// (the password is shown this once), valid until `expiredTime`: it may publish only to
/// `forwardTopic` and subscribe only to `ackTopic`. For DEVICE, `sourceDeviceId` and
/// `sourceDeviceKey` (that device's accessToken) are required; that device may then publish to
/// the target's inbox and receives acks on its own inbox. Messages along a route are recorded as
/// event logs; with `needResp` the target's acks are forwarded to `ackTopic`.
#[utoipa::path(post, path = "/api/v1/devices/{deviceId}/routes", tag = "Routes", request_body = RouteInput,
    params(("deviceId" = String, Path)),
    responses((status = 200, body = Envelope<Route>), (status = 400, body = ErrorBody), (status = 403, body = ErrorBody),
              (status = 404, body = ErrorBody), (status = 409, description = "the device is Locked", body = ErrorBody)))]
pub async fn create(
    State(s): State<AppState>,
    Auth(who): Auth,
    Path(id): Path<String>,
    AppJson(input): AppJson<RouteInput>,
) -> ApiResult<Json<Envelope<Route>>> {
    Ok(ok(s
        .services
        .routes
        .create_route(&who, &DeviceId::from_string(id), input)
        .await?))
}

/// Extends a route that has not expired by the route TTL (`--route-ttl`); 409 once expired.
#[utoipa::path(post, path = "/api/v1/routes/{routeId}/refresh", tag = "Routes", params(("routeId" = String, Path)),
    responses((status = 200, body = Envelope<Route>), (status = 404, body = ErrorBody), (status = 409, body = ErrorBody)))]
pub async fn refresh(
    State(s): State<AppState>,
    Auth(who): Auth,
    Path(id): Path<String>,
) -> ApiResult<Json<Envelope<Route>>> {
    Ok(ok(s.services.routes.refresh(&who, &id).await?))
}
