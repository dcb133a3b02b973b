//! Desired states (`/api/v1/devices/{deviceId}/desired`) and controls waiting for their device
//! (`/api/v1/devices/{deviceId}/pendingControls`, `DELETE /api/v1/eventLogs/{eventLogId}`).

use axum::extract::{Path, State};
use axum::http::HeaderMap;
use axum::http::header::{ETAG, IF_MATCH};
use axum::routing::{delete, get};
use axum::{Json, Router};
use gantry_core::Error;
use gantry_core::desired::DesiredState;
use gantry_core::event_log::EventLog;
use gantry_core::ids::DeviceId;
use serde::Deserialize;

use crate::AppState;
use crate::envelope::{Envelope, Paged, ok, paged};
use crate::error::{ApiResult, ErrorBody};
use crate::extract::{AppJson, AppQuery, Auth, page};
use crate::wire::DesiredInput;

pub fn routes() -> Router<AppState> {
    Router::new()
        .route("/api/v1/devices/{deviceId}/desired", get(read).patch(update))
        .route("/api/v1/devices/{deviceId}/pendingControls", get(pending))
        .route("/api/v1/eventLogs/{eventLogId}", delete(cancel))
}

/// The document's version as an entity tag, and the document.
type Versioned = ([(axum::http::HeaderName, String); 1], Json<Envelope<DesiredState>>);

fn versioned(state: DesiredState) -> Versioned {
    ([(ETAG, format!("\"{}\"", state.version))], ok(state))
}

/// The version an `If-Match` header names: `"7"` (or `7`); anything else is 400.
fn if_match(headers: &HeaderMap) -> Result<Option<i64>, Error> {
    let Some(value) = headers.get(IF_MATCH) else {
        return Ok(None);
    };
    let text = value.to_str().unwrap_or_default().trim();
    let text = text.strip_prefix("W/").unwrap_or(text);
    text.trim_matches('"')
        .parse::<i64>()
        .map(Some)
        .map_err(|_| Error::invalid("If-Match", "must be the document's version in quotes, as its ETag"))
}

/// The device's desired state: per attribute its desired value, version and status (`pending`
/// not yet delivered, `delivered` sent with no answer yet, `applied`, `rejected` with the
/// device's `reason`). The `ETag` header is the document's version. Tenant administrators, the
/// project's application token and the device itself may read it.
#[utoipa::path(get, path = "/api/v1/devices/{deviceId}/desired", operation_id = "getDesiredState", tag = "Desired state",
    params(("deviceId" = String, Path)),
    responses((status = 200, body = Envelope<DesiredState>, headers(("ETag" = String, description = "the document's version, quoted"))),
              (status = 404, body = ErrorBody)))]
#[tracing::instrument(name = "getDesiredState", skip_all, fields(device = %id))]
pub async fn read(State(s): State<AppState>, Auth(who): Auth, Path(id): Path<String>) -> ApiResult<Versioned> {
    let state = s.services.desired.get(&who, &DeviceId::from_string(id)).await?;
    Ok(versioned(state))
}

/// Sets (a value) or removes (null) desired values. Each attribute must exist in the device's
/// model and be W or RW, its value of the attribute's type (400 naming `attributes.<code>`).
/// Every change raises the document's version and the changed attributes'; a connected
/// device is sent the values it has not applied at once (one message of type `c` with
/// `meta.version` the document's version), any other when it connects. With
/// `If-Match: "<version>"` the change is made only if the document is at that version, else
/// 412 with the current version in `ETag`. A Locked device: 409.
#[utoipa::path(patch, path = "/api/v1/devices/{deviceId}/desired", operation_id = "setDesiredState", tag = "Desired state",
    request_body = DesiredInput,
    params(("deviceId" = String, Path),
           ("If-Match" = Option<String>, Header, description = "the version (quoted) the document must be at")),
    responses((status = 200, body = Envelope<DesiredState>, headers(("ETag" = String, description = "the document's new version, quoted"))),
              (status = 400, body = ErrorBody), (status = 403, body = ErrorBody), (status = 404, body = ErrorBody),
              (status = 409, description = "the device is Locked", body = ErrorBody),
              (status = 412, description = "the document is not at the If-Match version (41200); `ETag` is the current one", body = ErrorBody)))]
#[tracing::instrument(name = "setDesiredState", skip_all, fields(device = %id))]
pub async fn update(
    State(s): State<AppState>,
    Auth(who): Auth,
    Path(id): Path<String>,
    headers: HeaderMap,
    AppJson(input): AppJson<DesiredInput>,
) -> ApiResult<Versioned> {
    let expected = if_match(&headers)?;
    let state = s
        .services
        .desired
        .patch(&who, &DeviceId::from_string(id), input.attributes, expected)
        .await?;
    Ok(versioned(state))
}

/// Paging of the waiting controls.
#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[serde(rename_all = "camelCase")]
#[into_params(parameter_in = Query)]
pub struct PendingParams {
    /// Records per page, 1 to 1000 (default 20).
    #[param(minimum = 1, maximum = 1000)]
    page_size: Option<i64>,
    /// Page number from 1 (default 1).
    #[param(minimum = 1, maximum = 4294967295.0)]
    page_no: Option<i64>,
}

/// The controls waiting for the device to connect (sent with `ttlSeconds` while it was not
/// connected, not delivered, not expired), oldest first: their event logs, `processing` with
/// `expiresTime`.
#[utoipa::path(get, path = "/api/v1/devices/{deviceId}/pendingControls", operation_id = "listPendingControls", tag = "Device shadows",
    params(("deviceId" = String, Path), PendingParams),
    responses((status = 200, body = Envelope<Paged<EventLog>>), (status = 400, body = ErrorBody), (status = 404, body = ErrorBody)))]
#[tracing::instrument(name = "listPendingControls", skip_all, fields(device = %id))]
pub async fn pending(
    State(s): State<AppState>,
    Auth(who): Auth,
    Path(id): Path<String>,
    AppQuery(q): AppQuery<PendingParams>,
) -> ApiResult<Json<Envelope<Paged<EventLog>>>> {
    let page = page(q.page_no, q.page_size, 20)?;
    let device = DeviceId::from_string(id);
    Ok(paged(s.services.control.waiting_controls(&who, &device, page).await?))
}

/// Cancels a control waiting for its device: its event log turns `exception` with reason
/// `cancelled` (pushed and sent to webhooks). 409 once it was delivered, or for a log that is
/// not a waiting control.
#[utoipa::path(delete, path = "/api/v1/eventLogs/{eventLogId}", operation_id = "cancelPendingControl", tag = "Device shadows",
    params(("eventLogId" = String, Path)),
    responses((status = 200, body = Envelope<EventLog>), (status = 404, body = ErrorBody),
              (status = 409, description = "delivered already, or not a waiting control", body = ErrorBody)))]
#[tracing::instrument(name = "cancelPendingControl", skip_all, fields(event_log = %id))]
pub async fn cancel(
    State(s): State<AppState>,
    Auth(who): Auth,
    Path(id): Path<String>,
) -> ApiResult<Json<Envelope<EventLog>>> {
    Ok(ok(s.services.control.cancel_waiting(&who, &id).await?))
}
