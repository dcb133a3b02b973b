//! One run against one store: a Gantry started here (the fleet over REST, the events seeded
//! through the store, the measurements on a fresh start) or one already running, and the order
//! the scenarios run in.

use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use anyhow::{Context, bail};

use crate::cli::Options;
use crate::db::{Backend, Database};
use crate::http::{Api, Target};
use crate::report::{BackendRun, Settings};
use crate::scenarios::ingest_mqtt::MqttTarget;
use crate::scenarios::{
    Ctx, alarms, baseline, connections, console, control, ingest_mqtt, ingest_rest, read, reconnect, series, sign_in,
    stream, webhooks,
};
use crate::seed::{self, DeviceRef, Fleet, FleetSize};
use crate::server::{self, Server, ServerOptions};
use crate::{mqtt, scenarios};

/// A name suffix that keeps this run's records apart from any other run's on the same server.
pub fn run_tag() -> String {
    uuid::Uuid::new_v4().simple().to_string()[..8].to_owned()
}

/// What the MQTT scenarios need besides the server: its topic prefix and the baseline broker.
pub struct MqttPlan {
    prefix: String,
    mosquitto: Option<SocketAddr>,
    /// The MQTT listener of a Gantry given by --url.
    remote: Option<SocketAddr>,
    /// Measure ingest-mqtt over TLS too (`--tls`).
    tls: bool,
}

impl MqttPlan {
    pub async fn resolve(opts: &Options) -> anyhow::Result<Self> {
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
    let ingest = if wants(ingest_rest::SCENARIO)
        || wants(webhooks::SCENARIO)
        || wants(alarms::SCENARIO)
        || wants(ingest_mqtt::SCENARIO)
        || wants(control::SCENARIO)
        || wants(stream::SCENARIO)
        || wants(reconnect::SCENARIO)
    {
        settings.ingest_devices
    } else {
        0
    };
    let fillers = if wants(read::SCENARIO) || wants(series::SCENARIO) {
        settings.filler_devices
    } else {
        0
    };
    let control = usize::from(wants(control::SCENARIO));
    let reconnect = if wants(reconnect::SCENARIO) {
        settings.reconnect.devices
    } else {
        0
    };
    let holders = if wants(connections::SCENARIO) {
        let target = connections::target(settings.held_connections, server::open_file_limit());
        target.saturating_sub(1 + ingest + fillers + control + reconnect)
    } else {
        0
    };
    FleetSize {
        ingest,
        fillers,
        control,
        reconnect,
        holders,
    }
}

/// One store, on a gantry started here: the fleet over REST, the events through the store with
/// the server stopped, then the measurements on a fresh start.
pub async fn local(
    run: &mut BackendRun,
    bin: &Path,
    backend: &Backend,
    settings: &Settings,
    plan: &MqttPlan,
    out: &Path,
    keep: bool,
) -> anyhow::Result<()> {
    let name = backend.store();
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
    let store = database.backend.store();
    let name = store.name();
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

    if settings.wants(read::SCENARIO) || settings.wants(series::SCENARIO) {
        server.stop().await?;
        eprintln!(
            "[{name}] seeding {} events ({} on the listed device) through the store",
            settings.store_events, settings.listed_device_events
        );
        let seeded = seed::seed_store(
            &database.store_url,
            &fleet,
            settings.listed_device_events,
            settings.store_events,
            seed::BATCH,
            store.profile().seed_writers,
        )
        .await?;
        eprintln!(
            "[{name}] seeded {} events in {:.1} s ({:.0}/s)",
            seeded.store_events, seeded.seconds, seeded.events_per_second
        );
        run.seed = Some(seeded);
        if settings.wants(series::SCENARIO) {
            let device = fleet.fillers.first().context("no filler device for the series")?;
            let took = seed::seed_series(&database.store_url, &fleet, device, settings.series_events).await?;
            eprintln!(
                "[{name}] seeded {} series readings in {took:.1} s",
                settings.series_events
            );
        }
        if let Some(took) = database.catch_up().await? {
            eprintln!("[{name}] VACUUM (ANALYZE) after seeding: {:.1} s", took.as_secs_f64());
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
        database: Some(database),
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
pub async fn remote(
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
        database: None,
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
    let wants_series = settings.wants(series::SCENARIO);
    let wants_sign_in = settings.wants(sign_in::SCENARIO);
    let wants_http = wants_read
        || wants_series
        || wants_sign_in
        || settings.wants(ingest_rest::SCENARIO)
        || settings.wants(webhooks::SCENARIO)
        || settings.wants(alarms::SCENARIO);
    // The baseline at every concurrency another measurement uses, for its ratio.
    let mut counts = vec![ctx.connections];
    if wants_read {
        counts.extend([1, read::LISTING_CONNECTIONS.min(ctx.connections)]);
    }
    if wants_series {
        counts.push(1);
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
        if wants_series {
            match (run.seed.as_ref().map(|s| s.method), fleet.fillers.first()) {
                (Some("store"), Some(device)) => run
                    .measurements
                    .extend(series::run(ctx, &device.id, settings.series_events).await?),
                _ => eprintln!(
                    "[{}] series: skipped, it needs a store the bench seeds itself",
                    run.backend
                ),
            }
        }
        if wants_sign_in {
            run.measurements
                .extend(sign_in::run(ctx, &fleet.project_id, &fleet.listed.id, &tag).await?);
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
        if settings.wants(webhooks::SCENARIO) {
            run.measurements
                .extend(webhooks::run(ctx, &fleet.project_id, &fleet.ingest).await?);
        }
        if settings.wants(alarms::SCENARIO) {
            run.measurements
                .extend(alarms::run(ctx, &fleet.model_id, &fleet.ingest).await?);
        }
        if settings.wants(console::SCENARIO) {
            let devices = settings.console_devices;
            run.measurements
                .extend(console::run(ctx, &fleet.project_id, &fleet.model_id, devices, &tag).await?);
        }
        let mqtt_scenarios = [
            ingest_mqtt::SCENARIO,
            control::SCENARIO,
            stream::SCENARIO,
            reconnect::SCENARIO,
            connections::SCENARIO,
        ];
        let Some(mqtt) = ctx.mqtt else {
            if mqtt_scenarios.iter().any(|s| settings.wants(s)) {
                run.skipped
                    .push("MQTT scenarios: no MQTT listener known (pass --mqtt-addr with --url)".to_owned());
            }
            return Ok(());
        };
        if settings.wants(ingest_mqtt::SCENARIO) {
            measure_ingest_mqtt(run, ctx, mqtt, &fleet.ingest, settings, &tag).await?;
        }
        if settings.wants(alarms::SCENARIO) {
            let rate = settings.mqtt_rate;
            run.measurements
                .extend(alarms::run_mqtt(ctx, mqtt, &fleet.model_id, &fleet.ingest, rate).await?);
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
                control::Load {
                    devices: &fleet.ingest,
                    background_rate: settings.control_background_rate,
                    burst: settings.burst,
                },
                &tag,
            )
            .await?;
            run.measurements.extend(outcome.measurements);
            run.control_check = Some(outcome.check);
        }
        if settings.wants(stream::SCENARIO) {
            server::wait_until_idle(ctx.pid, Duration::from_secs(120)).await;
            let outcome = stream::run(ctx, mqtt, &fleet.project_id, &fleet.ingest, settings.stream).await?;
            if outcome.check.delivered < outcome.check.expected || outcome.check.lost_subscribers > 0 {
                eprintln!(
                    "[{}] WARNING: stream: {} of about {} deliveries read, {} subscribers lost",
                    run.backend, outcome.check.delivered, outcome.check.expected, outcome.check.lost_subscribers
                );
            }
            run.measurements.extend(outcome.measurements);
            run.stream_check = Some(outcome.check);
        }
        if settings.wants(reconnect::SCENARIO) {
            server::wait_until_idle(ctx.pid, Duration::from_secs(120)).await;
            let load = settings.reconnect;
            let outcome = reconnect::run(ctx, mqtt, &fleet.reconnect, &fleet.ingest, load).await?;
            run.measurements.extend(outcome.measurements);
            run.reconnect_check = Some(outcome.check);
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

/// ingest-mqtt at the run's rate (and over TLS when asked), then at the store's own rate when
/// the issue names one below it.
async fn measure_ingest_mqtt(
    run: &mut BackendRun,
    ctx: &Ctx<'_>,
    mqtt: &MqttTarget,
    devices: &[DeviceRef],
    settings: &Settings,
    tag: &str,
) -> anyhow::Result<()> {
    let outcome = ingest_mqtt::run(ctx, mqtt, devices, settings.mqtt_rate, tag).await?;
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
        let mut outcome = ingest_mqtt::run(ctx, tls, devices, settings.mqtt_rate, tag).await?;
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
    if let Some(floor) = run.backend.profile().own_mqtt_floor
        && settings.mqtt_rate > floor
    {
        // The rate for this store, where its MQTT targets are checked; the run
        // above is its ceiling beside Mosquitto's.
        server::wait_until_idle(ctx.pid, Duration::from_secs(120)).await;
        let at_floor = MqttTarget {
            mosquitto: None,
            ..mqtt.clone()
        };
        let mut outcome = ingest_mqtt::run(ctx, &at_floor, devices, floor, tag).await?;
        // Its baseline is the run's above, not missing.
        outcome.check.mosquitto_skipped = None;
        run.measurements.extend(outcome.measurements);
        run.mqtt_floor = Some(outcome.check);
    }
    Ok(())
}

/// A PostgreSQL URL whose host is this machine (its processes can be sampled).
fn is_local_postgres(url: Option<&str>) -> bool {
    url.is_some_and(|url| {
        ["@127.0.0.1", "@localhost", "@[::1]", "://127.0.0.1", "://localhost"]
            .iter()
            .any(|h| url.contains(h))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn local_postgres_urls() {
        assert!(is_local_postgres(Some("postgres://postgres@127.0.0.1:5432/x")));
        assert!(is_local_postgres(Some("postgres://localhost/x")));
        assert!(!is_local_postgres(Some("postgres://u@db.example:5432/x")));
        assert!(!is_local_postgres(None));
    }
}
