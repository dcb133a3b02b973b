//! A project's event logs, with their filters (device, message id, context id) and paging.

use axum::Router;
use axum::extract::{Path, Query, State};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use gantry_core::enums::SortOrder;
use gantry_core::ids::{DeviceId, ProjectId};
use gantry_core::paging::PageRequest;
use gantry_core::query::{EventLogQuery, EventLogSort};
use maud::html;
use serde::Deserialize;

use crate::Console;
use crate::error::PageResult;
use crate::form;
use crate::layout::{self, Nav, Section};
use crate::pages::{badge, pager, query};
use crate::session::Signed;

pub fn routes() -> Router<Console> {
    Router::new().route("/projects/{id}/logs", get(list))
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase")]
pub struct LogParams {
    #[serde(default)]
    device_id: String,
    #[serde(default)]
    event_id: String,
    #[serde(default)]
    context_id: String,
    page: Option<i64>,
}

/// `GET /console/projects/{id}/logs`.
async fn list(
    State(c): State<Console>,
    signed: Signed,
    Path(id): Path<String>,
    Query(q): Query<LogParams>,
) -> PageResult<Response> {
    let id = ProjectId::from_string(id);
    let text = |s: &str| Some(s.trim().to_owned()).filter(|s| !s.is_empty());
    let filter = EventLogQuery {
        project: id.clone(),
        device: text(&q.device_id).map(DeviceId::from_string),
        event_id: text(&q.event_id),
        context_id: text(&q.context_id),
        sort_by: EventLogSort::CreatedTime,
        sort_order: SortOrder::Desc,
    };
    let page = PageRequest::parse(q.page, Some(25), 25)?;
    let logs = c.services.control.list_logs(&signed.who, filter, page).await?;
    let link = |n: u32| {
        let n = n.to_string();
        let q = query(&[
            ("deviceId", &q.device_id),
            ("eventId", &q.event_id),
            ("contextId", &q.context_id),
            ("page", &n),
        ]);
        format!("/console/projects/{id}/logs{q}")
    };
    let body = html! {
        h1 { "Event logs" }
        form.filters method="get" action={ "/console/projects/" (id) "/logs" } {
            (form::input("Device id", "deviceId", "text", &q.device_id, None))
            (form::input("Message id", "eventId", "text", &q.event_id, None))
            (form::input("Context id", "contextId", "text", &q.context_id, None))
            button type="submit" { "Filter" }
        }
        table.list {
            thead { tr { th { "Sent" } th { "Device" } th { "Kind" } th { "Status" } th { "Message id" } } }
            tbody {
                @for log in &logs.items {
                    tr {
                        td data-label="Sent" { (layout::time(Some(log.created_time))) }
                        td data-label="Device" { a href={ "/console/devices/" (log.device_id) } { (log.device_name) } }
                        td data-label="Kind" { (log.classification.as_str()) }
                        td data-label="Status" { (badge(log.status.as_str())) }
                        td data-label="Message id" { code { (log.event_id) } }
                    }
                }
            }
        }
        @if logs.items.is_empty() { p.empty { "No event logs match." } }
        (pager(&logs, link))
    };
    Ok(layout::page(&signed, "Event logs", Nav::Project(&id, Section::Logs), body).into_response())
}
