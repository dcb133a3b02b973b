//! Per-token rate limiting: a token bucket per bearer token, so one runaway client cannot
//! starve the others. Over the limit is 429.

use std::collections::HashMap;
use std::hash::{BuildHasher, RandomState};
use std::sync::Mutex;
use std::time::Instant;

const SHARDS: usize = 16;

struct RequestBucket {
    tokens: f64,
    last: Instant,
}

/// Requests per second per token, with a burst of twice that.
pub struct RateLimiter {
    rate: f64,
    burst: f64,
    hasher: RandomState,
    shards: Vec<Mutex<HashMap<String, RequestBucket>>>,
}

impl RateLimiter {
    pub fn new(per_second: u32) -> Self {
        let rate = f64::from(per_second);
        Self {
            rate,
            burst: rate * 2.0,
            hasher: RandomState::new(),
            shards: (0..SHARDS).map(|_| Mutex::default()).collect(),
        }
    }

    /// Takes one request from `key`'s bucket; false when it is empty.
    pub fn allow(&self, key: &str) -> bool {
        self.allow_at(key, Instant::now())
    }

    fn allow_at(&self, key: &str, now: Instant) -> bool {
        let mut shard = self.shards[self.hasher.hash_one(key) as usize % SHARDS]
            .lock()
            .expect("rate limiter lock");
        let bucket = shard.entry(key.to_owned()).or_insert(RequestBucket {
            tokens: self.burst,
            last: now,
        });
        let elapsed = now.saturating_duration_since(bucket.last).as_secs_f64();
        bucket.tokens = (bucket.tokens + elapsed * self.rate).min(self.burst);
        bucket.last = now;
        if bucket.tokens >= 1.0 {
            bucket.tokens -= 1.0;
            true
        } else {
            false
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn bursts_then_refills_per_key() {
        let limiter = RateLimiter::new(10);
        let t0 = Instant::now();
        assert_eq!(
            (0..25).filter(|_| limiter.allow_at("a", t0)).count(),
            20,
            "a burst of twice the rate"
        );
        assert!(limiter.allow_at("b", t0), "keys have their own buckets");
        assert!(!limiter.allow_at("a", t0));
        assert!(
            limiter.allow_at("a", t0 + Duration::from_millis(150)),
            "refilled at 10/s"
        );
        assert_eq!(
            (0..5)
                .filter(|_| limiter.allow_at("a", t0 + Duration::from_secs(1)))
                .count(),
            5
        );
    }

    #[test]
    fn a_steady_client_under_the_rate_is_never_refused() {
        let limiter = RateLimiter::new(1000);
        let t0 = Instant::now();
        assert!((0..5000).all(|i| limiter.allow_at("k", t0 + Duration::from_micros(1000 * i))));
    }
}
