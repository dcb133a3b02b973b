//! The tenant's user accounts, for its administrators: the listing (filtered by role and
//! username, paged by the store), creating a user with its role and projects (a generated
//! initial password is shown once), locking, unlocking and deleting; changing a user's role and
//! projects is on its own page (`user_edit.rs`). Everything goes through the
//! users service, which refuses anyone but a tenant administrator.

use axum::Router;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::{get, post};
use gantry_core::ids::ProjectId;
use gantry_core::paging::PageRequest;
use gantry_core::user::{Role, User, UserId, UserQuery, UserStatus};
use gantry_core::users::UserFields;
use maud::{Markup, html};
use serde::Deserialize;

use crate::Console;
use crate::error::PageResult;
use crate::form::{self, Problem};
use crate::layout::{self, Nav};
use crate::pages::{badge, pager, query};
use crate::session::{Posted, Signed};

const PAGE_SIZE: u32 = 25;
/// Projects offered as checkboxes on the create and edit forms at most.
pub const PROJECT_CHOICES: u32 = 100;

pub fn routes() -> Router<Console> {
    Router::new()
        .route("/users", get(list).post(create))
        .route("/users/{id}/lock", post(lock))
        .route("/users/{id}/unlock", post(unlock))
        .route("/users/{id}/delete", post(delete))
}

#[derive(Deserialize, Default)]
pub struct UserParams {
    #[serde(default)]
    role: String,
    #[serde(default)]
    username: String,
    page: Option<i64>,
}

/// `GET /console/users`.
async fn list(State(c): State<Console>, signed: Signed, Query(q): Query<UserParams>) -> PageResult<Response> {
    render(&c, &signed, &q, None, None).await
}

/// What a form just did: a refusal at the create form, or a notice.
pub async fn render(
    c: &Console,
    signed: &Signed,
    q: &UserParams,
    problem: Option<&Problem>,
    notice: Option<Markup>,
) -> PageResult<Response> {
    let text = |s: &str| Some(s.trim().to_owned()).filter(|s| !s.is_empty());
    let filter = UserQuery {
        role: text(&q.role).map(|r| parse_role(&r)).transpose()?,
        username: text(&q.username),
        project: None,
    };
    let page = PageRequest::parse(q.page, Some(i64::from(PAGE_SIZE)), PAGE_SIZE)?;
    let users = c.services.users.list(&signed.who, None, filter, page).await?;
    let projects = c
        .services
        .catalog
        .list_projects(
            &signed.who,
            None,
            PageRequest::parse(None, Some(i64::from(PROJECT_CHOICES)), PROJECT_CHOICES)?,
        )
        .await?;
    let roles: Vec<(&str, &str)> = [("", "Any")].into_iter().chain(role_options()).collect();
    let link = |n: u32| {
        format!(
            "/console/users{}",
            query(&[("role", &q.role), ("username", &q.username), ("page", &n.to_string())])
        )
    };
    let body = html! {
        h1 { "Users" }
        @if let Some(n) = notice { section.notice role="status" { (n) } }
        form.filters method="get" action="/console/users" {
            (form::select("Role", "role", &roles, &q.role, None))
            (form::input("Username contains", "username", "text", &q.username, None))
            button type="submit" { "Filter" }
        }
        table.list.users {
            thead { tr { th { "Username" } th { "Name" } th { "Role" } th { "Projects" } th { "Status" } th { "Last sign-in" } th { span.sr { "Actions" } } } }
            tbody {
                @for u in &users.items { (row(signed, u, &projects.items)) }
            }
        }
        @if users.items.is_empty() { p.empty { "No users match." } }
        (pager(&users, link))
        (create_form(signed, &projects.items, problem))
    };
    let status = problem.map(|p| {
        if p.field.is_some() {
            StatusCode::BAD_REQUEST
        } else {
            StatusCode::CONFLICT
        }
    });
    let page = layout::page(signed, "Users", Nav::Users, body);
    Ok((status.unwrap_or_default(), page).into_response())
}

fn row(signed: &Signed, u: &User, projects: &[gantry_core::records::Project]) -> Markup {
    let project_names: Vec<&str> = u
        .project_ids
        .iter()
        .map(|id| {
            projects
                .iter()
                .find(|p| &p.id == id)
                .map_or(id.as_str(), |p| p.name.as_str())
        })
        .collect();
    let path = format!("/console/users/{}", u.id);
    html! {
        tr id={ "user-" (u.username) } {
            td data-label="Username" { a href=(path) { (u.username) } }
            td data-label="Name" { (u.display_name.as_deref().unwrap_or_default()) }
            td data-label="Role" { (u.role.as_str()) }
            td data-label="Projects" { @if project_names.is_empty() { "all" } @else { (project_names.join(", ")) } }
            td data-label="Status" class="user-status" { (badge(u.status.as_str())) }
            td data-label="Last sign-in" { (layout::time(u.last_login_time)) }
            td {
                div.actions {
                    a.button href=(path) aria-label={ "Edit " (u.username) } { "Edit" }
                    @match u.status {
                        UserStatus::Active => (form::button(signed, &format!("{path}/lock"), "Lock", "secondary")),
                        UserStatus::Locked => (form::button(signed, &format!("{path}/unlock"), "Unlock", "secondary")),
                    }
                    details.confirm {
                        summary { "Delete…" }
                        (form::button(signed, &format!("{path}/delete"), &format!("Delete {}", u.username), "danger"))
                    }
                }
            }
        }
    }
}

fn create_form(signed: &Signed, projects: &[gantry_core::records::Project], problem: Option<&Problem>) -> Markup {
    let roles: Vec<(&str, &str)> = role_options().collect();
    html! {
        h2 { "New user" }
        form.card method="post" action="/console/users" {
            (form::csrf(signed))
            (form::general(problem))
            (form::input("Username", "username", "text", "", problem))
            (form::select("Role", "role", &roles, "VIEWER", problem))
            (form::input("Display name", "displayName", "text", "", problem))
            (form::input("Email", "email", "email", "", problem))
            (form::input("Password (empty: one is generated and shown once)", "password", "password", "", problem))
            fieldset {
                legend { "Projects (none ticked: all of the tenant's)" }
                @for p in projects { (form::checkbox(&p.name, &format!("project.{}", p.id), false)) }
                @if let Some(e) = problem.filter(|p| p.field.as_deref() == Some("projectIds")) { p.error { (e.message) } }
            }
            button.primary type="submit" { "Create user" }
        }
    }
}

pub fn role_options() -> impl Iterator<Item = (&'static str, &'static str)> {
    [Role::Admin, Role::Operator, Role::Viewer]
        .into_iter()
        .map(|r| (r.as_str(), r.as_str()))
}

pub fn parse_role(text: &str) -> gantry_core::Result<Role> {
    Role::parse(text)
        .ok_or_else(|| gantry_core::Error::invalid("role", format!("`{text}` is not one of ADMIN, OPERATOR, VIEWER")))
}

/// `POST /console/users`: the create form, its projects as `project.<id>` checkboxes.
async fn create(
    State(c): State<Console>,
    posted: Posted<std::collections::HashMap<String, String>>,
) -> PageResult<Response> {
    let f = &posted.form;
    let text = |name: &str| f.get(name).map(|s| s.trim().to_owned()).filter(|s| !s.is_empty());
    let fields = text("role").map(|r| parse_role(&r)).transpose().map(|role| UserFields {
        username: text("username"),
        password: f.get("password").filter(|p| !p.is_empty()).cloned(),
        display_name: text("displayName"),
        email: text("email"),
        role,
        project_ids: Some(
            f.keys()
                .filter_map(|k| k.strip_prefix("project."))
                .map(ProjectId::from_string)
                .collect(),
        ),
        tenant_id: None,
    });
    let result = match fields {
        Ok(fields) => c.services.users.create(&posted.signed.who, fields).await,
        Err(e) => Err(e),
    };
    let q = UserParams::default();
    match result {
        Ok(created) => {
            let notice = html! {
                p { "User " strong { (created.user.username) } " created." }
                @if let Some(p) = &created.generated_password {
                    p { "Its initial password (shown once here): " code.token id="new-password" { (p.expose()) } }
                }
            };
            let page = render(&c, &posted.signed, &q, None, Some(notice)).await?;
            Ok(crate::audit::created(page, &created.user.id))
        }
        Err(
            e @ (gantry_core::Error::Invalid { .. }
            | gantry_core::Error::Duplicate(_)
            | gantry_core::Error::Conflict(_)
            | gantry_core::Error::LimitReached { .. }),
        ) => render(&c, &posted.signed, &q, Some(&Problem::of(&e)), None).await,
        Err(e) => Err(e.into()),
    }
}

/// Lock, unlock or delete: back to the listing when done, the listing with the refusal when the
/// service refused (a user cannot lock or delete itself).
async fn act(c: &Console, signed: &Signed, result: gantry_core::Result<()>) -> PageResult<Response> {
    match result {
        Ok(()) => Ok(Redirect::to("/console/users").into_response()),
        Err(e @ gantry_core::Error::Conflict(_)) => {
            render(c, signed, &UserParams::default(), Some(&Problem::of(&e)), None).await
        }
        Err(e) => Err(e.into()),
    }
}

/// `POST /console/users/{id}/lock`: its sessions end at once.
async fn lock(State(c): State<Console>, Path(id): Path<String>, posted: Posted<super::Empty>) -> PageResult<Response> {
    let result = c
        .services
        .users
        .set_locked(&posted.signed.who, &UserId::from_string(id), true)
        .await;
    act(&c, &posted.signed, result.map(|_| ())).await
}

/// `POST /console/users/{id}/unlock`.
async fn unlock(
    State(c): State<Console>,
    Path(id): Path<String>,
    posted: Posted<super::Empty>,
) -> PageResult<Response> {
    let result = c
        .services
        .users
        .set_locked(&posted.signed.who, &UserId::from_string(id), false)
        .await;
    act(&c, &posted.signed, result.map(|_| ())).await
}

/// `POST /console/users/{id}/delete`.
async fn delete(
    State(c): State<Console>,
    Path(id): Path<String>,
    posted: Posted<super::Empty>,
) -> PageResult<Response> {
    let result = c
        .services
        .users
        .delete(&posted.signed.who, &UserId::from_string(id))
        .await;
    act(&c, &posted.signed, result).await
}
