//! Control round trip: `PUT /devices/{id}/shadows` with needack → the device, connected over MQTT,
//! receives the control on its inbox → it publishes an ack → Gantry marks the event log completed
//! and only then sends the ack's PUBACK. The round trip runs from the PUT to that PUBACK, both
//! read by this process, so one clock measures it. One device, one control at a time, in three
//! series: idle; while other devices publish telemetry at a paced rate (the background load of
//! `ingest-mqtt`); and a fixed number of controls right after an ingest burst, while the store is
//! still digesting it (a control's event log must not wait behind telemetry). Afterwards every
//! control's event log is read back through the API.

use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use bytes::Bytes;
use hyper::Method;
use rumqttc::mqttbytes::QoS;
use rumqttc::mqttbytes::v4::Packet;
use serde::Serialize;
use serde_json::{Value, json};

use super::ingest_mqtt::{self, MqttTarget};
use super::{Ctx, Measurement};
use crate::format::thousands;
use crate::http::{Api, Conn};
use crate::load::{histogram, summarize};
use crate::mqtt::{Reader, Writer};
use crate::mqtt_load::{self, Outcome};
use crate::seed::{CONTROL_ATTRIBUTE, DeviceRef};
use crate::server::UsageMeter;

pub const SCENARIO: &str = "control";
pub const IDLE_VARIANT: &str = "PUT shadows → device → ack → completed, idle";
pub const LOADED_PREFIX: &str = "PUT shadows → device → ack → completed, under";
pub const BURST_VARIANT: &str = "PUT shadows → device → ack → completed, right after an ingest burst";
/// No round trip takes this long unless something is broken.
const STEP_TIMEOUT: Duration = Duration::from_secs(10);

#[derive(Debug, Clone, Serialize)]
pub struct ControlCheck {
    /// Controls sent (PUT answered 200) over the three series.
    pub sent: u64,
    /// Of them, event logs the API lists as completed afterwards.
    pub completed: u64,
    pub matches: bool,
    /// The telemetry published during the second series.
    pub background: Option<Outcome>,
    /// The ingest burst the last series followed.
    pub burst: Option<Outcome>,
}

/// The ingest burst the last series of controls follows: `events` published at `rate` by
/// `devices` devices, then `controls` round trips one after another as soon as the publishing
/// stops.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Burst {
    pub events: u64,
    pub rate: f64,
    pub devices: usize,
    pub controls: u64,
}

impl Burst {
    /// The burst the issue sets the target after.
    pub const FULL: Burst = Burst {
        events: 250_000,
        rate: 25_000.0,
        devices: 200,
        controls: 200,
    };

    /// How long the publishing lasts.
    pub fn duration(&self) -> Duration {
        Duration::from_secs_f64(self.events as f64 / self.rate)
    }
}

/// The telemetry around the control series: `devices` publish `background_rate` messages/s
/// under the second series (none when zero), and the first `burst.devices` of them the burst
/// before the third.
pub struct Load<'a> {
    pub devices: &'a [DeviceRef],
    pub background_rate: f64,
    pub burst: Burst,
}

/// When a series of round trips ends.
#[derive(Debug, Clone, Copy)]
enum Series {
    /// The warm-up, then the measured duration.
    Timed,
    /// This many controls, every one measured.
    Count(u64),
}

pub struct ControlOutcome {
    pub measurements: Vec<Measurement>,
    pub check: ControlCheck,
}

/// `device` takes the controls; `load` says what telemetry the second and third series run
/// under.
pub async fn run(
    ctx: &Ctx<'_>,
    target: &MqttTarget,
    project_id: &str,
    device: &DeviceRef,
    load: Load<'_>,
    tag: &str,
) -> anyhow::Result<ControlOutcome> {
    let context = format!("bench-{tag}-control");
    let mut device_conn = DeviceConn::connect(target, device).await?;
    let mut measurements = Vec::new();

    let (idle, mut sent) = round_trips(ctx, &mut device_conn, &context, IDLE_VARIANT.to_owned(), Series::Timed).await?;
    measurements.push(idle);

    let mut background = None;
    if !load.devices.is_empty() && load.background_rate > 0.0 {
        let (loaded, loaded_sent, outcome) = under_telemetry(
            ctx,
            target,
            &mut device_conn,
            &context,
            load.devices,
            load.background_rate,
        )
        .await?;
        sent += loaded_sent;
        measurements.push(loaded);
        background = Some(outcome);
    }

    let burst_devices = &load.devices[..load.burst.devices.min(load.devices.len())];
    let (after, burst_sent, burst) =
        after_burst(ctx, target, &mut device_conn, &context, burst_devices, load.burst).await?;
    sent += burst_sent;
    measurements.push(after);
    device_conn.writer.disconnect().await;

    let completed = completed_logs(ctx.api, project_id, &context).await?;
    eprintln!("  {SCENARIO}: {sent} controls sent, {completed} event logs completed");
    Ok(ControlOutcome {
        measurements,
        check: ControlCheck {
            sent,
            completed,
            matches: completed == sent,
            background,
            burst: Some(burst),
        },
    })
}

/// The timed series while `devices` publish `rate` messages/s of telemetry.
async fn under_telemetry(
    ctx: &Ctx<'_>,
    target: &MqttTarget,
    device: &mut DeviceConn,
    context: &str,
    devices: &[DeviceRef],
    rate: f64,
) -> anyhow::Result<(Measurement, u64, Outcome)> {
    let conns = ingest_mqtt::connect_devices(target, devices).await?;
    let payload = ingest_mqtt::payloads(devices.iter().map(|d| d.id.clone()).collect());
    // The telemetry runs a little longer than the round trips on both sides, so every round
    // trip is measured under it.
    let pace = mqtt_load::Pace {
        rate,
        warmup: ctx.warmup,
        duration: ctx.warmup + ctx.duration + Duration::from_millis(500),
        drain: Duration::from_secs(10),
    };
    let telemetry = tokio::spawn(mqtt_load::drive(conns, payload, pace));
    tokio::time::sleep(ctx.warmup + mqtt_load::START_DELAY).await;
    let variant = format!("{LOADED_PREFIX} {} msg/s of telemetry", thousands(rate));
    let series = round_trips(ctx, device, context, variant, Series::Timed).await;
    let outcome = telemetry.await??;
    let (mut measurement, sent) = series?;
    measurement.note = Some(format!(
        "telemetry from {} devices: {:.0} msg/s acknowledged, p99 {:.1} ms",
        outcome.connections,
        outcome.acked_per_second(),
        outcome.latency.p99_ms
    ));
    Ok((measurement, sent, outcome))
}

/// The device's side: logged in, subscribed to its inbox.
struct DeviceConn {
    id: String,
    upstream: String,
    reader: Reader,
    writer: Writer,
}

impl DeviceConn {
    async fn connect(target: &MqttTarget, device: &DeviceRef) -> anyhow::Result<Self> {
        let (reader, writer) = target.connect_device(device).await?;
        Ok(Self {
            id: device.id.clone(),
            upstream: target.upstream(&device.id),
            reader,
            writer,
        })
    }

    /// The next control on the inbox, acknowledged at the MQTT level.
    async fn next_control(&mut self) -> anyhow::Result<Value> {
        loop {
            if let Packet::Publish(p) = self.reader.next().await? {
                if p.qos != QoS::AtMostOnce {
                    self.writer.puback(p.pkid).await?;
                }
                return serde_json::from_slice(&p.payload).context("the control is not JSON");
            }
        }
    }

    /// Acks the control and waits for the PUBACK, which follows the event log's update.
    async fn ack(&mut self, control: &Value) -> anyhow::Result<()> {
        let ack = json!({
            "meta": {"id": uuid::Uuid::now_v7().to_string(), "type": "ack", "deviceid": self.id, "version": "1.0",
                     "correlationId": control["meta"]["id"]},
            "payload": {"attrs": []}
        });
        let pkid = self.writer.publish(&self.upstream, serde_json::to_vec(&ack)?).await?;
        loop {
            if let Packet::PubAck(a) = self.reader.next().await?
                && a.pkid == pkid
            {
                return Ok(());
            }
        }
    }
}

/// `burst.events` published by `devices` at `burst.rate`; as soon as the publishing stops (the
/// PUBACKs still owed drain meanwhile), `burst.controls` round trips one after another.
async fn after_burst(
    ctx: &Ctx<'_>,
    target: &MqttTarget,
    device: &mut DeviceConn,
    context: &str,
    devices: &[DeviceRef],
    burst: Burst,
) -> anyhow::Result<(Measurement, u64, Outcome)> {
    anyhow::ensure!(!devices.is_empty(), "no devices to publish the ingest burst");
    // The burst starts from a store that has digested the series before it.
    crate::server::wait_until_idle(ctx.pid, Duration::from_secs(120)).await;
    let conns = ingest_mqtt::connect_devices(target, devices).await?;
    let payload = ingest_mqtt::payloads(devices.iter().map(|d| d.id.clone()).collect());
    let pace = mqtt_load::Pace {
        rate: burst.rate,
        warmup: Duration::ZERO,
        duration: burst.duration(),
        drain: Duration::from_secs(30),
    };
    let telemetry = tokio::spawn(mqtt_load::drive(conns, payload, pace));
    // `drive` starts publishing `mqtt_load::START_DELAY` after it is called.
    tokio::time::sleep(mqtt_load::START_DELAY + pace.duration).await;
    let series = round_trips(
        ctx,
        device,
        context,
        BURST_VARIANT.to_owned(),
        Series::Count(burst.controls),
    )
    .await;
    let outcome = telemetry.await??;
    let (mut measurement, sent) = series?;
    measurement.note = Some(format!(
        "after {} events published at {} msg/s by {} devices ({} acknowledged, {} still owed when publishing stopped); {}",
        thousands(outcome.sent as f64),
        thousands(burst.rate),
        outcome.connections,
        thousands(outcome.acked as f64),
        thousands(outcome.unacked_at_end as f64),
        measurement.note.take().unwrap_or_default()
    ));
    Ok((measurement, sent, outcome))
}

/// One control at a time until `series` ends; returns the measurement and how many controls
/// were sent (warm-up included).
async fn round_trips(
    ctx: &Ctx<'_>,
    device: &mut DeviceConn,
    context: &str,
    variant: String,
    series: Series,
) -> anyhow::Result<(Measurement, u64)> {
    let mut http = Conn::connect(ctx.target.addr).await?;
    let path = format!("/api/v1/devices/{}/shadows", device.id);
    let body = Bytes::from(
        json!({"needack": true, "contextId": context,
               "payload": {"attrs": [{"code": CONTROL_ATTRIBUTE, "value": 21.5, "channel": "m"}]}})
        .to_string(),
    );
    let mut round_trip = histogram(3);
    let mut delivery = histogram(3);
    let meter = UsageMeter::start(ctx.pid, ctx.local_postgres);
    let started = Instant::now();
    let (measure_from, end, count) = match series {
        Series::Timed => (
            started + ctx.warmup,
            Some(started + ctx.warmup + ctx.duration),
            u64::MAX,
        ),
        Series::Count(count) => (started, None, count),
    };
    let (mut sent, mut measured) = (0u64, 0u64);
    while sent < count && end.is_none_or(|end| Instant::now() < end) {
        let t0 = Instant::now();
        let request = ctx.target.request(Method::PUT, &path, Some(body.clone()));
        let (answer, control) = tokio::time::timeout(STEP_TIMEOUT, async {
            tokio::join!(http.send(request), async {
                let control = device.next_control().await;
                (control, Instant::now())
            })
        })
        .await
        .context("no control reached the device in 10 s")?;
        let (status, text) = answer?;
        if !status.is_success() {
            bail!("PUT {path} answered {status}: {}", String::from_utf8_lossy(&text));
        }
        sent += 1;
        let (control, delivered) = control;
        let control = control?;
        tokio::time::timeout(STEP_TIMEOUT, device.ack(&control))
            .await
            .context("no PUBACK for the ack in 10 s")??;
        let done = Instant::now();
        if t0 >= measure_from {
            measured += 1;
            let _ = round_trip.record((done - t0).as_micros().max(1) as u64);
            let _ = delivery.record((delivered - t0).as_micros().max(1) as u64);
        }
    }
    let usage = meter.finish().await;
    let wall = started.elapsed();
    let measured_for = match series {
        Series::Timed => ctx.duration,
        Series::Count(_) => wall,
    };
    let mut m = Measurement::new(
        SCENARIO,
        variant,
        1,
        measured as f64 / measured_for.as_secs_f64().max(f64::EPSILON),
        measured,
        0,
        summarize(&round_trip),
        usage,
        sent,
        wall,
    );
    let d = summarize(&delivery);
    m.note = Some(format!(
        "PUT → control on the device: p50 {:.2} ms, p99 {:.2} ms",
        d.p50_ms, d.p99_ms
    ));
    m.log();
    Ok((m, sent))
}

/// Control logs (DeviceControll) of this run's context that read completed.
async fn completed_logs(api: &Api, project_id: &str, context: &str) -> anyhow::Result<u64> {
    let mut completed = 0;
    for page in 1.. {
        let result = api
            .get(&format!(
                "/api/v1/projects/{project_id}/eventLogs?contextId={context}&pageSize=1000&pageNo={page}"
            ))
            .await?;
        let logs = result["results"].as_array().cloned().unwrap_or_default();
        completed += logs
            .iter()
            .filter(|l| l["classification"] == "DeviceControll" && l["status"] == "completed")
            .count() as u64;
        let total = result["totalResults"].as_u64().unwrap_or(0);
        if logs.is_empty() || page * 1000 >= total {
            break;
        }
    }
    Ok(completed)
}
