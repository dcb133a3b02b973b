//! The targets' checks and the rendering, against fixed measurements (and the golden files in
//! testdata/).

use super::targets::{Bound, evaluate};
use super::*;
use crate::load::Latency;
use crate::machine::Machine;
use crate::scenarios::connections::{self, ConnectionsResult};
use crate::scenarios::control::{self, ControlCheck};
use crate::scenarios::ingest_mqtt::{self, MqttIngestCheck};
use crate::scenarios::ingest_rest::{self, IngestCheck};
use crate::scenarios::{Measurement, read, reconnect};
use crate::seed::Seeded;
use crate::server::Usage;
use crate::store::Store;

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
        series_events: 43_200,
        mqtt_rate: 25_000.0,
        control_background_rate: 10_000.0,
        burst: control::Burst::FULL,
        held_connections: 19_000,
        stream: crate::scenarios::stream::StreamLoad::FULL,
        console_devices: 10_000,
        reconnect: crate::scenarios::reconnect::ReconnectLoad::FULL,
    };
    let mut run = BackendRun::new(Store::Sqlite);
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
        burst: None,
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
    run.backend = Store::Postgres;
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
    let by_name = |targets: &[TargetResult], name: &str| targets.iter().find(|t| t.target == name).cloned().unwrap();
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
        measurement(control::SCENARIO, control::BURST_VARIANT, 1, 120.0, 18.0),
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
        burst: Some(outcome(25_000.0, 250_000, 250_000, 3_000)),
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
    postgres.backend = Store::Postgres;
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
        burst: None,
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

#[test]
fn a_run_is_sound_until_a_store_stops_or_a_count_differs() {
    assert!(sample_report().sound());
    // The golden report's PostgreSQL run stopped early and lost a control's log.
    assert!(!golden_report().sound());
    let mut lost = sample_report();
    if let Some(c) = lost.runs[0].ingest_check.as_mut() {
        c.matches = false;
    }
    assert!(!lost.sound());
}

#[test]
fn controls_right_after_a_burst_are_checked_and_a_smaller_burst_says_so() {
    let mut report = sample_report();
    report.settings.scenarios = vec![control::SCENARIO.into()];
    report.runs[0]
        .measurements
        .push(measurement(control::SCENARIO, control::BURST_VARIANT, 1, 100.0, 15.0));
    let by_name = |targets: &[TargetResult], name: &str| targets.iter().find(|t| t.target == name).cloned().unwrap();
    let targets = targets_for(&report.runs[0], &report.settings);
    let p99 = by_name(&targets, "control: round trip p99, right after an ingest burst");
    assert_eq!((p99.limit, p99.measured, p99.met), (20.0, Some(15.0), Some(true)));
    let max = by_name(&targets, "control: round trip max, right after an ingest burst");
    assert_eq!((max.limit, max.measured, max.met), (50.0, Some(45.0), Some(true)));
    assert_eq!((p99.note, max.reference), (None, false));

    report.settings.burst = control::Burst {
        events: 50_000,
        rate: 5_000.0,
        ..control::Burst::FULL
    };
    report.runs[0].measurements.last_mut().unwrap().latency.max_ms = 60.0;
    let targets = targets_for(&report.runs[0], &report.settings);
    let max = by_name(&targets, "control: round trip max, right after an ingest burst");
    assert_eq!(max.met, Some(false));
    assert!(
        max.note
            .as_deref()
            .unwrap()
            .starts_with("after 50,000 events at 5,000 msg/s from 200 devices, 200 controls"),
        "{:?}",
        max.note
    );
}

fn reconnect_check(load: reconnect::ReconnectLoad, missing: u64, p99_ms: f64) -> reconnect::ReconnectCheck {
    let latency = |p99_ms: f64| Latency {
        p50_ms: p99_ms / 2.0,
        p90_ms: p99_ms / 1.5,
        p99_ms,
        p999_ms: p99_ms,
        max_ms: p99_ms,
        mean_ms: p99_ms / 2.0,
    };
    reconnect::ReconnectCheck {
        load,
        connected: load.devices as u64,
        received: load.devices as u64 - missing,
        missing,
        missing_devices: (0..missing).map(|i| format!("d-{i}: no delta in 30 s")).collect(),
        applied: load.devices as u64 - missing,
        connack: latency(40.0),
        delta: latency(p99_ms),
        spread_seconds: 1.4,
        window: (4, 5),
        alone_in_window: 10_000.0,
        with_in_window: 8_500.0,
        alone_per_second: 10_000.0,
        with_per_second: 9_900.0,
    }
}

#[test]
fn reconnects_are_checked_and_a_missing_delta_makes_the_run_unsound() {
    let mut report = sample_report();
    report.settings.scenarios = vec![reconnect::SCENARIO.into()];
    report.runs[0].reconnect_check = Some(reconnect_check(reconnect::ReconnectLoad::FULL, 0, 640.0));
    let by_name = |targets: &[TargetResult], name: &str| targets.iter().find(|t| t.target == name).cloned().unwrap();
    let targets = targets_for(&report.runs[0], &report.settings);
    assert_eq!(targets.len(), 3);
    let p99 = by_name(
        &targets,
        "reconnect: CONNACK → desired delta p99 (1,000 devices at once, 10,000 events/s)",
    );
    assert_eq!(
        (p99.limit, p99.measured, p99.met, p99.note),
        (1000.0, Some(640.0), Some(true), None)
    );
    let missing = by_name(&targets, "reconnect: devices without their delta");
    assert_eq!((missing.measured, missing.met), (Some(0.0), Some(true)));
    let ratio = by_name(
        &targets,
        "reconnect: ingest while the devices reconnect over ingest alone",
    );
    assert_eq!((ratio.measured, ratio.met), (Some(0.85), Some(false)));
    assert!(ratio.note.as_deref().unwrap().contains("seconds 4–5"));
    assert!(report.sound());

    let smaller = reconnect::ReconnectLoad {
        devices: 200,
        rate: 2_000.0,
    };
    report.runs[0].reconnect_check = Some(reconnect_check(smaller, 2, 1200.0));
    let targets = targets_for(&report.runs[0], &report.settings);
    let missing = by_name(&targets, "reconnect: devices without their delta");
    assert_eq!((missing.measured, missing.met), (Some(2.0), Some(false)));
    let note = missing.note.unwrap();
    assert!(
        note.starts_with("200 devices under 2,000 msg/s, not 1,000 under 10,000"),
        "{note}"
    );
    assert!(note.contains("d-1: no delta in 30 s"), "{note}");
    assert!(!report.sound());
    let text = render_markdown(&report);
    assert!(
        text.contains("198 their delta (**2 missing**: d-0: no delta in 30 s"),
        "{text}"
    );
}
