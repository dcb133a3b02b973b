//! A project's alarms: the open ones by default, filtered by severity, status and device and
//! paged by the store, the listing replaced live as alarms change; an ACTIVE alarm is
//! acknowledged from its row. One alarm's page is in `alarm.rs`.

use axum::Router;
use axum::extract::{Path, Query, State};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use gantry_core::alarm::{Alarm, AlarmFilter};
use gantry_core::enums::{AlarmStatus, Severity};
use gantry_core::ids::ProjectId;
use gantry_core::paging::{Page, PageRequest};
use maud::{Markup, html};
use serde::Deserialize;

use crate::Console;
use crate::error::PageResult;
use crate::form;
use crate::layout::{self, Nav, Section};
use crate::pages::{pager, query};
use crate::session::Signed;

/// Rows of one page of the listing.
const PAGE_SIZE: u32 = 25;
/// The status filter that means ACTIVE or ACKNOWLEDGED, the listing's default.
pub const OPEN: &str = "open";
/// The status filter that means any status.
pub const ANY: &str = "any";

pub fn routes() -> Router<Console> {
    Router::new().route("/projects/{id}/alarms", get(list))
}

/// The listing's filters, as its links, its filter form and its live stream's URL carry them.
#[derive(Deserialize, Default, Clone, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct AlarmParams {
    /// One severity, or empty for all.
    #[serde(default)]
    pub severity: String,
    /// `open` (the default when empty), `any`, or one status.
    #[serde(default)]
    pub status: String,
    #[serde(default)]
    pub device_id: String,
    /// The page number, as sent.
    #[serde(default)]
    pub page: String,
}

impl AlarmParams {
    /// The service's filter: the status and severity lists the REST API takes.
    fn filter(&self) -> AlarmFilter {
        let text = |s: &str| Some(s.trim().to_owned()).filter(|s| !s.is_empty());
        let status = match self.status.trim() {
            "" | OPEN => Some("ACTIVE,ACKNOWLEDGED".to_owned()),
            ANY => None,
            one => Some(one.to_owned()),
        };
        AlarmFilter {
            status,
            severity: text(&self.severity),
            device_id: text(&self.device_id),
            ..Default::default()
        }
    }

    fn page(&self) -> gantry_core::Result<PageRequest> {
        let no = match self.page.trim() {
            "" => None,
            text => Some(
                text.parse::<i64>()
                    .map_err(|_| gantry_core::Error::invalid("page", "must be a whole number from 1"))?,
            ),
        };
        PageRequest::parse(no, Some(i64::from(PAGE_SIZE)), PAGE_SIZE)
    }

    /// The query string of these filters at page `page` (none: as they are).
    pub fn query(&self, page: Option<u32>) -> String {
        let page = page.map(|n| n.to_string()).unwrap_or_else(|| self.page.clone());
        query(&[
            ("severity", &self.severity),
            ("status", &self.status),
            ("deviceId", &self.device_id),
            ("page", &page),
        ])
    }

    /// The listing's URL at page `page` (none: as it is).
    pub fn link(&self, project: &ProjectId, page: Option<u32>) -> String {
        format!("/console/projects/{project}/alarms{}", self.query(page))
    }
}

/// `GET /console/projects/{id}/alarms`.
async fn list(
    State(c): State<Console>,
    signed: Signed,
    Path(id): Path<String>,
    Query(q): Query<AlarmParams>,
) -> PageResult<Response> {
    let id = ProjectId::from_string(id);
    let project = c.services.catalog.get_project(&signed.who, &id).await?;
    let listing = listing(&c, &signed, &id, &q).await?;
    let statuses: Vec<(&str, &str)> = [(OPEN, "Open (active or acknowledged)"), (ANY, "Any")]
        .into_iter()
        .chain(AlarmStatus::ALL.iter().map(|s| (s.as_str(), s.as_str())))
        .collect();
    let severities: Vec<(&str, &str)> = [("", "Any")]
        .into_iter()
        .chain(Severity::ALL.iter().map(|s| (s.as_str(), s.as_str())))
        .collect();
    let status = if q.status.is_empty() { OPEN } else { q.status.as_str() };
    let live = format!("/console/projects/{id}/alarms/live{}", q.query(None));
    let body = html! {
        p.crumbs { a href={ "/console/projects/" (id) } { (project.name) } " / " }
        h1 { "Alarms" }
        form.filters method="get" action={ "/console/projects/" (id) "/alarms" } {
            (form::select("Severity", "severity", &severities, &q.severity, None))
            (form::select("Status", "status", &statuses, status, None))
            (form::input("Device id", "deviceId", "text", &q.device_id, None))
            button type="submit" { "Filter" }
        }
        div.live hx-ext="sse" sse-connect=(live) {
            (crate::layout::reload_on_lag())
            div id="alarm-list" sse-swap="alarms" { (listing) }
        }
    };
    Ok(layout::page(&signed, "Alarms", Nav::Project(&id, Section::Alarms), body).into_response())
}

/// The listing's table and pager for `q`: the page's content, and what its stream sends when
/// an alarm of the project changes.
pub async fn listing(c: &Console, signed: &Signed, project: &ProjectId, q: &AlarmParams) -> PageResult<Markup> {
    let alarms = c
        .services
        .alarms
        .list_alarms(&signed.who, project, q.filter(), q.page()?)
        .await?;
    let act = signed.who.require_alarm_act(project).is_ok();
    let back = q.query(None);
    Ok(html! {
        (table(&alarms, true, |a| if act && a.status == AlarmStatus::Active { acknowledge_button(signed, a, &back) } else { html! {} }))
        @if alarms.items.is_empty() { p.empty { "No alarms match." } }
        (pager(&alarms, |n| q.link(project, Some(n))))
    })
}

/// A table of alarms; `device` adds the device column; `action` makes a row's last cell.
pub fn table(alarms: &Page<Alarm>, device: bool, action: impl Fn(&Alarm) -> Markup) -> Markup {
    html! {
        table.list.alarms {
            thead { tr {
                th { "Severity" } th { "Alarm" } @if device { th { "Device" } } th { "Status" }
                th { "Value" } th { "Count" } th { "Last event" } th { span.sr { "Actions" } }
            } }
            tbody {
                @for a in &alarms.items {
                    tr id={ "alarm-" (a.id) } {
                        td data-label="Severity" { (severity_badge(a.severity)) }
                        td data-label="Alarm" { a href={ "/console/alarms/" (a.id) } { (a.name) } }
                        @if device {
                            td data-label="Device" { a href={ "/console/devices/" (a.device_id) } { (a.device_name) } }
                        }
                        td data-label="Status" class="alarm-status" { (status_badge(a.status)) }
                        td data-label="Value" { (crate::pages::value_text(&a.value)) }
                        td data-label="Count" { (a.count) }
                        td data-label="Last event" { (layout::time(Some(a.last_event_time))) }
                        td { (action(a)) }
                    }
                }
            }
        }
    }
}

/// The Acknowledge button of a row; the listing at `back` (its query string) is shown after.
fn acknowledge_button(signed: &Signed, alarm: &Alarm, back: &str) -> Markup {
    html! {
        form.inline method="post" action={ "/console/alarms/" (alarm.id) "/acknowledge" } {
            (form::csrf(signed))
            input type="hidden" name="back" value=(back.trim_start_matches('?'));
            button.secondary type="submit" aria-label={ "Acknowledge " (alarm.name) " on " (alarm.device_name) } { "Acknowledge" }
        }
    }
}

pub fn severity_badge(severity: Severity) -> Markup {
    html! { span class={ "badge sev-" (severity.as_str().to_lowercase()) } { (severity.as_str()) } }
}

/// An alarm's status; its own classes, since a device's `Active` is good news and an alarm's is not.
pub fn status_badge(status: AlarmStatus) -> Markup {
    html! { span class={ "badge alarm-" (status.as_str().to_lowercase()) } { (status.as_str()) } }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_listing_shows_open_alarms_unless_told() {
        let open = AlarmParams::default().filter();
        assert_eq!(open.status.as_deref(), Some("ACTIVE,ACKNOWLEDGED"));
        let any = AlarmParams {
            status: ANY.into(),
            ..Default::default()
        };
        assert_eq!(any.filter().status, None);
        let one = AlarmParams {
            status: "CLEARED".into(),
            severity: "MAJOR".into(),
            ..Default::default()
        };
        let filter = one.filter();
        assert_eq!(
            (filter.status.as_deref(), filter.severity.as_deref()),
            (Some("CLEARED"), Some("MAJOR"))
        );
    }

    #[test]
    fn links_keep_the_filters() {
        let q = AlarmParams {
            severity: "MAJOR".into(),
            page: "3".into(),
            ..Default::default()
        };
        let project = ProjectId::from_string("p1");
        assert_eq!(
            q.link(&project, Some(2)),
            "/console/projects/p1/alarms?severity=MAJOR&page=2"
        );
        assert_eq!(q.query(None), "?severity=MAJOR&page=3");
        assert!(
            AlarmParams {
                page: "x".into(),
                ..Default::default()
            }
            .page()
            .is_err()
        );
    }
}
