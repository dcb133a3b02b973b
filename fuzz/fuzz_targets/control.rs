//! The control validator: a control body parsed as the API does, then checked against a fixed
//! model. Never panics; a payload it passes names only writable attributes and known actions,
//! with values of their types and every required parameter.

#![no_main]

use std::sync::LazyLock;

use gantry_api::extract::parse_json;
use gantry_api::wire::{ControlInput, ModelInput};
use gantry_core::control::validate_control;
use gantry_core::enums::DeviceType;
use gantry_core::fields::{ModelFields, parse_actions, parse_attributes};
use gantry_core::ids::{ModelId, TenantId};
use gantry_core::records::{DeviceModel, RecordMeta};
use libfuzzer_sys::fuzz_target;

const MODEL: &str = r#"{
  "attributesMap": {
    "load": {"dataType": "Float", "readable": "R"},
    "limit": {"dataType": "Float", "readable": "RW"},
    "count": {"dataType": "Integer", "readable": "W"},
    "mode": {"dataType": "String", "readable": "W"},
    "on": {"dataType": "Boolean", "readable": "RW"}
  },
  "actionsMap": {
    "halt": {"paramsMap": {
      "delay": {"type": "Integer", "required": true},
      "why": {"type": "String"}
    }},
    "reset": {}
  }
}"#;

static CRANE: LazyLock<DeviceModel> = LazyLock::new(|| {
    let input: ModelInput = serde_json::from_str(MODEL).expect("the model parses");
    let input = ModelFields::from(input);
    DeviceModel {
        id: ModelId::generate(),
        name: "crane".into(),
        description: None,
        device_type: DeviceType::Root,
        image_url: None,
        attributes_map: parse_attributes(input.attributes_map.unwrap_or_default()).expect("valid attributes"),
        actions_map: parse_actions(input.actions_map.unwrap_or_default()).expect("valid actions"),
        metadata: Default::default(),
        gateway_id: None,
        record: RecordMeta::created(TenantId::default_tenant(), "fuzz", 0),
    }
});

fuzz_target!(|data: &[u8]| {
    let model = &*CRANE;
    let Ok(ControlInput {
        payload: Some(payload), ..
    }) = parse_json::<ControlInput>(data)
    else {
        return;
    };
    if validate_control(model, &payload).is_err() {
        return;
    }
    assert!(!payload.attrs.is_empty() || !payload.actions.is_empty());
    for attr in &payload.attrs {
        let defined = &model.attributes_map[&attr.code];
        assert!(defined.readable.writable(), "{}", attr.code);
        assert!(defined.data_type.accepts(&attr.value), "{}", attr.value);
    }
    for action in &payload.actions {
        let params = model.actions_map[&action.code].params_map.clone().unwrap_or_default();
        for (name, value) in &action.params {
            assert!(params[name].data_type.accepts(value), "{name}");
        }
        for param in params.values().filter(|p| p.required) {
            assert!(action.params.contains_key(&param.code), "{}", param.code);
        }
    }
});
