//! PostgreSQL's hour rollups, folded from the minute rows in the background rather than upserted
//! by every ingest transaction, where they would double the rollup rows each event writes.
//!
//! Invariant: an hour row sums up exactly the events of its hour whose device time is before the
//! fold mark (`device_event_rollup_folds.folded_through`, a minute's start); the minute rows hold
//! every event. A series therefore adds the minute rows from the mark on to the hour rows, in one
//! statement and so one snapshot. Ingest adds an event to its hour row only when it is late
//! (before the mark); a fold adds the minutes between the old mark and the new one to their hours
//! and moves the mark, in one transaction. Every transaction that reads the mark to write rollups
//! holds the fold lock shared until it commits and a fold holds it exclusively, so the mark never
//! passes a minute a writer has just left to the fold.

use std::time::Duration;

use gantry_core::Result;
use sqlx::{Any, AnyPool, Transaction};

use super::rollups::{HOUR_MS, MINUTE_MS, PARTIAL, bucket_sql, combine, upsert_from};
use crate::row::get;

/// The fold lock's key (a PostgreSQL advisory lock): a constant no other part of Gantry uses.
const FOLD_LOCK: i64 = 0x6761_6e74_7279_0001;

/// How far the mark stays behind the clock: the minutes devices are still sending into stay with
/// the minute rows, so that their events do not become late upserts of the hour rows.
const FOLD_LAG_MS: i64 = 2 * MINUTE_MS;

/// How often a node tries to move the mark. It moves a minute at a time; a try that finds
/// nothing to fold reads one row and takes no lock.
pub(crate) const FOLD_PERIOD: Duration = Duration::from_secs(10);

/// Takes the fold lock shared for the rest of `tx` and reads the mark: events before it go into
/// their hour rows in `tx` too.
pub(crate) async fn mark(tx: &mut Transaction<'static, Any>) -> Result<i64> {
    sqlx::query("SELECT pg_advisory_xact_lock_shared($1)")
        .bind(FOLD_LOCK)
        .execute(&mut **tx)
        .await
        .map_err(crate::error::db_error)?;
    read_mark(&mut **tx).await
}

/// The mark as `executor` sees it now (migration 0021 keeps its one row).
async fn read_mark<'e>(executor: impl sqlx::Executor<'e, Database = Any>) -> Result<i64> {
    let row = sqlx::query("SELECT folded_through FROM device_event_rollup_folds")
        .fetch_one(executor)
        .await
        .map_err(crate::error::db_error)?;
    get(&row, "folded_through")
}

/// The condition, for a statement over device_event_rollups, that picks the minute rows not yet
/// folded into their hours (read in the statement's own snapshot, as its hour rows are).
pub(crate) const UNFOLDED: &str = "bucket >= (SELECT folded_through FROM device_event_rollup_folds)";

/// Moves the mark to `FOLD_LAG_MS` before `now` (rounded down to a minute) if it is behind;
/// returns whether it moved.
pub(crate) async fn fold(pool: &AnyPool, now: i64) -> Result<bool> {
    fold_through(pool, (now - FOLD_LAG_MS).div_euclid(MINUTE_MS) * MINUTE_MS).await
}

/// Folds every minute row kept into its hour: for bulk loads and tests, which want every
/// read on the hour rows alone.
pub(crate) async fn fold_all(pool: &AnyPool) -> Result<bool> {
    let row = sqlx::query(&format!(
        "SELECT COALESCE(MAX(bucket), 0) AS newest FROM device_event_rollups WHERE width = {MINUTE_MS} AND {UNFOLDED}"
    ))
    .fetch_one(pool)
    .await
    .map_err(crate::error::db_error)?;
    fold_through(pool, get::<i64>(&row, "newest")?.saturating_add(MINUTE_MS)).await
}

/// Folds the minutes before `through` (a minute's start) into their hours, unless the mark is
/// there already; returns whether it moved. Writers wait while it runs: one fold holds a minute's
/// worth of minute rows per device and attribute.
pub(crate) async fn fold_through(pool: &AnyPool, through: i64) -> Result<bool> {
    if read_mark(pool).await? >= through {
        return Ok(false);
    }
    let mut tx = pool.begin().await.map_err(crate::error::db_error)?;
    sqlx::query("SELECT pg_advisory_xact_lock($1)")
        .bind(FOLD_LOCK)
        .execute(&mut *tx)
        .await
        .map_err(crate::error::db_error)?;
    // Read again under the lock: another node may have folded meanwhile.
    let from = read_mark(&mut *tx).await?;
    if from >= through {
        return Ok(false);
    }
    // Every device and attribute with events has a shadow row: its minute rows by primary key.
    let minutes = format!(
        "device_shadows AS k JOIN device_event_rollups AS r ON r.device_id = k.device_id \
         AND r.attribute_code = k.attribute_code AND r.width = {MINUTE_MS} \
         AND r.bucket >= {from} AND r.bucket < {through}"
    );
    let statement = upsert_from(&minutes, &[HOUR_MS], |source, width| {
        let rows = format!(
            "SELECT r.device_id, r.attribute_code, {width} AS width, {} AS grp, {PARTIAL} FROM {source}",
            bucket_sql("r.bucket", width, 0)
        );
        combine("device_id, attribute_code, width, ", &rows, true)
    });
    sqlx::query(&statement)
        .execute(&mut *tx)
        .await
        .map_err(crate::error::db_error)?;
    sqlx::query("UPDATE device_event_rollup_folds SET folded_through = $1")
        .bind(through)
        .execute(&mut *tx)
        .await
        .map_err(crate::error::db_error)?;
    tx.commit().await.map_err(crate::error::db_error)?;
    Ok(true)
}
