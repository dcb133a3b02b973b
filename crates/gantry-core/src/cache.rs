//! A small in-process cache with a time limit, for records read on every request (tokens,
//! devices, models). Writers in this process drop what they change; the time limit bounds how
//! long a change made by another node on the same database can go unseen. Expired entries are
//! dropped as the cache grows (see `Entries::sweep_at`), not only when overwritten.
//!
//! Readers of an entry many requests share (a model, a busy device) use `get_or_reload`: when
//! it expires, one of them reads the store again while the others go on with the expired value,
//! instead of every request in flight reading it at once. A change by another node is then seen
//! within the time limit plus that one read (twice the limit at worst, if the read fails).
//! Each entry lives between half the limit and the whole of it, drawn when it is put: entries
//! put together (a fleet's devices on its first messages) would otherwise all be read again
//! together, every period, a burst of reads that the store's writes queue behind.

use std::collections::HashMap;
use std::hash::Hash;
use std::sync::RwLock;
use std::time::{Duration, Instant};

pub struct TtlCache<K, V> {
    entries: RwLock<Entries<K, V>>,
    ttl: Duration,
}

struct Entries<K, V> {
    map: HashMap<K, Entry<V>>,
    /// The size at which `put` next drops the expired entries: twice what was left after the
    /// last sweep, so that sweeping costs a constant per `put` and the cache stays within twice
    /// the entries used within one time limit (a device that logged in once, or was read once,
    /// is not kept for the life of the process).
    sweep_at: usize,
}

struct Entry<V> {
    value: V,
    /// When it expires.
    until: Instant,
    /// Until when a reader told to load it again (`get_or_reload`) is waited for.
    reloading: Option<Instant>,
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
            .filter(|e| Instant::now() < e.until)
            .map(|e| e.value.clone())
    }

    /// The entry, fresh or while another reader loads it again; None when the caller is to load
    /// it (and `put` it): it is missing, or expired and nobody else is loading it.
    pub fn get_or_reload(&self, key: &K) -> Option<V> {
        let now = Instant::now();
        let served = |e: &Entry<V>| now < e.until || e.reloading.is_some_and(|until| now < until);
        match self.entries.read().expect("cache lock").map.get(key) {
            None => return None,
            Some(e) if served(e) => return Some(e.value.clone()),
            Some(_) => {}
        }
        let mut entries = self.entries.write().expect("cache lock");
        let entry = entries.map.get_mut(key)?;
        // Another reader may have put or taken the reload since the look above.
        if served(entry) {
            return Some(entry.value.clone());
        }
        entry.reloading = Some(now + self.ttl);
        None
    }

    pub fn put(&self, key: K, value: V) {
        let now = Instant::now();
        let until = now + self.ttl.mul_f64(rand::random_range(0.5..=1.0));
        let mut entries = self.entries.write().expect("cache lock");
        entries.map.insert(
            key,
            Entry {
                value,
                until,
                reloading: None,
            },
        );
        if entries.map.len() >= entries.sweep_at {
            entries.map.retain(|_, e| now < e.until);
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
            .retain(|k, e| !stale(k, &e.value));
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
    fn one_reader_reloads_an_expired_entry_while_the_others_keep_it() {
        let cache = TtlCache::new(Duration::from_millis(50));
        assert_eq!(cache.get_or_reload(&"a"), None, "missing: load it");
        cache.put("a", 1);
        assert_eq!(cache.get_or_reload(&"a"), Some(1));
        std::thread::sleep(Duration::from_millis(60));
        assert_eq!(cache.get_or_reload(&"a"), None, "expired: the first reader loads it");
        assert_eq!(cache.get_or_reload(&"a"), Some(1), "the others keep the expired value");
        assert_eq!(cache.get(&"a"), None, "a plain get never serves it expired");
        cache.put("a", 2);
        assert_eq!(cache.get_or_reload(&"a"), Some(2));
        // A reload that never comes back is taken over after another time limit.
        std::thread::sleep(Duration::from_millis(60));
        assert_eq!(cache.get_or_reload(&"a"), None);
        std::thread::sleep(Duration::from_millis(60));
        assert_eq!(
            cache.get_or_reload(&"a"),
            None,
            "the reload was given up: another reader loads it"
        );
        assert_eq!(cache.get_or_reload(&"a"), Some(2));
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
