//! One user for a tenant administrator (`/console/users/{id}`): its facts, and a form to change
//! its role and projects through the users service, which ends the user's sessions when either
//! changes (as `PUT /api/v1/users/{id}` does). An administrator who changes its own role or
//! projects has ended its own session, and is shown the sign-in form.

use axum::Router;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::http::request::Parts;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use gantry_core::Error;
use gantry_core::ids::ProjectId;
use gantry_core::paging::PageRequest;
use gantry_core::principal::Principal;
use gantry_core::records::Project;
use gantry_core::user::{User, UserId};
use gantry_core::users::UserFields;
use maud::html;

use crate::Console;
use crate::error::PageResult;
use crate::form::{self, Problem};
use crate::layout::{self, Nav};
use crate::pages::users::{self, PROJECT_CHOICES, parse_role, role_options};
use crate::pages::{badge, sign_in};
use crate::session::{self, Posted, Signed};

pub fn routes() -> Router<Console> {
    Router::new().route("/users/{id}", get(show).post(update))
}

/// `GET /console/users/{id}`.
async fn show(State(c): State<Console>, signed: Signed, Path(id): Path<String>) -> PageResult<Response> {
    let user = c.services.users.get(&signed.who, &UserId::from_string(id)).await?;
    render(&c, &signed, &user, None).await
}

async fn projects(c: &Console, signed: &Signed) -> PageResult<Vec<Project>> {
    let page = PageRequest::parse(None, Some(i64::from(PROJECT_CHOICES)), PROJECT_CHOICES)?;
    Ok(c.services.catalog.list_projects(&signed.who, None, page).await?.items)
}

async fn render(c: &Console, signed: &Signed, user: &User, problem: Option<&Problem>) -> PageResult<Response> {
    let projects = projects(c, signed).await?;
    let roles: Vec<(&str, &str)> = role_options().collect();
    let body = html! {
        p.crumbs { a href="/console/users" { "Users" } " / " }
        h1 { (user.username) }
        dl.facts {
            dt { "Name" } dd { (user.display_name.as_deref().unwrap_or("—")) }
            dt { "Email" } dd { (user.email.as_deref().unwrap_or("—")) }
            dt { "Status" } dd { (badge(user.status.as_str())) }
            dt { "Last sign-in" } dd { (layout::time(user.last_login_time)) }
        }
        form.card method="post" action={ "/console/users/" (user.id) } {
            h2 { "Role and projects" }
            (form::csrf(signed))
            (form::general(problem))
            (form::select("Role", "role", &roles, user.role.as_str(), problem))
            fieldset {
                legend { "Projects (none ticked: all of the tenant's)" }
                @for p in &projects {
                    (form::checkbox(&p.name, &format!("project.{}", p.id), user.project_ids.contains(&p.id)))
                }
                @if let Some(e) = problem.filter(|p| p.field.as_deref() == Some("projectIds")) { p.error { (e.message) } }
            }
            p.hint { "A change of role or projects ends the user's sessions: it signs in again." }
            button.primary type="submit" { "Save" }
        }
    };
    let status = if problem.is_some() {
        StatusCode::BAD_REQUEST
    } else {
        StatusCode::OK
    };
    let page = layout::page(signed, &user.username, Nav::Users, body);
    Ok((status, page).into_response())
}

/// `POST /console/users/{id}`: the form's `role` and its projects as `project.<id>` checkboxes.
async fn update(
    State(c): State<Console>,
    Path(id): Path<String>,
    parts: Parts,
    posted: Posted<std::collections::HashMap<String, String>>,
) -> PageResult<Response> {
    let (signed, f) = (&posted.signed, &posted.form);
    let id = UserId::from_string(id);
    let before = c.services.users.get(&signed.who, &id).await?;
    let role = f.get("role").map(|r| parse_role(r.trim())).transpose();
    let result = match role {
        Ok(role) => {
            let projects = f
                .keys()
                .filter_map(|k| k.strip_prefix("project."))
                .map(ProjectId::from_string)
                .collect();
            let fields = UserFields {
                role,
                project_ids: Some(projects),
                ..Default::default()
            };
            c.services.users.update(&signed.who, &id, fields).await
        }
        Err(e) => Err(e),
    };
    let after = match result {
        Ok(after) => after,
        Err(e @ Error::Invalid { .. }) => return render(&c, signed, &before, Some(&Problem::of(&e))).await,
        Err(e) => return Err(e.into()),
    };
    let changed = after.role != before.role || after.project_ids != before.project_ids;
    if changed && matches!(&signed.who, Principal::User { user, .. } if *user == id) {
        let notice = "Your role or projects changed, which ended your sessions: sign in again.";
        return Ok(sign_in::closed(&c, &signed.session, session::is_https(&parts), notice));
    }
    let notice = html! {
        p {
            "User " strong { (after.username) } ": " (after.role.as_str()) "."
            @if changed { " Its sessions have ended: it signs in again." } @else { " Nothing changed." }
        }
    };
    users::render(&c, signed, &users::UserParams::default(), None, Some(notice)).await
}
