//! Topic parsing: never panics; an owner read from a topic gives back that topic, and a
//! device's own topics name it and no other direction.

#![no_main]

// topics.rs depends on nothing, so it is compiled here directly rather than through
// gantry-mqtt, which would bring the whole broker into the fuzz build.
#[path = "../../crates/gantry-mqtt/src/topics.rs"]
mod topics;

use libfuzzer_sys::fuzz_target;
use topics::Topics;

// Three lines: the prefix, a device id and a topic.
fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let mut lines = text.splitn(3, '\n');
    let (prefix, device, topic) = (
        lines.next().unwrap_or_default(),
        lines.next().unwrap_or_default(),
        lines.next().unwrap_or_default(),
    );
    let t = Topics::new(prefix);
    assert!(t.shared_upstream(device).ends_with("/in/json/+"));
    if let Some(owner) = t.upstream_owner(topic) {
        assert_eq!(t.upstream(owner), topic);
        assert!(t.is_upstream_of(topic, owner));
        assert_eq!(t.inbox_owner(topic), None);
    }
    if let Some(owner) = t.inbox_owner(topic) {
        assert_eq!(t.inbox(owner), topic);
        assert!(t.is_inbox_of(topic, owner));
    }
    let plain = !device.is_empty() && !device.contains(['/', '+', '#']);
    assert_eq!(t.upstream_owner(&t.upstream(device)), plain.then_some(device));
    assert_eq!(t.inbox_owner(&t.inbox(device)), plain.then_some(device));
    assert!(!t.is_inbox_of(&t.upstream(device), device));
    assert!(!t.is_upstream_of(&t.inbox(device), device));
});
