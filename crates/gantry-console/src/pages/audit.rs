//! The tenant's audit log, for its administrators: newest first, paged by the store, with the
//! filters of `GET /api/v1/auditLogs` (principal, resource type and id, action, a time range).

use axum::Router;
use axum::extract::{Query, State};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use gantry_core::audit::{AuditOutcome, AuditQuery, AuditRecord};
use gantry_core::paging::PageRequest;
use maud::{Markup, html};
use serde::Deserialize;

use crate::Console;
use crate::error::PageResult;
use crate::form;
use crate::layout::{self, Nav};
use crate::pages::{pager, query};
use crate::session::Signed;

const PAGE_SIZE: u32 = 50;

pub fn routes() -> Router<Console> {
    Router::new().route("/audit", get(list))
}

/// The filters, named as the REST API names them; the dates as `datetime-local` inputs give
/// them (`2024-05-01T08:00`), read as UTC, or in the API's own format.
#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase")]
pub struct AuditParams {
    #[serde(default)]
    principal_id: String,
    #[serde(default)]
    resource_type: String,
    #[serde(default)]
    resource_id: String,
    #[serde(default)]
    action: String,
    #[serde(default)]
    start_date: String,
    #[serde(default)]
    end_date: String,
    page: Option<i64>,
}

impl AuditParams {
    fn query(&self) -> gantry_core::Result<AuditQuery> {
        let text = |s: &str| Some(s.trim().to_owned()).filter(|s| !s.is_empty());
        Ok(AuditQuery {
            principal_id: text(&self.principal_id),
            resource_type: text(&self.resource_type),
            resource_id: text(&self.resource_id),
            action: text(&self.action),
            start: date("startDate", &self.start_date, 0)?,
            end: date("endDate", &self.end_date, 59_999)?,
        })
    }

    fn link(&self, page: u32) -> String {
        let page = page.to_string();
        let q = query(&[
            ("principalId", &self.principal_id),
            ("resourceType", &self.resource_type),
            ("resourceId", &self.resource_id),
            ("action", &self.action),
            ("startDate", &self.start_date),
            ("endDate", &self.end_date),
            ("page", &page),
        ]);
        format!("/console/audit{q}")
    }
}

/// Epoch ms of a date filter: a `datetime-local` value (UTC, to the minute; `extra` ms added so
/// an end bound takes in its whole minute), or the API's format.
fn date(field: &str, text: &str, extra: i64) -> gantry_core::Result<Option<i64>> {
    let text = text.trim();
    if text.is_empty() {
        return Ok(None);
    }
    if let Ok(t) = chrono::NaiveDateTime::parse_from_str(text, "%Y-%m-%dT%H:%M") {
        return Ok(Some(t.and_utc().timestamp_millis() + extra));
    }
    gantry_core::time::parse_timestamp(field, text).map(Some)
}

/// `GET /console/audit`.
async fn list(State(c): State<Console>, signed: Signed, Query(q): Query<AuditParams>) -> PageResult<Response> {
    let page = PageRequest::parse(q.page, Some(i64::from(PAGE_SIZE)), PAGE_SIZE)?;
    let records = c.services.audit.list(&signed.who, q.query()?, page).await?;
    let body = html! {
        h1 { "Audit log" }
        form.filters method="get" action="/console/audit" {
            (form::input("Principal id", "principalId", "text", &q.principal_id, None))
            (form::input("Resource type", "resourceType", "text", &q.resource_type, None))
            (form::input("Resource id", "resourceId", "text", &q.resource_id, None))
            (form::input("Action", "action", "text", &q.action, None))
            (form::input("From (UTC)", "startDate", "datetime-local", &q.start_date, None))
            (form::input("To (UTC)", "endDate", "datetime-local", &q.end_date, None))
            button type="submit" { "Filter" }
        }
        table.list.audit {
            thead { tr { th { "When" } th { "Who" } th { "What" } th { "Resource" } th { "Outcome" } th { "From" } th { "Fields" } } }
            tbody { @for r in &records.items { (row(r)) } }
        }
        @if records.items.is_empty() { p.empty { "No records match." } }
        (pager(&records, |n| q.link(n)))
    };
    Ok(layout::page(&signed, "Audit log", Nav::Audit, body).into_response())
}

fn row(r: &AuditRecord) -> Markup {
    let outcome = match r.outcome {
        AuditOutcome::Success => "completed",
        AuditOutcome::Failure => "failed",
    };
    html! {
        tr {
            td data-label="When" { (layout::time(Some(r.time))) }
            td data-label="Who" { (r.principal_name) " " small { (r.principal_type.as_str()) } }
            td data-label="What" { (r.action) }
            td data-label="Resource" { (r.resource_type) @if let Some(id) = &r.resource_id { " " code { (id) } } }
            td data-label="Outcome" {
                span class={ "badge " (outcome) } { (r.outcome.as_str()) }
                @if let Some(s) = r.status { " " small { (s) } }
            }
            td data-label="From" { (r.client_address.as_deref().unwrap_or("—")) }
            td data-label="Fields" { (r.changed_fields.join(", ")) }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dates_from_the_browser_or_the_api() {
        assert_eq!(date("startDate", "", 0).unwrap(), None);
        assert_eq!(
            date("startDate", "2024-05-01T08:00", 0).unwrap(),
            Some(1_714_550_400_000)
        );
        assert_eq!(
            date("endDate", "2024-05-01T08:00", 59_999).unwrap(),
            Some(1_714_550_459_999)
        );
        let Err(gantry_core::Error::Invalid { field, .. }) = date("endDate", "yesterday", 0) else {
            panic!("a bad date is refused")
        };
        assert_eq!(field, "endDate");
    }
}
