//! The report as markdown: the results table, the targets table with each verdict, and the
//! runs' checks in words. What a person reads, and what docs/PERFORMANCE.md keeps.

use std::fmt::Write;

use super::targets::{Bound, TargetResult};
use super::{BackendRun, Report};
use crate::format::{millis, opt, thousands};
use crate::scenarios::{ingest_rest, read, series, sign_in};

/// The figures of one target, with the shortfall in words.
fn verdict(t: &TargetResult) -> String {
    let missed = if t.reference { "for reference" } else { "**missed**" };
    match (t.met, t.shortfall_pct) {
        (None, _) => "not measured".to_owned(),
        (Some(true), _) if t.reference => "for reference: within".to_owned(),
        (Some(true), _) => "met".to_owned(),
        (Some(false), Some(pct)) => match t.bound {
            Bound::AtLeast => format!("{missed}: {pct:.1}% below"),
            Bound::Below => format!("{missed}: {pct:.1}% over"),
        },
        (Some(false), None) => missed.to_owned(),
    }
}

fn figure(value: f64, unit: &str) -> String {
    if unit == "ms" {
        format!("{} ms", millis(value))
    } else if value.abs() < 100.0 {
        format!("{value:.2} {unit}")
    } else {
        format!("{} {unit}", thousands(value))
    }
}

/// The results table alone (what docs/PERFORMANCE.md keeps).
pub fn results_table(report: &Report) -> String {
    let mut out = String::new();
    out.push_str(
        "| store | scenario | variant | conns | req/s | × baseline | p50 ms | p99 ms | p99.9 ms | failed | server CPU µs/req | server cores | server RSS MiB | client CPU µs/req | postgres cores | other cores | server writes KiB/req |\n",
    );
    out.push_str("|---|---|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|\n");
    for run in &report.runs {
        for m in &run.measurements {
            let mut notes: Vec<String> = m.note.iter().cloned().collect();
            let answers = m.ok + m.failed;
            if answers < 100 {
                notes.push(format!("only {answers} answers measured"));
            }
            let variant = if notes.is_empty() {
                m.variant.clone()
            } else {
                format!("{} ({})", m.variant, notes.join("; "))
            };
            let _ = writeln!(
                out,
                "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
                run.backend,
                m.scenario,
                variant,
                m.connections,
                thousands(m.requests_per_second),
                opt(m.baseline_ratio, |r| format!("{r:.2}")),
                millis(m.latency.p50_ms),
                millis(m.latency.p99_ms),
                millis(m.latency.p999_ms),
                m.failed,
                opt(m.server_cpu_us_per_request, |v| format!("{v:.0}")),
                opt(m.server_cores_busy, |v| format!("{v:.2}")),
                opt(m.usage.server_rss_max_mib, |v| format!("{v:.0}")),
                opt(m.client_cpu_us_per_request, |v| format!("{v:.0}")),
                opt(m.postgres_cores_busy, |v| format!("{v:.2}")),
                opt(m.other_cores_busy, |v| format!("{v:.2}")),
                opt(m.server_written_kib_per_request, |v| format!("{v:.1}")),
            );
        }
    }
    out
}

/// The targets table alone.
pub fn targets_table(report: &Report) -> String {
    let mut out = String::new();
    out.push_str("| store | target | limit | measured | verdict | note |\n|---|---|--:|--:|---|---|\n");
    for t in &report.targets {
        let limit = match t.bound {
            Bound::AtLeast => format!("≥ {}", figure(t.limit, t.unit)),
            Bound::Below => format!("< {}", figure(t.limit, t.unit)),
        };
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} | {} | {} |",
            t.backend,
            t.target,
            limit,
            opt(t.measured, |v| figure(v, t.unit)),
            verdict(t),
            t.note.as_deref().unwrap_or("")
        );
    }
    out
}

/// The MQTT scenarios' checks of one run, as sub-items.
fn mqtt_lines(out: &mut String, run: &BackendRun) {
    for c in run.mqtt_ingest.iter().chain(&run.mqtt_floor) {
        let g = &c.gantry;
        let _ = writeln!(
            out,
            "  - ingest-mqtt: {} devices published {} messages at {} msg/s offered; {} acknowledged, {} events stored ({}); \
             {} unacknowledged when publishing stopped, drained in {:.1} s; {} still unacknowledged after the drain wait; {} connections lost",
            g.connections,
            thousands(g.sent as f64),
            thousands(g.offered_rate),
            thousands(g.acked as f64),
            thousands(c.stored as f64),
            if c.every_ack_stored {
                "every acknowledged message stored"
            } else {
                "**fewer stored than acknowledged**"
            },
            thousands(g.unacked_at_end as f64),
            g.drain_seconds,
            thousands(g.unacked_after_drain as f64),
            g.lost_connections,
        );
        match (&c.mosquitto, &c.mosquitto_skipped) {
            (Some(m), _) => {
                let _ = writeln!(
                    out,
                    "  - Mosquitto baseline ({}): {} published, {} acknowledged, {} delivered to the subscriber ({}/s)",
                    m.addr,
                    thousands(m.publishers.sent as f64),
                    thousands(m.publishers.acked as f64),
                    thousands(m.delivered as f64),
                    thousands(m.delivered_per_second)
                );
            }
            (None, Some(why)) => {
                let _ = writeln!(out, "  - no Mosquitto baseline: {why}");
            }
            (None, None) => {}
        }
    }
    if let Some(c) = &run.control_check {
        let _ = write!(
            out,
            "  - control: {} controls sent, {} event logs read completed afterwards{}",
            c.sent,
            c.completed,
            if c.matches { "" } else { " (**differ**)" }
        );
        if let Some(bg) = &c.background {
            let _ = write!(
                out,
                "; background telemetry {} msg/s offered, {} msg/s acknowledged",
                thousands(bg.offered_rate),
                thousands(bg.acked_per_second())
            );
        }
        if let Some(burst) = &c.burst {
            let _ = write!(
                out,
                "; ingest burst before the last series: {} messages at {} msg/s offered by {} devices, {} acknowledged, \
                 the last {:.1} s after publishing stopped",
                thousands(burst.sent as f64),
                thousands(burst.offered_rate),
                burst.connections,
                thousands(burst.acked as f64),
                burst.drain_seconds
            );
        }
        out.push('\n');
    }
    if let Some(c) = &run.reconnect_check {
        reconnect_line(out, c);
    }
    if let Some(c) = &run.connections {
        let _ = writeln!(
            out,
            "  - connections: {} of {} held (logged in, subscribed, answering PINGREQ); opened in {:.1} s ({}/s); \
             server RSS {} MiB idle at start, {} MiB before connecting, {} MiB after: {} KiB per connection{}",
            thousands(c.held as f64),
            thousands(c.target as f64),
            c.connect_seconds,
            thousands(c.connects_per_second),
            opt(c.idle_rss_mib, |v| format!("{v:.1}")),
            opt(c.rss_before_mib, |v| format!("{v:.1}")),
            opt(c.rss_after_mib, |v| format!("{v:.1}")),
            opt(c.kib_per_connection, |v| format!("{v:.1}")),
            c.error
                .as_ref()
                .map(|e| format!("; first failure: {e}"))
                .unwrap_or_default()
        );
    }
    for why in &run.skipped {
        let _ = writeln!(out, "  - skipped: {why}");
    }
}

/// The reconnect scenario's counts in words.
fn reconnect_line(out: &mut String, c: &crate::scenarios::reconnect::ReconnectCheck) {
    let _ = writeln!(
        out,
        "  - reconnect: {} devices reconnected at once under {} msg/s of telemetry; {} got their CONNACK, {} their delta{}, \
         {} read applied afterwards; CONNACK → delta p50 {} ms, p99 {} ms; the last {:.2} s after the connects began; \
         ingest {}/s over seconds {}–{} against {}/s alone ({:.2} ×)",
        thousands(c.load.devices as f64),
        thousands(c.load.rate),
        thousands(c.connected as f64),
        thousands(c.received as f64),
        if c.missing == 0 {
            String::new()
        } else {
            format!(" (**{} missing**: {})", c.missing, c.missing_devices.join(", "))
        },
        thousands(c.applied as f64),
        millis(c.delta.p50_ms),
        millis(c.delta.p99_ms),
        c.spread_seconds,
        thousands(c.with_in_window),
        c.window.0,
        c.window.1,
        thousands(c.alone_in_window),
        c.ingest_ratio()
    );
}

/// The whole report as markdown.
pub fn render_markdown(report: &Report) -> String {
    let mut out = String::new();
    let m = &report.machine;
    let _ = writeln!(out, "# Gantry benchmark ({})\n", report.mode);
    let _ = writeln!(out, "- when: {} ({:.0} s)", report.started_at, report.seconds);
    let _ = writeln!(out, "- command: `{}`", report.command);
    let _ = writeln!(
        out,
        "- machine: {}; kernel {}; load average at start {}",
        m.summary(),
        m.kernel,
        m.load_average_at_start
    );
    let _ = writeln!(
        out,
        "- gantry: {}; commit {}{}; bench build: {}",
        report.gantry,
        m.git_commit.as_deref().unwrap_or("unknown"),
        if m.git_dirty == Some(true) {
            " (with uncommitted changes)"
        } else {
            ""
        },
        report.bench_build
    );
    let s = &report.settings;
    let _ = writeln!(
        out,
        "- settings: {} connections; warm-up {} s, then {} s per measurement; {} ingest devices; listed device {} events in a store of {}; series device {} readings a minute apart",
        s.connections,
        s.warmup_seconds,
        s.duration_seconds,
        s.ingest_devices,
        thousands(s.listed_device_events as f64),
        thousands(s.store_events as f64),
        thousands(s.series_events as f64),
    );
    if s.scenarios
        .iter()
        .any(|x| x != read::SCENARIO && x != ingest_rest::SCENARIO && x != series::SCENARIO && x != sign_in::SCENARIO)
    {
        let _ = writeln!(
            out,
            "- MQTT: {} msg/s offered by the ingest devices; control under {} msg/s of telemetry; stream: {} subscribers under {} msg/s; {} connections held (before the open-file limit)",
            thousands(s.mqtt_rate),
            thousands(s.control_background_rate),
            thousands(s.stream.subscribers as f64),
            thousands(s.stream.rate),
            thousands(s.held_connections as f64),
        );
    }
    out.push_str(
        "\nreq/s counts 2xx answers; × baseline is that over `GET /healthz` at the same concurrency in the same run; \
         latencies are per request, from send to the last byte of the answer (closed loop). CPU and RSS are read from /proc: \
         server cores is the server's CPU time over the run's wall time, postgres cores the same for a local PostgreSQL's \
         processes, other cores for every other process (another job on a shared machine); server writes is what the server handed to write calls \
         per request, files (WAL, checkpoints) and sockets (the answer, queries to PostgreSQL) alike. \
         MQTT rows: for ingest-mqtt, req/s is events stored per second (Mosquitto: messages delivered to the subscriber per second), \
         × baseline is over the Mosquitto row, latency is publish→PUBACK of the messages sent after the warm-up (Gantry acknowledges \
         after the commit), conns is devices publishing; for control, req/s is round trips per second and latency is PUT → PUBACK of the device's ack.\n\n",
    );
    out.push_str(&results_table(report));
    if !report.targets.is_empty() {
        out.push_str("\n## Targets (2-core machine)\n\n");
        out.push_str(&targets_table(report));
    }
    out.push_str("\n## Runs\n\n");
    for run in &report.runs {
        let _ = write!(
            out,
            "- **{}**: {} devices created over REST in {:.1} s",
            run.backend, run.devices_created, run.devices_seconds
        );
        if let Some(seed) = &run.seed {
            let _ = write!(
                out,
                "; seeded {} events ({} on the listed device) through the {} in {:.1} s ({}/s)",
                thousands(seed.store_events as f64),
                thousands(seed.listed_device_events as f64),
                if seed.method == "store" {
                    "store library"
                } else {
                    "REST API"
                },
                seed.seconds,
                thousands(seed.events_per_second)
            );
        }
        if let Some(check) = &run.ingest_check {
            let _ = write!(
                out,
                "; ingest: {} answered 200, {} stored{}",
                thousands(check.answered_ok as f64),
                thousands(check.stored as f64),
                if check.matches { " (equal)" } else { " (**differ**)" }
            );
            if let (Some(commits), Some(per)) = (check.commits, check.events_per_commit) {
                let _ = write!(
                    out,
                    " in {} commits ({per:.1} events per commit)",
                    thousands(commits as f64)
                );
            }
        }
        if let Some(server) = &run.server {
            let _ = write!(
                out,
                "; server: peak RSS {} MiB, {} CPU s, stopped by SIGTERM in {:.1} s ({})",
                opt(server.peak_rss_mib, |v| format!("{v:.0}")),
                opt(server.cpu_seconds, |v| format!("{v:.1}")),
                server.stop_seconds,
                server.exit
            );
        }
        if let Some(error) = &run.error {
            let _ = write!(out, "; **stopped early**: {error}");
        }
        out.push_str(".\n");
        mqtt_lines(&mut out, run);
    }
    for note in &report.notes {
        let _ = writeln!(out, "- {note}");
    }
    out
}
