//! The device page's routes: the list, a form to create one (its temporary identity shown once)
//! and revoking.

use gantry_core::paging::PageRequest;
use gantry_core::records::Device;
use maud::{Markup, html};

use crate::Console;
use crate::error::PageResult;
use crate::form;
use crate::layout;
use crate::pages::device_outcome::Outcome;
use crate::session::Signed;

/// The routes of the device and the form for a new one.
pub async fn section(c: &Console, signed: &Signed, device: &Device, outcome: &Outcome) -> PageResult<Markup> {
    let routes = c
        .services
        .routes
        .list(&signed.who, &device.id, PageRequest::parse(None, Some(20), 20)?)
        .await?;
    let problem = outcome.problem_of("routes");
    let kinds = [
        ("WEB", "WEB (a web page, over WebSocket)"),
        ("APP", "APP (an application, over TCP)"),
        ("DEVICE", "DEVICE (another device)"),
    ];
    Ok(html! {
        section {
            h2 { "Routes" }
            table.list {
                thead { tr { th { "Source" } th { "Forward topic" } th { "Expires" } th { span.sr { "Actions" } } } }
                tbody {
                    @for r in &routes.items {
                        tr {
                            td data-label="Source" { (r.source_type.as_str()) }
                            td data-label="Forward topic" { code { (r.route.forward_topic) } }
                            td data-label="Expires" { (layout::time(Some(r.expired_time))) }
                            td { (form::button(signed, &format!("/console/devices/{}/routes/{}/revoke", device.id, r.id), "Revoke", "danger")) }
                        }
                    }
                }
            }
            @if routes.items.is_empty() { p.empty { "No routes." } }
            form.card method="post" action={ "/console/devices/" (device.id) "/routes" } {
                (form::csrf(signed))
                (form::general(problem))
                (form::select("Source type", "sourceType", &kinds, "WEB", problem))
                (form::checkbox("Forward the device's acks (needResp)", "needResp", true))
                (form::input("Source device id (DEVICE only)", "sourceDeviceId", "text", "", problem))
                (form::input("Source device access token (DEVICE only)", "sourceDeviceKey", "password", "", problem))
                button.primary type="submit" { "Create route" }
            }
        }
    })
}
