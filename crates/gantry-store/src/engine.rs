//! The seam between the shared SQL and an engine: what `SqlStore::from_engine` gets from the engine
//! it picked (`Connected`), and the trait the store reaches the engine's event path through
//! (`EventEngine`). Everything that differs between engines is behind these two, chosen once at
//! connect: shared code holds no engine branch.

use std::fmt::Debug;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use gantry_core::Result;
use gantry_core::ids::{DeviceId, ProjectId, WebhookId};
use gantry_core::store::EventStore;
use gantry_core::webhook::OutboxKey;
use sqlx::any::AnyPoolOptions;
use sqlx::{AnyConnection, AnyPool};

/// An engine, connected, its schema up to date and its background tasks started.
pub struct Connected {
    /// Reads (and, where the engine wants it so, the catalog's writes).
    pub pool: AnyPool,
    /// The catalog's writes (`SqlStore::begin_write`).
    pub writer: AnyPool,
    /// The event logs' writes (`SqlStore::begin_log_write`): where the engine's own work holds
    /// `writer` for long (SQLite's moves), a connection apart, so that a control never waits for
    /// it; else `writer`.
    pub log_writer: AnyPool,
    pub dialect: &'static Dialect,
    pub events: Arc<dyn EventEngine>,
    /// When the catalog's writes last asked for `writer`.
    pub api_writes: Arc<ApiWrites>,
}

/// When the API's catalog writes last asked for `Connected::writer`, for an
/// engine whose background work writes through the same connection (SQLite's mover). The pool
/// queues its waiters in order, so an API write that waits goes before the engine's next
/// transaction; what it can still meet is the one in flight, which the engine keeps short while
/// API writes come. An engine with no
/// such work ignores it.
#[derive(Debug, Default)]
pub struct ApiWrites {
    last: Mutex<Option<Instant>>,
}

impl ApiWrites {
    /// An API write asks for the writer now; it calls this again once it has the writer, so that
    /// `since` counts from the later of the two.
    pub fn asking(&self) {
        *self.last.lock().expect("not poisoned") = Some(Instant::now());
    }

    /// As `asking`, at `at` (ahead of now): a test's writes that keep coming across a stall of
    /// its own thread, as a loaded machine makes them (the engines' tests).
    #[doc(hidden)]
    pub fn asking_at(&self, at: Instant) {
        *self.last.lock().expect("not poisoned") = Some(at);
    }

    /// How long ago an API write last asked for the writer, if one ever did.
    pub fn since(&self) -> Option<Duration> {
        self.last.lock().expect("not poisoned").map(|last| last.elapsed())
    }

    /// Whether an API write asked for the writer within `window`.
    pub fn asked_within(&self, window: Duration) -> bool {
        self.since().is_some_and(|since| since < window)
    }
}

/// What the shared SQL spells differently per engine, as data.
#[derive(Debug)]
pub struct Dialect {
    /// `sqlite` or `postgres`, as `SqlStore::backend` reports it.
    pub name: &'static str,
    /// After a text column in ORDER BY: names sort by code point on every engine.
    pub collate: &'static str,
    /// After the SELECT that checks a model or project is live, in a transaction that writes a
    /// device using it, and in one that deletes it (`shared::soft_delete`).
    pub lock_in_use: &'static str,
    pub lock_to_delete: &'static str,
    /// The event logs' table, and the outbox their writes put webhook events into (in the same
    /// transaction, so on the same connection: `Connected::log_writer`). SQLite keeps both in a
    /// file of their own; its outbox is read through `EventEngine::engine_outbox_waiting`. The
    /// alarms, their history and states are written through that connection too, their webhook
    /// events into that outbox (SQLite keeps them in that file as well).
    pub event_logs: &'static str,
    pub log_outbox: &'static str,
    /// The audit log, written through that connection too: a control's record commits with
    /// its event log (SQLite keeps it in the event-log file as well).
    pub audit_logs: &'static str,
}

/// An engine's event path: the events, the shadows and the kept counts (`EventStore`), and its
/// life cycle. Each engine owns its connections and files; the store calls it once per batch or
/// request, never per event.
#[async_trait]
pub trait EventEngine: EventStore + Debug {
    /// Puts every event the engine holds apart from its listing tables, and every rollup it
    /// folds later, in place now; returns how many events. For bulk loads and tests: reads see
    /// the events either way.
    async fn catch_up(&self) -> Result<u64> {
        Ok(0)
    }

    /// Closes the engine's pools, waiting for connections in use, and lets its files go.
    async fn close(&self);

    /// The oldest rows of webhook events the engine's commits wrote apart from the main
    /// tables' outbox (SQLite's staging file, where `commit_events` writes its outbox, and its
    /// event-log file), up to `limit` rows, keyed with the engine's number of each outbox
    /// (`OutboxKey`); the caller's `merge_by_time` keeps those that hold `limit` events. An
    /// engine that writes the main outbox alone has none.
    async fn engine_outbox_waiting(
        &self,
        _slot: u8,
        _project: &ProjectId,
        _limit: usize,
    ) -> Result<Vec<crate::outbox::WaitingRow>> {
        Ok(Vec::new())
    }

    /// Takes the events `keys` (from `engine_outbox_waiting`) out of the outboxes kept apart for the
    /// webhook in `slot`; all of them when `keys` is None (the webhook is deleted).
    async fn engine_outbox_drop(&self, _slot: u8, _keys: Option<&[OutboxKey]>) -> Result<()> {
        Ok(())
    }

    /// Puts the alarm keeps the engine holds apart from the alarms (SQLite stages them with their
    /// events: `EventStore::commit_events_keeping`) into the alarms and their states, for
    /// `devices` (all when None), in `tx`: a transaction of the event-log writer that writes
    /// alarms calls this first, so that it starts from the alarms as reads see them. Putting a
    /// keep in twice changes nothing (it is written only over an older state version). An
    /// engine that keeps none has nothing to do.
    async fn fold_alarm_keeps(&self, _tx: &mut AnyConnection, _devices: Option<&[&DeviceId]>) -> Result<()> {
        Ok(())
    }

    /// Puts the keeps the engine holds apart into the alarms and their states before a read of
    /// what a keep changes (an alarm's count, value and times; a state's no-data clock), so that
    /// the read shows every event acknowledged. An engine that keeps none has nothing to do.
    async fn fold_before_alarm_read(&self) -> Result<()> {
        Ok(())
    }

    /// Lays the keeps the engine holds apart for `device` over what an evaluation's snapshot
    /// read of some of its keys (key, state, open alarm), as a fold would put them. An engine
    /// that keeps none leaves `read` as it is.
    fn lay_alarm_keeps(
        &self,
        _device: &DeviceId,
        _read: &mut [(
            String,
            gantry_core::alarm::AlarmState,
            Option<gantry_core::alarm::Alarm>,
        )],
    ) {
    }

    /// What an operator watches of the engine (`SqlStore::stats`): its pools, and what it
    /// holds apart and on disk where it keeps such things.
    fn stats(&self) -> EngineStats;

    /// Whether the node `owner` holds the delivery lease of `webhook` until `until`, taken when
    /// free or expired at `now` (`WebhookStore::lease_webhook`): nodes that share the database
    /// take turns through the webhook's row (`take_webhook_lease`); an engine whose database one
    /// process opens at a time (SQLite's lock file) holds every lease.
    async fn lease_webhook(&self, webhook: &WebhookId, owner: &str, now: i64, until: i64) -> Result<bool>;
}

/// The lease of `webhook` for `owner` until `until`, taken when it is `owner`'s already or
/// expired at `now`: one row update, so of two nodes asking at once one gets it.
pub async fn take_webhook_lease(
    pool: &AnyPool,
    webhook: &WebhookId,
    owner: &str,
    now: i64,
    until: i64,
) -> Result<bool> {
    let leased = sqlx::query(
        "UPDATE webhooks SET lease_owner = $1, lease_until = $2 \
         WHERE id = $3 AND (lease_owner = $1 OR lease_until <= $4)",
    )
    .bind(owner)
    .bind(until)
    .bind(webhook.as_str())
    .bind(now)
    .execute(pool)
    .await
    .map_err(crate::error::db_error)?
    .rows_affected();
    Ok(leased == 1)
}

/// An engine's part of `StoreStats`.
#[derive(Debug, Clone, Default)]
pub struct EngineStats {
    pub pools: Vec<crate::stats::PoolStats>,
    pub staged_events: Option<usize>,
    pub wal_bytes: Vec<(&'static str, u64)>,
}

/// Connections for reads and the API's writes, on every engine.
pub const POOL_SIZE: u32 = 8;

/// A pool of `size` connections. A request waits at most `ACQUIRE_TIMEOUT` for a connection:
/// while the database is unreachable it then answers 503 (store unavailable) instead of holding
/// the client for sqlx's default 30 s.
pub fn pool_options(size: u32) -> AnyPoolOptions {
    const ACQUIRE_TIMEOUT: Duration = Duration::from_secs(5);
    AnyPoolOptions::new()
        .max_connections(size)
        .acquire_timeout(ACQUIRE_TIMEOUT)
}
