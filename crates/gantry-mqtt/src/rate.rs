//! Publishes per second per connection: a token bucket per client id holding at most one
//! second's worth, refilled continuously. A device over it is disconnected without a PUBACK for
//! that publish, so its client sends it again once it reconnects: nothing is lost, the flood stops.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Instant;

pub(crate) struct PublishRate {
    per_second: f64,
    buckets: Mutex<HashMap<String, PublishBucket>>,
}

struct PublishBucket {
    tokens: f64,
    at: Instant,
}

impl PublishRate {
    /// `per_second` 0: no limit.
    pub(crate) fn new(per_second: u32) -> Self {
        Self {
            per_second: per_second as f64,
            buckets: Mutex::new(HashMap::new()),
        }
    }

    /// Takes a publish from `client`'s bucket; false when it is empty.
    pub(crate) fn allow(&self, client: &str) -> bool {
        if self.per_second <= 0.0 {
            return true;
        }
        let now = Instant::now();
        let mut buckets = self.buckets.lock().expect("publish rate lock");
        let bucket = match buckets.get_mut(client) {
            Some(bucket) => bucket,
            None => buckets.entry(client.to_owned()).or_insert(PublishBucket {
                tokens: self.per_second,
                at: now,
            }),
        };
        let refill = now.duration_since(bucket.at).as_secs_f64() * self.per_second;
        bucket.tokens = (bucket.tokens + refill).min(self.per_second);
        bucket.at = now;
        if bucket.tokens >= 1.0 {
            bucket.tokens -= 1.0;
            true
        } else {
            false
        }
    }

    /// A new session starts with a full bucket.
    pub(crate) fn reset(&self, client: &str) {
        if self.per_second > 0.0 {
            self.buckets.lock().expect("publish rate lock").remove(client);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_burst_of_one_second_then_the_rate() {
        let rate = PublishRate::new(5);
        assert_eq!((0..10).filter(|_| rate.allow("d")).count(), 5);
        assert!(rate.allow("other"), "each client has its own bucket");
        std::thread::sleep(std::time::Duration::from_millis(450));
        assert_eq!((0..10).filter(|_| rate.allow("d")).count(), 2);
        rate.reset("d");
        assert_eq!((0..10).filter(|_| rate.allow("d")).count(), 5);
        let off = PublishRate::new(0);
        assert!((0..10_000).all(|_| off.allow("d")));
    }
}
