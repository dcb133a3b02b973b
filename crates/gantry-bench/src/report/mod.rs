//! The report: every figure of a run as JSON, the same as markdown a person reads, and the
//! issue's targets checked against the figures (with the shortfall when one is missed). The
//! targets are a table of data (`targets`), read off the runs by `figures` and rendered by
//! `markdown`.

mod figures;
mod markdown;
mod targets;
#[cfg(test)]
mod tests;

use serde::Serialize;

pub use markdown::render_markdown;
pub use targets::{TargetResult, targets_for};

use crate::load::WindowPoint;
use crate::machine::Machine;
use crate::scenarios::Measurement;
use crate::scenarios::connections::ConnectionsResult;
use crate::scenarios::control::{Burst, ControlCheck};
use crate::scenarios::ingest_mqtt::MqttIngestCheck;
use crate::scenarios::ingest_rest::IngestCheck;
use crate::seed::Seeded;
use crate::server::Stopped;
use crate::store::Store;

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
    /// Readings, a minute apart, of the series scenario's device.
    pub series_events: u64,
    /// Messages/s offered by the ingest-mqtt devices in all.
    pub mqtt_rate: f64,
    /// Telemetry messages/s under the loaded control round trips.
    pub control_background_rate: f64,
    /// The ingest burst the last control series follows.
    pub burst: Burst,
    /// Connections the connections scenario asks for, before the open-file limit.
    pub held_connections: usize,
    /// The stream scenario's subscribers and rate.
    pub stream: crate::scenarios::stream::StreamLoad,
    /// Devices in the project whose console pages the console scenario measures.
    pub console_devices: usize,
    /// The reconnect scenario's devices and telemetry rate.
    pub reconnect: crate::scenarios::reconnect::ReconnectLoad,
}

impl Settings {
    pub fn wants(&self, scenario: &str) -> bool {
        self.scenarios.iter().any(|s| s == scenario)
    }
}

/// Everything measured against one store.
#[derive(Debug, Clone, Serialize)]
pub struct BackendRun {
    pub backend: Store,
    pub devices_created: usize,
    pub devices_seconds: f64,
    pub seed: Option<Seeded>,
    pub measurements: Vec<Measurement>,
    pub ingest_check: Option<IngestCheck>,
    /// Per second of the ingest run: answers, p50 and p99.
    pub ingest_timeline: Vec<WindowPoint>,
    pub mqtt_ingest: Option<MqttIngestCheck>,
    /// ingest-mqtt again at the store's own rate when the run offered more (see
    /// `store::Profile::own_mqtt_floor`), where that store's MQTT targets are checked.
    pub mqtt_floor: Option<MqttIngestCheck>,
    pub control_check: Option<ControlCheck>,
    pub stream_check: Option<crate::scenarios::stream::StreamCheck>,
    pub reconnect_check: Option<crate::scenarios::reconnect::ReconnectCheck>,
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
    pub fn new(backend: Store) -> Self {
        Self {
            backend,
            devices_created: 0,
            devices_seconds: 0.0,
            seed: None,
            measurements: Vec::new(),
            ingest_check: None,
            ingest_timeline: Vec::new(),
            mqtt_ingest: None,
            mqtt_floor: None,
            control_check: None,
            stream_check: None,
            reconnect_check: None,
            connections: None,
            idle_rss_mib: None,
            skipped: Vec::new(),
            server: None,
            error: None,
        }
    }
}

impl Report {
    /// Whether the run is sound: no store stopped early and every count matched (events
    /// answered or acknowledged against events stored, controls sent against logs completed,
    /// reconnected devices against deltas received).
    /// A missed target is a finding, not a failure.
    pub fn sound(&self) -> bool {
        self.runs.iter().all(|r| {
            r.error.is_none()
                && r.ingest_check.as_ref().is_none_or(|c| c.matches)
                && r.mqtt_ingest.iter().chain(&r.mqtt_floor).all(|c| c.every_ack_stored)
                && r.control_check.as_ref().is_none_or(|c| c.matches)
                && r.reconnect_check.as_ref().is_none_or(|c| c.missing == 0)
        })
    }
}
