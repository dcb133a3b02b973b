//! A project's webhooks: the list, creating one (its signing secret shown once), and a
//! webhook's deliveries.

use axum::Router;
use axum::extract::{Path, State};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use gantry_core::ids::{ProjectId, WebhookId};
use gantry_core::paging::PageRequest;
use gantry_core::stream::StreamType;
use gantry_core::webhook::WebhookFields;
use maud::{Markup, html};
use serde::Deserialize;

use crate::Console;
use crate::error::PageResult;
use crate::form::{self, Problem};
use crate::layout::{self, Nav, Section};
use crate::pages::badge;
use crate::session::{Posted, Signed};

pub fn routes() -> Router<Console> {
    Router::new()
        .route("/projects/{id}/webhooks", get(list).post(create))
        .route("/webhooks/{id}", get(deliveries))
}

/// `GET /console/projects/{id}/webhooks`.
async fn list(State(c): State<Console>, signed: Signed, Path(id): Path<String>) -> PageResult<Response> {
    render(&c, &signed, &ProjectId::from_string(id), None, None).await
}

async fn render(
    c: &Console,
    signed: &Signed,
    id: &ProjectId,
    problem: Option<&Problem>,
    notice: Option<Markup>,
) -> PageResult<Response> {
    let hooks = c
        .services
        .webhooks
        .list(&signed.who, id, PageRequest::parse(None, Some(100), 100)?)
        .await?;
    let admin = signed.who.require_webhook_manage(id).is_ok();
    let body = html! {
        h1 { "Webhooks" }
        @if let Some(n) = notice { section.notice role="status" { (n) } }
        table.list {
            thead { tr { th { "URL" } th { "Types" } th { "Enabled" } } }
            tbody {
                @for h in &hooks.items {
                    tr {
                        td data-label="URL" { a href={ "/console/webhooks/" (h.id) } { (h.url) } }
                        td data-label="Types" { (h.types.iter().map(|t| t.as_str()).collect::<Vec<_>>().join(", ")) }
                        td data-label="Enabled" { (if h.enabled { "yes" } else { "no" }) }
                    }
                }
            }
        }
        @if hooks.items.is_empty() { p.empty { "No webhooks." } }
        @if admin {
            h2 { "New webhook" }
            form.card method="post" action={ "/console/projects/" (id) "/webhooks" } {
                (form::csrf(signed))
                (form::general(problem))
                (form::input("URL", "url", "url", "", problem))
                fieldset {
                    legend { "Event types" }
                    @for t in StreamType::ALL { (form::checkbox(t.as_str(), t.as_str(), t == StreamType::Telemetry)) }
                    @if let Some(e) = problem.filter(|p| p.field.as_deref() == Some("types")) { p.error { (e.message) } }
                }
                (form::input("Description", "description", "text", "", problem))
                button.primary type="submit" { "Create webhook" }
            }
        }
    };
    let status = problem.map(|_| axum::http::StatusCode::BAD_REQUEST).unwrap_or_default();
    Ok((
        status,
        layout::page(signed, "Webhooks", Nav::Project(id, Section::Webhooks), body),
    )
        .into_response())
}

#[derive(Deserialize)]
pub struct WebhookForm {
    #[serde(default)]
    url: String,
    #[serde(default)]
    description: String,
    telemetry: Option<String>,
    shadow: Option<String>,
    #[serde(rename = "eventLog")]
    event_log: Option<String>,
    connection: Option<String>,
}

/// `POST /console/projects/{id}/webhooks`.
async fn create(State(c): State<Console>, Path(id): Path<String>, posted: Posted<WebhookForm>) -> PageResult<Response> {
    let id = ProjectId::from_string(id);
    let f = posted.form;
    let ticked = [
        (&f.telemetry, "telemetry"),
        (&f.shadow, "shadow"),
        (&f.event_log, "eventLog"),
        (&f.connection, "connection"),
    ];
    let fields = WebhookFields {
        url: Some(f.url.trim().to_owned()),
        types: Some(
            ticked
                .iter()
                .filter(|(v, _)| v.is_some())
                .map(|(_, n)| (*n).to_owned())
                .collect(),
        ),
        description: Some(f.description.trim().to_owned()).filter(|d| !d.is_empty()),
        ..Default::default()
    };
    match c.services.webhooks.create(&posted.signed.who, &id, fields).await {
        Ok(created) => {
            let notice = html! { p { "Webhook created. Its signing secret (shown once here): " code.token { (created.secret) } } };
            let page = render(&c, &posted.signed, &id, None, Some(notice)).await?;
            Ok(crate::audit::created(page, &created.webhook.id))
        }
        Err(e @ (gantry_core::Error::Invalid { .. } | gantry_core::Error::LimitReached { .. })) => {
            render(&c, &posted.signed, &id, Some(&Problem::of(&e)), None).await
        }
        Err(e) => Err(e.into()),
    }
}

/// `GET /console/webhooks/{id}`: the webhook's latest deliveries.
async fn deliveries(State(c): State<Console>, signed: Signed, Path(id): Path<String>) -> PageResult<Response> {
    let id = WebhookId::from_string(id);
    let hook = c.services.webhooks.get(&signed.who, &id).await?;
    let list = c
        .services
        .webhooks
        .deliveries(&signed.who, &id, PageRequest::parse(None, Some(50), 50)?)
        .await?;
    let body = html! {
        p.crumbs { a href={ "/console/projects/" (hook.project_id) "/webhooks" } { "Webhooks" } " / " }
        h1 { (hook.url) }
        h2 { "Deliveries" }
        table.list {
            thead { tr { th { "Created" } th { "Status" } th { "Events" } th { "Attempts" } th { "Last answer" } } }
            tbody {
                @for d in &list.items {
                    tr {
                        td data-label="Created" { (layout::time(Some(d.created_time))) }
                        td data-label="Status" { (badge(d.status.as_str())) }
                        td data-label="Events" { (d.event_count) }
                        td data-label="Attempts" { (d.attempts) }
                        td data-label="Last answer" { (d.last_http_status.map(|s| s.to_string()).or(d.last_error.clone()).unwrap_or_default()) }
                    }
                }
            }
        }
        @if list.items.is_empty() { p.empty { "No deliveries yet." } }
    };
    Ok(layout::page(
        &signed,
        "Webhook",
        Nav::Project(&hook.project_id, Section::Webhooks),
        body,
    )
    .into_response())
}
