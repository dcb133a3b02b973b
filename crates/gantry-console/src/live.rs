//! The live parts of pages: one Server-Sent Events stream per page (never one per row), fed by
//! the project's feed, whose events arrive as HTML fragments named for the element they replace
//! (htmx's SSE extension swaps each into the element whose `sse-swap` names it).
//!
//! A stream ends when its session is closed or its credential stops working.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::{Path, State};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use gantry_core::connection::Connection;
use gantry_core::event::ShadowAttribute;
use gantry_core::ids::{DeviceId, ProjectId};
use gantry_core::stream::{StreamEvent, StreamType};
use maud::Markup;
use tokio::sync::broadcast::error::RecvError;

use crate::Console;
use crate::error::PageResult;
use crate::pages::{device, devices};
use crate::session::Signed;

/// How often a stream checks its session.
const CHECK_PERIOD: Duration = Duration::from_secs(1);

/// `GET /console/projects/{id}/live`: the presence of the project's devices.
pub async fn project(State(c): State<Console>, signed: Signed, Path(id): Path<String>) -> PageResult<Response> {
    let project = ProjectId::from_string(id);
    c.services.catalog.get_project(&signed.who, &project).await?;
    follow(c, signed, project, None).await
}

/// `GET /console/devices/{id}/live`: a device's presence, shadow and event logs.
pub async fn device(State(c): State<Console>, signed: Signed, Path(id): Path<String>) -> PageResult<Response> {
    let device = c
        .services
        .catalog
        .get_device(&signed.who, &DeviceId::from_string(id))
        .await?;
    follow(c, signed, device.project_id, Some(device.id)).await
}

async fn follow(c: Console, signed: Signed, project: ProjectId, device: Option<DeviceId>) -> PageResult<Response> {
    let holder = format!("console:{}", signed.session);
    let (subscription, hold) = c.services.feeds.subscribe(&project, device.as_ref(), None, &holder)?;
    let state = Follower {
        _hold: hold,
        console: c,
        signed,
        device,
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
    /// The device a device page follows; None for a project's listing.
    device: Option<DeviceId>,
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
                    Ok(event) => self.pending = self.fragments(&event).await,
                    // Fell behind: the page reloads the parts it shows.
                    Err(RecvError::Lagged(_)) => return Some(Event::default().event("reload").data("")),
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

    /// The HTML fragments one feed event changes on the page.
    async fn fragments(&self, event: &StreamEvent) -> Vec<Event> {
        let fragment = |name: String, markup: Markup| {
            Event::default()
                .event(name)
                .data(markup.into_string().replace('\n', " "))
        };
        match event.kind {
            StreamType::Connection => {
                let Ok(c) = serde_json::from_str::<Connection>(&event.data) else {
                    return Vec::new();
                };
                let suffix = match self.device {
                    Some(_) => String::new(),
                    None => format!("-{}", c.device_id),
                };
                vec![
                    fragment(format!("seen{suffix}"), crate::layout::time(c.last_seen_time)),
                    fragment(format!("presence{suffix}"), devices::presence_badge(&c)),
                ]
            }
            StreamType::Shadow if self.device.is_some() => {
                let Ok(changed) = serde_json::from_str::<ShadowChange>(&event.data) else {
                    return Vec::new();
                };
                changed
                    .attribute_map
                    .into_values()
                    .map(|a| fragment(format!("attr-{}", a.code), device::shadow_value(Some(&a))))
                    .collect()
            }
            StreamType::EventLog => match &self.device {
                Some(id) => match device::event_log_rows(&self.console, &self.signed.who, id).await {
                    Ok(rows) => vec![fragment("eventlogs".into(), rows)],
                    Err(_) => Vec::new(),
                },
                None => Vec::new(),
            },
            _ => Vec::new(),
        }
    }
}

#[derive(serde::Deserialize)]
#[serde(rename_all = "camelCase")]
struct ShadowChange {
    attribute_map: std::collections::BTreeMap<String, ShadowAttribute>,
}
