//! The alarm states and open alarms this node last read or wrote, per device and key, so that
//! evaluating an event reads nothing from the store. On only where this node is the one that
//! evaluates its devices' events (the embedded broker); with an external broker, where several
//! nodes share the devices, every evaluation reads the store.
//!
//! The cache never decides alone: each plan is written over the state version it was computed
//! from, so a plan made from an entry that is out of date fails and goes the locked way. What
//! must never happen is an entry older than the store from which "nothing changes" is computed,
//! since nothing is then written, so nothing is checked. Hence: an entry is put only when no
//! change outside the plans (an operator's action, a rule's change, the locked path) was made
//! since the caller read what it puts (a generation that every such change moves, after its
//! commit), and never over an entry of a newer version. A put refused for that reason drops the
//! entries of its keys instead: its caller may have written past them (a keep is committed
//! unchecked), and an entry left behind would be older than the store.

use std::collections::HashMap;
use std::collections::hash_map::Entry;
use std::hash::BuildHasher;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use foldhash::fast::RandomState;

use crate::alarm::{Alarm, AlarmState};
use crate::enums::AlarmStatus;
use crate::ids::DeviceId;

/// Entries held at most; past it a shard starts empty again.
const MAX_ENTRIES: usize = 200_000;
/// Devices are spread over this many locks, so that evaluations of different devices on
/// different threads seldom wait for each other.
const SHARDS: usize = 16;

/// A key's state and its open alarm, as the store holds them; shared, so that a lookup copies
/// nothing.
pub(super) type Held = Arc<(AlarmState, Option<Alarm>)>;

/// What the store holds for a key once a transition is written over `open`: `state` (the
/// transition's) one version on, and the alarm left open, given `last`, the transition's last
/// alarm written.
pub(super) fn held_after(mut state: AlarmState, last: Option<Alarm>, open: Option<&Alarm>) -> Held {
    state.version += 1;
    let open = match last {
        Some(alarm) if alarm.status == AlarmStatus::Cleared => None,
        Some(alarm) => Some(alarm),
        None => open.cloned(),
    };
    Arc::new((state, open))
}

#[derive(Default)]
pub(super) struct StateCache {
    on: AtomicBool,
    /// Moved by every change made outside the plans, before the change's entries are dropped;
    /// a `put` compares it under its shard's lock.
    generation: AtomicU64,
    shards: [Mutex<Shard>; SHARDS],
    hasher: RandomState,
}

#[derive(Default)]
struct Shard {
    /// Per device, per key: a lookup borrows both, allocating nothing.
    map: HashMap<DeviceId, HashMap<String, Held, RandomState>, RandomState>,
    /// Entries in `map`.
    entries: usize,
}

impl StateCache {
    pub(super) fn set_on(&self, on: bool) {
        self.on.store(on, Ordering::Relaxed);
        self.forget_all();
    }

    /// The generation to give `put`: read it before reading the store.
    pub(super) fn generation(&self) -> u64 {
        self.generation.load(Ordering::SeqCst)
    }

    /// What is held for each of `keys` (None where nothing is, or the cache is off).
    pub(super) fn get(&self, device: &DeviceId, keys: &[impl AsRef<str>]) -> Vec<Option<Held>> {
        if !self.on.load(Ordering::Relaxed) {
            return vec![None; keys.len()];
        }
        let shard = self.shard(device);
        let held = shard.map.get(device);
        keys.iter()
            .map(|key| held.and_then(|h| h.get(key.as_ref())).cloned())
            .collect()
    }

    /// Holds what was read or written at `generation`, unless a newer version is held. When
    /// something changed since, it drops what it holds for those keys instead: the caller read
    /// them before the change and may have written past them since, so they are out of date.
    pub(super) fn put(&self, generation: u64, device: &DeviceId, entries: impl IntoIterator<Item = (String, Held)>) {
        if !self.on.load(Ordering::Relaxed) {
            return;
        }
        let mut shard = self.shard(device);
        let shard = &mut *shard;
        if self.generation.load(Ordering::SeqCst) != generation {
            for (key, _) in entries {
                shard.remove(device, &key);
            }
            return;
        }
        if shard.entries >= MAX_ENTRIES / SHARDS {
            shard.map.clear();
            shard.entries = 0;
        }
        // The device's id is copied only for its first entry.
        if !shard.map.contains_key(device) {
            shard.map.insert(device.clone(), HashMap::default());
        }
        let by_key = shard.map.get_mut(device).expect("inserted above");
        for (key, held) in entries {
            match by_key.entry(key) {
                Entry::Occupied(mut e) if e.get().0.version < held.0.version => {
                    e.insert(held);
                }
                Entry::Occupied(_) => {}
                Entry::Vacant(e) => {
                    e.insert(held);
                    shard.entries += 1;
                }
            }
        }
    }

    /// Drops what is held for `key` of `device` (of every device when None): call it after a
    /// change made outside the plans is committed.
    pub(super) fn forget(&self, device: Option<&DeviceId>, key: &str) {
        // Moved before any shard is swept: a put that compares after this refuses, and one
        // that compared before has put under its shard's lock, before the sweep takes it.
        self.generation.fetch_add(1, Ordering::SeqCst);
        match device {
            Some(device) => self.shard(device).remove(device, key),
            None => {
                for shard in &self.shards {
                    let mut shard = lock(shard);
                    let shard = &mut *shard;
                    for by_key in shard.map.values_mut() {
                        shard.entries -= usize::from(by_key.remove(key).is_some());
                    }
                }
            }
        }
    }

    fn forget_all(&self) {
        self.generation.fetch_add(1, Ordering::SeqCst);
        for shard in &self.shards {
            let mut shard = lock(shard);
            shard.map.clear();
            shard.entries = 0;
        }
    }

    fn shard(&self, device: &DeviceId) -> std::sync::MutexGuard<'_, Shard> {
        let at = self.hasher.hash_one(device.as_str()) as usize % SHARDS;
        lock(&self.shards[at])
    }
}

impl Shard {
    /// Drops what is held for `key` of `device`.
    fn remove(&mut self, device: &DeviceId, key: &str) {
        if let Some(by_key) = self.map.get_mut(device) {
            self.entries -= usize::from(by_key.remove(key).is_some());
        }
    }
}

fn lock(shard: &Mutex<Shard>) -> std::sync::MutexGuard<'_, Shard> {
    shard.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn held(version: i64) -> Held {
        let state = AlarmState {
            version,
            ..AlarmState::default()
        };
        Arc::new((state, None))
    }

    fn cache() -> StateCache {
        let cache = StateCache::default();
        cache.set_on(true);
        cache
    }

    #[test]
    fn a_put_after_a_change_is_refused() {
        let (cache, device) = (cache(), DeviceId::from_string("d"));
        let read_at = cache.generation();
        cache.forget(Some(&device), "rule:r");
        cache.put(read_at, &device, [("rule:r".to_owned(), held(3))]);
        assert_eq!(cache.get(&device, &["rule:r".to_owned()]), vec![None]);
        let now = cache.generation();
        cache.put(now, &device, [("rule:r".to_owned(), held(4))]);
        assert_eq!(
            cache.get(&device, &["rule:r".to_owned()])[0]
                .as_ref()
                .map(|h| h.0.version),
            Some(4)
        );
    }

    #[test]
    fn a_put_refused_drops_what_was_held_for_its_keys() {
        let (cache, device, other) = (cache(), DeviceId::from_string("d"), DeviceId::from_string("o"));
        let at = cache.generation();
        cache.put(at, &device, [("k".to_owned(), held(3)), ("j".to_owned(), held(3))]);
        // An evaluation read version 3 and wrote past it; meanwhile another device changed.
        let read_at = cache.generation();
        cache.forget(Some(&other), "k");
        cache.put(read_at, &device, [("k".to_owned(), held(4))]);
        assert_eq!(
            cache.get(&device, &["k".to_owned()]),
            vec![None],
            "version 3 is out of date"
        );
        assert!(
            cache.get(&device, &["j".to_owned()])[0].is_some(),
            "a key not put is kept"
        );
    }

    #[test]
    fn an_older_version_never_replaces_a_newer_one() {
        let (cache, device) = (cache(), DeviceId::from_string("d"));
        let at = cache.generation();
        cache.put(at, &device, [("k".to_owned(), held(5))]);
        cache.put(at, &device, [("k".to_owned(), held(4))]);
        assert_eq!(
            cache.get(&device, &["k".to_owned()])[0].as_ref().map(|h| h.0.version),
            Some(5)
        );
    }

    #[test]
    fn forgetting_a_key_drops_it_for_every_device_and_off_holds_nothing() {
        let (cache, a, b) = (cache(), DeviceId::from_string("a"), DeviceId::from_string("b"));
        let at = cache.generation();
        cache.put(at, &a, [("k".to_owned(), held(1)), ("j".to_owned(), held(1))]);
        cache.put(at, &b, [("k".to_owned(), held(1))]);
        cache.forget(None, "k");
        assert_eq!(cache.get(&a, &["k".to_owned()]), vec![None]);
        assert_eq!(cache.get(&b, &["k".to_owned()]), vec![None]);
        assert!(cache.get(&a, &["j".to_owned()])[0].is_some());
        cache.set_on(false);
        let at = cache.generation();
        cache.put(at, &a, [("j".to_owned(), held(2))]);
        assert_eq!(cache.get(&a, &["j".to_owned()]), vec![None]);
    }
}
