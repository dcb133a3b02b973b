//! On SQLite, the move of events from device_events_recent, where ingest commits them, into
//! device_events. PostgreSQL does not stage (see `SqlStore::stages_events`).
//!
//! Why: an ingest commit holds at most a few events per device (a device's next message waits
//! for the acknowledgement of its last), so writing into device_events directly dirtied a page
//! of each of its three per-device indexes for nearly every event, and the shadow and count rows
//! of each device besides. Staging in a small table and moving each device's accumulated events
//! together writes those pages once per move.
//!
//! A move takes the staged events of a range of devices in one transaction under SQLite's single
//! writer: an INSERT of the range into device_events, the shadows and kept counts brought up to
//! it (`settle_shadows`, `count_staged`), and a DELETE of the range. The staging table is
//! clustered by device (migration 0007), so the range lies on a few neighbouring pages. Readers
//! see an event in one table or the other, never both and never neither: listings, shadows and
//! totals read the two tables in one statement, and deletes look in device_events_recent first
//! (see events.rs).
//!
//! Measured with gantry-bench ingest-rest on 2 cores (SQLite, 1,000 devices, 64 connections):
//! 7,300 POSTs/s at p99 68 ms with the shadows and counts written by each ingest commit and an
//! unclustered staging table (a move of 500 events then took 20 ms, 13 of them its commit);
//! 7,500/s settling them in the moves; 9,900/s at p99 40–53 ms with the clustered table (moves
//! of 500 in 13 ms, 6 of them the commit). Moves every 5 s measured the same as every second.

use std::time::Duration;

use gantry_core::{Error, Result};
use sqlx::AnyPool;

use crate::events::{COLUMNS, count_staged, settle_shadows};
use crate::sql::Sql;

/// How often staged events are moved. At 25,000 events/s from 1,000 devices a move finds about 25
/// per device; readers meanwhile find them in the small table by its device key.
pub(crate) const MERGE_EVERY: Duration = Duration::from_secs(1);

/// Staged events moved per transaction at most (whole devices, so sometimes a few more): short
/// enough that an ingest commit waiting for SQLite's writer waits tens of milliseconds, not a
/// whole move. 250 measured a slightly lower ingest-rest p99 (62–66 against 70–71 ms, back to back
/// on one machine) but 18 % fewer POSTs/s: more commits, each with its fsync.
const ROWS_PER_MOVE: i64 = 500;

/// Moves every staged event; returns how many moved. Events staged during the walk behind its
/// position wait for the next walk.
pub(crate) async fn merge_recent(writer: &AnyPool) -> Result<u64> {
    let mut after = String::new();
    let mut moved = 0;
    loop {
        let step = move_range(writer, &after).await?;
        moved += step.rows;
        match step.last {
            Some(last) => after = last,
            None => return Ok(moved),
        }
    }
}

/// One move: how many events it took and the last device of its range (None: it took all).
struct Step {
    rows: u64,
    last: Option<String>,
}

/// The last device of the next range after `after`, or None when at most `ROWS_PER_MOVE`
/// staged events remain after it.
const RANGE_END: &str = "SELECT device_id FROM device_events_recent WHERE device_id > $1 \
                         ORDER BY device_id LIMIT 1 OFFSET $2";

async fn move_range(writer: &AnyPool, after: &str) -> Result<Step> {
    let mut tx = writer.begin_with("BEGIN IMMEDIATE").await.map_err(Error::store)?;
    let last: Option<String> = sqlx::query_scalar(RANGE_END)
        .bind(after)
        .bind(ROWS_PER_MOVE)
        .fetch_optional(&mut *tx)
        .await
        .map_err(Error::store)?;
    let mut range = Sql::new("device_id > ");
    range.bind(after);
    if let Some(last) = &last {
        range.push(" AND device_id <= ").bind(last.as_str());
    }
    // In index order: each device's events go into its part of each index side by side.
    let mut insert = range.prefixed(&format!(
        "INSERT INTO device_events ({COLUMNS}) SELECT {COLUMNS} FROM device_events_recent WHERE "
    ));
    insert.push(" ORDER BY device_id, device_ts, id");
    let rows = insert
        .query()
        .execute(&mut *tx)
        .await
        .map_err(Error::store)?
        .rows_affected();
    settle_shadows(&mut tx, &range).await?;
    count_staged(&mut tx, &range).await?;
    let deleted = range
        .prefixed("DELETE FROM device_events_recent WHERE ")
        .query()
        .execute(&mut *tx)
        .await
        .map_err(Error::store)?
        .rows_affected();
    if deleted != rows {
        // The single writer holds the database: nothing can have changed in between.
        let message = format!("moving staged events: inserted {rows} but deleted {deleted}");
        return Err(Error::Store(message.into()));
    }
    tx.commit().await.map_err(Error::store)?;
    Ok(Step { rows, last })
}
