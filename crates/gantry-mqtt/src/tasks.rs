//! Where a broker's tasks run: the application's tracker for the MQTT stage of its shutdown, and
//! the signal that stops them.

use std::future::Future;

use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tokio_util::task::task_tracker::TaskTrackerToken;

/// The broker's tasks (its server or client loop, its sweeper, the work its hooks start for a
/// connect or a message), all on one tracker, so the shutdown waits for each before it drains
/// ingest.
#[derive(Debug, Clone)]
pub struct BrokerTasks {
    tracker: TaskTracker,
    stop: CancellationToken,
}

impl BrokerTasks {
    /// Tasks of `tracker`, stopped when `stop` is cancelled or the broker stops or is dropped.
    pub fn new(tracker: TaskTracker, stop: &CancellationToken) -> Self {
        Self {
            tracker,
            stop: stop.child_token(),
        }
    }

    /// A task that runs until it ends or the broker stops, whichever comes first.
    pub(crate) fn spawn_until<F>(&self, task: F)
    where
        F: Future<Output = ()> + Send + 'static,
    {
        let stop = self.stop.clone();
        self.tracker.spawn(async move {
            tokio::select! {
                _ = stop.cancelled() => {}
                _ = task => {}
            }
        });
    }

    /// A short task of its own (a presence write, a message's handling): it runs to its end,
    /// and the shutdown waits for it.
    pub(crate) fn spawn<F>(&self, task: F)
    where
        F: Future<Output = ()> + Send + 'static,
    {
        self.tracker.spawn(task);
    }

    /// Work done in place (an upstream message in a hook) counted as a task while the returned
    /// token lives; None once the broker stops, when no new work is taken.
    pub(crate) fn in_flight(&self) -> Option<TaskTrackerToken> {
        // The token first: a stop that comes after the check waits for it.
        let token = self.tracker.token();
        (!self.stop.is_cancelled()).then_some(token)
    }

    pub(crate) fn stop(&self) {
        self.stop.cancel();
    }
}
