//! `gantry-bench`: measures a Gantry (started here, or one already running) with closed-loop HTTP
//! load, against SQLite and optionally PostgreSQL, and writes a JSON report, a markdown table and
//! a latency chart. Every figure is also given as a ratio to a baseline measured in the same run,
//! because the machines this runs on are shared and noisy.

mod chart;
mod db;
mod http;
mod load;
mod machine;
mod mqtt;
mod mqtt_load;
mod report;
mod scenarios;
mod seed;
mod server;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::{Context, bail, ensure};
use clap::{Args, Parser, Subcommand};

use crate::db::{Backend, Database};
use crate::http::{Api, Target};
use crate::report::{BackendRun, Report, Settings};
use crate::scenarios::ingest_mqtt::MqttTarget;
use crate::scenarios::{Ctx, baseline, connections, control, ingest_mqtt, ingest_rest, read};
use crate::seed::{Fleet, FleetSize};
use crate::server::{Server, ServerOptions};

#[derive(Debug, Parser)]
#[command(
    name = "gantry-bench",
    version,
    about = "Load generator and benchmark report for Gantry",
    after_help = "Writes <out>/report.json, <out>/report.md and the latency charts <out>/ingest-*-latency.png, and prints the tables."
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
    #[command(flatten)]
    options: Options,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Subcommand)]
enum Command {
    /// Single-event POST /api/v1/deviceEvents from many devices.
    IngestRest,
    /// GET device and shadow; a device's event listing in a store of many events.
    Read,
    /// QoS 1 telemetry from many devices over MQTT, paced; a plain Mosquitto as the baseline.
    IngestMqtt,
    /// PUT shadows → device over MQTT → ack → event log completed; idle and under telemetry.
    Control,
    /// As many device connections as the open-file limit allows, held; memory per connection.
    Connections,
    /// Every scenario.
    All,
}

#[derive(Debug, Args)]
struct Options {
    /// Small sizes and short measurements (well under 3 minutes on SQLite).
    #[arg(long, global = true)]
    quick: bool,
    /// Seconds each measurement runs after its warm-up [default: 10; --quick 2].
    #[arg(long, global = true, value_name = "SECS")]
    duration: Option<f64>,
    /// Concurrent connections of the "many connections" measurements.
    #[arg(long, global = true, default_value_t = 64)]
    connections: usize,
    /// Also run every scenario on PostgreSQL: a fresh database is created on this server for the
    /// run and dropped after it.
    #[arg(long, global = true, value_name = "postgres://...")]
    database_url: Option<String>,
    /// Where the report goes.
    #[arg(long, global = true, default_value = "target/gantry-bench")]
    out: PathBuf,
    /// Measure an already running Gantry at this base URL (http://host:port) instead of starting one.
    #[arg(long, global = true, requires = "token", conflicts_with = "database_url")]
    url: Option<String>,
    /// The administrator token of the Gantry given by --url.
    #[arg(long, global = true, requires = "url")]
    token: Option<String>,
    /// The gantry binary to start [default: `gantry` next to this executable; when run by cargo,
    /// it is built first with the same profile].
    #[arg(long, global = true, env = "GANTRY_BIN")]
    gantry_bin: Option<PathBuf>,
    /// Events on the device whose events are listed [default: 1,000,000; --quick 100,000].
    #[arg(long, global = true)]
    device_events: Option<u64>,
    /// Events in the whole store [default: 10,000,000; --quick 1,000,000].
    #[arg(long, global = true)]
    store_events: Option<u64>,
    /// Devices the ingest scenarios post and publish for [default: 1,000; --quick 200].
    #[arg(long, global = true)]
    ingest_devices: Option<usize>,
    /// Messages/s the ingest-mqtt devices publish in all [default: 25,000; --quick 5,000].
    #[arg(long, global = true)]
    mqtt_rate: Option<f64>,
    /// Messages/s of telemetry under the loaded control round trips [default: 10,000; --quick 2,000].
    #[arg(long, global = true)]
    control_background_rate: Option<f64>,
    /// Device connections to hold, capped by the open-file limit less 1,000 [default: 19,000;
    /// --quick 2,000].
    #[arg(long, global = true)]
    held_connections: Option<usize>,
    /// The plain Mosquitto of the ingest-mqtt baseline (anonymous access).
    #[arg(long, global = true, default_value = "127.0.0.1:1883", value_name = "HOST:PORT")]
    mosquitto: String,
    /// Skip the Mosquitto baseline.
    #[arg(long, global = true)]
    no_mosquitto: bool,
    /// Also run ingest-mqtt over MQTT/TLS (trusting the server's generated CA), at the same rate
    /// right after the plain run, and compare the two.
    #[arg(long, global = true, conflicts_with = "url")]
    tls: bool,
    /// With --url: the MQTT listener (host:port) of that Gantry, for the MQTT scenarios.
    #[arg(long, global = true, requires = "url", value_name = "HOST:PORT")]
    mqtt_addr: Option<String>,
    /// The topic prefix of the Gantry measured.
    #[arg(long, global = true, default_value = "gantry")]
    topic_prefix: String,
    /// Keep the data directory (and the PostgreSQL database) after the run, for inspection.
    #[arg(long, global = true)]
    keep: bool,
    /// With --database-url: measure PostgreSQL only.
    #[arg(long, global = true, requires = "database_url")]
    skip_sqlite: bool,
}

impl Options {
    fn settings(&self, command: Command) -> anyhow::Result<(String, Settings)> {
        let q = self.quick;
        let scenarios = match command {
            Command::IngestRest => vec![ingest_rest::SCENARIO],
            Command::Read => vec![read::SCENARIO],
            Command::IngestMqtt => vec![ingest_mqtt::SCENARIO],
            Command::Control => vec![control::SCENARIO],
            Command::Connections => vec![connections::SCENARIO],
            Command::All => vec![
                read::SCENARIO,
                ingest_rest::SCENARIO,
                ingest_mqtt::SCENARIO,
                control::SCENARIO,
                connections::SCENARIO,
            ],
        }
        .into_iter()
        .map(str::to_owned)
        .collect();
        let settings = Settings {
            scenarios,
            connections: self.connections,
            warmup_seconds: if q { 0.5 } else { 2.0 },
            duration_seconds: self.duration.unwrap_or(if q { 2.0 } else { 10.0 }),
            ingest_devices: self.ingest_devices.unwrap_or(if q { 200 } else { 1000 }),
            filler_devices: if q { 100 } else { 1000 },
            listed_device_events: self.device_events.unwrap_or(if q { 100_000 } else { 1_000_000 }),
            store_events: self.store_events.unwrap_or(if q { 1_000_000 } else { 10_000_000 }),
            mqtt_rate: self.mqtt_rate.unwrap_or(if q { 5_000.0 } else { 25_000.0 }),
            control_background_rate: self
                .control_background_rate
                .unwrap_or(if q { 2_000.0 } else { 10_000.0 }),
            held_connections: self.held_connections.unwrap_or(if q { 2_000 } else { 19_000 }),
        };
        ensure!(settings.connections > 0, "--connections must be at least 1");
        ensure!(settings.duration_seconds > 0.0, "--duration must be positive");
        ensure!(settings.ingest_devices > 0, "--ingest-devices must be at least 1");
        ensure!(settings.mqtt_rate > 0.0, "--mqtt-rate must be positive");
        ensure!(
            settings.control_background_rate >= 0.0,
            "--control-background-rate must not be negative"
        );
        ensure!(
            settings.store_events >= settings.listed_device_events,
            "--store-events must be at least --device-events"
        );
        let custom = self.duration.is_some()
            || self.device_events.is_some()
            || self.store_events.is_some()
            || self.ingest_devices.is_some()
            || self.mqtt_rate.is_some()
            || self.control_background_rate.is_some()
            || self.held_connections.is_some();
        let mode = match (q, custom) {
            (true, false) => "quick",
            (false, false) => "full",
            (true, true) => "quick, custom",
            (false, true) => "custom",
        };
        Ok((mode.to_owned(), settings))
    }
}

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
            let mut run = BackendRun::new("remote");
            if let Err(e) = remote(&mut run, url, token, &settings, &plan).await {
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
                backends.push(Backend::Sqlite);
            }
            if let Some(url) = &opts.database_url {
                backends.push(Backend::Postgres {
                    server_url: url.clone(),
                });
            }
            let mut runs = Vec::new();
            for backend in &backends {
                let mut run = BackendRun::new(backend.name());
                if let Err(e) = local(&mut run, &bin, backend, &settings, &plan, &opts.out, opts.keep).await {
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
        command: command_line(),
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
    Ok(report.runs.iter().all(|r| {
        r.error.is_none()
            && r.ingest_check.as_ref().is_none_or(|c| c.matches)
            && r.mqtt_ingest.iter().chain(&r.mqtt_floor).all(|c| c.every_ack_stored)
            && r.control_check.as_ref().is_none_or(|c| c.matches)
    }))
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
        .map(|r| (r.backend.clone(), r.ingest_timeline.clone()))
        .collect();
    if !series.is_empty() {
        chart::render(&out.join("ingest-rest-latency.png"), "ingest-rest", &series)?;
    }
    let mqtt_series: Vec<(String, Vec<load::WindowPoint>)> = report
        .runs
        .iter()
        .flat_map(|r| {
            let floor = r.mqtt_floor.as_ref().map(|c| {
                let rate = report::thousands(c.gantry.offered_rate);
                (format!("{} at {rate}/s", r.backend), c)
            });
            r.mqtt_ingest
                .as_ref()
                .map(|c| (r.backend.clone(), c))
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

/// A name suffix that keeps this run's records apart from any other run's on the same server.
fn run_tag() -> String {
    uuid::Uuid::new_v4().simple().to_string()[..8].to_owned()
}

/// What the MQTT scenarios need besides the server: its topic prefix and the baseline broker.
struct MqttPlan {
    prefix: String,
    mosquitto: Option<SocketAddr>,
    /// The MQTT listener of a Gantry given by --url.
    remote: Option<SocketAddr>,
    /// Measure ingest-mqtt over TLS too (`--tls`).
    tls: bool,
}

impl MqttPlan {
    async fn resolve(opts: &Options) -> anyhow::Result<Self> {
        let mosquitto = if opts.no_mosquitto {
            None
        } else {
            Some(resolve_addr(&opts.mosquitto).await?)
        };
        let remote = match &opts.mqtt_addr {
            Some(addr) => Some(resolve_addr(addr).await?),
            None => None,
        };
        Ok(Self {
            prefix: opts.topic_prefix.clone(),
            mosquitto,
            remote,
            tls: opts.tls,
        })
    }

    fn target(&self, addr: Option<SocketAddr>) -> Option<MqttTarget> {
        addr.map(|addr| MqttTarget {
            addr,
            prefix: self.prefix.clone(),
            mosquitto: self.mosquitto,
            tls: None,
        })
    }
}

async fn resolve_addr(addr: &str) -> anyhow::Result<SocketAddr> {
    tokio::net::lookup_host(addr)
        .await
        .with_context(|| format!("resolving {addr}"))?
        .next()
        .with_context(|| format!("{addr} has no address"))
}

/// The devices a run creates, by the scenarios it runs.
fn fleet_size(settings: &Settings) -> FleetSize {
    let wants = |s: &str| settings.wants(s);
    let ingest = if wants(ingest_rest::SCENARIO) || wants(ingest_mqtt::SCENARIO) || wants(control::SCENARIO) {
        settings.ingest_devices
    } else {
        0
    };
    let fillers = if wants(read::SCENARIO) {
        settings.filler_devices
    } else {
        0
    };
    let control = usize::from(wants(control::SCENARIO));
    let holders = if wants(connections::SCENARIO) {
        let target = connections::target(settings.held_connections, server::open_file_limit());
        target.saturating_sub(1 + ingest + fillers + control)
    } else {
        0
    };
    FleetSize {
        ingest,
        fillers,
        control,
        holders,
    }
}

/// One store, on a gantry started here: the fleet over REST, the events through the store with
/// the server stopped, then the measurements on a fresh start.
async fn local(
    run: &mut BackendRun,
    bin: &Path,
    backend: &Backend,
    settings: &Settings,
    plan: &MqttPlan,
    out: &Path,
    keep: bool,
) -> anyhow::Result<()> {
    let name = backend.name();
    let dir = tempfile::Builder::new().prefix("gantry-bench-").tempdir()?;
    let database = Database::prepare(backend, dir.path()).await?;
    let result = local_on(run, bin, &database, dir.path(), settings, plan, out).await;
    if keep {
        eprintln!(
            "[{name}] kept: data dir {}, store {}",
            dir.keep().display(),
            database.store_url
        );
        return result;
    }
    let dropped = database.drop_database().await;
    result?;
    dropped.with_context(|| format!("[{name}] dropping the benchmark database"))
}

async fn local_on(
    run: &mut BackendRun,
    bin: &Path,
    database: &Database,
    data_dir: &Path,
    settings: &Settings,
    plan: &MqttPlan,
    out: &Path,
) -> anyhow::Result<()> {
    let name = database.backend.name();
    let token = gantry_core::token::generate_token();
    let setup_log = out.join(format!("gantry-{name}-setup.log"));
    let log = out.join(format!("gantry-{name}.log"));
    let options = |log| ServerOptions {
        bin,
        data_dir,
        admin_token: &token,
        database_url: database.server_url.as_deref(),
        log,
    };

    eprintln!("[{name}] starting gantry and creating devices over REST");
    let mut server = Server::start(options(&setup_log)).await?;
    // Nothing has been asked of it yet: this is the idle server.
    run.idle_rss_mib = server::sample(Some(server.pid())).map(|s| server::kib_to_mib(s.rss_kib));
    let mut target = Target::resolve(&server.base, &token).await?;
    let fleet = {
        let api = Api::new(target.clone());
        seed::create_fleet(&api, &run_tag(), fleet_size(settings)).await?
    };
    run.devices_created = fleet.device_count();
    run.devices_seconds = fleet.seconds;
    eprintln!("[{name}] {} devices in {:.1} s", fleet.device_count(), fleet.seconds);

    if settings.wants(read::SCENARIO) {
        server.stop().await?;
        eprintln!(
            "[{name}] seeding {} events ({} on the listed device) through the store",
            settings.store_events, settings.listed_device_events
        );
        // SQLite writes one transaction at a time; PostgreSQL takes two writers (of different devices).
        let writers = if name == "postgres" { 2 } else { 1 };
        let seeded = seed::seed_store(
            &database.store_url,
            &fleet,
            settings.listed_device_events,
            settings.store_events,
            seed::BATCH,
            writers,
        )
        .await?;
        eprintln!(
            "[{name}] seeded {} events in {:.1} s ({:.0}/s)",
            seeded.store_events, seeded.seconds, seeded.events_per_second
        );
        run.seed = Some(seeded);
        if name == "postgres" {
            let started = Instant::now();
            database.settle().await?;
            eprintln!(
                "[{name}] VACUUM (ANALYZE) after seeding: {:.1} s",
                started.elapsed().as_secs_f64()
            );
        }
        server = Server::start(options(&log)).await?;
        target = Target::resolve(&server.base, &token).await?;
    }
    eprintln!(
        "[{name}] measuring gantry at {} (log: {})",
        server.base,
        server.log().display()
    );
    let api = Api::new(target.clone());
    let mqtt = plan.target(server.mqtt);
    let mqtt_tls = match (plan.tls, server.mqtts) {
        (true, Some(addr)) => Some(MqttTarget {
            addr,
            prefix: plan.prefix.clone(),
            mosquitto: None,
            tls: Some(mqtt::tls_trusting(&server.ca)?),
        }),
        (true, None) => bail!("--tls: the server printed no MQTT/TLS listener"),
        (false, _) => None,
    };
    let ctx = Ctx {
        target: &target,
        api: &api,
        mqtt: mqtt.as_ref(),
        mqtt_tls: mqtt_tls.as_ref(),
        pid: Some(server.pid()),
        local_postgres: is_local_postgres(database.server_url.as_deref()),
        warmup: Duration::from_secs_f64(settings.warmup_seconds),
        duration: Duration::from_secs_f64(settings.duration_seconds),
        connections: settings.connections,
    };
    let measured = measure_all(run, &ctx, &fleet, settings, false).await;
    drop(api);
    let stopped = server.stop().await;
    measured?;
    run.server = Some(stopped?);
    if settings.wants(connections::SCENARIO) {
        // On a fresh process: memory the earlier scenarios freed would otherwise be reused by
        // the connections and hide part of their cost.
        let server = Server::start(options(&out.join(format!("gantry-{name}-connections.log")))).await?;
        // On SQLite the fresh process first moves what the earlier scenarios left staged (after
        // ingest-mqtt's overload, up to a bound's worth): memory that is not the connections'.
        if let Some(waited) = server::wait_until_idle(Some(server.pid()), Duration::from_secs(120)).await {
            eprintln!(
                "[{name}] the fresh server went idle after {:.1} s",
                waited.as_secs_f64()
            );
        }
        let result = match plan.target(server.mqtt) {
            Some(mqtt) => {
                eprintln!("[{name}] holding connections on a fresh start");
                run.connections =
                    Some(hold_connections(&mqtt, Some(server.pid()), &fleet, settings, run.idle_rss_mib).await);
                Ok(())
            }
            None => Err(anyhow::anyhow!("gantry printed no MQTT listener")),
        };
        server.stop().await?;
        result?;
    }
    Ok(())
}

/// The connections scenario over the fleet's devices.
async fn hold_connections(
    mqtt: &MqttTarget,
    pid: Option<u32>,
    fleet: &Fleet,
    settings: &Settings,
    idle_rss_mib: Option<f64>,
) -> connections::ConnectionsResult {
    let limit = server::open_file_limit();
    let target = connections::target(settings.held_connections, limit);
    let devices: Vec<_> = fleet.all().take(target).cloned().collect();
    connections::run(mqtt, pid, &devices, limit, idle_rss_mib).await
}

/// A Gantry started by someone else: the fleet and the listed device's events over REST.
async fn remote(
    run: &mut BackendRun,
    url: &str,
    token: &str,
    settings: &Settings,
    plan: &MqttPlan,
) -> anyhow::Result<()> {
    let target = Target::resolve(url, token).await?;
    let api = Api::new(target.clone());
    let size = FleetSize {
        fillers: 0,
        ..fleet_size(settings)
    };
    let fleet = seed::create_fleet(&api, &run_tag(), size).await?;
    run.devices_created = fleet.device_count();
    run.devices_seconds = fleet.seconds;
    if settings.wants(read::SCENARIO) {
        eprintln!(
            "[remote] posting {} events for the listed device",
            settings.listed_device_events
        );
        run.seed = Some(seed::seed_http(&target, &fleet.listed, settings.listed_device_events, 32).await?);
    }
    let mqtt = plan.target(plan.remote);
    let ctx = Ctx {
        target: &target,
        api: &api,
        mqtt: mqtt.as_ref(),
        mqtt_tls: None,
        pid: None,
        local_postgres: false,
        warmup: Duration::from_secs_f64(settings.warmup_seconds),
        duration: Duration::from_secs_f64(settings.duration_seconds),
        connections: settings.connections,
    };
    measure_all(run, &ctx, &fleet, settings, true).await
}

/// The baseline, then the scenarios asked for; measurements are kept as they come, so a
/// failure late in the run leaves the earlier figures in the report.
/// `with_connections`: also hold connections on this server (a local run does that on a fresh
/// start of its own).
async fn measure_all(
    run: &mut BackendRun,
    ctx: &Ctx<'_>,
    fleet: &Fleet,
    settings: &Settings,
    with_connections: bool,
) -> anyhow::Result<()> {
    let wants_read = settings.wants(read::SCENARIO);
    let wants_http = wants_read || settings.wants(ingest_rest::SCENARIO);
    // The baseline at every concurrency another measurement uses, for its ratio.
    let mut counts = vec![ctx.connections];
    if wants_read {
        counts.extend([1, read::LISTING_CONNECTIONS.min(ctx.connections)]);
    }
    counts.sort_unstable_by(|a, b| b.cmp(a));
    counts.dedup();
    let tag = run_tag();
    let result = async {
        if wants_http {
            run.measurements.extend(baseline::run(ctx, &counts).await?);
        }
        if wants_read {
            let mut devices: Vec<String> = fleet.fillers.iter().map(|d| d.id.clone()).collect();
            devices.push(fleet.listed.id.clone());
            let listed = run.seed.as_ref().map(|s| s.listed_device_events).unwrap_or(0);
            run.measurements
                .extend(read::run(ctx, &devices, &fleet.listed.id, listed).await?);
        }
        if settings.wants(ingest_rest::SCENARIO) {
            let outcome = ingest_rest::run(ctx, &fleet.ingest).await?;
            if !outcome.check.matches {
                eprintln!(
                    "[{}] WARNING: {} events answered 200 but {} stored",
                    run.backend, outcome.check.answered_ok, outcome.check.stored
                );
            }
            run.measurements.push(outcome.measurement);
            run.ingest_check = Some(outcome.check);
            run.ingest_timeline = outcome.timeline;
        }
        let mqtt_scenarios = [ingest_mqtt::SCENARIO, control::SCENARIO, connections::SCENARIO];
        let Some(mqtt) = ctx.mqtt else {
            if mqtt_scenarios.iter().any(|s| settings.wants(s)) {
                run.skipped
                    .push("MQTT scenarios: no MQTT listener known (pass --mqtt-addr with --url)".to_owned());
            }
            return Ok(());
        };
        if settings.wants(ingest_mqtt::SCENARIO) {
            let outcome = ingest_mqtt::run(ctx, mqtt, &fleet.ingest, settings.mqtt_rate, &tag).await?;
            if !outcome.check.every_ack_stored {
                eprintln!(
                    "[{}] WARNING: {} messages acknowledged but {} events stored",
                    run.backend, outcome.check.gantry.acked, outcome.check.stored
                );
            }
            let plain = outcome.check.stored_per_second;
            run.measurements.extend(outcome.measurements);
            run.mqtt_ingest = Some(outcome.check);
            if let Some(tls) = ctx.mqtt_tls {
                // The same devices and rate over TLS, once the server is idle again.
                server::wait_until_idle(ctx.pid, Duration::from_secs(120)).await;
                let mut outcome = ingest_mqtt::run(ctx, tls, &fleet.ingest, settings.mqtt_rate, &tag).await?;
                if let Some(m) = outcome.measurements.last_mut() {
                    let ratio = outcome.check.stored_per_second / plain.max(f64::EPSILON);
                    m.note = Some(format!(
                        "{:.2} × plain in the same run (target ≥ 0.80); {}",
                        ratio,
                        m.note.take().unwrap_or_default()
                    ));
                }
                if !outcome.check.every_ack_stored {
                    eprintln!(
                        "[{}] WARNING: over TLS, acknowledged messages are missing from the store",
                        run.backend
                    );
                }
                run.measurements.extend(outcome.measurements);
            }
            if run.backend == "postgres" && settings.mqtt_rate > ingest_mqtt::POSTGRES_FLOOR {
                // The rate for PostgreSQL, where its MQTT targets are checked; the run
                // above is its ceiling beside Mosquitto's.
                server::wait_until_idle(ctx.pid, Duration::from_secs(120)).await;
                let at_floor = MqttTarget {
                    mosquitto: None,
                    ..mqtt.clone()
                };
                let floor = ingest_mqtt::POSTGRES_FLOOR;
                let mut outcome = ingest_mqtt::run(ctx, &at_floor, &fleet.ingest, floor, &tag).await?;
                // Its baseline is the run's above, not missing.
                outcome.check.mosquitto_skipped = None;
                run.measurements.extend(outcome.measurements);
                run.mqtt_floor = Some(outcome.check);
            }
        }
        if settings.wants(control::SCENARIO) {
            // Its first measurement is of an idle server.
            if let Some(waited) = server::wait_until_idle(ctx.pid, Duration::from_secs(120)).await {
                eprintln!(
                    "[{}] the server went idle {:.1} s after the last scenario",
                    run.backend,
                    waited.as_secs_f64()
                );
            }
            let device = fleet.control.first().context("no control device was created")?;
            let outcome = control::run(
                ctx,
                mqtt,
                &fleet.project_id,
                device,
                &fleet.ingest,
                settings.control_background_rate,
                &tag,
            )
            .await?;
            run.measurements.extend(outcome.measurements);
            run.control_check = Some(outcome.check);
        }
        if with_connections && settings.wants(connections::SCENARIO) {
            run.connections = Some(hold_connections(mqtt, ctx.pid, fleet, settings, run.idle_rss_mib).await);
        }
        Ok::<_, anyhow::Error>(())
    }
    .await;
    scenarios::apply_baselines(&mut run.measurements);
    result
}

/// A PostgreSQL URL whose host is this machine (its processes can be sampled).
fn is_local_postgres(url: Option<&str>) -> bool {
    url.is_some_and(|url| {
        ["@127.0.0.1", "@localhost", "@[::1]", "://127.0.0.1", "://localhost"]
            .iter()
            .any(|h| url.contains(h))
    })
}

/// The command as the user would type it again: through cargo when cargo ran it, with secrets
/// (the token, a database password) hidden.
fn command_line() -> String {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let args = redact(&args).join(" ");
    if std::env::var_os("CARGO").is_some() {
        let exe = std::env::current_exe().ok();
        let profile = exe
            .as_deref()
            .and_then(Path::parent)
            .and_then(Path::file_name)
            .and_then(|n| n.to_str())
            .unwrap_or("debug");
        let flag = match profile {
            "debug" => String::new(),
            "release" => " --release".to_owned(),
            other => format!(" --profile {other}"),
        };
        format!("cargo run{flag} -p gantry-bench -- {args}")
    } else {
        format!("gantry-bench {args}")
    }
}

/// The arguments with the value of --token and the password of a URL replaced by `***`.
fn redact(args: &[String]) -> Vec<String> {
    let mut out = Vec::with_capacity(args.len());
    let mut hide_next = false;
    for arg in args {
        if hide_next {
            out.push("***".to_owned());
            hide_next = false;
        } else if arg == "--token" {
            out.push(arg.clone());
            hide_next = true;
        } else if arg.starts_with("--token=") {
            out.push("--token=***".to_owned());
        } else {
            out.push(hide_password(arg));
        }
    }
    out
}

/// `postgres://user:secret@host/db` → `postgres://user:***@host/db`.
fn hide_password(arg: &str) -> String {
    let Some(scheme_end) = arg.find("://") else {
        return arg.to_owned();
    };
    let rest = &arg[scheme_end + 3..];
    let Some(at) = rest.find('@') else {
        return arg.to_owned();
    };
    match rest[..at].find(':') {
        Some(colon) => format!("{}{}:***{}", &arg[..scheme_end + 3], &rest[..colon], &rest[at..]),
        None => arg.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secrets_stay_out_of_the_report() {
        let args: Vec<String> = [
            "all",
            "--token",
            "abc",
            "--url=http://h:1",
            "--token=def",
            "--database-url",
        ]
        .iter()
        .map(|s| s.to_string())
        .chain(["postgres://u:pw@h:5432/db".to_owned()])
        .collect();
        assert_eq!(
            redact(&args),
            [
                "all",
                "--token",
                "***",
                "--url=http://h:1",
                "--token=***",
                "--database-url",
                "postgres://u:***@h:5432/db"
            ]
        );
        assert_eq!(
            hide_password("postgres://postgres@127.0.0.1/x"),
            "postgres://postgres@127.0.0.1/x"
        );
    }

    #[test]
    fn local_postgres_urls() {
        assert!(is_local_postgres(Some("postgres://postgres@127.0.0.1:5432/x")));
        assert!(is_local_postgres(Some("postgres://localhost/x")));
        assert!(!is_local_postgres(Some("postgres://u@db.example:5432/x")));
        assert!(!is_local_postgres(None));
    }

    #[test]
    fn quick_and_full_sizes() {
        let cli = Cli::parse_from(["gantry-bench", "all", "--quick"]);
        let (mode, s) = cli.options.settings(cli.command).unwrap();
        assert_eq!(mode, "quick");
        assert_eq!(s.listed_device_events, 100_000);
        assert_eq!(s.store_events, 1_000_000);
        assert_eq!(
            s.scenarios,
            ["read", "ingest-rest", "ingest-mqtt", "control", "connections"]
        );
        assert_eq!((s.mqtt_rate, s.held_connections), (5_000.0, 2_000));
        let cli = Cli::parse_from(["gantry-bench", "--store-events", "5000000", "read"]);
        let (mode, s) = cli.options.settings(cli.command).unwrap();
        assert_eq!(mode, "custom");
        assert_eq!(s.store_events, 5_000_000);
        assert_eq!(s.connections, 64);
        let cli = Cli::parse_from(["gantry-bench", "read", "--device-events", "10", "--store-events", "5"]);
        assert!(cli.options.settings(cli.command).is_err());
    }

    #[test]
    fn a_remote_gantry_needs_its_token() {
        assert!(Cli::try_parse_from(["gantry-bench", "all", "--url", "http://h:1"]).is_err());
        assert!(Cli::try_parse_from(["gantry-bench", "all", "--url", "http://h:1", "--token", "t"]).is_ok());
        assert!(
            Cli::try_parse_from([
                "gantry-bench",
                "all",
                "--url",
                "http://h:1",
                "--token",
                "t",
                "--database-url",
                "postgres://h/db"
            ])
            .is_err()
        );
    }
}
