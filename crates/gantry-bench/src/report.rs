//! The report: every figure of a run as JSON, the same as a markdown table a person reads, and the
//! issue's targets checked against the figures (with the shortfall when one is missed).

use std::fmt::Write;

use serde::Serialize;

use crate::load::WindowPoint;
use crate::machine::Machine;
use crate::scenarios::connections::{self, ConnectionsResult};
use crate::scenarios::control::{self, ControlCheck};
use crate::scenarios::ingest_mqtt::{self, MqttIngestCheck};
use crate::scenarios::ingest_rest::{self, IngestCheck};
use crate::scenarios::{Measurement, read};
use crate::seed::Seeded;
use crate::server::Stopped;

#[derive(Debug, Clone, Serialize)]
pub struct Report {
    pub tool: String,
    pub started_at: String,
    pub seconds: f64,
    /// The command line exactly as the bench was started.
    pub command: String,
    /// quick, full or custom (sizes or duration changed by flags).
    pub mode: String,
    pub settings: Settings,
    pub machine: Machine,
    /// The gantry binary started, or the URL of the Gantry measured.
    pub gantry: String,
    /// Whether the bench was built with optimisations (a debug build measures itself).
    pub bench_build: &'static str,
    pub runs: Vec<BackendRun>,
    pub targets: Vec<TargetResult>,
    pub notes: Vec<String>,
}

#[derive(Debug, Clone, Serialize)]
pub struct Settings {
    pub scenarios: Vec<String>,
    pub connections: usize,
    pub warmup_seconds: f64,
    pub duration_seconds: f64,
    pub ingest_devices: usize,
    pub filler_devices: usize,
    pub listed_device_events: u64,
    pub store_events: u64,
    /// Messages/s offered by the ingest-mqtt devices in all.
    pub mqtt_rate: f64,
    /// Telemetry messages/s under the loaded control round trips.
    pub control_background_rate: f64,
    /// Connections the connections scenario asks for, before the open-file limit.
    pub held_connections: usize,
}

impl Settings {
    pub fn wants(&self, scenario: &str) -> bool {
        self.scenarios.iter().any(|s| s == scenario)
    }
}

/// Everything measured against one store.
#[derive(Debug, Clone, Serialize)]
pub struct BackendRun {
    pub backend: String,
    pub devices_created: usize,
    pub devices_seconds: f64,
    pub seed: Option<Seeded>,
    pub measurements: Vec<Measurement>,
    pub ingest_check: Option<IngestCheck>,
    /// Per second of the ingest run: answers, p50 and p99.
    pub ingest_timeline: Vec<WindowPoint>,
    pub mqtt_ingest: Option<MqttIngestCheck>,
    /// ingest-mqtt again at the store's own rate when the run offered more (PostgreSQL:
    /// `ingest_mqtt::POSTGRES_FLOOR`), where that store's MQTT targets are checked.
    pub mqtt_floor: Option<MqttIngestCheck>,
    pub control_check: Option<ControlCheck>,
    pub connections: Option<ConnectionsResult>,
    /// Server RSS right after it started, before any request.
    pub idle_rss_mib: Option<f64>,
    /// Scenarios asked for that could not run here, and why.
    pub skipped: Vec<String>,
    pub server: Option<Stopped>,
    /// Set when the run stopped early; the figures before it are kept.
    pub error: Option<String>,
}

impl BackendRun {
    pub fn new(backend: &str) -> Self {
        Self {
            backend: backend.to_owned(),
            devices_created: 0,
            devices_seconds: 0.0,
            seed: None,
            measurements: Vec::new(),
            ingest_check: None,
            ingest_timeline: Vec::new(),
            mqtt_ingest: None,
            mqtt_floor: None,
            control_check: None,
            connections: None,
            idle_rss_mib: None,
            skipped: Vec::new(),
            server: None,
            error: None,
        }
    }

    fn find(&self, scenario: &str, variant: &str, connections: usize) -> Option<&Measurement> {
        self.measurements
            .iter()
            .find(|m| m.scenario == scenario && m.variant == variant && m.connections == connections)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Bound {
    AtLeast,
    Below,
}

#[derive(Debug, Clone, Serialize)]
pub struct TargetResult {
    pub backend: String,
    pub target: String,
    pub bound: Bound,
    pub limit: f64,
    pub unit: &'static str,
    /// None when the scenario did not run.
    pub measured: Option<f64>,
    pub met: Option<bool>,
    /// How far from the limit a missed target is, in % of the limit.
    pub shortfall_pct: Option<f64>,
    pub note: Option<String>,
    /// A figure checked against a target the issue sets for another store or rate (PostgreSQL's
    /// against the embedded default's), shown beside the targets and not one of them.
    pub reference: bool,
}

/// Whether `measured` meets the bound, and by how much (in % of the limit) it misses.
pub fn evaluate(bound: Bound, limit: f64, measured: f64) -> (bool, Option<f64>) {
    let met = match bound {
        Bound::AtLeast => measured >= limit,
        Bound::Below => measured < limit,
    };
    if met || limit <= 0.0 {
        (met, None)
    } else {
        (met, Some((measured - limit).abs() / limit * 100.0))
    }
}

fn target(
    backend: &str,
    name: &str,
    bound: Bound,
    limit: f64,
    unit: &'static str,
    measured: Option<f64>,
    note: Option<String>,
) -> TargetResult {
    let outcome = measured.map(|m| evaluate(bound, limit, m));
    TargetResult {
        backend: backend.to_owned(),
        target: name.to_owned(),
        bound,
        limit,
        unit,
        measured,
        met: outcome.map(|(met, _)| met),
        shortfall_pct: outcome.and_then(|(_, s)| s),
        note,
        reference: false,
    }
}

/// `t` as a figure for reference (`TargetResult::reference`), with why.
fn for_reference(mut t: TargetResult, why: &str) -> TargetResult {
    t.reference = true;
    t.note = Some(match t.note.take() {
        Some(note) if !note.is_empty() => format!("{why}; {note}"),
        _ => why.to_owned(),
    });
    t
}

/// The targets for a 2-core machine, checked against one backend's figures.
pub fn targets_for(run: &BackendRun, settings: &Settings) -> Vec<TargetResult> {
    const FULL_LISTED: u64 = 1_000_000;
    let b = run.backend.as_str();
    let many = settings.connections;
    let at_many = (many != 64).then(|| format!("measured at {many} connections, not 64"));
    let mut out = Vec::new();
    if settings.scenarios.iter().any(|s| s == ingest_rest::SCENARIO) {
        let m = run.find(ingest_rest::SCENARIO, ingest_rest::VARIANT, many);
        let stored_note = run
            .ingest_check
            .as_ref()
            .and_then(|c| (!c.matches).then(|| format!("{} answered 200 but {} stored", c.answered_ok, c.stored)));
        out.push(target(
            b,
            "ingest-rest: single-event POSTs/s at 64 connections",
            Bound::AtLeast,
            15_000.0,
            "req/s",
            m.map(|m| m.requests_per_second),
            at_many.clone().or(stored_note),
        ));
        out.push(target(
            b,
            "ingest-rest: p99 at 64 connections",
            Bound::Below,
            50.0,
            "ms",
            m.map(|m| m.latency.p99_ms),
            at_many.clone(),
        ));
    }
    if settings.scenarios.iter().any(|s| s == read::SCENARIO) {
        let shadow = run.find(read::SCENARIO, read::SHADOW_VARIANT, many);
        out.push(target(
            b,
            "read: GET shadow/s at 64 connections",
            Bound::AtLeast,
            30_000.0,
            "req/s",
            shadow.map(|m| m.requests_per_second),
            at_many.clone(),
        ));
        out.push(target(
            b,
            "read: GET shadow p99 at 64 connections",
            Bound::Below,
            5.0,
            "ms",
            shadow.map(|m| m.latency.p99_ms),
            at_many.clone(),
        ));
        let listed = run
            .seed
            .as_ref()
            .map(|s| s.listed_device_events)
            .unwrap_or(settings.listed_device_events);
        let mut note = "at 1 connection".to_owned();
        if listed < FULL_LISTED {
            let _ = write!(
                note,
                "; the device holds {} events, not 1,000,000",
                thousands(listed as f64)
            );
        }
        out.push(target(
            b,
            "read: event listing first page p99 (1,000,000-event device)",
            Bound::Below,
            10.0,
            "ms",
            run.find(read::SCENARIO, read::FIRST_PAGE_VARIANT, 1)
                .map(|m| m.latency.p99_ms),
            Some(note),
        ));
    }
    out.extend(mqtt_targets(run, settings));
    if b == "postgres" {
        // The targets are the embedded default's unless it names PostgreSQL, which it
        // does for MQTT ingest alone.
        let own = [MQTT_STORED, MQTT_P99, MQTT_BACKLOG].map(|name| format!("ingest-mqtt: {name}"));
        out = out
            .into_iter()
            .map(|t| {
                if t.reference || own.contains(&t.target) {
                    t
                } else {
                    for_reference(t, "set by the issue for the embedded default (SQLite)")
                }
            })
            .collect();
    }
    out
}

/// The names of ingest-mqtt's targets after "ingest-mqtt: ".
const MQTT_STORED: &str = "events stored/s (QoS 1)";
const MQTT_P99: &str = "p99 publish→committed";
const MQTT_BACKLOG: &str = "backlog when publishing stopped, in seconds of load";

/// The targets of the MQTT scenarios.
fn mqtt_targets(run: &BackendRun, settings: &Settings) -> Vec<TargetResult> {
    let b = run.backend.as_str();
    let mut out = Vec::new();
    if settings.wants(ingest_mqtt::SCENARIO) {
        let floor = if b == "postgres" {
            ingest_mqtt::POSTGRES_FLOOR
        } else {
            ingest_mqtt::EMBEDDED_FLOOR
        };
        let offered = run.mqtt_ingest.as_ref();
        // The store's own rate when it was measured there too, else the run's.
        let checked = run.mqtt_floor.as_ref().or(offered);
        out.extend(mqtt_ingest_targets(run, settings, checked, floor, ""));
        if let (Some(_), Some(ceiling)) = (&run.mqtt_floor, offered) {
            let rate = thousands(ceiling.gantry.offered_rate);
            let why = format!(
                "set by the issue for the embedded default (SQLite); it asks {} events/s of PostgreSQL",
                thousands(floor)
            );
            out.extend(
                mqtt_ingest_targets(
                    run,
                    settings,
                    Some(ceiling),
                    ingest_mqtt::EMBEDDED_FLOOR,
                    &format!(" at {rate} msg/s offered"),
                )
                .into_iter()
                .map(|t| for_reference(t, &why)),
            );
        }
        out.push(target(
            b,
            "ingest-mqtt: stored/s over plain Mosquitto's delivered/s",
            Bound::AtLeast,
            0.8,
            "×",
            offered
                .and_then(|c| mqtt_measurement(run, c))
                .and_then(|m| m.baseline_ratio),
            offered.and_then(|c| c.mosquitto_skipped.clone()),
        ));
    }
    if settings.wants(control::SCENARIO) {
        let idle = run
            .measurements
            .iter()
            .find(|m| m.scenario == control::SCENARIO && m.variant == control::IDLE_VARIANT);
        let note = run
            .control_check
            .as_ref()
            .filter(|c| !c.matches)
            .map(|c| format!("{} sent but {} logs completed", c.sent, c.completed));
        out.push(target(
            b,
            "control: round trip p50, idle",
            Bound::Below,
            5.0,
            "ms",
            idle.map(|m| m.latency.p50_ms),
            note.clone(),
        ));
        out.push(target(
            b,
            "control: round trip p99, idle",
            Bound::Below,
            20.0,
            "ms",
            idle.map(|m| m.latency.p99_ms),
            note,
        ));
    }
    if settings.wants(connections::SCENARIO) {
        let c = run.connections.as_ref();
        out.push(target(
            b,
            "connections: held",
            Bound::AtLeast,
            19_000.0,
            "connections",
            c.map(|c| c.held as f64),
            c.and_then(|c| {
                let mut notes: Vec<String> = c.error.iter().cloned().collect();
                if c.target < 19_000 {
                    notes.push(format!("{} asked for", thousands(c.target as f64)));
                }
                if let Some(limit) = c.open_file_limit {
                    notes.push(format!("open-file limit {}", thousands(limit as f64)));
                }
                (!notes.is_empty()).then(|| notes.join("; "))
            }),
        ));
        out.push(target(
            b,
            "connections: server memory per connection",
            Bound::Below,
            10.0,
            "KB",
            c.and_then(|c| c.kib_per_connection).map(|kib| kib * 1.024),
            None,
        ));
    }
    if settings.wants(connections::SCENARIO) || settings.wants(ingest_mqtt::SCENARIO) {
        out.push(target(
            b,
            "idle server RSS",
            Bound::Below,
            50.0,
            "MB",
            run.idle_rss_mib.map(|mib| mib * 1.048_576),
            Some("right after start, before any request".to_owned()),
        ));
    }
    out
}

/// The measurement of ingest-mqtt's run `c`.
fn mqtt_measurement<'r>(run: &'r BackendRun, c: &MqttIngestCheck) -> Option<&'r Measurement> {
    let variant = ingest_mqtt::variant(c.gantry.offered_rate);
    run.measurements
        .iter()
        .find(|m| m.scenario == ingest_mqtt::SCENARIO && m.variant == variant)
}

/// Events stored/s against `floor`, p99 and backlog of ingest-mqtt's run `check`; `at` follows
/// "ingest-mqtt" in the targets' names.
fn mqtt_ingest_targets(
    run: &BackendRun,
    settings: &Settings,
    check: Option<&MqttIngestCheck>,
    floor: f64,
    at: &str,
) -> [TargetResult; 3] {
    const FULL_DEVICES: usize = 1000;
    let b = run.backend.as_str();
    let offered = check.map_or(settings.mqtt_rate, |c| c.gantry.offered_rate);
    let mut notes = Vec::new();
    if offered < floor {
        notes.push(format!("only {} msg/s offered", thousands(offered)));
    }
    if settings.ingest_devices != FULL_DEVICES {
        notes.push(format!(
            "{} devices, not 1,000",
            thousands(settings.ingest_devices as f64)
        ));
    }
    if let Some(c) = check.filter(|c| !c.every_ack_stored) {
        notes.push(format!("{} acknowledged but {} stored", c.gantry.acked, c.stored));
    }
    let seconds = settings.duration_seconds * f64::from(ingest_mqtt::DURATION_FACTOR);
    if seconds < 600.0 {
        notes.push(format!("sustained {seconds:.0} s, not 10 minutes"));
    }
    // The bench offers a paced rate, and stored/s runs from the first publish to the last
    // PUBACK: a server that stores every message as it comes still shows a little less than
    // the rate offered (the messages in flight when publishing stopped). Offered at the floor
    // or more and kept pace with (every message stored, drained within a second), the floor is
    // met whatever that last fraction.
    let kept_pace = check.filter(|c| {
        c.gantry.offered_rate >= floor
            && c.every_ack_stored
            && c.gantry.acked == c.gantry.sent
            && c.stored >= c.gantry.sent
            && c.gantry.backlog_seconds() < 1.0
            && c.gantry.drain_seconds < 1.0
    });
    if let Some(c) = kept_pace {
        notes.push(format!(
            "kept pace with {} msg/s offered: every message stored, the last drained {:.1} s after publishing stopped",
            thousands(c.gantry.offered_rate),
            c.gantry.drain_seconds
        ));
    }
    let mut stored = target(
        b,
        &format!("ingest-mqtt{at}: {MQTT_STORED}"),
        Bound::AtLeast,
        floor,
        "events/s",
        check.map(|c| c.stored_per_second),
        Some(notes.join("; ")),
    );
    if kept_pace.is_some() {
        stored.met = Some(true);
        stored.shortfall_pct = None;
    }
    let gantry = check.and_then(|c| mqtt_measurement(run, c));
    [
        stored,
        target(
            b,
            &format!("ingest-mqtt{at}: {MQTT_P99}"),
            Bound::Below,
            100.0,
            "ms",
            gantry.map(|m| m.latency.p99_ms),
            None,
        ),
        target(
            b,
            &format!("ingest-mqtt{at}: {MQTT_BACKLOG}"),
            Bound::Below,
            1.0,
            "s",
            check.map(|c| c.gantry.backlog_seconds()),
            None,
        ),
    ]
}

/// 12345.6 → "12,346".
pub fn thousands(value: f64) -> String {
    let rounded = value.round();
    let digits = format!("{}", rounded.abs() as u64);
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    if rounded < 0.0 {
        out.insert(0, '-');
    }
    out
}

/// Milliseconds with the precision that matters at their size.
pub fn millis(value: f64) -> String {
    if value < 10.0 {
        format!("{value:.2}")
    } else if value < 100.0 {
        format!("{value:.1}")
    } else {
        thousands(value)
    }
}

fn opt(value: Option<f64>, f: impl Fn(f64) -> String) -> String {
    value.map(f).unwrap_or_else(|| "–".to_owned())
}

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
        out.push('\n');
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
        "- settings: {} connections; warm-up {} s, then {} s per measurement; {} ingest devices; listed device {} events in a store of {}",
        s.connections,
        s.warmup_seconds,
        s.duration_seconds,
        s.ingest_devices,
        thousands(s.listed_device_events as f64),
        thousands(s.store_events as f64),
    );
    if s.scenarios
        .iter()
        .any(|x| x != read::SCENARIO && x != ingest_rest::SCENARIO)
    {
        let _ = writeln!(
            out,
            "- MQTT: {} msg/s offered by the ingest devices; control under {} msg/s of telemetry; {} connections held (before the open-file limit)",
            thousands(s.mqtt_rate),
            thousands(s.control_background_rate),
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::load::Latency;
    use crate::server::Usage;

    #[test]
    fn evaluation_and_shortfall() {
        assert_eq!(evaluate(Bound::AtLeast, 15_000.0, 16_000.0), (true, None));
        let (met, short) = evaluate(Bound::AtLeast, 15_000.0, 12_000.0);
        assert!(!met);
        assert!((short.unwrap() - 20.0).abs() < 1e-9);
        assert_eq!(evaluate(Bound::Below, 50.0, 49.9), (true, None));
        let (met, short) = evaluate(Bound::Below, 10.0, 25.0);
        assert!(!met);
        assert!((short.unwrap() - 150.0).abs() < 1e-9);
        // The limit itself misses a "below" target.
        assert!(!evaluate(Bound::Below, 5.0, 5.0).0);
    }

    #[test]
    fn number_formats() {
        assert_eq!(thousands(0.0), "0");
        assert_eq!(thousands(999.4), "999");
        assert_eq!(thousands(1_234_567.8), "1,234,568");
        assert_eq!(thousands(-12_345.0), "-12,345");
        assert_eq!(millis(1.234), "1.23");
        assert_eq!(millis(12.34), "12.3");
        assert_eq!(millis(1234.0), "1,234");
    }

    fn measurement(scenario: &'static str, variant: &str, connections: usize, rps: f64, p99: f64) -> Measurement {
        Measurement {
            scenario,
            variant: variant.to_owned(),
            connections,
            requests_per_second: rps,
            ok: 100,
            failed: 0,
            failed_by_status: Default::default(),
            latency: Latency {
                p50_ms: p99 / 2.0,
                p90_ms: p99 / 1.5,
                p99_ms: p99,
                p999_ms: p99 * 2.0,
                max_ms: p99 * 3.0,
                mean_ms: p99 / 2.0,
            },
            baseline_ratio: Some(0.5),
            usage: Usage::default(),
            server_cpu_us_per_request: Some(40.0),
            client_cpu_us_per_request: None,
            server_cores_busy: Some(1.5),
            postgres_cores_busy: None,
            other_cores_busy: Some(0.01),
            server_written_kib_per_request: Some(0.0),
            note: None,
        }
    }

    fn sample_report() -> Report {
        let settings = Settings {
            scenarios: vec!["ingest-rest".into(), "read".into()],
            connections: 64,
            warmup_seconds: 0.5,
            duration_seconds: 2.0,
            ingest_devices: 10,
            filler_devices: 10,
            listed_device_events: 100_000,
            store_events: 1_000_000,
            mqtt_rate: 25_000.0,
            control_background_rate: 10_000.0,
            held_connections: 19_000,
        };
        let mut run = BackendRun::new("sqlite");
        run.measurements = vec![
            measurement("baseline", "GET /healthz", 64, 40_000.0, 3.0),
            measurement(ingest_rest::SCENARIO, ingest_rest::VARIANT, 64, 12_000.0, 20.0),
            measurement(read::SCENARIO, read::SHADOW_VARIANT, 64, 31_000.0, 6.0),
        ];
        run.ingest_check = Some(IngestCheck {
            answered_ok: 5,
            stored: 5,
            matches: true,
            commits: Some(2),
            events_per_commit: Some(2.5),
        });
        let targets = targets_for(&run, &settings);
        Report {
            tool: "gantry-bench test".into(),
            started_at: "2026-01-01T00:00:00Z".into(),
            seconds: 10.0,
            command: "gantry-bench all --quick".into(),
            mode: "quick".into(),
            settings,
            machine: Machine {
                cpus: 2,
                cpu_model: "Test CPU".into(),
                memory_gib: 4.0,
                kernel: "6.1".into(),
                load_average_at_start: "0.10 0.20 0.30 1/100 42".into(),
                git_commit: Some("abc123".into()),
                git_dirty: Some(false),
            },
            gantry: "target/release/gantry".into(),
            bench_build: "release",
            runs: vec![run],
            targets,
            notes: vec!["a note".into()],
        }
    }

    #[test]
    fn targets_report_misses_and_what_did_not_run() {
        let report = sample_report();
        let t = &report.targets;
        assert_eq!(t.len(), 5);
        let ingest = &t[0];
        assert_eq!(ingest.met, Some(false));
        assert!((ingest.shortfall_pct.unwrap() - 20.0).abs() < 1e-9);
        assert_eq!(t[1].met, Some(true));
        assert_eq!(t[2].met, Some(true));
        assert_eq!(t[3].met, Some(false));
        assert!((t[3].shortfall_pct.unwrap() - 20.0).abs() < 1e-9);
        // The listing did not run in this report.
        assert_eq!(t[4].measured, None);
        assert_eq!(t[4].met, None);
        assert!(t[4].note.as_deref().unwrap().contains("100,000 events"));
    }

    #[test]
    fn markdown_has_every_measurement_and_verdict() {
        let text = render_markdown(&sample_report());
        assert!(text.contains("| sqlite | baseline | GET /healthz | 64 | 40,000 | 0.50 | 1.50 | 3.00 | 6.00 | 0 |"));
        assert!(text.contains("| sqlite | ingest-rest: single-event POSTs/s at 64 connections | ≥ 15,000 req/s | 12,000 req/s | **missed**: 20.0% below |"));
        assert!(text.contains("**missed**: 20.0% over"));
        assert!(text.contains("not measured"));
        assert!(text.contains("ingest: 5 answered 200, 5 stored (equal) in 2 commits (2.5 events per commit)"));
        assert!(text.contains("`gantry-bench all --quick`"));
        assert!(text.contains("- a note"));
        // Every table row has the header's column count.
        for line in text.lines().filter(|l| l.starts_with("| sqlite | baseline")) {
            assert_eq!(line.matches('|').count(), 18, "{line}");
        }
    }

    fn outcome(offered: f64, sent: u64, acked: u64, unacked_at_end: u64) -> crate::mqtt_load::Outcome {
        crate::mqtt_load::Outcome {
            offered_rate: offered,
            connections: 1000,
            sent,
            acked,
            measured_acked: acked,
            latency: Latency {
                p50_ms: 4.0,
                p90_ms: 8.0,
                p99_ms: 120.0,
                p999_ms: 150.0,
                max_ms: 200.0,
                mean_ms: 5.0,
            },
            unacked_at_end,
            unacked_after_drain: 0,
            drain_seconds: 0.4,
            active_seconds: 10.0,
            measured_seconds: 8.0,
            lost_connections: 0,
            windows: Vec::new(),
        }
    }

    #[test]
    fn mqtt_targets_and_checks() {
        let mut report = sample_report();
        report.settings.scenarios = vec![
            ingest_mqtt::SCENARIO.into(),
            control::SCENARIO.into(),
            connections::SCENARIO.into(),
        ];
        report.settings.ingest_devices = 1000;
        let run = &mut report.runs[0];
        let mut gantry = measurement(
            ingest_mqtt::SCENARIO,
            &format!("{}, 25,000 msg/s offered", ingest_mqtt::VARIANT),
            1000,
            20_000.0,
            120.0,
        );
        gantry.baseline_ratio = Some(0.9);
        run.measurements = vec![
            gantry,
            measurement(control::SCENARIO, control::IDLE_VARIANT, 1, 300.0, 9.0),
        ];
        run.mqtt_ingest = Some(MqttIngestCheck {
            gantry: outcome(25_000.0, 250_000, 200_000, 50_000),
            stored: 200_000,
            every_ack_stored: true,
            stored_per_second: 20_000.0,
            mosquitto: None,
            mosquitto_skipped: Some("connection refused".into()),
        });
        run.control_check = Some(ControlCheck {
            sent: 3000,
            completed: 2999,
            matches: false,
            background: None,
        });
        run.connections = Some(ConnectionsResult {
            target: 19_000,
            open_file_limit: Some(20_000),
            held: 19_000,
            connect_seconds: 10.0,
            connects_per_second: 1900.0,
            idle_rss_mib: Some(20.0),
            rss_before_mib: Some(40.0),
            rss_after_mib: Some(240.0),
            kib_per_connection: Some(10.78),
            error: None,
        });
        run.idle_rss_mib = Some(20.0);
        let targets = targets_for(&report.runs[0], &report.settings);
        let by_name = |name: &str| targets.iter().find(|t| t.target.starts_with(name)).unwrap();
        let stored = by_name("ingest-mqtt: events stored/s");
        assert_eq!((stored.measured, stored.met), (Some(20_000.0), Some(false)));
        assert_eq!(by_name("ingest-mqtt: p99").met, Some(false));
        // 50,000 unacknowledged at 25,000/s offered: two seconds behind.
        assert_eq!(by_name("ingest-mqtt: backlog").measured, Some(2.0));
        let ratio = by_name("ingest-mqtt: stored/s over");
        assert_eq!(
            (ratio.met, ratio.note.as_deref()),
            (Some(true), Some("connection refused"))
        );
        let p50 = by_name("control: round trip p50");
        assert_eq!(p50.met, Some(true));
        assert_eq!(p50.note.as_deref(), Some("3000 sent but 2999 logs completed"));
        assert_eq!(by_name("control: round trip p99").met, Some(true));
        assert_eq!(by_name("connections: held").met, Some(true));
        let memory = by_name("connections: server memory");
        assert_eq!(memory.met, Some(false));
        assert!((memory.measured.unwrap() - 11.04).abs() < 0.01);
        assert_eq!(by_name("idle server RSS").met, Some(true));
        assert!(
            stored
                .note
                .as_deref()
                .unwrap()
                .contains("sustained 6 s, not 10 minutes")
        );
        // Every message stored and the last drained at once: the paced 25,000/s was kept,
        // though stored/s (over a window that holds the drain) reads a little less.
        let mut kept = report.runs[0].clone();
        kept.mqtt_ingest = Some(MqttIngestCheck {
            gantry: outcome(25_000.0, 250_000, 250_000, 2_000),
            stored: 250_000,
            every_ack_stored: true,
            stored_per_second: 24_990.0,
            mosquitto: None,
            mosquitto_skipped: None,
        });
        let kept_targets = targets_for(&kept, &report.settings);
        let kept_stored = &kept_targets
            .iter()
            .find(|t| t.target.starts_with("ingest-mqtt: events stored/s"))
            .unwrap();
        assert_eq!(
            (kept_stored.measured, kept_stored.met, kept_stored.shortfall_pct),
            (Some(24_990.0), Some(true), None)
        );
        assert!(
            kept_stored
                .note
                .as_deref()
                .unwrap()
                .contains("kept pace with 25,000 msg/s offered")
        );
        // Offered below the floor, the same run does not meet it.
        let mut slow = kept.clone();
        if let Some(c) = slow.mqtt_ingest.as_mut() {
            c.gantry.offered_rate = 20_000.0;
        }
        let slow_targets = targets_for(&slow, &report.settings);
        assert_eq!(slow_targets[0].met, Some(false));

        let mut long = report.settings.clone();
        long.duration_seconds = 200.0;
        let long_targets = targets_for(&report.runs[0], &long);
        let long_note = long_targets[0].note.as_deref().unwrap_or("");
        assert!(!long_note.contains("10 minutes"), "{long_note}");

        report.targets = targets;
        let text = render_markdown(&report);
        assert!(
            text.contains("200,000 acknowledged, 200,000 events stored (every acknowledged message stored)"),
            "{text}"
        );
        assert!(text.contains("no Mosquitto baseline: connection refused"));
        assert!(text.contains("3000 controls sent, 2999 event logs read completed afterwards (**differ**)"));
        assert!(text.contains("19,000 of 19,000 held"));
        assert!(text.contains("| ≥ 0.80 × | 0.90 × | met |"), "{text}");
    }

    #[test]
    fn postgres_is_checked_at_its_own_rate_and_the_rest_shown_for_reference() {
        let mut report = sample_report();
        report.settings.scenarios = vec![ingest_rest::SCENARIO.into(), ingest_mqtt::SCENARIO.into()];
        report.settings.ingest_devices = 1000;
        report.settings.duration_seconds = 200.0;
        let run = &mut report.runs[0];
        run.backend = "postgres".into();
        let mut ceiling = measurement(
            ingest_mqtt::SCENARIO,
            &ingest_mqtt::variant(25_000.0),
            1000,
            20_000.0,
            4_000.0,
        );
        ceiling.baseline_ratio = Some(0.85);
        run.measurements.push(ceiling);
        run.measurements.push(measurement(
            ingest_mqtt::SCENARIO,
            &ingest_mqtt::variant(10_000.0),
            1000,
            9_990.0,
            40.0,
        ));
        run.mqtt_ingest = Some(MqttIngestCheck {
            gantry: outcome(25_000.0, 250_000, 200_000, 50_000),
            stored: 200_000,
            every_ack_stored: true,
            stored_per_second: 20_000.0,
            mosquitto: None,
            mosquitto_skipped: None,
        });
        // Only the run at the ceiling: PostgreSQL's floor is checked there.
        let by_name =
            |targets: &[TargetResult], name: &str| targets.iter().find(|t| t.target == name).cloned().unwrap();
        let alone = targets_for(&report.runs[0], &report.settings);
        let stored = by_name(&alone, "ingest-mqtt: events stored/s (QoS 1)");
        assert_eq!(
            (stored.limit, stored.met, stored.reference),
            (10_000.0, Some(true), false)
        );
        assert_eq!(
            by_name(&alone, "ingest-mqtt: p99 publish→committed").measured,
            Some(4_000.0)
        );
        assert!(alone.iter().all(|t| !t.target.contains("msg/s offered")));

        let run = &mut report.runs[0];
        run.mqtt_floor = Some(MqttIngestCheck {
            gantry: outcome(10_000.0, 100_000, 100_000, 100),
            stored: 100_000,
            every_ack_stored: true,
            stored_per_second: 9_990.0,
            mosquitto: None,
            mosquitto_skipped: None,
        });
        let targets = targets_for(&report.runs[0], &report.settings);
        let stored = by_name(&targets, "ingest-mqtt: events stored/s (QoS 1)");
        assert_eq!((stored.measured, stored.met), (Some(9_990.0), Some(true)));
        assert!(
            stored
                .note
                .as_deref()
                .unwrap()
                .contains("kept pace with 10,000 msg/s offered")
        );
        let p99 = by_name(&targets, "ingest-mqtt: p99 publish→committed");
        assert_eq!((p99.measured, p99.met, p99.reference), (Some(40.0), Some(true), false));
        let backlog = by_name(
            &targets,
            "ingest-mqtt: backlog when publishing stopped, in seconds of load",
        );
        assert_eq!((backlog.measured, backlog.met), (Some(0.01), Some(true)));
        // The ratio to Mosquitto is of the run beside it, the embedded default's target.
        let ratio = by_name(&targets, "ingest-mqtt: stored/s over plain Mosquitto's delivered/s");
        assert_eq!(
            (ratio.measured, ratio.met, ratio.reference),
            (Some(0.85), Some(true), true)
        );
        let own: Vec<&str> = targets
            .iter()
            .filter(|t| !t.reference)
            .map(|t| t.target.as_str())
            .collect();
        assert_eq!(
            own,
            [
                "ingest-mqtt: events stored/s (QoS 1)",
                "ingest-mqtt: p99 publish→committed",
                "ingest-mqtt: backlog when publishing stopped, in seconds of load"
            ]
        );
        // The embedded default's figures, PostgreSQL's against them, not counted as targets.
        let at_ceiling = by_name(&targets, "ingest-mqtt at 25,000 msg/s offered: p99 publish→committed");
        assert_eq!(
            (at_ceiling.measured, at_ceiling.met, at_ceiling.reference),
            (Some(4_000.0), Some(false), true)
        );
        assert!(
            at_ceiling
                .note
                .as_deref()
                .unwrap()
                .contains("it asks 10,000 events/s of PostgreSQL")
        );
        let rest = by_name(&targets, "ingest-rest: single-event POSTs/s at 64 connections");
        assert_eq!((rest.met, rest.reference), (Some(false), true));
        assert!(
            rest.note
                .as_deref()
                .unwrap()
                .starts_with("set by the issue for the embedded default")
        );

        report.targets = targets;
        let text = render_markdown(&report);
        assert!(
            text.contains("| 12,000 req/s | for reference: 20.0% below | set by the issue"),
            "{text}"
        );
        assert!(text.contains("| 4,000 ms | for reference: 3900.0% over |"), "{text}");
        assert!(text.contains("| 0.85 × | for reference: within |"), "{text}");
        assert!(
            text.contains("published 100,000 messages at 10,000 msg/s offered"),
            "{text}"
        );
    }

    /// A report of two stores with every scenario and every check, for the golden tests.
    fn golden_report() -> Report {
        let mut report = sample_report();
        report.settings.scenarios = ["read", "ingest-rest", "ingest-mqtt", "control", "connections"]
            .map(str::to_owned)
            .to_vec();
        report.settings.ingest_devices = 1000;
        report.settings.duration_seconds = 200.0;
        let sqlite = &mut report.runs[0];
        sqlite.devices_created = 2011;
        sqlite.devices_seconds = 3.25;
        sqlite.seed = Some(Seeded {
            method: "store",
            listed_device_events: 100_000,
            store_events: 1_000_000,
            seconds: 12.5,
            events_per_second: 80_000.0,
        });
        let mut gantry = measurement(
            ingest_mqtt::SCENARIO,
            &ingest_mqtt::variant(25_000.0),
            1000,
            24_990.0,
            80.0,
        );
        gantry.baseline_ratio = Some(0.9);
        sqlite.measurements.extend([
            measurement(read::SCENARIO, read::FIRST_PAGE_VARIANT, 1, 900.0, 12.0),
            gantry,
            measurement(control::SCENARIO, control::IDLE_VARIANT, 1, 300.0, 4.5),
            measurement(
                control::SCENARIO,
                &format!("{} 10,000 msg/s of telemetry", control::LOADED_PREFIX),
                1,
                150.0,
                30.0,
            ),
        ]);
        sqlite.mqtt_ingest = Some(MqttIngestCheck {
            gantry: outcome(25_000.0, 250_000, 250_000, 2_000),
            stored: 250_000,
            every_ack_stored: true,
            stored_per_second: 24_990.0,
            mosquitto: Some(crate::scenarios::ingest_mqtt::MosquittoBaseline {
                addr: "127.0.0.1:1883".into(),
                publishers: outcome(25_000.0, 250_000, 250_000, 0),
                delivered: 250_000,
                delivered_per_second: 27_000.0,
            }),
            mosquitto_skipped: None,
        });
        sqlite.control_check = Some(ControlCheck {
            sent: 3000,
            completed: 3000,
            matches: true,
            background: Some(outcome(10_000.0, 100_000, 100_000, 10)),
        });
        sqlite.connections = Some(ConnectionsResult {
            target: 2_000,
            open_file_limit: Some(4_096),
            held: 1_990,
            connect_seconds: 2.0,
            connects_per_second: 995.0,
            idle_rss_mib: Some(20.0),
            rss_before_mib: Some(40.0),
            rss_after_mib: Some(60.0),
            kib_per_connection: Some(10.3),
            error: Some("connection refused".into()),
        });
        sqlite.idle_rss_mib = Some(18.5);
        sqlite.server = Some(crate::server::Stopped {
            exit: "exit status: 0".into(),
            peak_rss_mib: Some(120.0),
            cpu_seconds: Some(300.5),
            stop_seconds: 0.4,
        });
        sqlite.skipped.push("nothing, but shown".into());

        let mut postgres = report.runs[0].clone();
        postgres.backend = "postgres".into();
        postgres.measurements.push(measurement(
            ingest_mqtt::SCENARIO,
            &ingest_mqtt::variant(10_000.0),
            1000,
            9_990.0,
            40.0,
        ));
        postgres.mqtt_ingest = Some(MqttIngestCheck {
            gantry: outcome(25_000.0, 250_000, 200_000, 50_000),
            stored: 200_000,
            every_ack_stored: true,
            stored_per_second: 20_000.0,
            mosquitto: None,
            mosquitto_skipped: Some("connection refused".into()),
        });
        postgres.mqtt_floor = Some(MqttIngestCheck {
            gantry: outcome(10_000.0, 100_000, 100_000, 100),
            stored: 100_000,
            every_ack_stored: true,
            stored_per_second: 9_990.0,
            mosquitto: None,
            mosquitto_skipped: None,
        });
        postgres.control_check = Some(ControlCheck {
            sent: 3000,
            completed: 2999,
            matches: false,
            background: None,
        });
        postgres.error = Some("stopped by the test".into());
        report.runs.push(postgres);
        report.targets = report
            .runs
            .iter()
            .flat_map(|run| targets_for(run, &report.settings))
            .collect();
        report
    }

    /// Compares `text` with the file `testdata/<name>`; `GANTRY_BENCH_BLESS=1` writes it instead.
    fn golden(name: &str, text: &str) {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("testdata")
            .join(name);
        if std::env::var_os("GANTRY_BENCH_BLESS").is_some() {
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(&path, text).unwrap();
        }
        let expected = std::fs::read_to_string(&path).unwrap_or_default();
        assert!(
            expected == text,
            "{} differs from the rendering:\n{text}",
            path.display()
        );
    }

    #[test]
    fn the_rendered_report_is_pinned() {
        let report = golden_report();
        golden("report.md", &render_markdown(&report));
        let targets = serde_json::to_string_pretty(&report.targets).unwrap() + "\n";
        golden("targets.json", &targets);
    }

    #[test]
    fn the_report_serializes() {
        let json = serde_json::to_value(sample_report()).unwrap();
        assert_eq!(json["runs"][0]["measurements"][1]["scenario"], "ingest-rest");
        assert_eq!(json["targets"][0]["bound"], "at_least");
        assert_eq!(json["machine"]["cpus"], 2);
    }
}
