//! A project's devices: the listing (filters, order and paging done by the store, presence live
//! over one stream for the whole page, the open alarms of the page's devices in one read),
//! creating a device (its token shown once) and bulk import from CSV.

use axum::Router;
use axum::extract::{Path, Query, State};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use gantry_core::connection::Connection;
use gantry_core::enums::{DeviceStatus, SortOrder};
use gantry_core::fields::DeviceFields;
use gantry_core::ids::{DeviceId, ModelId, ProjectId};
use gantry_core::paging::PageRequest;
use gantry_core::query::{DeviceQuery, DeviceSort};
use gantry_core::records::{Device, DeviceModel, Project};
use maud::{Markup, html};
use serde::Deserialize;

use crate::Console;
use crate::error::{PageResult, status_of};
use crate::form::{self, Problem};
use crate::layout::{self, Nav, Section};
use crate::pages::{badge, can_manage, pager, query};
use crate::session::{Posted, Signed};

pub fn routes() -> Router<Console> {
    Router::new()
        .route("/projects/{id}/devices", get(list).post(create))
        .route("/projects/{id}/devices/import", post(import))
}

/// The listing's filters, as the page's links and filter form carry them.
#[derive(Deserialize, Default, Clone)]
pub struct ListParams {
    #[serde(default)]
    name: String,
    #[serde(default)]
    status: String,
    /// `online`, `offline` or empty.
    #[serde(default)]
    presence: String,
    #[serde(default)]
    sort: String,
    #[serde(default)]
    order: String,
    page: Option<i64>,
}

impl ListParams {
    fn query(&self) -> gantry_core::Result<DeviceQuery> {
        let text = |s: &str| Some(s.trim().to_owned()).filter(|s| !s.is_empty());
        Ok(DeviceQuery {
            device_name: text(&self.name),
            status: text(&self.status)
                .map(|s| DeviceStatus::parse_field(&s, "status"))
                .transpose()?,
            connected: match self.presence.as_str() {
                "online" => Some(true),
                "offline" => Some(false),
                _ => None,
            },
            sort_by: text(&self.sort)
                .map(|s| DeviceSort::parse(&s))
                .transpose()?
                .unwrap_or(DeviceSort::DeviceName),
            sort_order: text(&self.order)
                .map(|s| SortOrder::parse_field(&s, "order"))
                .transpose()?
                .unwrap_or(SortOrder::Asc),
            ..Default::default()
        })
    }

    fn link(&self, id: &ProjectId, page: u32) -> String {
        let page = page.to_string();
        let q = query(&[
            ("name", &self.name),
            ("status", &self.status),
            ("presence", &self.presence),
            ("sort", &self.sort),
            ("order", &self.order),
            ("page", &page),
        ]);
        format!("/console/projects/{id}/devices{q}")
    }
}

/// `GET /console/projects/{id}/devices`.
async fn list(
    State(c): State<Console>,
    signed: Signed,
    Path(id): Path<String>,
    Query(q): Query<ListParams>,
) -> PageResult<Response> {
    let id = ProjectId::from_string(id);
    render(&c, &signed, &id, &q, Outcome::default()).await
}

/// What the last form did: a refusal, a created device (its token shown once), an import.
#[derive(Default)]
struct Outcome {
    problem: Option<Problem>,
    created: Option<Device>,
    imported: Option<Markup>,
    draft: DeviceForm,
}

async fn render(
    c: &Console,
    signed: &Signed,
    id: &ProjectId,
    q: &ListParams,
    outcome: Outcome,
) -> PageResult<Response> {
    let project = c.services.catalog.get_project(&signed.who, id).await?;
    let page = PageRequest::parse(q.page, Some(25), 25)?;
    let devices = c
        .services
        .catalog
        .project_devices(&signed.who, id, q.query()?, page)
        .await?;
    let listed: Vec<DeviceId> = devices.items.iter().map(|d| d.id.clone()).collect();
    let open = c.services.alarms.open_by_device(&signed.who, id, &listed).await?;
    let presence = c
        .services
        .presence
        .project_connections(&signed.who, id, &listed)
        .await?;
    let models = c
        .services
        .catalog
        .list_models(&signed.who, PageRequest::parse(None, Some(1000), 1000)?)
        .await?;
    let manage = can_manage(&signed.who, id);
    let body = html! {
        h1 { (project.name) ": devices" }
        @if let Some(device) = &outcome.created { (created(device)) }
        @if let Some(report) = &outcome.imported { (report) }
        (filters(id, q))
        div hx-ext="sse" sse-connect={ "/console/projects/" (id) "/live" } {
            (crate::layout::reload_on_lag())
            table.list {
                thead { tr { th { "Name" } th { "Model" } th { "Status" } th { "Presence" } th { "Last seen" } th { "Open alarms" } } }
                tbody {
                    @for (d, p) in devices.items.iter().zip(&presence) {
                        tr {
                            td data-label="Name" { a href={ "/console/devices/" (d.id) } { (d.device_name) } }
                            td data-label="Model" { (d.device_model_name) }
                            td data-label="Status" { (badge(d.status.as_str())) }
                            td data-label="Presence" sse-swap={ "presence-" (d.id) } { (presence_badge(p)) }
                            td data-label="Last seen" sse-swap={ "seen-" (d.id) } { (layout::time(p.last_seen_time)) }
                            td data-label="Open alarms" class="open-alarms" { (open_alarms(id, d, open.get(&d.id).copied())) }
                        }
                    }
                }
            }
        }
        @if devices.items.is_empty() { p.empty { "No devices match." } }
        (pager(&devices, |n| q.link(id, n)))
        @if manage { (create_forms(signed, &project, &models.items, &outcome)) }
    };
    let status = outcome
        .problem
        .as_ref()
        .map(|_| axum::http::StatusCode::BAD_REQUEST)
        .unwrap_or_default();
    Ok((
        status,
        layout::page(signed, "Devices", Nav::Project(id, Section::Devices), body),
    )
        .into_response())
}

/// A device's open alarms: a link to them on the alarms page, or none.
fn open_alarms(project: &ProjectId, device: &Device, open: Option<u64>) -> Markup {
    match open {
        Some(n) => html! {
            a.open-count href={ "/console/projects/" (project) "/alarms" (query(&[("deviceId", device.id.as_str())])) }
                aria-label={ (n) " open alarms of " (device.device_name) } { (n) }
        },
        None => html! { span.none { "0" } },
    }
}

/// Online or offline, as a badge.
pub fn presence_badge(c: &Connection) -> Markup {
    badge(if c.connected { "online" } else { "offline" })
}

fn filters(id: &ProjectId, q: &ListParams) -> Markup {
    let statuses = [("", "Any"), ("Active", "Active"), ("Locked", "Locked")];
    let presences = [("", "Any"), ("online", "Online"), ("offline", "Offline")];
    let sorts = [
        ("deviceName", "Name"),
        ("createdTime", "Created"),
        ("updatedTime", "Updated"),
        ("status", "Status"),
    ];
    let orders = [("ASC", "Ascending"), ("DESC", "Descending")];
    html! {
        form.filters method="get" action={ "/console/projects/" (id) "/devices" } {
            (form::input("Name contains", "name", "search", &q.name, None))
            (form::select("Status", "status", &statuses, &q.status, None))
            (form::select("Presence", "presence", &presences, &q.presence, None))
            (form::select("Sort by", "sort", &sorts, &q.sort, None))
            (form::select("Order", "order", &orders, &q.order, None))
            button type="submit" { "Apply" }
        }
    }
}

fn created(device: &Device) -> Markup {
    html! {
        section.notice role="status" {
            h2 { "Device " (device.device_name) " created" }
            p { "Its access token (the MQTT password; shown once here):" }
            p { code.token id="new-token" { (device.access_token) } }
            p { a href={ "/console/devices/" (device.id) } { "Open the device" } }
        }
    }
}

/// The device form as posted; its inputs carry the API's field names.
#[derive(Deserialize, Default, Clone)]
#[serde(rename_all = "camelCase")]
pub struct DeviceForm {
    #[serde(default)]
    device_name: String,
    #[serde(default)]
    model_id: String,
    #[serde(default)]
    comments: String,
}

fn create_forms(signed: &Signed, project: &Project, models: &[DeviceModel], outcome: &Outcome) -> Markup {
    let options: Vec<(&str, &str)> = models.iter().map(|m| (m.id.as_str(), m.name.as_str())).collect();
    let problem = outcome.problem.as_ref();
    let draft = &outcome.draft;
    html! {
        h2 id="new" { "New device" }
        @if models.is_empty() { p { "Create a " a href="/console/models" { "model" } " first." } }
        @else {
            form.card method="post" action={ "/console/projects/" (project.id) "/devices" } {
                (form::csrf(signed))
                (form::general(problem))
                (form::input("Device name", "deviceName", "text", &draft.device_name, problem))
                (form::select("Model", "modelId", &options, &draft.model_id, problem))
                (form::input("Comments", "comments", "text", &draft.comments, problem))
                button.primary type="submit" { "Create device" }
            }
            h2 id="import" { "Import devices from CSV" }
            form.card method="post" action={ "/console/projects/" (project.id) "/devices/import" } {
                (form::csrf(signed))
                (form::textarea("CSV: a header line deviceName,model[,comments], then one device a line; model is a model's name or id", "csv", "", None))
                button type="submit" { "Import" }
            }
        }
    }
}

/// `POST /console/projects/{id}/devices`.
async fn create(State(c): State<Console>, Path(id): Path<String>, posted: Posted<DeviceForm>) -> PageResult<Response> {
    let id = ProjectId::from_string(id);
    let draft = posted.form;
    let fields = fields(&id, &draft.device_name, &draft.model_id, &draft.comments);
    let result = c.services.catalog.create_device(&posted.signed.who, fields).await;
    let new_id = result.as_ref().ok().map(|d| d.id.to_string());
    let outcome = match result {
        Ok(device) => Outcome {
            created: Some(device),
            ..Default::default()
        },
        Err(e) if status_of(&e).is_client_error() && !matches!(e, gantry_core::Error::Forbidden(_)) => Outcome {
            problem: Some(Problem::of(&e)),
            draft,
            ..Default::default()
        },
        Err(e) => return Err(e.into()),
    };
    let page = render(&c, &posted.signed, &id, &ListParams::default(), outcome).await?;
    Ok(match new_id {
        Some(new) => crate::audit::created(page, new),
        None => page,
    })
}

fn fields(project: &ProjectId, name: &str, model: &str, comments: &str) -> DeviceFields {
    DeviceFields {
        device_name: Some(name.trim().to_owned()),
        project_id: Some(project.clone()),
        model_id: Some(ModelId::from_string(model.trim().to_owned())),
        comments: Some(comments.trim().to_owned()).filter(|c| !c.is_empty()),
        ..Default::default()
    }
}

#[derive(Deserialize)]
pub struct ImportForm {
    #[serde(default)]
    csv: String,
}

/// `POST /console/projects/{id}/devices/import`: each line creates a device through the same
/// service; the page lists what was created and what was refused, line by line.
async fn import(State(c): State<Console>, Path(id): Path<String>, posted: Posted<ImportForm>) -> PageResult<Response> {
    let id = ProjectId::from_string(id);
    let who = &posted.signed.who;
    let models = c
        .services
        .catalog
        .list_models(who, PageRequest::parse(None, Some(1000), 1000)?)
        .await?;
    let model_id = |text: &str| {
        models
            .items
            .iter()
            .find(|m| m.name == text || m.id.as_str() == text)
            .map(|m| m.id.to_string())
            .unwrap_or_else(|| text.to_owned())
    };
    let mut reader = csv::ReaderBuilder::new()
        .flexible(true)
        .trim(csv::Trim::All)
        .from_reader(posted.form.csv.as_bytes());
    let mut lines: Vec<(usize, String, Result<DeviceId, String>)> = Vec::new();
    for (n, record) in reader.records().enumerate() {
        let line = n + 2;
        let record = match record {
            Ok(r) => r,
            Err(e) => {
                lines.push((line, String::new(), Err(e.to_string())));
                continue;
            }
        };
        let (name, model, comments) = (
            record.get(0).unwrap_or(""),
            record.get(1).unwrap_or(""),
            record.get(2).unwrap_or(""),
        );
        let result = c
            .services
            .catalog
            .create_device(who, fields(&id, name, &model_id(model), comments))
            .await;
        lines.push((
            line,
            name.to_owned(),
            result.map(|d| d.id).map_err(|e| Problem::of(&e).message),
        ));
    }
    let ok = lines.iter().filter(|l| l.2.is_ok()).count();
    let report = html! {
        section.notice role="status" {
            h2 { "Import: " (ok) " created, " (lines.len() - ok) " refused" }
            ul {
                @for (line, name, result) in &lines {
                    li {
                        "Line " (line) " " (name) ": "
                        @match result {
                            Ok(d) => { a href={ "/console/devices/" (d) } { "created" } }
                            Err(why) => { span.error { (why) } }
                        }
                    }
                }
            }
        }
    };
    let outcome = Outcome {
        imported: Some(report),
        ..Default::default()
    };
    render(&c, &posted.signed, &id, &ListParams::default(), outcome).await
}
