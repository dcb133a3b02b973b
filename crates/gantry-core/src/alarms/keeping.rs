//! Evaluation around the events' commit, where the store writes keeps with the events
//! (`EventStore::keeps_alarms_with_events`): the steps that only count events into an open alarm
//! or move a rule's timers are computed before the commit and committed with the events, so that
//! such a message waits for one durable commit; raises, severity changes and clears are written
//! after it, as everywhere. A keep is not checked against the stored version when it is
//! committed, so every write of a device's alarms on this node waits for the evaluation under
//! way (`DeviceLocks`): nothing moves the device's states between a keep's snapshot and its
//! commit but a rule's change, which moves their versions past the keep's.

use std::sync::{Mutex, Weak};

use tokio::sync::OwnedMutexGuard;

use super::states::{Held, held_after};
use super::*;
use crate::alarm::Transition;
use crate::store::AlarmKeep;
use crate::webhook::Audience;

/// Entries of dropped locks kept at least before they are swept out.
const IDLE_LOCKS: usize = 4096;

/// One lock per device: held by an evaluation from its snapshot until what it computed is
/// durable, by the no-data sweep's step and by an operator's change, so that on this node a
/// device's alarm writes happen one after the other.
#[derive(Default)]
pub(super) struct DeviceLocks {
    locks: Mutex<Locks>,
}

#[derive(Default)]
struct Locks {
    by_device: HashMap<DeviceId, Weak<tokio::sync::Mutex<()>>, foldhash::fast::RandomState>,
    /// The size at which dropped locks are swept out next: twice what the last sweep left.
    sweep_at: usize,
}

impl DeviceLocks {
    pub(super) async fn hold(&self, device: &DeviceId) -> OwnedMutexGuard<()> {
        let lock = {
            let mut locks = self.locks.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
            if locks.by_device.len() >= locks.sweep_at.max(IDLE_LOCKS) {
                locks.by_device.retain(|_, lock| lock.strong_count() > 0);
                locks.sweep_at = locks.by_device.len() * 2;
            }
            match locks.by_device.get(device).and_then(Weak::upgrade) {
                Some(lock) => lock,
                None => {
                    let lock = Arc::new(tokio::sync::Mutex::new(()));
                    locks.by_device.insert(device.clone(), Arc::downgrade(&lock));
                    lock
                }
            }
        };
        lock.lock_owned().await
    }
}

/// That events concern alarms (`AlarmService::concerns`), with their model's rules when the
/// lookup found them.
pub struct Concern(pub(super) Option<Arc<ModelRules>>);

/// What an evaluation computed from its snapshot (`AlarmService::plan`), not yet written.
pub(super) struct Planned {
    pub(super) rules: Arc<ModelRules>,
    /// The device evaluated, as the catalog holds it (`Subject` borrows from it).
    pub(super) device: Arc<Device>,
    pub(super) webhooks: Audience,
    /// The state cache's generation when the snapshot was read.
    pub(super) generation: u64,
    /// The steps still to write, by key.
    pub(super) steps: Vec<(String, Transition)>,
    /// Per step (in `steps` order), the state and open alarm it was computed from.
    pub(super) before: Vec<Held>,
    /// What the store holds of each key whose step went with the events as a keep, once
    /// they are written.
    pub(super) kept: Vec<(String, Held)>,
}

/// An evaluation begun before its events' commit (`AlarmService::begin`); the device's alarm
/// writes wait until it is finished.
pub struct Evaluation {
    _held: OwnedMutexGuard<()>,
    pending: Pending,
    keeps: Vec<AlarmKeep>,
}

/// What `finish` does.
enum Pending {
    /// Evaluate the events then: a store that writes no keeps, or a snapshot that failed.
    EvaluateAfter,
    /// Nothing changes, or only keeps, whose states are held once the events are durable.
    Write(Box<Planned>),
    Nothing,
}

impl Evaluation {
    /// The keeps to commit with the events.
    pub fn take_keeps(&mut self) -> Vec<AlarmKeep> {
        std::mem::take(&mut self.keeps)
    }

    /// Whether `finish` reads the events again: it evaluates them then, or has steps to write
    /// that it may have to compute again over the stored states. Otherwise it may be given none.
    pub fn reads_events_again(&self) -> bool {
        match &self.pending {
            Pending::EvaluateAfter => true,
            Pending::Write(planned) => !planned.steps.is_empty(),
            Pending::Nothing => false,
        }
    }
}

impl AlarmService {
    /// Begins evaluating one device's events before their commit. With `keeping` (the store
    /// writes keeps with events), what only counts into open alarms is computed now and
    /// handed out (`Evaluation::take_keeps`); the rest is written by `finish` once the events
    /// are durable.
    pub async fn begin(&self, events: &[DeviceEvent], concern: Concern, keeping: bool) -> Evaluation {
        let device = match events.first() {
            Some(first) => first.device_id.clone(),
            None => DeviceId::from_string(String::new()),
        };
        let held = self.locks.hold(&device).await;
        let (pending, keeps) = match keeping {
            false => (Pending::EvaluateAfter, Vec::new()),
            true => match self.plan(events, concern.0).await {
                Ok(Some(planned)) => {
                    let (planned, keeps) = keeps_apart(planned);
                    (Pending::Write(Box::new(planned)), keeps)
                }
                Ok(None) => (Pending::Nothing, Vec::new()),
                Err(e) => {
                    tracing::debug!(error = %e, "alarm snapshot failed before the commit; evaluating after it");
                    (Pending::EvaluateAfter, Vec::new())
                }
            },
        };
        Evaluation {
            _held: held,
            pending,
            keeps,
        }
    }

    /// Ends `evaluation` once its events (and keeps) are durable: writes the rest of what it
    /// computed, or evaluates the events now when it computed nothing before.
    pub async fn finish(&self, evaluation: Evaluation, events: &[DeviceEvent]) {
        let result = match evaluation.pending {
            Pending::Write(planned) => self.write_planned(*planned, events).await,
            Pending::EvaluateAfter => self.try_evaluate(events).await,
            Pending::Nothing => Ok(()),
        };
        if let Err(e) = result {
            self.stats.failed.fetch_add(1, Ordering::Relaxed);
            tracing::warn!(error = %e, cause = ?e, "alarm evaluation failed");
        }
    }
}

/// `planned` less its keeps, and the keeps: steps over a stored state that write no new alarm
/// and no history entry (so no transition, and nothing for the stream or the webhooks). A keep's
/// state and alarm move into what the cache holds next, which the keep shares.
fn keeps_apart(mut planned: Planned) -> (Planned, Vec<AlarmKeep>) {
    let mut keeps = Vec::new();
    let mut steps = Vec::new();
    let mut befores = Vec::new();
    let before = std::mem::take(&mut planned.before);
    for ((key, mut transition), before) in std::mem::take(&mut planned.steps).into_iter().zip(before) {
        if !is_keep(&transition) {
            steps.push((key, transition));
            befores.push(before);
            continue;
        }
        let remembered = transition.state.remembered_since(&before.0);
        let last = transition.writes.pop().map(|w| w.alarm);
        let after = held_after(transition.state, last, before.1.as_ref());
        keeps.push(AlarmKeep {
            device: planned.device.id.clone(),
            key: key.clone(),
            after: after.clone(),
            remembered,
        });
        planned.kept.push((key, after));
    }
    planned.steps = steps;
    planned.before = befores;
    (planned, keeps)
}

fn is_keep(transition: &Transition) -> bool {
    transition.state.version > 0
        && transition
            .writes
            .iter()
            .all(|w| !w.new && w.history.is_empty() && w.alarm.status != AlarmStatus::Cleared)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn one_devices_writes_wait_for_each_other_and_no_one_elses() {
        let locks = DeviceLocks::default();
        let (a, b) = (DeviceId::from_string("a"), DeviceId::from_string("b"));
        let held = locks.hold(&a).await;
        let other = tokio::time::timeout(std::time::Duration::from_millis(50), locks.hold(&b)).await;
        assert!(other.is_ok(), "another device's lock is free");
        let same = tokio::time::timeout(std::time::Duration::from_millis(50), locks.hold(&a)).await;
        assert!(same.is_err(), "the device's lock is held");
        drop(held);
        let again = tokio::time::timeout(std::time::Duration::from_millis(50), locks.hold(&a)).await;
        assert!(again.is_ok(), "and free once let go");
    }
}
