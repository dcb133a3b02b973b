//! The scenarios, and what every measurement reports: throughput, latency percentiles, errors,
//! and what the server and the load generator spent on it.

pub mod baseline;
pub mod ingest_rest;
pub mod read;

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
    /// The server's process, when the bench started it (for /proc sampling).
    pub pid: Option<u32>,
    /// The store is a PostgreSQL on this machine: its processes' CPU is measured apart.
    pub local_postgres: bool,
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
    let answered = result.answered_total.max(1) as f64;
    let wall = result.wall.as_secs_f64().max(f64::EPSILON);
    let measurement = Measurement {
        scenario,
        variant: variant.to_owned(),
        connections,
        requests_per_second: result.ok_per_second(),
        ok: result.ok,
        failed: result.failed_total(),
        failed_by_status: result.failed.clone(),
        latency: load::summarize(&result.latency),
        baseline_ratio: None,
        usage,
        server_cpu_us_per_request: usage.server_cpu_seconds.map(|s| s * 1e6 / answered),
        client_cpu_us_per_request: usage.client_cpu_seconds.map(|s| s * 1e6 / answered),
        server_cores_busy: usage.server_cpu_seconds.map(|s| s / wall),
        postgres_cores_busy: usage.postgres_cpu_seconds.map(|s| s / wall),
        other_cores_busy: usage.other_cpu_seconds.map(|s| s / wall),
        server_written_kib_per_request: usage.server_written_bytes.map(|b| b as f64 / 1024.0 / answered),
        note: None,
    };
    eprintln!(
        "  {scenario:<11} {variant:<44} {connections:>3} conn  {:>9.0} req/s  p50 {:>7.2} ms  p99 {:>7.2} ms{}",
        measurement.requests_per_second,
        measurement.latency.p50_ms,
        measurement.latency.p99_ms,
        if measurement.failed > 0 {
            format!("  {} failed {:?}", measurement.failed, measurement.failed_by_status)
        } else {
            String::new()
        }
    );
    Ok((measurement, result))
}

/// Fills `baseline_ratio` of every measurement from the baseline at the same concurrency.
pub fn apply_baselines(measurements: &mut [Measurement]) {
    let baselines: BTreeMap<usize, f64> = measurements
        .iter()
        .filter(|m| m.scenario == baseline::SCENARIO)
        .map(|m| (m.connections, m.requests_per_second))
        .collect();
    for m in measurements.iter_mut() {
        m.baseline_ratio = baselines
            .get(&m.connections)
            .filter(|b| **b > 0.0)
            .map(|b| m.requests_per_second / b);
    }
}
