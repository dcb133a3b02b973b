//! The push stream under load: the ingest devices publish telemetry at a paced rate, first with
//! nobody following their project, then with `subscribers` Server-Sent-Events clients on it.
//! Each subscriber follows one device (`deviceId`), as a site dashboard per machine does, the
//! devices dealt round-robin, so every event is delivered to `subscribers / devices` clients,
//! not to every subscriber.
//!
//! Delivery latency runs from the event's `ingressTimeStamp` (the server's clock at arrival,
//! before the commit) to the subscriber reading it (this machine's clock, the same one); ingest
//! with subscribers is compared with ingest without them in the same run.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::{Context, bail};
use serde::Serialize;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::watch;

use super::ingest_mqtt::{self, MqttTarget};
use super::{Ctx, Measurement};
use crate::format::thousands;
use crate::load::{histogram, summarize};
use crate::mqtt_load;
use crate::seed::DeviceRef;
use crate::server::UsageMeter;

pub const SCENARIO: &str = "stream";
pub const ALONE_VARIANT: &str = "QoS 1 publish → PUBACK, nobody following";
pub const FOLLOWED_VARIANT: &str = "QoS 1 publish → PUBACK, followed by the subscribers";
pub const DELIVERY_VARIANT: &str = "arrival → SSE subscriber (one device each)";
/// Subscribers opened at a time.
const OPEN_PARALLEL: usize = 50;

/// The load: `subscribers` clients while the devices publish `rate` messages/s.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct StreamLoad {
    pub subscribers: usize,
    pub rate: f64,
}

impl StreamLoad {
    /// The load the issue sets the targets at.
    pub const FULL: StreamLoad = StreamLoad {
        subscribers: 1000,
        rate: 10_000.0,
    };
}

#[derive(Debug, Clone, Serialize)]
pub struct StreamCheck {
    pub load: StreamLoad,
    /// Events/s acknowledged (stored) without and with the subscribers.
    pub alone_per_second: f64,
    pub followed_per_second: f64,
    /// Deliveries expected (acknowledged events × the subscribers of their device) and read.
    pub expected: u64,
    pub delivered: u64,
    /// Subscribers whose stream ended or failed before the end.
    pub lost_subscribers: u64,
}

impl StreamCheck {
    /// Ingest with the subscribers over ingest without them.
    pub fn ingest_ratio(&self) -> f64 {
        self.followed_per_second / self.alone_per_second.max(f64::EPSILON)
    }
}

pub struct StreamOutcome {
    pub measurements: Vec<Measurement>,
    pub check: StreamCheck,
}

pub async fn run(
    ctx: &Ctx<'_>,
    target: &MqttTarget,
    project_id: &str,
    devices: &[DeviceRef],
    load: StreamLoad,
) -> anyhow::Result<StreamOutcome> {
    anyhow::ensure!(!devices.is_empty(), "no devices to publish for");
    let ids: Vec<String> = devices.iter().map(|d| d.id.clone()).collect();
    let pace = mqtt_load::Pace {
        rate: load.rate,
        warmup: ctx.warmup,
        duration: ctx.duration,
        drain: Duration::from_secs(10),
    };
    let mut measurements = Vec::new();

    // Nobody following: the project has no feed.
    let conns = ingest_mqtt::connect_devices(target, devices).await?;
    let meter = UsageMeter::start(ctx.pid, ctx.local_postgres);
    let alone = mqtt_load::drive(conns, ingest_mqtt::payloads(ids.clone()), pace).await?;
    measurements.push(publish_measurement(ALONE_VARIANT, &alone, meter.finish().await));

    // The subscribers, then the same load.
    let (stop, stopped) = watch::channel(false);
    let counters = Arc::new(Counters::default());
    let mut readers = Vec::with_capacity(load.subscribers);
    let paths: Vec<String> = (0..load.subscribers)
        .map(|i| {
            format!(
                "/api/v1/projects/{project_id}/stream?types=telemetry&deviceId={}",
                ids[i % ids.len()]
            )
        })
        .collect();
    for chunk in paths.chunks(OPEN_PARALLEL) {
        let opened = futures::future::try_join_all(chunk.iter().map(|path| open(ctx, path))).await?;
        for stream in opened {
            readers.push(tokio::spawn(follow(stream, counters.clone(), stopped.clone())));
        }
    }
    eprintln!(
        "  {SCENARIO}: {} subscribers following",
        thousands(readers.len() as f64)
    );
    let conns = ingest_mqtt::connect_devices(target, devices).await?;
    let meter = UsageMeter::start(ctx.pid, ctx.local_postgres);
    let measured_from = now_ms() + (mqtt_load::START_DELAY + ctx.warmup).as_millis() as i64;
    counters.measured_from.store(measured_from as u64, Ordering::Relaxed);
    let followed = mqtt_load::drive(conns, ingest_mqtt::payloads(ids.clone()), pace).await?;
    let usage = meter.finish().await;
    // What is owed to the subscribers: each acknowledged event once per subscriber of its
    // device (the devices publish in turn, so about evenly). Wait (a little) for the last.
    let expected = (followed.acked as f64 * load.subscribers as f64 / ids.len() as f64).round() as u64;
    let waited = tokio::time::Instant::now();
    while counters.delivered.load(Ordering::Relaxed) < expected && waited.elapsed() < Duration::from_secs(10) {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let _ = stop.send(true);
    let mut latencies = histogram(3);
    let mut lost = 0;
    for reader in readers {
        match reader.await? {
            Ok(seen) => {
                for us in seen {
                    latencies.saturating_record(us.max(1));
                }
            }
            Err(_) => lost += 1,
        }
    }
    measurements.push(publish_measurement(FOLLOWED_VARIANT, &followed, usage));
    let delivered = counters.delivered.load(Ordering::Relaxed);
    let measured_seconds = followed.measured_seconds.max(f64::EPSILON);
    let mut delivery = Measurement::new(
        SCENARIO,
        DELIVERY_VARIANT.to_owned(),
        load.subscribers,
        latencies.len() as f64 / measured_seconds,
        latencies.len(),
        expected.saturating_sub(delivered),
        summarize(&latencies),
        usage,
        delivered,
        Duration::from_secs_f64(followed.active_seconds),
    );
    delivery.note = Some(format!(
        "{} subscribers on {} devices at {} msg/s: {} of about {} deliveries read; ingest {:.2} × without them",
        thousands(load.subscribers as f64),
        thousands(ids.len() as f64),
        thousands(load.rate),
        thousands(delivered as f64),
        thousands(expected as f64),
        followed.acked_per_second() / alone.acked_per_second().max(f64::EPSILON)
    ));
    delivery.log();
    measurements.push(delivery);
    Ok(StreamOutcome {
        measurements,
        check: StreamCheck {
            load,
            alone_per_second: alone.acked_per_second(),
            followed_per_second: followed.acked_per_second(),
            expected,
            delivered,
            lost_subscribers: lost,
        },
    })
}

fn publish_measurement(variant: &str, outcome: &mqtt_load::Outcome, usage: crate::server::Usage) -> Measurement {
    let mut m = Measurement::of_acked(SCENARIO, variant.to_owned(), outcome, usage);
    m.note = Some(format!(
        "{} msg/s offered, {} acknowledged",
        thousands(outcome.offered_rate),
        thousands(outcome.acked as f64)
    ));
    m.log();
    m
}

#[derive(Default)]
struct Counters {
    delivered: AtomicU64,
    /// Epoch ms from which an event's delivery latency counts (after the warm-up).
    measured_from: AtomicU64,
}

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

/// A stream's connection, its response head read and accepted; `rest` holds what came after it.
struct Opened {
    socket: TcpStream,
    rest: Vec<u8>,
}

/// `GET path` as the administrator, up to the end of the response head.
async fn open(ctx: &Ctx<'_>, path: &str) -> anyhow::Result<Opened> {
    let mut socket = TcpStream::connect(ctx.target.addr).await?;
    socket.set_nodelay(true)?;
    let request = format!(
        "GET {path} HTTP/1.1\r\nHost: {}\r\nAuthorization: {}\r\nAccept: text/event-stream\r\n\r\n",
        ctx.target.host_str(),
        ctx.target.bearer_str()
    );
    socket.write_all(request.as_bytes()).await?;
    let mut head = Vec::new();
    let mut buf = [0u8; 4096];
    let end = loop {
        let n = socket.read(&mut buf).await?;
        if n == 0 {
            bail!("the stream closed before its head");
        }
        head.extend_from_slice(&buf[..n]);
        if let Some(end) = head.windows(4).position(|w| w == b"\r\n\r\n") {
            break end + 4;
        }
    };
    let status = std::str::from_utf8(&head[..end]).context("response head")?;
    if !status.starts_with("HTTP/1.1 200") {
        bail!("the stream answered {}", status.lines().next().unwrap_or_default());
    }
    Ok(Opened {
        socket,
        rest: head[end..].to_vec(),
    })
}

/// Reads a stream until `stopped`: counts the telemetry events and returns the delivery
/// latencies (µs) of those that arrived after the warm-up. The body is chunked; the events'
/// `data:` lines are found in the decoded bytes.
async fn follow(
    opened: Opened,
    counters: Arc<Counters>,
    mut stopped: watch::Receiver<bool>,
) -> anyhow::Result<Vec<u64>> {
    let Opened { mut socket, rest } = opened;
    let mut raw = rest;
    let mut body = Vec::new();
    let mut latencies = Vec::new();
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        decode_chunks(&mut raw, &mut body)?;
        while let Some(end) = body.windows(2).position(|w| w == b"\n\n") {
            let event: Vec<u8> = body.drain(..end + 2).collect();
            if let Some(ingress) = ingress_of(&event) {
                counters.delivered.fetch_add(1, Ordering::Relaxed);
                if ingress >= counters.measured_from.load(Ordering::Relaxed) as i64 {
                    latencies.push(((now_ms() - ingress).max(0) * 1000) as u64);
                }
            }
        }
        tokio::select! {
            read = socket.read(&mut buf) => match read? {
                0 => bail!("the server ended the stream"),
                n => raw.extend_from_slice(&buf[..n]),
            },
            _ = stopped.changed() => return Ok(latencies),
        }
    }
}

/// Moves the whole chunks of `raw` (HTTP/1.1 chunked coding) into `body`.
fn decode_chunks(raw: &mut Vec<u8>, body: &mut Vec<u8>) -> anyhow::Result<()> {
    loop {
        let Some(line_end) = raw.windows(2).position(|w| w == b"\r\n") else {
            return Ok(());
        };
        let size_text = std::str::from_utf8(&raw[..line_end])?;
        let size = usize::from_str_radix(size_text.split(';').next().unwrap_or("").trim(), 16)
            .with_context(|| format!("chunk size {size_text:?}"))?;
        if size == 0 {
            bail!("the server ended the stream");
        }
        let whole = line_end + 2 + size + 2;
        if raw.len() < whole {
            return Ok(());
        }
        body.extend_from_slice(&raw[line_end + 2..line_end + 2 + size]);
        raw.drain(..whole);
    }
}

/// The `ingressTimeStamp` of a telemetry event's data, without parsing the whole document.
fn ingress_of(event: &[u8]) -> Option<i64> {
    let text = std::str::from_utf8(event).ok()?;
    if !text.contains("event: telemetry") && !text.contains("event:telemetry") {
        return None;
    }
    let at = text.find("\"ingressTimeStamp\":")? + "\"ingressTimeStamp\":".len();
    let digits: String = text[at..].chars().take_while(|c| c.is_ascii_digit()).collect();
    digits.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunks_decode_across_reads() {
        let mut raw = b"19\r\nevent: telemetry\ndata: {\"".to_vec();
        let mut body = Vec::new();
        decode_chunks(&mut raw, &mut body).unwrap();
        assert!(body.is_empty() && !raw.is_empty(), "a chunk not yet whole stays");
        raw.extend_from_slice(b"\r\n");
        decode_chunks(&mut raw, &mut body).unwrap();
        assert_eq!(body, b"event: telemetry\ndata: {\"");
        assert!(raw.is_empty());
        let mut ended = b"0\r\n\r\n".to_vec();
        assert!(decode_chunks(&mut ended, &mut body).is_err());
    }

    #[test]
    fn the_arrival_time_of_telemetry() {
        let event = b"id: 7\nevent: telemetry\ndata: {\"id\":\"x\",\"ingressTimeStamp\":1714492800123,\"a\":1}\n\n";
        assert_eq!(ingress_of(event), Some(1_714_492_800_123));
        assert_eq!(ingress_of(b"event: shadow\ndata: {\"ingressTimeStamp\":1}\n\n"), None);
    }
}
