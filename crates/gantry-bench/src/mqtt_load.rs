//! Open-loop MQTT load: every connection publishes at QoS 1 on its own fixed schedule (the total
//! rate spread evenly over the connections and over time), whether or not earlier messages were
//! acknowledged yet, so a server that falls behind shows up as latency and backlog rather than as
//! a politely slower client. A publish's latency runs from the moment it was written to the moment
//! its PUBACK was read. After the publishing stops, the run waits (up to a limit) for the PUBACKs
//! still owed: that wait is the backlog's drain.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::{StreamExt, TryStreamExt};
use hdrhistogram::Histogram;
use rumqttc::mqttbytes::v4::Packet;
use serde::Serialize;
use tokio::time::MissedTickBehavior;

use crate::load::{Latency, histogram, summarize};
use crate::mqtt::{self, Reader, Writer};

/// Who publishes where.
#[derive(Debug, Clone)]
pub struct Publisher {
    pub client_id: String,
    /// Username and password; None for an anonymous broker.
    pub login: Option<(String, String)>,
    pub topic: String,
}

/// A connected publisher.
pub struct Connected {
    reader: Reader,
    writer: Writer,
    topic: String,
}

/// The body of the `seq`-th message of publisher `index`.
pub type PayloadFn = Arc<dyn Fn(usize, u64) -> Vec<u8> + Send + Sync>;

#[derive(Debug, Clone, Copy)]
pub struct Pace {
    /// Messages per second over all connections.
    pub rate: f64,
    pub warmup: Duration,
    pub duration: Duration,
    /// How long to wait for the PUBACKs still owed when the publishing stops.
    pub drain: Duration,
}

/// Opens every connection (`parallel` at a time) before any clock starts.
pub async fn connect_all(
    endpoint: &crate::mqtt::Endpoint,
    publishers: &[Publisher],
    parallel: usize,
) -> anyhow::Result<Vec<Connected>> {
    futures::stream::iter(publishers)
        .map(|p| async move {
            let login = p.login.as_ref().map(|(u, pw)| (u.as_str(), pw.as_str()));
            let (reader, writer) = mqtt::connect(endpoint, &p.client_id, login).await?;
            Ok::<_, anyhow::Error>(Connected {
                reader,
                writer,
                topic: p.topic.clone(),
            })
        })
        .buffered(parallel)
        .try_collect()
        .await
}

/// One second of the run (warm-up included), for the chart and the backlog.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct MqttWindow {
    /// Seconds since the first publish.
    pub second: usize,
    pub sent: u64,
    pub acked: u64,
    /// Published and not yet acknowledged at the end of this second.
    pub backlog: u64,
    /// Of the messages sent in this second.
    pub p50_ms: f64,
    pub p99_ms: f64,
}

/// What a run did. Counts cover the whole run unless they say "measured".
#[derive(Debug, Clone, Serialize)]
pub struct Outcome {
    pub offered_rate: f64,
    pub connections: usize,
    pub sent: u64,
    pub acked: u64,
    /// Messages sent in the measured part (after the warm-up) and acknowledged.
    pub measured_acked: u64,
    /// Latency of the messages sent in the measured part.
    pub latency: Latency,
    /// Published but unacknowledged when the publishing stopped.
    pub unacked_at_end: u64,
    /// Still unacknowledged when the drain wait ended (lost, or the server is that far behind).
    pub unacked_after_drain: u64,
    /// From the end of the publishing to the last PUBACK.
    pub drain_seconds: f64,
    /// From the first publish to the last PUBACK.
    pub active_seconds: f64,
    pub measured_seconds: f64,
    /// Connections the broker closed during the run.
    pub lost_connections: u64,
    pub windows: Vec<MqttWindow>,
}

impl Outcome {
    /// Acknowledged messages per second over the whole run.
    pub fn acked_per_second(&self) -> f64 {
        self.acked as f64 / self.active_seconds.max(f64::EPSILON)
    }

    /// The messages unacknowledged when publishing stopped, in seconds of the load offered.
    pub fn backlog_seconds(&self) -> f64 {
        self.unacked_at_end as f64 / self.offered_rate
    }
}

/// Shared by the connection tasks: one lock per event, uncontended almost always, instead of a
/// histogram per connection (a thousand 3-digit histograms would take hundreds of MiB).
struct AckTimings {
    start: Instant,
    measure_from: Instant,
    latency: Histogram<u64>,
    windows: Vec<(u64, u64, Histogram<u64>)>,
    sent: u64,
    acked: u64,
    measured_acked: u64,
    last_ack: Option<Instant>,
}

impl AckTimings {
    fn window(&mut self, at: Instant) -> &mut (u64, u64, Histogram<u64>) {
        let i = at.saturating_duration_since(self.start).as_secs() as usize;
        while self.windows.len() <= i {
            self.windows.push((0, 0, histogram(2)));
        }
        &mut self.windows[i]
    }

    fn sent(&mut self, at: Instant) {
        self.sent += 1;
        self.window(at).0 += 1;
    }

    fn acked(&mut self, sent: Instant, at: Instant) {
        let micros = (at - sent).as_micros().max(1) as u64;
        self.acked += 1;
        self.last_ack = Some(self.last_ack.map_or(at, |l| l.max(at)));
        self.window(at).1 += 1;
        let _ = self.window(sent).2.record(micros);
        if sent >= self.measure_from {
            self.measured_acked += 1;
            let _ = self.latency.record(micros);
        }
    }
}

struct Ends {
    start: Instant,
    end: Instant,
    drain_until: Instant,
    period: Duration,
}

/// How long after `drive` is called the publishing starts (every task spawned by then).
pub const START_DELAY: Duration = Duration::from_millis(100);

/// Publishes at `pace.rate` over all `conns`, then drains. Each connection is closed afterwards.
pub async fn drive(conns: Vec<Connected>, payload: PayloadFn, pace: Pace) -> anyhow::Result<Outcome> {
    anyhow::ensure!(!conns.is_empty(), "no connections to publish on");
    anyhow::ensure!(pace.rate > 0.0, "the rate must be positive");
    let n = conns.len();
    let start = Instant::now() + START_DELAY;
    let measure_from = start + pace.warmup;
    let end = measure_from + pace.duration;
    let ends = Arc::new(Ends {
        start,
        end,
        drain_until: end + pace.drain,
        period: Duration::from_secs_f64(n as f64 / pace.rate),
    });
    let collector = Arc::new(Mutex::new(AckTimings {
        start,
        measure_from,
        latency: histogram(3),
        windows: Vec::new(),
        sent: 0,
        acked: 0,
        measured_acked: 0,
        last_ack: None,
    }));
    let tasks: Vec<_> = conns
        .into_iter()
        .enumerate()
        .map(|(index, conn)| {
            tokio::spawn(publisher(
                index,
                n,
                conn,
                payload.clone(),
                ends.clone(),
                collector.clone(),
            ))
        })
        .collect();
    let mut unacked_at_end = 0;
    let mut unacked_after_drain = 0;
    let mut lost_connections = 0;
    for task in tasks {
        let ended = task.await?;
        unacked_at_end += ended.unacked_at_end;
        unacked_after_drain += ended.unacked_after_drain;
        lost_connections += u64::from(ended.lost);
    }
    let c = collector.lock().expect("collector");
    let last_ack = c.last_ack.unwrap_or(end);
    let mut backlog = 0u64;
    let windows = c
        .windows
        .iter()
        .enumerate()
        .map(|(second, (sent, acked, h))| {
            backlog = (backlog + sent).saturating_sub(*acked);
            let l = summarize(h);
            MqttWindow {
                second,
                sent: *sent,
                acked: *acked,
                backlog,
                p50_ms: l.p50_ms,
                p99_ms: l.p99_ms,
            }
        })
        .collect();
    Ok(Outcome {
        offered_rate: pace.rate,
        connections: n,
        sent: c.sent,
        acked: c.acked,
        measured_acked: c.measured_acked,
        latency: summarize(&c.latency),
        unacked_at_end,
        unacked_after_drain,
        drain_seconds: last_ack.saturating_duration_since(end).as_secs_f64(),
        active_seconds: last_ack.saturating_duration_since(start).as_secs_f64(),
        measured_seconds: pace.duration.as_secs_f64(),
        lost_connections,
        windows,
    })
}

struct Ended {
    unacked_at_end: u64,
    unacked_after_drain: u64,
    lost: bool,
}

async fn publisher(
    index: usize,
    n: usize,
    conn: Connected,
    payload: PayloadFn,
    ends: Arc<Ends>,
    collector: Arc<Mutex<AckTimings>>,
) -> Ended {
    let Connected {
        mut reader,
        mut writer,
        topic,
    } = conn;
    // Connections start evenly spread over one period, so the total rate is smooth.
    let offset = ends.period.mul_f64(index as f64 / n as f64);
    let mut tick = tokio::time::interval_at((ends.start + offset).into(), ends.period);
    // Late ticks fire at once: the schedule, not the server, sets the rate.
    tick.set_missed_tick_behavior(MissedTickBehavior::Burst);
    let stop = tokio::time::sleep_until(ends.end.into());
    let give_up = tokio::time::sleep_until(ends.drain_until.into());
    tokio::pin!(stop, give_up);
    let mut inflight: VecDeque<(u16, Instant)> = VecDeque::new();
    let mut publishing = true;
    let mut ended = Ended {
        unacked_at_end: 0,
        unacked_after_drain: 0,
        lost: false,
    };
    let mut seq = 0u64;
    loop {
        tokio::select! {
            biased;
            packet = reader.next() => match packet {
                Ok(Packet::PubAck(ack)) => {
                    let at = Instant::now();
                    if let Some(pos) = inflight.iter().position(|(pkid, _)| *pkid == ack.pkid) {
                        let (_, sent) = inflight.remove(pos).expect("position is in range");
                        collector.lock().expect("collector").acked(sent, at);
                    }
                }
                Ok(_) => {}
                Err(_) => {
                    ended.lost = true;
                    break;
                }
            },
            _ = &mut stop, if publishing => {
                publishing = false;
                ended.unacked_at_end = inflight.len() as u64;
            }
            _ = tick.tick(), if publishing => {
                let body = payload(index, seq);
                seq += 1;
                let at = Instant::now();
                match writer.publish(&topic, body).await {
                    Ok(pkid) => {
                        inflight.push_back((pkid, at));
                        collector.lock().expect("collector").sent(at);
                    }
                    Err(_) => {
                        ended.lost = true;
                        break;
                    }
                }
            }
            _ = &mut give_up => break,
        }
        if !publishing && inflight.is_empty() {
            break;
        }
    }
    if publishing {
        ended.unacked_at_end = inflight.len() as u64;
    }
    ended.unacked_after_drain = inflight.len() as u64;
    writer.disconnect().await;
    ended
}
