//! Each project's events per minute, for the project overview. Counting stored events in
//! device_events per request would read every event of the hour, so the ingest writers' commit
//! observer (`Ingest::on_committed`) adds each durable batch to counts in memory, per project
//! and minute of the commit, and `flush` (every `FLUSH_PERIOD`, and at shutdown) adds them to
//! the store's counts (`EventRateStore`), where the counts of several nodes on one database add
//! up. A crash loses the counts not yet flushed, never events.
//!
//! A read adds this node's unflushed counts to the stored ones, so this node's events show at
//! once; another node's show after its next flush.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::Result;
use crate::event::{DeviceEvent, EventMinute};
use crate::ids::{ProjectId, TenantId};
use crate::records::Project;
use crate::store::EventRateStore;

/// How often the counts are written: what a crash may lose of them.
pub const FLUSH_PERIOD: Duration = Duration::from_secs(10);

/// How long stored counts are kept: the overview's hour, and an hour to spare.
pub const KEPT_MS: i64 = 2 * 3_600_000;

/// How often the counts older than `KEPT_MS` are deleted.
pub const PURGE_PERIOD: Duration = Duration::from_secs(600);

const MINUTE_MS: i64 = 60_000;

/// The minutes the overview shows: the current one and the 59 before it.
pub const WINDOW_MINUTES: usize = 60;

/// A project's events per minute over `WINDOW_MINUTES`, oldest first; the last is the current,
/// unfinished minute.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EventRate {
    /// The first minute's start, epoch ms.
    pub start: i64,
    /// Events per minute; a minute nothing was stored in is 0.
    pub minutes: Vec<u64>,
}

impl EventRate {
    /// Events in the current minute so far.
    pub fn current(&self) -> u64 {
        self.minutes.last().copied().unwrap_or(0)
    }

    /// Events in the last full minute.
    pub fn last_full(&self) -> u64 {
        self.minutes.iter().rev().nth(1).copied().unwrap_or(0)
    }

    pub fn total(&self) -> u64 {
        self.minutes.iter().sum()
    }
}

/// A project's counts not yet written.
struct Pending {
    tenant: TenantId,
    /// (minute start, events); a few entries at most between two flushes.
    minutes: Vec<(i64, u64)>,
}

impl Pending {
    fn add(&mut self, minute: i64, events: u64) {
        match self.minutes.iter_mut().find(|(m, _)| *m == minute) {
            Some((_, n)) => *n += events,
            None => self.minutes.push((minute, events)),
        }
    }
}

pub struct EventRateService {
    store: Arc<dyn EventRateStore>,
    /// Touched once per committed batch and once per flush or read; no await while it is held.
    pending: Mutex<HashMap<ProjectId, Pending>>,
    /// Held by a flush (written) from taking the counts until they are stored (or put back),
    /// and by reads (read): a read never sees counts that are neither pending nor stored, and
    /// reads do not wait for each other.
    flushing: tokio::sync::RwLock<()>,
}

impl EventRateService {
    pub fn new(store: Arc<dyn EventRateStore>) -> Self {
        Self {
            store,
            pending: Mutex::new(HashMap::new()),
            flushing: tokio::sync::RwLock::new(()),
        }
    }

    /// Counts a durable batch in the minute of `now` (epoch ms). Events come in runs of one
    /// project (a submission is one device's), so the map is looked up once per run.
    pub fn count(&self, events: &[DeviceEvent], now: i64) {
        let minute = minute_of(now);
        let mut pending = self.pending.lock().expect("event rate lock");
        for run in events.chunk_by(|a, b| a.project_id == b.project_id) {
            let first = &run[0];
            let n = run.len() as u64;
            match pending.get_mut(&first.project_id) {
                Some(project) => project.add(minute, n),
                None => {
                    pending.insert(
                        first.project_id.clone(),
                        Pending {
                            tenant: first.tenant_id.clone(),
                            minutes: vec![(minute, n)],
                        },
                    );
                }
            }
        }
    }

    /// Adds the counts held here to the store's. When the store refuses them, or the flush is
    /// dropped before they are stored (a chore stopped at shutdown), they are kept for the next
    /// flush (those older than `KEPT_MS` by then are dropped).
    pub async fn flush(&self) -> Result<()> {
        let _flushing = self.flushing.write().await;
        let mut taken = Taken {
            service: self,
            counts: std::mem::take(&mut *self.pending.lock().expect("event rate lock")),
        };
        if taken.counts.is_empty() {
            return Ok(());
        }
        let rows: Vec<EventMinute> = taken
            .counts
            .iter()
            .flat_map(|(project, p)| {
                p.minutes.iter().map(|&(minute, events)| EventMinute {
                    tenant_id: p.tenant.clone(),
                    project_id: project.clone(),
                    minute,
                    events,
                })
            })
            .collect();
        self.store.add_event_minutes(&rows).await?;
        taken.counts.clear();
        Ok(())
    }

    /// The project's events per minute in the `WINDOW_MINUTES` up to `now`'s minute: the
    /// stored counts and this node's unflushed ones. `project` was read through the catalog,
    /// which checked that the caller may see it.
    pub async fn last_hour(&self, project: &Project, now: i64) -> Result<EventRate> {
        let start = minute_of(now) - (WINDOW_MINUTES as i64 - 1) * MINUTE_MS;
        let mut minutes = vec![0u64; WINDOW_MINUTES];
        let mut add = |minute: i64, events: u64| {
            let at = (minute - start).div_euclid(MINUTE_MS);
            if let Some(slot) = usize::try_from(at).ok().and_then(|at| minutes.get_mut(at)) {
                *slot += events;
            }
        };
        let _flushing = self.flushing.read().await;
        let stored = self
            .store
            .event_minutes(&project.record.tenant_id, &project.id, start)
            .await?;
        for (minute, events) in stored {
            add(minute, events);
        }
        if let Some(p) = self.pending.lock().expect("event rate lock").get(&project.id) {
            for &(minute, events) in &p.minutes {
                add(minute, events);
            }
        }
        Ok(EventRate { start, minutes })
    }

    /// Deletes the stored counts older than `KEPT_MS`; returns how many rows.
    pub async fn purge(&self, now: i64) -> Result<u64> {
        self.store.delete_event_minutes_before(now - KEPT_MS).await
    }
}

/// Counts taken from `pending` by a flush; what is left in `counts` when it is dropped goes
/// back there.
struct Taken<'a> {
    service: &'a EventRateService,
    counts: HashMap<ProjectId, Pending>,
}

impl Drop for Taken<'_> {
    fn drop(&mut self) {
        if self.counts.is_empty() {
            return;
        }
        let cutoff = crate::time::now_ms() - KEPT_MS;
        let mut pending = self.service.pending.lock().expect("event rate lock");
        for (project, p) in self.counts.drain() {
            for (minute, events) in p.minutes.into_iter().filter(|(minute, _)| *minute >= cutoff) {
                pending
                    .entry(project.clone())
                    .or_insert_with(|| Pending {
                        tenant: p.tenant.clone(),
                        minutes: Vec::new(),
                    })
                    .add(minute, events);
            }
        }
    }
}

/// The start of the minute `at` (epoch ms) is in.
fn minute_of(at: i64) -> i64 {
    at - at.rem_euclid(MINUTE_MS)
}
