//! The engines' background chores: steps run on a pool at a fixed period for as long as the
//! store is open, as tasks of the application's owner of background work.

use std::future::Future;
use std::time::Duration;

use sqlx::AnyPool;
use tokio_util::sync::{CancellationToken, DropGuard};
use tokio_util::task::TaskTracker;

/// Where an engine runs its chores, and what ends them: the application's stop signal for the
/// store's stage, `end` (the store closes), or the engine's drop. The engine holds it for as long
/// as it lives.
///
/// Invariant: once `end` returns, no chore of the engine runs, so its pools may close under no
/// one's feet.
#[derive(Debug)]
pub struct Chores {
    tracker: TaskTracker,
    stop: CancellationToken,
    _stop_on_drop: DropGuard,
}

impl Chores {
    /// Chores as tasks of `tracker`, stopped when `stop` is cancelled (or the engine ends them).
    /// `tracker` is the application's for the store's stage: it holds these chores alone.
    pub fn new(tracker: TaskTracker, stop: &CancellationToken) -> Self {
        let stop = stop.child_token();
        Self {
            tracker,
            _stop_on_drop: stop.clone().drop_guard(),
            stop,
        }
    }

    /// Chores on a tracker of their own: for a store that a tool or a test opens alone.
    pub fn alone() -> Self {
        Self::new(TaskTracker::new(), &CancellationToken::new())
    }

    /// Cancelled when the chores are to stop.
    pub fn stop_signal(&self) -> CancellationToken {
        self.stop.clone()
    }

    /// Spawns a chore that watches `stop_signal` itself.
    pub fn spawn<F>(&self, chore: F)
    where
        F: Future<Output = ()> + Send + 'static,
    {
        self.tracker.spawn(chore);
    }

    /// Spawns `every(period, pool, failed, step)`, stopped with the others.
    pub fn every<F, Fut, T, E>(&self, period: Duration, pool: AnyPool, failed: &'static str, step: F)
    where
        F: Fn(AnyPool) -> Fut + Send + 'static,
        Fut: Future<Output = Result<T, E>> + Send + 'static,
        E: std::fmt::Display + std::fmt::Debug + Send + 'static,
        T: Send + 'static,
    {
        self.spawn(every(period, pool, self.stop_signal(), failed, step));
    }

    /// Stops the chores and waits until each has ended (a step under way is finished).
    pub async fn end(&self) {
        self.stop.cancel();
        self.tracker.close();
        self.tracker.wait().await;
    }
}

/// Runs `step` on `pool` every `period` until `stop` is cancelled or the pool closed; a step
/// under way is finished first. A failure is logged as `failed` and the step runs again at the
/// next tick.
pub async fn every<F, Fut, T, E>(
    period: Duration,
    pool: AnyPool,
    stop: CancellationToken,
    failed: &'static str,
    step: F,
) where
    F: Fn(AnyPool) -> Fut,
    Fut: Future<Output = Result<T, E>>,
    E: std::fmt::Display + std::fmt::Debug,
{
    let mut tick = tokio::time::interval(period);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            _ = stop.cancelled() => return,
        }
        if stop.is_cancelled() || pool.is_closed() {
            return;
        }
        if let Err(e) = step(pool.clone()).await {
            if pool.is_closed() {
                return;
            }
            tracing::warn!(error = %e, cause = ?e, "{failed}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `end` returns once the chores have ended, and a dropped engine's chores end too.
    #[tokio::test]
    async fn chores_end_with_end_or_with_the_engine() {
        sqlx::any::install_default_drivers();
        let pool = sqlx::any::AnyPoolOptions::new()
            .connect_lazy("sqlite::memory:")
            .unwrap();
        let tracker = TaskTracker::new();
        let chores = Chores::new(tracker.clone(), &CancellationToken::new());
        chores.every(Duration::from_millis(10), pool.clone(), "never", |_| async {
            Ok::<_, String>(())
        });
        assert_eq!(tracker.len(), 1);
        chores.end().await;
        assert!(tracker.is_empty(), "no chore runs once `end` returned");

        let tracker = TaskTracker::new();
        let chores = Chores::new(tracker.clone(), &CancellationToken::new());
        chores.every(Duration::from_millis(10), pool, "never", |_| async {
            Ok::<_, String>(())
        });
        drop(chores);
        tracker.close();
        tokio::time::timeout(Duration::from_secs(5), tracker.wait())
            .await
            .expect("the chores end with the engine");
    }
}
