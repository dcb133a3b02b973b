//! A small in-process cache with a time limit, for records read on every request (tokens,
//! devices, models). Writers in this process drop what they change; the time limit bounds how
//! long a change made by another node on the same database can go unseen. Expired entries are
//! dropped as the cache grows (see `Entries::sweep_at`), not only when overwritten.

use std::collections::HashMap;
use std::hash::Hash;
use std::sync::RwLock;
use std::time::{Duration, Instant};

pub struct TtlCache<K, V> {
    entries: RwLock<Entries<K, V>>,
    ttl: Duration,
}

struct Entries<K, V> {
    map: HashMap<K, (V, Instant)>,
    /// The size at which `put` next drops the expired entries: twice what was left after the
    /// last sweep, so that sweeping costs a constant per `put` and the cache stays within twice
    /// the entries used within one time limit (a device that logged in once, or was read once,
    /// is not kept for the life of the process).
    sweep_at: usize,
}

/// Below this many entries a cache is not swept.
const MIN_SWEEP: usize = 1024;

impl<K: Eq + Hash, V: Clone> TtlCache<K, V> {
    pub fn new(ttl: Duration) -> Self {
        Self {
            entries: RwLock::new(Entries {
                map: HashMap::new(),
                sweep_at: MIN_SWEEP,
            }),
            ttl,
        }
    }

    pub fn ttl(&self) -> Duration {
        self.ttl
    }

    pub fn get(&self, key: &K) -> Option<V> {
        let entries = self.entries.read().expect("cache lock");
        entries
            .map
            .get(key)
            .filter(|(_, at)| self.fresh(*at, Instant::now()))
            .map(|(v, _)| v.clone())
    }

    /// Whether an entry put at `at` is still within the time limit at `now`.
    fn fresh(&self, at: Instant, now: Instant) -> bool {
        now.duration_since(at) < self.ttl
    }

    pub fn put(&self, key: K, value: V) {
        let now = Instant::now();
        let mut entries = self.entries.write().expect("cache lock");
        entries.map.insert(key, (value, now));
        if entries.map.len() >= entries.sweep_at {
            entries.map.retain(|_, (_, at)| self.fresh(*at, now));
            let left = entries.map.len();
            entries.map.shrink_to(2 * left);
            entries.sweep_at = (2 * left).max(MIN_SWEEP);
        }
    }

    pub fn remove(&self, key: &K) {
        self.entries.write().expect("cache lock").map.remove(key);
    }

    /// Drops the entries `stale` selects.
    pub fn forget(&self, stale: impl Fn(&K, &V) -> bool) {
        self.entries
            .write()
            .expect("cache lock")
            .map
            .retain(|k, (v, _)| !stale(k, v));
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.entries.read().expect("cache lock").map.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_expire_and_can_be_dropped() {
        let cache = TtlCache::new(Duration::from_millis(50));
        cache.put("a", 1);
        cache.put("b", 2);
        assert_eq!(cache.get(&"a"), Some(1));
        cache.forget(|_, v| *v == 1);
        assert_eq!(cache.get(&"a"), None);
        assert_eq!(cache.get(&"b"), Some(2));
        std::thread::sleep(Duration::from_millis(60));
        assert_eq!(cache.get(&"b"), None);
    }

    #[test]
    fn expired_entries_are_dropped_as_the_cache_grows() {
        let cache = TtlCache::new(Duration::from_millis(50));
        for i in 0..MIN_SWEEP - 1 {
            cache.put(i, i);
        }
        std::thread::sleep(Duration::from_millis(60));
        // The put that reaches the sweep size drops what expired and keeps itself.
        cache.put(MIN_SWEEP, 7);
        assert_eq!(cache.len(), 1);
        assert_eq!(cache.get(&MIN_SWEEP), Some(7));
    }

    #[test]
    fn a_sweep_keeps_the_live_entries() {
        let cache = TtlCache::new(Duration::from_secs(60));
        for i in 0..MIN_SWEEP {
            cache.put(i, i);
        }
        assert_eq!(cache.len(), MIN_SWEEP);
        assert!((0..MIN_SWEEP).all(|i| cache.get(&i) == Some(i)));
        for i in MIN_SWEEP..2 * MIN_SWEEP {
            cache.put(i, i);
        }
        assert_eq!(cache.len(), 2 * MIN_SWEEP);
    }
}
