//! One alarm: what it is, its history (live), and the forms to acknowledge, comment and clear
//! it for the roles that may act on alarms. A form that succeeds sends the browser back to the
//! page it came from (post, redirect, get), so a reload sends nothing twice.

use axum::Router;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::{get, post};
use gantry_core::alarm::{Alarm, AlarmHistoryEntry};
use gantry_core::enums::AlarmStatus;
use gantry_core::ids::AlarmId;
use maud::{Markup, html};
use serde::Deserialize;

use crate::Console;
use crate::error::{PageError, PageResult};
use crate::form::{self, Problem};
use crate::layout::{self, Nav, Section};
use crate::pages::alarms::{AlarmParams, severity_badge, status_badge};
use crate::pages::{badge, value_text};
use crate::session::{Posted, Signed};

pub fn routes() -> Router<Console> {
    Router::new()
        .route("/alarms/{id}", get(show))
        .route("/alarms/{id}/acknowledge", post(acknowledge))
        .route("/alarms/{id}/clear", post(clear))
        .route("/alarms/{id}/comments", post(comment))
}

/// `GET /console/alarms/{id}`.
async fn show(State(c): State<Console>, signed: Signed, Path(id): Path<String>) -> PageResult<Response> {
    render(&c, &signed, &AlarmId::from_string(id), None).await
}

/// The alarm's page, with the refusal of a form when there is one.
async fn render(c: &Console, signed: &Signed, id: &AlarmId, problem: Option<(&str, Problem)>) -> PageResult<Response> {
    let alarm = c.services.alarms.get_alarm(&signed.who, id).await?;
    let details = details(c, signed, &alarm).await?;
    let act = signed.who.require_alarm_act(&alarm.project_id).is_ok();
    let problem_of = |form: &str| problem.as_ref().filter(|(f, _)| *f == form).map(|(_, p)| p);
    let body = html! {
        p.crumbs { a href={ "/console/projects/" (alarm.project_id) "/alarms" } { "Alarms" } " / " }
        div.live hx-ext="sse" sse-connect={ "/console/alarms/" (alarm.id) "/live" } {
            (crate::layout::reload_on_lag())
            div id="alarm" sse-swap="alarm" { (details) }
        }
        @if act {
            section {
                h2 { "Act" }
                (form::general(problem_of("status")))
                div.actions {
                    @if alarm.status == AlarmStatus::Active {
                        (form::button(signed, &format!("/console/alarms/{}/acknowledge", alarm.id), "Acknowledge", "primary"))
                    }
                    @if alarm.status != AlarmStatus::Cleared {
                        (form::button(signed, &format!("/console/alarms/{}/clear", alarm.id), "Clear", "danger"))
                    }
                }
                form.card method="post" action={ "/console/alarms/" (alarm.id) "/comments" } {
                    (form::csrf(signed))
                    (form::general(problem_of("comment")))
                    (form::textarea("Comment", "text", "", problem_of("comment")))
                    button.primary type="submit" { "Add comment" }
                }
            }
        }
    };
    let status = match &problem {
        Some((_, p)) if p.field.is_some() => StatusCode::BAD_REQUEST,
        Some(_) => StatusCode::CONFLICT,
        None => StatusCode::OK,
    };
    let page = layout::page(
        signed,
        &alarm.name,
        Nav::Project(&alarm.project_id, Section::Alarms),
        body,
    );
    Ok((status, page).into_response())
}

/// What the alarm is and its history: the part of the page its stream replaces.
pub async fn details(c: &Console, signed: &Signed, alarm: &Alarm) -> PageResult<Markup> {
    let history = c.services.alarms.history(&signed.who, &alarm.id).await?;
    let by_at = |by: &Option<String>, at: Option<i64>| match (by, at) {
        (Some(by), Some(at)) => html! { (by) ", " (layout::time(Some(at))) },
        _ => html! { "—" },
    };
    Ok(html! {
        h1 { (alarm.name) }
        p { (severity_badge(alarm.severity)) " " span id="alarm-status" { (status_badge(alarm.status)) } }
        dl.facts {
            dt { "Device" } dd { a href={ "/console/devices/" (alarm.device_id) } { (alarm.device_name) } }
            dt { "Attribute" } dd { code { (alarm.attribute_code) } }
            dt { "Raised by" } dd { (alarm.source.as_str()) @if let Some(rule) = &alarm.rule_id { " (rule " code { (rule) } ")" } }
            dt { "Value" } dd { (value_text(&alarm.value)) }
            dt { "Count" } dd { (alarm.count) }
            dt { "First event" } dd { (layout::time(Some(alarm.first_event_time))) }
            dt { "Last event" } dd { (layout::time(Some(alarm.last_event_time))) }
            dt { "Acknowledged" } dd { (by_at(&alarm.acknowledged_by, alarm.acknowledged_time)) }
            dt { "Cleared" } dd { (by_at(&alarm.cleared_by, alarm.cleared_time)) }
        }
        h2 { "History" }
        (history_table(&history))
    })
}

fn history_table(history: &[AlarmHistoryEntry]) -> Markup {
    html! {
        table.list.history {
            thead { tr { th { "When" } th { "What" } th { "By" } th { "Severity" } th { "Value" } th { "Comment" } } }
            tbody {
                @for h in history {
                    tr {
                        td data-label="When" { (layout::time(Some(h.time))) }
                        td data-label="What" { (badge(h.kind.as_str())) }
                        td data-label="By" { (h.by) }
                        td data-label="Severity" { (severity_badge(h.severity)) }
                        td data-label="Value" { (value_text(&h.value)) }
                        td data-label="Comment" { (h.text.as_deref().unwrap_or_default()) }
                    }
                }
            }
        }
    }
}

/// The acknowledge form: from a row of the listing, `back` is the listing's query string.
#[derive(Deserialize)]
pub struct AckForm {
    back: Option<String>,
}

/// `POST /console/alarms/{id}/acknowledge`: back to the listing it came from, or the alarm's page.
async fn acknowledge(
    State(c): State<Console>,
    Path(id): Path<String>,
    posted: Posted<AckForm>,
) -> PageResult<Response> {
    let id = AlarmId::from_string(id);
    let result = c.services.alarms.acknowledge(&posted.signed.who, &id).await;
    let to = match (&result, &posted.form.back) {
        // Parsed and written again, so the redirect is always to the listing, whatever was sent.
        (Ok(alarm), Some(back)) => serde_urlencoded::from_str::<AlarmParams>(back)
            .map(|q| q.link(&alarm.project_id, None))
            .map_err(|e| PageError::BadForm(e.to_string()))?,
        _ => format!("/console/alarms/{id}"),
    };
    settle(&c, &posted.signed, &id, result, "status", &to).await
}

/// `POST /console/alarms/{id}/clear`.
async fn clear(State(c): State<Console>, Path(id): Path<String>, posted: Posted<super::Empty>) -> PageResult<Response> {
    let id = AlarmId::from_string(id);
    let result = c.services.alarms.clear(&posted.signed.who, &id).await;
    settle(
        &c,
        &posted.signed,
        &id,
        result,
        "status",
        &format!("/console/alarms/{id}"),
    )
    .await
}

#[derive(Deserialize)]
pub struct CommentForm {
    #[serde(default)]
    text: String,
}

/// `POST /console/alarms/{id}/comments`.
async fn comment(
    State(c): State<Console>,
    Path(id): Path<String>,
    posted: Posted<CommentForm>,
) -> PageResult<Response> {
    let id = AlarmId::from_string(id);
    let text = Some(posted.form.text);
    let result = c.services.alarms.comment(&posted.signed.who, &id, text).await;
    settle(
        &c,
        &posted.signed,
        &id,
        result,
        "comment",
        &format!("/console/alarms/{id}"),
    )
    .await
}

/// A form's answer: to `to` when it succeeded, the alarm's page with the refusal at `form` when
/// the service refused its input or the alarm's state; an error page for anything else.
async fn settle<T>(
    c: &Console,
    signed: &Signed,
    id: &AlarmId,
    result: gantry_core::Result<T>,
    form: &str,
    to: &str,
) -> PageResult<Response> {
    match result {
        Ok(_) => Ok(Redirect::to(to).into_response()),
        Err(e @ (gantry_core::Error::Invalid { .. } | gantry_core::Error::Conflict(_))) => {
            render(c, signed, id, Some((form, Problem::of(&e)))).await
        }
        Err(e) => Err(e.into()),
    }
}
