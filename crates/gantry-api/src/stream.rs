//! The project push stream: `GET /api/v1/projects/{projectId}/stream`, Server-Sent Events.
//!
//! A stream replays what its `Last-Event-ID` missed from the project's feed (`feed::Feeds`),
//! then follows it live. Every `REAUTH_PERIOD` it checks that its token still stands for the
//! same caller: a rotated token (past its grace), a deleted project or device, or a device
//! Locked since ends the stream.

use std::collections::VecDeque;
use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::{Path, State};
use axum::http::HeaderMap;
use axum::http::header::AUTHORIZATION;
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::routing::get;
use futures::Stream;
use gantry_core::Services;
use gantry_core::ids::{DeviceId, ProjectId};
use gantry_core::principal::Principal;
use gantry_core::stream::{StreamEvent, StreamType};
use serde::Deserialize;
use tokio::sync::broadcast::error::RecvError;

use crate::AppState;
use crate::error::{ApiResult, ErrorBody};
use crate::extract::{AppQuery, Auth};

/// How often a stream checks its token.
const REAUTH_PERIOD: Duration = Duration::from_secs(1);
/// The comment sent when nothing else was.
const HEARTBEAT: Duration = Duration::from_secs(15);

pub fn routes() -> Router<AppState> {
    Router::new().route("/api/v1/projects/{projectId}/stream", get(stream))
}

/// Filters of the push stream.
/// One Server-Sent Event of the stream, as a client's SSE parser yields it.
#[derive(utoipa::ToSchema)]
#[allow(dead_code)]
pub struct SseEvent {
    /// The cursor: increasing within the project; send the last one as `Last-Event-ID` to resume.
    /// Absent on `reset`.
    id: Option<String>,
    /// `telemetry`, `shadow`, `eventLog`, `connection`, or `reset` (what was missed is no longer
    /// kept: reload, then follow).
    event: String,
    /// The event's JSON document (`{}` on `reset`).
    data: String,
}

#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[serde(rename_all = "camelCase")]
#[into_params(parameter_in = Query)]
pub struct StreamParams {
    /// Comma list of telemetry, shadow, eventLog, connection, desired, alarm; default all.
    types: Option<String>,
    /// Only this device's events; required with a device token, which may name only itself.
    device_id: Option<String>,
}

/// Server-Sent Events of the project: `id` (a cursor increasing within the project), `event`
/// and `data` (JSON): `telemetry`, a committed DeviceEvent; `shadow`, `{deviceId, attributeMap}`
/// with the shadow attributes a commit changed; `eventLog`, an EventLog recorded or updated (a
/// control, its completion by an ack or its `exception` by the ack timeout, a Response);
/// `connection`, the device's connection record as `GET /devices/{deviceId}/connection` shows it. Send `Last-Event-ID` to
/// resume: the events after it are replayed while the server still holds them (the last 60 s,
/// and at least the last 100,000 events, of a project someone follows); otherwise, or when the
/// client fell too far behind, an `event: reset` comes first: reload, then follow. A comment
/// line every 15 s keeps idle connections open. Administrators and the project's application
/// token; a device token only with `deviceId` set to its own id. The stream ends when its token
/// stops working (rotated, past any grace) or its device is Locked or deleted.
#[utoipa::path(get, path = "/api/v1/projects/{projectId}/stream", operation_id = "streamProject", tag = "Projects",
    params(("projectId" = String, Path), StreamParams,
           ("Last-Event-ID" = Option<String>, Header, description = "the last id received, to resume")),
    responses((status = 200, description = "text/event-stream", content_type = "text/event-stream", body = SseEvent),
              (status = 400, body = ErrorBody), (status = 401, body = ErrorBody), (status = 403, body = ErrorBody),
              (status = 404, body = ErrorBody),
              (status = 429, description = "the project or the token holds as many streams as it may (42902)", body = ErrorBody)))]
#[tracing::instrument(name = "streamProject", skip_all, fields(project = %id))]
pub async fn stream(
    State(s): State<AppState>,
    Auth(who): Auth,
    Path(id): Path<String>,
    AppQuery(q): AppQuery<StreamParams>,
    headers: HeaderMap,
) -> ApiResult<Sse<impl Stream<Item = Result<Event, Infallible>>>> {
    let project = ProjectId::from_string(id);
    let types = StreamType::parse_list(q.types.as_deref())?;
    let device = q.device_id.filter(|d| !d.is_empty()).map(DeviceId::from_string);
    allowed(&s.services, &who, &project, device.as_ref()).await?;
    let token = headers
        .get(AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.get(7..))
        .map(|t| t.trim().to_owned())
        .unwrap_or_default();
    // An empty id is no id: the SSE specification lets a stream clear it, and a client then
    // resumes from nothing rather than from a cursor it lost.
    let last_id = headers
        .get("last-event-id")
        .and_then(|v| v.to_str().ok())
        .map(str::trim)
        .filter(|v| !v.is_empty());
    let (subscription, hold) = s
        .services
        .feeds
        .subscribe(&project, device.as_ref(), last_id, &holder(&who))?;
    let cursor = Cursor {
        _hold: hold,
        services: s.services.clone(),
        token,
        who,
        types,
        device,
        reset: subscription.reset,
        replay: subscription.replay.into(),
        live: subscription.live,
        last: 0,
        reauth: tokio::time::interval_at(tokio::time::Instant::now() + REAUTH_PERIOD, REAUTH_PERIOD),
    };
    let events = futures::stream::unfold(cursor, |mut cursor| async move {
        let event = cursor.next().await?;
        Some((Ok(event), cursor))
    });
    Ok(Sse::new(events).keep_alive(KeepAlive::new().interval(HEARTBEAT).text("heartbeat")))
}

/// Administrators and the project's application; a device for its own events alone.
async fn allowed(
    services: &Services,
    who: &Principal,
    project: &ProjectId,
    device: Option<&DeviceId>,
) -> ApiResult<()> {
    match (who, device) {
        (Principal::Device { .. }, None) => Err(gantry_core::Error::forbidden(
            "a device token streams only its own device: set deviceId",
        ))?,
        (Principal::Device { .. }, Some(device)) => {
            let record = services.catalog.get_device(who, device).await?;
            if &record.project_id != project {
                Err(gantry_core::Error::forbidden("the device is not in that project"))?;
            }
        }
        (_, device) => {
            services.catalog.get_project(who, project).await?;
            if let Some(device) = device {
                let record = services.catalog.get_device(who, device).await?;
                if &record.project_id != project {
                    Err(gantry_core::Error::invalid(
                        "deviceId",
                        "the device is not in that project",
                    ))?;
                }
            }
        }
    }
    Ok(())
}

/// Whom a stream is counted against (`FeedLimits::per_caller`): the token's principal.
fn holder(who: &Principal) -> String {
    match who {
        Principal::Admin { tenant, .. } => format!("admin:{tenant}"),
        Principal::Application { project, .. } => format!("application:{project}"),
        Principal::Device { device, .. } => format!("device:{device}"),
        Principal::User { user, .. } => format!("user:{user}"),
    }
}

struct Cursor {
    /// Counted against the feeds' limits while the stream lives; dropped, the feed's replay
    /// window starts.
    _hold: gantry_core::feed::Hold,
    services: Arc<Services>,
    token: String,
    who: Principal,
    types: Vec<StreamType>,
    device: Option<DeviceId>,
    reset: bool,
    replay: VecDeque<Arc<StreamEvent>>,
    live: tokio::sync::broadcast::Receiver<Arc<StreamEvent>>,
    /// The last id sent: live events up to it were replayed already.
    last: u64,
    reauth: tokio::time::Interval,
}

impl Cursor {
    /// The next event to send; None ends the stream.
    async fn next(&mut self) -> Option<Event> {
        loop {
            if std::mem::take(&mut self.reset) {
                return Some(Event::default().event("reset").data("{}"));
            }
            if let Some(event) = self.replay.pop_front() {
                if let Some(sent) = self.send(&event) {
                    return Some(sent);
                }
                continue;
            }
            tokio::select! {
                received = self.live.recv() => match received {
                    Ok(event) => {
                        if let Some(sent) = self.send(&event) {
                            return Some(sent);
                        }
                    }
                    // Fell behind: what it missed is gone from the live channel.
                    Err(RecvError::Lagged(_)) => self.reset = true,
                    Err(RecvError::Closed) => return None,
                },
                _ = self.reauth.tick() => {
                    let now = self.services.auth.authenticate(&self.token).await;
                    if now.ok().as_ref() != Some(&self.who) {
                        tracing::info!("push stream ended: its token no longer stands for its caller");
                        return None;
                    }
                }
            }
        }
    }

    /// The SSE event for `event`, if this stream wants it and has not sent it.
    fn send(&mut self, event: &StreamEvent) -> Option<Event> {
        if event.id <= self.last
            || !self.types.contains(&event.kind)
            || self.device.as_ref().is_some_and(|d| d != &event.device_id)
        {
            return None;
        }
        self.last = event.id;
        Some(
            Event::default()
                .id(event.id.to_string())
                .event(event.kind.as_str())
                .data(&*event.data),
        )
    }
}
