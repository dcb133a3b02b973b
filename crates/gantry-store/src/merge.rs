//! On SQLite, the move of events from device_events_recent, where ingest commits them, into
//! device_events. PostgreSQL does not stage (see `SqlStore::stages_events`).
//!
//! Why: an ingest commit holds at most a few events per device (a device's next message waits
//! for the acknowledgement of its last), so writing into device_events directly dirtied a page
//! of each of its three per-device indexes for nearly every event, and the shadow and count rows
//! of each device besides. Staging appends them to one table in arrival order (migration 0009);
//! a move then writes each device's accumulated events together, a page of each index once.
//!
//! A walk (every `MERGE_EVERY`) takes the events staged when it starts, groups them by device and
//! moves a few devices' events per transaction under SQLite's single writer: an INSERT into
//! device_events sorted by device, the shadows and kept counts brought up to them
//! (`settle_shadows`, `count_staged`), and a record of the device range moved
//! (device_events_recent_moved). Reads skip recorded rows (`NOT_MOVED`) and find them in
//! device_events: one statement, one snapshot, so a row is read in one table or the other, never
//! both and never neither. At its end the walk deletes what it moved from the staging table, a
//! stretch of numbers per transaction, and then the in-memory index of staged events (staged.rs)
//! forgets those numbers.
//!
//! Measured with gantry-bench ingest-rest on 2 cores (SQLite, 1,000 devices, 64 connections):
//! 7,300 POSTs/s at p99 68 ms with the shadows and counts written by each ingest commit and an
//! unclustered staging table; 7,500/s settling them in the moves; 9,900/s at p99 40–53 ms with the
//! staging table clustered by device (migration 0007), where an ingest commit of 20 to 30 events
//! still wrote a median 56 WAL pages, one leaf per event. Appended in arrival order (migration
//! 0009) and walked every 3 s: 1.4 × the POSTs/s of the clustered table back to back (9,495 and
//! 11,342 against 6,942 and 8,234), p99 52 to 59 against 85 to 96 ms, 6.4 against 16.5 KiB
//! written per event.

use std::collections::BTreeMap;
use std::time::Duration;

use gantry_core::{Error, Result};
use sqlx::AnyPool;

use crate::events::{COLUMNS, count_staged, settle_shadows};
use crate::sql::Sql;
use crate::staged::{Staged, json_array};

/// How often the mover walks the staged events. Each walk writes a page of each of a device's
/// indexes once for all the device's staged events, so the longer the walk waits, the fewer pages
/// per event; readers meanwhile find staged events by their numbers (one key lookup each). Measured
/// with gantry-bench ingest-rest (1,000 devices, 64 connections, one machine, one session): every
/// 3 s 9,300 to 12,500 POSTs/s and 6.4 KiB written per event, every second 7,600 to 9,700/s and 10
/// KiB; every 5 s 9,100 to 10,400/s.
pub(crate) const MERGE_EVERY: Duration = Duration::from_secs(3);

/// Staged events moved per transaction, about (whole devices): the walk moves each device's
/// staged events in one transaction, so its index pages are written once per walk however the
/// walk is cut; an ingest commit waiting for SQLite's writer meanwhile waits for one move (p50 18
/// ms at 500). 250 measured the same p99 and fewer POSTs/s.
const ROWS_PER_MOVE: usize = 500;

/// Staged rows a walk has moved already (in device_events, deleted from staging at the walk's
/// end): excluded wherever staged rows are read or moved.
pub(crate) const NOT_MOVED: &str = "NOT EXISTS (SELECT 1 FROM device_events_recent_moved AS moved \
     WHERE device_events_recent.device_id BETWEEN moved.device_lo AND moved.device_hi \
     AND device_events_recent.seq <= moved.through)";

/// The staging table's rows (number, device, id), for the index in memory when the store opens.
pub(crate) async fn load_staged(pool: &AnyPool) -> std::result::Result<Vec<(i64, String, String)>, sqlx::Error> {
    sqlx::query_as("SELECT seq, device_id, id FROM device_events_recent")
        .fetch_all(pool)
        .await
}

/// A walk: moves every event staged when it starts, a few devices per transaction (each device's
/// events in one), then deletes them from the staging table, a stretch of numbers per
/// transaction; returns how many moved. Events staged meanwhile wait for the next walk.
///
/// Between a device's move and the walk's end its moved rows stay in the staging table, excluded
/// from reads by `NOT_MOVED` (the move records its device range in the same transaction). A walk
/// cut short (a failure, a crash) leaves that record; the next walk skips those rows and deletes
/// them with its own.
pub(crate) async fn merge_recent(reader: &AnyPool, writer: &AnyPool, staged: &Staged) -> Result<u64> {
    let _walking = staged.walk.lock().await;
    // One statement, one snapshot: every row numbered up to the highest it finds has committed
    // (numbers are given under the writer, in commit order). Read by a reader connection: the
    // writer's goes on committing ingest meanwhile.
    let rows: Vec<(String, i64, i64)> = sqlx::query_as(&format!(
        "SELECT device_id, seq, {NOT_MOVED} AS pending FROM device_events_recent"
    ))
    .fetch_all(reader)
    .await
    .map_err(Error::store)?;
    // Rows a walk cut short has moved count too: this walk deletes them with its own.
    let Some(through) = rows.iter().map(|(_, seq, _)| *seq).max() else {
        return Ok(0);
    };
    let mut by_device: BTreeMap<String, Vec<i64>> = BTreeMap::new();
    for (device, seq, pending) in rows {
        if pending == 1 {
            by_device.entry(device).or_default().push(seq);
        }
    }
    let started = std::time::Instant::now();
    let mut moved = 0;
    let mut moves = 0;
    let mut devices = by_device.into_iter().peekable();
    while devices.peek().is_some() {
        let mut seqs = Vec::new();
        let mut range: Option<(String, String)> = None;
        while seqs.len() < ROWS_PER_MOVE
            && let Some((device, device_seqs)) = devices.next()
        {
            seqs.extend(device_seqs);
            range = Some(match range {
                Some((lo, _)) => (lo, device),
                None => (device.clone(), device),
            });
        }
        let (lo, hi) = range.expect("at least one device");
        moved += move_devices(writer, &seqs, &lo, &hi, through).await?;
        moves += 1;
    }
    let moving = started.elapsed();
    // The moved rows leave the staging table from the oldest, a stretch per transaction: one
    // DELETE of a whole walk (30,000 rows) held the writer for up to 120 ms.
    let mut after = 0;
    while after < through {
        after = delete_moved(writer, after, through).await?;
        // Only now, with the rows gone: a read that no longer finds these numbers reads a
        // snapshot without them.
        staged.moved_through(after);
    }
    tracing::debug!(
        moved,
        moves,
        moving_ms = moving.as_secs_f64() * 1e3,
        deleting_ms = (started.elapsed() - moving).as_secs_f64() * 1e3,
        "moved staged events"
    );
    Ok(moved)
}

/// The staged rows deleted per transaction at the end of a walk.
const ROWS_PER_DELETE: i64 = 4_000;

/// The number that ends the next stretch of moved rows after `after`: its `ROWS_PER_DELETE`th row,
/// or none when fewer remain.
const STRETCH_END: &str = "SELECT seq FROM device_events_recent WHERE seq > $1 ORDER BY seq LIMIT 1 OFFSET $2";

/// Deletes the next stretch of rows a walk has moved, after `after` and up to `through`; the last
/// stretch also clears the walk's records. Returns where the stretch ended.
async fn delete_moved(writer: &AnyPool, after: i64, through: i64) -> Result<i64> {
    let mut tx = writer.begin_with("BEGIN IMMEDIATE").await.map_err(Error::store)?;
    let end: Option<i64> = sqlx::query_scalar(STRETCH_END)
        .bind(after)
        .bind(ROWS_PER_DELETE - 1)
        .fetch_optional(&mut *tx)
        .await
        .map_err(Error::store)?;
    let end = end.map_or(through, |end| end.min(through));
    sqlx::query("DELETE FROM device_events_recent WHERE seq > $1 AND seq <= $2")
        .bind(after)
        .bind(end)
        .execute(&mut *tx)
        .await
        .map_err(Error::store)?;
    if end == through {
        sqlx::query("DELETE FROM device_events_recent_moved")
            .execute(&mut *tx)
            .await
            .map_err(Error::store)?;
    }
    tx.commit().await.map_err(Error::store)?;
    Ok(end)
}

/// Moves the staged events `seqs` (every staged event of the devices `lo` to `hi` numbered up to
/// `through`) into device_events and records the range moved; returns how many it moved.
async fn move_devices(writer: &AnyPool, seqs: &[i64], lo: &str, hi: &str, through: i64) -> Result<u64> {
    let mut tx = writer.begin_with("BEGIN IMMEDIATE").await.map_err(Error::store)?;
    let mut selected = Sql::new("seq IN (SELECT value FROM json_each(");
    selected.bind(json_array(seqs)).push("))");
    // By device: each device's events go into its part of each index side by side.
    let mut insert = selected.prefixed(&format!(
        "INSERT INTO device_events ({COLUMNS}) SELECT {COLUMNS} FROM device_events_recent WHERE "
    ));
    insert.push(" ORDER BY device_id, device_ts, id");
    let rows = insert
        .query()
        .execute(&mut *tx)
        .await
        .map_err(Error::store)?
        .rows_affected();
    settle_shadows(&mut tx, &selected).await?;
    count_staged(&mut tx, &selected).await?;
    sqlx::query("INSERT INTO device_events_recent_moved (device_lo, device_hi, through) VALUES ($1, $2, $3)")
        .bind(lo)
        .bind(hi)
        .bind(through)
        .execute(&mut *tx)
        .await
        .map_err(Error::store)?;
    tx.commit().await.map_err(Error::store)?;
    Ok(rows)
}

#[cfg(test)]
mod tests {
    use gantry_core::enums::{Channel, DataType};
    use gantry_core::ids::{DeviceId, EventId, ModelId, ProjectId, TenantId};
    use gantry_core::paging::PageRequest;
    use gantry_core::store::EventStore;
    use gantry_core::telemetry::{DeviceEvent, EventQuery, TimeField};
    use serde_json::json;

    use super::*;
    use crate::{SqlStore, sqlite_url};

    fn event(device: &str, ts: i64) -> DeviceEvent {
        DeviceEvent {
            id: EventId::generate(),
            tenant_id: TenantId::default_tenant(),
            project_id: ProjectId::from_string("p"),
            model_id: ModelId::from_string("m"),
            device_id: DeviceId::from_string(device),
            attribute_code: "temp".to_owned(),
            attribute_type: DataType::Float,
            attribute_data: json!(ts),
            channel: Channel::M,
            ingress_time_stamp: ts,
            device_timestamp: ts,
            correlation_id: None,
            context: None,
            created_by: "DEVICE".to_owned(),
            created_time: ts,
            deleted: false,
        }
    }

    /// What a user reads of `device`: the listing's total and times, and the shadow's value.
    async fn read(store: &SqlStore, device: &str) -> (u64, Vec<i64>, Vec<serde_json::Value>) {
        let query = EventQuery {
            device: DeviceId::from_string(device),
            attribute_code: None,
            time_field: TimeField::Device,
            start: None,
            end: None,
        };
        let listed = store
            .list_events(
                &query,
                PageRequest {
                    page_no: 1,
                    page_size: 100,
                },
            )
            .await
            .unwrap();
        let shadow = store.shadow(&TenantId::default_tenant(), &query.device).await.unwrap();
        (
            listed.total,
            listed.items.iter().map(|e| e.device_timestamp).collect(),
            shadow.into_iter().map(|(a, _)| a.value).collect(),
        )
    }

    /// A walk cut short after its first move (a crash between two of its transactions): reads
    /// stay exact before and after the store reopens, and the next walk moves the rest without
    /// moving anything twice.
    #[tokio::test]
    async fn a_walk_cut_short_is_finished_by_the_next() {
        let dir = tempfile::tempdir().unwrap();
        let url = sqlite_url(dir.path());
        let store = SqlStore::connect(&url).await.unwrap();
        // The background walk waits: this test makes the walk's first move itself.
        let walking = store.staged.walk.lock().await;
        store
            .append_events(&[event("dev-a", 1), event("dev-b", 2), event("dev-a", 3)])
            .await
            .unwrap();
        let expected_a = (2, vec![3, 1], vec![json!(3)]);
        let expected_b = (1, vec![2], vec![json!(2)]);
        let staged: Vec<i64> = sqlx::query_scalar("SELECT seq FROM device_events_recent WHERE device_id = 'dev-a'")
            .fetch_all(&store.pool)
            .await
            .unwrap();
        let moved = move_devices(&store.writer, &staged, "dev-a", "dev-a", 3).await.unwrap();
        assert_eq!(moved, 2);
        assert_eq!(
            read(&store, "dev-a").await,
            expected_a,
            "moved, not yet deleted from staging"
        );
        assert_eq!(read(&store, "dev-b").await, expected_b);
        store.close().await;
        drop(walking);
        drop(store);

        let store = SqlStore::connect(&url).await.unwrap();
        assert_eq!(read(&store, "dev-a").await, expected_a, "after reopening");
        assert_eq!(read(&store, "dev-b").await, expected_b);
        store.merge_recent().await.unwrap();
        let count = |table: &'static str| {
            let pool = store.pool.clone();
            async move {
                sqlx::query_scalar::<_, i64>(&format!("SELECT COUNT(*) FROM {table}"))
                    .fetch_one(&pool)
                    .await
                    .unwrap()
            }
        };
        assert_eq!(
            (
                count("device_events").await,
                count("device_events_recent").await,
                count("device_events_recent_moved").await
            ),
            (3, 0, 0),
            "each event moved once, staging emptied"
        );
        assert_eq!(read(&store, "dev-a").await, expected_a, "after the next walk");
        assert_eq!(read(&store, "dev-b").await, expected_b);
    }
}
