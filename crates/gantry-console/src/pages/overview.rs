//! A project's overview: its devices online, offline and locked, its open alarms by severity,
//! its events per minute over the last hour, and a map of the devices that report a position.

use axum::Router;
use axum::extract::{Path, State};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use gantry_core::event_rate::EventRate;
use gantry_core::ids::ProjectId;
use gantry_core::principal::Principal;
use gantry_core::records::{DeviceCounts, Project};
use maud::{Markup, html};

use crate::Console;
use crate::chart;
use crate::error::PageResult;
use crate::layout::{self, Nav, Section};
use crate::map::{self, Pin};
use crate::pages::alarms::severity_badge;
use crate::pages::{badge, query};
use crate::session::Signed;

pub fn routes() -> Router<Console> {
    Router::new().route("/projects/{id}", get(show))
}

/// `GET /console/projects/{id}`.
async fn show(State(c): State<Console>, signed: Signed, Path(id): Path<String>) -> PageResult<Response> {
    let id = ProjectId::from_string(id);
    let who = &signed.who;
    let project = c.services.catalog.get_project(who, &id).await?;
    // The page's reads are independent: run together, the page waits for the longest alone.
    let (devices, alarms, rate, pins) = tokio::try_join!(
        c.services.catalog.project_device_counts(who, &id),
        c.services.alarms.project_open_by_severity(who, &id),
        c.services.event_rate.last_hour(&project, gantry_core::time::now_ms()),
        positions(&c, who, &project),
    )?;
    let DeviceCounts {
        total,
        connected: online,
        locked,
    } = devices;
    let centre = centre(&project);
    let body = html! {
        h1 { (project.name) }
        p { (badge(project.status.as_str())) " " (project.address.as_deref().unwrap_or_default()) }
        @if who.require_admin().is_ok() { p { a href={ "/console/projects/" (id) "/edit" } { "Edit the project" } } }
        ul.counts {
            li { span.count id="count-online" { (online) } " online" }
            li { span.count id="count-offline" { (total - online) } " offline" }
            li { span.count id="count-locked" { (locked) } " locked" }
            li { span.count { (total) } " devices" }
        }
        section {
            h2 { "Open alarms" }
            ul.counts.alarms {
                @for (severity, n) in &alarms {
                    li {
                        a href={ "/console/projects/" (id) "/alarms" (query(&[("severity", severity.as_str())])) } {
                            span.count id={ "alarms-" (severity.as_str().to_lowercase()) } { (n) }
                            " " (severity_badge(*severity))
                        }
                    }
                }
            }
        }
        (events_per_minute(&rate))
        section {
            h2 { "Map" }
            (map::section(&pins, centre, c.config.map_tiles.as_deref()))
        }
        @if let Principal::Application { .. } = who {} @else {
            (app_token(&project))
        }
    };
    Ok(layout::page(&signed, &project.name, Nav::Project(&id, Section::Overview), body).into_response())
}

/// The last hour's events per minute: the current and the last full minute, the hour's total
/// and a bar per minute; an empty state when there were none.
fn events_per_minute(rate: &EventRate) -> Markup {
    html! {
        section {
            h2 { "Events per minute" }
            @if rate.total() == 0 {
                p.empty id="events-empty" { "No events in the last hour." }
            } @else {
                ul.counts {
                    li { span.count id="events-current" { (rate.current()) } " this minute" }
                    li { span.count id="events-last-minute" { (rate.last_full()) } " last minute" }
                    li { span.count id="events-hour" { (rate.total()) } " in the last hour" }
                }
                (chart::rate_svg(rate))
            }
        }
    }
}

fn app_token(project: &Project) -> Markup {
    html! {
        details {
            summary { "Application access" }
            dl.facts {
                dt { "REST API" } dd { code { (project.restful_api_addr) } }
                dt { "MQTT" } dd { code { (project.mq_api_addr) } }
                dt { "Application token" } dd { code.token { (project.application_access_token) } }
            }
        }
    }
}

/// `mapInfo`'s `lat`, `lng` and `zoom` (default 12), when it has the first two.
fn centre(project: &Project) -> Option<(f64, f64, f64)> {
    let info = project.map_info.as_ref()?;
    let num = |k: &str| info.get(k).and_then(serde_json::Value::as_f64);
    Some((num("lat")?, num("lng")?, num("zoom").unwrap_or(12.0).clamp(0.0, 19.0)))
}

/// The positions of the project's devices that report one (`TelemetryService::positions`).
async fn positions(c: &Console, who: &Principal, project: &Project) -> gantry_core::Result<Vec<Pin>> {
    let reported = c.services.telemetry.positions(who, &project.id).await?;
    Ok(reported
        .into_iter()
        .filter_map(|p| {
            let (lat, lng) = map::parse_position(&p.value)?;
            Some(Pin {
                device: p.device.to_string(),
                name: p.device_name,
                lat,
                lng,
            })
        })
        .collect())
}
