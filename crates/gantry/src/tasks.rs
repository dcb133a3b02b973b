//! The one owner of the application's background tasks, and the stages in which the one
//! shutdown stops them (`Application::run_until` walks them in order; ARCHITECTURE.md states it).

use std::future::Future;

use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

/// When a task is told to stop, in the order of the shutdown.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Stage {
    /// What takes work from outside: the HTTP servers, the HTTPS handshakes, the certificate reload.
    Listeners,
    /// Periodic chores (ack sweep, feed sweep, last-seen flush, retention): nothing to finish.
    Chores,
    /// What follows the ingest writers: the push streams' shadow publisher.
    Ingest,
    /// Webhook deliveries.
    Deliveries,
}

const STAGES: usize = 4;

/// Every task the application starts, and a stop signal per stage.
pub(crate) struct Tasks {
    tracker: TaskTracker,
    stages: [CancellationToken; STAGES],
}

impl Tasks {
    pub(crate) fn new() -> Self {
        Self {
            tracker: TaskTracker::new(),
            stages: std::array::from_fn(|_| CancellationToken::new()),
        }
    }

    /// For the crates that spawn through the owner (`Ingest::start_in`, `Services::new`).
    pub(crate) fn tracker(&self) -> &TaskTracker {
        &self.tracker
    }

    /// Cancelled when `stage` stops.
    pub(crate) fn token(&self, stage: Stage) -> CancellationToken {
        self.stages[stage as usize].clone()
    }

    /// `token`, as the `watch` flag that `delivery::run` and its like take.
    pub(crate) fn flag(&self, stage: Stage) -> watch::Receiver<bool> {
        let (tx, rx) = watch::channel(false);
        let token = self.token(stage);
        self.tracker.spawn(async move {
            token.cancelled().await;
            let _ = tx.send(true);
        });
        rx
    }

    /// Spawns a task that watches its own stop signal (a token or flag of this owner's).
    pub(crate) fn spawn<F>(&self, task: F) -> JoinHandle<F::Output>
    where
        F: Future + Send + 'static,
        F::Output: Send + 'static,
    {
        self.tracker.spawn(task)
    }

    /// Spawns a task that has nothing to finish: it is dropped at its next await once `stage` stops.
    pub(crate) fn spawn_until<F>(&self, stage: Stage, task: F) -> JoinHandle<()>
    where
        F: Future<Output = ()> + Send + 'static,
    {
        let token = self.token(stage);
        self.tracker.spawn(async move {
            tokio::select! {
                _ = token.cancelled() => {}
                _ = task => {}
            }
        })
    }

    pub(crate) fn stop(&self, stage: Stage) {
        self.stages[stage as usize].cancel();
    }

    /// Stops every stage not stopped yet and waits for every task to end.
    pub(crate) async fn close(&self) {
        for stage in &self.stages {
            stage.cancel();
        }
        self.tracker.close();
        self.tracker.wait().await;
    }
}
