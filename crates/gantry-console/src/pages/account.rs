//! The signed-in user's own account, linked from every page's header: who it is (username,
//! role, projects) and a form to change its password with the current one. The users service
//! ends every session of the user on a new password, this console session too, so what follows
//! a change is the sign-in form saying so.

use axum::Router;
use axum::extract::State;
use axum::http::StatusCode;
use axum::http::request::Parts;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use gantry_core::Error;
use gantry_core::paging::PageRequest;
use gantry_core::principal::Principal;
use gantry_core::user::User;
use maud::{Markup, html};
use serde::Deserialize;

use crate::Console;
use crate::error::PageResult;
use crate::form::{self, Problem};
use crate::layout::{self, Nav};
use crate::pages::sign_in;
use crate::session::{self, Posted, Signed};

/// Projects named on the page at most; more are counted.
const PROJECT_NAMES: u32 = 100;

pub fn routes() -> Router<Console> {
    Router::new()
        .route("/account", get(show))
        .route("/account/password", post(change_password))
}

/// `GET /console/account`.
async fn show(State(c): State<Console>, signed: Signed) -> PageResult<Response> {
    render(&c, &signed, None).await
}

async fn render(c: &Console, signed: &Signed, problem: Option<&Problem>) -> PageResult<Response> {
    let user = c.services.users.me(&signed.who).await?;
    let facts = match &user {
        Some(user) => Some(facts(c, signed, user).await?),
        None => None,
    };
    let body = html! {
        h1 { "Your account" }
        @match facts {
            Some(facts) => {
                (facts)
                (password_form(signed, problem))
            }
            None => {
                p { "You are signed in with " (token_kind(&signed.who)) ", which has no password: its owner rotates it through the REST API." }
            }
        }
    };
    let status = if problem.is_some() {
        StatusCode::BAD_REQUEST
    } else {
        StatusCode::OK
    };
    Ok((status, layout::page(signed, "Your account", Nav::Account, body)).into_response())
}

fn token_kind(who: &Principal) -> &'static str {
    match who {
        Principal::Admin { system: true, .. } => "the system administrator's token",
        Principal::Admin { .. } => "a tenant administrator's token",
        _ => "a project's application token",
    }
}

async fn facts(c: &Console, signed: &Signed, user: &User) -> PageResult<Markup> {
    let projects = match user.project_ids.is_empty() {
        true => "all of the tenant's".to_owned(),
        false => {
            let page = PageRequest::parse(None, Some(i64::from(PROJECT_NAMES)), PROJECT_NAMES)?;
            let listed = c.services.catalog.list_projects(&signed.who, None, page).await?;
            let names: Vec<&str> = user
                .project_ids
                .iter()
                .map(|id| {
                    listed
                        .items
                        .iter()
                        .find(|p| &p.id == id)
                        .map_or(id.as_str(), |p| p.name.as_str())
                })
                .collect();
            names.join(", ")
        }
    };
    Ok(html! {
        dl.facts {
            dt { "Username" } dd id="account-username" { (user.username) }
            dt { "Name" } dd { (user.display_name.as_deref().unwrap_or("—")) }
            dt { "Role" } dd id="account-role" { (user.role.as_str()) }
            dt { "Projects" } dd { (projects) }
            dt { "Last sign-in" } dd { (layout::time(user.last_login_time)) }
        }
    })
}

fn password_form(signed: &Signed, problem: Option<&Problem>) -> Markup {
    html! {
        h2 { "Change your password" }
        form.card method="post" action="/console/account/password" {
            (form::csrf(signed))
            (form::general(problem))
            (form::input("Current password", "currentPassword", "password", "", problem))
            (form::input("New password", "newPassword", "password", "", problem))
            (form::input("New password again", "confirmPassword", "password", "", problem))
            p.hint { "A new password ends every session of yours, this one too: you then sign in with it." }
            button.primary type="submit" { "Change password" }
        }
    }
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PasswordForm {
    #[serde(default)]
    current_password: String,
    #[serde(default)]
    new_password: String,
    #[serde(default)]
    confirm_password: String,
}

/// `POST /console/account/password`: the users service checks the current password and the
/// new one's rules, as `POST /api/v1/auth/password` does.
async fn change_password(State(c): State<Console>, parts: Parts, posted: Posted<PasswordForm>) -> PageResult<Response> {
    let f = &posted.form;
    let result = match f.new_password == f.confirm_password {
        true => {
            c.services
                .users
                .change_password(&posted.signed.who, &f.current_password, &f.new_password)
                .await
        }
        false => Err(Error::invalid("confirmPassword", "is not the same as the new password")),
    };
    match result {
        Ok(()) => Ok(sign_in::closed(
            &c,
            &posted.signed.session,
            session::is_https(&parts),
            "Your password is changed, and every session of yours has ended: sign in with the new password.",
        )),
        Err(e @ Error::Invalid { .. }) => render(&c, &posted.signed, Some(&Problem::of(&e))).await,
        Err(e) => Err(e.into()),
    }
}
