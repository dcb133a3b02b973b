//! The one owner of the application's background tasks, and the stages in which the one
//! shutdown stops them (`Application::run_until` walks them in order; ARCHITECTURE.md states it).
//!
//! Invariant: a stage's tasks have all ended before the next stage is told to stop, so what a
//! later stage serves (ingest, the deliveries' outcomes, the store) outlives every task that
//! uses it, and accepted data is never lost.

use std::future::Future;

use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

/// When a task is told to stop, in the order of the shutdown.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Stage {
    /// What takes requests: the HTTP servers and their connections, the HTTPS handshakes, the
    /// certificate reload. First, so the requests in flight may still reach devices.
    Http,
    /// What takes devices' messages: the embedded broker (or the external broker's client), its
    /// sweeper, and the work its hooks started for a message or a connect.
    Mqtt,
    /// Periodic chores (ack sweep, feed sweep, last-seen and events-per-minute flushes,
    /// retention): nothing to finish (the shutdown flushes what they would have).
    Chores,
    /// What follows the ingest writers, and the writers themselves: the push streams' shadow
    /// publisher, the alarms' writer.
    Ingest,
    /// Webhook deliveries: an attempt in flight is finished and recorded.
    Deliveries,
    /// The store engines' chores (checkpoints, SQLite's mover and flusher, PostgreSQL's folds).
    Store,
}

const STAGES: [Stage; 6] = [
    Stage::Http,
    Stage::Mqtt,
    Stage::Chores,
    Stage::Ingest,
    Stage::Deliveries,
    Stage::Store,
];

/// Every task the application starts: a tracker and a stop signal per stage.
pub(crate) struct Tasks {
    stages: [(TaskTracker, CancellationToken); STAGES.len()],
}

impl Tasks {
    pub(crate) fn new() -> Self {
        Self {
            stages: std::array::from_fn(|_| (TaskTracker::new(), CancellationToken::new())),
        }
    }

    /// For the crates that spawn through the owner (`Ingest::start_in`, `Services::new`, the
    /// brokers, the store engines): what they spawn on `stage`'s tracker ends before the next
    /// stage stops.
    pub(crate) fn tracker(&self, stage: Stage) -> &TaskTracker {
        &self.stages[stage as usize].0
    }

    /// Cancelled when `stage` stops.
    pub(crate) fn token(&self, stage: Stage) -> CancellationToken {
        self.stages[stage as usize].1.clone()
    }

    /// Spawns a task of `stage` that watches its own stop signal (a token or flag of this
    /// owner's).
    pub(crate) fn spawn<F>(&self, stage: Stage, task: F) -> JoinHandle<F::Output>
    where
        F: Future + Send + 'static,
        F::Output: Send + 'static,
    {
        self.tracker(stage).spawn(task)
    }

    /// Spawns a task that has nothing to finish: it is dropped at its next await once `stage` stops.
    pub(crate) fn spawn_until<F>(&self, stage: Stage, task: F) -> JoinHandle<()>
    where
        F: Future<Output = ()> + Send + 'static,
    {
        let token = self.token(stage);
        self.spawn(stage, async move {
            tokio::select! {
                _ = token.cancelled() => {}
                _ = task => {}
            }
        })
    }

    /// Tells `stage`'s tasks to stop and waits until every one of them has ended.
    pub(crate) async fn stop(&self, stage: Stage) {
        let (tracker, token) = &self.stages[stage as usize];
        token.cancel();
        tracker.close();
        tracker.wait().await;
    }

    /// Stops every stage in order, each after the one before has ended.
    pub(crate) async fn close(&self) {
        for stage in STAGES {
            self.stop(stage).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};
    use std::time::Duration;

    use super::*;

    /// A delivery that takes a while to finish once told to stop still ends before the store's
    /// chores are told to stop, and `close` returns only when both have ended.
    #[tokio::test]
    async fn close_waits_for_each_stage_before_stopping_the_next() {
        let tasks = Tasks::new();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let (delivery_seen, delivery_stop) = (seen.clone(), tasks.token(Stage::Deliveries));
        tasks.spawn(Stage::Deliveries, async move {
            delivery_stop.cancelled().await;
            tokio::time::sleep(Duration::from_millis(200)).await;
            delivery_seen.lock().unwrap().push("delivery recorded");
        });
        let (store_seen, store_stop) = (seen.clone(), tasks.token(Stage::Store));
        tasks.spawn(Stage::Store, async move {
            store_stop.cancelled().await;
            store_seen.lock().unwrap().push("store chores told to stop");
            tokio::time::sleep(Duration::from_millis(100)).await;
            store_seen.lock().unwrap().push("store chores ended");
        });
        tasks.close().await;
        assert_eq!(
            *seen.lock().unwrap(),
            ["delivery recorded", "store chores told to stop", "store chores ended"]
        );
        assert!(STAGES.iter().all(|&stage| tasks.tracker(stage).is_empty()));
    }
}
