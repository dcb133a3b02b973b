//! The device page's desired state: each desired value with what the device made of it
//! (pending, delivered, applied, rejected and why), replaced live as it changes, and for the
//! roles that may set desired values a form for the model's writable attributes.
//!
//! The form carries the document's version and is applied only at that version (the REST API's
//! `If-Match`), so an operator never overwrites unseen what another set meanwhile.

use gantry_core::Result;
use gantry_core::desired::DesiredState;
use gantry_core::ids::DeviceId;
use gantry_core::principal::Principal;
use gantry_core::records::{Device, DeviceModel};
use maud::{Markup, html};

use crate::Console;
use crate::form;
use crate::layout;
use crate::pages::device_control::typed_input;
use crate::pages::device_outcome::Outcome;
use crate::pages::{badge, value_text};
use crate::session::Signed;

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
