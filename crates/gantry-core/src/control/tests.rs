//! The rules of a control payload, case by case.

use std::collections::BTreeMap;

use serde_json::json;

use super::*;
use crate::enums::{Channel, DataType, DeviceType, Readable};
use crate::ids::{ModelId, TenantId};
use crate::message::Payload;
use crate::message::{PayloadAction, PayloadAttribute};
use crate::records::DeviceModel;
use crate::records::{ActionParams, ModelAction, ModelAttribute, RecordMeta};
use crate::{Error, Result};

fn model() -> DeviceModel {
    let attr = |code: &str, data_type, readable| {
        (
            code.to_owned(),
            ModelAttribute {
                name: None,
                code: code.to_owned(),
                data_type,
                description: None,
                readable,
                channel: Channel::M,
            },
        )
    };
    let param = |code: &str, data_type, required| {
        (
            code.to_owned(),
            ActionParams {
                name: None,
                code: code.to_owned(),
                description: None,
                required,
                data_type,
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
            attr("load", DataType::Float, Readable::R),
            attr("limit", DataType::Float, Readable::Rw),
            attr("mode", DataType::String, Readable::W),
        ]),
        actions_map: BTreeMap::from([(
            "halt".to_owned(),
            ModelAction {
                name: None,
                code: "halt".into(),
                description: None,
                params_map: Some(BTreeMap::from([
                    param("delay", DataType::Integer, true),
                    param("why", DataType::String, false),
                ])),
            },
        )]),
        metadata: Default::default(),
        gateway_id: None,
        record: RecordMeta::created(TenantId::default_tenant(), "t", 0),
    }
}

fn attrs(list: &[(&str, serde_json::Value)]) -> Payload {
    Payload {
        attrs: list
            .iter()
            .map(|(c, v)| PayloadAttribute {
                code: (*c).into(),
                value: v.clone(),
                channel: Channel::M,
            })
            .collect(),
        ..Default::default()
    }
}

fn action(params: serde_json::Value) -> Payload {
    Payload {
        actions: vec![PayloadAction {
            code: "halt".into(),
            params: params.as_object().unwrap().clone(),
        }],
        ..Default::default()
    }
}

fn field_of(result: Result<()>) -> String {
    match result {
        Err(Error::Invalid { field, .. }) => field,
        other => panic!("expected an invalid field, got {other:?}"),
    }
}

#[test]
fn writable_typed_attributes_pass() {
    let m = model();
    assert!(validate_control(&m, &attrs(&[("limit", json!(3.5)), ("mode", json!("eco"))])).is_ok());
    assert_eq!(
        field_of(validate_control(&m, &attrs(&[("load", json!(1.0))]))),
        "payload.attrs[0].code"
    );
    assert_eq!(
        field_of(validate_control(&m, &attrs(&[("nosuch", json!(1.0))]))),
        "payload.attrs[0].code"
    );
    assert_eq!(
        field_of(validate_control(&m, &attrs(&[("limit", json!("high"))]))),
        "payload.attrs[0].value"
    );
    assert_eq!(field_of(validate_control(&m, &Payload::default())), "payload");
}

#[test]
fn action_params_are_checked() {
    let m = model();
    assert!(validate_control(&m, &action(json!({"delay": 5}))).is_ok());
    assert!(validate_control(&m, &action(json!({"delay": 5, "why": "wind"}))).is_ok());
    assert_eq!(
        field_of(validate_control(&m, &action(json!({})))),
        "payload.actions[0].params.delay"
    );
    assert_eq!(
        field_of(validate_control(&m, &action(json!({"delay": "soon"})))),
        "payload.actions[0].params.delay"
    );
    assert_eq!(
        field_of(validate_control(&m, &action(json!({"delay": 1, "x": 1})))),
        "payload.actions[0].params.x"
    );
    let unknown = Payload {
        actions: vec![PayloadAction {
            code: "jump".into(),
            params: Default::default(),
        }],
        ..Default::default()
    };
    assert_eq!(field_of(validate_control(&m, &unknown)), "payload.actions[0].code");
}
