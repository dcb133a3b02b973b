//! The device page's control part: forms generated from the model (writable attributes and each
//! action with its parameters, typed inputs, needack) and the device's event logs, which the
//! page's stream replaces as they change (`processing`, then `completed` or `exception`).

use std::collections::HashMap;

use gantry_core::enums::{DataType, SortOrder};
use gantry_core::fields::ControlFields;
use gantry_core::ids::DeviceId;
use gantry_core::message::{Payload, PayloadAction, PayloadAttribute};
use gantry_core::paging::PageRequest;
use gantry_core::principal::Principal;
use gantry_core::query::{EventLogQuery, EventLogSort};
use gantry_core::records::{Device, DeviceModel};
use gantry_core::{Error, Result};
use maud::{Markup, html};

use crate::Console;
use crate::error::PageResult;
use crate::form::{self, Problem};
use crate::layout;
use crate::pages::badge;
use crate::pages::device_outcome::Outcome;
use crate::session::Signed;

/// The control forms and the event logs.
pub async fn section(
    c: &Console,
    signed: &Signed,
    device: &Device,
    model: &DeviceModel,
    outcome: &Outcome,
) -> PageResult<Markup> {
    let rows = event_log_rows(c, &signed.who, &device.id).await?;
    let problem = outcome.problem_of("control");
    let writable: Vec<_> = model
        .attributes_map
        .values()
        .filter(|a| a.readable.writable())
        .collect();
    let action_url = format!("/console/devices/{}/control", device.id);
    Ok(html! {
        section {
            h2 { "Control" }
            (form::general(problem))
            @if !writable.is_empty() {
                form.card method="post" action=(action_url) {
                    (form::csrf(signed))
                    input type="hidden" name="kind" value="attrs";
                    h3 { "Set attributes" }
                    @for a in &writable {
                        (typed_input(a.name.as_deref().unwrap_or(&a.code), &format!("attr.{}", a.code), a.data_type, problem))
                    }
                    (form::checkbox("Wait for the device's ack (needack)", "needack", true))
                    button.primary type="submit" { "Send" }
                }
            }
            @for action in model.actions_map.values() {
                form.card method="post" action=(action_url) {
                    (form::csrf(signed))
                    input type="hidden" name="kind" value="action";
                    input type="hidden" name="action" value=(action.code);
                    h3 { "Action " (action.name.as_deref().unwrap_or(&action.code)) }
                    @for p in action.params_map.iter().flat_map(|m| m.values()) {
                        (typed_input(&format!("{}{}", p.name.as_deref().unwrap_or(&p.code), if p.required { " (required)" } else { "" }),
                            &format!("param.{}.{}", action.code, p.code), p.data_type, problem))
                    }
                    (form::checkbox("Wait for the device's ack (needack)", &format!("needack-{}", action.code), true))
                    button.primary type="submit" { "Run " (action.code) }
                }
            }
            @if writable.is_empty() && model.actions_map.is_empty() {
                p.empty { "The model has no writable attribute and no action." }
            }
            h3 { "Event logs" }
            table.list {
                thead { tr { th { "Sent" } th { "Kind" } th { "Status" } th { "Message" } } }
                tbody id="eventlogs" sse-swap="eventlogs" { (rows) }
            }
        }
    })
}

/// An input for a value of `data_type`: a number, a yes/no choice, or text.
pub fn typed_input(label: &str, name: &str, data_type: DataType, problem: Option<&Problem>) -> Markup {
    match data_type {
        DataType::Boolean => form::select(
            label,
            name,
            &[("", "—"), ("true", "true"), ("false", "false")],
            "",
            problem,
        ),
        DataType::Integer => form::input(label, name, "number", "", problem),
        DataType::Float => form::input(label, name, "text", "", problem),
        DataType::String => form::input(label, name, "text", "", problem),
    }
}

/// The rows of the device's latest event logs.
pub async fn event_log_rows(c: &Console, who: &Principal, device: &DeviceId) -> Result<Markup> {
    let record = c.services.catalog.get_device(who, device).await?;
    let query = EventLogQuery {
        project: record.project_id.clone(),
        device: Some(device.clone()),
        event_id: None,
        context_id: None,
        sort_by: EventLogSort::CreatedTime,
        sort_order: SortOrder::Desc,
    };
    let logs = c
        .services
        .control
        .list_logs(who, query, PageRequest::parse(None, Some(10), 10)?)
        .await?;
    Ok(html! {
        @for log in &logs.items {
            tr id={ "log-" (log.event_id) } {
                td data-label="Sent" { (layout::time(Some(log.created_time))) }
                td data-label="Kind" { (log.classification.as_str()) }
                td data-label="Status" class="log-status" { (badge(log.status.as_str())) }
                td data-label="Message" { code.json { (summary(&log.event_data)) } }
            }
        }
        @if logs.items.is_empty() { tr { td colspan="4" { "No event logs yet." } } }
    })
}

/// The payload of a logged message, short.
fn summary(data: &serde_json::Value) -> String {
    let payload = data.get("payload").unwrap_or(data);
    let mut text = payload.to_string();
    if text.len() > 160 {
        let cut = (0..=157).rev().find(|&i| text.is_char_boundary(i)).unwrap_or(0);
        text.truncate(cut);
        text.push('…');
    }
    text
}

/// The control the form asks for, and the input name of each payload entry (for errors).
pub fn control_fields(model: &DeviceModel, form: &HashMap<String, String>) -> Result<(ControlFields, Vec<String>)> {
    let mut payload = Payload::default();
    let mut names = Vec::new();
    let needack;
    if form.get("kind").map(String::as_str) == Some("action") {
        let code = form.get("action").cloned().unwrap_or_default();
        let action = model
            .actions_map
            .get(&code)
            .ok_or_else(|| Error::invalid("action", "is not an action of the model"))?;
        let mut params = serde_json::Map::new();
        for p in action.params_map.iter().flat_map(|m| m.values()) {
            let name = format!("param.{code}.{}", p.code);
            if let Some(text) = form.get(&name).filter(|t| !t.trim().is_empty()) {
                params.insert(p.code.clone(), typed(&name, p.data_type, text)?);
            }
        }
        needack = form.contains_key(&format!("needack-{code}"));
        names.push(format!("param.{code}"));
        payload.actions.push(PayloadAction { code, params });
    } else {
        for a in model.attributes_map.values().filter(|a| a.readable.writable()) {
            let name = format!("attr.{}", a.code);
            if let Some(text) = form.get(&name).filter(|t| !t.trim().is_empty()) {
                payload.attrs.push(PayloadAttribute {
                    code: a.code.clone(),
                    value: typed(&name, a.data_type, text)?,
                    channel: a.channel,
                });
                names.push(name);
            }
        }
        if payload.attrs.is_empty() {
            return Err(Error::invalid("payload", "give a value to at least one attribute"));
        }
        needack = form.contains_key("needack");
    }
    let fields = ControlFields {
        needack,
        payload: Some(payload),
        ..Default::default()
    };
    Ok((fields, names))
}

/// The form's text as a JSON value of `data_type`; a refusal names the input.
pub fn typed(name: &str, data_type: DataType, text: &str) -> Result<serde_json::Value> {
    let text = text.trim();
    let value = match data_type {
        DataType::Integer => text.parse::<i64>().ok().map(serde_json::Value::from),
        DataType::Float => text
            .parse::<f64>()
            .ok()
            .and_then(|f| serde_json::Number::from_f64(f).map(serde_json::Value::Number)),
        DataType::Boolean => text.parse::<bool>().ok().map(serde_json::Value::from),
        DataType::String => Some(serde_json::Value::from(text)),
    };
    value.ok_or_else(|| {
        Error::invalid(
            name,
            format!(
                "is not a{} {}",
                if data_type == DataType::Integer { "n" } else { "" },
                data_type.as_str()
            ),
        )
    })
}

/// A service's refusal of `payload.attrs[i]...` or `payload.actions[0].params.p`, renamed to the
/// input that holds the value.
pub fn rename(e: Error, names: &[String]) -> Error {
    let Error::Invalid { field, reason } = e else { return e };
    let renamed = if let Some(rest) = field.strip_prefix("payload.actions[0].params.") {
        format!("{}.{rest}", names.first().map_or("param", String::as_str))
    } else if let Some(i) = field
        .strip_prefix("payload.attrs[")
        .and_then(|r| r.split(']').next())
        .and_then(|i| i.parse::<usize>().ok())
    {
        names.get(i).cloned().unwrap_or(field)
    } else {
        field
    };
    Error::Invalid { field: renamed, reason }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn typed_values_and_their_refusals() {
        assert_eq!(
            typed("attr.t", DataType::Integer, " 42 ").unwrap(),
            serde_json::json!(42)
        );
        assert_eq!(typed("attr.t", DataType::Float, "1.5").unwrap(), serde_json::json!(1.5));
        assert_eq!(
            typed("attr.t", DataType::Boolean, "true").unwrap(),
            serde_json::json!(true)
        );
        let Err(Error::Invalid { field, reason }) = typed("attr.t", DataType::Integer, "4.2") else {
            panic!()
        };
        assert_eq!((field.as_str(), reason.as_str()), ("attr.t", "is not an Integer"));
    }

    #[test]
    fn refusals_name_the_input() {
        let names = vec!["attr.a".to_owned(), "attr.b".to_owned()];
        let e = rename(Error::invalid("payload.attrs[1].value", "bad"), &names);
        assert!(matches!(e, Error::Invalid { field, .. } if field == "attr.b"));
        let names = vec!["param.slew".to_owned()];
        let e = rename(Error::invalid("payload.actions[0].params.speed", "bad"), &names);
        assert!(matches!(e, Error::Invalid { field, .. } if field == "param.slew.speed"));
    }
}
