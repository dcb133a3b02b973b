//! `gantry-bench`: measures a Gantry (started here, or one already running) with closed-loop HTTP
//! load, against SQLite and optionally PostgreSQL, and writes a JSON report, a markdown table and
//! a latency chart. Every figure is also given as a ratio to a baseline measured in the same run,
//! because the machines this runs on are shared and noisy.

mod chart;
mod cli;
mod command_line;
mod db;
mod format;
mod http;
mod load;
mod machine;
mod mqtt;
mod mqtt_load;
mod report;
mod runner;
mod scenarios;
mod seed;
mod server;
mod store;

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Instant;

use anyhow::{Context, bail};
use clap::Parser;

use crate::cli::{Cli, Options};
use crate::db::Backend;
use crate::report::{BackendRun, Report};
use crate::runner::MqttPlan;
use crate::store::Store;

#[tokio::main]
async fn main() -> ExitCode {
    let cli = Cli::parse();
    match run(cli).await {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::from(2),
        Err(e) => {
            eprintln!("gantry-bench: {e:#}");
            ExitCode::FAILURE
        }
    }
}

/// Runs everything and writes the report. False when a run stopped early or stored a different
/// number of events than were acknowledged (a missed target is a finding, not a failure).
async fn run(cli: Cli) -> anyhow::Result<bool> {
    let started = Instant::now();
    let started_at = chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
    let opts = &cli.options;
    let (mode, settings) = opts.settings(cli.command)?;
    std::fs::create_dir_all(&opts.out).with_context(|| format!("creating {}", opts.out.display()))?;
    let machine = machine::Machine::read();
    let plan = MqttPlan::resolve(opts).await?;
    let mut notes = Vec::new();
    if cfg!(debug_assertions) {
        notes.push("the bench is a debug build: its own cost distorts every figure; run it with --release".to_owned());
    }

    let (gantry, runs) = match (&opts.url, &opts.token) {
        (Some(url), Some(token)) => {
            notes.push(
                "remote Gantry: the listed device's events were posted over REST and the rest of its store is \
                 whatever it holds; server CPU and memory were not sampled"
                    .to_owned(),
            );
            let mut run = BackendRun::new(Store::Remote);
            if let Err(e) = runner::remote(&mut run, url, token, &settings, &plan).await {
                report_error(&mut run, e);
            }
            (url.clone(), vec![run])
        }
        _ => {
            let bin = gantry_binary(opts)?;
            if bin.parent().and_then(Path::file_name).is_some_and(|d| d == "debug") {
                notes.push("gantry is a debug build: the figures say little about a release build".to_owned());
            }
            let mut backends = Vec::new();
            if !opts.skip_sqlite {
                backends.extend(
                    opts.sqlite_engines
                        .iter()
                        .map(|engine| Backend::Sqlite(engine.engine())),
                );
            }
            if let Some(url) = &opts.database_url {
                backends.push(Backend::Postgres {
                    server_url: url.clone(),
                });
            }
            let mut runs = Vec::new();
            for backend in &backends {
                let mut run = BackendRun::new(backend.store());
                if let Err(e) = runner::local(&mut run, &bin, backend, &settings, &plan, &opts.out, opts.keep).await {
                    report_error(&mut run, e);
                }
                runs.push(run);
            }
            (bin.display().to_string(), runs)
        }
    };

    let targets = runs
        .iter()
        .flat_map(|run| report::targets_for(run, &settings))
        .collect();
    let report = Report {
        tool: format!("gantry-bench {}", env!("CARGO_PKG_VERSION")),
        started_at,
        seconds: started.elapsed().as_secs_f64(),
        command: command_line::command_line(),
        mode,
        settings,
        machine,
        gantry,
        bench_build: if cfg!(debug_assertions) { "debug" } else { "release" },
        runs,
        targets,
        notes,
    };
    write_outputs(&report, &opts.out)?;
    Ok(report.sound())
}

fn report_error(run: &mut BackendRun, e: anyhow::Error) {
    eprintln!("[{}] stopped: {e:#}", run.backend);
    run.error = Some(format!("{e:#}"));
}

fn write_outputs(report: &Report, out: &Path) -> anyhow::Result<()> {
    let json = out.join("report.json");
    std::fs::write(&json, serde_json::to_string_pretty(report)? + "\n")?;
    let markdown = report::render_markdown(report);
    std::fs::write(out.join("report.md"), &markdown)?;
    let series: Vec<(String, Vec<load::WindowPoint>)> = report
        .runs
        .iter()
        .filter(|r| !r.ingest_timeline.is_empty())
        .map(|r| (r.backend.to_string(), r.ingest_timeline.clone()))
        .collect();
    if !series.is_empty() {
        chart::render(&out.join("ingest-rest-latency.png"), "ingest-rest", &series)?;
    }
    let mqtt_series: Vec<(String, Vec<load::WindowPoint>)> = report
        .runs
        .iter()
        .flat_map(|r| {
            let floor = r.mqtt_floor.as_ref().map(|c| {
                let rate = format::thousands(c.gantry.offered_rate);
                (format!("{} at {rate}/s", r.backend), c)
            });
            r.mqtt_ingest
                .as_ref()
                .map(|c| (r.backend.to_string(), c))
                .into_iter()
                .chain(floor)
        })
        .map(|(backend, c)| {
            let points = c
                .gantry
                .windows
                .iter()
                .map(|w| load::WindowPoint {
                    second: w.second,
                    answers: w.acked,
                    p50_ms: w.p50_ms,
                    p99_ms: w.p99_ms,
                })
                .collect();
            (backend, points)
        })
        .collect();
    if !mqtt_series.is_empty() {
        chart::render(&out.join("ingest-mqtt-latency.png"), "ingest-mqtt", &mqtt_series)?;
    }
    println!("{markdown}");
    eprintln!(
        "report: {} (and report.md, the ingest-*-latency.png charts)",
        json.display()
    );
    Ok(())
}

/// The gantry executable to start. When cargo runs the bench, cargo built only the bench, so the
/// gantry beside it may be stale or missing: build it first, in the bench's own profile.
fn gantry_binary(opts: &Options) -> anyhow::Result<PathBuf> {
    if let Some(bin) = &opts.gantry_bin {
        return Ok(bin.clone());
    }
    let exe = std::env::current_exe()?;
    let bin = exe.with_file_name("gantry");
    if let (Ok(cargo), Ok(manifest_dir)) = (std::env::var("CARGO"), std::env::var("CARGO_MANIFEST_DIR")) {
        let mut args = vec!["build", "-q", "-p", "gantry", "--bin", "gantry"];
        let profile = exe.parent().and_then(Path::file_name).and_then(|n| n.to_str());
        match profile {
            Some("release") => args.push("--release"),
            Some("debug") | None => {}
            Some(other) => args.extend(["--profile", other]),
        }
        eprintln!("building gantry: cargo {}", args.join(" "));
        let mut command = std::process::Command::new(cargo);
        command.args(&args).current_dir(manifest_dir);
        // `cargo run` gave this process the bench's CARGO_PKG_* and CARGO_MANIFEST_*; some build
        // scripts rerun when those change, so passing them on would rebuild gantry every time.
        for (key, _) in std::env::vars_os() {
            if let Some(key) = key.to_str()
                && (key.starts_with("CARGO_PKG_")
                    || key.starts_with("CARGO_MANIFEST_")
                    || matches!(key, "CARGO_CRATE_NAME" | "CARGO_BIN_NAME" | "CARGO_PRIMARY_PACKAGE"))
            {
                command.env_remove(key);
            }
        }
        let status = command.status().context("running cargo build for gantry")?;
        if !status.success() {
            bail!("building gantry failed ({status})");
        }
    }
    Ok(bin)
}
