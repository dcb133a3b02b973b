//! The forms a device's page posts besides lock and token: a control, a new route, revoking a
//! route, desired values. Each answers with the device's page showing what it did.

use std::collections::{BTreeMap, HashMap};

use axum::Router;
use axum::extract::{Path, State};
use axum::response::Response;
use axum::routing::post;
use gantry_core::enums::SourceType;
use gantry_core::fields::RouteFields;
use gantry_core::ids::DeviceId;
use gantry_core::records::DeviceModel;
use gantry_core::{Error, Result};
use maud::html;
use serde::Deserialize;

use crate::Console;
use crate::error::PageResult;
use crate::layout;
use crate::pages::Empty;
use crate::pages::device::{ShowParams, render};
use crate::pages::device_control::{control_fields, rename, typed};
use crate::pages::device_outcome::outcome_of;
use crate::session::Posted;

pub fn routes() -> Router<Console> {
    Router::new()
        .route("/devices/{id}/control", post(send))
        .route("/devices/{id}/routes", post(create))
        .route("/devices/{id}/routes/{route}/revoke", post(revoke))
        .route("/devices/{id}/desired", post(set_desired))
}

/// `POST /console/devices/{id}/control`.
async fn send(
    State(c): State<Console>,
    Path(id): Path<String>,
    posted: Posted<HashMap<String, String>>,
) -> PageResult<Response> {
    let id = DeviceId::from_string(id);
    let device = c.services.catalog.get_device(&posted.signed.who, &id).await?;
    let model = c
        .services
        .catalog
        .get_model(&posted.signed.who, &device.model_id)
        .await?;
    let result = match control_fields(&model, &posted.form) {
        Ok((fields, names)) => c
            .services
            .control
            .send_control(&posted.signed.who, &id, fields)
            .await
            .map_err(|e| rename(e, &names)),
        Err(e) => Err(e),
    };
    let outcome = outcome_of(result, "control", |(message, _)| {
        html! { p { "Control sent (message " code { (message.meta.id) } ")." } }
    })?;
    render(&c, &posted.signed, &id, &ShowParams::default(), outcome).await
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RouteForm {
    #[serde(default)]
    source_type: String,
    need_resp: Option<String>,
    #[serde(default)]
    source_device_id: String,
    #[serde(default)]
    source_device_key: String,
}

/// `POST /console/devices/{id}/routes`.
async fn create(State(c): State<Console>, Path(id): Path<String>, posted: Posted<RouteForm>) -> PageResult<Response> {
    let id = DeviceId::from_string(id);
    let f = posted.form;
    let text = |s: String| Some(s.trim().to_owned()).filter(|s| !s.is_empty());
    let result = match SourceType::parse_field(&f.source_type, "sourceType") {
        Ok(kind) => {
            let fields = RouteFields {
                source_type: Some(kind),
                need_resp: f.need_resp.is_some(),
                source_device_id: text(f.source_device_id).map(DeviceId::from_string),
                source_device_key: text(f.source_device_key),
            };
            c.services.routes.create_route(&posted.signed.who, &id, fields).await
        }
        Err(e) => Err(e),
    };
    let new_id = result.as_ref().ok().map(|r| r.id.clone());
    let outcome = outcome_of(result, "routes", |route| {
        html! {
            p { "Route created; it expires " (layout::when(route.expired_time)) "." }
            @if let Some(role) = &route.temporary_role {
                p { "Its temporary identity (the password is shown once here):" }
                dl.facts {
                    dt { "Host" } dd { (role.host) ":" (role.port) (if role.ssl_enable { " (TLS)" } else { "" }) }
                    dt { "Client id" } dd { code { (role.client_id) } }
                    dt { "Username" } dd { code { (role.username) } }
                    dt { "Password" } dd { code.token { (role.password.as_deref().unwrap_or_default()) } }
                    dt { "Publish to" } dd { code { (route.route.forward_topic) } }
                    dt { "Acks on" } dd { code { (route.route.ack_topic) } }
                }
            }
        }
    })?;
    let page = render(&c, &posted.signed, &id, &ShowParams::default(), outcome).await?;
    Ok(match new_id {
        Some(new) => crate::audit::created(page, new),
        None => page,
    })
}

/// `POST /console/devices/{id}/routes/{route}/revoke`.
async fn revoke(
    State(c): State<Console>,
    Path((id, route)): Path<(String, String)>,
    posted: Posted<Empty>,
) -> PageResult<Response> {
    let id = DeviceId::from_string(id);
    let result = c.services.routes.revoke(&posted.signed.who, &route).await;
    let outcome = outcome_of(result, "routes", |_| html! { "Route revoked." })?;
    render(&c, &posted.signed, &id, &ShowParams::default(), outcome).await
}

/// `POST /console/devices/{id}/desired`: sets the values given (`attributes.<code>`), or
/// removes `remove`, at the version the page showed.
async fn set_desired(
    State(c): State<Console>,
    Path(id): Path<String>,
    posted: Posted<HashMap<String, String>>,
) -> PageResult<Response> {
    let id = DeviceId::from_string(id);
    let who = &posted.signed.who;
    let device = c.services.catalog.get_device(who, &id).await?;
    let model = c.services.catalog.get_model(who, &device.model_id).await?;
    let result = match changes(&model, &posted.form) {
        Ok((changes, version)) => c.services.desired.patch(who, &id, changes, version).await,
        Err(e) => Err(e),
    };
    let outcome = outcome_of(result, "desired", |state| {
        html! { p { "Desired state saved (version " (state.version) ")." } }
    })?;
    render(&c, &posted.signed, &id, &ShowParams::default(), outcome).await
}

/// Desired values to set (`Some`) or remove (`None`), by attribute code.
type Changes = BTreeMap<String, Option<serde_json::Value>>;

/// The changes a form asks for, typed against the model, and the version it was made at.
fn changes(model: &DeviceModel, form: &HashMap<String, String>) -> Result<(Changes, Option<i64>)> {
    let version = match form.get("version").map(|v| v.trim()) {
        None | Some("") => None,
        Some(v) => Some(
            v.parse()
                .map_err(|_| Error::invalid("version", "is not a whole number"))?,
        ),
    };
    let mut changes = BTreeMap::new();
    if let Some(code) = form.get("remove") {
        changes.insert(code.clone(), None);
    }
    for a in model.attributes_map.values().filter(|a| a.readable.writable()) {
        let name = format!("attributes.{}", a.code);
        if let Some(text) = form.get(&name).filter(|t| !t.trim().is_empty()) {
            changes.insert(a.code.clone(), Some(typed(&name, a.data_type, text)?));
        }
    }
    if changes.is_empty() {
        return Err(Error::invalid("attributes", "give a value to at least one attribute"));
    }
    Ok((changes, version))
}
