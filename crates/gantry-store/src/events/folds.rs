//! PostgreSQL's rollups, folded from device_events in the background by arrival time rather than
//! upserted by every ingest transaction, where they would add a rollup row per device and
//! attribute of each batch to the rows it writes.
//!
//! Invariant: the rollup rows (minutes and hours) sum up exactly the events of device_events
//! that arrived before the fold mark (`device_event_rollup_folds.ingested_through`, an ingress
//! time). A series therefore adds to them the events of its device and attribute that arrived
//! from the mark on, in one statement and so one snapshot. A fold adds the events between the old
//! mark and the new one to their minutes and hours and moves the mark, in one transaction; ingest
//! adds an event to its rollups itself only when it is late (arrived before the mark). Every
//! transaction that reads the mark to write events or rollups holds the fold lock shared until it
//! commits and a fold holds it exclusively, so the mark never passes an event a writer has just
//! left to the fold.

use std::time::Duration;

use gantry_core::Result;
use sqlx::{Any, AnyPool, Transaction};

use super::rollups::{HOUR_MS, MINUTE_MS, upsert};
use crate::row::get;

/// The fold lock's key (a PostgreSQL advisory lock): a constant no other part of Gantry uses.
const FOLD_LOCK: i64 = 0x6761_6e74_7279_0001;

/// How far the mark stays behind the clock: longer than a batch waits for its commit, also behind
/// a backlog, so that ingest seldom finds its events late (each late key costs a rollup row in the
/// ingest transaction); a series reads this much of a device's newest events raw.
const FOLD_LAG_MS: i64 = 30_000;

/// How often a node moves the mark: writers wait for the fold lock while a fold runs, so a fold
/// holds little; each one writes a row per device, attribute and width it saw, so folds far
/// apart write fewer. Measured: docs/PERFORMANCE.md, "The rollups folded by arrival time".
pub(crate) const FOLD_PERIOD: Duration = Duration::from_secs(1);

/// Takes the fold lock shared for the rest of `tx` and reads the mark: events that arrived
/// before it go into their rollups in `tx` too.
pub(crate) async fn mark(tx: &mut Transaction<'static, Any>) -> Result<i64> {
    sqlx::query("SELECT pg_advisory_xact_lock_shared($1)")
        .bind(FOLD_LOCK)
        .execute(&mut **tx)
        .await
        .map_err(crate::error::db_error)?;
    read_mark(&mut **tx).await
}

/// The mark as `executor` sees it now (migration 0023 keeps its one row).
pub(crate) async fn read_mark<'e>(executor: impl sqlx::Executor<'e, Database = Any>) -> Result<i64> {
    let row = sqlx::query("SELECT ingested_through FROM device_event_rollup_folds")
        .fetch_one(executor)
        .await
        .map_err(crate::error::db_error)?;
    get(&row, "ingested_through")
}

/// The condition, for a statement over device_events, that picks the events not yet in the
/// rollups (read in the statement's own snapshot, as its rollup rows are).
const UNFOLDED: &str = "ingress_ts >= (SELECT ingested_through FROM device_event_rollup_folds)";

/// `UNFOLDED`, given a mark read before (`read_mark`), which the mark only ever passes: with it,
/// PostgreSQL plans for the few newest events and reads them by arrival, where it would plan
/// for a share of the device's events (the mark's value unknown) and read its whole window.
pub(crate) fn unfolded(read_before: i64) -> String {
    format!("ingress_ts >= {read_before} AND {UNFOLDED}")
}

/// Moves the mark to `FOLD_LAG_MS` before `now` if it is behind; returns whether it moved.
pub(crate) async fn fold(pool: &AnyPool, now: i64) -> Result<bool> {
    fold_through(pool, now - FOLD_LAG_MS).await
}

/// Folds every event stored into the rollups: for bulk loads and tests, which want every read
/// on the rollups alone.
pub(crate) async fn fold_all(pool: &AnyPool) -> Result<bool> {
    let row = sqlx::query(&format!(
        "SELECT COALESCE(MAX(ingress_ts), 0) AS newest FROM device_events WHERE {}",
        unfolded(read_mark(pool).await?)
    ))
    .fetch_one(pool)
    .await
    .map_err(crate::error::db_error)?;
    fold_through(pool, get::<i64>(&row, "newest")?.saturating_add(1)).await
}

/// Folds the events that arrived before `through` into their minutes and hours, unless the mark
/// is there already; returns whether it moved. Writers wait while it runs.
pub(crate) async fn fold_through(pool: &AnyPool, through: i64) -> Result<bool> {
    if read_mark(pool).await? >= through {
        return Ok(false);
    }
    summarize_arrivals(pool).await?;
    let started = std::time::Instant::now();
    let mut tx = pool.begin().await.map_err(crate::error::db_error)?;
    sqlx::query("SELECT pg_advisory_xact_lock($1)")
        .bind(FOLD_LOCK)
        .execute(&mut *tx)
        .await
        .map_err(crate::error::db_error)?;
    let locked = started.elapsed();
    // Read again under the lock: another node may have folded meanwhile.
    let from = read_mark(&mut *tx).await?;
    if from >= through {
        return Ok(false);
    }
    // By the arrival index, whatever the statistics say: a sequential scan would read the table
    // with writers waiting.
    sqlx::query("SET LOCAL enable_seqscan = off")
        .execute(&mut *tx)
        .await
        .map_err(crate::error::db_error)?;
    let arrived = format!("device_events WHERE ingress_ts >= {from} AND ingress_ts < {through}");
    let rows = sqlx::query(&upsert(&arrived, &[MINUTE_MS, HOUR_MS]))
        .execute(&mut *tx)
        .await
        .map_err(crate::error::db_error)?
        .rows_affected();
    sqlx::query("UPDATE device_event_rollup_folds SET ingested_through = $1")
        .bind(through)
        .execute(&mut *tx)
        .await
        .map_err(crate::error::db_error)?;
    tx.commit().await.map_err(crate::error::db_error)?;
    tracing::debug!(
        through,
        rows,
        waited_ms = locked.as_secs_f64() * 1e3,
        took_ms = (started.elapsed() - locked).as_secs_f64() * 1e3,
        "rollups folded"
    );
    Ok(true)
}

/// Brings the arrival index (migration 0023) up to the newest rows, outside the fold lock. A BRIN
/// index reads every page range it has not summed up yet, and PostgreSQL sums up the newest
/// only in its own time: without this a fold would read everything stored since. Where a vacuum
/// holds the table it gives up quickly; the fold is as exact, only slower.
async fn summarize_arrivals(pool: &AnyPool) -> Result<()> {
    let mut tx = pool.begin().await.map_err(crate::error::db_error)?;
    sqlx::query("SET LOCAL lock_timeout = '100ms'")
        .execute(&mut *tx)
        .await
        .map_err(crate::error::db_error)?;
    match sqlx::query("SELECT brin_summarize_new_values('device_events_by_arrival')")
        .execute(&mut *tx)
        .await
    {
        Ok(_) => tx.commit().await.map_err(crate::error::db_error),
        Err(e) => {
            tracing::debug!(error = %e, "the arrival index was not summed up");
            Ok(())
        }
    }
}
