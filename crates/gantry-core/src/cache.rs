//! A small in-process cache with a time limit, for records read on every request (tokens,
//! devices, models). Writers in this process drop what they change; the time limit bounds how
//! long a change made by another node on the same database can go unseen.

use std::collections::HashMap;
use std::hash::Hash;
use std::sync::RwLock;
use std::time::{Duration, Instant};

pub struct TtlCache<K, V> {
    entries: RwLock<HashMap<K, (V, Instant)>>,
    ttl: Duration,
}

impl<K: Eq + Hash, V: Clone> TtlCache<K, V> {
    pub fn new(ttl: Duration) -> Self {
        Self {
            entries: RwLock::default(),
            ttl,
        }
    }

    pub fn ttl(&self) -> Duration {
        self.ttl
    }

    pub fn get(&self, key: &K) -> Option<V> {
        let entries = self.entries.read().expect("cache lock");
        entries
            .get(key)
            .filter(|(_, at)| at.elapsed() < self.ttl)
            .map(|(v, _)| v.clone())
    }

    pub fn put(&self, key: K, value: V) {
        self.entries
            .write()
            .expect("cache lock")
            .insert(key, (value, Instant::now()));
    }

    pub fn remove(&self, key: &K) {
        self.entries.write().expect("cache lock").remove(key);
    }

    /// Drops the entries `stale` selects.
    pub fn forget(&self, stale: impl Fn(&K, &V) -> bool) {
        self.entries
            .write()
            .expect("cache lock")
            .retain(|k, (v, _)| !stale(k, v));
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
}
