//! A device: header (status, presence), shadow (live), its open alarms (live), a chart of a
//! numeric attribute with the device's alarm periods on it, the latest events, and its
//! management (lock, token). The control forms with their event logs are in
//! `device_control.rs`, the desired state in `device_desired.rs`, the routes in `device_routes.rs`.

use axum::Router;
use axum::extract::{Path, Query, State};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use gantry_core::alarm::{Alarm, AlarmFilter};
use gantry_core::enums::{DataType, DeviceStatus};
use gantry_core::event::ShadowAttribute;
use gantry_core::fields::DeviceFields;
use gantry_core::ids::DeviceId;
use gantry_core::paging::PageRequest;
use gantry_core::principal::Principal;
use gantry_core::query::EventFilter;
use gantry_core::records::{Device, DeviceModel};
use maud::{Markup, html};
use serde::Deserialize;

use crate::Console;
use crate::chart::{self, Window};
use crate::error::PageResult;
use crate::form::{self};
use crate::layout::{self, Nav, Section};
use crate::pages::alarms::{self, ANY};
use crate::pages::{Empty, badge, can_manage, devices, pager, query, value_text};
use crate::session::{Posted, Signed};

pub use super::device_control::event_log_rows;
pub use super::device_outcome::{Outcome, outcome_of};

pub fn routes() -> Router<Console> {
    Router::new()
        .route("/devices/{id}", get(show))
        .route("/devices/{id}/status", post(set_status))
        .route("/devices/{id}/token", post(rotate_token))
}

/// The page's choices: the chart's attribute and window, the events' page.
#[derive(Deserialize, Default)]
pub struct ShowParams {
    #[serde(default)]
    attr: String,
    #[serde(default)]
    window: String,
    events: Option<i64>,
}

/// `GET /console/devices/{id}`.
async fn show(
    State(c): State<Console>,
    signed: Signed,
    Path(id): Path<String>,
    Query(q): Query<ShowParams>,
) -> PageResult<Response> {
    render(&c, &signed, &DeviceId::from_string(id), &q, Outcome::default()).await
}

/// The device page with `outcome` of a form.
pub async fn render(
    c: &Console,
    signed: &Signed,
    id: &DeviceId,
    q: &ShowParams,
    outcome: Outcome,
) -> PageResult<Response> {
    let who = &signed.who;
    let device = c.services.catalog.get_device(who, id).await?;
    let model = c.services.catalog.get_model(who, &device.model_id).await?;
    let connection = c.services.presence.connection(who, id).await?;
    let shadow = c.services.telemetry.shadow(who, id).await?;
    let manage = can_manage(who, &device.project_id);
    let events_page = PageRequest::parse(q.events, Some(10), 10)?;
    let events = c
        .services
        .telemetry
        .list_events(who, id, EventFilter::default(), events_page)
        .await?;
    let chart = chart_section(c, who, &device, &model, q).await?;
    let controls = match manage {
        true => Some(super::device_control::section(c, signed, &device, &model, &outcome).await?),
        false => None,
    };
    let routes = match manage {
        true => Some(super::device_routes::section(c, signed, &device, &outcome).await?),
        false => None,
    };
    let desired = super::device_desired::section(c, signed, &device, &model, &outcome).await?;
    let alarms = alarm_rows(c, signed, id).await?;
    let body = html! {
        div.live hx-ext="sse" sse-connect={ "/console/devices/" (id) "/live" } {
            (crate::layout::reload_on_lag())
            (header(signed, &device, &connection, manage, &outcome))
            @if let Some(notice) = &outcome.notice { section.notice role="status" { (notice) } }
            (shadow_section(&model, &shadow))
            section {
                h2 { "Open alarms" }
                div id="device-alarms" sse-swap="alarms" { (alarms) }
                p { a href={ "/console/projects/" (device.project_id) "/alarms" (query(&[("deviceId", id.as_str()), ("status", ANY)])) } { "All alarms of this device" } }
            }
            (chart)
            @if let Some(controls) = controls { (controls) }
            (desired)
            (events_section(id, q, &events))
            @if let Some(routes) = routes { (routes) }
        }
    };
    let status = outcome
        .problem
        .as_ref()
        .map(|(_, p)| if p.field.is_some() { 400 } else { 409 });
    let status = status
        .and_then(|s| axum::http::StatusCode::from_u16(s).ok())
        .unwrap_or_default();
    let page = layout::page(
        signed,
        &device.device_name,
        Nav::Project(&device.project_id, Section::Devices),
        body,
    );
    Ok((status, page).into_response())
}

fn header(
    signed: &Signed,
    device: &Device,
    connection: &gantry_core::connection::Connection,
    manage: bool,
    outcome: &Outcome,
) -> Markup {
    let problem = outcome.problem_of("manage");
    html! {
        header.device {
            p.crumbs { a href={ "/console/projects/" (device.project_id) "/devices" } { (device.project_name) } " / " }
            h1 { (device.device_name) }
            dl.facts {
                dt { "Status" } dd id="device-status" { (badge(device.status.as_str())) }
                dt { "Presence" } dd id="presence" sse-swap="presence" { (devices::presence_badge(connection)) }
                dt { "Last seen" } dd sse-swap="seen" { (layout::time(connection.last_seen_time)) }
                dt { "Model" } dd { a href={ "/console/models/" (device.model_id) } { (device.device_model_name) } }
                dt { "Id" } dd { code { (device.id) } }
            }
            @if manage {
                (form::general(problem))
                div.actions {
                    @match device.status {
                        DeviceStatus::Active => (status_button(signed, device, "Locked", "Lock")),
                        DeviceStatus::Locked => (status_button(signed, device, "Active", "Unlock")),
                    }
                    (form::button(signed, &format!("/console/devices/{}/token", device.id), "Rotate token", "secondary"))
                }
            }
        }
    }
}

fn status_button(signed: &Signed, device: &Device, to: &str, label: &str) -> Markup {
    html! {
        form.inline method="post" action={ "/console/devices/" (device.id) "/status" } {
            (form::csrf(signed))
            input type="hidden" name="status" value=(to);
            button.secondary type="submit" { (label) }
        }
    }
}

/// The shadow: every attribute of the model, its value cell replaced live (`attr-<code>`).
fn shadow_section(model: &DeviceModel, shadow: &gantry_core::event::Shadow) -> Markup {
    html! {
            section {
                h2 { "Shadow" }
                table.list.shadow {
                    thead { tr { th { "Attribute" } th { "Value" } } }
                    tbody {
                        @for (code, attribute) in &model.attributes_map {
                            tr {
                                th scope="row" data-label="Attribute" { (attribute.name.as_deref().unwrap_or(code)) " " small { "(" (code) ")" } }
                                td data-label="Value" id={ "shadow-" (code) } sse-swap={ "attr-" (code) } {
                                    (shadow_value(shadow.attribute_map.get(code)))
                                }
                            }
                        }
                    }
                }
            }
    }
}

/// The device's open alarms, newest change first: what the page's stream sends when one changes.
pub async fn alarm_rows(c: &Console, signed: &Signed, id: &DeviceId) -> PageResult<Markup> {
    let device = c.services.catalog.get_device(&signed.who, id).await?;
    let filter = AlarmFilter {
        status: Some("ACTIVE,ACKNOWLEDGED".to_owned()),
        device_id: Some(id.to_string()),
        ..Default::default()
    };
    let page = PageRequest::parse(None, Some(10), 10)?;
    let open = c
        .services
        .alarms
        .list_alarms(&signed.who, &device.project_id, filter, page)
        .await?;
    Ok(html! {
        @if open.items.is_empty() {
            p.empty { "No open alarms." }
        } @else {
            (alarms::table(&open, false, |_| html! {}))
            @if open.total > open.items.len() as u64 { p.hint { (open.total) " open in all." } }
        }
    })
}

/// The latest events, paged.
fn events_section(
    id: &DeviceId,
    q: &ShowParams,
    events: &gantry_core::paging::Page<gantry_core::event::DeviceEvent>,
) -> Markup {
    html! {
            section {
                h2 { "Latest events" }
                table.list {
                    thead { tr { th { "Attribute" } th { "Value" } th { "Device time" } th { "Arrived" } } }
                    tbody {
                        @for e in &events.items {
                            tr {
                                td data-label="Attribute" { (e.attribute_code) }
                                td data-label="Value" { (value_text(&e.attribute_data)) }
                                td data-label="Device time" { (layout::time(Some(e.device_timestamp))) }
                                td data-label="Arrived" { (layout::time(Some(e.ingress_time_stamp))) }
                            }
                        }
                    }
                }
                @if events.items.is_empty() { p.empty { "No events yet." } }
                (pager(events, |n| format!("/console/devices/{id}{}", query(&[("attr", &q.attr), ("window", &q.window), ("events", &n.to_string())]))))
            }
    }
}

/// A shadow value for its cell: the value and the device time it has.
pub fn shadow_value(attribute: Option<&ShadowAttribute>) -> Markup {
    match attribute {
        Some(a) => html! { span.value { (value_text(&a.value)) } " " small { (layout::time(Some(a.timestamp))) } },
        None => html! { span.value.none { "—" } },
    }
}

async fn chart_section(
    c: &Console,
    who: &Principal,
    device: &Device,
    model: &DeviceModel,
    q: &ShowParams,
) -> PageResult<Markup> {
    let numeric: Vec<(&str, &str)> = model
        .attributes_map
        .values()
        .filter(|a| matches!(a.data_type, DataType::Integer | DataType::Float))
        .map(|a| (a.code.as_str(), a.name.as_deref().unwrap_or(&a.code)))
        .collect();
    let Some(first) = numeric.first() else {
        return Ok(html! {});
    };
    let code = numeric.iter().find(|(c, _)| *c == q.attr).unwrap_or(first).0;
    let window = Window::parse(&q.window);
    let end = gantry_core::time::now_ms();
    let series = c
        .services
        .telemetry
        .series(who, &device.id, window.filter(code, end))
        .await?;
    let periods = c
        .services
        .alarms
        .alarm_periods(who, &device.id, code, window.bounds(end))
        .await?;
    let windows: Vec<(&str, &str)> = Window::ALL.iter().map(|w| (w.as_str(), w.label())).collect();
    Ok(html! {
        section {
            h2 { "Chart" }
            form.filters method="get" action={ "/console/devices/" (device.id) } {
                (form::select("Attribute", "attr", &numeric, code, None))
                (form::select("Window", "window", &windows, window.as_str(), None))
                button type="submit" { "Show" }
            }
            (chart::svg(&series, window, end, &periods))
            (period_list(&periods))
        }
    })
}

/// The shaded periods in words, each a link to its alarm.
fn period_list(periods: &[Alarm]) -> Markup {
    html! {
        @if !periods.is_empty() {
            ul.periods aria-label="Alarm periods in this window" {
                @for a in periods {
                    li {
                        (alarms::severity_badge(a.severity)) " "
                        a href={ "/console/alarms/" (a.id) } { (a.name) }
                        " from " (layout::time(Some(a.first_event_time)))
                        @match a.cleared_time {
                            Some(t) => { " to " (layout::time(Some(t))) }
                            None => { ", still open" }
                        }
                    }
                }
            }
        }
    }
}

#[derive(Deserialize)]
pub struct StatusForm {
    status: String,
}

/// `POST /console/devices/{id}/status`: lock or unlock.
async fn set_status(
    State(c): State<Console>,
    Path(id): Path<String>,
    posted: Posted<StatusForm>,
) -> PageResult<Response> {
    let id = DeviceId::from_string(id);
    let fields = DeviceStatus::parse_field(&posted.form.status, "status").map(|status| DeviceFields {
        status: Some(status),
        ..Default::default()
    });
    let result = match fields {
        Ok(fields) => c
            .services
            .catalog
            .update_device(&posted.signed.who, &id, fields)
            .await
            .map(|_| ()),
        Err(e) => Err(e),
    };
    let outcome = outcome_of(result, "manage", |_| html! { "Status changed." })?;
    render(&c, &posted.signed, &id, &ShowParams::default(), outcome).await
}

/// `POST /console/devices/{id}/token`: a new access token, shown once; the old one stops at once.
async fn rotate_token(State(c): State<Console>, Path(id): Path<String>, posted: Posted<Empty>) -> PageResult<Response> {
    let id = DeviceId::from_string(id);
    let result = c
        .services
        .catalog
        .rotate_device_token(&posted.signed.who, &id, None)
        .await;
    let outcome = outcome_of(result, "manage", |d| {
        html! { p { "New access token (shown once here): " code.token id="new-token" { (d.access_token) } } }
    })?;
    render(&c, &posted.signed, &id, &ShowParams::default(), outcome).await
}
