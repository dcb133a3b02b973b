//! On SQLite, the move of events from device_events_recent, where ingest commits them, into
//! device_events. PostgreSQL does not stage (see `SqlStore::stages_events`).
//!
//! Why: an ingest commit holds at most a few events per device (a device's next message waits
//! for the acknowledgement of its last), so writing into device_events directly dirtied a page
//! of each of its three per-device indexes for nearly every event. Appending to a small table
//! and moving each device's accumulated events together writes those pages once per move.
//!
//! A move takes the staged events of a range of devices in one transaction, an INSERT of the
//! range and a DELETE of the same range, under SQLite's single writer. Readers see an event in one
//! table or the other, never both and never neither: listings read the two tables in one
//! statement (and fetch a page's rows from both), and deletes look in device_events_recent first
//! (see events.rs).
//!
//! Measured with gantry-bench on 2 cores, SQLite, 1,000 devices: MQTT ingest sustains 6,000
//! events/s (7,300 stored at 8,000 offered) where it sustained 4,000; single-event REST posts at
//! 64 connections stay near 4,500/s but their p99 grows from 68 to about 130 ms, commits waiting
//! behind moves (with no moves at all, 5,400/s at 46 ms). Moves every 5 s or of 100 rows measured
//! worse on both.

use std::time::Duration;

use gantry_core::{Error, Result};
use sqlx::AnyPool;

use crate::events::COLUMNS;

/// How often staged events are moved. At 25,000 events/s from 1,000 devices a move finds about 25
/// per device; readers meanwhile find them in the small table through its device index.
pub(crate) const MERGE_EVERY: Duration = Duration::from_secs(1);

/// Staged events moved per transaction at most (whole devices, so sometimes a few more): short
/// enough that an ingest commit waiting for SQLite's writer waits tens of milliseconds, not a
/// whole move.
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

fn range(last: &Option<String>) -> &'static str {
    if last.is_some() {
        "device_id > $1 AND device_id <= $2"
    } else {
        "device_id > $1"
    }
}

async fn move_range(writer: &AnyPool, after: &str) -> Result<Step> {
    let mut tx = writer.begin_with("BEGIN IMMEDIATE").await.map_err(Error::store)?;
    let last: Option<String> = sqlx::query_scalar(RANGE_END)
        .bind(after)
        .bind(ROWS_PER_MOVE)
        .fetch_optional(&mut *tx)
        .await
        .map_err(Error::store)?;
    let range = range(&last);
    // In index order: each device's events go into its part of each index side by side.
    let insert = format!(
        "INSERT INTO device_events ({COLUMNS}) SELECT {COLUMNS} FROM device_events_recent \
         WHERE {range} ORDER BY device_id, device_ts, id"
    );
    let delete = format!("DELETE FROM device_events_recent WHERE {range}");
    let mut rows = 0;
    for text in [&insert, &delete] {
        let mut query = sqlx::query(text).bind(after);
        if let Some(last) = &last {
            query = query.bind(last.as_str());
        }
        let done = query.execute(&mut *tx).await.map_err(Error::store)?;
        if text == &insert {
            rows = done.rows_affected();
        } else if done.rows_affected() != rows {
            // The single writer holds the database: nothing can have changed in between.
            let message = format!(
                "moving staged events: inserted {rows} but deleted {}",
                done.rows_affected()
            );
            return Err(Error::Store(message.into()));
        }
    }
    tx.commit().await.map_err(Error::store)?;
    Ok(Step { rows, last })
}
