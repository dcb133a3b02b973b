//! Brute-force protection shared by HTTP and MQTT: an address with too many failed logins within
//! a window is refused for a while without its credentials being checked. Only failures count, so
//! a fleet of devices behind one NAT address is never locked out by its own successful logins.
//!
//! An MQTT login is counted before its check (`attempt`): failures plus checks in flight never
//! exceed the limit, so a burst of concurrent CONNECTs cannot have more passwords checked than
//! the limit before the ban falls. Attempts past it wait for those in flight to end.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

/// How many failures within `window` start a ban of `ban`; a zero `ban` turns the guard off.
#[derive(Debug, Clone, Copy)]
pub struct LoginGuardConfig {
    pub failures: u32,
    pub window: Duration,
    pub ban: Duration,
}

impl Default for LoginGuardConfig {
    fn default() -> Self {
        Self {
            failures: 10,
            window: Duration::from_secs(60),
            ban: Duration::from_secs(60),
        }
    }
}

/// The addresses that failed lately.
pub struct LoginGuard {
    config: LoginGuardConfig,
    entries: Mutex<HashMap<IpAddr, Entry>>,
    /// Told when an attempt ends, for the attempts waiting for room under the limit.
    ended: tokio::sync::Notify,
    /// The map's size, read without the lock: while no address has failed (the usual case) a
    /// login pays an atomic load and nothing else.
    tracked: AtomicUsize,
    pub stats: GuardStats,
}

#[derive(Debug, Default)]
pub struct GuardStats {
    /// Failed logins counted (HTTP 401s and refused MQTT CONNECTs).
    pub failures: AtomicU64,
    /// Bans started.
    pub bans: AtomicU64,
    /// Login attempts refused because their address was banned.
    pub refused_banned: AtomicU64,
}

struct Entry {
    window_start: Instant,
    failures: u32,
    banned_until: Option<Instant>,
    /// Checks under way (`Attempt`s not yet ended).
    in_flight: u32,
}

impl Entry {
    fn new(now: Instant) -> Self {
        Self {
            window_start: now,
            failures: 0,
            banned_until: None,
            in_flight: 0,
        }
    }

    fn banned(&self, now: Instant) -> bool {
        self.banned_until.is_some_and(|until| until > now)
    }

    /// A window that has passed forgets its failures.
    fn renew(&mut self, now: Instant, window: Duration) {
        if !self.banned(now) && now.duration_since(self.window_start) >= window {
            self.window_start = now;
            self.failures = 0;
            self.banned_until = None;
        }
    }

    /// Whether nothing is left to remember of the address.
    fn idle(&self, now: Instant) -> bool {
        self.in_flight == 0 && self.failures == 0 && !self.banned(now)
    }
}

/// A login attempt counted before its credentials are checked; end it with `succeeded` or
/// `failed`. Dropped unended (the connection went away mid-check), it counts as neither.
pub struct Attempt<'a> {
    guard: &'a LoginGuard,
    /// None when the guard is off: nothing was counted.
    addr: Option<IpAddr>,
}

impl Attempt<'_> {
    pub fn succeeded(mut self) {
        if let Some(addr) = self.addr.take() {
            self.guard.end_attempt(addr, false);
        }
    }

    /// The credentials were wrong; true when this failure starts a ban.
    pub fn failed(mut self) -> bool {
        self.guard.stats.failures.fetch_add(1, Ordering::Relaxed);
        match self.addr.take() {
            Some(addr) => self.guard.end_attempt(addr, true),
            None => false,
        }
    }
}

impl Drop for Attempt<'_> {
    fn drop(&mut self) {
        if let Some(addr) = self.addr.take() {
            self.guard.end_attempt(addr, false);
        }
    }
}

/// Past this many tracked addresses, the expired ones are dropped on the next failure.
const PRUNE_AT: usize = 4096;

impl LoginGuard {
    pub fn new(config: LoginGuardConfig) -> Self {
        Self {
            config,
            entries: Mutex::new(HashMap::new()),
            ended: tokio::sync::Notify::new(),
            tracked: AtomicUsize::new(0),
            stats: GuardStats::default(),
        }
    }

    fn enabled(&self) -> bool {
        !self.config.ban.is_zero() && self.config.failures > 0
    }

    /// Whether a login from `addr` is to be refused unchecked now; counted when it is.
    pub fn is_banned(&self, addr: IpAddr) -> bool {
        if !self.enabled() || self.tracked.load(Ordering::Relaxed) == 0 {
            return false;
        }
        let now = Instant::now();
        let banned = self
            .entries
            .lock()
            .expect("login guard lock")
            .get(&addr)
            .and_then(|e| e.banned_until)
            .is_some_and(|until| until > now);
        if banned {
            self.stats.refused_banned.fetch_add(1, Ordering::Relaxed);
        }
        banned
    }

    /// Counts a login attempt from `addr` before its check. None when the address is banned:
    /// the attempt is refused unchecked (and counted so). While failures and checks in flight
    /// fill the limit, it waits for a check to end.
    pub async fn attempt(&self, addr: IpAddr) -> Option<Attempt<'_>> {
        if !self.enabled() {
            return Some(Attempt {
                guard: self,
                addr: None,
            });
        }
        loop {
            let ended = self.ended.notified();
            {
                let now = Instant::now();
                let mut entries = self.entries.lock().expect("login guard lock");
                let entry = entries.entry(addr).or_insert_with(|| Entry::new(now));
                entry.renew(now, self.config.window);
                if entry.banned(now) {
                    self.stats.refused_banned.fetch_add(1, Ordering::Relaxed);
                    return None;
                }
                if entry.failures + entry.in_flight < self.config.failures {
                    entry.in_flight += 1;
                    self.tracked.store(entries.len(), Ordering::Relaxed);
                    return Some(Attempt {
                        guard: self,
                        addr: Some(addr),
                    });
                }
            }
            // A check ending wakes every waiter; the timeout covers a window that ends unseen.
            let _ = tokio::time::timeout(Duration::from_secs(1), ended).await;
        }
    }

    /// Ends an attempt counted by `attempt`; true when its failure starts a ban.
    fn end_attempt(&self, addr: IpAddr, failed: bool) -> bool {
        let now = Instant::now();
        let mut entries = self.entries.lock().expect("login guard lock");
        let mut starts = false;
        if let Some(entry) = entries.get_mut(&addr) {
            entry.in_flight = entry.in_flight.saturating_sub(1);
            if failed && !entry.banned(now) {
                starts = self.count_failure(entry, now);
            }
            if entry.idle(now) {
                entries.remove(&addr);
            }
        }
        self.tracked.store(entries.len(), Ordering::Relaxed);
        drop(entries);
        self.ended.notify_waiters();
        starts
    }

    /// One more failure in the entry's window; true when it starts a ban.
    fn count_failure(&self, entry: &mut Entry, now: Instant) -> bool {
        entry.renew(now, self.config.window);
        entry.failures += 1;
        let starts = entry.failures >= self.config.failures;
        if starts {
            entry.banned_until = Some(now + self.config.ban);
            entry.failures = 0;
            entry.window_start = now + self.config.ban;
            self.stats.bans.fetch_add(1, Ordering::Relaxed);
        }
        starts
    }

    /// Records a failed login from `addr`; returns true when it starts a ban (the caller logs
    /// that once, instead of a line per refused attempt).
    pub fn failed(&self, addr: IpAddr) -> bool {
        self.stats.failures.fetch_add(1, Ordering::Relaxed);
        if !self.enabled() {
            return false;
        }
        let now = Instant::now();
        let mut entries = self.entries.lock().expect("login guard lock");
        if entries.len() >= PRUNE_AT {
            let (window, ban) = (self.config.window, self.config.ban);
            entries.retain(|_, e| {
                e.in_flight > 0 || e.window_start + window > now || e.banned_until.is_some_and(|u| u + ban > now)
            });
        }
        let entry = entries.entry(addr).or_insert_with(|| Entry::new(now));
        let starts = !entry.banned(now) && self.count_failure(entry, now);
        self.tracked.store(entries.len(), Ordering::Relaxed);
        starts
    }

    /// Prometheus text of the counters.
    pub fn render(&self, out: &mut String) {
        use std::fmt::Write;
        for (name, help, value) in [
            (
                "gantry_login_failures_total",
                "Failed logins (HTTP 401, refused MQTT CONNECT).",
                &self.stats.failures,
            ),
            (
                "gantry_login_bans_total",
                "Addresses banned for too many failed logins.",
                &self.stats.bans,
            ),
            (
                "gantry_login_refused_banned_total",
                "Login attempts refused unchecked because their address was banned.",
                &self.stats.refused_banned,
            ),
        ] {
            let _ = writeln!(
                out,
                "# HELP {name} {help}\n# TYPE {name} counter\n{name} {}",
                value.load(Ordering::Relaxed)
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn guard(ban_secs: u64) -> LoginGuard {
        LoginGuard::new(LoginGuardConfig {
            failures: 3,
            window: Duration::from_secs(60),
            ban: Duration::from_secs(ban_secs),
        })
    }

    #[test]
    fn the_nth_failure_bans_that_address_only() {
        let guard = guard(60);
        let (a, b): (IpAddr, IpAddr) = ("10.0.0.1".parse().unwrap(), "10.0.0.2".parse().unwrap());
        assert!(!guard.failed(a));
        assert!(!guard.failed(a));
        assert!(!guard.is_banned(a));
        assert!(guard.failed(a), "the third failure starts the ban");
        assert!(guard.is_banned(a));
        assert!(!guard.is_banned(b));
        assert!(!guard.failed(a), "failures while banned start nothing new");
        assert_eq!(guard.stats.bans.load(Ordering::Relaxed), 1);
    }

    #[tokio::test]
    async fn attempts_in_flight_count_toward_the_limit() {
        let guard = guard(60);
        let a: IpAddr = "10.0.0.1".parse().unwrap();
        let (one, two, three) = (
            guard.attempt(a).await.unwrap(),
            guard.attempt(a).await.unwrap(),
            guard.attempt(a).await.unwrap(),
        );
        // The limit (3) is taken by checks in flight: a fourth waits until one ends.
        let waiting = tokio::time::timeout(Duration::from_millis(50), guard.attempt(a)).await;
        assert!(waiting.is_err(), "a fourth check waits");
        one.succeeded();
        let four = guard.attempt(a).await.expect("room after a success");
        assert!(!two.failed());
        assert!(!three.failed());
        assert!(four.failed(), "the third failure starts the ban");
        assert!(guard.attempt(a).await.is_none(), "banned: refused unchecked");
        assert_eq!(guard.stats.refused_banned.load(Ordering::Relaxed), 1);
    }

    #[tokio::test]
    async fn a_dropped_attempt_gives_its_room_back() {
        let guard = guard(60);
        let a: IpAddr = "10.0.0.1".parse().unwrap();
        for _ in 0..10 {
            drop(guard.attempt(a).await.unwrap());
        }
        assert!(
            guard.entries.lock().unwrap().is_empty(),
            "nothing kept of an idle address"
        );
    }

    #[test]
    fn a_zero_ban_turns_it_off() {
        let guard = guard(0);
        let a: IpAddr = "10.0.0.1".parse().unwrap();
        for _ in 0..10 {
            assert!(!guard.failed(a));
        }
        assert!(!guard.is_banned(a));
    }

    #[test]
    fn a_ban_ends() {
        let guard = LoginGuard::new(LoginGuardConfig {
            failures: 1,
            window: Duration::from_millis(50),
            ban: Duration::from_millis(50),
        });
        let a: IpAddr = "10.0.0.1".parse().unwrap();
        assert!(guard.failed(a));
        assert!(guard.is_banned(a));
        std::thread::sleep(Duration::from_millis(60));
        assert!(!guard.is_banned(a));
    }
}
