//! Control messages (`PUT /api/v1/devices/{id}/shadows`) and event logs
//! (`GET /api/v1/projects/{id}/eventLogs`).

use std::sync::Arc;

use axum::extract::{Path, State};
use axum::routing::{get, put};
use axum::{Extension, Json, Router};
use gantry_core::audit::PendingAudit;
use gantry_core::enums::SortOrder;
use gantry_core::event_log::EventLog;
use gantry_core::ids::{DeviceId, ProjectId};
use gantry_core::query::{EventLogQuery, EventLogSort};
use serde::Deserialize;

use crate::AppState;
use crate::envelope::{Done, Envelope, Paged, done, paged};
use crate::error::{ApiResult, EVENT_LOG_HEADER, ErrorBody};
use crate::extract::{AppJson, AppQuery, Auth, page};
use crate::wire::ControlInput;

pub fn routes() -> Router<AppState> {
    // The shadow's GET is routed in events.rs; axum merges the two methods of the path.
    Router::new()
        .route("/api/v1/devices/{deviceId}/shadows", put(send))
        .route("/api/v1/projects/{projectId}/eventLogs", get(logs))
}

/// Filters of the event-log listing.
#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[serde(rename_all = "camelCase")]
#[into_params(parameter_in = Query)]
pub struct LogParams {
    /// Records per page, 1 to 1000 (default 20).
    #[param(minimum = 1, maximum = 1000)]
    page_size: Option<i64>,
    /// Page number from 1 (default 1).
    #[param(minimum = 1, maximum = 4294967295.0)]
    page_no: Option<i64>,
    /// `meta.id` of the message a log records (a control's id, or an ack's).
    event_id: Option<String>,
    device_id: Option<String>,
    context_id: Option<String>,
    /// updatedTime (default) or createdTime; ties are ordered by id.
    #[param(schema_with = crate::param_schemas::log_sort_by)]
    sort_by: Option<String>,
    /// ASC or DESC (default DESC).
    #[param(value_type = Option<gantry_core::enums::SortOrder>)]
    sort_order: Option<String>,
}

/// Sends a control message to the device: validated against the model (attrs exist and are W or
/// RW, actions exist, params typed, required params present; type ack needs correlationId),
/// recorded as an event log (`processing` when needack, else `completed`) and published to the
/// device's inbox `<prefix>/out/json/<deviceId>`. 409 when the device is Locked. The answer's
/// `X-Gantry-Event-Log-Id` header names the event log, to follow the control by. When the
/// publish fails after the log is stored: 503 with returnCode 50302 and the log's id in the same
/// header; the log stays as stored (`processing` with needack, ending in `exception` at the ack
/// timeout).
#[utoipa::path(put, path = "/api/v1/devices/{deviceId}/shadows", operation_id = "sendControl", tag = "Device shadows", request_body = ControlInput,
    params(("deviceId" = String, Path)),
    responses((status = 200, body = Done, headers(("X-Gantry-Event-Log-Id" = String,
                 description = "the id of the control's event log (`GET /projects/{projectId}/eventLogs` lists it; pushed as `eventLog` on the stream)"))),
              (status = 400, body = ErrorBody), (status = 403, body = ErrorBody),
              (status = 404, body = ErrorBody), (status = 409, description = "the device is Locked", body = ErrorBody),
              (status = 503, description = "the message could not be published to the device (50302); its event log was stored", body = ErrorBody,
                 headers(("X-Gantry-Event-Log-Id" = String, description = "the id of the control's event log, stored before the publish failed")))))]
#[tracing::instrument(name = "sendControl", skip_all, fields(device = %id))]
pub async fn send(
    State(s): State<AppState>,
    Auth(who): Auth,
    Path(id): Path<String>,
    audit: Option<Extension<Arc<PendingAudit>>>,
    AppJson(input): AppJson<ControlInput>,
) -> ApiResult<(LogHeader, Json<Done>)> {
    // The audit record commits with the control's event log (the audit layer's, `audit.rs`).
    let (_, log) = s
        .services
        .control
        .send_control_audited(
            &who,
            &DeviceId::from_string(id),
            input.into(),
            audit.as_deref().map(|a| &**a),
        )
        .await?;
    // The body is fixed by the specification; the log to follow the control by goes in a header.
    Ok(([(EVENT_LOG_HEADER, log)], done()))
}

/// `EVENT_LOG_HEADER` and its value.
type LogHeader = [(&'static str, String); 1];

/// Lists the event logs of a project: controls (DeviceControll) and device responses (Response).
#[utoipa::path(get, path = "/api/v1/projects/{projectId}/eventLogs", operation_id = "listEventLogs", tag = "Projects", params(("projectId" = String, Path), LogParams),
    responses((status = 200, body = Envelope<Paged<EventLog>>), (status = 400, body = ErrorBody), (status = 404, body = ErrorBody)))]
#[tracing::instrument(name = "listEventLogs", skip_all, fields(project = %id))]
pub async fn logs(
    State(s): State<AppState>,
    Auth(who): Auth,
    Path(id): Path<String>,
    AppQuery(q): AppQuery<LogParams>,
) -> ApiResult<Json<Envelope<Paged<EventLog>>>> {
    let page = page(q.page_no, q.page_size, 20)?;
    let query = EventLogQuery {
        project: ProjectId::from_string(id),
        device: q.device_id.map(DeviceId::from_string),
        event_id: q.event_id,
        context_id: q.context_id,
        sort_by: q
            .sort_by
            .as_deref()
            .map(EventLogSort::parse)
            .transpose()?
            .unwrap_or(EventLogSort::UpdatedTime),
        sort_order: q
            .sort_order
            .as_deref()
            .map(|t| SortOrder::parse_field(t, "sortOrder"))
            .transpose()?
            .unwrap_or(SortOrder::Desc),
    };
    Ok(paged(s.services.control.list_logs(&who, query, page).await?))
}
