//! MQTT ingest: N devices, each logged in with its own token, publish one-reading messages at QoS 1
//! on a paced schedule (see `mqtt_load`). Gantry sends a PUBACK only once the message's events are
//! committed, so publish→PUBACK is publish→committed. Afterwards the events are counted back
//! through the API: "stored" is what the store holds, not what the client saw.
//!
//! The baseline, in the same run: the same devices' load through a plain Mosquitto (nothing
//! stored, no authentication) to one bare subscriber that acknowledges everything: the broker
//! ceiling on this machine.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use rumqttc::mqttbytes::QoS;
use rumqttc::mqttbytes::v4::Packet;
use serde::Serialize;

use super::ingest_rest::count_events;
use super::{Ctx, Measurement};
use crate::mqtt::{self, Reader, Writer};
use crate::mqtt_load::{self, Connected, Outcome, Pace, PayloadFn, Publisher};
use crate::seed::DeviceRef;
use crate::server::{UsageMeter, pid_of};

pub const SCENARIO: &str = "ingest-mqtt";
pub const VARIANT: &str = "QoS 1 publish → PUBACK (after commit)";
pub const MOSQUITTO_VARIANT: &str = "plain Mosquitto → bare subscriber";
/// The rate the issue asks of the embedded default (SQLite), and of a store it does not name.
pub const EMBEDDED_FLOOR: f64 = 25_000.0;
/// The rate the issue asks of PostgreSQL (10,000 events/s; the embedded default's is 25,000, the
/// full run's rate offered). A run on PostgreSQL offered more is also measured at this rate, and
/// PostgreSQL's MQTT targets are checked there.
pub const POSTGRES_FLOOR: f64 = 10_000.0;
/// Ingest runs this many times the other measurements' duration, as ingest-rest does.
pub const DURATION_FACTOR: u32 = 3;
/// Connections opened at a time before the clock starts.
const CONNECT_PARALLEL: usize = 32;

/// Where and how hard the scenario publishes.
#[derive(Clone)]
pub struct MqttTarget {
    /// Gantry's MQTT listener.
    pub addr: SocketAddr,
    /// Gantry's topic prefix.
    pub prefix: String,
    /// The plain Mosquitto of the baseline, if one is to be measured.
    pub mosquitto: Option<SocketAddr>,
    /// Connect over TLS (`addr` is then Gantry's MQTT/TLS listener).
    pub tls: Option<tokio_rustls::TlsConnector>,
}

impl MqttTarget {
    /// Where device `id` publishes.
    pub fn upstream(&self, id: &str) -> String {
        format!("{}/in/json/{id}", self.prefix)
    }

    /// Where device `id` receives controls.
    pub fn inbox(&self, id: &str) -> String {
        format!("{}/out/json/{id}", self.prefix)
    }

    pub fn endpoint(&self) -> mqtt::Endpoint {
        mqtt::Endpoint {
            addr: self.addr,
            tls: self.tls.clone(),
        }
    }

    /// The device logged in with its own token and subscribed to its inbox, as a real device
    /// starts.
    pub async fn connect_device(&self, device: &DeviceRef) -> anyhow::Result<(Reader, Writer)> {
        let (mut reader, mut writer) =
            mqtt::connect(&self.endpoint(), &device.id, Some((&device.id, &device.token))).await?;
        mqtt::subscribe(&mut reader, &mut writer, &self.inbox(&device.id)).await?;
        Ok((reader, writer))
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct MqttIngestCheck {
    pub gantry: Outcome,
    /// Events the API lists on the publishing devices afterwards (one event per message).
    pub stored: u64,
    /// Every acknowledged message left its event in the store.
    pub every_ack_stored: bool,
    /// `stored` over the time from the first publish to the last PUBACK.
    pub stored_per_second: f64,
    pub mosquitto: Option<MosquittoBaseline>,
    /// Why there is no baseline, when there is none.
    pub mosquitto_skipped: Option<String>,
}

#[derive(Debug, Clone, Serialize)]
pub struct MosquittoBaseline {
    pub addr: String,
    pub publishers: Outcome,
    /// Messages the bare subscriber received.
    pub delivered: u64,
    pub delivered_per_second: f64,
}

pub struct MqttIngestOutcome {
    pub measurements: Vec<Measurement>,
    pub check: MqttIngestCheck,
}

/// The body of a device's `seq`-th message: one Float reading, `meta.id` a fresh UUID.
pub fn message_body(device_id: &str, seq: u64) -> Vec<u8> {
    format!(
        r#"{{"meta":{{"id":"{}","type":"m","deviceid":"{device_id}","version":"1.0"}},"payload":{{"attrs":[{{"code":"temp","value":{:.1},"channel":"m"}}]}}}}"#,
        uuid::Uuid::now_v7(),
        (seq % 500) as f64 / 10.0
    )
    .into_bytes()
}

/// Publisher `i` sends `message_body(ids[i], seq)`.
pub fn payloads(ids: Vec<String>) -> PayloadFn {
    Arc::new(move |i, seq| message_body(&ids[i], seq))
}

/// The devices logged in with their own tokens, ready to publish to their upstream topics.
pub async fn connect_devices(target: &MqttTarget, devices: &[DeviceRef]) -> anyhow::Result<Vec<Connected>> {
    let publishers: Vec<Publisher> = devices
        .iter()
        .map(|d| Publisher {
            client_id: d.id.clone(),
            login: Some((d.id.clone(), d.token.clone())),
            topic: target.upstream(&d.id),
        })
        .collect();
    mqtt_load::connect_all(&target.endpoint(), &publishers, CONNECT_PARALLEL).await
}

pub fn pace(ctx: &Ctx<'_>, rate: f64) -> Pace {
    let duration = ctx.duration * DURATION_FACTOR;
    Pace {
        rate,
        warmup: ctx.warmup,
        duration,
        // A server that keeps up drains in well under a second; one that does not has shown it.
        drain: duration.max(Duration::from_secs(10)),
    }
}

pub async fn run(
    ctx: &Ctx<'_>,
    target: &MqttTarget,
    devices: &[DeviceRef],
    rate: f64,
    tag: &str,
) -> anyhow::Result<MqttIngestOutcome> {
    anyhow::ensure!(!devices.is_empty(), "no devices to publish for");
    let pace = pace(ctx, rate);
    let ids: Vec<String> = devices.iter().map(|d| d.id.clone()).collect();
    let mut measurements = Vec::new();

    let (mosquitto, mosquitto_skipped) = match target.mosquitto {
        None => (None, Some("no Mosquitto given".to_owned())),
        Some(addr) => match baseline(addr, &ids, pace, tag).await {
            Ok((baseline, m)) => {
                measurements.push(m);
                (Some(baseline), None)
            }
            Err(e) => {
                eprintln!("  {SCENARIO}: no Mosquitto baseline: {e:#}");
                (None, Some(format!("{e:#}")))
            }
        },
    };

    let before = count_events(ctx.api, devices).await?;
    let conns = connect_devices(target, devices).await?;
    let meter = UsageMeter::start(ctx.pid, ctx.local_postgres);
    let outcome = mqtt_load::drive(conns, payloads(ids), pace).await?;
    let usage = meter.finish().await;
    let counted = Instant::now();
    let stored = count_events(ctx.api, devices).await?.saturating_sub(before);
    let stored_per_second = stored as f64 / outcome.active_seconds.max(f64::EPSILON);
    eprintln!(
        "  {SCENARIO}: {} published, {} acknowledged, {stored} stored (counted in {:.1} s)",
        outcome.sent,
        outcome.acked,
        counted.elapsed().as_secs_f64()
    );
    let mut m = Measurement::new(
        SCENARIO,
        match target.tls {
            None => variant(rate),
            Some(_) => tls_variant(rate),
        },
        outcome.connections,
        stored_per_second,
        outcome.measured_acked,
        outcome.unacked_after_drain,
        outcome.latency,
        usage,
        outcome.acked,
        Duration::from_secs_f64(outcome.active_seconds),
    );
    m.baseline_ratio = mosquitto
        .as_ref()
        .filter(|b| b.delivered_per_second > 0.0)
        .map(|b| stored_per_second / b.delivered_per_second);
    m.note = Some(rate_note(&outcome, "stored"));
    m.log();
    measurements.push(m);
    Ok(MqttIngestOutcome {
        measurements,
        check: MqttIngestCheck {
            every_ack_stored: stored >= outcome.acked,
            gantry: outcome,
            stored,
            stored_per_second,
            mosquitto,
            mosquitto_skipped,
        },
    })
}

/// The measurement's variant at `rate` offered.
pub fn variant(rate: f64) -> String {
    format!("{VARIANT}, {} msg/s offered", crate::format::thousands(rate))
}

/// The measurement's variant over MQTT/TLS at `rate` offered.
pub fn tls_variant(rate: f64) -> String {
    format!("{VARIANT} over TLS, {} msg/s offered", crate::format::thousands(rate))
}

/// Events/s is over the whole run (first publish to last PUBACK); the note says what else to
/// read off it.
fn rate_note(o: &Outcome, counted: &str) -> String {
    format!(
        "{counted}/s over {:.1} s from first publish to last PUBACK; {} unacknowledged when publishing stopped, drained in {:.1} s",
        o.active_seconds, o.unacked_at_end, o.drain_seconds
    )
}

/// The same publishers and schedule against a plain Mosquitto, with one subscriber taking
/// everything at QoS 1.
async fn baseline(
    addr: SocketAddr,
    ids: &[String],
    pace: Pace,
    tag: &str,
) -> anyhow::Result<(MosquittoBaseline, Measurement)> {
    let prefix = format!("bench-{tag}");
    let delivered = Arc::new(AtomicU64::new(0));
    let subscriber = bare_subscriber(
        addr,
        &format!("{prefix}/in/json/+"),
        &format!("{prefix}-sub"),
        delivered.clone(),
    )
    .await?;
    let publishers: Vec<Publisher> = ids
        .iter()
        .map(|id| Publisher {
            client_id: format!("{prefix}-{id}"),
            login: None,
            topic: format!("{prefix}/in/json/{id}"),
        })
        .collect();
    let conns = mqtt_load::connect_all(&addr.into(), &publishers, CONNECT_PARALLEL).await?;
    let meter = UsageMeter::start(pid_of("mosquitto"), false);
    let outcome = mqtt_load::drive(conns, payloads(ids.to_vec()), pace).await;
    // The subscriber may still be reading what the broker forwarded last.
    let mut last = u64::MAX;
    while let Ok(o) = &outcome {
        let now = delivered.load(Ordering::Relaxed);
        if now >= o.acked || now == last {
            break;
        }
        last = now;
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    subscriber.abort();
    let usage = meter.finish().await;
    let outcome = outcome?;
    let delivered = delivered.load(Ordering::Relaxed);
    let delivered_per_second = delivered as f64 / outcome.active_seconds.max(f64::EPSILON);
    let mut m = Measurement::new(
        SCENARIO,
        format!(
            "{MOSQUITTO_VARIANT}, {} msg/s offered",
            crate::format::thousands(pace.rate)
        ),
        outcome.connections,
        delivered_per_second,
        outcome.measured_acked,
        outcome.unacked_after_drain + outcome.acked.saturating_sub(delivered),
        outcome.latency,
        usage,
        outcome.acked,
        Duration::from_secs_f64(outcome.active_seconds),
    );
    m.note = Some(format!("server = mosquitto; {}", rate_note(&outcome, "delivered")));
    m.log();
    Ok((
        MosquittoBaseline {
            addr: addr.to_string(),
            publishers: outcome,
            delivered,
            delivered_per_second,
        },
        m,
    ))
}

/// Subscribes to `filter` at QoS 1 and counts what arrives, acknowledging each burst in one write.
async fn bare_subscriber(
    addr: SocketAddr,
    filter: &str,
    client_id: &str,
    delivered: Arc<AtomicU64>,
) -> anyhow::Result<tokio::task::JoinHandle<()>> {
    let (mut reader, mut writer) = mqtt::connect(&addr.into(), client_id, None).await?;
    mqtt::subscribe(&mut reader, &mut writer, filter).await?;
    Ok(tokio::spawn(async move {
        let mut acks = Vec::new();
        loop {
            let Ok(first) = reader.next().await else { return };
            let mut packet = Some(first);
            while let Some(p) = packet {
                if let Packet::Publish(publish) = p {
                    delivered.fetch_add(1, Ordering::Relaxed);
                    if publish.qos != QoS::AtMostOnce {
                        acks.push(publish.pkid);
                    }
                }
                packet = reader.buffered().ok().flatten();
            }
            if !acks.is_empty() && writer.pubacks(&acks).await.is_err() {
                return;
            }
            acks.clear();
        }
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use gantry_core::message::Message;

    #[test]
    fn messages_are_the_contract_shape() {
        let body = message_body("d-1", 7);
        let message: Message = serde_json::from_slice(&body).unwrap();
        assert_eq!(message.meta.deviceid.as_deref(), Some("d-1"));
        assert_eq!(message.payload.attrs.len(), 1);
        assert_eq!(message.payload.attrs[0].code, "temp");
        assert_eq!(message.payload.attrs[0].value, serde_json::json!(0.7));
        uuid::Uuid::parse_str(&message.meta.id).unwrap();
    }
}
