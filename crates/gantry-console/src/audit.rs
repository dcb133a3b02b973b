//! The audit log of changes made through the console: every form a signed-in caller posts (its
//! CSRF token checked) is recorded as the REST API's changes are, with who, what (`Target::of`
//! reads resource and action from the form's path, named as the API names them), the names of
//! the form's fields (never their values), the client's address and the outcome.
//!
//! Invariant, as for the API: a change's record is committed before its answer leaves; when the
//! record cannot be written, a change that was made is answered with an error page saying so.
//! A form refused before it reached its handler (no session, a wrong CSRF token) changed nothing
//! and is not recorded. Sign-ins are recorded by the user service.

use std::sync::{Arc, OnceLock};

use axum::extract::{Request, State};
use axum::http::{Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use gantry_core::audit::{AuditChange, AuditOutcome};
use gantry_core::principal::Principal;
use maud::html;

use crate::{ClientIp, Console, shell};

/// Who posted a form and its field names, set by `Posted` once the CSRF token is checked.
#[derive(Clone, Default)]
pub struct FormCaller(Arc<OnceLock<(Principal, Vec<String>)>>);

impl FormCaller {
    pub fn set(&self, principal: &Principal, fields: Vec<String>) {
        let _ = self.0.set((principal.clone(), fields));
    }
}

/// The id of what a form created, put on its answer by the handler (the answer is a page, not
/// the record, so the layer cannot read it there).
#[derive(Clone, Debug)]
pub struct Created(pub String);

/// `response` with the id of what it created.
pub fn created(mut response: Response, id: impl ToString) -> Response {
    response.extensions_mut().insert(Created(id.to_string()));
    response
}

/// What a form changes, read from its path under `/console`.
#[derive(Debug, PartialEq, Eq)]
struct Target {
    resource_type: String,
    resource_id: Option<String>,
    action: String,
}

impl Target {
    /// None for the sign-in form (the user service records it) and paths that are no form.
    fn of(method: &Method, path: &str) -> Option<Target> {
        if *method != Method::POST {
            return None;
        }
        let segments: Vec<&str> = path
            .strip_prefix("/console/")?
            .split('/')
            .filter(|s| !s.is_empty())
            .collect();
        let target = |kind: &str, id: Option<&str>, action: &str| {
            Some(Target {
                resource_type: resource(kind),
                resource_id: id.map(str::to_owned),
                action: action.to_owned(),
            })
        };
        match segments.as_slice() {
            ["session"] => None,
            ["session", "end"] => target("users", None, "logout"),
            ["account", "password"] => target("users", None, "changePassword"),
            [kind] => target(kind, None, "create"),
            [kind, id] | [kind, id, "status"] => target(kind, Some(id), "update"),
            [kind, id, "token"] => target(kind, Some(id), "rotateAccessToken"),
            [kind, id, "attributes" | "actions" | "remove"] => target(kind, Some(id), "update"),
            [_, _, child @ ("devices" | "routes" | "webhooks")] => target(child, None, "create"),
            [_, _, "devices", "import"] => target("devices", None, "import"),
            [_, _, child, id, action] => target(child, Some(id), action),
            [kind, id, action] => target(kind, Some(id), action),
            _ => None,
        }
    }
}

/// The API's name of a console path's resource: `devices` is `device`, `models` `deviceModel`.
fn resource(kind: &str) -> String {
    match kind {
        "models" => "deviceModel".to_owned(),
        other => other.strip_suffix('s').unwrap_or(other).to_owned(),
    }
}

/// Middleware: records each form posted by a signed-in caller once its answer is ready.
pub async fn record_changes(State(console): State<Console>, mut request: Request, next: Next) -> Response {
    let Some(target) = Target::of(request.method(), request.uri().path()) else {
        return next.run(request).await;
    };
    let client = request.extensions().get::<ClientIp>().map(|c| c.0.to_string());
    let caller = FormCaller::default();
    request.extensions_mut().insert(caller.clone());
    let response = next.run(request).await;
    let Some((principal, fields)) = caller.0.get() else {
        return response;
    };
    let status = response.status();
    // A form that succeeded answers with its page or sends the browser on (303).
    let success = status.is_success() || status.is_redirection();
    let created = response.extensions().get::<Created>().map(|c| c.0.clone());
    let resource_id = target.resource_id.or(created).or_else(|| match principal {
        Principal::User { user, .. }
            if target.resource_type == "user" && matches!(target.action.as_str(), "logout" | "changePassword") =>
        {
            Some(user.to_string())
        }
        _ => None,
    });
    let change = AuditChange {
        resource_type: target.resource_type,
        resource_id,
        action: target.action,
        changed_fields: fields.clone(),
        client_address: client,
        outcome: if success {
            AuditOutcome::Success
        } else {
            AuditOutcome::Failure
        },
        status: Some(status.as_u16()),
    };
    match console.services.audit.record_for(principal, change).await {
        Ok(()) => response,
        Err(error) if success => {
            tracing::error!(error = %error, "the audit record of a console change was not written");
            let body = shell::bare(
                "Not recorded",
                html! {
                    h1 { "Not recorded" }
                    p.error role="alert" { "The change was made, but its audit record could not be written. Tell your administrator." }
                    p { a href="/console/" { "Back to the console" } }
                },
            );
            (StatusCode::SERVICE_UNAVAILABLE, body).into_response()
        }
        Err(error) => {
            tracing::warn!(error = %error, "the audit record of a refused console form was not written");
            response
        }
    }
}

/// A form's field names for its record: the CSRF token and the way back are no change.
pub fn field_names(pairs: &[(String, String)]) -> Vec<String> {
    let mut names: Vec<String> = pairs
        .iter()
        .map(|(k, _)| k.clone())
        .filter(|k| !matches!(k.as_str(), "csrf" | "back") && k.len() <= 64)
        .collect();
    names.sort();
    names.dedup();
    names
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A target's resource type, id and action.
    type Want = Option<(&'static str, Option<&'static str>, &'static str)>;

    #[test]
    fn targets_are_named_as_the_api_names_them() {
        let cases: [(&str, Want); 21] = [
            ("/console/session", None),
            ("/console/session/end", Some(("user", None, "logout"))),
            ("/console/projects", Some(("project", None, "create"))),
            ("/console/projects/p1", Some(("project", Some("p1"), "update"))),
            ("/console/projects/p1/devices", Some(("device", None, "create"))),
            ("/console/projects/p1/devices/import", Some(("device", None, "import"))),
            ("/console/projects/p1/webhooks", Some(("webhook", None, "create"))),
            ("/console/devices/d1/status", Some(("device", Some("d1"), "update"))),
            (
                "/console/devices/d1/token",
                Some(("device", Some("d1"), "rotateAccessToken")),
            ),
            ("/console/devices/d1/control", Some(("device", Some("d1"), "control"))),
            ("/console/devices/d1/desired", Some(("device", Some("d1"), "desired"))),
            ("/console/devices/d1/routes", Some(("route", None, "create"))),
            (
                "/console/devices/d1/routes/r1/revoke",
                Some(("route", Some("r1"), "revoke")),
            ),
            (
                "/console/models/m1/attributes",
                Some(("deviceModel", Some("m1"), "update")),
            ),
            (
                "/console/alarms/a1/acknowledge",
                Some(("alarm", Some("a1"), "acknowledge")),
            ),
            ("/console/users/u1/lock", Some(("user", Some("u1"), "lock"))),
            ("/console/users/u1", Some(("user", Some("u1"), "update"))),
            ("/console/account/password", Some(("user", None, "changePassword"))),
            (
                "/console/models/m1/alarmRules",
                Some(("deviceModel", Some("m1"), "alarmRules")),
            ),
            ("/console/alarmRules/r1", Some(("alarmRule", Some("r1"), "update"))),
            (
                "/console/alarmRules/r1/delete",
                Some(("alarmRule", Some("r1"), "delete")),
            ),
        ];
        for (path, want) in cases {
            let want = want.map(|(kind, id, action)| Target {
                resource_type: kind.to_owned(),
                resource_id: id.map(str::to_owned),
                action: action.to_owned(),
            });
            assert_eq!(Target::of(&Method::POST, path), want, "{path}");
        }
        assert_eq!(Target::of(&Method::GET, "/console/projects"), None);
    }

    #[test]
    fn field_names_never_values() {
        let pairs = vec![
            ("csrf".to_owned(), "secret-token".to_owned()),
            ("password".to_owned(), "hunter2-secret".to_owned()),
            ("role".to_owned(), "VIEWER".to_owned()),
            ("project.p1".to_owned(), "true".to_owned()),
        ];
        assert_eq!(field_names(&pairs), ["password", "project.p1", "role"]);
    }
}
