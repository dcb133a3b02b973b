//! The engines' background tasks: a step run on a pool at a fixed period for as long as
//! the store lives.

use std::sync::Weak;
use std::time::Duration;

use sqlx::AnyPool;

/// Runs `step` on `pool` every `period` until `alive` is dropped (with the last clone of the
/// store) or the pool closed. A failure is logged as `failed` and the step runs again at the
/// next tick.
pub async fn every<F, Fut, T, E>(period: Duration, pool: AnyPool, alive: Weak<()>, failed: &'static str, step: F)
where
    F: Fn(AnyPool) -> Fut,
    Fut: Future<Output = Result<T, E>>,
    E: std::fmt::Display,
{
    let mut tick = tokio::time::interval(period);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        if alive.strong_count() == 0 || pool.is_closed() {
            return;
        }
        if let Err(e) = step(pool.clone()).await {
            if pool.is_closed() {
                return;
            }
            tracing::warn!(error = %e, "{failed}");
        }
    }
}
