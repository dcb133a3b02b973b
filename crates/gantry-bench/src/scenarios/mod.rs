//! The scenarios, and what every measurement reports: throughput, latency percentiles, errors,
//! and what the server and the load generator spent on it.

pub mod alarms;
pub mod alternated;
pub mod baseline;
pub mod connections;
pub mod console;
pub mod control;
pub mod ingest_mqtt;
pub mod ingest_rest;
pub mod read;
pub mod reconnect;
pub mod series;
pub mod sign_in;
pub mod stream;
pub mod webhooks;

use std::collections::BTreeMap;
use std::time::Duration;

use serde::Serialize;

use crate::http::{Api, Target};
use crate::load::{self, Latency, LoadResult, LoadSpec, RequestFn};
use crate::server::{Usage, UsageMeter};

/// What the scenarios share within one run against one server.
pub struct Ctx<'a> {
    /// The server, with the administrator's token.
    pub target: &'a Target,
    pub api: &'a Api,
    /// The server's MQTT side, when it is known.
    pub mqtt: Option<&'a ingest_mqtt::MqttTarget>,
    /// The server's MQTT/TLS listener, when `--tls` asks ingest-mqtt to be measured over it too.
    pub mqtt_tls: Option<&'a ingest_mqtt::MqttTarget>,
    /// The server's process, when the bench started it (for /proc sampling).
    pub pid: Option<u32>,
    /// The store is a PostgreSQL on this machine: its processes' CPU is measured apart.
    pub local_postgres: bool,
    /// The store the bench made for the run (None against a running Gantry): a scenario that
    /// bulk-loads rows brings its statistics up to date through it before measuring.
    pub database: Option<&'a crate::db::Database>,
    pub warmup: Duration,
    pub duration: Duration,
    /// The "many connections" figure (64 unless --connections says otherwise).
    pub connections: usize,
}

#[derive(Debug, Clone, Serialize)]
pub struct Measurement {
    pub scenario: &'static str,
    pub variant: String,
    pub connections: usize,
    /// 2xx answers per second of the measured part.
    pub requests_per_second: f64,
    pub ok: u64,
    /// Non-2xx answers and lost connections.
    pub failed: u64,
    pub failed_by_status: BTreeMap<u16, u64>,
    pub latency: Latency,
    /// Throughput over the `GET /healthz` baseline at the same concurrency, same run.
    pub baseline_ratio: Option<f64>,
    pub usage: Usage,
    /// Server CPU time per answered request (warm-up included), µs.
    pub server_cpu_us_per_request: Option<f64>,
    /// The load generator's CPU time per answered request, µs.
    pub client_cpu_us_per_request: Option<f64>,
    /// Cores the server kept busy on average over the run.
    pub server_cores_busy: Option<f64>,
    /// Cores the local PostgreSQL kept busy (PostgreSQL runs only).
    pub postgres_cores_busy: Option<f64>,
    /// Cores every other process (neither server, bench nor PostgreSQL) kept busy meanwhile: noise.
    pub other_cores_busy: Option<f64>,
    /// KiB the server handed to write calls (files and sockets: WAL, checkpoints, answers) per
    /// answered request.
    pub server_written_kib_per_request: Option<f64>,
    pub note: Option<String>,
}

/// Runs one closed-loop measurement and samples the server around it.
pub async fn measure(
    ctx: &Ctx<'_>,
    scenario: &'static str,
    variant: &str,
    connections: usize,
    make: RequestFn,
) -> anyhow::Result<(Measurement, LoadResult)> {
    let meter = UsageMeter::start(ctx.pid, ctx.local_postgres);
    let spec = LoadSpec {
        connections,
        warmup: ctx.warmup,
        duration: ctx.duration,
    };
    let result = load::run(ctx.target, spec, make).await?;
    let usage = meter.finish().await;
    let mut measurement = Measurement::new(
        scenario,
        variant.to_owned(),
        connections,
        result.ok_per_second(),
        result.ok,
        result.failed_total(),
        load::summarize(&result.latency),
        usage,
        result.answered_total,
        result.wall,
    );
    measurement.failed_by_status = result.failed.clone();
    measurement.log();
    Ok((measurement, result))
}

impl Measurement {
    /// A paced MQTT run's measurement (`mqtt_load::drive`): messages acknowledged per second,
    /// publish → PUBACK latency.
    pub fn of_acked(
        scenario: &'static str,
        variant: String,
        outcome: &crate::mqtt_load::Outcome,
        usage: Usage,
    ) -> Self {
        Self::new(
            scenario,
            variant,
            outcome.connections,
            outcome.acked_per_second(),
            outcome.measured_acked,
            outcome.unacked_after_drain,
            outcome.latency,
            usage,
            outcome.acked,
            Duration::from_secs_f64(outcome.active_seconds),
        )
    }

    /// A measurement from its counts and what the server spent meanwhile. `answered` is every
    /// answer the server gave over `wall`, warm-up included: the cost per request divides by it.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        scenario: &'static str,
        variant: String,
        connections: usize,
        per_second: f64,
        ok: u64,
        failed: u64,
        latency: Latency,
        usage: Usage,
        answered: u64,
        wall: Duration,
    ) -> Self {
        let answered = answered.max(1) as f64;
        let wall = wall.as_secs_f64().max(f64::EPSILON);
        Self {
            scenario,
            variant,
            connections,
            requests_per_second: per_second,
            ok,
            failed,
            failed_by_status: BTreeMap::new(),
            latency,
            baseline_ratio: None,
            usage,
            server_cpu_us_per_request: usage.server_cpu_seconds.map(|s| s * 1e6 / answered),
            client_cpu_us_per_request: usage.client_cpu_seconds.map(|s| s * 1e6 / answered),
            server_cores_busy: usage.server_cpu_seconds.map(|s| s / wall),
            postgres_cores_busy: usage.postgres_cpu_seconds.map(|s| s / wall),
            other_cores_busy: usage.other_cpu_seconds.map(|s| s / wall),
            server_written_kib_per_request: usage.server_written_bytes.map(|b| b as f64 / 1024.0 / answered),
            note: None,
        }
    }

    /// One line on stderr, as each measurement ends.
    pub fn log(&self) {
        eprintln!(
            "  {:<11} {:<44} {:>4} conn  {:>9.0} /s  p50 {:>7.2} ms  p99 {:>7.2} ms{}",
            self.scenario,
            self.variant,
            self.connections,
            self.requests_per_second,
            self.latency.p50_ms,
            self.latency.p99_ms,
            if self.failed > 0 {
                format!("  {} failed {:?}", self.failed, self.failed_by_status)
            } else {
                String::new()
            }
        );
    }
}

/// Fills `baseline_ratio` of every measurement from the baseline at the same concurrency.
pub fn apply_baselines(measurements: &mut [Measurement]) {
    let baselines: BTreeMap<usize, f64> = measurements
        .iter()
        .filter(|m| m.scenario == baseline::SCENARIO)
        .map(|m| (m.connections, m.requests_per_second))
        .collect();
    // MQTT measurements carry their own baseline (a plain broker), set by their scenario.
    for m in measurements.iter_mut().filter(|m| m.baseline_ratio.is_none()) {
        m.baseline_ratio = baselines
            .get(&m.connections)
            .filter(|b| **b > 0.0)
            .map(|b| m.requests_per_second / b);
    }
}
