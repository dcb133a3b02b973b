//! What a target row judges (`Figure`), read off one store's run: the figure, the note that
//! qualifies it (a smaller size than the issue's, a count that does not match), and when a paced
//! run is met whatever its last fraction shows.

use std::fmt::Write;

use super::{BackendRun, Settings};
use crate::format::thousands;
use crate::scenarios::control::Burst;
use crate::scenarios::ingest_mqtt::{self, MqttIngestCheck};
use crate::scenarios::{Measurement, alarms, control, ingest_rest, read, reconnect, series, stream, webhooks};

/// The sizes the targets are set at; a smaller run says so in the note.
const FULL_LISTED_EVENTS: u64 = 1_000_000;
/// A year of a reading a minute.
const FULL_SERIES_EVENTS: u64 = 525_600;
const FULL_MQTT_DEVICES: usize = 1000;
const FULL_MQTT_SECONDS: f64 = 600.0;
const FULL_HELD_CONNECTIONS: usize = 19_000;
const MANY_CONNECTIONS: usize = 64;

/// The figure a target row judges.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Figure {
    IngestRestRate,
    IngestRestP99,
    ShadowRate,
    ShadowP99,
    FirstPageP99,
    SeriesSpanDailyP99,
    SeriesWeekHourlyP99,
    MqttStored(MqttRun),
    MqttP99(MqttRun),
    MqttBacklog(MqttRun),
    MqttOverMosquitto,
    ControlIdleP50,
    ControlIdleP99,
    ControlBurstP99,
    ControlBurstMax,
    StreamDeliveryP99,
    StreamIngestRatio,
    ReconnectDeltaP99,
    ReconnectMissing,
    ReconnectIngestRatio,
    WebhooksIngestRatio,
    AlarmsIngestRatio,
    /// Over MQTT at the rate offered (the figure at 25,000 msg/s): acknowledged with
    /// the rules over acknowledged with none.
    AlarmsMqttRatio,
    ConnectionsHeld,
    ConnectionMemory,
    IdleRss,
}

/// Which ingest-mqtt run of a store an MQTT figure is of.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MqttRun {
    /// The run at the store's own rate when it was measured there too, else the run at the rate
    /// offered: where the store's MQTT targets are checked.
    Checked,
    /// The run at the rate offered, when the store was also measured at its own rate: its figures
    /// against the embedded default's targets.
    Ceiling,
}

impl Figure {
    pub fn mqtt_run(self) -> Option<MqttRun> {
        match self {
            Figure::MqttStored(r) | Figure::MqttP99(r) | Figure::MqttBacklog(r) => Some(r),
            _ => None,
        }
    }
}

/// One store's run and the settings it ran with.
pub struct Figures<'a> {
    pub run: &'a BackendRun,
    pub settings: &'a Settings,
}

impl Figures<'_> {
    /// Whether a row of `figure` belongs in this run's table at all.
    pub fn shown(&self, figure: Figure) -> bool {
        figure.mqtt_run() != Some(MqttRun::Ceiling) || (self.run.mqtt_floor.is_some() && self.run.mqtt_ingest.is_some())
    }

    pub fn mqtt(&self, which: MqttRun) -> Option<&MqttIngestCheck> {
        match which {
            MqttRun::Checked => self.run.mqtt_floor.as_ref().or(self.run.mqtt_ingest.as_ref()),
            MqttRun::Ceiling => self.run.mqtt_ingest.as_ref(),
        }
    }

    /// The events/s asked of the run `which`.
    pub fn floor(&self, which: MqttRun) -> f64 {
        match which {
            MqttRun::Checked => self.run.backend.mqtt_floor(),
            MqttRun::Ceiling => ingest_mqtt::EMBEDDED_FLOOR,
        }
    }

    fn find(&self, scenario: &str, variant: &str, connections: usize) -> Option<&Measurement> {
        self.run
            .measurements
            .iter()
            .find(|m| m.scenario == scenario && m.variant == variant && m.connections == connections)
    }

    fn control(&self, variant: &str) -> Option<&Measurement> {
        self.run
            .measurements
            .iter()
            .find(|m| m.scenario == control::SCENARIO && m.variant == variant)
    }

    /// The measurement of ingest-mqtt's run `c`.
    fn mqtt_measurement(&self, c: &MqttIngestCheck) -> Option<&Measurement> {
        let variant = ingest_mqtt::variant(c.gantry.offered_rate);
        self.run
            .measurements
            .iter()
            .find(|m| m.scenario == ingest_mqtt::SCENARIO && m.variant == variant)
    }

    pub fn value(&self, figure: Figure) -> Option<f64> {
        let many = self.settings.connections;
        let run = self.run;
        match figure {
            Figure::IngestRestRate => self
                .find(ingest_rest::SCENARIO, ingest_rest::VARIANT, many)
                .map(|m| m.requests_per_second),
            Figure::IngestRestP99 => self
                .find(ingest_rest::SCENARIO, ingest_rest::VARIANT, many)
                .map(|m| m.latency.p99_ms),
            Figure::ShadowRate => self
                .find(read::SCENARIO, read::SHADOW_VARIANT, many)
                .map(|m| m.requests_per_second),
            Figure::ShadowP99 => self
                .find(read::SCENARIO, read::SHADOW_VARIANT, many)
                .map(|m| m.latency.p99_ms),
            Figure::FirstPageP99 => self
                .find(read::SCENARIO, read::FIRST_PAGE_VARIANT, 1)
                .map(|m| m.latency.p99_ms),
            Figure::SeriesSpanDailyP99 => self
                .find(series::SCENARIO, series::SPAN_DAILY_VARIANT, 1)
                .map(|m| m.latency.p99_ms),
            Figure::SeriesWeekHourlyP99 => self
                .find(series::SCENARIO, series::WEEK_HOURLY_VARIANT, 1)
                .map(|m| m.latency.p99_ms),
            Figure::MqttStored(which) => self.mqtt(which).map(|c| c.stored_per_second),
            Figure::MqttP99(which) => self
                .mqtt(which)
                .and_then(|c| self.mqtt_measurement(c))
                .map(|m| m.latency.p99_ms),
            Figure::MqttBacklog(which) => self.mqtt(which).map(|c| c.gantry.backlog_seconds()),
            Figure::MqttOverMosquitto => run
                .mqtt_ingest
                .as_ref()
                .and_then(|c| self.mqtt_measurement(c))
                .and_then(|m| m.baseline_ratio),
            Figure::ControlIdleP50 => self.control(control::IDLE_VARIANT).map(|m| m.latency.p50_ms),
            Figure::ControlIdleP99 => self.control(control::IDLE_VARIANT).map(|m| m.latency.p99_ms),
            Figure::ControlBurstP99 => self.control(control::BURST_VARIANT).map(|m| m.latency.p99_ms),
            Figure::ControlBurstMax => self.control(control::BURST_VARIANT).map(|m| m.latency.max_ms),
            Figure::StreamDeliveryP99 => self
                .run
                .measurements
                .iter()
                .find(|m| m.scenario == stream::SCENARIO && m.variant == stream::DELIVERY_VARIANT)
                .map(|m| m.latency.p99_ms),
            Figure::StreamIngestRatio => run.stream_check.as_ref().map(|c| c.ingest_ratio()),
            Figure::ReconnectDeltaP99 => run.reconnect_check.as_ref().map(|c| c.delta.p99_ms),
            Figure::ReconnectMissing => run.reconnect_check.as_ref().map(|c| c.missing as f64),
            Figure::ReconnectIngestRatio => run.reconnect_check.as_ref().map(|c| c.ingest_ratio()),
            Figure::WebhooksIngestRatio => {
                let alone = self.find(webhooks::SCENARIO, webhooks::ALONE, many)?;
                let with = self.find(webhooks::SCENARIO, &webhooks::with_variant(), many)?;
                Some(with.requests_per_second / alone.requests_per_second.max(f64::EPSILON))
            }
            Figure::AlarmsIngestRatio => {
                let alone = self.find(alarms::SCENARIO, alarms::ALONE, many)?;
                let with = self.find(alarms::SCENARIO, &alarms::with_variant(), many)?;
                Some(with.requests_per_second / alone.requests_per_second.max(f64::EPSILON))
            }
            Figure::AlarmsMqttRatio => {
                let rate = self.settings.mqtt_rate;
                let measured = |rules| {
                    self.run
                        .measurements
                        .iter()
                        .find(|m| m.scenario == alarms::SCENARIO && m.variant == alarms::mqtt_variant(rate, rules))
                };
                let (alone, with) = (measured(0)?, measured(alarms::RULES)?);
                Some(with.requests_per_second / alone.requests_per_second.max(f64::EPSILON))
            }
            Figure::ConnectionsHeld => run.connections.as_ref().map(|c| c.held as f64),
            Figure::ConnectionMemory => run
                .connections
                .as_ref()
                .and_then(|c| c.kib_per_connection)
                .map(|kib| kib * 1.024),
            Figure::IdleRss => run.idle_rss_mib.map(|mib| mib * 1.048_576),
        }
    }

    pub fn note(&self, figure: Figure) -> Option<String> {
        let run = self.run;
        let many = self.settings.connections;
        let at_many = (many != MANY_CONNECTIONS).then(|| format!("measured at {many} connections, not 64"));
        let control_note = || {
            run.control_check
                .as_ref()
                .filter(|c| !c.matches)
                .map(|c| format!("{} sent but {} logs completed", c.sent, c.completed))
        };
        match figure {
            Figure::IngestRestRate => at_many.or_else(|| {
                run.ingest_check.as_ref().and_then(|c| {
                    (!c.matches).then(|| format!("{} answered 200 but {} stored", c.answered_ok, c.stored))
                })
            }),
            Figure::IngestRestP99
            | Figure::ShadowRate
            | Figure::ShadowP99
            | Figure::WebhooksIngestRatio
            | Figure::AlarmsIngestRatio => at_many,
            Figure::FirstPageP99 => Some(self.listing_note()),
            Figure::SeriesSpanDailyP99 | Figure::SeriesWeekHourlyP99 => {
                let events = self.settings.series_events;
                (events < FULL_SERIES_EVENTS).then(|| {
                    format!(
                        "{} readings a minute apart, not a year's {}",
                        thousands(events as f64),
                        thousands(FULL_SERIES_EVENTS as f64)
                    )
                })
            }
            Figure::MqttStored(which) => Some(self.mqtt_stored_note(which)),
            Figure::MqttP99(_) | Figure::MqttBacklog(_) | Figure::ConnectionMemory => None,
            Figure::AlarmsMqttRatio => (self.settings.mqtt_rate != 25_000.0).then(|| {
                format!(
                    "at {} msg/s offered; the issue's figure is at 25,000",
                    thousands(self.settings.mqtt_rate)
                )
            }),
            Figure::MqttOverMosquitto => run.mqtt_ingest.as_ref().and_then(|c| c.mosquitto_skipped.clone()),
            Figure::ControlIdleP50 | Figure::ControlIdleP99 => control_note(),
            Figure::ControlBurstP99 | Figure::ControlBurstMax => {
                let burst = self.settings.burst;
                let smaller = (burst != Burst::FULL).then(|| {
                    format!(
                        "after {} events at {} msg/s from {} devices, {} controls; not 250,000 at 25,000 msg/s from 200, 200 controls",
                        thousands(burst.events as f64),
                        thousands(burst.rate),
                        burst.devices,
                        burst.controls
                    )
                });
                let notes: Vec<String> = smaller.into_iter().chain(control_note()).collect();
                (!notes.is_empty()).then(|| notes.join("; "))
            }
            Figure::StreamDeliveryP99 | Figure::StreamIngestRatio => run.stream_check.as_ref().and_then(|c| {
                let mut notes = Vec::new();
                if c.load != stream::StreamLoad::FULL {
                    notes.push(format!(
                        "{} subscribers at {} msg/s, not 1,000 at 10,000",
                        thousands(c.load.subscribers as f64),
                        thousands(c.load.rate)
                    ));
                }
                if c.delivered < c.expected || c.lost_subscribers > 0 {
                    notes.push(format!(
                        "{} of about {} deliveries read, {} subscribers lost",
                        thousands(c.delivered as f64),
                        thousands(c.expected as f64),
                        c.lost_subscribers
                    ));
                }
                (!notes.is_empty()).then(|| notes.join("; "))
            }),
            Figure::ReconnectDeltaP99 | Figure::ReconnectMissing | Figure::ReconnectIngestRatio => run
                .reconnect_check
                .as_ref()
                .and_then(|c| self.reconnect_note(figure, c)),
            Figure::ConnectionsHeld => run.connections.as_ref().and_then(|c| {
                let mut notes: Vec<String> = c.error.iter().cloned().collect();
                if c.target < FULL_HELD_CONNECTIONS {
                    notes.push(format!("{} asked for", thousands(c.target as f64)));
                }
                if let Some(limit) = c.open_file_limit {
                    notes.push(format!("open-file limit {}", thousands(limit as f64)));
                }
                (!notes.is_empty()).then(|| notes.join("; "))
            }),
            Figure::IdleRss => Some("right after start, before any request".to_owned()),
        }
    }

    fn listing_note(&self) -> String {
        let listed = self
            .run
            .seed
            .as_ref()
            .map(|s| s.listed_device_events)
            .unwrap_or(self.settings.listed_device_events);
        let mut note = "at 1 connection".to_owned();
        if listed < FULL_LISTED_EVENTS {
            let _ = write!(
                note,
                "; the device holds {} events, not 1,000,000",
                thousands(listed as f64)
            );
        }
        note
    }

    /// A smaller load than the issue's; for the ratio, the seconds it is over; for the missing
    /// count, the first devices without a delta.
    fn reconnect_note(&self, figure: Figure, c: &reconnect::ReconnectCheck) -> Option<String> {
        let mut notes = Vec::new();
        if c.load != reconnect::ReconnectLoad::FULL {
            notes.push(format!(
                "{} devices under {} msg/s, not 1,000 under 10,000",
                thousands(c.load.devices as f64),
                thousands(c.load.rate)
            ));
        }
        match figure {
            Figure::ReconnectIngestRatio => notes.push(format!(
                "PUBACKs/s over seconds {}–{} of the run (the reconnects) against the same seconds alone",
                c.window.0, c.window.1
            )),
            Figure::ReconnectMissing if c.missing > 0 => notes.push(c.missing_devices.join(", ")),
            _ => {}
        }
        (!notes.is_empty()).then(|| notes.join("; "))
    }

    /// What qualifies events stored/s of the run `which`: a rate, size or duration below the
    /// issue's, a store that lost acknowledged messages, or a run that kept pace.
    fn mqtt_stored_note(&self, which: MqttRun) -> String {
        let settings = self.settings;
        let check = self.mqtt(which);
        let floor = self.floor(which);
        let offered = check.map_or(settings.mqtt_rate, |c| c.gantry.offered_rate);
        let mut notes = Vec::new();
        if offered < floor {
            notes.push(format!("only {} msg/s offered", thousands(offered)));
        }
        if settings.ingest_devices != FULL_MQTT_DEVICES {
            notes.push(format!(
                "{} devices, not 1,000",
                thousands(settings.ingest_devices as f64)
            ));
        }
        if let Some(c) = check.filter(|c| !c.every_ack_stored) {
            notes.push(format!("{} acknowledged but {} stored", c.gantry.acked, c.stored));
        }
        let seconds = settings.duration_seconds * f64::from(ingest_mqtt::DURATION_FACTOR);
        if seconds < FULL_MQTT_SECONDS {
            notes.push(format!("sustained {seconds:.0} s, not 10 minutes"));
        }
        if let Some(c) = self.kept_pace(which) {
            notes.push(format!(
                "kept pace with {} msg/s offered: every message stored, the last drained {:.1} s after publishing stopped",
                thousands(c.gantry.offered_rate),
                c.gantry.drain_seconds
            ));
        }
        notes.join("; ")
    }

    /// The run `which` when it was offered its floor or more and kept pace with it: every
    /// message stored, drained within a second. The bench offers a paced rate and stored/s runs
    /// from the first publish to the last PUBACK, so a server that stores every message as it
    /// comes still shows a little less than the rate offered (the messages in flight when
    /// publishing stopped); such a run meets the floor whatever that last fraction.
    fn kept_pace(&self, which: MqttRun) -> Option<&MqttIngestCheck> {
        let floor = self.floor(which);
        self.mqtt(which).filter(|c| {
            c.gantry.offered_rate >= floor
                && c.every_ack_stored
                && c.gantry.acked == c.gantry.sent
                && c.stored >= c.gantry.sent
                && c.gantry.backlog_seconds() < 1.0
                && c.gantry.drain_seconds < 1.0
        })
    }

    /// Whether the row of `figure` is met whatever its figure reads (see `kept_pace`).
    pub fn met_whatever_the_figure(&self, figure: Figure) -> bool {
        match figure {
            Figure::MqttStored(which) => self.kept_pace(which).is_some(),
            _ => false,
        }
    }
}
