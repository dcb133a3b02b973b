//! The device page's routes: the list, a form to create one (its temporary identity shown once)
//! and revoking.

use axum::Router;
use axum::extract::{Path, State};
use axum::response::Response;
use axum::routing::post;
use gantry_core::enums::SourceType;
use gantry_core::fields::RouteFields;
use gantry_core::ids::DeviceId;
use gantry_core::paging::PageRequest;
use gantry_core::records::Device;
use maud::{Markup, html};
use serde::Deserialize;

use crate::Console;
use crate::error::PageResult;
use crate::form;
use crate::layout;
use crate::pages::device::{Empty, Outcome, ShowParams, outcome_of, render};
use crate::session::{Posted, Signed};

pub fn routes() -> Router<Console> {
    Router::new()
        .route("/devices/{id}/routes", post(create))
        .route("/devices/{id}/routes/{route}/revoke", post(revoke))
}

/// The routes of the device and the form for a new one.
pub async fn section(c: &Console, signed: &Signed, device: &Device, outcome: &Outcome) -> PageResult<Markup> {
    let routes = c.services.routes.list(&signed.who, &device.id, PageRequest::parse(None, Some(20), 20)?).await?;
    let problem = outcome.problem_of("routes");
    let kinds = [("WEB", "WEB (a web page, over WebSocket)"), ("APP", "APP (an application, over TCP)"), ("DEVICE", "DEVICE (another device)")];
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
    render(&c, &posted.signed, &id, &ShowParams::default(), outcome).await
}

/// `POST /console/devices/{id}/routes/{route}/revoke`.
async fn revoke(State(c): State<Console>, Path((id, route)): Path<(String, String)>, posted: Posted<Empty>) -> PageResult<Response> {
    let id = DeviceId::from_string(id);
    let result = c.services.routes.revoke(&posted.signed.who, &route).await;
    let outcome = outcome_of(result, "routes", |_| html! { "Route revoked." })?;
    render(&c, &posted.signed, &id, &ShowParams::default(), outcome).await
}
