//! Device events and shadows: `/api/v1/deviceEvents`, `/api/v1/devices/{id}/events`,
//! `/api/v1/devices/{id}/attributeCode` and `/api/v1/devices/{id}/shadows`.

use axum::extract::{Path, State};
use axum::routing::{get, post};
use axum::{Json, Router};
use gantry_core::event::{DeviceEvent, Shadow};
use gantry_core::ids::{DeviceId, EventId};
use gantry_core::message::Message;
use gantry_core::query::EventFilter;
use serde::Deserialize;

use crate::AppState;
use crate::envelope::{Done, Envelope, Paged, done, ok, paged};
use crate::error::{ApiResult, ErrorBody};
use crate::extract::{AppJson, AppQuery, Auth, page};
use crate::wire::EventInput;

pub fn routes() -> Router<AppState> {
    Router::new()
        .route("/api/v1/deviceEvents", post(create))
        .route("/api/v1/deviceEvents/{eventId}", get(read).delete(delete))
        .route("/api/v1/devices/{deviceId}/events", get(list))
        .route("/api/v1/devices/{deviceId}/attributeCode", get(list_attribute))
        .route("/api/v1/devices/{deviceId}/shadows", get(shadow))
}

/// Filters of a device's event listing.
#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[serde(rename_all = "camelCase")]
#[into_params(parameter_in = Query)]
pub struct EventParams {
    /// Records per page, 1 to 1000 (default 100).
    #[param(minimum = 1, maximum = 1000)]
    page_size: Option<i64>,
    /// Page number from 1 (default 1).
    #[param(minimum = 1, maximum = 4294967295.0)]
    page_no: Option<i64>,
    /// Inclusive start, yyyy-MM-dd'T'HH:mm:ss.SSS+HHmm (write + as %2B); default all time.
    #[param(pattern = r"^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}\.[0-9]{3}[+-][0-9]{4}$")]
    start_date: Option<String>,
    /// Inclusive end, same format; default all time.
    #[param(pattern = r"^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}\.[0-9]{3}[+-][0-9]{4}$")]
    end_date: Option<String>,
    /// deviceTimestamp (default) or ingressTimeStamp: which time the range applies to.
    #[param(schema_with = crate::param_schemas::filter_by)]
    filter_by: Option<String>,
}

/// Filters of an attribute's event listing.
#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[serde(rename_all = "camelCase")]
#[into_params(parameter_in = Query)]
pub struct AttributeParams {
    /// The attribute code (required).
    #[param(required = true)]
    attribute_code: Option<String>,
    /// Records per page, 1 to 1000 (default 20).
    #[param(minimum = 1, maximum = 1000)]
    page_size: Option<i64>,
    /// Page number from 1 (default 1).
    #[param(minimum = 1, maximum = 4294967295.0)]
    page_no: Option<i64>,
    /// Inclusive start of the device time, yyyy-MM-dd'T'HH:mm:ss.SSS+HHmm; default all time.
    #[param(pattern = r"^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}\.[0-9]{3}[+-][0-9]{4}$")]
    start_date: Option<String>,
    /// Inclusive end of the device time, same format; default all time.
    #[param(pattern = r"^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}\.[0-9]{3}[+-][0-9]{4}$")]
    end_date: Option<String>,
}

/// Creates a device event: validated against the device's model, stored with its shadow update,
/// answered once durable. 429 when the ingest queue stays full for 2 s.
#[utoipa::path(post, path = "/api/v1/deviceEvents", operation_id = "createDeviceEvent", tag = "Device events", request_body = EventInput,
    responses((status = 200, body = Envelope<Message>), (status = 400, body = ErrorBody), (status = 403, body = ErrorBody),
              (status = 404, body = ErrorBody), (status = 409, description = "the device is Locked", body = ErrorBody),
              (status = 429, body = ErrorBody)))]
#[tracing::instrument(name = "createDeviceEvent", skip_all)]
pub async fn create(
    State(s): State<AppState>,
    Auth(who): Auth,
    AppJson(input): AppJson<EventInput>,
) -> ApiResult<Json<Envelope<Message>>> {
    Ok(ok(s.services.telemetry.post_event(&who, input.into()).await?))
}

/// Returns an event as a Message (`meta.id` is the event id).
#[utoipa::path(get, path = "/api/v1/deviceEvents/{eventId}", operation_id = "getDeviceEvent", tag = "Device events", params(("eventId" = String, Path)),
    responses((status = 200, body = Envelope<Message>), (status = 404, body = ErrorBody)))]
#[tracing::instrument(name = "getDeviceEvent", skip_all, fields(event = %id))]
pub async fn read(
    State(s): State<AppState>,
    Auth(who): Auth,
    Path(id): Path<String>,
) -> ApiResult<Json<Envelope<Message>>> {
    Ok(ok(s
        .services
        .telemetry
        .get_event(&who, &EventId::from_string(id))
        .await?))
}

/// Deletes an event: it is gone from reads and listings. The shadow keeps its value.
#[utoipa::path(delete, path = "/api/v1/deviceEvents/{eventId}", operation_id = "deleteDeviceEvent", tag = "Device events", params(("eventId" = String, Path)),
    responses((status = 200, body = Done), (status = 404, body = ErrorBody)))]
#[tracing::instrument(name = "deleteDeviceEvent", skip_all, fields(event = %id))]
pub async fn delete(State(s): State<AppState>, Auth(who): Auth, Path(id): Path<String>) -> ApiResult<Json<Done>> {
    s.services
        .telemetry
        .delete_event(&who, &EventId::from_string(id))
        .await?;
    Ok(done())
}

/// Lists a device's events, newest first by the filtered time (ties by id).
#[utoipa::path(get, path = "/api/v1/devices/{deviceId}/events", operation_id = "listDeviceEvents", tag = "Device events", params(("deviceId" = String, Path), EventParams),
    responses((status = 200, body = Envelope<Paged<DeviceEvent>>), (status = 400, body = ErrorBody), (status = 404, body = ErrorBody)))]
#[tracing::instrument(name = "listDeviceEvents", skip_all, fields(device = %id))]
pub async fn list(
    State(s): State<AppState>,
    Auth(who): Auth,
    Path(id): Path<String>,
    AppQuery(q): AppQuery<EventParams>,
) -> ApiResult<Json<Envelope<Paged<DeviceEvent>>>> {
    let page = page(q.page_no, q.page_size, 100)?;
    let filter = EventFilter {
        attribute_code: None,
        start_date: q.start_date,
        end_date: q.end_date,
        filter_by: q.filter_by,
    };
    Ok(paged(
        s.services
            .telemetry
            .list_events(&who, &DeviceId::from_string(id), filter, page)
            .await?,
    ))
}

/// Lists the events of one attribute of a device, newest first by device time.
#[utoipa::path(get, path = "/api/v1/devices/{deviceId}/attributeCode", operation_id = "listAttributeEvents", tag = "Device events", params(("deviceId" = String, Path), AttributeParams),
    responses((status = 200, body = Envelope<Paged<DeviceEvent>>), (status = 400, body = ErrorBody), (status = 404, body = ErrorBody)))]
#[tracing::instrument(name = "listAttributeEvents", skip_all, fields(device = %id))]
pub async fn list_attribute(
    State(s): State<AppState>,
    Auth(who): Auth,
    Path(id): Path<String>,
    AppQuery(q): AppQuery<AttributeParams>,
) -> ApiResult<Json<Envelope<Paged<DeviceEvent>>>> {
    let page = page(q.page_no, q.page_size, 20)?;
    let code = q
        .attribute_code
        .ok_or_else(|| gantry_core::Error::invalid("attributeCode", "is required"))?;
    let filter = EventFilter {
        attribute_code: Some(code),
        start_date: q.start_date,
        end_date: q.end_date,
        filter_by: None,
    };
    Ok(paged(
        s.services
            .telemetry
            .list_events(&who, &DeviceId::from_string(id), filter, page)
            .await?,
    ))
}

/// Returns the device shadow: per attribute the value with the newest device time.
#[utoipa::path(get, path = "/api/v1/devices/{deviceId}/shadows", operation_id = "getDeviceShadow", tag = "Device shadows", params(("deviceId" = String, Path)),
    responses((status = 200, body = Envelope<Shadow>), (status = 404, body = ErrorBody)))]
#[tracing::instrument(name = "getDeviceShadow", skip_all, fields(device = %id))]
pub async fn shadow(
    State(s): State<AppState>,
    Auth(who): Auth,
    Path(id): Path<String>,
) -> ApiResult<Json<Envelope<Shadow>>> {
    Ok(ok(s
        .services
        .telemetry
        .shadow(&who, &DeviceId::from_string(id))
        .await?))
}
