//! Device models: the list, creating one, and a model's page where its attributes and actions
//! (with their parameters) are added and removed. Every change goes through the catalog's
//! `update_model` with the whole model, so its rules apply as for the REST API. The page's
//! alarm rules are drawn and read by `model_rules.rs`; their forms post here and go through
//! the alarm service, as the REST API's do.

use std::collections::BTreeMap;

use axum::Router;
use axum::extract::{Path, State};
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::{get, post};
use gantry_core::alarm_rule::AlarmRuleView;
use gantry_core::enums::{Channel, DataType, DeviceType, Readable};
use gantry_core::fields::{ActionFields, AttributeFields, ModelFields, ParamFields};
use gantry_core::ids::{AlarmRuleId, ModelId};
use gantry_core::paging::PageRequest;
use gantry_core::records::DeviceModel;
use gantry_core::{Error, Result};
use maud::{Markup, html};
use serde::Deserialize;

use crate::Console;
use crate::audit::created;
use crate::error::{PageResult, status_of};
use crate::form::{self, Problem};
use crate::layout::{self, Nav};
use crate::pages::model_rules::{self, RuleForm};
use crate::session::{Posted, Signed};

pub fn routes() -> Router<Console> {
    Router::new()
        .route("/models", get(list).post(create))
        .route("/models/{id}", get(show))
        .route("/models/{id}/attributes", post(add_attribute))
        .route("/models/{id}/actions", post(add_action))
        .route("/models/{id}/remove", post(remove))
        .route("/models/{id}/alarmRules", post(create_rule))
        .route("/alarmRules/{id}", post(set_enabled))
        .route("/alarmRules/{id}/delete", post(delete_rule))
}

/// `GET /console/models`.
async fn list(State(c): State<Console>, signed: Signed) -> PageResult<Response> {
    render_list(&c, &signed, &NewModel::default(), None).await
}

async fn render_list(
    c: &Console,
    signed: &Signed,
    draft: &NewModel,
    problem: Option<&Problem>,
) -> PageResult<Response> {
    let models = c
        .services
        .catalog
        .list_models(&signed.who, PageRequest::parse(None, Some(200), 200)?)
        .await?;
    let types: Vec<(&str, &str)> = DeviceType::ALL.iter().map(|t| (t.as_str(), t.as_str())).collect();
    let body = html! {
        h1 { "Models" }
        table.list {
            thead { tr { th { "Name" } th { "Type" } th { "Attributes" } th { "Actions" } } }
            tbody {
                @for m in &models.items {
                    tr {
                        td data-label="Name" { a href={ "/console/models/" (m.id) } { (m.name) } }
                        td data-label="Type" { (m.device_type.as_str()) }
                        td data-label="Attributes" { (m.attributes_map.len()) }
                        td data-label="Actions" { (m.actions_map.len()) }
                    }
                }
            }
        }
        @if models.items.is_empty() { p.empty { "No models yet." } }
        @if signed.who.require_admin().is_ok() {
            h2 id="new" { "New model" }
            form.card method="post" action="/console/models" {
                (form::csrf(signed))
                (form::general(problem))
                (form::input("Name", "name", "text", &draft.name, problem))
                (form::select("Device type", "deviceType", &types, if draft.device_type.is_empty() { "ROOT" } else { &draft.device_type }, problem))
                (form::input("Description", "description", "text", &draft.description, problem))
                p.hint { "A model needs an attribute or an action: its first attribute (more, and actions, on its page)." }
                (attribute_fields(&draft.attribute, problem))
                button.primary type="submit" { "Create model" }
            }
        }
    };
    let status = problem.map(|_| axum::http::StatusCode::BAD_REQUEST).unwrap_or_default();
    Ok((status, layout::page(signed, "Models", Nav::Models, body)).into_response())
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase")]
pub struct NewModel {
    #[serde(default)]
    name: String,
    #[serde(default)]
    device_type: String,
    #[serde(default)]
    description: String,
    #[serde(flatten)]
    attribute: AttributeForm,
}

/// `POST /console/models`.
async fn create(State(c): State<Console>, posted: Posted<NewModel>) -> PageResult<Response> {
    let draft = posted.form;
    let fields = DeviceType::parse_field(&draft.device_type, "deviceType").and_then(|t| {
        let mut fields = ModelFields {
            name: Some(draft.name.trim().to_owned()),
            device_type: Some(t),
            description: Some(draft.description.trim().to_owned()).filter(|d| !d.is_empty()),
            ..Default::default()
        };
        add(&mut fields, &draft.attribute)?;
        Ok(fields)
    });
    let result = match fields {
        Ok(fields) => c.services.catalog.create_model(&posted.signed.who, fields).await,
        Err(e) => Err(e),
    };
    match result {
        Ok(m) => Ok(created(
            Redirect::to(&format!("/console/models/{}", m.id)).into_response(),
            &m.id,
        )),
        Err(e) if refusal(&e) => render_list(&c, &posted.signed, &draft, Some(&Problem::of(&e))).await,
        Err(e) => Err(e.into()),
    }
}

/// A refusal shown at its form rather than as an error page.
fn refusal(e: &Error) -> bool {
    matches!(
        e,
        Error::Invalid { .. } | Error::Duplicate(_) | Error::Conflict(_) | Error::LimitReached { .. }
    )
}

/// `GET /console/models/{id}`.
async fn show(State(c): State<Console>, signed: Signed, Path(id): Path<String>) -> PageResult<Response> {
    let model = c
        .services
        .catalog
        .get_model(&signed.who, &ModelId::from_string(id))
        .await?;
    Ok(render(&c, &signed, &model, None, &RuleForm::default())
        .await?
        .into_response())
}

/// The model's page with its alarm rules; `problem` is a refusal of one of its forms, shown at
/// that form (`attribute`, `action`, `remove`, `rule`, `rules`), `draft` the rule form's values.
async fn render(
    c: &Console,
    signed: &Signed,
    model: &DeviceModel,
    problem: Option<(&str, &Problem)>,
    draft: &RuleForm,
) -> PageResult<Markup> {
    let rules = c.services.alarms.list_rules(&signed.who, &model.id).await?;
    let rules = super::model_rules::section(signed, model, &rules, draft, problem);
    Ok(markup(signed, model, problem, rules))
}

fn markup(signed: &Signed, model: &DeviceModel, problem: Option<(&str, &Problem)>, rules: Markup) -> Markup {
    let admin = signed.who.require_admin().is_ok();
    let at = |form: &str| problem.filter(|(f, _)| *f == form).map(|(_, p)| p);
    let remove = |kind: &str, code: &str| {
        html! {
            form.inline method="post" action={ "/console/models/" (model.id) "/remove" } {
                (form::csrf(signed))
                input type="hidden" name="kind" value=(kind);
                input type="hidden" name="code" value=(code);
                button.danger type="submit" aria-label={ "Remove " (code) } { "Remove" }
            }
        }
    };
    let body = html! {
        p.crumbs { a href="/console/models" { "Models" } " / " }
        h1 { (model.name) }
        p { (model.device_type.as_str()) " " (model.description.as_deref().unwrap_or_default()) }
        (form::general(at("remove")))
        h2 { "Attributes" }
        table.list {
            thead { tr { th { "Code" } th { "Name" } th { "Type" } th { "Readable" } th { "Channel" } th { span.sr { "Actions" } } } }
            tbody {
                @for a in model.attributes_map.values() {
                    tr {
                        td data-label="Code" { code { (a.code) } }
                        td data-label="Name" { (a.name.as_deref().unwrap_or_default()) }
                        td data-label="Type" { (a.data_type.as_str()) }
                        td data-label="Readable" { (a.readable.as_str()) }
                        td data-label="Channel" { (a.channel.as_str()) }
                        td { @if admin { (remove("attribute", &a.code)) } }
                    }
                }
            }
        }
        @if admin { (attribute_form(signed, model, at("attribute"))) }
        h2 { "Actions" }
        table.list {
            thead { tr { th { "Code" } th { "Name" } th { "Parameters" } th { span.sr { "Actions" } } } }
            tbody {
                @for a in model.actions_map.values() {
                    tr {
                        td data-label="Code" { code { (a.code) } }
                        td data-label="Name" { (a.name.as_deref().unwrap_or_default()) }
                        td data-label="Parameters" {
                            @for p in a.params_map.iter().flat_map(|m| m.values()) {
                                code { (p.code) ":" (p.data_type.as_str()) @if p.required { " (required)" } } " "
                            }
                        }
                        td { @if admin { (remove("action", &a.code)) } }
                    }
                }
            }
        }
        @if admin { (action_form(signed, model, at("action"))) }
        (rules)
    };
    layout::page(signed, &model.name, Nav::Models, body)
}

fn attribute_form(signed: &Signed, model: &DeviceModel, problem: Option<&Problem>) -> Markup {
    html! {
        form.card method="post" action={ "/console/models/" (model.id) "/attributes" } {
            h3 { "Add an attribute" }
            (form::csrf(signed))
            (form::general(problem))
            (attribute_fields(&AttributeForm::default(), problem))
            button.primary type="submit" { "Add attribute" }
        }
    }
}

/// The inputs of one attribute.
fn attribute_fields(draft: &AttributeForm, problem: Option<&Problem>) -> Markup {
    let types: Vec<(&str, &str)> = DataType::ALL.iter().map(|t| (t.as_str(), t.as_str())).collect();
    let readable = [
        ("R", "R (device to server)"),
        ("RW", "RW (both ways)"),
        ("W", "W (server to device)"),
    ];
    let channels = [
        ("m", "m (measurement)"),
        ("w", "w (alarm)"),
        ("g", "g (position, a String \"lat,lng\")"),
    ];
    let or = |v: &str, default: &'static str| if v.is_empty() { default.to_owned() } else { v.to_owned() };
    html! {
        (form::input("Attribute code", "code", "text", &draft.code, problem))
        (form::input("Attribute name", "attributeName", "text", &draft.name, problem))
        (form::select("Data type", "dataType", &types, &or(&draft.data_type, "Float"), problem))
        (form::select("Readable", "readable", &readable, &or(&draft.readable, "R"), problem))
        (form::select("Channel", "channel", &channels, &or(&draft.channel, "m"), problem))
    }
}

/// Adds the attribute of `f` to `fields`; refusals name the form's inputs.
fn add(fields: &mut ModelFields, f: &AttributeForm) -> Result<()> {
    let code = required("code", &f.code)?;
    gantry_core::names::Code::parse("code", &code)?;
    let attribute = AttributeFields {
        name: Some(f.name.trim().to_owned()).filter(|n| !n.is_empty()),
        code: Some(code.clone()),
        data_type: DataType::parse_field(&f.data_type, "dataType")?,
        description: None,
        readable: Some(Readable::parse_field(&f.readable, "readable")?),
        channel: Some(Channel::parse_field(&f.channel, "channel")?),
    };
    let map = fields.attributes_map.get_or_insert_default();
    if map.insert(code.clone(), attribute).is_some() {
        return Err(Error::invalid(
            "code",
            format!("`{code}` is an attribute of the model already"),
        ));
    }
    Ok(())
}

fn action_form(signed: &Signed, model: &DeviceModel, problem: Option<&Problem>) -> Markup {
    html! {
        form.card method="post" action={ "/console/models/" (model.id) "/actions" } {
            h3 { "Add an action" }
            (form::csrf(signed))
            (form::general(problem))
            (form::input("Action code", "actionCode", "text", "", problem))
            (form::input("Action name", "actionName", "text", "", problem))
            (form::textarea("Parameters: one a line, code:Type, and :required when it must be given (speed:Integer:required)", "params", "", problem))
            button.primary type="submit" { "Add action" }
        }
    }
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase")]
pub struct AttributeForm {
    #[serde(default)]
    code: String,
    #[serde(default, rename = "attributeName")]
    name: String,
    #[serde(default)]
    data_type: String,
    #[serde(default)]
    readable: String,
    #[serde(default)]
    channel: String,
}

/// `POST /console/models/{id}/attributes`.
async fn add_attribute(
    State(c): State<Console>,
    Path(id): Path<String>,
    posted: Posted<AttributeForm>,
) -> PageResult<Response> {
    let f = posted.form;
    apply(&c, &posted.signed, id, "attribute", |fields| add(fields, &f)).await
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ActionForm {
    #[serde(default)]
    action_code: String,
    #[serde(default)]
    action_name: String,
    #[serde(default)]
    params: String,
}

/// `POST /console/models/{id}/actions`.
async fn add_action(
    State(c): State<Console>,
    Path(id): Path<String>,
    posted: Posted<ActionForm>,
) -> PageResult<Response> {
    let f = posted.form;
    let change = |fields: &mut ModelFields| -> Result<()> {
        let code = required("actionCode", &f.action_code)?;
        gantry_core::names::Code::parse("actionCode", &code)?;
        let action = ActionFields {
            name: Some(f.action_name.trim().to_owned()).filter(|n| !n.is_empty()),
            code: Some(code.clone()),
            description: None,
            params_map: Some(parse_params(&f.params)?),
        };
        let map = fields.actions_map.get_or_insert_default();
        if map.insert(code.clone(), action).is_some() {
            return Err(Error::invalid(
                "actionCode",
                format!("`{code}` is an action of the model already"),
            ));
        }
        Ok(())
    };
    apply(&c, &posted.signed, id, "action", change).await
}

#[derive(Deserialize)]
pub struct RemoveForm {
    kind: String,
    code: String,
}

/// `POST /console/models/{id}/remove`: an attribute or an action.
async fn remove(State(c): State<Console>, Path(id): Path<String>, posted: Posted<RemoveForm>) -> PageResult<Response> {
    let f = posted.form;
    let change = |fields: &mut ModelFields| -> Result<()> {
        let removed = match f.kind.as_str() {
            "attribute" => fields.attributes_map.get_or_insert_default().remove(&f.code).is_some(),
            _ => fields.actions_map.get_or_insert_default().remove(&f.code).is_some(),
        };
        match removed {
            true => Ok(()),
            false => Err(Error::invalid(
                "code",
                format!("the model has no {} `{}`", f.kind, f.code),
            )),
        }
    };
    apply(&c, &posted.signed, id, "remove", change).await
}

/// Reads the model, applies `change` to its fields and stores it; a refusal is shown at `form`.
async fn apply(
    c: &Console,
    signed: &Signed,
    id: String,
    form: &str,
    change: impl FnOnce(&mut ModelFields) -> Result<()>,
) -> PageResult<Response> {
    let id = ModelId::from_string(id);
    let model = c.services.catalog.get_model(&signed.who, &id).await?;
    let mut fields = fields_of(&model);
    let result = match change(&mut fields) {
        Ok(()) => c.services.catalog.update_model(&signed.who, &id, fields).await,
        Err(e) => Err(e),
    };
    match result {
        Ok(m) => Ok(Redirect::to(&format!("/console/models/{}", m.id)).into_response()),
        Err(e) if refusal(&e) => {
            let problem = Problem::of(&e);
            let page = render(c, signed, &model, Some((form, &problem)), &RuleForm::default()).await?;
            Ok((status_of(&e), page).into_response())
        }
        Err(e) => Err(e.into()),
    }
}

/// `POST /console/models/{id}/alarmRules`.
async fn create_rule(
    State(c): State<Console>,
    Path(id): Path<String>,
    posted: Posted<RuleForm>,
) -> PageResult<Response> {
    let (signed, draft) = (&posted.signed, &posted.form);
    let model = c
        .services
        .catalog
        .get_model(&signed.who, &ModelId::from_string(id))
        .await?;
    let result = match draft.fields(&model) {
        Ok(fields) => c.services.alarms.create_rule(&signed.who, &model.id, fields).await,
        Err(e) => Err(e),
    };
    match result.map_err(model_rules::at_input) {
        Ok(rule) => {
            let to = format!("/console/models/{}#rule-{}", model.id, rule.id);
            Ok(created(Redirect::to(&to).into_response(), &rule.id))
        }
        Err(e) if refusal(&e) => {
            let page = render(&c, signed, &model, Some(("rule", &Problem::of(&e))), draft).await?;
            Ok((status_of(&e), page).into_response())
        }
        Err(e) => Err(e.into()),
    }
}

#[derive(Deserialize)]
pub struct EnabledForm {
    enabled: String,
}

/// `POST /console/alarmRules/{id}`: enables or disables the rule (the API's PUT with the rule as
/// it is but `enabled`); disabling clears its open alarms.
async fn set_enabled(
    State(c): State<Console>,
    Path(id): Path<String>,
    posted: Posted<EnabledForm>,
) -> PageResult<Response> {
    let who = &posted.signed.who;
    let rule = c.services.alarms.get_rule(who, &AlarmRuleId::from_string(id)).await?;
    let mut fields = model_rules::fields_of(&rule);
    fields.enabled = Some(posted.form.enabled == "true");
    let result = c.services.alarms.update_rule(who, &rule.id, fields).await;
    back_to_model(&c, &posted.signed, &rule, result.map(|_| ())).await
}

/// `POST /console/alarmRules/{id}/delete`: deletes the rule and clears its open alarms.
async fn delete_rule(
    State(c): State<Console>,
    Path(id): Path<String>,
    posted: Posted<super::Empty>,
) -> PageResult<Response> {
    let who = &posted.signed.who;
    let rule = c.services.alarms.get_rule(who, &AlarmRuleId::from_string(id)).await?;
    let result = c.services.alarms.delete_rule(who, &rule.id).await;
    back_to_model(&c, &posted.signed, &rule, result).await
}

/// The model's page after a change of `rule`, or with the refusal at its rules.
async fn back_to_model(c: &Console, signed: &Signed, rule: &AlarmRuleView, result: Result<()>) -> PageResult<Response> {
    match result {
        Ok(()) => Ok(Redirect::to(&format!("/console/models/{}#alarm-rules", rule.model_id)).into_response()),
        Err(e) if refusal(&e) => {
            let model = c.services.catalog.get_model(&signed.who, &rule.model_id).await?;
            let problem = Problem::of(&e);
            let page = render(c, signed, &model, Some(("rules", &problem)), &RuleForm::default()).await?;
            Ok((status_of(&e), page).into_response())
        }
        Err(e) => Err(e.into()),
    }
}

fn required(field: &str, text: &str) -> Result<String> {
    Some(text.trim().to_owned())
        .filter(|t| !t.is_empty())
        .ok_or_else(|| Error::invalid(field, "is required"))
}

/// `code:Type[:required]` a line.
fn parse_params(text: &str) -> Result<BTreeMap<String, ParamFields>> {
    let mut params = BTreeMap::new();
    for line in text.lines().map(str::trim).filter(|l| !l.is_empty()) {
        let mut parts = line.split(':').map(str::trim);
        let code = parts.next().unwrap_or_default().to_owned();
        let data_type = DataType::parse_field(parts.next().unwrap_or_default(), "params")?;
        let required = match parts.next() {
            None => false,
            Some("required") => true,
            Some(other) => {
                return Err(Error::invalid(
                    "params",
                    format!("`{other}` in `{line}`: write required or nothing"),
                ));
            }
        };
        let param = ParamFields {
            name: None,
            code: Some(code.clone()),
            description: None,
            required: Some(required),
            data_type,
        };
        params.insert(code, param);
    }
    Ok(params)
}

/// The model's stored values as an update's fields.
fn fields_of(model: &DeviceModel) -> ModelFields {
    let attributes = model.attributes_map.iter().map(|(k, a)| {
        let fields = AttributeFields {
            name: a.name.clone(),
            code: Some(a.code.clone()),
            data_type: a.data_type,
            description: a.description.clone(),
            readable: Some(a.readable),
            channel: Some(a.channel),
        };
        (k.clone(), fields)
    });
    let actions = model.actions_map.iter().map(|(k, a)| {
        let params = a.params_map.as_ref().map(|m| {
            m.iter()
                .map(|(k, p)| {
                    let fields = ParamFields {
                        name: p.name.clone(),
                        code: Some(p.code.clone()),
                        description: p.description.clone(),
                        required: Some(p.required),
                        data_type: p.data_type,
                    };
                    (k.clone(), fields)
                })
                .collect()
        });
        let fields = ActionFields {
            name: a.name.clone(),
            code: Some(a.code.clone()),
            description: a.description.clone(),
            params_map: params,
        };
        (k.clone(), fields)
    });
    ModelFields {
        attributes_map: Some(attributes.collect()),
        actions_map: Some(actions.collect()),
        ..Default::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parameter_lines() {
        let params = parse_params("speed:Integer:required\n\n mode : String ").unwrap();
        assert_eq!(params.len(), 2);
        assert_eq!(params["speed"].required, Some(true));
        assert_eq!(params["mode"].data_type, DataType::String);
        assert!(parse_params("x:Number").is_err());
        assert!(parse_params("x:Integer:maybe").is_err());
    }
}
