//! Device models: `/api/v1/deviceModels`.

use axum::extract::{Path, State};
use axum::routing::get;
use axum::{Json, Router};
use gantry_core::ids::ModelId;
use gantry_core::records::{Device, DeviceModel};
use serde::Deserialize;

use crate::AppState;
use crate::envelope::{Done, Envelope, Paged, done, ok, paged};
use crate::error::{ApiResult, ErrorBody};
use crate::extract::{AppJson, AppQuery, Auth, page};
use crate::wire::ModelInput;

pub fn routes() -> Router<AppState> {
    Router::new()
        .route("/api/v1/deviceModels", get(list).post(create))
        .route("/api/v1/deviceModels/{modelId}", get(read).put(update).delete(delete))
        .route("/api/v1/deviceModels/{modelId}/devices", get(devices))
}

/// Paging of model listings.
#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[serde(rename_all = "camelCase")]
#[into_params(parameter_in = Query)]
pub struct ModelListParams {
    /// Records per page, 1 to 1000 (default 20).
    #[param(minimum = 1, maximum = 1000)]
    page_size: Option<i64>,
    /// Page number from 1 (default 1).
    #[param(minimum = 1, maximum = 4294967295.0)]
    page_no: Option<i64>,
}

/// Creates a device model. `name` must be unique; `attributesMap` and `actionsMap` must not both be empty.
#[utoipa::path(post, path = "/api/v1/deviceModels", operation_id = "createDeviceModel", tag = "Device models", request_body = ModelInput,
    responses((status = 200, body = Envelope<DeviceModel>), (status = 400, body = ErrorBody), (status = 409, body = ErrorBody)))]
#[tracing::instrument(name = "createDeviceModel", skip_all)]
pub async fn create(
    State(s): State<AppState>,
    Auth(who): Auth,
    AppJson(input): AppJson<ModelInput>,
) -> ApiResult<Json<Envelope<DeviceModel>>> {
    Ok(ok(s.services.catalog.create_model(&who, input.into()).await?))
}

/// Updates a device model; fields absent from the body keep their values, maps sent replace the stored maps.
#[utoipa::path(put, path = "/api/v1/deviceModels/{modelId}", operation_id = "updateDeviceModel", tag = "Device models", request_body = ModelInput,
    params(("modelId" = String, Path)),
    responses((status = 200, body = Envelope<DeviceModel>), (status = 400, body = ErrorBody), (status = 404, body = ErrorBody), (status = 409, body = ErrorBody)))]
#[tracing::instrument(name = "updateDeviceModel", skip_all, fields(model = %id))]
pub async fn update(
    State(s): State<AppState>,
    Auth(who): Auth,
    Path(id): Path<String>,
    AppJson(input): AppJson<ModelInput>,
) -> ApiResult<Json<Envelope<DeviceModel>>> {
    Ok(ok(s
        .services
        .catalog
        .update_model(&who, &ModelId::from_string(id), input.into())
        .await?))
}

/// Returns one device model.
#[utoipa::path(get, path = "/api/v1/deviceModels/{modelId}", operation_id = "getDeviceModel", tag = "Device models", params(("modelId" = String, Path)),
    responses((status = 200, body = Envelope<DeviceModel>), (status = 404, body = ErrorBody)))]
#[tracing::instrument(name = "getDeviceModel", skip_all, fields(model = %id))]
pub async fn read(
    State(s): State<AppState>,
    Auth(who): Auth,
    Path(id): Path<String>,
) -> ApiResult<Json<Envelope<DeviceModel>>> {
    Ok(ok(s
        .services
        .catalog
        .get_model(&who, &ModelId::from_string(id))
        .await?))
}

/// Lists the device models of the caller's tenant, oldest first.
#[utoipa::path(get, path = "/api/v1/deviceModels", operation_id = "listDeviceModels", tag = "Device models", params(ModelListParams),
    responses((status = 200, body = Envelope<Paged<DeviceModel>>), (status = 400, body = ErrorBody)))]
#[tracing::instrument(name = "listDeviceModels", skip_all)]
pub async fn list(
    State(s): State<AppState>,
    Auth(who): Auth,
    AppQuery(q): AppQuery<ModelListParams>,
) -> ApiResult<Json<Envelope<Paged<DeviceModel>>>> {
    let page = page(q.page_no, q.page_size, 20)?;
    Ok(paged(s.services.catalog.list_models(&who, page).await?))
}

/// Lists the devices of a model (an application sees those of its project only).
#[utoipa::path(get, path = "/api/v1/deviceModels/{modelId}/devices", operation_id = "listDeviceModelDevices", tag = "Device models", params(("modelId" = String, Path), ModelListParams),
    responses((status = 200, body = Envelope<Paged<Device>>), (status = 404, body = ErrorBody)))]
#[tracing::instrument(name = "listDeviceModelDevices", skip_all, fields(model = %id))]
pub async fn devices(
    State(s): State<AppState>,
    Auth(who): Auth,
    Path(id): Path<String>,
    AppQuery(q): AppQuery<ModelListParams>,
) -> ApiResult<Json<Envelope<Paged<Device>>>> {
    let page = page(q.page_no, q.page_size, 20)?;
    Ok(paged(
        s.services
            .catalog
            .model_devices(&who, &ModelId::from_string(id), page)
            .await?,
    ))
}

/// Deletes a device model (soft delete: hidden from reads and listings, its name free again). 409 while devices use it.
#[utoipa::path(delete, path = "/api/v1/deviceModels/{modelId}", operation_id = "deleteDeviceModel", tag = "Device models", params(("modelId" = String, Path)),
    responses((status = 200, body = Done), (status = 404, body = ErrorBody), (status = 409, body = ErrorBody)))]
#[tracing::instrument(name = "deleteDeviceModel", skip_all, fields(model = %id))]
pub async fn delete(State(s): State<AppState>, Auth(who): Auth, Path(id): Path<String>) -> ApiResult<Json<Done>> {
    s.services.catalog.delete_model(&who, &ModelId::from_string(id)).await?;
    Ok(done())
}
