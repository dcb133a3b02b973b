//! Projects: `/api/v1/projects`, with the project's models and devices.

use axum::extract::{Path, State};
use axum::routing::{get, post};
use axum::{Json, Router};
use gantry_core::enums::{DeviceStatus, DeviceType, ProjectStatus, SortOrder};
use gantry_core::ids::{ModelId, ProjectId};
use gantry_core::query::{DeviceQuery, DeviceSort};
use gantry_core::records::{Device, DeviceModel, Project};
use serde::Deserialize;

use crate::AppState;
use crate::envelope::{Done, Envelope, Paged, done, ok, paged};
use crate::error::{ApiResult, ErrorBody};
use crate::extract::{AppJson, AppQuery, Auth, OptionalJson, page};
use crate::wire::{ProjectInput, RotateInput};

pub fn routes() -> Router<AppState> {
    Router::new()
        .route("/api/v1/projects", get(list).post(create))
        .route("/api/v1/projects/{projectId}", get(read).put(update).delete(delete))
        .route("/api/v1/projects/{projectId}/models", get(models))
        .route("/api/v1/projects/{projectId}/devices", get(devices))
        .route(
            "/api/v1/projects/{projectId}/applicationAccessToken/rotate",
            post(rotate),
        )
}

/// Filters of the project listing.
#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[serde(rename_all = "camelCase")]
#[into_params(parameter_in = Query)]
pub struct ProjectListParams {
    /// Records per page, 1 to 1000 (default 20).
    #[param(minimum = 1, maximum = 1000)]
    page_size: Option<i64>,
    /// Page number from 1 (default 1).
    #[param(minimum = 1, maximum = 4294967295.0)]
    page_no: Option<i64>,
    /// development, product or closed; default all.
    #[param(value_type = Option<ProjectStatus>)]
    status: Option<String>,
}

/// Filters and order of the project's device listing.
#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[serde(rename_all = "camelCase")]
#[into_params(parameter_in = Query)]
pub struct DeviceParams {
    /// Records per page, 1 to 1000 (default 20).
    #[param(minimum = 1, maximum = 1000)]
    page_size: Option<i64>,
    /// Page number from 1 (default 1).
    #[param(minimum = 1, maximum = 4294967295.0)]
    page_no: Option<i64>,
    /// Case-insensitive part of the device name.
    device_name: Option<String>,
    /// The device type of the device's model.
    #[param(value_type = Option<DeviceType>)]
    device_type: Option<String>,
    is_virtual: Option<bool>,
    /// Active or Locked.
    #[param(value_type = Option<DeviceStatus>)]
    status: Option<String>,
    /// Only devices of this model.
    model_id: Option<String>,
    /// true: only devices connected over MQTT now; false: only those not connected (see
    /// `GET /devices/{deviceId}/connection`).
    #[param(value_type = Option<bool>)]
    connected: Option<String>,
    /// updatedTime (default), createdTime, deviceName or status; ties are ordered by id.
    #[param(schema_with = crate::param_schemas::device_sort_by)]
    sort_by: Option<String>,
    /// ASC or DESC (default DESC).
    #[param(value_type = Option<gantry_core::enums::SortOrder>)]
    sort_order: Option<String>,
}

impl DeviceParams {
    fn query(&self) -> Result<DeviceQuery, gantry_core::Error> {
        Ok(DeviceQuery {
            project: None,
            within: None,
            model: self.model_id.clone().map(ModelId::from_string),
            device_name: self
                .device_name
                .clone()
                .filter(|n| !n.is_empty())
                .map(|n| gantry_core::names::filter_text("deviceName", n, gantry_core::names::Name::MAX_CHARS))
                .transpose()?,
            device_type: self
                .device_type
                .as_deref()
                .map(|t| DeviceType::parse_field(t, "deviceType"))
                .transpose()?,
            is_virtual: self.is_virtual,
            status: self
                .status
                .as_deref()
                .map(|t| DeviceStatus::parse_field(t, "status"))
                .transpose()?,
            connected: self.connected.as_deref().map(parse_connected).transpose()?,
            sort_by: self
                .sort_by
                .as_deref()
                .map(DeviceSort::parse)
                .transpose()?
                .unwrap_or(DeviceSort::UpdatedTime),
            sort_order: self
                .sort_order
                .as_deref()
                .map(|t| SortOrder::parse_field(t, "sortOrder"))
                .transpose()?
                .unwrap_or(SortOrder::Desc),
        })
    }
}

fn parse_connected(text: &str) -> Result<bool, gantry_core::Error> {
    match text {
        "true" => Ok(true),
        "false" => Ok(false),
        _ => Err(gantry_core::Error::invalid(
            "connected",
            format!("`{text}` is not true or false"),
        )),
    }
}

/// Creates a project with its `applicationAccessToken`. `name` must be unique; `status` defaults to development.
#[utoipa::path(post, path = "/api/v1/projects", operation_id = "createProject", tag = "Projects", request_body = ProjectInput,
    responses((status = 200, body = Envelope<Project>), (status = 400, body = ErrorBody), (status = 409, body = ErrorBody)))]
#[tracing::instrument(name = "createProject", skip_all)]
pub async fn create(
    State(s): State<AppState>,
    Auth(who): Auth,
    AppJson(input): AppJson<ProjectInput>,
) -> ApiResult<Json<Envelope<Project>>> {
    Ok(ok(s.services.catalog.create_project(&who, input.into()).await?))
}

/// Updates a project; fields absent from the body keep their values.
#[utoipa::path(put, path = "/api/v1/projects/{projectId}", operation_id = "updateProject", tag = "Projects", request_body = ProjectInput, params(("projectId" = String, Path)),
    responses((status = 200, body = Envelope<Project>), (status = 400, body = ErrorBody), (status = 404, body = ErrorBody), (status = 409, body = ErrorBody)))]
#[tracing::instrument(name = "updateProject", skip_all, fields(project = %id))]
pub async fn update(
    State(s): State<AppState>,
    Auth(who): Auth,
    Path(id): Path<String>,
    AppJson(input): AppJson<ProjectInput>,
) -> ApiResult<Json<Envelope<Project>>> {
    Ok(ok(s
        .services
        .catalog
        .update_project(&who, &ProjectId::from_string(id), input.into())
        .await?))
}

/// Returns one project.
#[utoipa::path(get, path = "/api/v1/projects/{projectId}", operation_id = "getProject", tag = "Projects", params(("projectId" = String, Path)),
    responses((status = 200, body = Envelope<Project>), (status = 404, body = ErrorBody)))]
#[tracing::instrument(name = "getProject", skip_all, fields(project = %id))]
pub async fn read(
    State(s): State<AppState>,
    Auth(who): Auth,
    Path(id): Path<String>,
) -> ApiResult<Json<Envelope<Project>>> {
    Ok(ok(s
        .services
        .catalog
        .get_project(&who, &ProjectId::from_string(id))
        .await?))
}

/// Lists the projects the caller can access, oldest first.
#[utoipa::path(get, path = "/api/v1/projects", operation_id = "listProjects", tag = "Projects", params(ProjectListParams),
    responses((status = 200, body = Envelope<Paged<Project>>), (status = 400, body = ErrorBody)))]
#[tracing::instrument(name = "listProjects", skip_all)]
pub async fn list(
    State(s): State<AppState>,
    Auth(who): Auth,
    AppQuery(q): AppQuery<ProjectListParams>,
) -> ApiResult<Json<Envelope<Paged<Project>>>> {
    let page = page(q.page_no, q.page_size, 20)?;
    let status = q
        .status
        .as_deref()
        .map(|t| ProjectStatus::parse_field(t, "status"))
        .transpose()?;
    Ok(paged(s.services.catalog.list_projects(&who, status, page).await?))
}

/// The distinct models of the project's devices, as a plain array (no paging).
#[utoipa::path(get, path = "/api/v1/projects/{projectId}/models", operation_id = "listProjectModels", tag = "Projects", params(("projectId" = String, Path)),
    responses((status = 200, body = Envelope<Vec<DeviceModel>>), (status = 404, body = ErrorBody)))]
#[tracing::instrument(name = "listProjectModels", skip_all, fields(project = %id))]
pub async fn models(
    State(s): State<AppState>,
    Auth(who): Auth,
    Path(id): Path<String>,
) -> ApiResult<Json<Envelope<Vec<DeviceModel>>>> {
    Ok(ok(s
        .services
        .catalog
        .project_models(&who, &ProjectId::from_string(id))
        .await?))
}

/// Lists the devices of a project with filters and order.
#[utoipa::path(get, path = "/api/v1/projects/{projectId}/devices", operation_id = "listProjectDevices", tag = "Projects", params(("projectId" = String, Path), DeviceParams),
    responses((status = 200, body = Envelope<Paged<Device>>), (status = 400, body = ErrorBody), (status = 404, body = ErrorBody)))]
#[tracing::instrument(name = "listProjectDevices", skip_all, fields(project = %id))]
pub async fn devices(
    State(s): State<AppState>,
    Auth(who): Auth,
    Path(id): Path<String>,
    AppQuery(q): AppQuery<DeviceParams>,
) -> ApiResult<Json<Envelope<Paged<Device>>>> {
    let page = page(q.page_no, q.page_size, 20)?;
    let query = q.query()?;
    Ok(paged(
        s.services
            .catalog
            .project_devices(&who, &ProjectId::from_string(id), query, page)
            .await?,
    ))
}

/// Deletes a project (soft delete; its application token stops working). 409 while it has devices.
#[utoipa::path(delete, path = "/api/v1/projects/{projectId}", operation_id = "deleteProject", tag = "Projects", params(("projectId" = String, Path)),
    responses((status = 200, body = Done), (status = 404, body = ErrorBody), (status = 409, body = ErrorBody)))]
#[tracing::instrument(name = "deleteProject", skip_all, fields(project = %id))]
pub async fn delete(State(s): State<AppState>, Auth(who): Auth, Path(id): Path<String>) -> ApiResult<Json<Done>> {
    s.services
        .catalog
        .delete_project(&who, &ProjectId::from_string(id))
        .await?;
    Ok(done())
}

/// Replaces the project's `applicationAccessToken` and returns the project with the new one.
/// The old token stops working at once, or after `graceSeconds` (0 to 86400). The body is
/// optional. Administrators and the project's own application token; a device token gets 403.
#[utoipa::path(post, path = "/api/v1/projects/{projectId}/applicationAccessToken/rotate", operation_id = "rotateApplicationAccessToken", tag = "Projects",
    request_body(content = Option<RotateInput>, description = "optional; `graceSeconds` defaults to 0"),
    params(("projectId" = String, Path)),
    responses((status = 200, body = Envelope<Project>), (status = 400, description = "graceSeconds out of range", body = ErrorBody),
              (status = 401, body = ErrorBody), (status = 403, body = ErrorBody), (status = 404, body = ErrorBody)))]
#[tracing::instrument(name = "rotateApplicationAccessToken", skip_all, fields(project = %id))]
pub async fn rotate(
    State(s): State<AppState>,
    Auth(who): Auth,
    Path(id): Path<String>,
    OptionalJson(input): OptionalJson<RotateInput>,
) -> ApiResult<Json<Envelope<Project>>> {
    Ok(ok(s
        .services
        .catalog
        .rotate_application_token(&who, &ProjectId::from_string(id), input.grace_seconds)
        .await?))
}
