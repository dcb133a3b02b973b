//! Alarm rules on a device model, and a project's alarms: list, read, acknowledge, clear,
//! comment and history.

use axum::extract::{Path, State};
use axum::routing::{get, post};
use axum::{Json, Router};
use gantry_core::alarm::{Alarm, AlarmFilter, AlarmHistoryEntry};
use gantry_core::alarm_rule::AlarmRuleView;
use gantry_core::ids::{AlarmId, AlarmRuleId, ModelId, ProjectId};

use crate::AppState;
use crate::envelope::{Done, Envelope, Paged, done, ok, paged};
use crate::error::{ApiResult, ErrorBody};
use crate::extract::{AppJson, AppQuery, Auth, page};
use crate::wire::{AlarmRuleInput, CommentInput};

pub fn routes() -> Router<AppState> {
    Router::new()
        .route(
            "/api/v1/deviceModels/{modelId}/alarmRules",
            get(list_rules).post(create_rule),
        )
        .route(
            "/api/v1/alarmRules/{ruleId}",
            get(read_rule).put(update_rule).delete(delete_rule),
        )
        .route("/api/v1/projects/{projectId}/alarms", get(list))
        .route("/api/v1/alarms/{alarmId}", get(read))
        .route("/api/v1/alarms/{alarmId}/acknowledge", post(acknowledge))
        .route("/api/v1/alarms/{alarmId}/clear", post(clear))
        .route("/api/v1/alarms/{alarmId}/comments", post(comment))
        .route("/api/v1/alarms/{alarmId}/history", get(history))
}

/// Filters, order and paging of a project's alarm listing.
#[derive(Debug, serde::Deserialize, utoipa::IntoParams)]
#[serde(rename_all = "camelCase")]
#[into_params(parameter_in = Query)]
pub struct AlarmListParams {
    /// Records per page, 1 to 1000 (default 20).
    #[param(minimum = 1, maximum = 1000)]
    page_size: Option<i64>,
    /// Page number from 1 (default 1).
    #[param(minimum = 1, maximum = 4294967295.0)]
    page_no: Option<i64>,
    /// A comma list of ACTIVE, ACKNOWLEDGED, CLEARED (default: all).
    status: Option<String>,
    /// A comma list of CRITICAL, MAJOR, MINOR, WARNING (default: all).
    severity: Option<String>,
    /// One device's alarms; required for a device token (its own device).
    device_id: Option<String>,
    /// Earliest `firstEventTime`, inclusive: `yyyy-MM-dd'T'HH:mm:ss.SSSZ` (`+` written `%2B`).
    start_date: Option<String>,
    /// Latest `firstEventTime`, inclusive, in the same format.
    end_date: Option<String>,
    /// updatedTime (default), createdTime, firstEventTime, lastEventTime or count; ties by id.
    sort_by: Option<String>,
    /// ASC or DESC (default DESC).
    #[param(value_type = Option<gantry_core::enums::SortOrder>)]
    sort_order: Option<String>,
}

/// Creates an alarm rule on one attribute of the model's devices (tenant administrators).
/// `condition` is `{op, value}` (`>`, `>=`, `<`, `<=`, `==`, `!=`; ordering only on Integer and
/// Float) or `{op: "between" | "outside", low, high}`; a bound may instead name a key of the
/// device's `metadata` (`valueFrom`, `lowFrom`, `highFrom`): a device without it is not
/// evaluated (the rule's `status.devicesNotEvaluated` counts them). The condition must hold on
/// every event for `forSeconds` (device time) before the alarm is raised; `escalations` raise
/// the open alarm's severity while theirs hold; `clearCondition` (default: the condition no
/// longer holds) must hold for `clearForSeconds` to clear it; `noDataSeconds` raises an alarm
/// when the device sends nothing for the attribute that long (arrival time). 400 names the field.
#[utoipa::path(post, path = "/api/v1/deviceModels/{modelId}/alarmRules", operation_id = "createAlarmRule", tag = "Alarms",
    request_body = AlarmRuleInput, params(("modelId" = String, Path)),
    responses((status = 200, body = Envelope<AlarmRuleView>), (status = 400, description = "a field is invalid (named in the message)", body = ErrorBody)))]
#[tracing::instrument(name = "createAlarmRule", skip_all, fields(model = %id))]
pub async fn create_rule(
    State(s): State<AppState>,
    Auth(who): Auth,
    Path(id): Path<String>,
    AppJson(input): AppJson<AlarmRuleInput>,
) -> ApiResult<Json<Envelope<AlarmRuleView>>> {
    let rule = s
        .services
        .alarms
        .create_rule(&who, &ModelId::from_string(id), input.into())
        .await?;
    Ok(ok(rule))
}

/// The model's alarm rules, oldest first (a plain array): administrators and applications.
#[utoipa::path(get, path = "/api/v1/deviceModels/{modelId}/alarmRules", operation_id = "listAlarmRules", tag = "Alarms",
    params(("modelId" = String, Path)), responses((status = 200, body = Envelope<Vec<AlarmRuleView>>)))]
#[tracing::instrument(name = "listAlarmRules", skip_all, fields(model = %id))]
pub async fn list_rules(
    State(s): State<AppState>,
    Auth(who): Auth,
    Path(id): Path<String>,
) -> ApiResult<Json<Envelope<Vec<AlarmRuleView>>>> {
    Ok(ok(s
        .services
        .alarms
        .list_rules(&who, &ModelId::from_string(id))
        .await?))
}

/// An alarm rule with its `status`.
#[utoipa::path(get, path = "/api/v1/alarmRules/{ruleId}", operation_id = "getAlarmRule", tag = "Alarms",
    params(("ruleId" = String, Path)), responses((status = 200, body = Envelope<AlarmRuleView>)))]
#[tracing::instrument(name = "getAlarmRule", skip_all, fields(rule = %id))]
pub async fn read_rule(
    State(s): State<AppState>,
    Auth(who): Auth,
    Path(id): Path<String>,
) -> ApiResult<Json<Envelope<AlarmRuleView>>> {
    Ok(ok(s
        .services
        .alarms
        .get_rule(&who, &AlarmRuleId::from_string(id))
        .await?))
}

/// Replaces an alarm rule (the body of the create; tenant administrators). Disabling it, or
/// changing what it tests, clears its open alarms (`clearedBy` names the rule change).
#[utoipa::path(put, path = "/api/v1/alarmRules/{ruleId}", operation_id = "updateAlarmRule", tag = "Alarms",
    request_body = AlarmRuleInput, params(("ruleId" = String, Path)), responses((status = 200, body = Envelope<AlarmRuleView>)))]
#[tracing::instrument(name = "updateAlarmRule", skip_all, fields(rule = %id))]
pub async fn update_rule(
    State(s): State<AppState>,
    Auth(who): Auth,
    Path(id): Path<String>,
    AppJson(input): AppJson<AlarmRuleInput>,
) -> ApiResult<Json<Envelope<AlarmRuleView>>> {
    Ok(ok(s
        .services
        .alarms
        .update_rule(&who, &AlarmRuleId::from_string(id), input.into())
        .await?))
}

/// Deletes an alarm rule and clears its open alarms (tenant administrators).
#[utoipa::path(delete, path = "/api/v1/alarmRules/{ruleId}", operation_id = "deleteAlarmRule", tag = "Alarms",
    params(("ruleId" = String, Path)), responses((status = 200, body = Done)))]
#[tracing::instrument(name = "deleteAlarmRule", skip_all, fields(rule = %id))]
pub async fn delete_rule(State(s): State<AppState>, Auth(who): Auth, Path(id): Path<String>) -> ApiResult<Json<Done>> {
    s.services
        .alarms
        .delete_rule(&who, &AlarmRuleId::from_string(id))
        .await?;
    Ok(done())
}

/// The project's alarms, newest `updatedTime` first by default. At most one alarm that is not
/// CLEARED exists per device and rule (or attribute, for a device alarm on channel w).
#[utoipa::path(get, path = "/api/v1/projects/{projectId}/alarms", operation_id = "listAlarms", tag = "Alarms",
    params(("projectId" = String, Path), AlarmListParams), responses((status = 200, body = Envelope<Paged<Alarm>>)))]
#[tracing::instrument(name = "listAlarms", skip_all, fields(project = %id))]
pub async fn list(
    State(s): State<AppState>,
    Auth(who): Auth,
    Path(id): Path<String>,
    AppQuery(q): AppQuery<AlarmListParams>,
) -> ApiResult<Json<Envelope<Paged<Alarm>>>> {
    let page = page(q.page_no, q.page_size, 20)?;
    let filter = AlarmFilter {
        status: q.status,
        severity: q.severity,
        device_id: q.device_id,
        start_date: q.start_date,
        end_date: q.end_date,
        sort_by: q.sort_by,
        sort_order: q.sort_order,
    };
    Ok(paged(
        s.services
            .alarms
            .list_alarms(&who, &ProjectId::from_string(id), filter, page)
            .await?,
    ))
}

/// An alarm.
#[utoipa::path(get, path = "/api/v1/alarms/{alarmId}", operation_id = "getAlarm", tag = "Alarms",
    params(("alarmId" = String, Path)), responses((status = 200, body = Envelope<Alarm>)))]
#[tracing::instrument(name = "getAlarm", skip_all, fields(alarm = %id))]
pub async fn read(
    State(s): State<AppState>,
    Auth(who): Auth,
    Path(id): Path<String>,
) -> ApiResult<Json<Envelope<Alarm>>> {
    Ok(ok(s.services.alarms.get_alarm(&who, &AlarmId::from_string(id)).await?))
}

/// ACTIVE to ACKNOWLEDGED (still raised, seen by the caller); 409 when acknowledged or cleared
/// already. Administrators and the project's application token.
#[utoipa::path(post, path = "/api/v1/alarms/{alarmId}/acknowledge", operation_id = "acknowledgeAlarm", tag = "Alarms",
    params(("alarmId" = String, Path)), responses((status = 200, body = Envelope<Alarm>), (status = 409, description = "acknowledged or cleared already", body = ErrorBody)))]
#[tracing::instrument(name = "acknowledgeAlarm", skip_all, fields(alarm = %id))]
pub async fn acknowledge(
    State(s): State<AppState>,
    Auth(who): Auth,
    Path(id): Path<String>,
) -> ApiResult<Json<Envelope<Alarm>>> {
    Ok(ok(s
        .services
        .alarms
        .acknowledge(&who, &AlarmId::from_string(id))
        .await?))
}

/// Clears an alarm; 409 when cleared already. A rule's condition starts over: if it still
/// holds, a new alarm is raised. Administrators and the project's application token.
#[utoipa::path(post, path = "/api/v1/alarms/{alarmId}/clear", operation_id = "clearAlarm", tag = "Alarms",
    params(("alarmId" = String, Path)), responses((status = 200, body = Envelope<Alarm>), (status = 409, description = "cleared already", body = ErrorBody)))]
#[tracing::instrument(name = "clearAlarm", skip_all, fields(alarm = %id))]
pub async fn clear(
    State(s): State<AppState>,
    Auth(who): Auth,
    Path(id): Path<String>,
) -> ApiResult<Json<Envelope<Alarm>>> {
    Ok(ok(s.services.alarms.clear(&who, &AlarmId::from_string(id)).await?))
}

/// Adds a comment (`text`, 1 to 4096 characters) to the alarm's history.
#[utoipa::path(post, path = "/api/v1/alarms/{alarmId}/comments", operation_id = "commentAlarm", tag = "Alarms",
    request_body = CommentInput, params(("alarmId" = String, Path)), responses((status = 200, body = Envelope<AlarmHistoryEntry>)))]
#[tracing::instrument(name = "commentAlarm", skip_all, fields(alarm = %id))]
pub async fn comment(
    State(s): State<AppState>,
    Auth(who): Auth,
    Path(id): Path<String>,
    AppJson(input): AppJson<CommentInput>,
) -> ApiResult<Json<Envelope<AlarmHistoryEntry>>> {
    Ok(ok(s
        .services
        .alarms
        .comment(&who, &AlarmId::from_string(id), input.text)
        .await?))
}

/// Every transition of the alarm, oldest first: RAISED, ESCALATED, DEESCALATED, ACKNOWLEDGED,
/// COMMENTED, CLEARED, each with who (`by`), when (`time`), the value and the severity and
/// status after it.
#[utoipa::path(get, path = "/api/v1/alarms/{alarmId}/history", operation_id = "alarmHistory", tag = "Alarms",
    params(("alarmId" = String, Path)), responses((status = 200, body = Envelope<Vec<AlarmHistoryEntry>>)))]
#[tracing::instrument(name = "alarmHistory", skip_all, fields(alarm = %id))]
pub async fn history(
    State(s): State<AppState>,
    Auth(who): Auth,
    Path(id): Path<String>,
) -> ApiResult<Json<Envelope<Vec<AlarmHistoryEntry>>>> {
    Ok(ok(s.services.alarms.history(&who, &AlarmId::from_string(id)).await?))
}
