//! The audit log: `GET /api/v1/auditLogs`, and the recording of every change made through the
//! API, done by the middleware every request passes (`every_request`). What a change is comes
//! from its method and path (`Target::of`), so a new endpoint is recorded without a line of its
//! own: `POST /alarms/{id}/acknowledge` becomes resource `alarm`, its id, action `acknowledge`.
//!
//! Invariant: a change's record is committed before its answer leaves, so a change the caller
//! was told succeeded always has its record; if the record cannot be written, the caller gets
//! the store's error instead (the change itself may stand). Sign-ins are recorded by the user
//! service, which knows the username; telemetry (`POST /deviceEvents`) is not recorded.

use std::sync::Arc;

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{Method, StatusCode, header::CONTENT_TYPE};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use gantry_core::audit::{AuditChange, AuditOutcome, AuditQuery, AuditRecord, PendingAudit};
use gantry_core::principal::Principal;
use serde::Deserialize;

use crate::AppState;
use crate::envelope::{Envelope, Paged, paged};
use crate::error::{ApiError, ApiResult, ErrorBody};
use crate::extract::{AppQuery, Auth, PeerAddr, page};
use crate::request_log::AuditCaller;

pub fn routes() -> Router<AppState> {
    Router::new().route("/api/v1/auditLogs", get(list))
}

/// Filters and paging of the audit log.
#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[serde(rename_all = "camelCase")]
#[into_params(parameter_in = Query)]
pub struct AuditParams {
    /// The user's, token's (tenant, project) or device's id.
    principal_id: Option<String>,
    /// `device`, `deviceModel`, `project`, `route`, `webhook`, `user`, `tenant`, `deviceEvent`, ...
    resource_type: Option<String>,
    resource_id: Option<String>,
    /// `create`, `update`, `delete`, `lock`, `unlock`, `control`, `login`, `logout`, ...
    action: Option<String>,
    /// Inclusive, `yyyy-MM-dd'T'HH:mm:ss.SSSZ`.
    start_date: Option<String>,
    /// Inclusive, `yyyy-MM-dd'T'HH:mm:ss.SSSZ`.
    end_date: Option<String>,
    /// Records per page, 1 to 1000 (default 20).
    #[param(minimum = 1, maximum = 1000)]
    page_size: Option<i64>,
    /// Page number from 1 (default 1).
    #[param(minimum = 1, maximum = 4294967295.0)]
    page_no: Option<i64>,
}

/// The audit log of the caller's tenant, newest first: every change made through the API or
/// the admin CLI (which calls the API), every sign-in and failed sign-in. Tenant
/// administrators (token or ADMIN user) only. Records are kept `--audit-retention-days` (90).
#[utoipa::path(get, path = "/api/v1/auditLogs", operation_id = "listAuditLogs", tag = "Audit log", params(AuditParams),
    responses((status = 200, body = Envelope<Paged<AuditRecord>>), (status = 400, body = ErrorBody), (status = 403, body = ErrorBody)))]
#[tracing::instrument(name = "listAuditLogs", skip_all)]
pub async fn list(
    State(s): State<AppState>,
    Auth(who): Auth,
    AppQuery(q): AppQuery<AuditParams>,
) -> ApiResult<Json<Envelope<Paged<AuditRecord>>>> {
    let page = page(q.page_no, q.page_size, 20)?;
    let date = |field: &str, v: Option<String>| v.map(|t| gantry_core::time::parse_timestamp(field, &t)).transpose();
    let query = AuditQuery {
        principal_id: q.principal_id,
        resource_type: q.resource_type,
        resource_id: q.resource_id,
        action: q.action,
        start: date("startDate", q.start_date)?,
        end: date("endDate", q.end_date)?,
    };
    Ok(paged(s.services.audit.list(&who, query, page).await?))
}

/// What a request changes, read from its method and its path under `/api/v1`.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Target {
    resource_type: String,
    /// None for a create: the id is read from the answer's `result.id`.
    resource_id: Option<String>,
    action: String,
}

impl Target {
    /// None for reads, telemetry, sign-in (recorded by the user service) and paths outside the API.
    pub(crate) fn of(method: &Method, path: &str) -> Option<Target> {
        if matches!(*method, Method::GET | Method::HEAD | Method::OPTIONS) {
            return None;
        }
        let segments: Vec<&str> = path
            .strip_prefix("/api/v1/")?
            .split('/')
            .filter(|s| !s.is_empty())
            .collect();
        let target = |kind: &str, id: Option<&str>, action: &str| {
            Some(Target {
                resource_type: singular(kind),
                resource_id: id.map(str::to_owned),
                action: action.to_owned(),
            })
        };
        match segments.as_slice() {
            ["deviceEvents"] | ["auth", "login"] => None,
            ["auth", "password"] => target("users", None, "changePassword"),
            ["auth", action] => target("users", None, action),
            [kind] => target(kind, None, "create"),
            [kind, id] => target(
                kind,
                Some(id),
                if *method == Method::DELETE { "delete" } else { "update" },
            ),
            [_, _, "shadows"] => target(segments[0], Some(segments[1]), "control"),
            [_, _, child @ ("routes" | "webhooks")] => target(child, None, "create"),
            [kind, id, action] => target(kind, Some(id), action),
            [kind, id, what, verb] => target(kind, Some(id), &format!("{verb}{}", capitalized(what))),
            _ => None,
        }
    }
}

impl Target {
    /// The record of this change, answered `status`.
    fn change(
        &self,
        resource_id: Option<String>,
        changed_fields: Vec<String>,
        client_address: Option<String>,
        status: StatusCode,
    ) -> AuditChange {
        AuditChange {
            resource_type: self.resource_type.clone(),
            resource_id,
            action: self.action.clone(),
            changed_fields,
            client_address,
            outcome: if status.is_success() {
                AuditOutcome::Success
            } else {
                AuditOutcome::Failure
            },
            status: Some(status.as_u16()),
        }
    }
}

fn singular(kind: &str) -> String {
    kind.strip_suffix('s').unwrap_or(kind).to_owned()
}

fn capitalized(word: &str) -> String {
    let mut chars = word.chars();
    chars
        .next()
        .map(|c| c.to_uppercase().chain(chars).collect())
        .unwrap_or_default()
}

/// The output-only fields a client may echo in a body: not changes.
const ECHOED: &[&str] = &[
    "id",
    "tenantId",
    "createdBy",
    "createdTime",
    "updatedBy",
    "updatedTime",
    "deleted",
];

/// Runs a change (`Target::of` said the request is one) and records it once its answer is
/// ready, before it is sent. Reads pass the layer without coming here.
pub(crate) async fn record(s: &AppState, limit: usize, target: Target, request: Request, next: Next) -> Response {
    let client = request.extensions().get::<PeerAddr>().map(|p| p.0.ip().to_string());
    let caller = AuditCaller::default();
    let (mut parts, body) = request.into_parts();
    parts.extensions.insert(caller.clone());
    let Ok(bytes) = axum::body::to_bytes(body, limit).await else {
        return ApiError::TooLarge.into_response();
    };
    let is_json = parts
        .headers
        .get(CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.contains("json"));
    let fields = if is_json { field_names(&bytes) } else { Vec::new() };
    let in_change = target.resource_id.as_ref().map(|id| {
        let change = target.change(Some(id.clone()), fields.clone(), client.clone(), StatusCode::OK);
        Arc::new(PendingAudit::new(change))
    });
    // A handler that commits the record with its change (`PUT …/shadows`) takes it from here;
    // the others leave it, and the record is written below.
    if let Some(in_change) = &in_change {
        parts.extensions.insert(in_change.clone());
    }
    let response = next.run(Request::from_parts(parts, Body::from(bytes))).await;
    if in_change.is_some_and(|c| c.is_committed()) {
        return response;
    }
    let Some(principal) = caller.get() else {
        return response; // Not authenticated: nothing was changed, and no one to name.
    };
    let status = response.status();
    let (response, created_id) = match (&target.resource_id, status.is_success()) {
        (None, true) => created_id(response).await,
        _ => (response, None),
    };
    let resource_id = target.resource_id.clone().or(created_id).or_else(|| match principal {
        Principal::User { user, .. } if target.resource_type == "user" => Some(user.to_string()),
        _ => None,
    });
    let change = target.change(resource_id, fields, client, status);
    // A refusal changed nothing: its answer stands even when its record could not be written.
    // A change that was made is answered as made but unrecorded, never as "nothing changed".
    match s.services.audit.record_for(principal, change).await {
        Ok(()) => response,
        Err(error) if status.is_success() => ApiError::AuditNotWritten(error).into_response(),
        Err(error) => {
            tracing::warn!(error = %error, "the audit record of a refused request was not written");
            response
        }
    }
}

/// The top-level field names of a JSON object body, but the output-only ones; never values.
fn field_names(bytes: &[u8]) -> Vec<String> {
    let Ok(keys) = serde_json::from_slice::<std::collections::BTreeMap<String, serde::de::IgnoredAny>>(bytes) else {
        return Vec::new();
    };
    keys.into_keys()
        .filter(|k| !ECHOED.contains(&k.as_str()) && k.len() <= 64)
        .collect()
}

/// The answer, whole again, and the `result.id` it holds.
async fn created_id(response: Response) -> (Response, Option<String>) {
    let (parts, body) = response.into_parts();
    let Ok(bytes) = axum::body::to_bytes(body, 16 * 1024 * 1024).await else {
        return (ApiError::Core(gantry_core::Error::Unavailable).into_response(), None);
    };
    #[derive(Deserialize)]
    struct Answer {
        result: Option<Created>,
    }
    #[derive(Deserialize)]
    struct Created {
        id: Option<String>,
    }
    let id = serde_json::from_slice::<Answer>(&bytes)
        .ok()
        .and_then(|a| a.result)
        .and_then(|r| r.id);
    (Response::from_parts(parts, Body::from(bytes)), id)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A target's resource type, id and action.
    type Want = Option<(&'static str, Option<&'static str>, &'static str)>;

    #[test]
    fn targets_follow_the_paths() {
        let cases: [(Method, &str, Want); 14] = [
            (Method::GET, "/api/v1/devices/d1", None),
            (Method::POST, "/api/v1/deviceEvents", None),
            (Method::POST, "/api/v1/auth/login", None),
            (Method::POST, "/api/v1/devices", Some(("device", None, "create"))),
            (
                Method::PUT,
                "/api/v1/devices/d1",
                Some(("device", Some("d1"), "update")),
            ),
            (
                Method::DELETE,
                "/api/v1/deviceModels/m1",
                Some(("deviceModel", Some("m1"), "delete")),
            ),
            (
                Method::PUT,
                "/api/v1/devices/d1/shadows",
                Some(("device", Some("d1"), "control")),
            ),
            (
                Method::POST,
                "/api/v1/devices/d1/routes",
                Some(("route", None, "create")),
            ),
            (
                Method::POST,
                "/api/v1/projects/p1/webhooks",
                Some(("webhook", None, "create")),
            ),
            (
                Method::POST,
                "/api/v1/routes/r1/refresh",
                Some(("route", Some("r1"), "refresh")),
            ),
            (
                Method::POST,
                "/api/v1/users/u1/lock",
                Some(("user", Some("u1"), "lock")),
            ),
            (
                Method::POST,
                "/api/v1/devices/d1/accessToken/rotate",
                Some(("device", Some("d1"), "rotateAccessToken")),
            ),
            (Method::POST, "/api/v1/auth/logout", Some(("user", None, "logout"))),
            (Method::POST, "/healthz", None),
        ];
        for (method, path, want) in cases {
            let got = Target::of(&method, path);
            let want = want.map(|(kind, id, action)| Target {
                resource_type: kind.to_owned(),
                resource_id: id.map(str::to_owned),
                action: action.to_owned(),
            });
            assert_eq!(got, want, "{method} {path}");
        }
    }

    #[test]
    fn field_names_never_values() {
        let names = field_names(br#"{"password": "hunter2-secret", "role": "VIEWER", "id": "x"}"#);
        assert_eq!(names, ["password", "role"]);
        assert!(field_names(b"not json").is_empty());
    }
}
