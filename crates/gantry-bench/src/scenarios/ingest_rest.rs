//! REST ingest: single-event `POST /api/v1/deviceEvents` from many devices, each with its own
//! token, round-robin, each answered only after its event is committed. Afterwards the events
//! are counted back through the API: "stored" is what the store holds, not what the client saw.

use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;
use futures::{StreamExt, TryStreamExt};
use hyper::Method;
use hyper::header::HeaderValue;
use serde::Serialize;

use super::{Ctx, Measurement, measure};
use crate::http::{Api, bearer};
use crate::load::{RequestFn, WindowPoint, timeline};
use crate::seed::DeviceRef;

pub const SCENARIO: &str = "ingest-rest";
pub const VARIANT: &str = "POST /deviceEvents (1 event)";
/// Ingest runs this many times the other measurements' duration: its behaviour over time (group
/// commits, WAL checkpoints, a growing table) is what the chart is for.
const DURATION_FACTOR: u32 = 3;

/// Did every 200 leave an event in the store?
#[derive(Debug, Clone, Serialize)]
pub struct IngestCheck {
    /// 200 answers, warm-up included.
    pub answered_ok: u64,
    /// Events the API lists on the ingest devices afterwards.
    pub stored: u64,
    pub matches: bool,
    /// Commits the server's ingest writer made during the run (from its /metrics).
    pub commits: Option<u64>,
    /// Events per commit: with N clients each waiting for its commit, at most N.
    pub events_per_commit: Option<f64>,
}

pub struct IngestOutcome {
    pub measurement: Measurement,
    pub timeline: Vec<WindowPoint>,
    pub check: IngestCheck,
}

pub async fn run(ctx: &Ctx<'_>, devices: &[DeviceRef]) -> anyhow::Result<IngestOutcome> {
    anyhow::ensure!(!devices.is_empty(), "no devices to post events for");
    let before = count_events(ctx.api, devices).await?;
    let make = posts(ctx, devices)?;
    let long = Ctx {
        duration: ctx.duration * DURATION_FACTOR,
        ..*ctx
    };
    let counters_before = ingest_counters(ctx.api).await;
    let (measurement, result) = measure(&long, SCENARIO, VARIANT, ctx.connections, make).await?;
    let counters_after = ingest_counters(ctx.api).await;
    let commits = counters_before.zip(counters_after).map(|((_, b0), (_, b1))| b1 - b0);
    let committed = counters_before.zip(counters_after).map(|((c0, _), (c1, _))| c1 - c0);
    let started = Instant::now();
    let stored = count_events(ctx.api, devices).await? - before;
    eprintln!(
        "  {SCENARIO}: {} answered 200, {stored} stored (counted in {:.1} s)",
        result.ok_total,
        started.elapsed().as_secs_f64()
    );
    Ok(IngestOutcome {
        measurement,
        timeline: timeline(&result.windows),
        check: IngestCheck {
            answered_ok: result.ok_total,
            stored,
            matches: stored == result.ok_total,
            commits,
            events_per_commit: committed
                .zip(commits)
                .filter(|(_, n)| *n > 0)
                .map(|(events, n)| events as f64 / n as f64),
        },
    })
}

/// One measurement of `posts` at the "many connections" count for another scenario's
/// `variant`, from an idle server (what the measurement before left to do is not counted).
pub async fn posted(
    ctx: &Ctx<'_>,
    scenario: &'static str,
    variant: &str,
    devices: &[DeviceRef],
) -> anyhow::Result<Measurement> {
    crate::server::wait_until_idle(ctx.pid, crate::server::SETTLE).await;
    let (measured, _) = measure(ctx, scenario, variant, ctx.connections, posts(ctx, devices)?).await?;
    Ok(measured)
}

/// One event per request, from `devices` in turn, each with its own token. Each device's values
/// ramp through 0.0 to 49.9 post by post, as over MQTT (`ingest_mqtt::message_body`): a
/// sensor's readings move, they do not jump across the alarm rules' bands at every post.
pub fn posts(ctx: &Ctx<'_>, devices: &[DeviceRef]) -> anyhow::Result<RequestFn> {
    let senders: Arc<Vec<(String, HeaderValue)>> = Arc::new(
        devices
            .iter()
            .map(|d| Ok((d.id.clone(), bearer(&d.token)?)))
            .collect::<anyhow::Result<_>>()?,
    );
    let target = ctx.target.clone();
    let connections = ctx.connections;
    Ok(Arc::new(move |worker, seq| {
        let post = seq as usize * connections + worker;
        let (id, token) = &senders[post % senders.len()];
        let reading = (post / senders.len()) as u64;
        let body = event_body(id, reading, gantry_core::time::now_ms());
        target.request_as(token, Method::POST, "/api/v1/deviceEvents", Some(Bytes::from(body)))
    }))
}

/// The body of one event: a device's `reading`-th reading, now.
pub fn event_body(device_id: &str, reading: u64, now_ms: i64) -> String {
    format!(
        r#"{{"deviceId":"{device_id}","attributeCode":"temp","attributeData":{:.1},"attributeDataType":"Float","deviceTime":"{}"}}"#,
        (reading % 500) as f64 / 10.0,
        gantry_core::time::format_timestamp(now_ms)
    )
}

/// `gantry_ingest_committed_total` and `gantry_ingest_batches_total` from /metrics; None when
/// the server does not export them.
async fn ingest_counters(api: &Api) -> Option<(u64, u64)> {
    let request = api.target.request(Method::GET, "/metrics", None);
    let (status, body) = api.send(request).await.ok()?;
    if !status.is_success() {
        return None;
    }
    let text = String::from_utf8_lossy(&body);
    Some((
        counter(&text, "gantry_ingest_committed_total")?,
        counter(&text, "gantry_ingest_batches_total")?,
    ))
}

/// The value of an unlabelled counter in Prometheus text.
pub fn counter(text: &str, name: &str) -> Option<u64> {
    text.lines()
        .filter(|line| !line.starts_with('#'))
        .find_map(|line| line.strip_prefix(name)?.strip_prefix(' '))
        .and_then(|value| value.trim().parse::<f64>().ok())
        .map(|value| value as u64)
}

/// The events the API lists for these devices, summed (`totalResults` of a one-row page each).
pub async fn count_events(api: &Api, devices: &[DeviceRef]) -> anyhow::Result<u64> {
    let totals: Vec<u64> = futures::stream::iter(devices)
        .map(|d| async move {
            let page = api.get(&format!("/api/v1/devices/{}/events?pageSize=1", d.id)).await?;
            Ok::<_, anyhow::Error>(page["totalResults"].as_u64().unwrap_or(0))
        })
        .buffer_unordered(8)
        .try_collect()
        .await?;
    Ok(totals.iter().sum())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prometheus_counters() {
        let text = "# HELP gantry_ingest_batches_total Commits.\n# TYPE gantry_ingest_batches_total counter\n\
                    gantry_ingest_batches_total 42\ngantry_ingest_batches_total_other 7\ngantry_ingest_committed_total 4200\n";
        assert_eq!(counter(text, "gantry_ingest_batches_total"), Some(42));
        assert_eq!(counter(text, "gantry_ingest_committed_total"), Some(4200));
        assert_eq!(counter(text, "gantry_missing"), None);
    }

    #[test]
    fn bodies_are_the_api_shape() {
        let body: serde_json::Value = serde_json::from_str(&event_body("d1", 7, 1_704_067_200_000)).unwrap();
        assert_eq!(body["deviceId"], "d1");
        assert_eq!(body["attributeData"], 0.7);
        assert_eq!(body["attributeDataType"], "Float");
        assert_eq!(body["deviceTime"], "2024-01-01T00:00:00.000+0000");
    }
}
