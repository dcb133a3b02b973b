//! Desired values reaching machines as they come back into coverage: `devices` devices log in
//! once and leave; while they are offline each is given a desired `setpoint`
//! (`PATCH /devices/{id}/desired`). Then the ingest devices publish telemetry at a paced rate,
//! first alone, then again while every one of the offline devices reconnects at the same instant
//! (a crane site's cell coming back). Each device times its CONNACK, subscribes to its inbox as a
//! real device does, and times the arrival of its `c` message carrying the delta (Gantry sends it
//! when the device's inbox is ready); it acknowledges the MQTT delivery, acks the message and stays
//! connected until the telemetry ends. Afterwards each device's desired state is read back.
//!
//! The figures: the delay from CONNACK to the delta (one clock, this process's), the devices that
//! got none, and the ingest rate over the seconds the reconnects took against the same seconds of
//! the run alone.

use std::time::{Duration, Instant};

use anyhow::Context;
use futures::{StreamExt, TryStreamExt};
use hdrhistogram::Histogram;
use hyper::Method;
use rumqttc::mqttbytes::QoS;
use rumqttc::mqttbytes::v4::Packet;
use serde::Serialize;
use serde_json::{Value, json};

use super::ingest_mqtt::{self, MqttTarget};
use super::{Ctx, Measurement};
use crate::format::thousands;
use crate::http::Api;
use crate::load::{Latency, histogram, summarize};
use crate::mqtt::{self, Reader, Writer};
use crate::mqtt_load::{self, Outcome, Pace};
use crate::seed::{CONTROL_ATTRIBUTE, DeviceRef};
use crate::server::{Usage, UsageMeter};

pub const SCENARIO: &str = "reconnect";
pub const ALONE_VARIANT: &str = "QoS 1 publish → PUBACK, ingest alone";
pub const WITH_VARIANT: &str = "QoS 1 publish → PUBACK, while the devices reconnect";
pub const DELTA_VARIANT: &str = "CONNACK → desired delta (c) on the device, all reconnecting at once";
/// A device that has no delta this long after its CONNACK counts as missing.
const DELTA_TIMEOUT: Duration = Duration::from_secs(30);
/// Setup requests and first sessions at a time.
const SETUP_PARALLEL: usize = 32;
/// Devices named in the check when some got no delta.
const MISSING_NAMED: usize = 10;

/// The load: `devices` reconnecting while the ingest devices publish `rate` messages/s.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct ReconnectLoad {
    pub devices: usize,
    pub rate: f64,
}

impl ReconnectLoad {
    /// The load the issue sets the targets at.
    pub const FULL: ReconnectLoad = ReconnectLoad {
        devices: 1000,
        rate: 10_000.0,
    };
}

#[derive(Debug, Clone, Serialize)]
pub struct ReconnectCheck {
    pub load: ReconnectLoad,
    /// Devices that got their CONNACK.
    pub connected: u64,
    /// Devices whose delta arrived within `DELTA_TIMEOUT` of their CONNACK.
    pub received: u64,
    /// Devices without a delta (not connected, or none arrived).
    pub missing: u64,
    /// The first few of them, each with why.
    pub missing_devices: Vec<String>,
    /// Devices whose desired `setpoint` read `applied` afterwards.
    pub applied: u64,
    /// Connect → CONNACK.
    pub connack: Latency,
    /// CONNACK → the delta on the device.
    pub delta: Latency,
    /// From the connects' start to the last delta (or the last device's end).
    pub spread_seconds: f64,
    /// Whole seconds of the runs (counted from their first publish) the ingest rates compare.
    pub window: (usize, usize),
    /// PUBACKs per second over `window`: alone, and while the devices reconnected.
    pub alone_in_window: f64,
    pub with_in_window: f64,
    /// PUBACKs per second over each whole run.
    pub alone_per_second: f64,
    pub with_per_second: f64,
}

impl ReconnectCheck {
    /// Ingest while the devices reconnected over ingest alone, over the same seconds.
    pub fn ingest_ratio(&self) -> f64 {
        self.with_in_window / self.alone_in_window.max(f64::EPSILON)
    }
}

pub struct ReconnectOutcome {
    pub measurements: Vec<Measurement>,
    pub check: ReconnectCheck,
}

/// `devices` reconnect; `ingest` publish the telemetry.
pub async fn run(
    ctx: &Ctx<'_>,
    target: &MqttTarget,
    devices: &[DeviceRef],
    ingest: &[DeviceRef],
    load: ReconnectLoad,
) -> anyhow::Result<ReconnectOutcome> {
    anyhow::ensure!(!devices.is_empty(), "no devices to reconnect");
    anyhow::ensure!(!ingest.is_empty(), "no devices to publish for");
    first_sessions(target, devices).await?;
    set_desired(ctx.api, devices).await?;
    eprintln!(
        "  {SCENARIO}: {} devices offline with desired values",
        thousands(devices.len() as f64)
    );
    crate::server::wait_until_idle(ctx.pid, Duration::from_secs(120)).await;
    let ids: Vec<String> = ingest.iter().map(|d| d.id.clone()).collect();
    let pace = Pace {
        rate: load.rate,
        warmup: ctx.warmup,
        duration: ctx.duration,
        drain: Duration::from_secs(10),
    };

    let conns = ingest_mqtt::connect_devices(target, ingest).await?;
    let meter = UsageMeter::start(ctx.pid, ctx.local_postgres);
    let alone = mqtt_load::drive(conns, ingest_mqtt::payloads(ids.clone()), pace).await?;
    let alone_usage = meter.finish().await;
    crate::server::wait_until_idle(ctx.pid, Duration::from_secs(120)).await;

    let conns = ingest_mqtt::connect_devices(target, ingest).await?;
    let meter = UsageMeter::start(ctx.pid, ctx.local_postgres);
    let began = Instant::now();
    let telemetry = tokio::spawn(mqtt_load::drive(conns, ingest_mqtt::payloads(ids), pace));
    // A quarter into the measured part: the reconnects fall within the telemetry's seconds.
    let storm_at = began + mqtt_load::START_DELAY + ctx.warmup + ctx.duration / 4;
    tokio::time::sleep_until(storm_at.into()).await;
    let mut reconnected = reconnect_all(target, devices).await;
    let with = telemetry.await??;
    let with_usage = meter.finish().await;
    let held: Vec<Writer> = reconnected.iter_mut().filter_map(|r| r.writer.take()).collect();
    futures::stream::iter(held)
        .for_each_concurrent(SETUP_PARALLEL, Writer::disconnect)
        .await;
    let applied = count_applied(ctx.api, devices).await?;

    let timing = Timing {
        start: began + mqtt_load::START_DELAY,
        storm_at,
        publishing: ctx.warmup + ctx.duration,
    };
    let check = check(load, &reconnected, &timing, &alone, &with, applied);
    let measurements = vec![
        publish_measurement(ALONE_VARIANT, &alone, alone_usage, None),
        publish_measurement(WITH_VARIANT, &with, with_usage, Some(&check)),
        delta_measurement(&reconnected, &check, with_usage, &with),
    ];
    Ok(ReconnectOutcome { measurements, check })
}

/// Every device logs in once, subscribes to its inbox and leaves: what comes later is a
/// reconnect of a device the server has seen.
async fn first_sessions(target: &MqttTarget, devices: &[DeviceRef]) -> anyhow::Result<()> {
    futures::stream::iter(devices)
        .map(|d| async move {
            let (_, writer) = target.connect_device(d).await?;
            writer.disconnect().await;
            Ok::<_, anyhow::Error>(())
        })
        .buffer_unordered(SETUP_PARALLEL)
        .try_collect::<Vec<()>>()
        .await
        .context("the devices' first sessions")?;
    // The server records the disconnects off the packet's path; a moment lets them land, so
    // that the values below are set for devices it knows are offline.
    tokio::time::sleep(Duration::from_secs(1)).await;
    Ok(())
}

/// The desired `setpoint` each device is to receive.
fn desired_value(i: usize) -> f64 {
    10.0 + (i % 100) as f64 / 10.0
}

/// One desired value per device, set over REST while the devices are offline.
async fn set_desired(api: &Api, devices: &[DeviceRef]) -> anyhow::Result<()> {
    futures::stream::iter(devices.iter().enumerate())
        .map(|(i, d)| async move {
            let body = json!({"attributes": {CONTROL_ATTRIBUTE: desired_value(i)}});
            let path = format!("/api/v1/devices/{}/desired", d.id);
            api.call(Method::PATCH, &path, Some(&body)).await
        })
        .buffer_unordered(SETUP_PARALLEL)
        .try_collect::<Vec<Value>>()
        .await
        .context("setting desired values")?;
    Ok(())
}

/// What one device saw when it reconnected.
struct Reconnected {
    id: String,
    /// When its connect began.
    began: Instant,
    /// When its CONNACK was read.
    connack: Option<Instant>,
    /// When its delta was read.
    delta: Option<Instant>,
    /// Why it has no delta, when it has none.
    error: Option<String>,
    /// Its connection, held until the telemetry ends.
    writer: Option<Writer>,
}

/// Every device connects at the same instant, each on its own task.
async fn reconnect_all(target: &MqttTarget, devices: &[DeviceRef]) -> Vec<Reconnected> {
    let tasks: Vec<_> = devices
        .iter()
        .map(|d| tokio::spawn(reconnect(target.clone(), d.clone())))
        .collect();
    let mut out = Vec::with_capacity(tasks.len());
    for (task, device) in tasks.into_iter().zip(devices) {
        out.push(task.await.unwrap_or_else(|e| Reconnected {
            id: device.id.clone(),
            began: Instant::now(),
            connack: None,
            delta: None,
            error: Some(format!("task failed: {e}")),
            writer: None,
        }));
    }
    out
}

/// One device: connect (CONNACK timed), subscribe to its inbox, wait for the delta (timed),
/// acknowledge it and its ack's PUBACK.
async fn reconnect(target: MqttTarget, device: DeviceRef) -> Reconnected {
    let began = Instant::now();
    let mut seen = Reconnected {
        id: device.id.clone(),
        began,
        connack: None,
        delta: None,
        error: None,
        writer: None,
    };
    let (mut reader, mut writer) =
        match mqtt::connect(&target.endpoint(), &device.id, Some((&device.id, &device.token))).await {
            Ok(conn) => conn,
            Err(e) => {
                seen.error = Some(format!("connect: {e:#}"));
                return seen;
            }
        };
    let connack = Instant::now();
    seen.connack = Some(connack);
    let awaited = tokio::time::timeout(DELTA_TIMEOUT, async {
        writer.subscribe(&target.inbox(&device.id)).await?;
        let (arrived, delta) = next_delta(&mut reader, &mut writer).await?;
        seen.delta = Some(arrived);
        let pkid = writer
            .publish(&target.upstream(&device.id), ack_of(&device.id, &delta)?)
            .await?;
        wait_for_puback(&mut reader, pkid).await
    })
    .await;
    match awaited {
        Ok(Ok(())) => {}
        Ok(Err(e)) => seen.error = Some(format!("{e:#}")),
        Err(_) if seen.delta.is_none() => seen.error = Some(format!("no delta in {} s", DELTA_TIMEOUT.as_secs())),
        Err(_) => seen.error = Some("no PUBACK for the ack".to_owned()),
    }
    seen.writer = Some(writer);
    seen
}

/// The first `c` message on the inbox (each delivery acknowledged at the MQTT level) and when
/// it was read.
async fn next_delta(reader: &mut Reader, writer: &mut Writer) -> anyhow::Result<(Instant, Value)> {
    loop {
        if let Packet::Publish(p) = reader.next().await? {
            let at = Instant::now();
            if p.qos != QoS::AtMostOnce {
                writer.puback(p.pkid).await?;
            }
            let message: Value = serde_json::from_slice(&p.payload).context("a message on the inbox is not JSON")?;
            if message["meta"]["type"] == "c" {
                return Ok((at, message));
            }
        }
    }
}

/// The device's ack of the delta: every value taken.
fn ack_of(device: &str, delta: &Value) -> anyhow::Result<Vec<u8>> {
    let ack = json!({
        "meta": {"id": uuid::Uuid::now_v7().to_string(), "type": "ack", "deviceid": device, "version": "1.0",
                 "correlationId": delta["meta"]["id"]},
        "payload": {"attrs": []}
    });
    Ok(serde_json::to_vec(&ack)?)
}

async fn wait_for_puback(reader: &mut Reader, pkid: u16) -> anyhow::Result<()> {
    loop {
        if let Packet::PubAck(a) = reader.next().await?
            && a.pkid == pkid
        {
            return Ok(());
        }
    }
}

/// Devices whose desired `setpoint` reads `applied`.
async fn count_applied(api: &Api, devices: &[DeviceRef]) -> anyhow::Result<u64> {
    let states: Vec<Value> = futures::stream::iter(devices)
        .map(|d| async move { api.get(&format!("/api/v1/devices/{}/desired", d.id)).await })
        .buffer_unordered(SETUP_PARALLEL)
        .try_collect()
        .await
        .context("reading the desired states back")?;
    Ok(states
        .iter()
        .filter(|s| s["attributes"][CONTROL_ATTRIBUTE]["status"] == "applied")
        .count() as u64)
}

/// When the runs' clocks started and the reconnects began.
struct Timing {
    /// The telemetry's first publish (its per-second windows count from here).
    start: Instant,
    storm_at: Instant,
    /// How long the telemetry publishes (warm-up included).
    publishing: Duration,
}

impl Timing {
    /// The whole seconds of the run from the one the reconnects began in to the one the last
    /// delta arrived in, within the publishing.
    fn window(&self, last: Instant) -> (usize, usize) {
        let second = |at: Instant| at.saturating_duration_since(self.start).as_secs() as usize;
        // The last second the telemetry publishes in whole.
        let whole = (self.publishing.as_secs_f64().floor() as usize).saturating_sub(1);
        let first = second(self.storm_at).min(whole);
        (first, second(last).clamp(first, whole))
    }
}

/// PUBACKs per second over the seconds `window` of a run.
fn acked_in(outcome: &Outcome, (first, last): (usize, usize)) -> f64 {
    let acked: u64 = outcome
        .windows
        .iter()
        .filter(|w| (first..=last).contains(&w.second))
        .map(|w| w.acked)
        .sum();
    acked as f64 / (last - first + 1) as f64
}

fn check(
    load: ReconnectLoad,
    seen: &[Reconnected],
    timing: &Timing,
    alone: &Outcome,
    with: &Outcome,
    applied: u64,
) -> ReconnectCheck {
    let (connack, delta) = latencies(seen);
    let last = seen
        .iter()
        .filter_map(|r| r.delta.or(r.connack))
        .max()
        .unwrap_or(timing.storm_at);
    let missing: Vec<&Reconnected> = seen.iter().filter(|r| r.delta.is_none()).collect();
    let window = timing.window(last);
    ReconnectCheck {
        load,
        connected: seen.iter().filter(|r| r.connack.is_some()).count() as u64,
        received: (seen.len() - missing.len()) as u64,
        missing: missing.len() as u64,
        missing_devices: missing
            .iter()
            .take(MISSING_NAMED)
            .map(|r| format!("{}: {}", r.id, r.error.as_deref().unwrap_or("no delta")))
            .collect(),
        applied,
        connack: summarize(&connack),
        delta: summarize(&delta),
        spread_seconds: last.saturating_duration_since(timing.storm_at).as_secs_f64(),
        window,
        alone_in_window: acked_in(alone, window),
        with_in_window: acked_in(with, window),
        alone_per_second: alone.acked_per_second(),
        with_per_second: with.acked_per_second(),
    }
}

/// Connect → CONNACK and CONNACK → delta, in µs.
fn latencies(seen: &[Reconnected]) -> (Histogram<u64>, Histogram<u64>) {
    let (mut connack, mut delta) = (histogram(3), histogram(3));
    for r in seen {
        if let Some(at) = r.connack {
            connack.saturating_record((at - r.began).as_micros().max(1) as u64);
            if let Some(arrived) = r.delta {
                delta.saturating_record((arrived - at).as_micros().max(1) as u64);
            }
        }
    }
    (connack, delta)
}

fn publish_measurement(variant: &str, outcome: &Outcome, usage: Usage, check: Option<&ReconnectCheck>) -> Measurement {
    let mut m = Measurement::of_acked(SCENARIO, variant.to_owned(), outcome, usage);
    let mut note = format!(
        "{} msg/s offered, {} acknowledged",
        thousands(outcome.offered_rate),
        thousands(outcome.acked as f64)
    );
    if let Some(c) = check {
        note.push_str(&format!(
            "; over seconds {}–{} (the reconnects): {}/s against {}/s alone, {:.2} ×",
            c.window.0,
            c.window.1,
            thousands(c.with_in_window),
            thousands(c.alone_in_window),
            c.ingest_ratio()
        ));
    }
    m.note = Some(note);
    m.log();
    m
}

fn delta_measurement(seen: &[Reconnected], c: &ReconnectCheck, usage: Usage, with: &Outcome) -> Measurement {
    let (_, delta) = latencies(seen);
    let mut m = Measurement::new(
        SCENARIO,
        DELTA_VARIANT.to_owned(),
        c.load.devices,
        c.received as f64 / c.spread_seconds.max(f64::EPSILON),
        c.received,
        c.missing,
        summarize(&delta),
        usage,
        c.received + with.acked,
        Duration::from_secs_f64(with.active_seconds),
    );
    let mut note = format!(
        "{} devices at once under {} msg/s: {} of them got their delta, {} read applied afterwards; \
         connect → CONNACK p50 {:.1} ms, p99 {:.1} ms; the last delta {:.2} s after the connects began; \
         ingest over those seconds {:.2} × alone, over the whole run {:.2} ×",
        thousands(c.load.devices as f64),
        thousands(c.load.rate),
        thousands(c.received as f64),
        thousands(c.applied as f64),
        c.connack.p50_ms,
        c.connack.p99_ms,
        c.spread_seconds,
        c.ingest_ratio(),
        c.with_per_second / c.alone_per_second.max(f64::EPSILON)
    );
    if c.missing > 0 {
        note.push_str(&format!("; missing: {}", c.missing_devices.join(", ")));
    }
    m.note = Some(note);
    m.log();
    if c.missing > 0 {
        eprintln!("  {SCENARIO}: WARNING: {} devices got no delta", c.missing);
    }
    m
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_window_runs_from_the_reconnects_to_the_last_delta_within_the_publishing() {
        let start = Instant::now();
        let timing = Timing {
            start,
            storm_at: start + Duration::from_millis(4500),
            publishing: Duration::from_secs(12),
        };
        assert_eq!(timing.window(start + Duration::from_millis(4800)), (4, 4));
        assert_eq!(timing.window(start + Duration::from_millis(6100)), (4, 6));
        // A delta after the publishing stopped: the window ends with the last whole second.
        assert_eq!(timing.window(start + Duration::from_secs(30)), (4, 11));
    }

    #[test]
    fn an_ack_answers_the_delta() {
        let delta = json!({"meta": {"id": "m-1", "type": "c", "version": 3}, "payload": {"attrs": []}});
        let ack: Value = serde_json::from_slice(&ack_of("d-1", &delta).unwrap()).unwrap();
        assert_eq!(ack["meta"]["type"], "ack");
        assert_eq!(ack["meta"]["correlationId"], "m-1");
        assert_eq!(ack["meta"]["deviceid"], "d-1");
    }
}
