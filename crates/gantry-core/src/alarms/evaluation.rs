//! Where alarms are raised: committed events through the rules of their device's model (and
//! channel w), and the no-data sweep.

use std::time::Duration;

use super::keeping::Planned;
use super::states::{Held, held_after};
use super::*;
use crate::alarm::{AlarmState, MessageKey, fold};
use crate::store::AlarmPlan;
use crate::webhook::Audience;

/// How often the no-data sweep looks for devices gone quiet.
pub const NO_DATA_SWEEP: Duration = Duration::from_secs(1);

impl AlarmService {
    /// Whether any of `events` (one device's) may change an alarm: a cache lookup, so that
    /// ingest pays nothing more for models without rules. The rules found go on to `begin`.
    /// A lookup that fails concerns alarms (the evaluation reads the rules again): it must not
    /// refuse the events.
    pub async fn concerns(&self, events: &[DeviceEvent]) -> Option<Concern> {
        let first = events.first()?;
        match self.model_rules(&first.tenant_id, &first.model_id).await {
            Ok(rules) if events.iter().any(|e| rules.concern(e)) => Some(Concern(Some(rules))),
            Ok(_) => None,
            Err(_) => Some(Concern(None)),
        }
    }

    /// Evaluates one device's committed events and writes what they change (the device's alarm
    /// writes held by the caller: `keeping.rs`).
    pub(super) async fn try_evaluate(&self, events: &[DeviceEvent]) -> Result<()> {
        match self.plan(events, None).await? {
            Some(planned) => self.write_planned(planned, events).await,
            None => Ok(()),
        }
    }

    /// What `events` (one device's) change, computed from the snapshot of their keys, unwritten;
    /// None when they change nothing. `rules` are their model's, when the caller has them.
    pub(super) async fn plan(&self, events: &[DeviceEvent], rules: Option<Arc<ModelRules>>) -> Result<Option<Planned>> {
        let Some(first) = events.first() else {
            return Ok(None);
        };
        let rules = match rules {
            Some(rules) => rules,
            None => self.model_rules(&first.tenant_id, &first.model_id).await?,
        };
        let (raisers, keys) = raisers_of(&rules, events);
        if raisers.is_empty() {
            return Ok(None);
        }
        let device = self.catalog.load_device(&first.tenant_id, &first.device_id).await?;
        let subject = Subject::of(&device);
        let webhooks = self.webhooks.subscribers(&first.project_id, StreamType::Alarm).await?;
        let generation = self.states.generation();
        let snapshot = self.snapshot(&device.id, &keys, generation).await?;
        let mut steps = Vec::new();
        let mut before = Vec::new();
        for (((raiser, triggers), key), held) in raisers.iter().zip(keys).zip(snapshot) {
            let (state, open) = &*held;
            if let Some(transition) = fold(*raiser, &subject, state, open.as_ref(), triggers) {
                steps.push((key.into_owned(), transition));
                before.push(held);
            }
        }
        if steps.is_empty() {
            return Ok(None);
        }
        drop(raisers);
        Ok(Some(Planned {
            rules,
            device,
            webhooks,
            generation,
            steps,
            before,
            kept: Vec::new(),
        }))
    }

    /// Writes what `plan` computed for `events` but its keeps (committed with the events
    /// already), and holds the states it leaves.
    pub(super) async fn write_planned(&self, planned: Planned, events: &[DeviceEvent]) -> Result<()> {
        let Planned {
            rules,
            device,
            webhooks,
            generation,
            steps,
            before,
            kept,
        } = planned;
        if steps.is_empty() {
            self.states.put(generation, &device.id, kept);
            return Ok(());
        }
        let after: Vec<(String, Held)> = steps
            .iter()
            .zip(&before)
            .map(|((key, t), before)| {
                let last = t.writes.last().map(|w| w.alarm.clone());
                (key.clone(), held_after(t.state.clone(), last, before.1.as_ref()))
            })
            .collect();
        let plan = AlarmPlan {
            tenant: device.record.tenant_id.clone(),
            device: device.id.clone(),
            steps,
            webhooks,
        };
        if let Some(written) = self.writer.commit(plan).await {
            let held = with_stored(after, &written).into_iter().chain(kept);
            self.states.put(generation, &device.id, held);
            self.announce_writes(&written, webhooks);
            return Ok(());
        }
        // The snapshot was out of date: each key again, over the state the store holds (the
        // keeps written with the events are part of it).
        self.states.put(generation, &device.id, kept);
        let subject = Subject::of(&device);
        let (raisers, keys) = raisers_of(&rules, events);
        for ((raiser, triggers), key) in raisers.into_iter().zip(keys) {
            if after.iter().any(|(k, _)| *k == key) {
                self.apply(raiser, &subject, &triggers, webhooks).await?;
            }
        }
        Ok(())
    }

    /// The states and open alarms of `keys`: those this node holds, the others read from the
    /// store in one query (and held from now on).
    async fn snapshot(&self, device: &DeviceId, keys: &[Key<'_>], generation: u64) -> Result<Vec<Held>> {
        let mut held = self.states.get(device, keys);
        let missing: Vec<String> = keys
            .iter()
            .zip(&held)
            .filter(|(_, h)| h.is_none())
            .map(|(k, _)| k.to_string())
            .collect();
        if missing.is_empty() {
            return Ok(held.into_iter().flatten().collect());
        }
        let read: Vec<Held> = self
            .store
            .alarm_snapshot(device, &missing)
            .await?
            .into_iter()
            .map(Arc::new)
            .collect();
        self.states
            .put(generation, device, missing.iter().cloned().zip(read.iter().cloned()));
        let mut read = read.into_iter();
        Ok(held
            .iter_mut()
            .map(|h| h.take().or_else(|| read.next()).unwrap_or_default())
            .collect())
    }

    /// Raises no-data alarms whose clock ran out at `now`; returns how many.
    pub async fn sweep_no_data(&self, now: i64) -> Result<usize> {
        let mut raised = 0;
        for rule in self.store.no_data_rules().await? {
            let limit = rule.no_data_seconds.unwrap_or_default() * 1000;
            for device in self.store.silent_devices(&rule, now - limit).await? {
                let device = match self.catalog.load_device(&rule.record.tenant_id, &device).await {
                    Ok(device) if device.model_id == rule.model_id => device,
                    Ok(_) | Err(Error::NotFound { .. }) => continue,
                    Err(e) => return Err(e),
                };
                let webhooks = self.webhooks.subscribers(&device.project_id, StreamType::Alarm).await?;
                let subject = Subject::of(&device);
                let silence = [Trigger::Silence { now }];
                let _held = self.locks.hold(&device.id).await;
                raised += self.apply(Raiser::Rule(&rule), &subject, &silence, webhooks).await?;
            }
        }
        Ok(raised)
    }

    /// Runs `triggers` through the store's locked step and announces what it wrote; returns
    /// how many transitions.
    async fn apply(
        &self,
        raiser: Raiser<'_>,
        subject: &Subject<'_>,
        triggers: &[Trigger],
        webhooks: Audience,
    ) -> Result<usize> {
        let run = |state: &AlarmState, open: Option<&Alarm>| fold(raiser, subject, state, open, triggers);
        let key = raiser.key();
        let written = self
            .store
            .apply_alarm_step(subject.tenant, subject.device, &key, &run, webhooks)
            .await;
        self.states.forget(Some(subject.device), &key);
        Ok(self.announce_writes(&written?, webhooks))
    }

    fn announce_writes(&self, written: &[AlarmWrite], webhooks: Audience) -> usize {
        let mut transitions = 0;
        for write in written {
            for entry in &write.history {
                self.announce(&write.alarm, entry.kind);
                transitions += 1;
            }
        }
        if transitions > 0 && !webhooks.is_empty() {
            self.webhooks.wake();
        }
        transitions
    }

    /// A transition of `alarm`: counted, and pushed on its project's stream.
    pub(super) fn announce(&self, alarm: &Alarm, kind: AlarmTransition) {
        self.stats.count(kind);
        self.feeds
            .publish(&alarm.project_id, StreamType::Alarm, &alarm.device_id, || {
                serde_json::to_string(alarm).unwrap_or_default()
            });
    }
}

/// A raiser's key: a rule's is borrowed from its model's rules, copied only for a step.
type Key<'a> = std::borrow::Cow<'a, str>;

/// Each enabled rule on an attribute of `events`, then each device alarm's attribute (channel
/// w), with the readings that concern it, in the events' order; and the key of each.
fn raisers_of<'a>(rules: &'a ModelRules, events: &'a [DeviceEvent]) -> (Vec<(Raiser<'a>, Vec<Trigger>)>, Vec<Key<'a>>) {
    // Each event read is made a reading once (its message key hashed once), however many
    // rules read it.
    let read: Vec<Option<Trigger>> = events.iter().map(|e| rules.concern(e).then(|| reading(e))).collect();
    let readings = |code: &str, device_alarm: bool| -> Vec<Trigger> {
        events
            .iter()
            .zip(&read)
            .filter(|(e, _)| e.attribute_code == code && (!device_alarm || e.channel == Channel::W))
            .filter_map(|(_, reading)| reading.clone())
            .collect()
    };
    let (mut raisers, mut keys): (Vec<(Raiser<'a>, Vec<Trigger>)>, Vec<Key<'a>>) = rules
        .enabled()
        .filter(|(r, _)| events.iter().any(|e| e.attribute_code == r.attribute_code))
        .map(|(r, key)| {
            (
                (Raiser::Rule(r), readings(&r.attribute_code, false)),
                Key::Borrowed(key.as_str()),
            )
        })
        .unzip();
    let mut codes: Vec<&str> = events
        .iter()
        .filter(|e| e.channel == Channel::W)
        .map(|e| e.attribute_code.as_str())
        .collect();
    codes.sort_unstable();
    codes.dedup();
    for code in codes {
        let raiser = Raiser::Device(code);
        keys.push(Key::Owned(raiser.key()));
        raisers.push((raiser, readings(code, true)));
    }
    (raisers, keys)
}

fn reading(event: &DeviceEvent) -> Trigger {
    Trigger::Reading {
        value: event.attribute_data.clone(),
        device_time: event.device_timestamp,
        arrival: event.ingress_time_stamp,
        message: event.correlation_id.as_deref().map(|id| message_key(id, event)),
    }
}

/// What tells a redelivered message from another: its id, device time and value (a REST client
/// may send one correlationId with every event).
fn message_key(id: &str, event: &DeviceEvent) -> MessageKey {
    MessageKey::hash_of((id, event.device_timestamp, event.attribute_data.to_string()))
}

/// `after` with each open alarm as the store wrote it (a new alarm may have met one another
/// writer opened, which the store then kept and counted instead).
fn with_stored(after: Vec<(String, Held)>, written: &[AlarmWrite]) -> Vec<(String, Held)> {
    after
        .into_iter()
        .map(|(key, held)| {
            let open = match written.iter().rev().find(|w| w.alarm.alarm_key == key) {
                Some(w) if w.alarm.status == AlarmStatus::Cleared => None,
                Some(w) => Some(w.alarm.clone()),
                None => return (key, held),
            };
            let (state, _) = Arc::unwrap_or_clone(held);
            (key, Arc::new((state, open)))
        })
        .collect()
}
