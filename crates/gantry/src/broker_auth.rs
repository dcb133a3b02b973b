//! `POST /mqtt/auth` and `POST /mqtt/acl`: authentication and authorization for an external
//! broker (EMQX's HTTP authenticator and authorizer), by the same policy as the embedded
//! broker's hooks. The broker calls them with the system administrator's bearer token.

use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, header::AUTHORIZATION};
use axum::routing::post;
use axum::{Json, Router};
use gantry_mqtt::Policy;
use serde::{Deserialize, Serialize};

#[derive(Debug, Deserialize)]
struct AuthRequest {
    clientid: String,
    #[serde(default)]
    username: String,
    #[serde(default)]
    password: String,
}

#[derive(Debug, Deserialize)]
struct AclRequest {
    clientid: String,
    topic: String,
    /// publish or subscribe.
    action: String,
}

#[derive(Debug, Serialize)]
struct Verdict {
    /// allow or deny.
    result: &'static str,
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
        .with_state(policy)
}

/// Only the system administrator's token may ask.
async fn caller_is_system(policy: &Policy, headers: &HeaderMap) -> Result<(), StatusCode> {
    let services = policy.services().ok_or(StatusCode::SERVICE_UNAVAILABLE)?;
    let token = headers
        .get(AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .ok_or(StatusCode::UNAUTHORIZED)?;
    let principal = services
        .auth
        .authenticate(token)
        .await
        .map_err(|_| StatusCode::UNAUTHORIZED)?;
    principal.require_system().map_err(|_| StatusCode::FORBIDDEN)
}

async fn auth(
    State(policy): State<Policy>,
    headers: HeaderMap,
    Json(request): Json<AuthRequest>,
) -> Result<Json<Verdict>, StatusCode> {
    caller_is_system(&policy, &headers).await?;
    Ok(verdict(
        policy
            .login(&request.clientid, &request.username, &request.password, None)
            .await
            .is_ok(),
    ))
}

async fn acl(
    State(policy): State<Policy>,
    headers: HeaderMap,
    Json(request): Json<AclRequest>,
) -> Result<Json<Verdict>, StatusCode> {
    caller_is_system(&policy, &headers).await?;
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
