//! Alarm rules: a condition on one attribute of a model's devices, with its timers, escalations
//! and clear condition, parsed from what a caller sent and checked against the attribute's
//! dataType. Once a rule is an `AlarmRule`, every condition in it can be evaluated.

use serde::{Deserialize, Serialize};

use crate::enums::{DataType, Severity};
use crate::ids::{AlarmRuleId, ModelId};
use crate::names::{Code, Name};
use crate::records::{DeviceModel, JsonMap, RecordMeta};
use crate::{Error, Result};

mod condition;

use condition::accepts_bound;
pub use condition::{Bound, CompareOp, Condition, ConditionSpec, Test};

/// The longest a timer of a rule may be: a week.
pub const MAX_SECONDS: i64 = 7 * 86_400;
/// The longest description.
pub const MAX_DESCRIPTION: usize = 1024;

/// A higher severity while its condition holds for `for_seconds`.
#[derive(Debug, Clone, PartialEq)]
pub struct Escalation {
    pub severity: Severity,
    pub condition: Condition,
    pub for_seconds: i64,
}

/// An escalation as sent and shown.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct EscalationSpec {
    /// Above the rule's `severity`.
    #[cfg_attr(feature = "openapi", schema(value_type = Option<Severity>))]
    pub severity: Option<String>,
    pub condition: Option<ConditionSpec>,
    /// Default 0.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub for_seconds: Option<i64>,
}

/// A rule as sent on POST and PUT (PUT replaces the rule).
#[derive(Debug, Clone, Default)]
pub struct AlarmRuleFields {
    pub name: Option<String>,
    pub attribute_code: Option<String>,
    pub severity: Option<String>,
    pub condition: Option<ConditionSpec>,
    pub for_seconds: Option<i64>,
    pub escalations: Option<Vec<EscalationSpec>>,
    pub clear_condition: Option<ConditionSpec>,
    pub clear_for_seconds: Option<i64>,
    pub no_data_seconds: Option<i64>,
    pub description: Option<String>,
    pub enabled: Option<bool>,
}

/// What a rule reports of its devices: those it cannot evaluate for want of a metadata key.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct RuleStatus {
    /// Devices of the model.
    pub devices: u64,
    /// Devices whose `metadata` lacks a key a condition names in `valueFrom` (or holds a value
    /// of another type there): the rule does not evaluate them.
    pub devices_not_evaluated: u64,
}

/// A rule on one attribute of a model's devices.
#[derive(Debug, Clone, PartialEq)]
pub struct AlarmRule {
    pub id: AlarmRuleId,
    pub model_id: ModelId,
    pub name: String,
    pub attribute_code: String,
    pub severity: Severity,
    pub condition: Option<Condition>,
    pub for_seconds: i64,
    pub escalations: Vec<Escalation>,
    pub clear_condition: Option<Condition>,
    pub clear_for_seconds: i64,
    pub no_data_seconds: Option<i64>,
    pub description: Option<String>,
    pub enabled: bool,
    pub record: RecordMeta,
}

/// A rule as shown: `AlarmRule` with its conditions in their sent form, and its status.
#[derive(Debug, Clone, Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct AlarmRuleView {
    #[cfg_attr(feature = "openapi", schema(value_type = String))]
    pub id: AlarmRuleId,
    #[cfg_attr(feature = "openapi", schema(value_type = String))]
    pub model_id: ModelId,
    pub name: String,
    pub attribute_code: String,
    pub severity: Severity,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub condition: Option<ConditionSpec>,
    pub for_seconds: i64,
    pub escalations: Vec<EscalationSpec>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub clear_condition: Option<ConditionSpec>,
    pub clear_for_seconds: i64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub no_data_seconds: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    pub enabled: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub status: Option<RuleStatus>,
    #[serde(flatten)]
    pub record: RecordMeta,
}

/// The JSON `definition` a store keeps of a rule: its sent form (`AlarmRuleFields`, checked).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RuleDefinition {
    pub severity: String,
    pub data_type: DataType,
    pub condition: Option<ConditionSpec>,
    pub for_seconds: i64,
    pub escalations: Vec<EscalationSpec>,
    pub clear_condition: Option<ConditionSpec>,
    pub clear_for_seconds: i64,
    pub no_data_seconds: Option<i64>,
    pub description: Option<String>,
}

impl AlarmRule {
    /// Checks `input` against `model`; the new rule has `id` and `record`.
    pub fn parse(id: AlarmRuleId, model: &DeviceModel, input: AlarmRuleFields, record: RecordMeta) -> Result<Self> {
        let name = Name::parse("name", input.name.as_deref().unwrap_or_default())?.into_inner();
        let code = input
            .attribute_code
            .ok_or_else(|| Error::invalid("attributeCode", "is required"))?;
        let code = Code::parse("attributeCode", &code)?.into_inner();
        let attribute = model.attributes_map.get(&code).ok_or_else(|| {
            Error::invalid(
                "attributeCode",
                format!("`{code}` is not an attribute of model {}", model.name),
            )
        })?;
        let data_type = attribute.data_type;
        let severity = parse_severity("severity", input.severity.as_deref())?;
        let no_data_seconds = input
            .no_data_seconds
            .map(|s| seconds("noDataSeconds", Some(s), 1))
            .transpose()?;
        let condition = match input.condition {
            Some(spec) => Some(Condition::parse("condition", &spec, data_type)?),
            None if no_data_seconds.is_some() => None,
            None => {
                return Err(Error::invalid(
                    "condition",
                    "is required (unless noDataSeconds is given)",
                ));
            }
        };
        let mut escalations = Vec::new();
        for (i, spec) in input.escalations.unwrap_or_default().into_iter().enumerate() {
            let field = format!("escalations[{i}]");
            let level = parse_severity(&format!("{field}.severity"), spec.severity.as_deref())?;
            if level.rank() <= severity.rank() {
                return Err(Error::invalid(
                    format!("{field}.severity"),
                    format!("{level} is not above the rule's severity {severity}"),
                ));
            }
            let spec_condition = spec
                .condition
                .ok_or_else(|| Error::invalid(format!("{field}.condition"), "is required"))?;
            escalations.push(Escalation {
                severity: level,
                condition: Condition::parse(&format!("{field}.condition"), &spec_condition, data_type)?,
                for_seconds: seconds(&format!("{field}.forSeconds"), spec.for_seconds, 0)?,
            });
        }
        let clear_condition = input
            .clear_condition
            .map(|spec| Condition::parse("clearCondition", &spec, data_type))
            .transpose()?;
        let description = input.description.filter(|d| !d.is_empty());
        if description
            .as_ref()
            .is_some_and(|d| d.chars().count() > MAX_DESCRIPTION)
        {
            return Err(Error::invalid(
                "description",
                format!("must be at most {MAX_DESCRIPTION} characters"),
            ));
        }
        Ok(AlarmRule {
            id,
            model_id: model.id.clone(),
            name,
            attribute_code: code,
            severity,
            condition,
            for_seconds: seconds("forSeconds", input.for_seconds, 0)?,
            escalations,
            clear_condition,
            clear_for_seconds: seconds("clearForSeconds", input.clear_for_seconds, 0)?,
            no_data_seconds,
            description,
            enabled: input.enabled.unwrap_or(true),
            record,
        })
    }

    /// The stored definition.
    pub fn definition(&self) -> RuleDefinition {
        RuleDefinition {
            severity: self.severity.as_str().to_owned(),
            data_type: self.data_type(),
            condition: self.condition.as_ref().map(Condition::spec),
            for_seconds: self.for_seconds,
            escalations: self.escalation_specs(),
            clear_condition: self.clear_condition.as_ref().map(Condition::spec),
            clear_for_seconds: self.clear_for_seconds,
            no_data_seconds: self.no_data_seconds,
            description: self.description.clone(),
        }
    }

    /// A rule read back from its stored columns and definition (checked when it was stored).
    #[allow(clippy::too_many_arguments)]
    pub fn from_stored(
        id: AlarmRuleId,
        model_id: ModelId,
        name: String,
        attribute_code: String,
        enabled: bool,
        definition: RuleDefinition,
        record: RecordMeta,
    ) -> Result<Self> {
        let data_type = definition.data_type;
        let severity = parse_severity("severity", Some(&definition.severity))?;
        let parse = |field: &str, spec: &ConditionSpec| Condition::parse(field, spec, data_type);
        let mut escalations = Vec::new();
        for spec in &definition.escalations {
            escalations.push(Escalation {
                severity: parse_severity("severity", spec.severity.as_deref())?,
                condition: parse(
                    "condition",
                    spec.condition.as_ref().unwrap_or(&ConditionSpec::default()),
                )?,
                for_seconds: spec.for_seconds.unwrap_or(0),
            });
        }
        Ok(AlarmRule {
            id,
            model_id,
            name,
            attribute_code,
            severity,
            condition: definition
                .condition
                .as_ref()
                .map(|c| parse("condition", c))
                .transpose()?,
            for_seconds: definition.for_seconds,
            escalations,
            clear_condition: definition
                .clear_condition
                .as_ref()
                .map(|c| parse("clearCondition", c))
                .transpose()?,
            clear_for_seconds: definition.clear_for_seconds,
            no_data_seconds: definition.no_data_seconds,
            description: definition.description,
            enabled,
            record,
        })
    }

    fn data_type(&self) -> DataType {
        self.condition
            .as_ref()
            .or(self.clear_condition.as_ref())
            .map(|c| c.data_type)
            .unwrap_or(DataType::Float)
    }

    fn escalation_specs(&self) -> Vec<EscalationSpec> {
        self.escalations
            .iter()
            .map(|e| EscalationSpec {
                severity: Some(e.severity.as_str().to_owned()),
                condition: Some(e.condition.spec()),
                for_seconds: Some(e.for_seconds),
            })
            .collect()
    }

    /// Whether the rule can evaluate a device with `metadata`: every key it names holds a value
    /// of the attribute's type.
    pub fn evaluates(&self, metadata: &JsonMap) -> bool {
        self.conditions()
            .flat_map(|c| c.keys().into_iter().map(move |k| (c.data_type, k)))
            .all(|(t, k)| metadata.get(k).is_some_and(|v| accepts_bound(t, v)))
    }

    /// Whether a condition names a metadata key: only then may a device go unevaluated.
    pub fn reads_metadata(&self) -> bool {
        self.conditions().any(|c| !c.keys().is_empty())
    }

    fn conditions(&self) -> impl Iterator<Item = &Condition> {
        self.condition
            .iter()
            .chain(self.clear_condition.iter())
            .chain(self.escalations.iter().map(|e| &e.condition))
    }

    pub fn view(&self, status: Option<RuleStatus>) -> AlarmRuleView {
        AlarmRuleView {
            id: self.id.clone(),
            model_id: self.model_id.clone(),
            name: self.name.clone(),
            attribute_code: self.attribute_code.clone(),
            severity: self.severity,
            condition: self.condition.as_ref().map(Condition::spec),
            for_seconds: self.for_seconds,
            escalations: self.escalation_specs(),
            clear_condition: self.clear_condition.as_ref().map(Condition::spec),
            clear_for_seconds: self.clear_for_seconds,
            no_data_seconds: self.no_data_seconds,
            description: self.description.clone(),
            enabled: self.enabled,
            status,
            record: self.record.clone(),
        }
    }
}

fn parse_severity(field: &str, text: Option<&str>) -> Result<Severity> {
    let text = text.ok_or_else(|| Error::invalid(field, "is required"))?;
    Severity::parse_field(text, field)
}

/// A timer in whole seconds: `min` to `MAX_SECONDS`, 0 when absent.
fn seconds(field: &str, value: Option<i64>, min: i64) -> Result<i64> {
    let value = value.unwrap_or(0);
    if !(min..=MAX_SECONDS).contains(&value) {
        return Err(Error::invalid(
            field,
            format!("must be from {min} to {MAX_SECONDS} seconds"),
        ));
    }
    Ok(value)
}

#[cfg(test)]
pub(crate) mod tests;
