//! Held connections: as many devices as the open-file limit allows log in over MQTT, subscribe
//! to their inbox (what a real device does) and stay connected. The server's resident memory is
//! read before and after; the difference per connection is what a connection costs. At the end
//! every connection is asked for a PINGRESP, so "held" means answered, not merely opened.

use std::time::{Duration, Instant};

use futures::{StreamExt, TryStreamExt};
use rumqttc::mqttbytes::v4::Packet;
use serde::Serialize;

use super::ingest_mqtt::MqttTarget;
use crate::mqtt::{Reader, Writer};
use crate::seed::DeviceRef;
use crate::server::{kib_to_mib, sample};

pub const SCENARIO: &str = "connections";
/// Connections opened at a time.
const PARALLEL: usize = 64;
/// Descriptors each process keeps for everything but the held connections (store, listeners,
/// HTTP, logs).
pub const RESERVED_FILES: u64 = 1000;

#[derive(Debug, Clone, Serialize)]
pub struct ConnectionsResult {
    /// Connections asked for.
    pub target: usize,
    /// The soft open-file limit that bounded `target`, when known.
    pub open_file_limit: Option<u64>,
    /// Connections logged in, subscribed and answering a PINGREQ at the end.
    pub held: usize,
    pub connect_seconds: f64,
    pub connects_per_second: f64,
    /// Server RSS just after its start, before any request: the idle server.
    pub idle_rss_mib: Option<f64>,
    pub rss_before_mib: Option<f64>,
    pub rss_after_mib: Option<f64>,
    /// (after − before) / held.
    pub kib_per_connection: Option<f64>,
    /// The first failure, if the target was not reached.
    pub error: Option<String>,
}

/// How many connections to ask for: `wanted`, capped by the open-file limit less a reserve.
pub fn target(wanted: usize, open_file_limit: Option<u64>) -> usize {
    match open_file_limit {
        Some(limit) => wanted.min(limit.saturating_sub(RESERVED_FILES) as usize),
        None => wanted,
    }
}

pub async fn run(
    target: &MqttTarget,
    pid: Option<u32>,
    devices: &[DeviceRef],
    open_file_limit: Option<u64>,
    idle_rss_mib: Option<f64>,
) -> ConnectionsResult {
    let before = sample(pid);
    let started = Instant::now();
    let opened: Vec<anyhow::Result<(Reader, Writer)>> = futures::stream::iter(devices)
        .map(|d| target.connect_device(d))
        .buffer_unordered(PARALLEL)
        .collect()
        .await;
    let connect_seconds = started.elapsed().as_secs_f64();
    let mut error = None;
    let mut conns = Vec::with_capacity(opened.len());
    for result in opened {
        match result {
            Ok(conn) => conns.push(conn),
            Err(e) if error.is_none() => error = Some(format!("{e:#}")),
            Err(_) => {}
        }
    }
    eprintln!(
        "  {SCENARIO}: {} of {} connected in {connect_seconds:.1} s",
        conns.len(),
        devices.len()
    );
    // Let the server finish what the logins started before reading its memory.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let after = sample(pid);
    let held = match ping_all(&mut conns).await {
        Ok(n) => n,
        Err(e) => {
            error.get_or_insert_with(|| format!("{e:#}"));
            0
        }
    };
    let kib_per_connection = before
        .zip(after)
        .filter(|_| held > 0)
        .map(|(b, a)| (a.rss_kib as f64 - b.rss_kib as f64) / held as f64);
    eprintln!(
        "  {SCENARIO}: {held} held; server RSS {} → {} MiB, {} KiB per connection",
        before.map_or("?".to_owned(), |s| format!("{:.0}", kib_to_mib(s.rss_kib))),
        after.map_or("?".to_owned(), |s| format!("{:.0}", kib_to_mib(s.rss_kib))),
        kib_per_connection.map_or("?".to_owned(), |k| format!("{k:.1}")),
    );
    futures::stream::iter(conns)
        .for_each_concurrent(PARALLEL, |(_, writer)| writer.disconnect())
        .await;
    ConnectionsResult {
        target: devices.len(),
        open_file_limit,
        held,
        connect_seconds,
        connects_per_second: devices.len() as f64 / connect_seconds.max(f64::EPSILON),
        idle_rss_mib,
        rss_before_mib: before.map(|s| kib_to_mib(s.rss_kib)),
        rss_after_mib: after.map(|s| kib_to_mib(s.rss_kib)),
        kib_per_connection,
        error,
    }
}

/// PINGREQ on every connection, then a PINGRESP from each: how many answered.
async fn ping_all(conns: &mut [(Reader, Writer)]) -> anyhow::Result<usize> {
    futures::stream::iter(conns.iter_mut())
        .map(|(reader, writer)| async move {
            writer.send(&Packet::PingReq).await?;
            tokio::time::timeout(Duration::from_secs(30), async {
                loop {
                    if let Packet::PingResp = reader.next().await? {
                        return Ok::<_, anyhow::Error>(());
                    }
                }
            })
            .await??;
            Ok::<_, anyhow::Error>(())
        })
        .buffer_unordered(PARALLEL)
        .try_fold(0, |n, ()| async move { Ok(n + 1) })
        .await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_open_file_limit_caps_the_target() {
        assert_eq!(target(19_000, Some(20_000)), 19_000);
        assert_eq!(target(19_000, Some(4_096)), 3_096);
        assert_eq!(target(19_000, Some(500)), 0);
        assert_eq!(target(2_000, None), 2_000);
    }
}
