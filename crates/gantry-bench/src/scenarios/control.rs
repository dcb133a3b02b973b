//! Control round trip: `PUT /devices/{id}/shadows` with needack → the device, connected over MQTT,
//! receives the control on its inbox → it publishes an ack → Gantry marks the event log completed
//! and only then sends the ack's PUBACK. The round trip runs from the PUT to that PUBACK, both
//! read by this process, so one clock measures it. One device, one control at a time: idle, then
//! again while other devices publish telemetry at a paced rate (the background load of
//! `ingest-mqtt`). Afterwards every control's event log is read back through the API.

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
use crate::http::{Api, Conn};
use crate::load::{histogram, summarize};
use crate::mqtt::{Reader, Writer};
use crate::mqtt_load::{self, Outcome};
use crate::seed::{CONTROL_ATTRIBUTE, DeviceRef};
use crate::server::UsageMeter;

pub const SCENARIO: &str = "control";
pub const IDLE_VARIANT: &str = "PUT shadows → device → ack → completed, idle";
pub const LOADED_PREFIX: &str = "PUT shadows → device → ack → completed, under";
/// No round trip takes this long unless something is broken.
const STEP_TIMEOUT: Duration = Duration::from_secs(10);

#[derive(Debug, Clone, Serialize)]
pub struct ControlCheck {
    /// Controls sent (PUT answered 200) over both runs.
    pub sent: u64,
    /// Of them, event logs the API lists as completed afterwards.
    pub completed: u64,
    pub matches: bool,
    /// The telemetry published meanwhile in the loaded run.
    pub background: Option<Outcome>,
}

pub struct ControlOutcome {
    pub measurements: Vec<Measurement>,
    pub check: ControlCheck,
}

/// `device` takes the controls; `background` devices publish `background_rate` messages/s of
/// telemetry during the second run.
pub async fn run(
    ctx: &Ctx<'_>,
    target: &MqttTarget,
    project_id: &str,
    device: &DeviceRef,
    background: &[DeviceRef],
    background_rate: f64,
    tag: &str,
) -> anyhow::Result<ControlOutcome> {
    let context = format!("bench-{tag}-control");
    let mut device_conn = DeviceConn::connect(target, device).await?;
    let mut measurements = Vec::new();

    let (idle, idle_sent) = round_trips(ctx, &mut device_conn, &context, IDLE_VARIANT.to_owned()).await?;
    measurements.push(idle);

    let mut background_outcome = None;
    let mut loaded_sent = 0;
    if !background.is_empty() && background_rate > 0.0 {
        let conns = ingest_mqtt::connect_devices(target, background).await?;
        let payload = ingest_mqtt::payloads(background.iter().map(|d| d.id.clone()).collect());
        // The telemetry runs a little longer than the round trips on both sides, so every
        // round trip is measured under it.
        let pace = mqtt_load::Pace {
            rate: background_rate,
            warmup: ctx.warmup,
            duration: ctx.warmup + ctx.duration + Duration::from_millis(500),
            drain: Duration::from_secs(10),
        };
        let telemetry = tokio::spawn(mqtt_load::drive(conns, payload, pace));
        tokio::time::sleep(ctx.warmup + Duration::from_millis(100)).await;
        let variant = format!(
            "{LOADED_PREFIX} {} msg/s of telemetry",
            crate::format::thousands(background_rate)
        );
        let loaded = round_trips(ctx, &mut device_conn, &context, variant).await;
        let outcome = telemetry.await??;
        let (mut loaded, sent) = loaded?;
        loaded.note = Some(format!(
            "telemetry from {} devices: {:.0} msg/s acknowledged, p99 {:.1} ms",
            outcome.connections,
            outcome.acked_per_second(),
            outcome.latency.p99_ms
        ));
        loaded_sent = sent;
        measurements.push(loaded);
        background_outcome = Some(outcome);
    }
    device_conn.writer.disconnect().await;

    let sent = idle_sent + loaded_sent;
    let completed = completed_logs(ctx.api, project_id, &context).await?;
    eprintln!("  {SCENARIO}: {sent} controls sent, {completed} event logs completed");
    Ok(ControlOutcome {
        measurements,
        check: ControlCheck {
            sent,
            completed,
            matches: completed == sent,
            background: background_outcome,
        },
    })
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

/// One control at a time for the warm-up and the measured duration; returns the measurement and
/// how many controls were sent (warm-up included).
async fn round_trips(
    ctx: &Ctx<'_>,
    device: &mut DeviceConn,
    context: &str,
    variant: String,
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
    let measure_from = started + ctx.warmup;
    let end = measure_from + ctx.duration;
    let (mut sent, mut measured) = (0u64, 0u64);
    while Instant::now() < end {
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
    let mut m = Measurement::new(
        SCENARIO,
        variant,
        1,
        measured as f64 / ctx.duration.as_secs_f64(),
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
