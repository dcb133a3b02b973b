//! Model validation: a model body parsed as the API does, then its name, attributesMap and
//! actionsMap checked as on create. Never panics; every code it takes follows the naming rule
//! and equals its key.

#![no_main]

use gantry_api::extract::parse_json;
use gantry_api::wire::ModelInput;
use gantry_core::fields::{ModelFields, parse_actions, parse_attributes};
use gantry_core::names::{Code, Name};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(input) = parse_json::<ModelInput>(data) else {
        return;
    };
    let input = ModelFields::from(input);
    if let Some(name) = &input.name
        && let Ok(parsed) = Name::parse("name", name)
    {
        let parsed = parsed.into_inner();
        assert!(!parsed.is_empty() && parsed.chars().count() <= Name::MAX_CHARS);
    }
    if let Some(Ok(attributes)) = input.attributes_map.map(parse_attributes) {
        for (key, attribute) in &attributes {
            assert_eq!(key, &attribute.code);
            assert!(Code::parse("code", key).is_ok(), "{key}");
        }
    }
    if let Some(Ok(actions)) = input.actions_map.map(parse_actions) {
        for (key, action) in &actions {
            assert_eq!(key, &action.code);
            assert!(Code::parse("code", key).is_ok(), "{key}");
            for (pkey, param) in action.params_map.iter().flatten() {
                assert_eq!(pkey, &param.code);
                assert!(Code::parse("code", pkey).is_ok(), "{pkey}");
            }
        }
    }
});
