use std::collections::BTreeMap;

use serde_json::{Value, json};

use super::*;
use crate::enums::{Channel, DeviceType, Readable};
use crate::ids::TenantId;
use crate::records::ModelAttribute;

pub(crate) fn model() -> DeviceModel {
    let attribute = |code: &str, data_type| {
        (
            code.to_owned(),
            ModelAttribute {
                name: None,
                code: code.to_owned(),
                data_type,
                description: None,
                readable: Readable::R,
                channel: Channel::M,
            },
        )
    };
    DeviceModel {
        id: ModelId::generate(),
        name: "crane".into(),
        description: None,
        device_type: DeviceType::TowerCrane,
        image_url: None,
        attributes_map: BTreeMap::from([
            attribute("wind", DataType::Float),
            attribute("load", DataType::Integer),
            attribute("mode", DataType::String),
            attribute("door", DataType::Boolean),
        ]),
        actions_map: BTreeMap::new(),
        metadata: JsonMap::new(),
        gateway_id: None,
        record: RecordMeta::created(TenantId::default_tenant(), "admin", 0),
    }
}

fn spec(value: Value) -> ConditionSpec {
    serde_json::from_value(value).unwrap()
}

pub(crate) fn rule(input: Value) -> Result<AlarmRule> {
    let escalations: Option<Vec<EscalationSpec>> = input
        .get("escalations")
        .map(|e| serde_json::from_value(e.clone()).unwrap());
    let text = |k: &str| input.get(k).and_then(Value::as_str).map(str::to_owned);
    let number = |k: &str| input.get(k).and_then(Value::as_i64);
    let fields = AlarmRuleFields {
        name: text("name").or(Some("rule".into())),
        attribute_code: text("attributeCode"),
        severity: text("severity"),
        condition: input.get("condition").map(|c| spec(c.clone())),
        for_seconds: number("forSeconds"),
        escalations,
        clear_condition: input.get("clearCondition").map(|c| spec(c.clone())),
        clear_for_seconds: number("clearForSeconds"),
        no_data_seconds: number("noDataSeconds"),
        description: None,
        enabled: None,
    };
    AlarmRule::parse(
        AlarmRuleId::generate(),
        &model(),
        fields,
        RecordMeta::created(TenantId::default_tenant(), "admin", 0),
    )
}

fn field_of(result: Result<AlarmRule>) -> String {
    match result {
        Err(Error::Invalid { field, .. }) => field,
        other => panic!("expected a field error, got {other:?}"),
    }
}

#[test]
fn refusals_name_the_field() {
    let cases = [
        (
            json!({"attributeCode": "nope", "severity": "MAJOR", "condition": {"op": ">", "value": 1}}),
            "attributeCode",
        ),
        (
            json!({"attributeCode": "mode", "severity": "MAJOR", "condition": {"op": ">", "value": "a"}}),
            "condition.op",
        ),
        (
            json!({"attributeCode": "wind", "severity": "HIGH", "condition": {"op": ">", "value": 1}}),
            "severity",
        ),
        (
            json!({"attributeCode": "wind", "severity": "MAJOR", "condition": {}}),
            "condition.op",
        ),
        (json!({"attributeCode": "wind", "severity": "MAJOR"}), "condition"),
        (
            json!({"attributeCode": "wind", "severity": "MAJOR", "condition": {"op": ">"}}),
            "condition.value",
        ),
        (
            json!({"attributeCode": "wind", "severity": "MAJOR", "condition": {"op": ">", "value": "x"}}),
            "condition.value",
        ),
        (
            json!({"attributeCode": "wind", "severity": "MAJOR", "condition": {"op": ">", "value": 1, "valueFrom": "k"}}),
            "condition.valueFrom",
        ),
        (
            json!({"attributeCode": "wind", "severity": "MAJOR", "condition": {"op": "between", "low": 5, "high": 1}}),
            "condition.high",
        ),
        (
            json!({"attributeCode": "door", "severity": "MAJOR", "condition": {"op": "between", "low": 0, "high": 1}}),
            "condition.op",
        ),
        (
            json!({"attributeCode": "wind", "severity": "MAJOR", "condition": {"op": "~", "value": 1}}),
            "condition.op",
        ),
        (
            json!({"attributeCode": "wind", "severity": "MAJOR", "condition": {"op": ">", "value": 1}, "forSeconds": -1}),
            "forSeconds",
        ),
        (
            json!({"attributeCode": "wind", "severity": "MAJOR", "condition": {"op": ">", "value": 1},
                "escalations": [{"severity": "MINOR", "condition": {"op": ">", "value": 2}}]}),
            "escalations[0].severity",
        ),
        (
            json!({"attributeCode": "wind", "severity": "MAJOR", "condition": {"op": ">", "value": 1},
                "escalations": [{"severity": "CRITICAL"}]}),
            "escalations[0].condition",
        ),
        (
            json!({"attributeCode": "wind", "severity": "MAJOR", "condition": {"op": ">", "value": 1},
                "clearCondition": {"op": "<", "value": true}}),
            "clearCondition.value",
        ),
        (
            json!({"attributeCode": "wind", "severity": "MAJOR", "noDataSeconds": 0}),
            "noDataSeconds",
        ),
    ];
    for (input, field) in cases {
        assert_eq!(field_of(rule(input.clone())), field, "{input}");
    }
}

#[test]
fn operators_at_their_edges() {
    let none = JsonMap::new();
    let cases = [
        (">", 20.0, 20.0, false),
        (">", 20.5, 20.0, true),
        (">=", 20.0, 20.0, true),
        (">=", 19.9, 20.0, false),
        ("<", 20.0, 20.0, false),
        ("<", 19.9, 20.0, true),
        ("<=", 20.0, 20.0, true),
        ("<=", 20.1, 20.0, false),
        ("==", 20.0, 20.0, true),
        ("==", 20.1, 20.0, false),
        ("!=", 20.0, 20.0, false),
        ("!=", 20.1, 20.0, true),
    ];
    for (op, value, bound, expected) in cases {
        let c = Condition::parse("c", &spec(json!({"op": op, "value": bound})), DataType::Float).unwrap();
        assert_eq!(c.holds(&json!(value), &none), Some(expected), "{value} {op} {bound}");
    }
    let between = Condition::parse(
        "c",
        &spec(json!({"op": "between", "low": 1, "high": 3})),
        DataType::Integer,
    )
    .unwrap();
    let outside = Condition::parse(
        "c",
        &spec(json!({"op": "outside", "low": 1, "high": 3})),
        DataType::Integer,
    )
    .unwrap();
    for (v, inside) in [(0, false), (1, true), (3, true), (4, false)] {
        assert_eq!(between.holds(&json!(v), &none), Some(inside), "{v} between");
        assert_eq!(outside.holds(&json!(v), &none), Some(!inside), "{v} outside");
    }
    let text = Condition::parse("c", &spec(json!({"op": "==", "value": "fault"})), DataType::String).unwrap();
    assert_eq!(text.holds(&json!("fault"), &none), Some(true));
    assert_eq!(text.holds(&json!("ok"), &none), Some(false));
}

#[test]
fn value_from_reads_the_metadata_or_does_not_evaluate() {
    let c = Condition::parse(
        "c",
        &spec(json!({"op": ">", "valueFrom": "maxLoad"})),
        DataType::Integer,
    )
    .unwrap();
    let small: JsonMap = serde_json::from_value(json!({"maxLoad": 10})).unwrap();
    let big: JsonMap = serde_json::from_value(json!({"maxLoad": 50})).unwrap();
    let wrong: JsonMap = serde_json::from_value(json!({"maxLoad": "ten"})).unwrap();
    assert_eq!(c.holds(&json!(20), &small), Some(true));
    assert_eq!(c.holds(&json!(20), &big), Some(false));
    assert_eq!(c.holds(&json!(20), &wrong), None);
    assert_eq!(c.holds(&json!(20), &JsonMap::new()), None);
    let r =
        rule(json!({"attributeCode": "load", "severity": "MAJOR", "condition": {"op": ">", "valueFrom": "maxLoad"}}))
            .unwrap();
    assert!(r.evaluates(&small));
    assert!(!r.evaluates(&wrong));
    assert!(r.reads_metadata());
    let literal = rule(
        json!({"attributeCode": "load", "severity": "MAJOR", "condition": {"op": ">", "value": 5},
                              "clearCondition": {"op": "<", "valueFrom": "resetLoad"}}),
    )
    .unwrap();
    assert!(literal.reads_metadata(), "a clear condition's key counts");
    let plain =
        rule(json!({"attributeCode": "load", "severity": "MAJOR", "condition": {"op": ">", "value": 5}})).unwrap();
    assert!(!plain.reads_metadata() && plain.evaluates(&JsonMap::new()));
}

#[test]
fn definitions_round_trip() {
    let r = rule(json!({"attributeCode": "wind", "severity": "MINOR", "condition": {"op": ">", "value": 20},
        "clearCondition": {"op": "<", "value": 15}, "forSeconds": 10,
        "escalations": [{"severity": "CRITICAL", "condition": {"op": "outside", "low": 0, "highFrom": "limit"}, "forSeconds": 5}]}))
    .unwrap();
    let stored = serde_json::to_string(&r.definition()).unwrap();
    let back = AlarmRule::from_stored(
        r.id.clone(),
        r.model_id.clone(),
        r.name.clone(),
        r.attribute_code.clone(),
        r.enabled,
        serde_json::from_str(&stored).unwrap(),
        r.record.clone(),
    )
    .unwrap();
    assert_eq!(back, r);
}
