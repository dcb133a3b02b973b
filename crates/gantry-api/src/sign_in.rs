//! Sign-in sessions: `/api/v1/auth/login`, `logout`, `me` and `password`.

use axum::extract::State;
use axum::http::HeaderMap;
use axum::http::header::AUTHORIZATION;
use axum::routing::{get, post};
use axum::{Json, Router};
use gantry_core::audit::{Actor, PrincipalType};
use gantry_core::ids::{ProjectId, TenantId};
use gantry_core::principal::Principal;
use gantry_core::user::{Role, User};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::AppState;
use crate::envelope::{Done, Envelope, done, ok};
use crate::error::{ApiResult, ErrorBody};
use crate::extract::{AppJson, Auth, Body, PeerAddr, UnknownFields};

pub fn routes() -> Router<AppState> {
    Router::new()
        .route("/api/v1/auth/login", post(login))
        .route("/api/v1/auth/logout", post(logout))
        .route("/api/v1/auth/me", get(me))
        .route("/api/v1/auth/password", post(password))
}

/// `POST /api/v1/auth/login` body.
#[derive(Debug, Clone, Deserialize, ToSchema)]
pub struct LoginInput {
    pub username: String,
    pub password: String,
}

impl Body for LoginInput {
    const UNKNOWN_FIELDS: UnknownFields = UnknownFields::Refused { echoed: &[] };
}

/// `POST /api/v1/auth/password` body.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct PasswordInput {
    pub current_password: String,
    /// At least 10 characters, not the username.
    pub new_password: String,
}

impl Body for PasswordInput {
    const UNKNOWN_FIELDS: UnknownFields = UnknownFields::Refused { echoed: &[] };
}

/// A session just started.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct Session {
    /// The bearer token of the session (shown this once).
    pub token: String,
    /// When the session ends unless used again, epoch ms: each use moves it to
    /// `--session-ttl` ahead, never past `--session-max-age` after the sign-in.
    pub expires_time: i64,
    pub user: User,
}

/// Who the bearer of the request is.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct Me {
    /// USER, TENANT_TOKEN, APPLICATION_TOKEN or DEVICE.
    pub principal_type: PrincipalType,
    /// The user's, tenant's (for a tenant token), project's or device's id.
    pub principal_id: String,
    pub principal_name: String,
    pub tenant_id: TenantId,
    /// Whether the bearer is the system administrator.
    pub system: bool,
    /// A user's role; tenant tokens count as ADMIN.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub role: Option<Role>,
    /// The projects the bearer is limited to; absent when it sees all of the tenant's.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub project_ids: Option<Vec<ProjectId>>,
    /// The signed-in user's record.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub user: Option<User>,
}

/// Signs a person in with a username and password. A wrong password, an unknown username and
/// a locked user are all 401 (and take the same time). Each failure counts toward the
/// address's login ban (429, returnCode 42901); five failures in a row for one username make
/// that username wait 30 seconds (429, returnCode 42900), whatever address it comes from.
#[utoipa::path(post, path = "/api/v1/auth/login", operation_id = "login", tag = "Sign-in", request_body = LoginInput,
    responses((status = 200, body = Envelope<Session>), (status = 400, body = ErrorBody), (status = 401, body = ErrorBody),
              (status = 413, body = ErrorBody), (status = 415, body = ErrorBody), (status = 429, body = ErrorBody), (status = 503, body = ErrorBody)))]
#[tracing::instrument(name = "login", skip_all)]
pub async fn login(
    State(s): State<AppState>,
    peer: Option<axum::Extension<PeerAddr>>,
    AppJson(input): AppJson<LoginInput>,
) -> ApiResult<Json<Envelope<Session>>> {
    let client = peer.map(|p| p.0.0.ip());
    let signed = s.services.users.login(&input.username, &input.password, client).await?;
    Ok(ok(Session {
        token: signed.token,
        expires_time: signed.expires_time,
        user: signed.user,
    }))
}

/// Ends the session whose token is the bearer (400 for any other kind of token).
#[utoipa::path(post, path = "/api/v1/auth/logout", operation_id = "logout", tag = "Sign-in",
    responses((status = 200, body = Done), (status = 400, body = ErrorBody), (status = 401, body = ErrorBody)))]
#[tracing::instrument(name = "logout", skip_all)]
pub async fn logout(State(s): State<AppState>, Auth(who): Auth, headers: HeaderMap) -> ApiResult<Json<Done>> {
    let token = bearer(&headers).unwrap_or_default();
    s.services.users.logout(&who, token).await?;
    Ok(done())
}

/// Who the bearer is: a signed-in user, or a tenant, application or device token.
#[utoipa::path(get, path = "/api/v1/auth/me", operation_id = "me", tag = "Sign-in",
    responses((status = 200, body = Envelope<Me>), (status = 401, body = ErrorBody)))]
#[tracing::instrument(name = "me", skip_all)]
pub async fn me(State(s): State<AppState>, Auth(who): Auth) -> ApiResult<Json<Envelope<Me>>> {
    let actor = Actor::of(&who);
    let user = s.services.users.me(&who).await?;
    let role = match &who {
        Principal::User { role, .. } => Some(*role),
        Principal::Admin { .. } => Some(Role::Admin),
        _ => None,
    };
    let project_ids = match who.project_scope() {
        gantry_core::principal::ProjectScope::All => None,
        gantry_core::principal::ProjectScope::Only(projects) => Some(projects),
    };
    Ok(ok(Me {
        principal_type: actor.kind,
        principal_id: actor.id,
        principal_name: actor.name,
        tenant_id: actor.tenant,
        system: matches!(who, Principal::Admin { system: true, .. }),
        role,
        project_ids,
        user,
    }))
}

/// The signed-in user changes its password. Every session of the user ends, this one too:
/// sign in again with the new password.
#[utoipa::path(post, path = "/api/v1/auth/password", operation_id = "changePassword", tag = "Sign-in", request_body = PasswordInput,
    responses((status = 200, body = Done), (status = 400, description = "currentPassword is wrong or newPassword breaks a rule", body = ErrorBody),
              (status = 401, body = ErrorBody), (status = 403, description = "not a session token", body = ErrorBody)))]
#[tracing::instrument(name = "changePassword", skip_all)]
pub async fn password(
    State(s): State<AppState>,
    Auth(who): Auth,
    AppJson(input): AppJson<PasswordInput>,
) -> ApiResult<Json<Done>> {
    s.services
        .users
        .change_password(&who, &input.current_password, &input.new_password)
        .await?;
    Ok(done())
}

/// The bearer token of a request, as the `Auth` extractor reads it.
pub fn bearer(headers: &HeaderMap) -> Option<&str> {
    headers
        .get(AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer ").or_else(|| v.strip_prefix("bearer ")))
        .map(str::trim)
}
