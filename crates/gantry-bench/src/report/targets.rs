//! The targets for a 2-core machine as one table of data (`TARGETS`), and their check
//! against one store's figures. A row names the figure it judges, its bound and limit, and whom
//! the issue sets it for; what differs between stores comes from the store's `Profile`, so no row
//! and no check names a store.

use serde::Serialize;

use super::figures::{Figure, Figures, MqttRun};
use super::{BackendRun, Settings};
use crate::format::thousands;
use crate::scenarios::{
    alarms, connections, control, ingest_mqtt, ingest_rest, read, reconnect, series, stream, webhooks,
};
use crate::store::Store;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Bound {
    AtLeast,
    Below,
}

/// A target's limit.
#[derive(Debug, Clone, Copy)]
pub enum Limit {
    Fixed(f64),
    /// The MQTT ingest rate asked of the store whose run the figure is of (see `MqttRun`).
    MqttFloor,
}

/// Whom the issue sets a target for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SetFor {
    /// The embedded default: on a store whose profile does not take these as its own, the row
    /// is shown for reference.
    EmbeddedDefault,
    /// Every store, each at its own limit.
    EveryStore,
}

/// One row of the targets table.
#[derive(Debug)]
pub struct TargetRow {
    /// The row is checked when any of these scenarios was asked for.
    pub scenarios: &'static [&'static str],
    pub name: &'static str,
    pub figure: Figure,
    pub bound: Bound,
    pub limit: Limit,
    pub unit: &'static str,
    pub set_for: SetFor,
    /// A figure shown beside the targets against a limit the issue sets for another store, not
    /// one of this store's targets.
    pub reference: bool,
}

const REST: &[&str] = &[ingest_rest::SCENARIO];
const READ: &[&str] = &[read::SCENARIO];
const SERIES: &[&str] = &[series::SCENARIO];
const MQTT: &[&str] = &[ingest_mqtt::SCENARIO];
const CONTROL: &[&str] = &[control::SCENARIO];
const CONNECTIONS: &[&str] = &[connections::SCENARIO];
const STREAM: &[&str] = &[stream::SCENARIO];
const RECONNECT: &[&str] = &[reconnect::SCENARIO];
const WEBHOOKS: &[&str] = &[webhooks::SCENARIO];
const ALARMS: &[&str] = &[alarms::SCENARIO];
const IDLE: &[&str] = &[connections::SCENARIO, ingest_mqtt::SCENARIO];
use Bound::{AtLeast, Below};
use Limit::{Fixed, MqttFloor};
use MqttRun::{Ceiling, Checked};
use SetFor::{EmbeddedDefault, EveryStore};

/// The targets, in the order the report lists them.
#[rustfmt::skip]
pub static TARGETS: &[TargetRow] = &[
    TargetRow { scenarios: REST, name: "ingest-rest: single-event POSTs/s at 64 connections",
        figure: Figure::IngestRestRate, bound: AtLeast, limit: Fixed(15_000.0), unit: "req/s", set_for: EmbeddedDefault, reference: false },
    TargetRow { scenarios: REST, name: "ingest-rest: p99 at 64 connections",
        figure: Figure::IngestRestP99, bound: Below, limit: Fixed(50.0), unit: "ms", set_for: EmbeddedDefault, reference: false },
    TargetRow { scenarios: READ, name: "read: GET shadow/s at 64 connections",
        figure: Figure::ShadowRate, bound: AtLeast, limit: Fixed(30_000.0), unit: "req/s", set_for: EmbeddedDefault, reference: false },
    TargetRow { scenarios: READ, name: "read: GET shadow p99 at 64 connections",
        figure: Figure::ShadowP99, bound: Below, limit: Fixed(5.0), unit: "ms", set_for: EmbeddedDefault, reference: false },
    TargetRow { scenarios: READ, name: "read: event listing first page p99 (1,000,000-event device)",
        figure: Figure::FirstPageP99, bound: Below, limit: Fixed(10.0), unit: "ms", set_for: EmbeddedDefault, reference: false },
    TargetRow { scenarios: SERIES, name: "series: a year of minute readings at interval=1d, p99",
        figure: Figure::SeriesSpanDailyP99, bound: Below, limit: Fixed(50.0), unit: "ms", set_for: EveryStore, reference: false },
    TargetRow { scenarios: SERIES, name: "series: a week of minute readings at interval=1h, p99",
        figure: Figure::SeriesWeekHourlyP99, bound: Below, limit: Fixed(20.0), unit: "ms", set_for: EveryStore, reference: false },
    TargetRow { scenarios: MQTT, name: "ingest-mqtt: events stored/s (QoS 1)",
        figure: Figure::MqttStored(Checked), bound: AtLeast, limit: MqttFloor, unit: "events/s", set_for: EveryStore, reference: false },
    TargetRow { scenarios: MQTT, name: "ingest-mqtt: p99 publish→committed",
        figure: Figure::MqttP99(Checked), bound: Below, limit: Fixed(100.0), unit: "ms", set_for: EveryStore, reference: false },
    TargetRow { scenarios: MQTT, name: "ingest-mqtt: backlog when publishing stopped, in seconds of load",
        figure: Figure::MqttBacklog(Checked), bound: Below, limit: Fixed(1.0), unit: "s", set_for: EveryStore, reference: false },
    TargetRow { scenarios: MQTT, name: "ingest-mqtt: events stored/s (QoS 1)",
        figure: Figure::MqttStored(Ceiling), bound: AtLeast, limit: MqttFloor, unit: "events/s", set_for: EmbeddedDefault, reference: true },
    TargetRow { scenarios: MQTT, name: "ingest-mqtt: p99 publish→committed",
        figure: Figure::MqttP99(Ceiling), bound: Below, limit: Fixed(100.0), unit: "ms", set_for: EmbeddedDefault, reference: true },
    TargetRow { scenarios: MQTT, name: "ingest-mqtt: backlog when publishing stopped, in seconds of load",
        figure: Figure::MqttBacklog(Ceiling), bound: Below, limit: Fixed(1.0), unit: "s", set_for: EmbeddedDefault, reference: true },
    TargetRow { scenarios: MQTT, name: "ingest-mqtt: stored/s over plain Mosquitto's delivered/s",
        figure: Figure::MqttOverMosquitto, bound: AtLeast, limit: Fixed(0.8), unit: "×", set_for: EmbeddedDefault, reference: false },
    TargetRow { scenarios: CONTROL, name: "control: round trip p50, idle",
        figure: Figure::ControlIdleP50, bound: Below, limit: Fixed(5.0), unit: "ms", set_for: EmbeddedDefault, reference: false },
    TargetRow { scenarios: CONTROL, name: "control: round trip p99, idle",
        figure: Figure::ControlIdleP99, bound: Below, limit: Fixed(20.0), unit: "ms", set_for: EmbeddedDefault, reference: false },
    TargetRow { scenarios: CONTROL, name: "control: round trip p99, right after an ingest burst",
        figure: Figure::ControlBurstP99, bound: Below, limit: Fixed(20.0), unit: "ms", set_for: EmbeddedDefault, reference: false },
    TargetRow { scenarios: CONTROL, name: "control: round trip max, right after an ingest burst",
        figure: Figure::ControlBurstMax, bound: Below, limit: Fixed(50.0), unit: "ms", set_for: EmbeddedDefault, reference: false },
    TargetRow { scenarios: STREAM, name: "stream: delivery p99, arrival → SSE subscriber (1,000 subscribers, 10,000 events/s)",
        figure: Figure::StreamDeliveryP99, bound: Below, limit: Fixed(100.0), unit: "ms", set_for: EveryStore, reference: false },
    TargetRow { scenarios: STREAM, name: "stream: ingest followed over ingest with nobody following",
        figure: Figure::StreamIngestRatio, bound: AtLeast, limit: Fixed(0.9), unit: "×", set_for: EveryStore, reference: false },
    TargetRow { scenarios: RECONNECT, name: "reconnect: CONNACK → desired delta p99 (1,000 devices at once, 10,000 events/s)",
        figure: Figure::ReconnectDeltaP99, bound: Below, limit: Fixed(1000.0), unit: "ms", set_for: EveryStore, reference: false },
    TargetRow { scenarios: RECONNECT, name: "reconnect: devices without their delta",
        figure: Figure::ReconnectMissing, bound: Below, limit: Fixed(1.0), unit: "devices", set_for: EveryStore, reference: false },
    TargetRow { scenarios: RECONNECT, name: "reconnect: ingest while the devices reconnect over ingest alone",
        figure: Figure::ReconnectIngestRatio, bound: AtLeast, limit: Fixed(0.9), unit: "×", set_for: EveryStore, reference: false },
    TargetRow { scenarios: WEBHOOKS, name: "webhooks: ingest-rest with 20 webhooks down over ingest-rest with none",
        figure: Figure::WebhooksIngestRatio, bound: AtLeast, limit: Fixed(0.8), unit: "×", set_for: EveryStore, reference: false },
    TargetRow { scenarios: ALARMS, name: "alarms: ingest-rest with 3 alarm rules over ingest-rest with none",
        figure: Figure::AlarmsIngestRatio, bound: AtLeast, limit: Fixed(0.9), unit: "×", set_for: EveryStore, reference: false },
    TargetRow { scenarios: ALARMS, name: "alarms: MQTT with 3 alarm rules over MQTT with none, at the rate offered",
        figure: Figure::AlarmsMqttRatio, bound: AtLeast, limit: Fixed(0.9), unit: "×", set_for: EveryStore, reference: false },
    TargetRow { scenarios: CONNECTIONS, name: "connections: held",
        figure: Figure::ConnectionsHeld, bound: AtLeast, limit: Fixed(19_000.0), unit: "connections", set_for: EmbeddedDefault, reference: false },
    TargetRow { scenarios: CONNECTIONS, name: "connections: server memory per connection",
        figure: Figure::ConnectionMemory, bound: Below, limit: Fixed(10.0), unit: "KB", set_for: EmbeddedDefault, reference: false },
    TargetRow { scenarios: IDLE, name: "idle server RSS",
        figure: Figure::IdleRss, bound: Below, limit: Fixed(50.0), unit: "MB", set_for: EmbeddedDefault, reference: false },
];

/// Why a row is shown for reference on a store that does not take the embedded default's
/// targets as its own.
const EMBEDDED_ONLY: &str = "set by the issue for the embedded default (SQLite)";

#[derive(Debug, Clone, Serialize)]
pub struct TargetResult {
    pub backend: Store,
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

/// Every row of `TARGETS` that applies to this run, checked against its figures.
pub fn targets_for(run: &BackendRun, settings: &Settings) -> Vec<TargetResult> {
    let figures = Figures { run, settings };
    TARGETS
        .iter()
        .filter(|row| row.scenarios.iter().any(|s| settings.wants(s)) && figures.shown(row.figure))
        .map(|row| check(row, &figures))
        .collect()
}

fn check(row: &TargetRow, figures: &Figures<'_>) -> TargetResult {
    let store = figures.run.backend;
    let limit = match row.limit {
        Fixed(limit) => limit,
        MqttFloor => figures.floor(row.figure.mqtt_run().unwrap_or(Checked)),
    };
    let measured = figures.value(row.figure);
    let outcome = measured.map(|m| evaluate(row.bound, limit, m));
    let mut result = TargetResult {
        backend: store,
        target: name(row, figures),
        bound: row.bound,
        limit,
        unit: row.unit,
        measured,
        met: outcome.map(|(met, _)| met),
        shortfall_pct: outcome.and_then(|(_, s)| s),
        note: figures.note(row.figure),
        reference: false,
    };
    if figures.met_whatever_the_figure(row.figure) {
        result.met = Some(true);
        result.shortfall_pct = None;
    }
    let profile = store.profile();
    if row.reference {
        let why = match profile.own_mqtt_floor {
            Some(own) => format!(
                "{EMBEDDED_ONLY}; it asks {} events/s of {}",
                thousands(own),
                profile.title
            ),
            None => EMBEDDED_ONLY.to_owned(),
        };
        for_reference(&mut result, &why);
    } else if row.set_for == EmbeddedDefault && !profile.embedded_targets_are_own {
        for_reference(&mut result, EMBEDDED_ONLY);
    }
    result
}

/// The row's name; a run at the rate offered beside the store's own says that rate after the
/// scenario.
fn name(row: &TargetRow, figures: &Figures<'_>) -> String {
    match (row.figure.mqtt_run(), row.name.split_once(':')) {
        (Some(Ceiling), Some((scenario, rest))) => {
            let offered = figures.mqtt(Ceiling).map_or(0.0, |c| c.gantry.offered_rate);
            format!("{scenario} at {} msg/s offered:{rest}", thousands(offered))
        }
        _ => row.name.to_owned(),
    }
}

/// Marks `t` as a figure for reference (`TargetResult::reference`), with why.
fn for_reference(t: &mut TargetResult, why: &str) {
    t.reference = true;
    t.note = Some(match t.note.take() {
        Some(note) if !note.is_empty() => format!("{why}; {note}"),
        _ => why.to_owned(),
    });
}
