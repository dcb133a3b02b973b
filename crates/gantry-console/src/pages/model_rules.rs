//! A model's alarm rules, on the model's page: each rule with its condition and its status (the
//! devices it does not evaluate for want of a metadata key), the form to create one and the
//! buttons to enable, disable and delete one, and the form's reading into the alarm service's
//! fields. The form's inputs carry the API's field names (`condition.value`), so a refusal of
//! the service is shown next to the input it names. The handlers are in `models.rs`.

use gantry_core::alarm_rule::{AlarmRuleFields, AlarmRuleView, ConditionSpec};
use gantry_core::enums::{DataType, Severity};
use gantry_core::records::DeviceModel;
use gantry_core::{Error, Result};
use maud::{Markup, html};
use serde::Deserialize;

use crate::form::{self, Problem};
use crate::pages::alarms::severity_badge;
use crate::pages::device_control::typed;
use crate::pages::{badge, value_text};
use crate::session::Signed;

/// The comparison operators a condition offers, as the API spells them.
const OPS: [(&str, &str); 8] = [
    (">", "> (above)"),
    (">=", ">= (at or above)"),
    ("<", "< (below)"),
    ("<=", "<= (at or below)"),
    ("==", "== (equal to)"),
    ("!=", "!= (not equal to)"),
    ("between", "between low and high"),
    ("outside", "outside low to high"),
];

/// The rules' section of the model's page: the table, and the create form for those who may
/// manage models. `problem` is a refusal of one of its forms (`rule` or `rules`).
pub fn section(
    signed: &Signed,
    model: &DeviceModel,
    rules: &[AlarmRuleView],
    draft: &RuleForm,
    problem: Option<(&str, &Problem)>,
) -> Markup {
    let manage = signed.who.require_admin().is_ok();
    let at = |form: &str| problem.filter(|(f, _)| *f == form).map(|(_, p)| p);
    html! {
        section id="alarm-rules" {
            h2 { "Alarm rules" }
            (form::general(at("rules")))
            @if rules.is_empty() {
                p.empty { "No alarm rules." }
            } @else {
                table.list.rules {
                    thead { tr {
                        th { "Name" } th { "Attribute" } th { "Severity" } th { "Condition" } th { "Clears" }
                        th { "Enabled" } th { "Devices" } th { span.sr { "Actions" } }
                    } }
                    tbody { @for rule in rules { (row(signed, rule, manage)) } }
                }
            }
            @if manage { (create_form(signed, model, draft, at("rule"))) }
        }
    }
}

fn row(signed: &Signed, rule: &AlarmRuleView, manage: bool) -> Markup {
    let path = format!("/console/alarmRules/{}", rule.id);
    let status = rule.status.as_ref();
    html! {
        tr id={ "rule-" (rule.id) } {
            td data-label="Name" { (rule.name) @if let Some(d) = &rule.description { br; small { (d) } } }
            td data-label="Attribute" { code { (rule.attribute_code) } }
            td data-label="Severity" { (severity_badge(rule.severity)) }
            td data-label="Condition" class="rule-condition" { (raise_text(rule)) }
            td data-label="Clears" { (clear_text(rule)) }
            td data-label="Enabled" class="rule-enabled" { (badge(if rule.enabled { "enabled" } else { "disabled" })) }
            td data-label="Devices" class="rule-status" {
                @if let Some(s) = status {
                    (s.devices - s.devices_not_evaluated) " of " (s.devices) " devices evaluated"
                    @if s.devices_not_evaluated > 0 {
                        br;
                        strong.error { (s.devices_not_evaluated) " not evaluated" }
                        br;
                        small { "their metadata lacks a key the rule reads" }
                    }
                }
            }
            td {
                @if manage {
                    div.actions {
                        form.inline method="post" action=(path) {
                            (form::csrf(signed))
                            input type="hidden" name="enabled" value=(if rule.enabled { "false" } else { "true" });
                            button.secondary type="submit" aria-label={ (if rule.enabled { "Disable " } else { "Enable " }) (rule.name) } {
                                (if rule.enabled { "Disable" } else { "Enable" })
                            }
                        }
                        details.confirm {
                            summary { "Delete…" }
                            (form::button(signed, &format!("{path}/delete"), &format!("Delete {}", rule.name), "danger"))
                        }
                    }
                }
            }
        }
    }
}

/// When the rule raises: its condition held for `forSeconds`, and no data for `noDataSeconds`.
fn raise_text(rule: &AlarmRuleView) -> String {
    let mut parts = Vec::new();
    if let Some(c) = &rule.condition {
        let held = match rule.for_seconds {
            0 => String::new(),
            s => format!(" for {s} s"),
        };
        parts.push(format!("{}{held}", condition_text(c)));
    }
    if let Some(s) = rule.no_data_seconds {
        parts.push(format!("no data for {s} s"));
    }
    if !rule.escalations.is_empty() {
        parts.push(format!("{} escalations", rule.escalations.len()));
    }
    parts.join("; ")
}

fn clear_text(rule: &AlarmRuleView) -> String {
    let held = match rule.clear_for_seconds {
        0 => String::new(),
        s => format!(" for {s} s"),
    };
    match &rule.clear_condition {
        Some(c) => format!("{}{held}", condition_text(c)),
        None => format!("when the condition no longer holds{held}"),
    }
}

/// `> 40`, `> metadata maxLoad`, `between 10 and 20`.
fn condition_text(c: &ConditionSpec) -> String {
    let bound = |value: &Option<serde_json::Value>, key: &Option<String>| match (value, key) {
        (Some(v), _) => value_text(v),
        (None, Some(k)) => format!("metadata {k}"),
        (None, None) => "?".to_owned(),
    };
    let op = c.op.as_deref().unwrap_or_default();
    match op {
        "between" | "outside" => format!(
            "{op} {} and {}",
            bound(&c.low, &c.low_from),
            bound(&c.high, &c.high_from)
        ),
        _ => format!("{op} {}", bound(&c.value, &c.value_from)),
    }
}

/// The create form as posted, and as shown again after a refusal. Input names are the API's
/// field names, a condition's parts as `condition.op`, `clearCondition.value`...
#[derive(Deserialize, Debug, Clone)]
pub struct RuleForm {
    #[serde(default)]
    name: String,
    #[serde(default, rename = "attributeCode")]
    attribute_code: String,
    #[serde(default)]
    severity: String,
    #[serde(flatten)]
    condition: ConditionForm,
    #[serde(default, rename = "forSeconds")]
    for_seconds: String,
    #[serde(default, rename = "clearCondition.op")]
    clear_op: String,
    #[serde(default, rename = "clearCondition.value")]
    clear_value: String,
    #[serde(default, rename = "clearCondition.valueFrom")]
    clear_value_from: String,
    #[serde(default, rename = "clearForSeconds")]
    clear_for_seconds: String,
    #[serde(default, rename = "noDataSeconds")]
    no_data_seconds: String,
    #[serde(default)]
    description: String,
    /// The checkbox: present when ticked.
    enabled: Option<String>,
}

#[derive(Deserialize, Debug, Clone, Default)]
pub struct ConditionForm {
    #[serde(default, rename = "condition.op")]
    op: String,
    #[serde(default, rename = "condition.value")]
    value: String,
    #[serde(default, rename = "condition.valueFrom")]
    value_from: String,
    #[serde(default, rename = "condition.low")]
    low: String,
    #[serde(default, rename = "condition.high")]
    high: String,
}

impl Default for RuleForm {
    /// An empty form: enabled, CRITICAL, `>`.
    fn default() -> Self {
        Self {
            name: String::new(),
            attribute_code: String::new(),
            severity: Severity::Critical.as_str().to_owned(),
            condition: ConditionForm {
                op: ">".to_owned(),
                ..Default::default()
            },
            for_seconds: String::new(),
            clear_op: String::new(),
            clear_value: String::new(),
            clear_value_from: String::new(),
            clear_for_seconds: String::new(),
            no_data_seconds: String::new(),
            description: String::new(),
            enabled: Some("true".to_owned()),
        }
    }
}

fn create_form(signed: &Signed, model: &DeviceModel, draft: &RuleForm, problem: Option<&Problem>) -> Markup {
    let attributes: Vec<(&str, String)> = model
        .attributes_map
        .values()
        .map(|a| {
            let label = match &a.name {
                Some(name) => format!("{name} ({}, {})", a.code, a.data_type.as_str()),
                None => format!("{} ({})", a.code, a.data_type.as_str()),
            };
            (a.code.as_str(), label)
        })
        .collect();
    let attributes: Vec<(&str, &str)> = attributes.iter().map(|(c, l)| (*c, l.as_str())).collect();
    let severities: Vec<(&str, &str)> = Severity::ALL.iter().map(|s| (s.as_str(), s.as_str())).collect();
    let clear_ops: Vec<(&str, &str)> = [("", "none: when the condition no longer holds")]
        .into_iter()
        .chain(OPS)
        .collect();
    let c = &draft.condition;
    html! {
        @if attributes.is_empty() {
            p.hint { "Add an attribute to the model to put an alarm rule on it." }
        } @else {
            form.card.rule method="post" action={ "/console/models/" (model.id) "/alarmRules" } {
                h3 { "Add an alarm rule" }
                (form::csrf(signed))
                (form::general(problem))
                (form::input("Rule name (the alarms' name)", "name", "text", &draft.name, problem))
                (form::select("Attribute", "attributeCode", &attributes, &draft.attribute_code, problem))
                (form::select("Severity", "severity", &severities, &draft.severity, problem))
                fieldset {
                    legend { "Raised when the value is" }
                    (form::select("Operator", "condition.op", &OPS, &c.op, problem))
                    (form::input("Value (for >, >=, <, <=, ==, !=)", "condition.value", "text", &c.value, problem))
                    (form::input("Or the device's metadata key holding the value", "condition.valueFrom", "text", &c.value_from, problem))
                    (form::input("Low (for between and outside)", "condition.low", "text", &c.low, problem))
                    (form::input("High (for between and outside)", "condition.high", "text", &c.high, problem))
                    (form::input("For at least (seconds, device time)", "forSeconds", "number", &draft.for_seconds, problem))
                }
                fieldset {
                    legend { "Cleared when (optional)" }
                    (form::select("Clear operator", "clearCondition.op", &clear_ops, &draft.clear_op, problem))
                    (form::input("Clear value", "clearCondition.value", "text", &draft.clear_value, problem))
                    (form::input("Or the metadata key holding it", "clearCondition.valueFrom", "text", &draft.clear_value_from, problem))
                    (form::input("For at least (seconds)", "clearForSeconds", "number", &draft.clear_for_seconds, problem))
                }
                (form::input("Also raised after no data for (seconds; empty: never)", "noDataSeconds", "number", &draft.no_data_seconds, problem))
                (form::input("Description", "description", "text", &draft.description, problem))
                (form::checkbox("Enabled", "enabled", draft.enabled.is_some()))
                button.primary type="submit" { "Add alarm rule" }
            }
        }
    }
}

impl RuleForm {
    /// The service's fields; a value is typed by the attribute's dataType, and a refusal names
    /// the input that holds it.
    pub fn fields(&self, model: &DeviceModel) -> Result<AlarmRuleFields> {
        let text = |s: &str| Some(s.trim().to_owned()).filter(|s| !s.is_empty());
        let data_type = model
            .attributes_map
            .get(self.attribute_code.trim())
            .map(|a| a.data_type);
        let condition = text(&self.condition.op)
            .map(|op| {
                let c = &self.condition;
                condition_spec("condition", op, data_type, [&c.value, &c.value_from, &c.low, &c.high])
            })
            .transpose()?;
        let none = String::new();
        let clear_condition = text(&self.clear_op)
            .map(|op| {
                let parts = [&self.clear_value, &self.clear_value_from, &none, &none];
                condition_spec("clearCondition", op, data_type, parts)
            })
            .transpose()?;
        Ok(AlarmRuleFields {
            name: Some(self.name.trim().to_owned()),
            attribute_code: text(&self.attribute_code),
            severity: text(&self.severity),
            condition,
            for_seconds: seconds("forSeconds", &self.for_seconds)?,
            escalations: None,
            clear_condition,
            clear_for_seconds: seconds("clearForSeconds", &self.clear_for_seconds)?,
            no_data_seconds: seconds("noDataSeconds", &self.no_data_seconds)?,
            description: text(&self.description),
            enabled: Some(self.enabled.is_some()),
        })
    }
}

/// A condition of `op` from its inputs `[value, valueFrom, low, high]`; an empty input is no bound.
fn condition_spec(
    field: &str,
    op: String,
    data_type: Option<DataType>,
    [value, value_from, low, high]: [&String; 4],
) -> Result<ConditionSpec> {
    let bound = |name: &str, text: &str| -> Result<Option<serde_json::Value>> {
        let text = text.trim();
        match (text.is_empty(), data_type) {
            (true, _) => Ok(None),
            (false, Some(t)) => bound_value(&format!("{field}.{name}"), t, text).map(Some),
            // No such attribute: the service refuses `attributeCode`.
            (false, None) => Ok(Some(serde_json::Value::from(text))),
        }
    };
    let key = |text: &str| Some(text.trim().to_owned()).filter(|k| !k.is_empty());
    Ok(ConditionSpec {
        op: Some(op),
        value: bound("value", value)?,
        value_from: key(value_from),
        low: bound("low", low)?,
        high: bound("high", high)?,
        ..Default::default()
    })
}

/// A bound of the attribute's type; any number bounds an Integer attribute, as the service allows.
fn bound_value(name: &str, data_type: DataType, text: &str) -> Result<serde_json::Value> {
    match data_type {
        DataType::Integer | DataType::Float => text
            .parse::<i64>()
            .map(serde_json::Value::from)
            .or_else(|_| typed(name, DataType::Float, text))
            .map_err(|_| Error::invalid(name, "is not a number")),
        other => typed(name, other, text),
    }
}

/// A timer in whole seconds, or None when empty.
fn seconds(field: &str, text: &str) -> Result<Option<i64>> {
    match text.trim() {
        "" => Ok(None),
        t => t
            .parse::<i64>()
            .map(Some)
            .map_err(|_| Error::invalid(field, "must be a whole number of seconds")),
    }
}

/// A refusal of the condition as a whole names its operator's input.
pub fn at_input(e: Error) -> Error {
    match e {
        Error::Invalid { field, reason } if field == "condition" || field == "clearCondition" => Error::Invalid {
            field: format!("{field}.op"),
            reason,
        },
        other => other,
    }
}

/// A rule as shown, as the fields that replace it unchanged.
pub fn fields_of(rule: &AlarmRuleView) -> AlarmRuleFields {
    AlarmRuleFields {
        name: Some(rule.name.clone()),
        attribute_code: Some(rule.attribute_code.clone()),
        severity: Some(rule.severity.as_str().to_owned()),
        condition: rule.condition.clone(),
        for_seconds: Some(rule.for_seconds),
        escalations: Some(rule.escalations.clone()),
        clear_condition: rule.clear_condition.clone(),
        clear_for_seconds: Some(rule.clear_for_seconds),
        no_data_seconds: rule.no_data_seconds,
        description: rule.description.clone(),
        enabled: Some(rule.enabled),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use gantry_core::enums::{Channel, Readable};
    use gantry_core::ids::ModelId;
    use gantry_core::records::{ModelAttribute, RecordMeta};
    use serde_json::json;

    fn model() -> DeviceModel {
        let load = ModelAttribute {
            name: Some("Load".into()),
            code: "load".into(),
            data_type: DataType::Float,
            description: None,
            readable: Readable::R,
            channel: Channel::M,
        };
        DeviceModel {
            id: ModelId::from_string("m1"),
            name: "Crane".into(),
            device_type: gantry_core::enums::DeviceType::TowerCrane,
            description: None,
            image_url: None,
            attributes_map: [("load".to_owned(), load)].into(),
            actions_map: Default::default(),
            metadata: Default::default(),
            gateway_id: None,
            record: RecordMeta::created(gantry_core::ids::TenantId::default_tenant(), "admin", 0),
        }
    }

    fn form(pairs: &[(&str, &str)]) -> RuleForm {
        serde_urlencoded::from_str(&serde_urlencoded::to_string(pairs).unwrap()).unwrap()
    }

    #[test]
    fn values_are_typed_by_the_attribute() {
        let f = form(&[
            ("name", "Overload"),
            ("attributeCode", "load"),
            ("severity", "MAJOR"),
            ("condition.op", "between"),
            ("condition.low", "2"),
            ("condition.high", "4.5"),
            ("clearCondition.op", "<"),
            ("clearCondition.valueFrom", "resetLoad"),
            ("forSeconds", "30"),
            ("enabled", "true"),
        ]);
        let fields = f.fields(&model()).unwrap();
        let c = fields.condition.unwrap();
        assert_eq!((c.low, c.high), (Some(json!(2)), Some(json!(4.5))));
        assert_eq!(fields.clear_condition.unwrap().value_from.as_deref(), Some("resetLoad"));
        assert_eq!((fields.for_seconds, fields.no_data_seconds), (Some(30), None));
        assert_eq!(fields.enabled, Some(true));
        let unticked = form(&[
            ("attributeCode", "load"),
            ("condition.op", ">"),
            ("condition.value", "1"),
        ]);
        assert_eq!(unticked.fields(&model()).unwrap().enabled, Some(false));
    }

    #[test]
    fn refusals_name_the_input() {
        let field = |pairs: &[(&str, &str)]| match form(pairs).fields(&model()) {
            Err(Error::Invalid { field, .. }) => field,
            other => panic!("{other:?}"),
        };
        let bad_value = [
            ("attributeCode", "load"),
            ("condition.op", ">"),
            ("condition.value", "heavy"),
        ];
        assert_eq!(field(&bad_value), "condition.value");
        assert_eq!(field(&[("forSeconds", "1.5")]), "forSeconds");
        let e = at_input(Error::invalid("condition", "is required"));
        assert!(matches!(e, Error::Invalid { field, .. } if field == "condition.op"));
    }

    #[test]
    fn conditions_read_as_text() {
        let spec = |v: serde_json::Value| serde_json::from_value::<ConditionSpec>(v).unwrap();
        assert_eq!(condition_text(&spec(json!({"op": ">", "value": 40}))), "> 40");
        assert_eq!(
            condition_text(&spec(json!({"op": "<", "valueFrom": "maxLoad"}))),
            "< metadata maxLoad"
        );
        assert_eq!(
            condition_text(&spec(json!({"op": "outside", "low": 1, "highFrom": "top"}))),
            "outside 1 and metadata top"
        );
    }
}
