//! The device page's desired state: each desired value with what the device made of it
//! (pending, delivered, applied, rejected and why), replaced live as it changes, and for the
//! roles that may set desired values a form for the model's writable attributes.
//!
//! The form carries the document's version and is applied only at that version (the REST API's
//! `If-Match`), so an operator never overwrites unseen what another set meanwhile.

use std::collections::{BTreeMap, HashMap};

use axum::Router;
use axum::extract::{Path, State};
use axum::response::Response;
use axum::routing::post;
use gantry_core::desired::DesiredState;
use gantry_core::ids::DeviceId;
use gantry_core::principal::Principal;
use gantry_core::records::{Device, DeviceModel};
use gantry_core::{Error, Result};
use maud::{Markup, html};

use crate::Console;
use crate::form;
use crate::layout;
use crate::pages::badge;
use crate::pages::device::{ShowParams, render, value_text};
use crate::pages::device_control::{typed, typed_input};
use crate::pages::device_outcome::{Outcome, outcome_of};
use crate::session::{Posted, Signed};

pub fn routes() -> Router<Console> {
    Router::new().route("/devices/{id}/desired", post(set))
}

/// The desired values and, for who may set them, the form.
pub async fn section(
    c: &Console,
    signed: &Signed,
    device: &Device,
    model: &DeviceModel,
    outcome: &Outcome,
) -> Result<Markup> {
    let state = c.services.desired.get(&signed.who, &device.id).await?;
    let writable: Vec<_> = model
        .attributes_map
        .values()
        .filter(|a| a.readable.writable())
        .collect();
    let may_set = signed.who.require_desired_set(&device.project_id).is_ok() && !writable.is_empty();
    let problem = outcome.problem_of("desired");
    Ok(html! {
        section {
            h2 { "Desired state" }
            p.hint { "Values the device should hold; it is sent those not applied when they change and whenever it connects." }
            table.list.desired {
                thead { tr { th { "Attribute" } th { "Desired" } th { "Status" } th { "Set by" } th { span.sr { "Actions" } } } }
                tbody id="desired" sse-swap="desired" { (table_rows(signed, &state, may_set)) }
            }
            @if may_set {
                form.card method="post" action={ "/console/devices/" (device.id) "/desired" } {
                    (form::csrf(signed))
                    input type="hidden" name="version" value=(state.version);
                    h3 { "Set desired values" }
                    (form::general(problem))
                    @for a in &writable {
                        (typed_input(a.name.as_deref().unwrap_or(&a.code), &format!("attributes.{}", a.code), a.data_type, problem))
                    }
                    button.primary type="submit" { "Set desired" }
                }
            }
        }
    })
}

/// The rows of the desired values: what the device page's stream sends when they change.
pub async fn rows(c: &Console, signed: &Signed, device: &DeviceId) -> Result<Markup> {
    let record = c.services.catalog.get_device(&signed.who, device).await?;
    let state = c.services.desired.get(&signed.who, device).await?;
    let may_set = may_set(&signed.who, c, &record).await?;
    Ok(table_rows(signed, &state, may_set))
}

async fn may_set(who: &Principal, c: &Console, device: &Device) -> Result<bool> {
    if who.require_desired_set(&device.project_id).is_err() {
        return Ok(false);
    }
    let model = c.services.catalog.get_model(who, &device.model_id).await?;
    Ok(model.attributes_map.values().any(|a| a.readable.writable()))
}

fn table_rows(signed: &Signed, state: &DesiredState, may_set: bool) -> Markup {
    html! {
        @for (code, a) in &state.attributes {
            tr id={ "desired-" (code) } {
                th scope="row" data-label="Attribute" { code { (code) } }
                td data-label="Desired" { (value_text(&a.value)) " " small { "v" (a.version) } }
                td data-label="Status" class="desired-status" {
                    (badge(a.status.as_str()))
                    @if let Some(reason) = &a.reason { " " small { (reason) } }
                }
                td data-label="Set by" { (a.updated_by) " " small { (layout::time(Some(a.updated_time))) } }
                td {
                    @if may_set {
                        form.inline method="post" action={ "/console/devices/" (state.device_id) "/desired" } {
                            (form::csrf(signed))
                            input type="hidden" name="version" value=(state.version);
                            input type="hidden" name="remove" value=(code);
                            button.secondary type="submit" aria-label={ "Remove the desired value of " (code) } { "Remove" }
                        }
                    }
                }
            }
        }
        @if state.attributes.is_empty() { tr { td colspan="5" { "No desired values." } } }
    }
}

/// `POST /console/devices/{id}/desired`: sets the values given (`attributes.<code>`), or
/// removes `remove`, at the version the page showed.
async fn set(
    State(c): State<Console>,
    Path(id): Path<String>,
    posted: Posted<HashMap<String, String>>,
) -> crate::error::PageResult<Response> {
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
