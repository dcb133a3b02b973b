//! The service's periodic work, each a task of the chores stage: sweeps, retention, flushes.

use std::sync::Arc;
use std::time::Duration;

use gantry_core::Services;

/// Drops the push-stream feeds nobody followed for their replay window, every few seconds, so
/// a project that went quiet gives its buffer back.
pub(crate) async fn sweep_feeds(feeds: Arc<gantry_core::feed::Feeds>) {
    let mut tick = tokio::time::interval(Duration::from_secs(5));
    loop {
        tick.tick().await;
        feeds.sweep();
    }
}

/// Deletes old events at start and then hourly.
pub(crate) async fn apply_retention(services: Arc<Services>, days: u32) {
    let mut tick = tokio::time::interval(Duration::from_secs(3600));
    loop {
        tick.tick().await;
        match services.telemetry.apply_retention(days).await {
            Ok(0) => {}
            Ok(n) => tracing::info!(events = n, days, "deleted events past the retention period"),
            Err(e) => tracing::warn!(error = %e, "event retention failed"),
        }
    }
}

/// Deletes audit records past their retention (none when `days` is 0) and ended sessions, at
/// start and then hourly.
pub(crate) async fn purge_audit_and_sessions(services: Arc<Services>, days: u32) {
    let mut tick = tokio::time::interval(Duration::from_secs(3600));
    loop {
        tick.tick().await;
        if days > 0 {
            match services.audit.purge(days).await {
                Ok(0) => {}
                Ok(n) => tracing::info!(records = n, days, "deleted audit records past the retention period"),
                Err(e) => tracing::warn!(error = %e, "audit retention failed"),
            }
        }
        if let Err(e) = services.users.purge_sessions().await {
            tracing::warn!(error = %e, "ended sessions not deleted");
        }
    }
}

/// Writes the devices' last-seen times that moved, every `presence::FLUSH_PERIOD`.
pub(crate) async fn flush_last_seen(services: Arc<Services>) {
    let mut tick = tokio::time::interval(gantry_core::presence::FLUSH_PERIOD);
    loop {
        tick.tick().await;
        if let Err(e) = services.presence.flush().await {
            tracing::warn!(error = %e, "last-seen times not written; kept for the next flush");
        }
    }
}

/// Raises the no-data alarms of devices gone quiet. The clocks are in the store (each rule's
/// state per device), so a restart continues them from the last stored value.
pub(crate) async fn sweep_silent_devices(services: Arc<Services>) {
    let mut tick = tokio::time::interval(gantry_core::alarms::NO_DATA_SWEEP);
    loop {
        tick.tick().await;
        match services.alarms.sweep_no_data(gantry_core::time::now_ms()).await {
            Ok(0) => {}
            Ok(n) => tracing::info!(alarms = n, "no-data alarms raised"),
            Err(e) => tracing::warn!(error = %e, "no-data sweep failed"),
        }
    }
}

/// Ends controls whose ack did not come within the ack timeout in `exception`. The deadlines
/// are in the store, so controls pending across a restart are swept too.
pub(crate) async fn sweep_overdue_acks(services: Arc<Services>) {
    let period = (services.control.ack_timeout() / 4).clamp(Duration::from_millis(100), Duration::from_secs(1));
    let mut tick = tokio::time::interval(period);
    loop {
        tick.tick().await;
        match services.control.expire_overdue().await {
            Ok(0) => {}
            Ok(n) => tracing::info!(controls = n, "controls without ack ended in exception"),
            Err(e) => tracing::warn!(error = %e, "ack sweep failed"),
        }
    }
}

/// Adds the events counted per project and minute to the store's counts, every
/// `event_rate::FLUSH_PERIOD` (and once more at shutdown, after ingest drained), and deletes
/// the counts past the overview's window every `event_rate::PURGE_PERIOD`.
pub(crate) async fn flush_event_rate(services: Arc<Services>) {
    let mut flush = tokio::time::interval(gantry_core::event_rate::FLUSH_PERIOD);
    let mut purge = tokio::time::interval(gantry_core::event_rate::PURGE_PERIOD);
    loop {
        tokio::select! {
            _ = flush.tick() => {
                if let Err(e) = services.event_rate.flush().await {
                    tracing::warn!(error = %e, "events per minute not written; kept for the next flush");
                }
            }
            _ = purge.tick() => {
                if let Err(e) = services.event_rate.purge(gantry_core::time::now_ms()).await {
                    tracing::warn!(error = %e, "old events per minute not deleted");
                }
            }
        }
    }
}
