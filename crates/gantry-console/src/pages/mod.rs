//! The console's pages, one file each. A handler extracts the signed-in caller and its input,
//! calls the core services with the caller's principal, and renders the answer.

pub mod account;
pub mod alarm;
pub mod alarms;
pub mod audit;
pub mod device;
pub mod device_actions;
mod device_control;
pub mod device_desired;
mod device_outcome;
mod device_routes;
pub mod devices;
pub mod logs;
mod model_rules;
pub mod models;
pub mod overview;
pub mod projects;
pub mod sign_in;
pub mod user_edit;
pub mod users;
pub mod webhooks;

use axum::response::{IntoResponse, Redirect, Response};
use gantry_core::paging::Page;
use gantry_core::principal::Principal;
use maud::{Markup, html};

use crate::session::Signed;

/// The form of a post that carries nothing but its CSRF token.
#[derive(serde::Deserialize)]
pub struct Empty {}

/// A JSON value as text: strings without their quotes.
pub fn value_text(value: &serde_json::Value) -> String {
    match value {
        serde_json::Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// `/console/`: an application's own project, else the projects.
pub async fn home(signed: Result<Signed, crate::error::PageError>) -> Response {
    match signed.ok().map(|s| s.who) {
        None => Redirect::to("/console/sign-in").into_response(),
        Some(Principal::Application { project, .. }) => {
            Redirect::to(&format!("/console/projects/{project}")).into_response()
        }
        Some(_) => Redirect::to("/console/projects").into_response(),
    }
}

/// Previous and next links of a paged listing; `link` makes the URL of a page number.
pub fn pager<T>(page: &Page<T>, link: impl Fn(u32) -> String) -> Markup {
    let no = page.request.page_no;
    let pages = page.total.div_ceil(u64::from(page.request.page_size)).max(1);
    html! {
        nav.pager aria-label="Pages" {
            @if no > 1 { a.button href=(link(no - 1)) rel="prev" { "Previous" } }
            span { "Page " (no) " of " (pages) " · " (page.total) " in all" }
            @if u64::from(no) < pages { a.button href=(link(no + 1)) rel="next" { "Next" } }
        }
    }
}

/// A query string of the non-empty pairs.
pub fn query(pairs: &[(&str, &str)]) -> String {
    let mut out = form_encode(pairs.iter().filter(|(_, v)| !v.is_empty()).copied());
    if !out.is_empty() {
        out.insert(0, '?');
    }
    out
}

fn form_encode<'a>(pairs: impl Iterator<Item = (&'a str, &'a str)>) -> String {
    serde_urlencoded::to_string(pairs.collect::<Vec<_>>()).unwrap_or_default()
}

/// A status word as a badge.
pub fn badge(text: &str) -> Markup {
    html! { span class={ "badge " (text.to_lowercase()) } { (text) } }
}

/// Whether the caller may manage the project's devices; pages offer only what it may do, and
/// the services refuse the rest anyway.
pub fn can_manage(who: &Principal, project: &gantry_core::ids::ProjectId) -> bool {
    who.require_device_manage(project).is_ok()
}
