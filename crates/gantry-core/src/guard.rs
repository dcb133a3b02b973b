//! Brute-force protection shared by HTTP and MQTT: an address with too many failed logins within
//! a window is refused for a while without its credentials being checked. Only failures count, so
//! a fleet of devices behind one NAT address is never locked out by its own successful logins.

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
}

/// Past this many tracked addresses, the expired ones are dropped on the next failure.
const PRUNE_AT: usize = 4096;

impl LoginGuard {
    pub fn new(config: LoginGuardConfig) -> Self {
        Self {
            config,
            entries: Mutex::new(HashMap::new()),
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
            entries.retain(|_, e| e.window_start + window > now || e.banned_until.is_some_and(|u| u + ban > now));
        }
        let entry = entries.entry(addr).or_insert(Entry {
            window_start: now,
            failures: 0,
            banned_until: None,
        });
        if entry.banned_until.is_some_and(|until| until > now) {
            self.tracked.store(entries.len(), Ordering::Relaxed);
            return false;
        }
        if now.duration_since(entry.window_start) >= self.config.window {
            entry.window_start = now;
            entry.failures = 0;
            entry.banned_until = None;
        }
        entry.failures += 1;
        let starts = entry.failures >= self.config.failures;
        if starts {
            entry.banned_until = Some(now + self.config.ban);
            entry.failures = 0;
            entry.window_start = now + self.config.ban;
            self.stats.bans.fetch_add(1, Ordering::Relaxed);
        }
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
