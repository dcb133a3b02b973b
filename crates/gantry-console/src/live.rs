//! The live parts of pages: one Server-Sent Events stream per page (never one per row), fed by
//! the project's feed, whose events arrive as HTML fragments named for the element they replace
//! (htmx's SSE extension swaps each into the element whose `sse-swap` names it).
//!
//! A stream ends when its session is closed or its credential stops working. A stream that fell
//! behind the feed sends `reload`, and the page reloads (`layout::reload_on_lag`).

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::{Path, Query, State};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use gantry_core::connection::Connection;
use gantry_core::event::ShadowAttribute;
use gantry_core::ids::{AlarmId, DeviceId, ProjectId};
use gantry_core::stream::{StreamEvent, StreamType};
use maud::Markup;
use tokio::sync::broadcast::error::{RecvError, TryRecvError};

use crate::Console;
use crate::error::PageResult;
use crate::pages::alarms::{self, AlarmParams};
use crate::pages::{alarm, device, device_desired, devices};
use crate::session::Signed;

/// What `reload` swaps into the page's `layout::reload_on_lag` element: a refresh at once.
pub const RELOAD: &str = r#"<meta http-equiv="refresh" content="0">"#;

/// How often a stream checks its session.
const CHECK_PERIOD: Duration = Duration::from_secs(1);

/// What a page shows, and so which fragments its stream sends.
enum View {
    /// A project's devices: presence and last seen per row.
    Devices,
    /// A device's page: presence, shadow, event logs, alarms.
    Device(DeviceId),
    /// A project's alarm listing with these filters.
    Alarms(ProjectId, AlarmParams),
    /// One alarm's page.
    Alarm(AlarmId),
}

/// `GET /console/projects/{id}/live`: the presence of the project's devices.
pub async fn project(State(c): State<Console>, signed: Signed, Path(id): Path<String>) -> PageResult<Response> {
    let project = ProjectId::from_string(id);
    c.services.catalog.get_project(&signed.who, &project).await?;
    follow(c, signed, project, None, View::Devices).await
}

/// `GET /console/projects/{id}/alarms/live?<filters>`: the alarm listing with the page's filters.
pub async fn alarms(
    State(c): State<Console>,
    signed: Signed,
    Path(id): Path<String>,
    Query(q): Query<AlarmParams>,
) -> PageResult<Response> {
    let project = ProjectId::from_string(id);
    c.services.catalog.get_project(&signed.who, &project).await?;
    follow(c, signed, project.clone(), None, View::Alarms(project, q)).await
}

/// `GET /console/devices/{id}/live`: a device's presence, shadow, event logs and alarms.
pub async fn device(State(c): State<Console>, signed: Signed, Path(id): Path<String>) -> PageResult<Response> {
    let device = c
        .services
        .catalog
        .get_device(&signed.who, &DeviceId::from_string(id))
        .await?;
    let view = View::Device(device.id.clone());
    follow(c, signed, device.project_id, Some(device.id), view).await
}

/// `GET /console/alarms/{id}/live`: one alarm's facts and history.
pub async fn alarm(State(c): State<Console>, signed: Signed, Path(id): Path<String>) -> PageResult<Response> {
    let alarm = c
        .services
        .alarms
        .get_alarm(&signed.who, &AlarmId::from_string(id))
        .await?;
    let view = View::Alarm(alarm.id.clone());
    follow(c, signed, alarm.project_id, Some(alarm.device_id), view).await
}

async fn follow(
    c: Console,
    signed: Signed,
    project: ProjectId,
    device: Option<DeviceId>,
    view: View,
) -> PageResult<Response> {
    let holder = format!("console:{}", signed.session);
    let (subscription, hold) = c.services.feeds.subscribe(&project, device.as_ref(), None, &holder)?;
    let state = Follower {
        _hold: hold,
        console: c,
        signed,
        view,
        live: subscription.live,
        pending: Vec::new(),
        check: tokio::time::interval_at(tokio::time::Instant::now() + CHECK_PERIOD, CHECK_PERIOD),
    };
    let events = futures::stream::unfold(state, |mut state| async move {
        let event = state.next().await?;
        Some((Ok::<_, Infallible>(event), state))
    });
    Ok(Sse::new(events)
        .keep_alive(KeepAlive::new().interval(Duration::from_secs(15)))
        .into_response())
}

struct Follower {
    _hold: gantry_core::feed::Hold,
    console: Console,
    signed: Signed,
    view: View,
    live: tokio::sync::broadcast::Receiver<Arc<StreamEvent>>,
    /// Fragments made from one feed event, sent one by one.
    pending: Vec<Event>,
    check: tokio::time::Interval,
}

impl Follower {
    async fn next(&mut self) -> Option<Event> {
        loop {
            if let Some(event) = self.pending.pop() {
                return Some(event);
            }
            tokio::select! {
                received = self.live.recv() => match received {
                    Ok(event) => {
                        self.skip_queued_alarms(&event);
                        self.pending = self.fragments(&event).await;
                    }
                    // Fell behind: the page reloads and shows what it missed.
                    Err(RecvError::Lagged(_)) => return Some(Event::default().event("reload").data(RELOAD)),
                    Err(RecvError::Closed) => return None,
                },
                _ = self.check.tick() => {
                    let credential = self.console.sessions.credential(&self.signed.session)?;
                    let now = credential.principal(&self.console.services).await.ok();
                    if now.as_ref() != Some(&self.signed.who) {
                        return None;
                    }
                }
            }
        }
    }

    /// On a listing of alarms, one rendering serves every change queued behind an alarm's
    /// `event`: the listing shows nothing else and is queried whole, so the queued events (and
    /// any the stream dropped) are passed over, and a burst of alarms costs one query.
    fn skip_queued_alarms(&mut self, event: &StreamEvent) {
        if !matches!(self.view, View::Alarms(..)) || event.kind != StreamType::Alarm {
            return;
        }
        while matches!(self.live.try_recv(), Ok(_) | Err(TryRecvError::Lagged(_))) {}
    }

    /// The HTML fragments one feed event changes on the page.
    async fn fragments(&self, event: &StreamEvent) -> Vec<Event> {
        match (event.kind, &self.view) {
            (StreamType::Connection, View::Devices | View::Device(_)) => {
                let Ok(c) = serde_json::from_str::<Connection>(&event.data) else {
                    return Vec::new();
                };
                let suffix = match self.view {
                    View::Device(_) => String::new(),
                    _ => format!("-{}", c.device_id),
                };
                vec![
                    fragment(format!("seen{suffix}"), crate::layout::time(c.last_seen_time)),
                    fragment(format!("presence{suffix}"), devices::presence_badge(&c)),
                ]
            }
            (StreamType::Shadow, View::Device(_)) => {
                let Ok(changed) = serde_json::from_str::<ShadowChange>(&event.data) else {
                    return Vec::new();
                };
                changed
                    .attribute_map
                    .into_values()
                    .map(|a| fragment(format!("attr-{}", a.code), device::shadow_value(Some(&a))))
                    .collect()
            }
            (StreamType::EventLog, View::Device(id)) => {
                let rows = device::event_log_rows(&self.console, &self.signed.who, id).await;
                rows.map(|rows| vec![fragment("eventlogs".into(), rows)])
                    .unwrap_or_default()
            }
            (StreamType::Desired, View::Device(id)) => {
                let rows = device_desired::rows(&self.console, &self.signed, id).await;
                rows.map(|rows| vec![fragment("desired".into(), rows)])
                    .unwrap_or_default()
            }
            (StreamType::Alarm, _) => self.alarm_fragments(event).await,
            _ => Vec::new(),
        }
    }

    async fn alarm_fragments(&self, event: &StreamEvent) -> Vec<Event> {
        let (c, signed) = (&self.console, &self.signed);
        let markup = match &self.view {
            View::Alarms(project, q) => alarms::listing(c, signed, project, q).await,
            View::Device(id) => device::alarm_rows(c, signed, id).await,
            View::Alarm(id) => {
                let changed = serde_json::from_str::<Changed>(&event.data).is_ok_and(|a| a.id == id.as_str());
                if !changed {
                    return Vec::new();
                }
                match c.services.alarms.get_alarm(&signed.who, id).await {
                    Ok(a) => alarm::details(c, signed, &a).await,
                    Err(e) => Err(e.into()),
                }
            }
            View::Devices => return Vec::new(),
        };
        let name = match self.view {
            View::Alarm(_) => "alarm",
            _ => "alarms",
        };
        markup.map(|m| vec![fragment(name.into(), m)]).unwrap_or_default()
    }
}

/// An SSE event that swaps `markup` into the element whose `sse-swap` is `name`.
fn fragment(name: String, markup: Markup) -> Event {
    Event::default()
        .event(name)
        .data(markup.into_string().replace('\n', " "))
}

/// The id of a changed alarm, from its event's data.
#[derive(serde::Deserialize)]
struct Changed {
    id: String,
}

#[derive(serde::Deserialize)]
#[serde(rename_all = "camelCase")]
struct ShadowChange {
    attribute_map: std::collections::BTreeMap<String, ShadowAttribute>,
}
