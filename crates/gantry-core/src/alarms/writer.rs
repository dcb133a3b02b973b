//! Group commit of alarm plans. Evaluations compute their transitions from a snapshot, outside
//! any transaction; the one writer task takes every plan queued while the previous batch was
//! committing and writes them in one transaction, so that the store's writer is asked once per
//! batch rather than once per event and rule. A plan answered None (out of date, a failed
//! batch, or the writer stopped) goes the locked way, `AlarmStore::apply_alarm_step`.

use std::sync::Arc;

use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::alarm::AlarmWrite;
use crate::store::{AlarmPlan, AlarmStore};

/// The most plans one transaction writes.
const MAX_PLANS: usize = 256;
/// Plans waiting for the writer; a full queue makes evaluations wait (and so their ingest).
const QUEUE: usize = 4096;

struct Job {
    plan: AlarmPlan,
    done: oneshot::Sender<Option<Vec<AlarmWrite>>>,
}

/// The sending side of the writer task.
pub(super) struct PlanWriter {
    queue: mpsc::Sender<Job>,
}

impl PlanWriter {
    /// Starts the writer as a task of `tasks`; once `stop` is cancelled it writes what is
    /// queued and ends, and later plans are answered None.
    pub(super) fn start(store: Arc<dyn AlarmStore>, tasks: &TaskTracker, stop: CancellationToken) -> Self {
        let (queue, jobs) = mpsc::channel(QUEUE);
        tasks.spawn(write_plans(store, jobs, stop));
        PlanWriter { queue }
    }

    /// Writes `plan` with the others queued; its alarms as written, or None when it was not
    /// written.
    pub(super) async fn commit(&self, plan: AlarmPlan) -> Option<Vec<AlarmWrite>> {
        let (done, answer) = oneshot::channel();
        self.queue.send(Job { plan, done }).await.ok()?;
        answer.await.ok().flatten()
    }
}

async fn write_plans(store: Arc<dyn AlarmStore>, mut jobs: mpsc::Receiver<Job>, stop: CancellationToken) {
    let mut stopping = false;
    loop {
        let first = if stopping {
            jobs.recv().await
        } else {
            tokio::select! {
                job = jobs.recv() => job,
                _ = stop.cancelled() => {
                    jobs.close();
                    stopping = true;
                    continue;
                }
            }
        };
        let Some(first) = first else { break };
        let mut batch = vec![first];
        while batch.len() < MAX_PLANS {
            match jobs.try_recv() {
                Ok(job) => batch.push(job),
                Err(_) => break,
            }
        }
        write_batch(store.as_ref(), batch).await;
    }
}

/// Writes one batch, in device order so that two nodes' batches take rows in one order.
async fn write_batch(store: &dyn AlarmStore, mut batch: Vec<Job>) {
    batch.sort_by(|a, b| a.plan.device.as_str().cmp(b.plan.device.as_str()));
    let (plans, answers): (Vec<_>, Vec<_>) = batch.into_iter().map(|j| (j.plan, j.done)).unzip();
    let written = match store.commit_alarm_plans(plans).await {
        Ok(written) => written,
        Err(e) => {
            // Each plan goes the locked way, where a plan that cannot be written fails alone.
            tracing::warn!(error = %e, cause = ?e, plans = answers.len(), "alarm batch failed");
            vec![None; answers.len()]
        }
    };
    for (done, written) in answers.into_iter().zip(written) {
        let _ = done.send(written);
    }
}
