//! The `/metrics` lines the binary adds to the API's own: the ingest pipeline, controls, the
//! store (read at each scrape), the process (from /proc/self, as Prometheus' usual process
//! collector names them) and the build.

use std::fmt::Write;
use std::sync::Arc;
use std::sync::atomic::Ordering::Relaxed;

use gantry_api::metrics::{AsyncCollector, Collector, Metrics};
use gantry_core::Services;
use gantry_core::control::ControlService;
use gantry_core::ingest::Ingest;
use gantry_core::store::{AlarmStore, WebhookStore};
use gantry_core::webhooks::WebhookService;
use gantry_store::SqlStore;

/// Adds every collector of this module to `metrics`.
pub(crate) fn register(metrics: &Metrics, ingest: &Ingest, services: &Services, store: Arc<SqlStore>) {
    let control = services.control.clone();
    let webhooks = services.webhooks.clone();
    metrics.add_collector(ingest_metrics(ingest));
    metrics.add_collector(Box::new(move |out: &mut String| webhook_metrics(&webhooks, out)));
    metrics.add_collector(Box::new(move |out: &mut String| control_metrics(&control, out)));
    let desired = services.desired.clone();
    metrics.add_collector(Box::new(move |out: &mut String| desired_metrics(&desired, out)));
    let feeds = services.feeds.clone();
    metrics.add_collector(Box::new(move |out: &mut String| feed_metrics(&feeds, out)));
    let alarms = services.alarms.clone();
    metrics.add_collector(Box::new(move |out: &mut String| alarm_transitions(&alarms, out)));
    metrics.add_collector(Box::new(|out: &mut String| {
        process_metrics(out);
        build_info(out);
    }));
    metrics.add_async_collector(store_metrics(store));
}

/// Alarm transitions by kind, as counted by this process, and evaluations that failed.
fn alarm_transitions(alarms: &gantry_core::alarms::AlarmService, out: &mut String) {
    let name = "gantry_alarm_transitions_total";
    header(
        out,
        name,
        "counter",
        "Alarm transitions by kind (raised, escalated, de-escalated, acknowledged, commented, cleared).",
    );
    for (kind, n) in alarms.stats().transitions() {
        let _ = writeln!(out, "{name}{{kind=\"{}\"}} {n}", kind.as_str().to_ascii_lowercase());
    }
    let name = "gantry_alarm_evaluations_failed_total";
    header(
        out,
        name,
        "counter",
        "Committed events whose alarm evaluation failed (the events stay stored).",
    );
    let _ = writeln!(out, "{name} {}", alarms.stats().failed.load(Relaxed));
}

/// What the push streams' feeds hold: so an operator sees a quiet project's buffer given back.
fn feed_metrics(feeds: &gantry_core::feed::Feeds, out: &mut String) {
    let (bytes, count) = feeds.held();
    header(
        out,
        "gantry_stream_feeds",
        "gauge",
        "Projects whose push stream has a feed (followed, or within its replay window).",
    );
    let _ = writeln!(out, "gantry_stream_feeds {count}");
    header(
        out,
        "gantry_stream_replay_bytes",
        "gauge",
        "Bytes the feeds' replay buffers hold (bounded by --stream-replay-memory-mb).",
    );
    let _ = writeln!(out, "gantry_stream_replay_bytes {bytes}");
}

fn header(out: &mut String, name: &str, kind: &str, help: &str) {
    let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
}

/// The ingest pipeline's counters, queue and commit latency.
fn ingest_metrics(ingest: &Ingest) -> Collector {
    let ingest = ingest.clone();
    Box::new(move |out: &mut String| {
        let s = ingest.stats();
        for (name, help, value) in [
            (
                "gantry_ingest_submitted_total",
                "Events queued for commit.",
                &s.submitted,
            ),
            ("gantry_ingest_committed_total", "Events committed.", &s.committed),
            ("gantry_ingest_batches_total", "Commits (batches) made.", &s.batches),
            (
                "gantry_ingest_rejected_busy_total",
                "Events refused because the queue stayed full.",
                &s.rejected_busy,
            ),
            ("gantry_ingest_failed_total", "Events whose commit failed.", &s.failed),
        ] {
            header(out, name, "counter", help);
            let _ = writeln!(out, "{name} {}", value.load(Relaxed));
        }
        header(
            out,
            "gantry_ingest_backlog",
            "gauge",
            "Submissions waiting for the writer.",
        );
        let _ = writeln!(out, "gantry_ingest_backlog {}", ingest.backlog());
        s.commit_seconds.render(
            out,
            "gantry_ingest_commit_seconds",
            "Time from a batch's commit to its being durable (when its callers are answered).",
        );
    })
}

/// What became of webhook delivery attempts, as counted by this process: `delivered` (a 2xx),
/// `retried` (another attempt is due), `failed` (given up).
fn webhook_metrics(webhooks: &WebhookService, out: &mut String) {
    let s = webhooks.stats();
    let name = "gantry_webhook_deliveries_total";
    header(out, name, "counter", "Webhook delivery attempts by outcome.");
    for (outcome, value) in [
        ("delivered", &s.delivered),
        ("retried", &s.retried),
        ("failed", &s.failed),
    ] {
        let _ = writeln!(out, "{name}{{outcome=\"{outcome}\"}} {}", value.load(Relaxed));
    }
}

/// What became of controls that wait for an ack, as counted by this process.
fn control_metrics(control: &ControlService, out: &mut String) {
    let s = control.stats();
    for (name, help, value) in [
        (
            "gantry_controls_awaiting_ack_total",
            "Controls sent (or relayed along a route) that wait for an ack.",
            &s.awaiting_ack,
        ),
        (
            "gantry_controls_completed_total",
            "Controls completed by the device's ack.",
            &s.completed,
        ),
        (
            "gantry_controls_exception_total",
            "Controls ended in exception: no ack within the ack timeout, or expired while waiting.",
            &s.exception,
        ),
        (
            "gantry_controls_waiting_total",
            "Controls stored to wait for a device that was not connected (ttlSeconds).",
            &s.waiting,
        ),
        (
            "gantry_controls_delivered_waiting_total",
            "Waiting controls delivered when their device connected.",
            &s.delivered_waiting,
        ),
    ] {
        header(out, name, "counter", help);
        let _ = writeln!(out, "{name} {}", value.load(Relaxed));
    }
}

/// What became of desired values, as counted by this process.
fn desired_metrics(desired: &gantry_core::desired_state::DesiredStateService, out: &mut String) {
    let s = desired.stats();
    for (name, help, value) in [
        (
            "gantry_desired_deltas_sent_total",
            "Messages of type c sent with the desired values a device has not applied.",
            &s.deltas_sent,
        ),
        (
            "gantry_desired_applied_total",
            "Desired values the device applied (by its ack or its report).",
            &s.applied,
        ),
        (
            "gantry_desired_rejected_total",
            "Desired values the device refused in its ack.",
            &s.rejected,
        ),
    ] {
        header(out, name, "counter", help);
        let _ = writeln!(out, "{name} {}", value.load(Relaxed));
    }
}

/// The store's stats, read at each scrape; a failed read leaves them out and says so in a
/// gauge, so that an unreachable database shows on the dashboard rather than a stale figure.
fn store_metrics(store: Arc<SqlStore>) -> AsyncCollector {
    Arc::new(move || {
        let store = store.clone();
        Box::pin(async move { render_store(&store).await })
    })
}

async fn render_store(store: &SqlStore) -> String {
    let mut out = String::new();
    let stats = store.stats().await;
    header(
        &mut out,
        "gantry_store_up",
        "gauge",
        "1 when the store answered the last scrape's query.",
    );
    let _ = writeln!(out, "gantry_store_up {}", u8::from(stats.is_ok()));
    let stats = match stats {
        Ok(stats) => stats,
        Err(e) => {
            tracing::warn!(error = %e, "reading the store's statistics for /metrics failed");
            return out;
        }
    };
    header(
        &mut out,
        "gantry_controls_pending",
        "gauge",
        "Controls waiting for their ack (processing), in the whole store.",
    );
    let _ = writeln!(out, "gantry_controls_pending {}", stats.controls_pending);
    render_store_counts(&mut out, store).await;
    render_engine(&mut out, &stats);
    out
}

/// The counts the store keeps across nodes: open alarms by severity, pending deliveries.
async fn render_store_counts(out: &mut String, store: &SqlStore) {
    match store.count_open_alarms(None).await {
        Ok(open) => {
            let name = "gantry_alarms_open";
            header(
                out,
                name,
                "gauge",
                "Alarms not cleared, by severity, in the whole store.",
            );
            for severity in gantry_core::enums::Severity::ALL {
                let n = open.iter().find(|(s, _)| s == severity).map_or(0, |(_, n)| *n);
                let _ = writeln!(out, "{name}{{severity=\"{severity}\"}} {n}");
            }
        }
        Err(e) => tracing::warn!(error = %e, "counting open alarms for /metrics failed"),
    }
    match store.count_pending_deliveries().await {
        Ok(pending) => {
            header(
                out,
                "gantry_webhook_deliveries_pending",
                "gauge",
                "Webhook deliveries not yet delivered nor given up, in the whole store.",
            );
            let _ = writeln!(out, "gantry_webhook_deliveries_pending {pending}");
        }
        Err(e) => tracing::warn!(error = %e, "counting pending webhook deliveries for /metrics failed"),
    }
}

/// The engine's own statistics: its pools, and SQLite's staged events and write-ahead logs.
fn render_engine(out: &mut String, stats: &gantry_store::StoreStats) {
    header(
        out,
        "gantry_store_pool_connections",
        "gauge",
        "Database connections by pool and state (idle, in_use) and the pool's max.",
    );
    for pool in &stats.pools {
        let (name, backend) = (pool.name, stats.backend);
        for (state, n) in [
            ("idle", pool.idle),
            ("in_use", pool.open.saturating_sub(pool.idle)),
            ("max", pool.max),
        ] {
            let _ = writeln!(
                out,
                "gantry_store_pool_connections{{backend=\"{backend}\",pool=\"{name}\",state=\"{state}\"}} {n}"
            );
        }
    }
    header(
        out,
        "gantry_store_staged_events",
        "gauge",
        "SQLite: events in the staging file waiting to be moved into the events table.",
    );
    if let Some(staged) = stats.staged_events {
        let _ = writeln!(out, "gantry_store_staged_events {staged}");
    }
    header(
        out,
        "gantry_store_wal_bytes",
        "gauge",
        "SQLite: size of the write-ahead log of the database (main), the staging file and the event-log file (logs).",
    );
    for (file, bytes) in &stats.wal_bytes {
        let _ = writeln!(out, "gantry_store_wal_bytes{{file=\"{file}\"}} {bytes}");
    }
}

/// `gantry_build_info{version, commit} 1`.
fn build_info(out: &mut String) {
    header(
        out,
        "gantry_build_info",
        "gauge",
        "The running build: its version and commit (always 1).",
    );
    let _ = writeln!(
        out,
        "gantry_build_info{{version=\"{}\",commit=\"{}\"}} 1",
        env!("CARGO_PKG_VERSION"),
        env!("GANTRY_COMMIT")
    );
}

/// Linux's clock ticks per second in /proc (USER_HZ), fixed for user space.
const TICKS_PER_SECOND: f64 = 100.0;

/// Memory, CPU time, open files and threads of this process, from /proc/self. Missing figures
/// (not Linux) are left out.
fn process_metrics(out: &mut String) {
    process_memory(out);
    process_times(out);
    process_files(out);
}

/// Resident and virtual memory and threads, from /proc/self/status.
fn process_memory(out: &mut String) {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let status_kib = |key: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(key))
            .and_then(|v| v.split_whitespace().next())
            .and_then(|v| v.parse::<u64>().ok())
    };
    if let Some(kib) = status_kib("VmRSS:") {
        header(
            out,
            "process_resident_memory_bytes",
            "gauge",
            "Resident memory size in bytes.",
        );
        let _ = writeln!(out, "process_resident_memory_bytes {}", kib * 1024);
    }
    if let Some(kib) = status_kib("VmSize:") {
        header(
            out,
            "process_virtual_memory_bytes",
            "gauge",
            "Virtual memory size in bytes.",
        );
        let _ = writeln!(out, "process_virtual_memory_bytes {}", kib * 1024);
    }
    if let Some(threads) = status_kib("Threads:") {
        header(out, "process_threads", "gauge", "OS threads of the process.");
        let _ = writeln!(out, "process_threads {threads}");
    }
}

/// CPU time and start time, from /proc/self/stat.
fn process_times(out: &mut String) {
    // /proc/self/stat: the fields after the command name's closing parenthesis start at the
    // third (state); utime and stime are the 14th and 15th, starttime the 22nd.
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    let fields: Vec<&str> = stat
        .rsplit_once(')')
        .map(|(_, rest)| rest.split_whitespace().collect())
        .unwrap_or_default();
    let field = |n: usize| fields.get(n - 3).and_then(|v| v.parse::<u64>().ok());
    if let (Some(user), Some(system)) = (field(14), field(15)) {
        header(
            out,
            "process_cpu_seconds_total",
            "counter",
            "User and system CPU time spent, in seconds.",
        );
        let _ = writeln!(
            out,
            "process_cpu_seconds_total {}",
            (user + system) as f64 / TICKS_PER_SECOND
        );
    }
    let boot = std::fs::read_to_string("/proc/stat").ok().and_then(|s| {
        s.lines()
            .find_map(|l| l.strip_prefix("btime "))
            .and_then(|v| v.trim().parse::<u64>().ok())
    });
    if let (Some(boot), Some(start)) = (boot, field(22)) {
        header(
            out,
            "process_start_time_seconds",
            "gauge",
            "Start time of the process since the Unix epoch, in seconds.",
        );
        let _ = writeln!(
            out,
            "process_start_time_seconds {}",
            boot as f64 + start as f64 / TICKS_PER_SECOND
        );
    }
}

/// Open file descriptors and their limit.
fn process_files(out: &mut String) {
    if let Ok(fds) = std::fs::read_dir("/proc/self/fd") {
        header(out, "process_open_fds", "gauge", "Open file descriptors.");
        let _ = writeln!(out, "process_open_fds {}", fds.count());
    }
    let limits = std::fs::read_to_string("/proc/self/limits").unwrap_or_default();
    if let Some(max) = limits
        .lines()
        .find_map(|l| l.strip_prefix("Max open files"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse::<u64>().ok())
    {
        header(
            out,
            "process_max_fds",
            "gauge",
            "The soft limit of open file descriptors.",
        );
        let _ = writeln!(out, "process_max_fds {max}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn process_figures_are_read_from_proc() {
        let mut out = String::new();
        process_metrics(&mut out);
        let value = |name: &str| {
            out.lines()
                .find_map(|l| l.strip_prefix(&format!("{name} ")))
                .and_then(|v| v.parse::<f64>().ok())
                .unwrap_or_else(|| panic!("{name} in {out}"))
        };
        assert!(value("process_resident_memory_bytes") > 1_000_000.0);
        assert!(value("process_open_fds") >= 3.0);
        assert!(value("process_max_fds") >= value("process_open_fds"));
        assert!(value("process_cpu_seconds_total") >= 0.0);
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs_f64();
        let started = value("process_start_time_seconds");
        assert!(started <= now + 1.0 && started > now - 86_400.0, "{started} vs {now}");
    }
}
