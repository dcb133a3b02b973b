//! PostgreSQL's rollups, folded from device_events in the background by arrival time rather than
//! upserted by every ingest transaction, where they would add a rollup row per device and
//! attribute of each batch to the rows it writes.
//!
//! Invariant: the rollup rows (minutes and hours) sum up exactly the events of device_events
//! that arrived before the fold mark (`device_event_rollup_folds.ingested_through`, an ingress
//! time). A series therefore adds to them the events of its device and attribute that arrived
//! from the mark on, in one statement and so one snapshot. A fold adds the events between the
//! mark and a new one to their minutes and hours and moves the mark, in one transaction; ingest
//! adds an event to its rollups itself only when it is late (arrived before the mark).
//!
//! The writers do not wait for a fold's summing. A fold first moves a fence
//! (`folding_through`) to where it will fold through, holding the fold lock exclusively for
//! that moment only: every transaction that reads the marks to write events holds that lock
//! shared until it commits, so once the fence is up every event below it is committed, and a
//! writer that reads the marks after it and finds one of its events between the mark and the
//! fence waits for the fold to end (and then writes it as late). The range a fold sums up so no
//! longer changes while it runs; deletes, which would change it, wait for a running fold.

use std::time::{Duration, Instant};

use gantry_core::Result;
use sqlx::pool::PoolConnection;
use sqlx::{Any, AnyPool, Transaction};

use gantry_store::events::rollups::{HOUR_MS, MINUTE_MS, unfolded, upsert};
use gantry_store::row::get;

/// The fold lock's key (a PostgreSQL advisory lock): a constant no other part of Gantry uses.
/// Writers hold it shared while they write; a fold holds it exclusively to move the fence.
const FOLD_LOCK: i64 = 0x6761_6e74_7279_0001;

/// Held by a running fold for its whole length (exclusively), and by deletes (shared): one fold
/// at a time across the nodes, and no delete while one sums up. Always taken before
/// `FOLD_LOCK`, so the two never wait for each other in a circle.
const FOLD_RUNNING: i64 = 0x6761_6e74_7279_0002;

/// How far the mark stays behind the clock: longer than a batch waits for its commit, also behind
/// a backlog, so that ingest seldom finds its events late (each late key costs a rollup row in the
/// ingest transaction) or below the fence; a series reads this much of a device's newest events
/// raw.
const FOLD_LAG_MS: i64 = 30_000;

/// How often a node moves the mark: each fold writes a row per device, attribute and width it
/// saw, so folds far apart write fewer; a series reads the events since the mark raw.
pub(crate) const FOLD_PERIOD: Duration = Duration::from_secs(1);

/// How often a writer that found its events below the fence looks whether the fold has ended.
const FENCE_POLL: Duration = Duration::from_millis(10);

/// The marks as a writer reads them.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Marks {
    /// The fold mark: events that arrived before it are in their rollups.
    pub(crate) folded: i64,
    /// Where the running fold (if any) folds through; never below `folded`.
    pub(crate) fence: i64,
}

impl Marks {
    /// Whether an event that arrived at `ingress` is in the range a running fold sums up.
    pub(crate) fn folding(&self, ingress: i64) -> bool {
        ingress >= self.folded && ingress < self.fence
    }
}

/// Takes the fold lock shared for the rest of `tx` and reads the marks: events that arrived
/// before `folded` go into their rollups in `tx` too; with an event `folding`, the writer is to
/// roll `tx` back and `wait_folded` first.
pub(crate) async fn marks(tx: &mut Transaction<'static, Any>) -> Result<Marks> {
    advisory(&mut **tx, "pg_advisory_xact_lock_shared", FOLD_LOCK).await?;
    let row = sqlx::query("SELECT ingested_through, folding_through FROM device_event_rollup_folds")
        .fetch_one(&mut **tx)
        .await
        .map_err(gantry_store::error::db_error)?;
    Ok(Marks {
        folded: get(&row, "ingested_through")?,
        fence: get(&row, "folding_through")?,
    })
}

/// For a delete: waits for a running fold to end, keeps the next from starting and takes the
/// fold lock shared, for the rest of `tx`, and reads the mark.
pub(crate) async fn mark_for_delete(tx: &mut Transaction<'static, Any>) -> Result<i64> {
    advisory(&mut **tx, "pg_advisory_xact_lock_shared", FOLD_RUNNING).await?;
    Ok(marks(tx).await?.folded)
}

/// Waits until the mark has reached `fence`: the fold that put the fence up has ended (or, if
/// it failed, a later one).
pub(crate) async fn wait_folded(pool: &AnyPool, fence: i64) -> Result<()> {
    while read_mark(pool).await? < fence {
        tokio::time::sleep(FENCE_POLL).await;
    }
    Ok(())
}

/// The mark as `executor` sees it now (its table holds one row).
pub(crate) async fn read_mark<'e>(executor: impl sqlx::Executor<'e, Database = Any>) -> Result<i64> {
    let row = sqlx::query("SELECT ingested_through FROM device_event_rollup_folds")
        .fetch_one(executor)
        .await
        .map_err(gantry_store::error::db_error)?;
    get(&row, "ingested_through")
}

/// Calls the advisory lock function `function` on `key`.
async fn advisory<'e>(executor: impl sqlx::Executor<'e, Database = Any>, function: &str, key: i64) -> Result<()> {
    sqlx::query(&format!("SELECT {function}($1)"))
        .bind(key)
        .execute(executor)
        .await
        .map_err(gantry_store::error::db_error)?;
    Ok(())
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
    .map_err(gantry_store::error::db_error)?;
    fold_through(pool, get::<i64>(&row, "newest")?.saturating_add(1)).await
}

/// Folds the events that arrived before `through` into their minutes and hours, unless the mark
/// is there already; returns whether it moved. Writers wait only while the fence goes up.
pub(crate) async fn fold_through(pool: &AnyPool, through: i64) -> Result<bool> {
    if read_mark(pool).await? >= through {
        return Ok(false);
    }
    summarize_arrivals(pool).await?;
    let mut conn = SessionLocks(Some(pool.acquire().await.map_err(gantry_store::error::db_error)?));
    let folded = fold_on(conn.0.as_mut().expect("acquired above"), through).await;
    conn.release().await;
    folded
}

/// A connection that may hold session-level advisory locks, which outlive its transactions: it
/// goes back to the pool only once `release` has let go of them, and is closed otherwise (a fold
/// cancelled halfway, or an unlock that failed), so that no lock stays held by an idle connection.
struct SessionLocks(Option<PoolConnection<Any>>);

impl SessionLocks {
    async fn release(mut self) {
        let Some(conn) = self.0.as_mut() else { return };
        if sqlx::query("SELECT pg_advisory_unlock_all()")
            .execute(&mut **conn)
            .await
            .is_ok()
        {
            // Back to the pool; on failure `drop` closes it.
            self.0.take();
        }
    }
}

impl Drop for SessionLocks {
    fn drop(&mut self) {
        if let Some(conn) = self.0.as_mut() {
            conn.close_on_drop();
        }
    }
}

async fn fold_on(conn: &mut PoolConnection<Any>, through: i64) -> Result<bool> {
    let started = Instant::now();
    advisory(&mut **conn, "pg_advisory_lock", FOLD_RUNNING).await?;
    // Read again now that no other fold runs: another node may have folded meanwhile.
    let from = read_mark(&mut **conn).await?;
    if from >= through {
        return Ok(false);
    }
    let fencing = Instant::now();
    advisory(&mut **conn, "pg_advisory_lock", FOLD_LOCK).await?;
    // A fence left higher by a fold that failed stays: writers may have written above it.
    let row = sqlx::query(
        "UPDATE device_event_rollup_folds SET folding_through = GREATEST(folding_through, $1) \
         RETURNING folding_through",
    )
    .bind(through)
    .fetch_one(&mut **conn)
    .await
    .map_err(gantry_store::error::db_error)?;
    advisory(&mut **conn, "pg_advisory_unlock", FOLD_LOCK).await?;
    let fenced = fencing.elapsed();
    let through: i64 = get(&row, "folding_through")?;

    let summing = Instant::now();
    let mut tx = sqlx::Connection::begin(&mut **conn)
        .await
        .map_err(gantry_store::error::db_error)?;
    // By the arrival index, whatever the statistics say: a sequential scan would read the table.
    // Without JIT: a plan with sequential scans off costs above PostgreSQL's JIT thresholds, and
    // compiling it (even the one-row update of the mark) took far longer than running it.
    for setting in ["SET LOCAL enable_seqscan = off", "SET LOCAL jit = off"] {
        sqlx::query(setting)
            .execute(&mut *tx)
            .await
            .map_err(gantry_store::error::db_error)?;
    }
    let arrived = format!("device_events WHERE ingress_ts >= {from} AND ingress_ts < {through}");
    let rows = sqlx::query(&upsert(&arrived, &[MINUTE_MS, HOUR_MS]))
        .execute(&mut *tx)
        .await
        .map_err(gantry_store::error::db_error)?
        .rows_affected();
    sqlx::query("UPDATE device_event_rollup_folds SET ingested_through = $1")
        .bind(through)
        .execute(&mut *tx)
        .await
        .map_err(gantry_store::error::db_error)?;
    tx.commit().await.map_err(gantry_store::error::db_error)?;
    tracing::debug!(
        through,
        rows,
        waited_ms = (fencing - started).as_secs_f64() * 1e3,
        fenced_ms = fenced.as_secs_f64() * 1e3,
        took_ms = summing.elapsed().as_secs_f64() * 1e3,
        "rollups folded"
    );
    Ok(true)
}

/// Brings the arrival index (`device_events_by_arrival`) up to the newest rows, outside the fold lock. A BRIN
/// index reads every page range it has not summed up yet, and PostgreSQL sums up the newest
/// only in its own time: without this a fold would read everything stored since. Where a vacuum
/// holds the table it gives up quickly; the fold is as exact, only slower.
async fn summarize_arrivals(pool: &AnyPool) -> Result<()> {
    let mut tx = pool.begin().await.map_err(gantry_store::error::db_error)?;
    sqlx::query("SET LOCAL lock_timeout = '100ms'")
        .execute(&mut *tx)
        .await
        .map_err(gantry_store::error::db_error)?;
    match sqlx::query("SELECT brin_summarize_new_values('device_events_by_arrival')")
        .execute(&mut *tx)
        .await
    {
        Ok(_) => tx.commit().await.map_err(gantry_store::error::db_error),
        Err(e) => {
            tracing::debug!(error = %e, "the arrival index was not summed up");
            Ok(())
        }
    }
}
