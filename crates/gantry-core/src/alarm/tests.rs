use serde_json::{Value, json};

use super::step::is_off;
use super::*;
use crate::alarm_rule::tests::rule;
use crate::records::JsonMap;

fn subject() -> SubjectParts {
    SubjectParts {
        tenant: TenantId::default_tenant(),
        project: ProjectId::generate(),
        device: DeviceId::generate(),
        device_name: "crane-1".into(),
        metadata: JsonMap::new(),
    }
}

/// Feeds readings (value, device second) through `step` as a store would, keeping the state and
/// the open alarm; returns every write.
struct Run {
    subject: SubjectParts,
    state: AlarmState,
    open: Option<Alarm>,
    writes: Vec<AlarmWrite>,
}

impl Run {
    fn new() -> Self {
        Run {
            subject: subject(),
            state: AlarmState::default(),
            open: None,
            writes: Vec::new(),
        }
    }

    fn feed(&mut self, raiser: Raiser<'_>, value: Value, second: i64, message: Option<&str>) -> bool {
        let trigger = Trigger::Reading {
            value,
            device_time: second * 1000,
            arrival: second * 1000,
            message: message.map(MessageKey::of_text),
        };
        self.apply(raiser, &trigger)
    }

    fn apply(&mut self, raiser: Raiser<'_>, trigger: &Trigger) -> bool {
        let Some(t) = step(
            raiser,
            &self.subject.subject(),
            &self.state,
            self.open.as_ref(),
            trigger,
        ) else {
            return false;
        };
        self.state = t.state;
        for write in t.writes {
            self.open = (write.alarm.status != AlarmStatus::Cleared).then(|| write.alarm.clone());
            self.writes.push(write);
        }
        true
    }

    fn kinds(&self) -> Vec<AlarmTransition> {
        self.writes
            .iter()
            .flat_map(|w| w.history.iter().map(|h| h.kind))
            .collect()
    }
}

#[test]
fn for_seconds_counts_device_time() {
    let r = rule(
        json!({"attributeCode": "wind", "severity": "MAJOR", "condition": {"op": ">", "value": 20}, "forSeconds": 10}),
    )
    .unwrap();
    let mut run = Run::new();
    run.feed(Raiser::Rule(&r), json!(25), 100, None);
    run.feed(Raiser::Rule(&r), json!(26), 105, None);
    assert!(run.open.is_none(), "5 s of 10");
    run.feed(Raiser::Rule(&r), json!(10), 108, None);
    run.feed(Raiser::Rule(&r), json!(27), 109, None);
    run.feed(Raiser::Rule(&r), json!(27), 118, None);
    assert!(run.open.is_none(), "the window restarted at 109");
    run.feed(Raiser::Rule(&r), json!(28), 119, None);
    let alarm = run.open.clone().expect("raised at 10 s");
    assert_eq!(
        (alarm.count, alarm.first_event_time, alarm.value),
        (1, 119_000, json!(28))
    );
    run.feed(Raiser::Rule(&r), json!(29), 120, None);
    assert_eq!(run.open.as_ref().unwrap().count, 2);
    run.feed(Raiser::Rule(&r), json!(3), 121, None);
    assert!(run.open.is_none());
    assert_eq!(run.kinds(), [AlarmTransition::Raised, AlarmTransition::Cleared]);
}

#[test]
fn escalation_goes_up_and_back_inside_one_alarm() {
    let r = rule(
        json!({"attributeCode": "wind", "severity": "MINOR", "condition": {"op": ">", "value": 20},
        "escalations": [{"severity": "MAJOR", "condition": {"op": ">", "value": 30}},
                        {"severity": "CRITICAL", "condition": {"op": ">", "value": 40}, "forSeconds": 5}]}),
    )
    .unwrap();
    let mut run = Run::new();
    for (v, s) in [(25, 1), (35, 2), (45, 3), (45, 8), (35, 9), (25, 10)] {
        run.feed(Raiser::Rule(&r), json!(v), s, None);
    }
    let ids: std::collections::HashSet<_> = run.writes.iter().map(|w| w.alarm.id.clone()).collect();
    assert_eq!(ids.len(), 1, "one alarm");
    use AlarmTransition::*;
    assert_eq!(run.kinds(), [Raised, Escalated, Escalated, Deescalated, Deescalated]);
    let severities: Vec<_> = run
        .writes
        .iter()
        .flat_map(|w| w.history.iter().map(|h| h.severity))
        .collect();
    use Severity::*;
    assert_eq!(severities, [Minor, Major, Critical, Major, Minor]);
    assert_eq!(run.open.unwrap().count, 6);
}

#[test]
fn hysteresis_and_clear_for_seconds() {
    let r = rule(
        json!({"attributeCode": "wind", "severity": "MAJOR", "condition": {"op": ">", "value": 20},
        "clearCondition": {"op": "<", "value": 15}, "clearForSeconds": 10}),
    )
    .unwrap();
    let mut run = Run::new();
    run.feed(Raiser::Rule(&r), json!(21), 1, None);
    run.feed(Raiser::Rule(&r), json!(17), 2, None);
    assert!(run.open.is_some(), "17 neither raises nor clears");
    run.feed(Raiser::Rule(&r), json!(14), 3, None);
    run.feed(Raiser::Rule(&r), json!(12), 12, None);
    assert!(run.open.is_some(), "9 s of 10");
    run.feed(Raiser::Rule(&r), json!(16), 13, None);
    run.feed(Raiser::Rule(&r), json!(10), 14, None);
    run.feed(Raiser::Rule(&r), json!(10), 24, None);
    assert!(run.open.is_none(), "10 s below 15");
    assert_eq!(
        run.writes.last().unwrap().alarm.cleared_by.as_deref(),
        Some(&*format!("rule:{}", r.id))
    );
    run.feed(Raiser::Rule(&r), json!(30), 25, None);
    assert!(run.open.is_some(), "a new alarm after the clear");
    assert_ne!(run.open.as_ref().unwrap().id, run.writes[0].alarm.id);
}

#[test]
fn a_redelivered_message_and_late_events() {
    let r = rule(json!({"attributeCode": "wind", "severity": "MAJOR", "condition": {"op": ">", "value": 20}})).unwrap();
    let mut run = Run::new();
    assert!(run.feed(Raiser::Rule(&r), json!(25), 10, Some("m1")));
    assert!(
        !run.feed(Raiser::Rule(&r), json!(25), 10, Some("m1")),
        "the same message again"
    );
    assert!(
        run.feed(Raiser::Rule(&r), json!(26), 9, Some("m2")),
        "a late event still counts"
    );
    let alarm = run.open.clone().unwrap();
    assert_eq!(
        (alarm.count, alarm.last_event_time, alarm.value),
        (2, 10_000, json!(25))
    );
    assert!(
        !run.feed(Raiser::Rule(&r), json!(1), 5, Some("m3")),
        "a late value does not clear"
    );
    assert!(run.open.is_some());
}

#[test]
fn device_alarms_from_channel_w() {
    let mut run = Run::new();
    let device = Raiser::Device("overload");
    assert!(!run.feed(device, json!(false), 1, None));
    run.feed(device, json!(true), 2, None);
    run.feed(device, json!("jammed"), 3, None);
    let alarm = run.open.clone().unwrap();
    assert_eq!(
        (alarm.severity, alarm.source, alarm.count),
        (Severity::Major, AlarmSource::Device, 2)
    );
    assert_eq!(
        (alarm.name.as_str(), alarm.value.clone()),
        ("overload", json!("jammed"))
    );
    run.feed(device, json!(0), 4, None);
    assert!(run.open.is_none());
    for off in [json!(false), json!(0), json!("")] {
        assert!(is_off(&off));
    }
}

#[test]
fn no_data_raises_after_the_silence_and_clears_on_the_next_value() {
    let r = rule(json!({"attributeCode": "wind", "severity": "WARNING", "noDataSeconds": 30})).unwrap();
    let mut run = Run::new();
    run.feed(Raiser::Rule(&r), json!(5), 100, None);
    assert!(!run.apply(Raiser::Rule(&r), &Trigger::Silence { now: 129_000 }));
    assert!(run.apply(Raiser::Rule(&r), &Trigger::Silence { now: 130_000 }));
    assert_eq!(run.open.as_ref().unwrap().value, Value::Null);
    assert!(
        !run.apply(Raiser::Rule(&r), &Trigger::Silence { now: 200_000 }),
        "raised once"
    );
    run.feed(Raiser::Rule(&r), json!(6), 201, None);
    assert!(run.open.is_none());
    assert_eq!(run.kinds(), [AlarmTransition::Raised, AlarmTransition::Cleared]);
}

#[test]
fn devices_without_the_metadata_key_are_not_evaluated() {
    let r =
        rule(json!({"attributeCode": "load", "severity": "MAJOR", "condition": {"op": ">", "valueFrom": "maxLoad"}}))
            .unwrap();
    let mut run = Run::new();
    assert!(!run.feed(Raiser::Rule(&r), json!(1000), 1, None));
    run.subject.metadata = serde_json::from_value(json!({"maxLoad": 10})).unwrap();
    assert!(run.feed(Raiser::Rule(&r), json!(11), 2, None));
    assert!(run.open.is_some());
}

/// A device's events evaluated together give what they give one at a time: each alarm written
/// once, as it is after the last, with every history entry in order.
#[test]
fn fold_equals_steps_one_by_one() {
    let r = rule(json!({"attributeCode": "wind", "severity": "MAJOR", "condition": {"op": ">", "value": 20}})).unwrap();
    let readings = [(25, 1), (26, 2), (5, 3), (30, 4), (31, 5)];
    let triggers: Vec<Trigger> = readings
        .iter()
        .map(|(v, s)| Trigger::Reading {
            value: json!(v),
            device_time: s * 1000,
            arrival: s * 1000,
            message: Some(MessageKey::of_text(&format!("m{s}"))),
        })
        .collect();
    let mut run = Run::new();
    for t in &triggers {
        run.apply(Raiser::Rule(&r), t);
    }
    let folded = fold(
        Raiser::Rule(&r),
        &run.subject.subject(),
        &AlarmState::default(),
        None,
        &triggers,
    )
    .expect("changes");
    assert_eq!(folded.state, run.state);
    assert_eq!(folded.writes.len(), 2, "the first alarm, cleared, and the second");
    let (first, second) = (&folded.writes[0].alarm, &folded.writes[1].alarm);
    assert_eq!((first.status, first.count), (AlarmStatus::Cleared, 2));
    assert_eq!(
        (second.status, second.count, second.value.clone()),
        (AlarmStatus::Active, 2, json!(31))
    );
    let kinds: Vec<_> = folded
        .writes
        .iter()
        .flat_map(|w| w.history.iter().map(|h| h.kind))
        .collect();
    assert_eq!(kinds, run.kinds());
    assert!(folded.writes.iter().all(|w| w.new), "nothing was open before");
    let again = fold(
        Raiser::Rule(&r),
        &run.subject.subject(),
        &folded.state,
        Some(second),
        &triggers[3..],
    );
    assert!(again.is_none(), "a redelivered message changes nothing");
}

/// What a step remembered, replayed over the state before it, gives the state's remembered
/// messages again, also when the step pushes older ones out of the window.
#[test]
fn what_a_fold_remembered_replays_over_the_state_before() {
    let r = rule(json!({"attributeCode": "wind", "severity": "MAJOR", "condition": {"op": ">", "value": 20}})).unwrap();
    let reading = |s: i64| Trigger::Reading {
        value: json!(25 + s),
        device_time: s * 1000,
        arrival: s * 1000,
        message: Some(MessageKey::of_text(&format!("m{s}"))),
    };
    let subject = subject();
    let mut state = AlarmState::default();
    let mut open = None;
    for batch in [1..4, 4..18, 18..40] {
        let triggers: Vec<Trigger> = batch.map(reading).collect();
        let folded = fold(Raiser::Rule(&r), &subject.subject(), &state, open.as_ref(), &triggers).expect("changes");
        let remembered = folded.state.remembered_since(&state);
        let mut replayed = state.clone();
        replayed.remember(&remembered);
        assert_eq!(replayed.recent, folded.state.recent);
        assert_eq!(remembered.len(), triggers.len().min(16));
        open = folded.writes.last().map(|w| w.alarm.clone());
        state = folded.state;
    }
    assert_eq!(state.recent.len(), 16, "a window of the newest");
}

/// The window keeps the newest messages in order, one at a time or many at once, and a full
/// window takes a new message in place.
#[test]
fn remembering_keeps_the_newest_messages_in_a_window_that_does_not_grow() {
    let keys: Vec<MessageKey> = (0..40).map(MessageKey).collect();
    let mut state = AlarmState::default();
    state.remember(&keys[..16]);
    let capacity = state.recent.capacity();
    for key in &keys[16..24] {
        state.remember(std::slice::from_ref(key));
    }
    assert_eq!(state.recent, keys[8..24]);
    assert_eq!(state.recent.capacity(), capacity, "no reallocation once full");
    state.remember(&keys[24..40]);
    assert_eq!(state.recent, keys[24..40], "many at once push all the older out");
    let mut short = AlarmState::default();
    short.remember(&keys);
    assert_eq!(short.recent, keys[24..40], "more than the window keeps its newest");
}

#[test]
fn message_keys_are_stored_as_the_hex_digits_they_always_were() {
    let key = MessageKey(0x00ab_cdef_0123_4567);
    let stored = serde_json::to_string(&vec![key]).unwrap();
    assert_eq!(stored, r#"["00abcdef01234567"]"#);
    let read: Vec<MessageKey> = serde_json::from_str(&stored).unwrap();
    assert_eq!(read, vec![key]);
    // Anything else a state may hold is still a key, the same one each time.
    assert_eq!(MessageKey::of_text("m1"), MessageKey::of_text("m1"));
    assert_ne!(MessageKey::of_text("m1"), MessageKey::of_text("m2"));
}
