//! Webhooks: a project's receivers of its events over HTTP, and each one's deliveries.

use axum::extract::{Path, State};
use axum::routing::get;
use axum::{Json, Router};
use gantry_core::ids::{ProjectId, WebhookId};
use gantry_core::webhook::{CreatedWebhook, Delivery, Webhook};

use crate::AppState;
use crate::envelope::{Done, Envelope, Paged, done, ok, paged};
use crate::error::{ApiResult, ErrorBody};
use crate::extract::{AppJson, AppQuery, Auth, page};
use crate::wire::WebhookInput;

pub fn routes() -> Router<AppState> {
    Router::new()
        .route("/api/v1/projects/{projectId}/webhooks", get(list).post(create))
        .route("/api/v1/webhooks/{webhookId}", get(read).put(update).delete(delete))
        .route("/api/v1/webhooks/{webhookId}/deliveries", get(deliveries))
}

/// Paging of the webhook and delivery listings.
#[derive(Debug, serde::Deserialize, utoipa::IntoParams)]
#[serde(rename_all = "camelCase")]
#[into_params(parameter_in = Query)]
pub struct WebhookListParams {
    /// Records per page, 1 to 1000 (default 20).
    #[param(minimum = 1, maximum = 1000)]
    page_size: Option<i64>,
    /// Page number from 1 (default 1).
    #[param(minimum = 1, maximum = 4294967295.0)]
    page_no: Option<i64>,
}

/// Creates a webhook: the project's events of the given `types` are POSTed to `url` in batches,
/// `{webhookId, events: [{id, type, time, data}]}` (`data` as in the project's stream), signed
/// with `X-Gantry-Signature: sha256=<hex HMAC-SHA256 of the body keyed with the secret>` and
/// named by `X-Gantry-Delivery`. A 2xx answer delivers a batch; anything else, or no answer
/// within 10 s, is retried with exponential backoff for up to 24 hours, then the delivery is
/// `failed`. Redirects are not followed. Events of one device and type arrive in the order they
/// were stored, at least once (a receiver skips an event `id` it has seen). The result carries
/// the `secret` (given or generated), shown this once. Administrators and the project's
/// application token.
#[utoipa::path(post, path = "/api/v1/projects/{projectId}/webhooks", operation_id = "createWebhook", tag = "Webhooks",
    request_body = WebhookInput, params(("projectId" = String, Path)),
    responses((status = 200, body = Envelope<CreatedWebhook>), (status = 400, description = "a field is invalid: `url` names a refused address too", body = ErrorBody)))]
#[tracing::instrument(name = "createWebhook", skip_all, fields(project = %id))]
pub async fn create(
    State(s): State<AppState>,
    Auth(who): Auth,
    Path(id): Path<String>,
    AppJson(input): AppJson<WebhookInput>,
) -> ApiResult<Json<Envelope<CreatedWebhook>>> {
    let created = s
        .services
        .webhooks
        .create(&who, &ProjectId::from_string(id), input.into())
        .await?;
    Ok(ok(created))
}

/// Lists the project's webhooks, oldest first (then by id), without their secrets.
#[utoipa::path(get, path = "/api/v1/projects/{projectId}/webhooks", operation_id = "listWebhooks", tag = "Webhooks",
    params(("projectId" = String, Path), WebhookListParams), responses((status = 200, body = Envelope<Paged<Webhook>>)))]
#[tracing::instrument(name = "listWebhooks", skip_all, fields(project = %id))]
pub async fn list(
    State(s): State<AppState>,
    Auth(who): Auth,
    Path(id): Path<String>,
    AppQuery(q): AppQuery<WebhookListParams>,
) -> ApiResult<Json<Envelope<Paged<Webhook>>>> {
    let page = page(q.page_no, q.page_size, 20)?;
    Ok(paged(
        s.services
            .webhooks
            .list(&who, &ProjectId::from_string(id), page)
            .await?,
    ))
}

/// A webhook, without its secret.
#[utoipa::path(get, path = "/api/v1/webhooks/{webhookId}", operation_id = "getWebhook", tag = "Webhooks",
    params(("webhookId" = String, Path)), responses((status = 200, body = Envelope<Webhook>)))]
#[tracing::instrument(name = "getWebhook", skip_all, fields(webhook = %id))]
pub async fn read(
    State(s): State<AppState>,
    Auth(who): Auth,
    Path(id): Path<String>,
) -> ApiResult<Json<Envelope<Webhook>>> {
    Ok(ok(s.services.webhooks.get(&who, &WebhookId::from_string(id)).await?))
}

/// Changes a webhook's `url`, `types`, `description`, `enabled` or `secret` (absent fields stay).
/// Disabling stops its deliveries: events after it are not kept for it, and a pending delivery
/// waits until it is enabled again.
#[utoipa::path(put, path = "/api/v1/webhooks/{webhookId}", operation_id = "updateWebhook", tag = "Webhooks",
    request_body = WebhookInput, params(("webhookId" = String, Path)), responses((status = 200, body = Envelope<Webhook>)))]
#[tracing::instrument(name = "updateWebhook", skip_all, fields(webhook = %id))]
pub async fn update(
    State(s): State<AppState>,
    Auth(who): Auth,
    Path(id): Path<String>,
    AppJson(input): AppJson<WebhookInput>,
) -> ApiResult<Json<Envelope<Webhook>>> {
    Ok(ok(s
        .services
        .webhooks
        .update(&who, &WebhookId::from_string(id), input.into())
        .await?))
}

/// Deletes a webhook with its deliveries; events waiting for it are dropped.
#[utoipa::path(delete, path = "/api/v1/webhooks/{webhookId}", operation_id = "deleteWebhook", tag = "Webhooks",
    params(("webhookId" = String, Path)), responses((status = 200, body = Done)))]
#[tracing::instrument(name = "deleteWebhook", skip_all, fields(webhook = %id))]
pub async fn delete(State(s): State<AppState>, Auth(who): Auth, Path(id): Path<String>) -> ApiResult<Json<Done>> {
    s.services.webhooks.delete(&who, &WebhookId::from_string(id)).await?;
    Ok(done())
}

/// The webhook's deliveries, newest first (then by id): `status` pending, delivered or failed,
/// `attempts`, the last attempt's HTTP status and error, and their times.
#[utoipa::path(get, path = "/api/v1/webhooks/{webhookId}/deliveries", operation_id = "listWebhookDeliveries", tag = "Webhooks",
    params(("webhookId" = String, Path), WebhookListParams), responses((status = 200, body = Envelope<Paged<Delivery>>)))]
#[tracing::instrument(name = "listWebhookDeliveries", skip_all, fields(webhook = %id))]
pub async fn deliveries(
    State(s): State<AppState>,
    Auth(who): Auth,
    Path(id): Path<String>,
    AppQuery(q): AppQuery<WebhookListParams>,
) -> ApiResult<Json<Envelope<Paged<Delivery>>>> {
    let page = page(q.page_no, q.page_size, 20)?;
    Ok(paged(
        s.services
            .webhooks
            .deliveries(&who, &WebhookId::from_string(id), page)
            .await?,
    ))
}
