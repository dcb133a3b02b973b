//! The page shell every console page shares: head (assets by hashed URL), navigation,
//! sign-out; and the security headers of every console answer.

use axum::extract::{Request, State};
use axum::http::HeaderValue;
use axum::middleware::Next;
use axum::response::Response;
use gantry_core::ids::ProjectId;
use gantry_core::principal::Principal;
use maud::{DOCTYPE, Markup, html};

pub use crate::shell::bare;

use crate::session::Signed;
use crate::shell::head;
use crate::{Console, form};

/// Strict CSP (no inline script or style, nothing from elsewhere but configured map tiles), no
/// framing, no sniffing, no referrer, and no caching of pages (they show live data and tokens).
pub async fn security_headers(State(console): State<Console>, request: Request, next: Next) -> Response {
    let mut response = next.run(request).await;
    let tiles = console
        .config
        .map_tiles
        .as_deref()
        .and_then(tile_origin)
        .unwrap_or_default();
    let csp = format!(
        "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:{tiles}; \
         connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'; object-src 'none'"
    );
    let headers = response.headers_mut();
    let mut set = |name: &'static str, value: &str| {
        if let Ok(value) = HeaderValue::from_str(value) {
            headers.entry(name).or_insert(value);
        }
    };
    set("content-security-policy", &csp);
    set("x-content-type-options", "nosniff");
    set("x-frame-options", "DENY");
    set("referrer-policy", "no-referrer");
    set("cache-control", "no-store");
    response
}

/// ` https://tiles.example` for a tile URL template, so the CSP lets its images in.
fn tile_origin(template: &str) -> Option<String> {
    let (scheme, rest) = template.split_once("://")?;
    let host = rest.split('/').next()?;
    Some(format!(" {scheme}://{host}"))
}

/// Where in the console a page is, for the navigation.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Nav<'a> {
    Projects,
    Models,
    /// The tenant's user accounts (administrators only).
    Users,
    /// The tenant's audit log (administrators only).
    Audit,
    /// The signed-in user's own account.
    Account,
    /// A project's pages: its overview, devices, alarms, event logs, webhooks.
    Project(&'a ProjectId, Section),
}

#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Section {
    Overview,
    Devices,
    Alarms,
    Logs,
    Webhooks,
}

/// A signed-in page: navigation, sign-out, and `body`.
pub fn page(signed: &Signed, title: &str, nav: Nav, body: Markup) -> Markup {
    html! {
        (DOCTYPE)
        html lang="en" {
            (head(title))
            body {
                header.top {
                    a.brand href="/console/" { "Gantry" }
                    nav aria-label="Console" {
                        a href="/console/projects" aria-current=[(nav == Nav::Projects).then_some("page")] { "Projects" }
                        a href="/console/models" aria-current=[(nav == Nav::Models).then_some("page")] { "Models" }
                        @if signed.who.require_admin().is_ok() {
                            a href="/console/users" aria-current=[(nav == Nav::Users).then_some("page")] { "Users" }
                            a href="/console/audit" aria-current=[(nav == Nav::Audit).then_some("page")] { "Audit log" }
                        }
                    }
                    @if let Principal::User { name, .. } = &signed.who {
                        a.account href="/console/account" aria-current=[(nav == Nav::Account).then_some("page")] aria-label={ "Your account (" (name) ")" } { (name) }
                    }
                    form.sign-out method="post" action="/console/session/end" {
                        (form::csrf(signed))
                        button.link type="submit" { "Sign out" }
                    }
                }
                @if let Nav::Project(id, section) = nav {
                    (project_tabs(id, section))
                }
                main { (body) }
            }
        }
    }
}

fn project_tabs(id: &ProjectId, section: Section) -> Markup {
    let tab = |s: Section, path: &str, label: &str| {
        html! {
            a href={ "/console/projects/" (id) (path) } aria-current=[(s == section).then_some("page")] { (label) }
        }
    };
    html! {
        nav.tabs aria-label="Project" {
            (tab(Section::Overview, "", "Overview"))
            (tab(Section::Devices, "/devices", "Devices"))
            (tab(Section::Alarms, "/alarms", "Alarms"))
            (tab(Section::Logs, "/logs", "Event logs"))
            (tab(Section::Webhooks, "/webhooks", "Webhooks"))
        }
    }
}

/// The element every live page holds inside its stream's: the stream's `reload` event (sent when
/// it fell behind the feed and missed changes) swaps a refresh into it, and the browser reloads
/// the page, which then shows what it missed. No request of its own is needed, so no script.
pub fn reload_on_lag() -> Markup {
    html! { span.reload hidden sse-swap="reload" {} }
}

/// Epoch ms as `2024-05-01 08:00:00 UTC`.
pub fn when(ms: i64) -> String {
    chrono::DateTime::from_timestamp_millis(ms)
        .map(|t| t.format("%Y-%m-%d %H:%M:%S UTC").to_string())
        .unwrap_or_default()
}

/// `<time>` of epoch ms, or a dash.
pub fn time(ms: Option<i64>) -> Markup {
    match ms {
        Some(ms) => html! { time datetime=(when(ms)) { (when(ms)) } },
        None => html! { "—" },
    }
}
