//! The closed-loop load driver: N workers, each on its own keep-alive connection, each sending the
//! next request when the previous one is answered, for a warm-up and then a fixed measured
//! duration. Every latency of the measured part goes into an HDR histogram for the whole run and
//! one per second (for the over-time chart). Workers record into their own histograms and the
//! driver merges them at the end, so no lock is taken per request.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use hdrhistogram::Histogram;
use http_body_util::Full;
use hyper::Request;
use serde::Serialize;

use crate::http::{Conn, Target};

/// Latencies are recorded in microseconds, from 1 µs to 60 s.
const MAX_LATENCY_US: u64 = 60_000_000;
/// A request unanswered this long counts as lost, and its worker reconnects.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(60);

/// The request a worker sends next, given its index and its own sequence number.
pub type RequestFn = Arc<dyn Fn(usize, u64) -> Request<Full<Bytes>> + Send + Sync>;

#[derive(Debug, Clone, Copy)]
pub struct LoadSpec {
    pub connections: usize,
    pub warmup: Duration,
    pub duration: Duration,
}

/// What a run measured. Counts of the measured part are for requests *sent* inside it.
pub struct LoadResult {
    /// Every answer of the measured part, successful or not, in µs.
    pub latency: Histogram<u64>,
    /// The same, per second of the measured part.
    pub windows: Vec<Histogram<u64>>,
    /// 2xx answers in the measured part.
    pub ok: u64,
    /// 2xx answers including the warm-up: what the server must have done (stored, for ingest).
    pub ok_total: u64,
    /// Non-2xx answers in the measured part, by status.
    pub failed: BTreeMap<u16, u64>,
    /// Requests that got no answer (connection lost), over the whole run.
    pub transport_errors: u64,
    /// Every answer including the warm-up: what the server worked for.
    pub answered_total: u64,
    pub measured: Duration,
    /// Warm-up and measured part, until the last answer.
    pub wall: Duration,
}

impl LoadResult {
    pub fn ok_per_second(&self) -> f64 {
        per_second(self.ok, self.measured)
    }

    pub fn failed_total(&self) -> u64 {
        self.failed.values().sum::<u64>() + self.transport_errors
    }
}

struct WorkerStats {
    latency: Histogram<u64>,
    windows: Vec<Histogram<u64>>,
    ok: u64,
    ok_total: u64,
    failed: BTreeMap<u16, u64>,
    transport_errors: u64,
    answered_total: u64,
}

pub fn histogram(sigfig: u8) -> Histogram<u64> {
    Histogram::new_with_bounds(1, MAX_LATENCY_US, sigfig).expect("valid histogram bounds")
}

/// Runs the load and returns the merged measurements. All connections are opened before the
/// clock starts, so connection setup is not part of any latency.
pub async fn run(target: &Target, spec: LoadSpec, make: RequestFn) -> anyhow::Result<LoadResult> {
    let conns = futures::future::try_join_all((0..spec.connections).map(|_| Conn::connect(target.addr))).await?;
    let start = Instant::now();
    let measure_from = start + spec.warmup;
    let end = measure_from + spec.duration;
    let workers: Vec<_> = conns
        .into_iter()
        .enumerate()
        .map(|(index, conn)| {
            let make = make.clone();
            let addr = target.addr;
            tokio::spawn(worker(index, conn, addr, make, measure_from, end))
        })
        .collect();
    let mut merged = LoadResult {
        latency: histogram(3),
        windows: Vec::new(),
        ok: 0,
        ok_total: 0,
        failed: BTreeMap::new(),
        transport_errors: 0,
        answered_total: 0,
        measured: spec.duration,
        wall: Duration::ZERO,
    };
    for handle in workers {
        let stats = handle.await?;
        merged.latency.add(&stats.latency)?;
        for (i, window) in stats.windows.iter().enumerate() {
            if merged.windows.len() <= i {
                merged.windows.push(histogram(2));
            }
            merged.windows[i].add(window)?;
        }
        merged.ok += stats.ok;
        merged.ok_total += stats.ok_total;
        for (status, n) in stats.failed {
            *merged.failed.entry(status).or_default() += n;
        }
        merged.transport_errors += stats.transport_errors;
        merged.answered_total += stats.answered_total;
    }
    merged.wall = start.elapsed();
    Ok(merged)
}

async fn worker(
    index: usize,
    mut conn: Conn,
    addr: std::net::SocketAddr,
    make: RequestFn,
    measure_from: Instant,
    end: Instant,
) -> WorkerStats {
    let mut stats = WorkerStats {
        latency: histogram(3),
        windows: Vec::new(),
        ok: 0,
        ok_total: 0,
        failed: BTreeMap::new(),
        transport_errors: 0,
        answered_total: 0,
    };
    let mut seq = 0u64;
    loop {
        // Built before the clock starts: the request's construction is the client's cost, not
        // the server's latency.
        let request = make(index, seq);
        seq += 1;
        let sent = Instant::now();
        if sent >= end {
            break;
        }
        match tokio::time::timeout(REQUEST_TIMEOUT, conn.send(request))
            .await
            .unwrap_or_else(|_| Err(anyhow::anyhow!("no answer within {REQUEST_TIMEOUT:?}")))
        {
            Ok((status, _body)) => {
                let micros = u64::try_from(sent.elapsed().as_micros()).unwrap_or(u64::MAX).max(1);
                let ok = status.is_success();
                stats.ok_total += u64::from(ok);
                stats.answered_total += 1;
                if sent >= measure_from {
                    stats.latency.saturating_record(micros);
                    let second = (sent - measure_from).as_secs() as usize;
                    while stats.windows.len() <= second {
                        stats.windows.push(histogram(2));
                    }
                    stats.windows[second].saturating_record(micros);
                    if ok {
                        stats.ok += 1;
                    } else {
                        *stats.failed.entry(status.as_u16()).or_default() += 1;
                    }
                }
            }
            Err(_) => {
                stats.transport_errors += 1;
                match reconnect(addr, end).await {
                    Some(fresh) => conn = fresh,
                    None => break,
                }
            }
        }
    }
    stats
}

/// A new connection, retried until `end`.
async fn reconnect(addr: std::net::SocketAddr, end: Instant) -> Option<Conn> {
    while Instant::now() < end {
        if let Ok(conn) = Conn::connect(addr).await {
            return Some(conn);
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    None
}

pub fn per_second(count: u64, over: Duration) -> f64 {
    if over.is_zero() {
        0.0
    } else {
        count as f64 / over.as_secs_f64()
    }
}

/// Percentiles of a run, in milliseconds.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Latency {
    pub p50_ms: f64,
    pub p90_ms: f64,
    pub p99_ms: f64,
    pub p999_ms: f64,
    pub max_ms: f64,
    pub mean_ms: f64,
}

fn ms(micros: u64) -> f64 {
    micros as f64 / 1000.0
}

pub fn summarize(h: &Histogram<u64>) -> Latency {
    if h.is_empty() {
        return Latency {
            p50_ms: 0.0,
            p90_ms: 0.0,
            p99_ms: 0.0,
            p999_ms: 0.0,
            max_ms: 0.0,
            mean_ms: 0.0,
        };
    }
    Latency {
        p50_ms: ms(h.value_at_quantile(0.50)),
        p90_ms: ms(h.value_at_quantile(0.90)),
        p99_ms: ms(h.value_at_quantile(0.99)),
        p999_ms: ms(h.value_at_quantile(0.999)),
        max_ms: ms(h.max()),
        mean_ms: h.mean() / 1000.0,
    }
}

/// One second of a run, for the over-time chart.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct WindowPoint {
    /// Seconds since the measured part began.
    pub second: usize,
    /// Answers to requests sent in that second.
    pub answers: u64,
    pub p50_ms: f64,
    pub p99_ms: f64,
}

pub fn timeline(windows: &[Histogram<u64>]) -> Vec<WindowPoint> {
    windows
        .iter()
        .enumerate()
        .map(|(second, h)| {
            let latency = summarize(h);
            WindowPoint {
                second,
                answers: h.len(),
                p50_ms: latency.p50_ms,
                p99_ms: latency.p99_ms,
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_in_milliseconds() {
        let mut h = histogram(3);
        for micros in 1..=1000u64 {
            h.record(micros * 100).unwrap(); // 0.1 ms .. 100 ms, evenly
        }
        let l = summarize(&h);
        assert!((l.p50_ms - 50.0).abs() < 0.1, "{l:?}");
        assert!((l.p99_ms - 99.0).abs() < 0.1, "{l:?}");
        assert!((l.max_ms - 100.0).abs() < 0.1, "{l:?}");
        assert!((l.mean_ms - 50.05).abs() < 0.1, "{l:?}");
    }

    #[test]
    fn an_empty_run_has_zero_latency() {
        assert_eq!(summarize(&histogram(3)).p99_ms, 0.0);
        assert_eq!(per_second(10, Duration::ZERO), 0.0);
        assert_eq!(per_second(10, Duration::from_millis(500)), 20.0);
    }

    #[test]
    fn timeline_has_one_point_per_window() {
        let mut a = histogram(2);
        a.record(1000).unwrap();
        a.record(3000).unwrap();
        let b = histogram(2);
        let points = timeline(&[a, b]);
        assert_eq!(points.len(), 2);
        assert_eq!(points[0].answers, 2);
        assert_eq!(points[1].answers, 0);
        assert_eq!(points[1].second, 1);
        assert!(points[0].p99_ms >= 2.9);
    }
}
