//! The Message parser (`Message::from_device`, what MQTT and route callers send): never panics;
//! a Message it takes has an id, holds no NUL, and reads back the same once written.

#![no_main]

use gantry_core::message::Message;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(message) = Message::from_device(data) else {
        return;
    };
    assert!(!message.meta.id.is_empty(), "a taken Message has an id");
    let written = serde_json::to_vec(&message).expect("a Message serialises");
    assert!(
        !gantry_core::text::json_has_nul(&written),
        "a taken Message holds no NUL"
    );
    let again = Message::from_device(&written).expect("a written Message parses");
    assert_eq!(again, message, "a Message reads back as written");
});
