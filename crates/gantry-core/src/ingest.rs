//! The one ingest path for device events, used by REST and MQTT alike: bounded queues in front
//! of writers that commit events and their shadow updates in batches (group commit). A caller's
//! `submit` returns only once the batch holding its events is durable. Where the store flushes
//! apart from the commit (SQLite's staging file), a writer commits the next batch while the last
//! is flushed (`IngestConfig::commits_in_flight`). Where the store takes several transactions at
//! once (PostgreSQL), there are as many writers as it asks for (`EventStore::ingest_writers`),
//! each for its own share of the devices: a device's events are committed in the order they were
//! submitted, and no two writers touch the same shadow or count rows.
//!
//! Durable batches are handed to the observer (`Ingest::on_committed`) in commit order: a
//! writer's batches one after the other (each waits for the one before it), and the writers'
//! batches in the order they became durable.

use std::hash::{BuildHasher, RandomState};
use std::ops::Range;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use tokio::sync::{OwnedSemaphorePermit, Semaphore, mpsc, oneshot, watch};
use tokio::task::{JoinHandle, JoinSet};
use tokio_util::task::TaskTracker;
use tracing::Instrument;

use crate::event::DeviceEvent;
use crate::ids::DeviceId;
use crate::store::{AlarmKeep, Store};
use crate::webhook::WebhookEvent;
use crate::{Error, Result};

#[derive(Debug, Clone)]
pub struct IngestConfig {
    /// Submissions the queues hold before callers have to wait (shared among the writers).
    pub queue_capacity: usize,
    /// Events committed in one transaction at most.
    pub max_batch: usize,
    /// How long a caller waits for room in a full queue before it is told to back off (429).
    pub full_wait: Duration,
    /// Batches committed and not yet on disk at once (`EventStore::commit_events`): batches
    /// commit while the ones before are flushed. On a store whose commit is its flush
    /// (PostgreSQL) it changes nothing. More in flight lets commits go on through a slow flush,
    /// at the price of more events held in memory unacknowledged.
    pub commits_in_flight: usize,
}

impl Default for IngestConfig {
    fn default() -> Self {
        Self {
            queue_capacity: 16 * 1024,
            max_batch: 4096,
            full_wait: Duration::from_secs(2),
            commits_in_flight: 8,
        }
    }
}

/// Counters of the pipeline, exported at `/metrics`.
#[derive(Debug, Default)]
pub struct IngestStats {
    pub submitted: AtomicU64,
    pub committed: AtomicU64,
    pub batches: AtomicU64,
    pub rejected_busy: AtomicU64,
    pub failed: AtomicU64,
    /// From a batch's start of commit until it is durable (its callers are answered then).
    pub commit_seconds: crate::histogram::Histogram,
}

struct Job {
    events: Vec<DeviceEvent>,
    /// The webhook events they cause, committed with them.
    outbox: Vec<WebhookEvent>,
    /// The alarm keeps they cause (`EventStore::commit_events_keeping`), committed with them.
    keeps: Vec<AlarmKeep>,
    done: oneshot::Sender<Result<()>>,
}

/// Told of every durable batch, in commit order (the push stream). It runs on the writer's way
/// to its next batch's answer, so it only hands the events on: no I/O, no waiting.
pub type CommitObserver = Arc<dyn Fn(&[DeviceEvent]) + Send + Sync>;

/// The observer, set once after start, and the lock that keeps the writers' calls in order.
#[derive(Default)]
struct Observer {
    observer: OnceLock<CommitObserver>,
    order: Mutex<()>,
}

impl Observer {
    fn committed(&self, events: &[DeviceEvent]) {
        if let Some(observer) = self.observer.get() {
            let _in_order = self.order.lock().expect("observer lock");
            observer(events);
        }
    }
}

/// The sending side; cheap to clone.
#[derive(Clone)]
pub struct Ingest {
    /// A queue per writer; a device's events always go to the same one (`lane_of`).
    lanes: Arc<[mpsc::Sender<Job>]>,
    hasher: RandomState,
    stop: Arc<watch::Sender<bool>>,
    stats: Arc<IngestStats>,
    full_wait: Duration,
    observer: Arc<Observer>,
}

/// The writer tasks; await them after `Ingest::close` to know everything accepted is committed.
pub struct IngestWriter(Vec<JoinHandle<()>>);

impl IngestWriter {
    pub async fn join(self) {
        for writer in self.0 {
            if let Err(e) = writer.await {
                tracing::error!(error = %e, "ingest writer panicked");
            }
        }
    }
}

impl Ingest {
    /// `start_in` on a tracker of its own: for tools and tests that own no other task.
    pub fn start(store: Arc<dyn Store>, config: IngestConfig) -> (Ingest, IngestWriter) {
        Self::start_in(store, config, &TaskTracker::new())
    }

    /// Starts the writers as tasks of `tasks`; they end once `close` was called and what was
    /// queued is committed.
    pub fn start_in(store: Arc<dyn Store>, config: IngestConfig, tasks: &TaskTracker) -> (Ingest, IngestWriter) {
        let writers = store.ingest_writers().max(1);
        let (stop, stopped) = watch::channel(false);
        let stats = Arc::new(IngestStats::default());
        let full_wait = config.full_wait;
        let observer = Arc::new(Observer::default());
        let mut lanes = Vec::with_capacity(writers);
        let mut handles = Vec::with_capacity(writers);
        for _ in 0..writers {
            let (tx, rx) = mpsc::channel(config.queue_capacity.div_ceil(writers).max(1));
            lanes.push(tx);
            handles.push(tasks.spawn(write_batches(
                store.clone(),
                rx,
                stopped.clone(),
                stats.clone(),
                config.clone(),
                observer.clone(),
            )));
        }
        (
            Ingest {
                lanes: lanes.into(),
                hasher: RandomState::new(),
                stop: Arc::new(stop),
                stats,
                full_wait,
                observer,
            },
            IngestWriter(handles),
        )
    }

    /// The queue of the writer that commits `device`'s events. A submission's events come from
    /// one device on every path that submits; a submission is committed whole by one writer,
    /// that of its first event's device.
    fn lane_of(&self, device: &DeviceId) -> &mpsc::Sender<Job> {
        match &*self.lanes {
            [only] => only,
            lanes => &lanes[self.hasher.hash_one(device.as_str()) as usize % lanes.len()],
        }
    }

    /// Sets who is told of durable batches (once; later calls are ignored).
    pub fn on_committed(&self, observer: CommitObserver) {
        let _ = self.observer.observer.set(observer);
    }

    pub fn stats(&self) -> &Arc<IngestStats> {
        &self.stats
    }

    /// Submissions waiting for the writers.
    pub fn backlog(&self) -> usize {
        self.lanes.iter().map(|tx| tx.max_capacity() - tx.capacity()).sum()
    }

    /// Queues events and waits until they are committed. A queue that stays full for
    /// `full_wait` gives `Busy`; a closed pipeline `Unavailable`.
    pub async fn submit(&self, events: Vec<DeviceEvent>) -> Result<()> {
        self.submit_with(events, Vec::new()).await
    }

    /// `submit`, with the webhook events the events cause, committed in the same transaction.
    pub async fn submit_with(&self, events: Vec<DeviceEvent>, outbox: Vec<WebhookEvent>) -> Result<()> {
        self.submit_keeping(events, outbox, Vec::new()).await
    }

    /// `submit_with`, with the alarm keeps the events cause, committed in the same transaction.
    pub async fn submit_keeping(
        &self,
        events: Vec<DeviceEvent>,
        outbox: Vec<WebhookEvent>,
        keeps: Vec<AlarmKeep>,
    ) -> Result<()> {
        if events.is_empty() {
            return Ok(());
        }
        let count = events.len() as u64;
        let (done, committed) = oneshot::channel();
        let lane = self.lane_of(&events[0].device_id);
        match tokio::time::timeout(
            self.full_wait,
            lane.send(Job {
                events,
                outbox,
                keeps,
                done,
            }),
        )
        .await
        {
            Err(_) => {
                self.stats.rejected_busy.fetch_add(count, Ordering::Relaxed);
                return Err(Error::Busy("the ingest queue is full; retry later".to_owned()));
            }
            Ok(Err(_)) => return Err(Error::Unavailable),
            Ok(Ok(())) => {}
        }
        self.stats.submitted.fetch_add(count, Ordering::Relaxed);
        committed.await.map_err(|_| Error::Unavailable)?
    }

    /// Stops taking submissions; the writers commit what is queued and then end.
    pub fn close(&self) {
        let _ = self.stop.send(true);
    }
}

async fn write_batches(
    store: Arc<dyn Store>,
    mut rx: mpsc::Receiver<Job>,
    mut stopped: watch::Receiver<bool>,
    stats: Arc<IngestStats>,
    config: IngestConfig,
    observer: Arc<Observer>,
) {
    // Each batch's answer waits for the one before it to be observed: `previous` is its signal.
    let mut previous: Option<oneshot::Receiver<()>> = None;
    let in_flight = Arc::new(Semaphore::new(config.commits_in_flight.max(1)));
    let mut flushing = JoinSet::new();
    let mut closing = false;
    loop {
        // Room for one more commit before the batch is taken: what arrives while the commits
        // in flight wait for the disk joins it.
        let permit = in_flight
            .clone()
            .acquire_owned()
            .await
            .expect("the semaphore is never closed");
        let first = if closing {
            rx.recv().await
        } else {
            tokio::select! {
                job = rx.recv() => job,
                _ = stopped.changed() => {
                    // Refuse new submissions but keep draining what was accepted.
                    rx.close();
                    closing = true;
                    continue;
                }
            }
        };
        let Some(first) = first else { break };
        let mut jobs = vec![first];
        let mut count = jobs[0].events.len();
        while count < config.max_batch {
            match rx.try_recv() {
                Ok(job) => {
                    count += job.events.len();
                    jobs.push(job);
                }
                Err(_) => break,
            }
        }
        let (observed, next) = oneshot::channel();
        let order = Order {
            after: previous.replace(next),
            observed,
            observer: observer.clone(),
        };
        commit(&store, jobs, &stats, permit, order, &mut flushing).await;
        while flushing.try_join_next().is_some() {}
    }
    // Every accepted event is answered before the writer ends.
    while flushing.join_next().await.is_some() {}
    tracing::info!("ingest writer drained and stopped");
}

/// A batch's place in its writer's commit order.
struct Order {
    /// Resolves (or is dropped) once the batch before is observed.
    after: Option<oneshot::Receiver<()>>,
    /// Sent once this batch is observed (or dropped when it failed).
    observed: oneshot::Sender<()>,
    observer: Arc<Observer>,
}

impl Order {
    /// Hands `events` to the observer after the batch before them.
    async fn observe(self, events: &[DeviceEvent]) {
        if let Some(after) = self.after {
            let _ = after.await;
        }
        self.observer.committed(events);
        let _ = self.observed.send(());
    }
}

/// A submission's events, webhook events and alarm keeps in a batch, and its answer.
type Waiter = (Range<usize>, Range<usize>, Range<usize>, oneshot::Sender<Result<()>>);

/// Commits a batch in one transaction; its submissions are answered once it is durable, by a
/// task in `flushing` that holds `permit` until then. If the commit fails, each submission is
/// retried alone (and answered when durable), so one bad submission cannot fail its neighbours.
async fn commit(
    store: &Arc<dyn Store>,
    jobs: Vec<Job>,
    stats: &Arc<IngestStats>,
    permit: OwnedSemaphorePermit,
    order: Order,
    flushing: &mut JoinSet<()>,
) {
    let mut events = Vec::new();
    let mut outbox = Vec::new();
    let mut keeps = Vec::new();
    let mut spans: Vec<Waiter> = Vec::with_capacity(jobs.len());
    for job in jobs {
        let (start, outbox_start, keeps_start) = (events.len(), outbox.len(), keeps.len());
        events.extend(job.events);
        outbox.extend(job.outbox);
        keeps.extend(job.keeps);
        spans.push((
            start..events.len(),
            outbox_start..outbox.len(),
            keeps_start..keeps.len(),
            job.done,
        ));
    }
    // Per batch, at debug: the span costs nothing when the level is off.
    let span = tracing::debug_span!("ingest_commit", events = events.len(), submissions = spans.len());
    let started = Instant::now();
    let committing = store.commit_events_keeping(&events, &outbox, &keeps);
    match committing.instrument(span.clone()).await {
        Ok(durable) => {
            let stats = stats.clone();
            let flushed = async move {
                let result = durable.await;
                drop(permit);
                match &result {
                    Ok(()) => {
                        stats.commit_seconds.observe(started.elapsed());
                        stats.batches.fetch_add(1, Ordering::Relaxed);
                        stats.committed.fetch_add(events.len() as u64, Ordering::Relaxed);
                    }
                    Err(e) => {
                        tracing::error!(error = %e, cause = ?e, events = events.len(), "events committed but not flushed to disk");
                        stats.failed.fetch_add(events.len() as u64, Ordering::Relaxed);
                    }
                }
                for (_, _, _, done) in spans {
                    let _ = done.send(match &result {
                        Ok(()) => Ok(()),
                        Err(e) => Err(e.duplicate_for_waiter()),
                    });
                }
                if result.is_ok() {
                    order.observe(&events).await;
                } else if let Some(after) = order.after {
                    // Keep the chain: the next batch waits for the one before this.
                    let _ = after.await;
                    let _ = order.observed.send(());
                }
            };
            flushing.spawn(flushed.instrument(span));
        }
        Err(batch_error) => {
            tracing::warn!(error = %batch_error, events = events.len(), "batch commit failed; committing submissions one by one");
            let stored = commit_one_by_one(store, (&events, &outbox, &keeps), spans, (stats, started)).await;
            order.observe(&stored).await;
        }
    }
}

/// Each submission of a batch whose commit failed, alone, answered once durable; the events
/// stored.
async fn commit_one_by_one(
    store: &Arc<dyn Store>,
    (events, outbox, keeps): (&[DeviceEvent], &[WebhookEvent], &[AlarmKeep]),
    spans: Vec<Waiter>,
    (stats, started): (&Arc<IngestStats>, Instant),
) -> Vec<DeviceEvent> {
    let mut stored = Vec::new();
    for (range, outbox_range, keeps_range, done) in spans {
        let one = (&events[range.clone()], &outbox[outbox_range], &keeps[keeps_range]);
        let result = match store.commit_events_keeping(one.0, one.1, one.2).await {
            Ok(durable) => durable.await,
            Err(e) => Err(e),
        };
        match &result {
            Ok(()) => {
                stored.extend_from_slice(&events[range.clone()]);
                stats.commit_seconds.observe(started.elapsed());
                stats.batches.fetch_add(1, Ordering::Relaxed);
                stats.committed.fetch_add(range.len() as u64, Ordering::Relaxed);
            }
            Err(e) => {
                tracing::error!(error = %e, cause = ?e, "event commit failed");
                stats.failed.fetch_add(range.len() as u64, Ordering::Relaxed);
            }
        }
        let _ = done.send(result);
    }
    stored
}
