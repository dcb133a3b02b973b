//! `POST /mqtt/auth` and `POST /mqtt/acl`: authentication and authorization for an external
//! broker (EMQX's HTTP authenticator and authorizer), by the same policy as the embedded
//! broker's hooks. The broker calls them with the system administrator's bearer token.
//! Errors use the API's error shape; a broker reads only a 200's `result`.

use axum::extract::State;
use axum::http::{HeaderMap, header::AUTHORIZATION};
use axum::routing::post;
use axum::{Extension, Json, Router};
use gantry_api::extract::{Body, UnknownFields};
use gantry_api::request_log::Caller;
use gantry_api::{ApiError, AppJson, ErrorBody};
use gantry_core::Error;
use gantry_mqtt::Policy;
use serde::{Deserialize, Serialize};
use utoipa::{OpenApi, ToSchema};

/// `POST /mqtt/auth` body: a client's CONNECT.
#[derive(Debug, Deserialize, ToSchema)]
pub struct AuthRequest {
    clientid: String,
    #[serde(default)]
    username: String,
    #[serde(default)]
    password: String,
}

/// `POST /mqtt/acl` body: a client's publish or subscribe.
#[derive(Debug, Deserialize, ToSchema)]
pub struct AclRequest {
    clientid: String,
    topic: String,
    /// publish or subscribe; anything else is denied.
    action: String,
}

/// The verdict a broker acts on.
#[derive(Debug, Serialize, ToSchema)]
pub struct Verdict {
    /// allow or deny.
    #[schema(pattern = "^(allow|deny)$")]
    result: &'static str,
    /// false when allowed (a device or route identity is never a superuser); absent when denied.
    #[serde(skip_serializing_if = "Option::is_none")]
    is_superuser: Option<bool>,
}

fn verdict(allow: bool) -> Json<Verdict> {
    Json(Verdict {
        result: if allow { "allow" } else { "deny" },
        is_superuser: allow.then_some(false),
    })
}

pub fn routes(policy: Policy) -> Router {
    Router::new()
        .route("/mqtt/auth", post(auth))
        .route("/mqtt/acl", post(acl))
        .layer(axum::middleware::from_fn(gantry_api::request_log::log_request))
        .with_state(policy)
}

// The broker's auth plugin writes these bodies, and may add fields of its own.
impl Body for AuthRequest {
    const UNKNOWN_FIELDS: UnknownFields = UnknownFields::Ignored;
}

impl Body for AclRequest {
    const UNKNOWN_FIELDS: UnknownFields = UnknownFields::Ignored;
}

#[derive(OpenApi)]
#[openapi(paths(auth, acl), components(schemas(ErrorBody)))]
struct BrokerAuthDoc;

/// The API's document with these two paths added.
pub fn openapi() -> utoipa::openapi::OpenApi {
    gantry_api::openapi::ApiDoc::openapi().merge_from(BrokerAuthDoc::openapi())
}

/// Only the system administrator's token may ask.
/// The caller goes into the request's log line (`request_log`).
async fn caller_is_system(policy: &Policy, headers: &HeaderMap, caller: Option<&Caller>) -> Result<(), ApiError> {
    let services = policy.services().ok_or(Error::Unavailable)?;
    let token = headers
        .get(AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .ok_or(Error::Unauthorized)?;
    let principal = services
        .auth
        .authenticate(token)
        .await
        .map_err(|_| Error::Unauthorized)?;
    if let Some(caller) = caller {
        caller.set(&principal);
    }
    Ok(principal.require_system()?)
}

/// Whether a client may connect: a device with its access token, or a route's temporary
/// identity before it expires. System administrator's token only.
#[utoipa::path(post, path = "/mqtt/auth", operation_id = "mqttAuth", tag = "Broker hooks", request_body = AuthRequest,
    responses((status = 200, body = Verdict),
              (status = 400, description = "the body is not JSON of this shape (40000, 40001)", body = ErrorBody),
              (status = 401, description = "missing or unknown bearer token (40100)", body = ErrorBody),
              (status = 403, description = "not the system administrator (40300)", body = ErrorBody),
              (status = 413, description = "the body exceeds the size limit (41300)", body = ErrorBody),
              (status = 415, description = "the body is not sent as application/json (41500)", body = ErrorBody),
              (status = 503, description = "starting or shutting down (50300): retry", body = ErrorBody)))]
async fn auth(
    State(policy): State<Policy>,
    headers: HeaderMap,
    caller: Option<Extension<Caller>>,
    AppJson(request): AppJson<AuthRequest>,
) -> Result<Json<Verdict>, ApiError> {
    caller_is_system(&policy, &headers, caller.as_deref()).await?;
    Ok(verdict(
        policy
            .login(&request.clientid, &request.username, &request.password, None)
            .await
            .is_ok(),
    ))
}

/// Whether a connected client may publish to or subscribe to a topic, by the embedded broker's
/// rules. System administrator's token only.
#[utoipa::path(post, path = "/mqtt/acl", operation_id = "mqttAcl", tag = "Broker hooks", request_body = AclRequest,
    responses((status = 200, body = Verdict),
              (status = 400, description = "the body is not JSON of this shape (40000, 40001)", body = ErrorBody),
              (status = 401, description = "missing or unknown bearer token (40100)", body = ErrorBody),
              (status = 403, description = "not the system administrator (40300)", body = ErrorBody),
              (status = 413, description = "the body exceeds the size limit (41300)", body = ErrorBody),
              (status = 415, description = "the body is not sent as application/json (41500)", body = ErrorBody),
              (status = 503, description = "starting or shutting down (50300): retry", body = ErrorBody)))]
async fn acl(
    State(policy): State<Policy>,
    headers: HeaderMap,
    caller: Option<Extension<Caller>>,
    AppJson(request): AppJson<AclRequest>,
) -> Result<Json<Verdict>, ApiError> {
    caller_is_system(&policy, &headers, caller.as_deref()).await?;
    let Some(identity) = policy.identify(&request.clientid).await else {
        return Ok(verdict(false));
    };
    let allow = match request.action.as_str() {
        "subscribe" => policy.may_subscribe(&request.clientid, &request.topic),
        "publish" => policy
            .may_publish(&identity, &request.clientid, &request.topic)
            .await
            .is_some(),
        _ => false,
    };
    if !allow {
        tracing::info!(
            client = request.clientid,
            topic = request.topic,
            action = request.action,
            "external broker ACL: denied"
        );
    }
    Ok(verdict(allow))
}
