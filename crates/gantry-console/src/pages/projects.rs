//! Projects: the listing with its status filter, and the create and edit forms.

use axum::Router;
use axum::extract::{Path, Query, State};
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::{get, post};
use gantry_core::enums::ProjectStatus;
use gantry_core::fields::ProjectFields;
use gantry_core::ids::ProjectId;
use gantry_core::paging::PageRequest;
use gantry_core::records::{JsonMap, Project};
use maud::{Markup, html};
use serde::Deserialize;

use crate::Console;
use crate::audit::created;
use crate::error::{PageResult, status_of};
use crate::form::{self, Problem};
use crate::layout::{self, Nav, Section};
use crate::pages::{badge, pager, query};
use crate::session::{Posted, Signed};

pub fn routes() -> Router<Console> {
    Router::new()
        .route("/projects", get(list).post(create))
        .route("/projects/{id}/edit", get(edit))
        .route("/projects/{id}", post(update))
}

#[derive(Deserialize, Default)]
pub struct ListParams {
    /// The status filter (not `status`, the name of the create form's input).
    #[serde(default)]
    show: String,
    page: Option<i64>,
}

/// `GET /console/projects`.
async fn list(State(c): State<Console>, signed: Signed, Query(q): Query<ListParams>) -> PageResult<Response> {
    render_list(&c, &signed, &q, &ProjectForm::default(), None).await
}

async fn render_list(
    c: &Console,
    signed: &Signed,
    q: &ListParams,
    draft: &ProjectForm,
    problem: Option<&Problem>,
) -> PageResult<Response> {
    let status = match q.show.as_str() {
        "" => None,
        s => Some(ProjectStatus::parse_field(s, "show")?),
    };
    let page = PageRequest::parse(q.page, Some(20), 20)?;
    let projects = c.services.catalog.list_projects(&signed.who, status, page).await?;
    let statuses: Vec<(&str, &str)> = std::iter::once(("", "All"))
        .chain(ProjectStatus::ALL.iter().map(|s| (s.as_str(), s.as_str())))
        .collect();
    let body = html! {
        h1 { "Projects" }
        form.filters method="get" action="/console/projects" {
            (form::select("Show", "show", &statuses, &q.show, None))
            button type="submit" { "Filter" }
        }
        table.list {
            thead { tr { th { "Name" } th { "Status" } th { "Address" } th { "Created" } th { span.sr { "Actions" } } } }
            tbody {
                @for p in &projects.items {
                    tr {
                        td data-label="Name" { a href={ "/console/projects/" (p.id) } { (p.name) } }
                        td data-label="Status" { (badge(p.status.as_str())) }
                        td data-label="Address" { (form::or_empty(&p.address)) }
                        td data-label="Created" { (layout::time(Some(p.record.created_time))) }
                        td { @if signed.who.require_admin().is_ok() { a href={ "/console/projects/" (p.id) "/edit" } { "Edit" } } }
                    }
                }
            }
        }
        @if projects.items.is_empty() { p.empty { "No projects." } }
        (pager(&projects, |n| format!("/console/projects{}", query(&[("show", &q.show), ("page", &n.to_string())]))))
        @if signed.who.require_admin().is_ok() {
            h2 id="new" { "New project" }
            (project_form(signed, "/console/projects", draft, problem, "Create project"))
        }
    };
    let status = problem.map(|_| axum::http::StatusCode::BAD_REQUEST).unwrap_or_default();
    Ok((status, layout::page(signed, "Projects", Nav::Projects, body)).into_response())
}

/// The project form as posted; its inputs carry the API's field names.
#[derive(Deserialize, Default, Clone)]
#[serde(rename_all = "camelCase")]
pub struct ProjectForm {
    #[serde(default)]
    name: String,
    #[serde(default)]
    description: String,
    #[serde(default)]
    status: String,
    #[serde(default)]
    address: String,
    #[serde(default)]
    lat: String,
    #[serde(default)]
    lng: String,
    #[serde(default)]
    zoom: String,
}

impl ProjectForm {
    fn of(p: &Project) -> Self {
        let map = p.map_info.clone().unwrap_or_default();
        let num = |k: &str| map.get(k).map(|v| v.to_string()).unwrap_or_default();
        Self {
            name: p.name.clone(),
            description: p.description.clone().unwrap_or_default(),
            status: p.status.as_str().to_owned(),
            address: p.address.clone().unwrap_or_default(),
            lat: num("lat"),
            lng: num("lng"),
            zoom: num("zoom"),
        }
    }

    /// The service's input; `mapInfo` keeps the keys it had besides lat, lng and zoom.
    fn fields(&self, mut map_info: JsonMap) -> gantry_core::Result<ProjectFields> {
        for (key, text) in [("lat", &self.lat), ("lng", &self.lng), ("zoom", &self.zoom)] {
            match text.trim() {
                "" => map_info.remove(key),
                t => {
                    let n: f64 = t
                        .parse()
                        .map_err(|_| gantry_core::Error::invalid(format!("mapInfo.{key}"), "is not a number"))?;
                    map_info.insert(key.to_owned(), serde_json::json!(n))
                }
            };
        }
        let text = |s: &str| Some(s.trim().to_owned()).filter(|s| !s.is_empty());
        Ok(ProjectFields {
            name: text(&self.name),
            description: text(&self.description),
            status: text(&self.status)
                .map(|s| ProjectStatus::parse_field(&s, "status"))
                .transpose()?,
            address: text(&self.address),
            map_info: Some(map_info),
            ..Default::default()
        })
    }
}

fn project_form(signed: &Signed, action: &str, draft: &ProjectForm, problem: Option<&Problem>, submit: &str) -> Markup {
    let statuses: Vec<(&str, &str)> = ProjectStatus::ALL.iter().map(|s| (s.as_str(), s.as_str())).collect();
    let status = if draft.status.is_empty() {
        "development"
    } else {
        &draft.status
    };
    html! {
        form.card method="post" action=(action) {
            (form::csrf(signed))
            (form::general(problem))
            (form::input("Name", "name", "text", &draft.name, problem))
            (form::input("Description", "description", "text", &draft.description, problem))
            (form::select("Status", "status", &statuses, status, problem))
            (form::input("Address", "address", "text", &draft.address, problem))
            fieldset {
                legend { "Map centre (mapInfo)" }
                (form::input("Latitude", "mapInfo.lat", "text", &draft.lat, problem))
                (form::input("Longitude", "mapInfo.lng", "text", &draft.lng, problem))
                (form::input("Zoom", "mapInfo.zoom", "text", &draft.zoom, problem))
            }
            button.primary type="submit" { (submit) }
        }
    }
}

/// The form's inputs are named `mapInfo.lat`...; serde reads them under these names.
#[derive(Deserialize)]
struct Posted2 {
    #[serde(default)]
    name: String,
    #[serde(default)]
    description: String,
    #[serde(default)]
    status: String,
    #[serde(default)]
    address: String,
    #[serde(default, rename = "mapInfo.lat")]
    lat: String,
    #[serde(default, rename = "mapInfo.lng")]
    lng: String,
    #[serde(default, rename = "mapInfo.zoom")]
    zoom: String,
}

impl From<Posted2> for ProjectForm {
    fn from(p: Posted2) -> Self {
        Self {
            name: p.name,
            description: p.description,
            status: p.status,
            address: p.address,
            lat: p.lat,
            lng: p.lng,
            zoom: p.zoom,
        }
    }
}

/// `POST /console/projects`.
async fn create(State(c): State<Console>, posted: Posted<Posted2>) -> PageResult<Response> {
    let draft = ProjectForm::from(posted.form);
    let result = match draft.fields(JsonMap::new()) {
        Ok(fields) => c.services.catalog.create_project(&posted.signed.who, fields).await,
        Err(e) => Err(e),
    };
    match result {
        Ok(p) => Ok(created(
            Redirect::to(&format!("/console/projects/{}", p.id)).into_response(),
            &p.id,
        )),
        Err(e) if status_of(&e).is_client_error() && !matches!(e, gantry_core::Error::Forbidden(_)) => {
            render_list(
                &c,
                &posted.signed,
                &ListParams::default(),
                &draft,
                Some(&Problem::of(&e)),
            )
            .await
        }
        Err(e) => Err(e.into()),
    }
}

/// `GET /console/projects/{id}/edit`.
async fn edit(State(c): State<Console>, signed: Signed, Path(id): Path<String>) -> PageResult<Response> {
    let id = ProjectId::from_string(id);
    let project = c.services.catalog.get_project(&signed.who, &id).await?;
    signed.who.require_admin()?;
    Ok(render_edit(&signed, &project, &ProjectForm::of(&project), None).into_response())
}

fn render_edit(signed: &Signed, project: &Project, draft: &ProjectForm, problem: Option<&Problem>) -> Markup {
    let body = html! {
        h1 { "Edit " (project.name) }
        (project_form(signed, &format!("/console/projects/{}", project.id), draft, problem, "Save"))
    };
    layout::page(
        signed,
        "Edit project",
        Nav::Project(&project.id, Section::Overview),
        body,
    )
}

/// `POST /console/projects/{id}`.
async fn update(State(c): State<Console>, Path(id): Path<String>, posted: Posted<Posted2>) -> PageResult<Response> {
    let id = ProjectId::from_string(id);
    let who = &posted.signed.who;
    let project = c.services.catalog.get_project(who, &id).await?;
    let draft = ProjectForm::from(posted.form);
    let result = match draft.fields(project.map_info.clone().unwrap_or_default()) {
        Ok(fields) => c.services.catalog.update_project(who, &id, fields).await,
        Err(e) => Err(e),
    };
    match result {
        Ok(_) => Ok(Redirect::to(&format!("/console/projects/{id}")).into_response()),
        Err(e) if matches!(e, gantry_core::Error::Invalid { .. } | gantry_core::Error::Duplicate(_)) => {
            let page = render_edit(&posted.signed, &project, &draft, Some(&Problem::of(&e)));
            Ok((status_of(&e), page).into_response())
        }
        Err(e) => Err(e.into()),
    }
}
