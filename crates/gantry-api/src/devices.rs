//! Devices: `/api/v1/devices`.

use axum::extract::{Path, State};
use axum::routing::{get, post};
use axum::{Json, Router};
use gantry_core::connection::Connection;
use gantry_core::ids::DeviceId;
use gantry_core::records::Device;

use crate::AppState;
use crate::envelope::{Done, Envelope, done, ok};
use crate::error::{ApiResult, ErrorBody};
use crate::extract::{AppJson, Auth, OptionalJson};
use crate::wire::{DeviceInput, RotateInput};

pub fn routes() -> Router<AppState> {
    Router::new()
        .route("/api/v1/devices", post(create))
        .route("/api/v1/devices/{deviceId}", get(read).put(update).delete(delete))
        .route("/api/v1/devices/{deviceId}/accessToken/rotate", post(rotate))
        .route("/api/v1/devices/{deviceId}/connection", get(connection))
}

/// Creates a device with a generated `accessToken`. `deviceName` must be unique; `status` defaults to Active, `virtual` to false.
#[utoipa::path(post, path = "/api/v1/devices", operation_id = "createDevice", tag = "Devices", request_body = DeviceInput,
    responses((status = 200, body = Envelope<Device>), (status = 400, body = ErrorBody), (status = 404, description = "unknown project or model", body = ErrorBody), (status = 409, body = ErrorBody)))]
#[tracing::instrument(name = "createDevice", skip_all)]
pub async fn create(
    State(s): State<AppState>,
    Auth(who): Auth,
    AppJson(input): AppJson<DeviceInput>,
) -> ApiResult<Json<Envelope<Device>>> {
    Ok(ok(s.services.catalog.create_device(&who, input.try_into()?).await?))
}

/// Updates a device (name, project, status Active/Locked, comments, virtual, metadata); absent fields keep their values.
#[utoipa::path(put, path = "/api/v1/devices/{deviceId}", operation_id = "updateDevice", tag = "Devices", request_body = DeviceInput, params(("deviceId" = String, Path)),
    responses((status = 200, body = Envelope<Device>), (status = 400, body = ErrorBody), (status = 404, body = ErrorBody), (status = 409, body = ErrorBody)))]
#[tracing::instrument(name = "updateDevice", skip_all, fields(device = %id))]
pub async fn update(
    State(s): State<AppState>,
    Auth(who): Auth,
    Path(id): Path<String>,
    AppJson(input): AppJson<DeviceInput>,
) -> ApiResult<Json<Envelope<Device>>> {
    Ok(ok(s
        .services
        .catalog
        .update_device(&who, &DeviceId::from_string(id), input.try_into()?)
        .await?))
}

/// Returns one device.
#[utoipa::path(get, path = "/api/v1/devices/{deviceId}", operation_id = "getDevice", tag = "Devices", params(("deviceId" = String, Path)),
    responses((status = 200, body = Envelope<Device>), (status = 404, body = ErrorBody)))]
#[tracing::instrument(name = "getDevice", skip_all, fields(device = %id))]
pub async fn read(
    State(s): State<AppState>,
    Auth(who): Auth,
    Path(id): Path<String>,
) -> ApiResult<Json<Envelope<Device>>> {
    Ok(ok(s
        .services
        .catalog
        .get_device(&who, &DeviceId::from_string(id))
        .await?))
}

/// Deletes a device (soft delete; its access token stops working, its name is free again).
#[utoipa::path(delete, path = "/api/v1/devices/{deviceId}", operation_id = "deleteDevice", tag = "Devices", params(("deviceId" = String, Path)),
    responses((status = 200, body = Done), (status = 404, body = ErrorBody)))]
#[tracing::instrument(name = "deleteDevice", skip_all, fields(device = %id))]
pub async fn delete(State(s): State<AppState>, Auth(who): Auth, Path(id): Path<String>) -> ApiResult<Json<Done>> {
    s.services
        .catalog
        .delete_device(&who, &DeviceId::from_string(id))
        .await?;
    Ok(done())
}

/// Replaces the device's `accessToken` and returns the device with the new one (shown in device
/// reads as before). The old token stops working at once, over HTTP and MQTT (the device's MQTT
/// session is closed), or after `graceSeconds` (0 to 86400; its session is then closed when the
/// grace period ends, unless the device has logged in again with its new token). The body is
/// optional. Administrators and the project's application token; a device token gets 403.
#[utoipa::path(post, path = "/api/v1/devices/{deviceId}/accessToken/rotate", operation_id = "rotateDeviceAccessToken", tag = "Devices",
    request_body(content = Option<RotateInput>, description = "optional; `graceSeconds` defaults to 0"),
    params(("deviceId" = String, Path)),
    responses((status = 200, body = Envelope<Device>), (status = 400, description = "graceSeconds out of range", body = ErrorBody),
              (status = 401, body = ErrorBody), (status = 403, body = ErrorBody), (status = 404, body = ErrorBody)))]
#[tracing::instrument(name = "rotateDeviceAccessToken", skip_all, fields(device = %id))]
pub async fn rotate(
    State(s): State<AppState>,
    Auth(who): Auth,
    Path(id): Path<String>,
    OptionalJson(input): OptionalJson<RotateInput>,
) -> ApiResult<Json<Envelope<Device>>> {
    Ok(ok(s
        .services
        .catalog
        .rotate_device_token(&who, &DeviceId::from_string(id), input.grace_seconds)
        .await?))
}

/// The device's MQTT connection: whether it is connected now, when its last session began and
/// ended, when it was last heard from (a message or a ping; written every few seconds, so a
/// crash of Gantry may set it back by that much), its address, protocol and transport. Times
/// are epoch ms, absent when they never happened. After a restart of Gantry every device is
/// disconnected until it connects again; the times of its last session stay. With an external
/// broker (`--mqtt-broker-url`) the record follows the broker's connect and disconnect events
/// (EMQX `$SYS/brokers/+/clients/+/connected` and `disconnected`); a broker that publishes
/// none (Mosquitto) leaves every device `connected` false with no times. Administrators, the
/// project's application token and the device's own token.
#[utoipa::path(get, path = "/api/v1/devices/{deviceId}/connection", operation_id = "getDeviceConnection", tag = "Devices", params(("deviceId" = String, Path)),
    responses((status = 200, body = Envelope<Connection>), (status = 401, body = ErrorBody), (status = 403, body = ErrorBody), (status = 404, body = ErrorBody)))]
#[tracing::instrument(name = "getDeviceConnection", skip_all, fields(device = %id))]
pub async fn connection(
    State(s): State<AppState>,
    Auth(who): Auth,
    Path(id): Path<String>,
) -> ApiResult<Json<Envelope<Connection>>> {
    Ok(ok(s
        .services
        .presence
        .connection(&who, &DeviceId::from_string(id))
        .await?))
}
