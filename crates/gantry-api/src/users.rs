//! User accounts: `/api/v1/users`, for the tenant's administrators (the system administrator
//! manages any tenant's users with `tenantId`).

use axum::extract::{Path, State};
use axum::routing::{get, post};
use axum::{Json, Router};
use gantry_core::ids::{ProjectId, TenantId};
use gantry_core::user::{Role, User, UserId, UserQuery};
use gantry_core::users::UserFields;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::AppState;
use crate::envelope::{Done, Envelope, Paged, done, ok, paged};
use crate::error::{ApiResult, ErrorBody};
use crate::extract::{AppJson, AppQuery, Auth, Body, UnknownFields, page};

pub fn routes() -> Router<AppState> {
    Router::new()
        .route("/api/v1/users", post(create).get(list))
        .route("/api/v1/users/{userId}", get(read).put(update).delete(delete))
        .route("/api/v1/users/{userId}/lock", post(lock))
        .route("/api/v1/users/{userId}/unlock", post(unlock))
}

/// `POST /api/v1/users` and `PUT /api/v1/users/{userId}` body; absent fields stay as they are.
#[derive(Debug, Clone, Default, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct UserInput {
    /// 3 to 64 characters: letters, digits, `.`, `_`, `-`, `@`; unique in the installation,
    /// compared case-insensitively. Required to create.
    pub username: Option<String>,
    /// At least 10 characters, not the username. Left out on create, a random one is generated
    /// and shown in the answer only. Setting it ends the user's sessions.
    pub password: Option<String>,
    pub display_name: Option<String>,
    pub email: Option<String>,
    /// ADMIN, OPERATOR or VIEWER. Required to create; a change ends the user's sessions.
    pub role: Option<Role>,
    /// The projects of an OPERATOR or VIEWER (empty or absent: all of the tenant's); a change
    /// ends the user's sessions.
    pub project_ids: Option<Vec<ProjectId>>,
    /// The system administrator only: the tenant of the new user (default: its own).
    pub tenant_id: Option<TenantId>,
}

impl Body for UserInput {
    const UNKNOWN_FIELDS: UnknownFields = UnknownFields::Refused {
        echoed: &[
            "id",
            "status",
            "createdBy",
            "createdTime",
            "updatedBy",
            "updatedTime",
            "lastLoginTime",
        ],
    };
}

impl From<UserInput> for UserFields {
    fn from(input: UserInput) -> Self {
        UserFields {
            tenant_id: input.tenant_id,
            username: input.username,
            password: input.password,
            display_name: input.display_name,
            email: input.email,
            role: input.role,
            project_ids: input.project_ids,
        }
    }
}

/// A user just created; `password` is there when it was generated, and only in this answer.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct CreatedUserView {
    #[serde(flatten)]
    pub user: User,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub password: Option<String>,
}

/// Filters and paging of the user listing.
#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[serde(rename_all = "camelCase")]
#[into_params(parameter_in = Query)]
pub struct UserListParams {
    /// ADMIN, OPERATOR or VIEWER.
    role: Option<Role>,
    /// Users whose `projectIds` hold this project.
    project_id: Option<String>,
    /// Case-insensitive substring of the username.
    username: Option<String>,
    /// The system administrator only: another tenant's users.
    tenant_id: Option<String>,
    /// Records per page, 1 to 1000 (default 20).
    #[param(minimum = 1, maximum = 1000)]
    page_size: Option<i64>,
    /// Page number from 1 (default 1).
    #[param(minimum = 1, maximum = 4294967295.0)]
    page_no: Option<i64>,
}

/// Creates a user of the caller's tenant (or of `tenantId`, for the system administrator).
/// Tenant administrators (token or ADMIN user) only. The answer never holds a password but the
/// one generated when none was given.
#[utoipa::path(post, path = "/api/v1/users", operation_id = "createUser", tag = "Users", request_body = UserInput,
    responses((status = 200, body = Envelope<CreatedUserView>), (status = 400, body = ErrorBody), (status = 403, body = ErrorBody), (status = 409, description = "the username is taken", body = ErrorBody)))]
#[tracing::instrument(name = "createUser", skip_all)]
pub async fn create(
    State(s): State<AppState>,
    Auth(who): Auth,
    AppJson(input): AppJson<UserInput>,
) -> ApiResult<Json<Envelope<CreatedUserView>>> {
    let created = s.services.users.create(&who, input.into()).await?;
    Ok(ok(CreatedUserView {
        user: created.user,
        password: created.generated_password.map(|p| p.expose().to_owned()),
    }))
}

/// The tenant's users, ordered by username; filters `role`, `projectId`, `username` (substring).
#[utoipa::path(get, path = "/api/v1/users", operation_id = "listUsers", tag = "Users", params(UserListParams),
    responses((status = 200, body = Envelope<Paged<User>>), (status = 400, body = ErrorBody), (status = 403, body = ErrorBody)))]
#[tracing::instrument(name = "listUsers", skip_all)]
pub async fn list(
    State(s): State<AppState>,
    Auth(who): Auth,
    AppQuery(q): AppQuery<UserListParams>,
) -> ApiResult<Json<Envelope<Paged<User>>>> {
    let page = page(q.page_no, q.page_size, 20)?;
    let query = UserQuery {
        role: q.role,
        project: q.project_id.map(ProjectId::from_string),
        username: q.username.filter(|u| !u.is_empty()),
    };
    let tenant = q.tenant_id.map(TenantId::from_string);
    Ok(paged(s.services.users.list(&who, tenant.as_ref(), query, page).await?))
}

/// One user.
#[utoipa::path(get, path = "/api/v1/users/{userId}", operation_id = "getUser", tag = "Users", params(("userId" = String, Path)),
    responses((status = 200, body = Envelope<User>), (status = 403, body = ErrorBody), (status = 404, body = ErrorBody)))]
#[tracing::instrument(name = "getUser", skip_all)]
pub async fn read(
    State(s): State<AppState>,
    Auth(who): Auth,
    Path(id): Path<String>,
) -> ApiResult<Json<Envelope<User>>> {
    Ok(ok(s.services.users.get(&who, &UserId::from_string(id)).await?))
}

/// Changes a user. A new `password`, `role` or `projectIds` ends all its sessions at once.
#[utoipa::path(put, path = "/api/v1/users/{userId}", operation_id = "updateUser", tag = "Users", request_body = UserInput, params(("userId" = String, Path)),
    responses((status = 200, body = Envelope<User>), (status = 400, body = ErrorBody), (status = 403, body = ErrorBody), (status = 404, body = ErrorBody), (status = 409, body = ErrorBody)))]
#[tracing::instrument(name = "updateUser", skip_all)]
pub async fn update(
    State(s): State<AppState>,
    Auth(who): Auth,
    Path(id): Path<String>,
    AppJson(input): AppJson<UserInput>,
) -> ApiResult<Json<Envelope<User>>> {
    Ok(ok(s
        .services
        .users
        .update(&who, &UserId::from_string(id), input.into())
        .await?))
}

/// Deletes a user; its sessions end at once.
#[utoipa::path(delete, path = "/api/v1/users/{userId}", operation_id = "deleteUser", tag = "Users", params(("userId" = String, Path)),
    responses((status = 200, body = Done), (status = 403, body = ErrorBody), (status = 404, body = ErrorBody)))]
#[tracing::instrument(name = "deleteUser", skip_all)]
pub async fn delete(State(s): State<AppState>, Auth(who): Auth, Path(id): Path<String>) -> ApiResult<Json<Done>> {
    s.services.users.delete(&who, &UserId::from_string(id)).await?;
    Ok(done())
}

/// Locks a user: it signs in no more, and its sessions end at once.
#[utoipa::path(post, path = "/api/v1/users/{userId}/lock", operation_id = "lockUser", tag = "Users", params(("userId" = String, Path)),
    responses((status = 200, body = Envelope<User>), (status = 403, body = ErrorBody), (status = 404, body = ErrorBody)))]
#[tracing::instrument(name = "lockUser", skip_all)]
pub async fn lock(
    State(s): State<AppState>,
    Auth(who): Auth,
    Path(id): Path<String>,
) -> ApiResult<Json<Envelope<User>>> {
    Ok(ok(s
        .services
        .users
        .set_locked(&who, &UserId::from_string(id), true)
        .await?))
}

/// Unlocks a user: it may sign in again.
#[utoipa::path(post, path = "/api/v1/users/{userId}/unlock", operation_id = "unlockUser", tag = "Users", params(("userId" = String, Path)),
    responses((status = 200, body = Envelope<User>), (status = 403, body = ErrorBody), (status = 404, body = ErrorBody)))]
#[tracing::instrument(name = "unlockUser", skip_all)]
pub async fn unlock(
    State(s): State<AppState>,
    Auth(who): Auth,
    Path(id): Path<String>,
) -> ApiResult<Json<Envelope<User>>> {
    Ok(ok(s
        .services
        .users
        .set_locked(&who, &UserId::from_string(id), false)
        .await?))
}
