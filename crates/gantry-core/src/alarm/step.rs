//! The one transition function of alarms: given the state and the open alarm as the store holds
//! them, and what happened (a reading, a silence), `step` says what to write; `fold` runs it over
//! one device's events in order.

use serde_json::Value;

use super::{Alarm, AlarmHistoryEntry, Subject};
use crate::alarm_rule::AlarmRule;
use crate::enums::{AlarmSource, AlarmStatus, AlarmTransition, Severity};
use crate::ids::AlarmId;

/// Message ids a state remembers, so that a redelivered message is not counted twice.
const RECENT_MESSAGES: usize = 16;

/// How far the no-data clock may lag behind the last arrival, so that a steady stream of values
/// does not write the state at each one.
const ARRIVAL_STEP_MS: i64 = 1000;

/// What tells a redelivered message from another (`AlarmState::recent`): a 64-bit hash, held as
/// a number so that states are copied without an allocation per message, and stored as the 16
/// hex digits it always was.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct MessageKey(pub u64);

impl MessageKey {
    /// The key hashed from `parts` (the same on every run: the hasher's keys are fixed).
    pub fn hash_of(parts: impl std::hash::Hash) -> MessageKey {
        use std::hash::Hasher;
        let mut hasher = std::collections::hash_map::DefaultHasher::new();
        parts.hash(&mut hasher);
        MessageKey(hasher.finish())
    }

    /// The key of `text`: the number its 16 hex digits spell (as stored), or else its hash.
    pub fn of_text(text: &str) -> MessageKey {
        match u64::from_str_radix(text, 16) {
            Ok(n) if text.len() == 16 => MessageKey(n),
            _ => MessageKey::hash_of(text),
        }
    }
}

impl serde::Serialize for MessageKey {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        // Written without the formatting machinery: every keep's state carries up to 16 of them.
        let mut digits = [0u8; 16];
        hex::encode_to_slice(self.0.to_be_bytes(), &mut digits).map_err(serde::ser::Error::custom)?;
        serializer.serialize_str(std::str::from_utf8(&digits).map_err(serde::ser::Error::custom)?)
    }
}

impl<'de> serde::Deserialize<'de> for MessageKey {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        Ok(MessageKey::of_text(&text))
    }
}

impl AlarmState {
    /// Remembers `messages` (evaluated now, oldest first), forgetting the oldest beyond
    /// `RECENT_MESSAGES`.
    pub fn remember(&mut self, messages: &[MessageKey]) {
        // The oldest go first, so that a full list takes a new message in place, without
        // growing past `RECENT_MESSAGES` (a reallocation on every step that counts).
        let messages = &messages[messages.len().saturating_sub(RECENT_MESSAGES)..];
        let excess = (self.recent.len() + messages.len()).saturating_sub(RECENT_MESSAGES);
        self.recent.drain(..excess);
        self.recent.extend_from_slice(messages);
    }

    /// The messages `self` remembers that `before` did not, oldest first: what a step from
    /// `before` to `self` remembered, since a message is remembered once (a redelivered one
    /// changes nothing). `before.remember(&added)` gives `self.recent` again.
    pub fn remembered_since(&self, before: &AlarmState) -> Vec<MessageKey> {
        self.recent
            .iter()
            .filter(|message| !before.recent.contains(message))
            .copied()
            .collect()
    }
}

/// What a rule (or a device alarm's attribute) keeps per device between events.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct AlarmState {
    /// Device time since which the raise condition holds on every event.
    pub raise_since: Option<i64>,
    /// Device time since which the clear condition holds, while the alarm is open.
    pub clear_since: Option<i64>,
    /// Per escalation, the device time since which its condition holds.
    pub levels: Vec<Option<i64>>,
    /// The newest device time evaluated: an older event is late and moves no timer.
    pub last_time: Option<i64>,
    /// The arrival time of the last value (within `ARRIVAL_STEP_MS`): the no-data clock.
    pub last_arrival: Option<i64>,
    /// Messages evaluated lately.
    pub recent: Vec<MessageKey>,
    /// Whether the open alarm is a no-data alarm.
    pub no_data: bool,
    /// The stored row's version; 0 when there is none yet.
    pub version: i64,
}

/// What raises an alarm.
#[derive(Debug, Clone, Copy)]
pub enum Raiser<'a> {
    Rule(&'a AlarmRule),
    /// A device alarm: the attribute on channel w.
    Device(&'a str),
}

impl Raiser<'_> {
    /// The key of its alarms and its state.
    pub fn key(&self) -> String {
        match self {
            Raiser::Rule(rule) => format!("rule:{}", rule.id),
            Raiser::Device(code) => format!("attribute:{code}"),
        }
    }
}

/// What happened to a device.
#[derive(Debug, Clone)]
pub enum Trigger {
    /// A committed event's value.
    Reading {
        value: Value,
        device_time: i64,
        arrival: i64,
        message: Option<MessageKey>,
    },
    /// The no-data sweep at `now` (arrival time).
    Silence { now: i64 },
}

/// An alarm to write, new or changed, with the history entries of its change.
#[derive(Debug, Clone, PartialEq)]
pub struct AlarmWrite {
    pub alarm: Alarm,
    pub new: bool,
    pub history: Vec<AlarmHistoryEntry>,
}

/// What a step writes: the new state and the alarms it changed, in order.
#[derive(Debug, Clone, PartialEq)]
pub struct Transition {
    pub state: AlarmState,
    pub writes: Vec<AlarmWrite>,
}

/// The transition `trigger` causes from `state` with `open` (the alarm not cleared, if any);
/// None when nothing changes (or the device cannot be evaluated).
pub fn step(
    raiser: Raiser<'_>,
    subject: &Subject<'_>,
    state: &AlarmState,
    open: Option<&Alarm>,
    trigger: &Trigger,
) -> Option<Transition> {
    match (raiser, trigger) {
        (_, Trigger::Reading { message: Some(m), .. }) if state.recent.contains(m) => None,
        (Raiser::Rule(rule), Trigger::Silence { now }) => silence(rule, subject, state, open, *now),
        (Raiser::Device(_), Trigger::Silence { .. }) => None,
        (raiser, Trigger::Reading { .. }) => {
            let mut step = Step::new(raiser, subject, state, open, trigger);
            match raiser {
                Raiser::Rule(rule) => step.rule(rule)?,
                Raiser::Device(code) => step.device(code),
            }
            step.finish()
        }
    }
}

/// A reading's step under way.
struct Step<'a> {
    raiser: Raiser<'a>,
    subject: &'a Subject<'a>,
    before: &'a AlarmState,
    state: AlarmState,
    /// The open alarm as the step found it: copied only by a step that writes it.
    open: Option<&'a Alarm>,
    writes: Vec<AlarmWrite>,
    value: &'a Value,
    time: i64,
    late: bool,
    message: Option<MessageKey>,
}

impl<'a> Step<'a> {
    fn new(
        raiser: Raiser<'a>,
        subject: &'a Subject<'a>,
        before: &'a AlarmState,
        open: Option<&'a Alarm>,
        trigger: &'a Trigger,
    ) -> Self {
        let Trigger::Reading {
            value,
            device_time,
            arrival,
            message,
        } = trigger
        else {
            unreachable!("a step is made of a reading")
        };
        let mut state = before.clone();
        let late = before.last_time.is_some_and(|last| *device_time < last);
        state.last_time = Some(before.last_time.map_or(*device_time, |last| last.max(*device_time)));
        if matches!(raiser, Raiser::Rule(r) if r.no_data_seconds.is_some())
            && before.last_arrival.is_none_or(|last| arrival - last >= ARRIVAL_STEP_MS)
        {
            state.last_arrival = Some(*arrival);
        }
        Step {
            raiser,
            subject,
            before,
            state,
            open,
            writes: Vec::new(),
            value,
            time: *device_time,
            late,
            message: *message,
        }
    }

    /// A device alarm: a value other than false, 0 or "" raises (or keeps) it, one of those clears it.
    fn device(&mut self, code: &str) {
        let raised = !is_off(self.value);
        match self.open.take() {
            Some(alarm) if raised => self.keep(alarm.clone()),
            Some(alarm) if !self.late => self.clear(alarm.clone(), "DEVICE"),
            Some(alarm) => self.open = Some(alarm),
            None if raised && !self.late => self.raise(code, code, Severity::Major, None),
            None => {}
        }
    }

    /// A rule's reading; None when the device cannot be evaluated.
    fn rule(&mut self, rule: &AlarmRule) -> Option<()> {
        let subject = self.subject;
        let metadata = subject.metadata;
        let holds = match &rule.condition {
            Some(condition) => condition.holds(self.value, metadata)?,
            None => false,
        };
        if self.state.no_data {
            self.state.no_data = false;
            if let Some(alarm) = self.open.take() {
                self.clear(alarm.clone(), &format!("rule:{} (data arrived)", rule.id));
            }
        }
        if self.late {
            if let Some(alarm) = self.open.take()
                && holds
            {
                self.keep(alarm.clone());
            }
            return Some(());
        }
        let level = self.levels(rule);
        let Some(open) = self.open.take() else {
            self.maybe_raise(rule, holds, level);
            return Some(());
        };
        let clears = match &rule.clear_condition {
            Some(condition) => condition.holds(self.value, metadata).unwrap_or(false),
            None => !holds,
        };
        if clears {
            let since = *self.state.clear_since.get_or_insert(self.time);
            if self.time - since >= rule.clear_for_seconds * 1000 {
                self.clear(open.clone(), &format!("rule:{}", rule.id));
                return Some(());
            }
        } else {
            self.state.clear_since = None;
        }
        self.state.raise_since = holds.then(|| self.state.raise_since.unwrap_or(self.time));
        let target = level
            .filter(|l| l.rank() > rule.severity.rank())
            .unwrap_or(rule.severity);
        match self.resize(open, target, rule) {
            Some((alarm, entry)) => {
                if holds {
                    self.keep(alarm);
                } else {
                    self.put(alarm);
                }
                let write = self
                    .writes
                    .iter_mut()
                    .find(|w| w.alarm.id == open.id)
                    .expect("just put");
                write.history.push(entry);
            }
            None if holds => self.keep(open.clone()),
            None => {}
        }
        Some(())
    }

    /// The escalation timers after this reading, and the highest level whose timer is run.
    fn levels(&mut self, rule: &AlarmRule) -> Option<Severity> {
        self.state.levels.resize(rule.escalations.len(), None);
        let mut level: Option<Severity> = None;
        for (since, escalation) in self.state.levels.iter_mut().zip(&rule.escalations) {
            let holds = escalation
                .condition
                .holds(self.value, self.subject.metadata)
                .unwrap_or(false);
            *since = holds.then(|| since.unwrap_or(self.time));
            if let Some(since) = since
                && self.time - *since >= escalation.for_seconds * 1000
                && level.is_none_or(|l| escalation.severity.rank() > l.rank())
            {
                level = Some(escalation.severity);
            }
        }
        level
    }

    fn maybe_raise(&mut self, rule: &AlarmRule, holds: bool, level: Option<Severity>) {
        if !holds {
            self.state.raise_since = None;
            return;
        }
        let since = *self.state.raise_since.get_or_insert(self.time);
        if self.time - since >= rule.for_seconds * 1000 {
            self.state.clear_since = None;
            let severity = level
                .filter(|l| l.rank() > rule.severity.rank())
                .unwrap_or(rule.severity);
            self.raise(&rule.name, &rule.attribute_code, severity, Some(rule));
        }
    }

    /// The open alarm with its severity moved to `target`, and the history entry; None when it
    /// is at `target` already.
    fn resize(&mut self, open: &Alarm, target: Severity, rule: &AlarmRule) -> Option<(Alarm, AlarmHistoryEntry)> {
        if open.severity == target {
            return None;
        }
        let mut alarm = open.clone();
        let kind = if target.rank() > alarm.severity.rank() {
            AlarmTransition::Escalated
        } else {
            AlarmTransition::Deescalated
        };
        alarm.severity = target;
        alarm.value = self.value.clone();
        alarm.updated_time = crate::time::now_ms();
        let entry = AlarmHistoryEntry::of(&alarm, kind, &format!("rule:{}", rule.id), alarm.updated_time, None);
        Some((alarm, entry))
    }

    fn raise(&mut self, name: &str, code: &str, severity: Severity, rule: Option<&AlarmRule>) {
        let now = crate::time::now_ms();
        let alarm = new_alarm(
            self.raiser,
            self.subject,
            (name, code),
            severity,
            (self.value, self.time),
            now,
        );
        let by = rule.map_or("DEVICE".to_owned(), |r| format!("rule:{}", r.id));
        let entry = AlarmHistoryEntry::of(&alarm, AlarmTransition::Raised, &by, now, None);
        self.writes.push(AlarmWrite {
            alarm,
            new: true,
            history: vec![entry],
        });
    }

    /// One more event keeps `alarm` raised.
    fn keep(&mut self, mut alarm: Alarm) {
        alarm.count += 1;
        if !self.late {
            alarm.value = self.value.clone();
            alarm.last_event_time = alarm.last_event_time.max(self.time);
        }
        alarm.updated_time = crate::time::now_ms();
        self.put(alarm);
    }

    fn clear(&mut self, mut alarm: Alarm, by: &str) {
        let now = crate::time::now_ms();
        alarm.status = AlarmStatus::Cleared;
        alarm.cleared_by = Some(by.to_owned());
        alarm.cleared_time = Some(now);
        alarm.updated_time = now;
        alarm.value = self.value.clone();
        let entry = AlarmHistoryEntry::of(&alarm, AlarmTransition::Cleared, by, now, None);
        self.state.raise_since = None;
        self.state.clear_since = None;
        self.state.levels.iter_mut().for_each(|l| *l = None);
        self.writes.push(AlarmWrite {
            alarm,
            new: false,
            history: vec![entry],
        });
    }

    /// Writes `alarm` (changed) unless a write of it is pending already, which it then replaces.
    fn put(&mut self, alarm: Alarm) {
        match self.writes.iter_mut().find(|w| w.alarm.id == alarm.id) {
            Some(write) => write.alarm = alarm,
            None => self.writes.push(AlarmWrite {
                alarm,
                new: false,
                history: Vec::new(),
            }),
        }
    }

    fn finish(mut self) -> Option<Transition> {
        if self.writes.is_empty() && same_but_last_time(&self.state, self.before) {
            return None;
        }
        if let Some(message) = self.message.take() {
            self.state.remember(&[message]);
        }
        Some(Transition {
            state: self.state,
            writes: self.writes,
        })
    }
}

/// Whether `a` and `b` differ in their newest device time at most: a step that only moves it
/// writes nothing (the time is written with the next change).
fn same_but_last_time(a: &AlarmState, b: &AlarmState) -> bool {
    let AlarmState {
        raise_since,
        clear_since,
        levels,
        last_time: _,
        last_arrival,
        recent,
        no_data,
        version,
    } = a;
    *raise_since == b.raise_since
        && *clear_since == b.clear_since
        && *levels == b.levels
        && *last_arrival == b.last_arrival
        && *recent == b.recent
        && *no_data == b.no_data
        && *version == b.version
}

/// Whether a value switches a device alarm off: false, 0 or "" (and null).
pub(super) fn is_off(value: &Value) -> bool {
    match value {
        Value::Null => true,
        Value::Bool(b) => !b,
        Value::String(s) => s.is_empty(),
        Value::Number(n) => n.as_f64() == Some(0.0),
        _ => false,
    }
}

/// A no-data alarm when the rule's clock has run out at `now` and nothing is open.
fn silence(
    rule: &AlarmRule,
    subject: &Subject<'_>,
    state: &AlarmState,
    open: Option<&Alarm>,
    now: i64,
) -> Option<Transition> {
    let limit = rule.no_data_seconds?;
    let last = state.last_arrival?;
    if state.no_data || open.is_some() || !rule.enabled || now - last < limit * 1000 {
        return None;
    }
    let name = format!("{}: no data", rule.name);
    let alarm = new_alarm(
        Raiser::Rule(rule),
        subject,
        (&name, &rule.attribute_code),
        rule.severity,
        (&Value::Null, now),
        now,
    );
    let entry = AlarmHistoryEntry::of(&alarm, AlarmTransition::Raised, &format!("rule:{}", rule.id), now, None);
    let mut state = state.clone();
    state.no_data = true;
    state.raise_since = None;
    state.clear_since = None;
    Some(Transition {
        state,
        writes: vec![AlarmWrite {
            alarm,
            new: true,
            history: vec![entry],
        }],
    })
}

fn new_alarm(
    raiser: Raiser<'_>,
    subject: &Subject<'_>,
    (name, code): (&str, &str),
    severity: Severity,
    (value, time): (&Value, i64),
    now: i64,
) -> Alarm {
    let (rule_id, source) = match raiser {
        Raiser::Rule(rule) => (Some(rule.id.clone()), AlarmSource::Rule),
        Raiser::Device(_) => (None, AlarmSource::Device),
    };
    Alarm {
        id: AlarmId::generate(),
        tenant_id: subject.tenant.clone(),
        project_id: subject.project.clone(),
        device_id: subject.device.clone(),
        device_name: subject.device_name.to_owned(),
        rule_id,
        alarm_key: raiser.key(),
        attribute_code: code.to_owned(),
        name: name.to_owned(),
        severity,
        status: AlarmStatus::Active,
        source,
        first_event_time: time,
        last_event_time: time,
        value: value.clone(),
        count: 1,
        acknowledged_by: None,
        acknowledged_time: None,
        cleared_by: None,
        cleared_time: None,
        created_time: now,
        updated_time: now,
    }
}

/// Runs `step` over `triggers` in order, from `state` with `open`, as one transition: the state
/// after the last, and each alarm written once, as it is after all of them, with all its
/// history entries. None when none of them changes anything. A device's events committed
/// together are evaluated so, and written in one go.
pub fn fold(
    raiser: Raiser<'_>,
    subject: &Subject<'_>,
    state: &AlarmState,
    open: Option<&Alarm>,
    triggers: &[Trigger],
) -> Option<Transition> {
    // One trigger (one value of the attribute in a message) is one step: its writes are
    // distinct alarms already.
    if let [trigger] = triggers {
        return step(raiser, subject, state, open, trigger);
    }
    let mut state = state.clone();
    let mut open = open.cloned();
    let mut writes: Vec<AlarmWrite> = Vec::new();
    let mut changed = false;
    for trigger in triggers {
        let Some(transition) = step(raiser, subject, &state, open.as_ref(), trigger) else {
            continue;
        };
        changed = true;
        state = transition.state;
        for write in transition.writes {
            if write.alarm.status != AlarmStatus::Cleared {
                open = Some(write.alarm.clone());
            } else if open.as_ref().is_some_and(|o| o.id == write.alarm.id) {
                open = None;
            }
            match writes.iter_mut().find(|w| w.alarm.id == write.alarm.id) {
                Some(pending) => {
                    pending.alarm = write.alarm;
                    pending.history.extend(write.history);
                }
                None => writes.push(write),
            }
        }
    }
    changed.then_some(Transition { state, writes })
}
