//! The command line: the scenarios as subcommands, the options, and the settings a run takes
//! from them (the full sizes, or the `--quick` ones).

use std::path::PathBuf;

use anyhow::ensure;
use clap::{Args, Parser, Subcommand};

use crate::report::Settings;
use crate::scenarios::control::Burst;
use crate::scenarios::reconnect::ReconnectLoad;
use crate::scenarios::stream::StreamLoad;
use crate::scenarios::{
    alarms, connections, console, control, ingest_mqtt, ingest_rest, read, reconnect, series, sign_in, stream, webhooks,
};

#[derive(Debug, Parser)]
#[command(
    name = "gantry-bench",
    version,
    about = "Load generator and benchmark report for Gantry",
    after_help = "Writes <out>/report.json, <out>/report.md and the latency charts <out>/ingest-*-latency.png, and prints the tables."
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
    #[command(flatten)]
    pub options: Options,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Subcommand)]
pub enum Command {
    /// Single-event POST /api/v1/deviceEvents from many devices.
    IngestRest,
    /// The same posts with no webhook and with 20 webhooks whose receivers are down, A B B A.
    Webhooks,
    /// The same posts with no alarm rule and with 3 rules on the posted attribute, A B B A.
    Alarms,
    /// GET device and shadow; a device's event listing in a store of many events.
    Read,
    /// One attribute's aggregated history (GET .../attributeCode/series) in the read store.
    Series,
    /// QoS 1 telemetry from many devices over MQTT, paced; a plain Mosquitto as the baseline.
    IngestMqtt,
    /// PUT shadows → device over MQTT → ack → event log completed; idle, under telemetry, and
    /// right after an ingest burst.
    Control,
    /// Telemetry followed by Server-Sent-Events subscribers (one device each): delivery latency,
    /// and ingest beside ingest with nobody following.
    Stream,
    /// Devices with desired values set while offline reconnect all at once under telemetry:
    /// CONNACK → delta delay, and ingest beside ingest alone.
    Reconnect,
    /// As many device connections as the open-file limit allows, held; memory per connection.
    Connections,
    /// Each page of the operator console at /console/ with 10,000 devices in the project, and
    /// the bytes of a first load.
    Console,
    /// POST /auth/login throughput; a GET with a session token against one with an application token.
    SignIn,
    /// Every scenario.
    All,
}

#[derive(Debug, Args)]
pub struct Options {
    /// Small sizes and short measurements (well under 3 minutes on SQLite).
    #[arg(long, global = true)]
    pub quick: bool,
    /// Seconds each measurement runs after its warm-up [default: 10; --quick 2].
    #[arg(long, global = true, value_name = "SECS")]
    pub duration: Option<f64>,
    /// Concurrent connections of the "many connections" measurements.
    #[arg(long, global = true, default_value_t = 64)]
    pub connections: usize,
    /// Also run every scenario on PostgreSQL: a fresh database is created on this server for the
    /// run and dropped after it.
    #[arg(long, global = true, value_name = "postgres://...")]
    pub database_url: Option<String>,
    /// Where the report goes.
    #[arg(long, global = true, default_value = "target/gantry-bench")]
    pub out: PathBuf,
    /// Measure an already running Gantry at this base URL (http://host:port) instead of starting one.
    #[arg(long, global = true, requires = "token", conflicts_with = "database_url")]
    pub url: Option<String>,
    /// The administrator token of the Gantry given by --url.
    #[arg(long, global = true, requires = "url")]
    pub token: Option<String>,
    /// The gantry binary to start [default: `gantry` next to this executable; when run by cargo,
    /// it is built first with the same profile].
    #[arg(long, global = true, env = "GANTRY_BIN")]
    pub gantry_bin: Option<PathBuf>,
    /// Events on the device whose events are listed [default: 1,000,000; --quick 100,000].
    #[arg(long, global = true)]
    pub device_events: Option<u64>,
    /// Events in the whole store [default: 10,000,000; --quick 1,000,000].
    #[arg(long, global = true)]
    pub store_events: Option<u64>,
    /// Devices the ingest scenarios post and publish for [default: 1,000; --quick 200].
    #[arg(long, global = true)]
    pub ingest_devices: Option<usize>,
    /// Messages/s the ingest-mqtt devices publish in all [default: 25,000; --quick 5,000].
    #[arg(long, global = true)]
    pub mqtt_rate: Option<f64>,
    /// Messages/s of telemetry under the loaded control round trips [default: 10,000; --quick 2,000].
    #[arg(long, global = true)]
    pub control_background_rate: Option<f64>,
    /// Device connections to hold, capped by the open-file limit less 1,000 [default: 19,000;
    /// --quick 2,000].
    #[arg(long, global = true)]
    pub held_connections: Option<usize>,
    /// Devices the reconnect scenario brings back at once [default: 1,000; --quick 200].
    #[arg(long, global = true)]
    pub reconnect_devices: Option<usize>,
    /// The plain Mosquitto of the ingest-mqtt baseline (anonymous access).
    #[arg(long, global = true, default_value = "127.0.0.1:1883", value_name = "HOST:PORT")]
    pub mosquitto: String,
    /// Skip the Mosquitto baseline.
    #[arg(long, global = true)]
    pub no_mosquitto: bool,
    /// Also run ingest-mqtt over MQTT/TLS (trusting the server's generated CA), at the same rate
    /// right after the plain run, and compare the two.
    #[arg(long, global = true, conflicts_with = "url")]
    pub tls: bool,
    /// With --url: the MQTT listener (host:port) of that Gantry, for the MQTT scenarios.
    #[arg(long, global = true, requires = "url", value_name = "HOST:PORT")]
    pub mqtt_addr: Option<String>,
    /// The topic prefix of the Gantry measured.
    #[arg(long, global = true, default_value = "gantry")]
    pub topic_prefix: String,
    /// Keep the data directory (and the PostgreSQL database) after the run, for inspection.
    #[arg(long, global = true)]
    pub keep: bool,
    /// With --database-url: measure PostgreSQL only.
    #[arg(long, global = true, requires = "database_url")]
    pub skip_sqlite: bool,
}

impl Options {
    pub fn settings(&self, command: Command) -> anyhow::Result<(String, Settings)> {
        let q = self.quick;
        let scenarios = match command {
            Command::IngestRest => vec![ingest_rest::SCENARIO],
            Command::Webhooks => vec![webhooks::SCENARIO],
            Command::Alarms => vec![alarms::SCENARIO],
            Command::Read => vec![read::SCENARIO],
            Command::Series => vec![series::SCENARIO],
            Command::IngestMqtt => vec![ingest_mqtt::SCENARIO],
            Command::Control => vec![control::SCENARIO],
            Command::Stream => vec![stream::SCENARIO],
            Command::Reconnect => vec![reconnect::SCENARIO],
            Command::Connections => vec![connections::SCENARIO],
            Command::Console => vec![console::SCENARIO],
            Command::SignIn => vec![sign_in::SCENARIO],
            Command::All => vec![
                read::SCENARIO,
                series::SCENARIO,
                sign_in::SCENARIO,
                ingest_rest::SCENARIO,
                webhooks::SCENARIO,
                alarms::SCENARIO,
                ingest_mqtt::SCENARIO,
                control::SCENARIO,
                stream::SCENARIO,
                reconnect::SCENARIO,
                connections::SCENARIO,
                console::SCENARIO,
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
            // A year of a reading a minute; --quick a month.
            series_events: if q { 43_200 } else { 525_600 },
            mqtt_rate: self.mqtt_rate.unwrap_or(if q { 5_000.0 } else { 25_000.0 }),
            control_background_rate: self
                .control_background_rate
                .unwrap_or(if q { 2_000.0 } else { 10_000.0 }),
            // --quick: the same ten seconds of publishing and the same controls, at a fifth of
            // the rate.
            burst: if q {
                Burst {
                    events: 50_000,
                    rate: 5_000.0,
                    ..Burst::FULL
                }
            } else {
                Burst::FULL
            },
            held_connections: self.held_connections.unwrap_or(if q { 2_000 } else { 19_000 }),
            // --quick: a fifth of the subscribers and of the rate.
            stream: if q {
                StreamLoad {
                    subscribers: 200,
                    rate: 2_000.0,
                }
            } else {
                StreamLoad::FULL
            },
            console_devices: if q { 1_000 } else { 10_000 },
            // --quick: a fifth of the devices and of the rate.
            reconnect: ReconnectLoad {
                devices: self
                    .reconnect_devices
                    .unwrap_or(if q { 200 } else { ReconnectLoad::FULL.devices }),
                rate: if q { 2_000.0 } else { ReconnectLoad::FULL.rate },
            },
        };
        ensure!(settings.connections > 0, "--connections must be at least 1");
        ensure!(settings.duration_seconds > 0.0, "--duration must be positive");
        ensure!(settings.ingest_devices > 0, "--ingest-devices must be at least 1");
        ensure!(settings.mqtt_rate > 0.0, "--mqtt-rate must be positive");
        ensure!(settings.reconnect.devices > 0, "--reconnect-devices must be at least 1");
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
            || self.held_connections.is_some()
            || self.reconnect_devices.is_some();
        let mode = match (q, custom) {
            (true, false) => "quick",
            (false, false) => "full",
            (true, true) => "quick, custom",
            (false, true) => "custom",
        };
        Ok((mode.to_owned(), settings))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quick_and_full_sizes() {
        let cli = Cli::parse_from(["gantry-bench", "all", "--quick"]);
        let (mode, s) = cli.options.settings(cli.command).unwrap();
        assert_eq!(mode, "quick");
        assert_eq!(s.listed_device_events, 100_000);
        assert_eq!(s.store_events, 1_000_000);
        assert_eq!(
            s.scenarios,
            [
                "read",
                "series",
                "sign-in",
                "ingest-rest",
                "webhooks",
                "alarms",
                "ingest-mqtt",
                "control",
                "stream",
                "reconnect",
                "connections",
                "console"
            ]
        );
        assert_eq!(s.console_devices, 1_000);
        assert_eq!((s.stream.subscribers, s.stream.rate), (200, 2_000.0));
        assert_eq!((s.reconnect.devices, s.reconnect.rate), (200, 2_000.0));
        assert_eq!(s.series_events, 43_200);
        assert_eq!((s.mqtt_rate, s.held_connections), (5_000.0, 2_000));
        assert_eq!((s.burst.events, s.burst.rate, s.burst.controls), (50_000, 5_000.0, 200));
        assert_eq!(s.burst.duration(), Burst::FULL.duration());
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
