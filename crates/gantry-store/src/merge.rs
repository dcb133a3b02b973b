//! On SQLite, the move of events from device_events_recent, where ingest commits them, into
//! device_events. PostgreSQL does not stage (see `SqlStore::stages_events`).
//!
//! Why: an ingest commit holds at most a few events per device (a device's next message waits
//! for the acknowledgement of its last), so writing into device_events directly dirtied a page
//! of each of its three per-device indexes for nearly every event, and the shadow and count rows
//! of each device besides. Staging appends them to one table in arrival order; a move then writes
//! each device's accumulated events together, a page of each index once.
//!
//! The staging table is in a file of its own (attached to every connection as `staging`), which
//! only the stager connection writes: SQLite locks each file apart, so ingest commits go on while
//! a move holds the main file. (In the main file, as migration 0009 had it, every ingest commit
//! that met a move waited for it: that wait was ingest's p99.)
//!
//! A walk (every `MERGE_EVERY`) takes the events staged when it starts from the in-memory index of
//! staged events (staged.rs), grouped by device, less those recorded as moved, and moves a few
//! devices' events per transaction on the main file's writer (spread over `PACE`): an INSERT into
//! device_events sorted by device, the shadows and kept counts brought up to them
//! (`settle_shadows`, `count_staged`), and a record of the device range moved
//! (device_events_recent_moved, in the main file). Reads skip recorded rows (`NOT_MOVED`) and find
//! them in device_events. The moved rows leave the staging file one walk later (`SETTLE`), a
//! stretch of numbers per transaction on the stager; then the in-memory index of staged events
//! (staged.rs) forgets those numbers and the records of those rows are cleared.
//!
//! Why one walk later: a statement that reads both files takes its snapshot of the main file
//! first and of the staging file an instant later (SQLite opens them in schema order). A row
//! whose move committed and whose delete committed both within that instant would be read in
//! neither file. A move committed `SETTLE` before the delete leaves that to a statement that
//! stalls for seconds between its first two steps. The other way round holds without a delay:
//! a statement whose main snapshot holds a move's record skips the row in staging, and the record
//! is cleared only after the row's delete committed.
//!
//! Measured with gantry-bench ingest-rest on 2 cores (SQLite, 1,000 devices, 64 connections):
//! 7,300 POSTs/s at p99 68 ms with the shadows and counts written by each ingest commit and an
//! unclustered staging table; 7,500/s settling them in the moves; 9,900/s at p99 40–53 ms with the
//! staging table clustered by device (migration 0007), where an ingest commit of 20 to 30 events
//! still wrote a median 56 WAL pages, one leaf per event. Appended in arrival order (migration
//! 0009) and walked every 3 s: 1.4 × the POSTs/s of the clustered table back to back (9,495 and
//! 11,342 against 6,942 and 8,234), p99 52 to 59 against 85 to 96 ms, 6.4 against 16.5 KiB
//! written per event. In a file of its own, back to back against the same table in the main
//! file: p99 24 to 31 against 76 to 86 ms and 1.1 × the POSTs/s on a small store, p99 25 to 28
//! against 65 to 72 ms and 1.19 × on a store of 10,000,000 events; MQTT at 14,000 messages/s
//! offered, 13,934 events/s stored against 10,267 (which fell behind).

use std::sync::Arc;
use std::time::{Duration, Instant};

use gantry_core::Result;
use sqlx::pool::PoolConnection;
use sqlx::{Any, AnyPool, Transaction};

use crate::events::{COLUMNS, count_staged, settle_shadows};
use crate::flush::Flusher;
use crate::sql::Sql;
use crate::staged::{Staged, json_array};

/// How often the mover walks the staged events. Each walk writes a page of each of a device's
/// indexes once for all the device's staged events, so the longer the walk waits, the fewer pages
/// per event; readers meanwhile find staged events by their numbers (one key lookup each). Measured
/// with gantry-bench ingest-rest (1,000 devices, 64 connections, one machine, one session): every
/// 3 s 9,300 to 12,500 POSTs/s and 6.4 KiB written per event, every second 7,600 to 9,700/s and 10
/// KiB; every 5 s 9,100 to 10,400/s.
pub(crate) const MERGE_EVERY: Duration = Duration::from_secs(3);

/// The background walk spreads its moves over this long, when they take less (each waits until
/// its share of this time is due; a walk behind that pace does not wait): a burst of moves holds
/// a core while the ingest path shares the other with everything else. ingest-mqtt at 20,000
/// messages/s offered on 2 cores, back to back: p99 41, 48, 51, 39 and 32 ms against 87, 49, 86,
/// 71 and 67 unpaced, p50 about 6 against 10 ms. At 25,000 offered the moves take the whole time
/// and nothing changes (a fixed pause after each move, tried first, held the walks below that
/// rate).
pub(crate) const PACE: Duration = MERGE_EVERY;

/// Staged events moved per transaction, about (whole devices): the walk moves each device's
/// staged events in one transaction, so its per-device index pages are written once per walk
/// however the walk is cut. Not so the index of event ids: every move of a walk inserts ids spread
/// over the walk's whole stretch of time, so each move writes most of that stretch's leaves again,
/// and fewer, larger moves write fewer pages. Ingest does not wait for moves (they write the main
/// file); a control's event log or any other write of the main file waits for one.
/// Measured with gantry-bench at 25,000 messages/s, 20 s each, back to back, 4,000 against 2,000
/// (staging pages of 1 KiB): the writer busy 936 against 1,057 ms of each 3 s walk, 3.90 against
/// 4.14 KiB written per event, server CPU 38 against 40 µs per event; with the server's writes
/// capped at 100 MB/s (imitating a disk that falls behind) 24,905 events/s stored against 22,064.
/// Over 10 minutes the writer's time per walk rose to about 1.2 s with both, as the store grew.
/// The price is the wait of a main-file write that meets a move: controls under 10,000 events/s
/// of telemetry, p99 4.2 against 7.6 ms, p99.9 59 against 37 ms (8,000: 3.4 and 106 ms).
const ROWS_PER_MOVE: usize = 4_000;

/// How long moved rows stay in the staging file after their move committed, at least (see the
/// module's doc): the next walk deletes them, waiting first if it starts sooner.
const SETTLE: Duration = Duration::from_secs(1);

/// The staging table, in the staging file: arrival order, no index but the arrival number, which
/// rises in commit order (one writer) and is never reused (AUTOINCREMENT). The same columns as
/// migration 0009's in the main file, which `adopt_main_staging` empties and drops.
pub(crate) const STAGING_TABLE: &str = "CREATE TABLE IF NOT EXISTS staging.device_events_recent (
    seq            INTEGER PRIMARY KEY AUTOINCREMENT,
    id             TEXT NOT NULL,
    tenant_id      TEXT NOT NULL,
    project_id     TEXT NOT NULL,
    model_id       TEXT NOT NULL,
    device_id      TEXT NOT NULL,
    attribute_code TEXT NOT NULL,
    attribute_type TEXT NOT NULL,
    attribute_data TEXT NOT NULL,
    channel        TEXT NOT NULL,
    ingress_ts     BIGINT NOT NULL,
    device_ts      BIGINT NOT NULL,
    correlation_id TEXT,
    context        TEXT,
    created_by     TEXT NOT NULL,
    created_time   BIGINT NOT NULL
);";

/// The staging table, by its schema-qualified name.
pub(crate) const STAGING: &str = "staging.device_events_recent";

/// Staged rows a walk has moved already (in device_events, deleted from staging a walk later):
/// excluded wherever staged rows are read (a walk excludes them in `move_staged`).
pub(crate) const NOT_MOVED: &str = "NOT EXISTS (SELECT 1 FROM main.device_events_recent_moved AS moved \
     WHERE device_events_recent.device_id BETWEEN moved.device_lo AND moved.device_hi \
     AND device_events_recent.seq <= moved.through)";

/// The staging table's rows (number, device, id), for the index in memory when the store opens.
pub(crate) async fn load_staged(pool: &AnyPool) -> std::result::Result<Vec<(i64, String, String)>, sqlx::Error> {
    sqlx::query_as(&format!("SELECT seq, device_id, id FROM {STAGING} ORDER BY seq"))
        .fetch_all(pool)
        .await
}

/// Opening a store whose staging table is still in the main file (migration 0009, before the
/// staging file): its rows not yet moved are copied into the staging file, in arrival order, and
/// then the main file's table is dropped with the move records. Copying skips ids already in the
/// staging file, so an upgrade cut short between the two transactions copies nothing twice when
/// it runs again. A new database's migrations create the main file's table too: it is dropped
/// here, empty.
pub(crate) async fn adopt_main_staging(
    reader: &AnyPool,
    writer: &AnyPool,
    stager: &AnyPool,
    flusher: &Flusher,
) -> std::result::Result<(), sqlx::Error> {
    let exists: i64 = sqlx::query_scalar(
        "SELECT COUNT(*) FROM main.sqlite_master WHERE type = 'table' AND name = 'device_events_recent'",
    )
    .fetch_one(reader)
    .await?;
    if exists == 0 {
        return Ok(());
    }
    let copied = sqlx::query(&format!(
        "INSERT INTO {STAGING} ({COLUMNS}) SELECT {COLUMNS} FROM main.device_events_recent \
         WHERE {NOT_MOVED} AND id NOT IN (SELECT id FROM {STAGING}) ORDER BY seq"
    ))
    .execute(stager)
    .await?
    .rows_affected();
    // On disk before the main file's table goes (the stager commits unsynced).
    flusher.flush().await?;
    let mut tx = writer.begin().await?;
    sqlx::query("DROP TABLE main.device_events_recent")
        .execute(&mut *tx)
        .await?;
    sqlx::query("DELETE FROM main.device_events_recent_moved")
        .execute(&mut *tx)
        .await?;
    tx.commit().await?;
    if copied > 0 {
        tracing::info!(copied, "staged events moved into the staging file");
    }
    Ok(())
}

/// The staging file's side of a walk: its one writer, the index of its rows, its flushes.
#[derive(Debug, Clone)]
pub(crate) struct Stage {
    pub(crate) stager: AnyPool,
    pub(crate) staged: Arc<Staged>,
    pub(crate) flusher: Arc<Flusher>,
}

/// What a walk leaves for the next: the highest number it took and when its moves ended.
#[derive(Debug, Default)]
pub(crate) struct Walked {
    moved: Option<(i64, Instant)>,
}

/// A walk: deletes from the staging file what the last walk moved (`SETTLE` after it ended, at
/// least), a stretch of numbers per transaction, while it moves every event staged when it
/// starts, a few devices per transaction (each device's events in one); returns how many moved.
/// Events staged meanwhile wait for the next walk.
///
/// Until they are deleted, moved rows stay in the staging table, excluded from reads by
/// `NOT_MOVED` (each move records its device range in its transaction). A walk cut short (a
/// failure, a crash) leaves its records; the next walk skips those rows, and the walk after it
/// deletes them with the next's own.
pub(crate) async fn merge_recent(
    reader: &AnyPool,
    writer: &AnyPool,
    stage: &Stage,
    pace: Option<Duration>,
) -> Result<u64> {
    let mut walked = stage.staged.walk.lock().await;
    let previous = walked.moved.take();
    // The delete of the last walk's rows (on the stager) and this walk's moves (on the writer)
    // write different files: they run side by side.
    let deleting = async {
        match previous {
            Some((through, ended)) => delete_walked(writer, stage, through, ended).await,
            None => Ok(()),
        }
    };
    let (deleted, moving) = tokio::join!(deleting, move_staged(reader, writer, stage, pace));
    // Rows left undeleted (a failure) are deleted with the next walk's: its mark is no lower.
    walked.moved = match &moving {
        Ok(Some((_, through))) => Some((*through, Instant::now())),
        _ if deleted.is_err() => previous,
        _ => None,
    };
    deleted?;
    Ok(moving?.map_or(0, |(moved, _)| moved))
}

/// Deletes the rows a walk moved, numbered up to `through`, from the staging file, `SETTLE` after
/// its moves `ended` at least, then clears their records.
async fn delete_walked(writer: &AnyPool, stage: &Stage, through: i64, ended: Instant) -> Result<()> {
    // Walks that take most of `MERGE_EVERY` start less than `SETTLE` after the last ended.
    tokio::time::sleep(SETTLE.saturating_sub(ended.elapsed())).await;
    let started = Instant::now();
    // The moves committed without waiting for the disk (`move_devices`): on disk before their
    // rows leave the staging file.
    sync_main(writer).await?;
    let stretches = stage.staged.stretches(through, ROWS_PER_DELETE);
    let mut after = 0;
    for &end in &stretches {
        delete_moved(&stage.stager, after, end).await?;
        // Only now, with the rows gone: a read that no longer finds these numbers reads a
        // snapshot without them.
        stage.staged.moved_through(end);
        after = end;
    }
    // The deletes committed without waiting for the disk (the stager's commits): on disk before
    // their records go, or a delete lost to a power cut would bring back rows that no record
    // marks as moved, to be moved twice.
    let since = stage.flusher.stats().taken();
    stage.flusher.flush().await.map_err(crate::io_unavailable)?;
    sqlx::query("DELETE FROM main.device_events_recent_moved WHERE through <= $1")
        .bind(through)
        .execute(writer)
        .await
        .map_err(crate::db_error)?;
    tracing::debug!(
        through,
        deletes = stretches.len(),
        deleting_ms = started.elapsed().as_secs_f64() * 1e3,
        // Since the walk before's deletes: the staging file's flushes, the requests they answered
        // (about one per ingest commit) and the ingest commits' time on the stager.
        flushes = since.flushes,
        flush_requests = since.requests,
        committing_ms = since.committing.as_secs_f64() * 1e3,
        "deleted moved events"
    );
    Ok(())
}

/// Puts every commit before it on the main file on disk: a synced commit (FULL, the writer's
/// durability) that counts one more sync in walk_syncs (migration 0011). Its flush takes the
/// whole WAL file, and recovery replays the WAL in order up to its last whole commit (what left
/// the WAL before had been checkpointed into the synced database file). The staging file's
/// commits are put on disk by the flusher (flush.rs).
///
/// It must change bytes: SQLite writes no page for an UPDATE that leaves a row as it was, and a
/// commit that wrote no page flushes nothing. (Until this was checked, the moves' barrier was an
/// `UPDATE ... SET through = through`, which wrote and flushed nothing.)
async fn sync_main(writer: &AnyPool) -> Result<()> {
    sqlx::query(
        "INSERT INTO main.walk_syncs (id, syncs) VALUES (1, 1) ON CONFLICT (id) DO UPDATE SET syncs = syncs + 1",
    )
    .execute(writer)
    .await
    .map_err(crate::db_error)?;
    Ok(())
}

/// Moves every event staged now, a few devices per transaction (each device's events in one);
/// returns how many moved and the highest number the walk took (every row up to it is then in
/// device_events, or was deleted), or None when nothing is staged. With `pace`, the moves are
/// spread over that long (`PACE`).
async fn move_staged(
    reader: &AnyPool,
    writer: &AnyPool,
    stage: &Stage,
    pace: Option<Duration>,
) -> Result<Option<(u64, i64)>> {
    let staged = &stage.staged;
    // The records of moves first, then the index: the rows of a record cleared meanwhile (by this
    // walk's delete, running beside) left the index before their record went.
    let records: Vec<(String, String, i64)> =
        sqlx::query_as("SELECT device_lo, device_hi, through FROM main.device_events_recent_moved")
            .fetch_all(reader)
            .await
            .map_err(crate::db_error)?;
    // The staged events from the index in memory, not from the staging table (reading every
    // staged row through sqlx cost about a tenth of the server's CPU under MQTT load). Rows moved
    // but not yet deleted count for `through`: they are deleted with this walk's.
    let Some((through, mut by_device)) = staged.by_device() else {
        return Ok(None);
    };
    for (device, seqs) in &mut by_device {
        // `NOT_MOVED`: above the highest number a record of the device's range reaches.
        let moved = records
            .iter()
            .filter(|(lo, hi, _)| lo <= device && device <= hi)
            .map(|(_, _, through)| *through)
            .max();
        if let Some(moved) = moved {
            seqs.retain(|seq| *seq > moved);
        }
    }
    by_device.retain(|_, seqs| !seqs.is_empty());
    let pending: usize = by_device.values().map(Vec::len).sum();
    let mut taken = 0;
    let started = Instant::now();
    let mut moved = 0;
    let mut moves = 0;
    // The time the moves took, without the waits between them: how much of the pace the writer
    // needs at this rate.
    let mut busy = Duration::ZERO;
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
        let move_started = Instant::now();
        moved += move_devices(writer, &seqs, &lo, &hi, through).await?;
        busy += move_started.elapsed();
        staged.moved(seqs.len());
        moves += 1;
        taken += seqs.len();
        if let Some(pace) = pace {
            // Ahead of an even spread over `pace`: wait until the moves done are due.
            let due = pace.mul_f64(taken as f64 / pending as f64);
            tokio::time::sleep(due.saturating_sub(started.elapsed())).await;
        }
    }
    tracing::debug!(
        moved,
        moves,
        moving_ms = started.elapsed().as_secs_f64() * 1e3,
        busy_ms = busy.as_secs_f64() * 1e3,
        "moved staged events"
    );
    Ok(Some((moved, through)))
}

/// The staged rows deleted per transaction, at most. Ingest commits on the same connection wait
/// for each: 4,000 took 20 to 60 ms under MQTT load.
const ROWS_PER_DELETE: usize = 1_000;

/// Deletes the moved rows numbered after `after` and up to `through` on the stager, the staging
/// file's one writer (ingest commits wait for the connection meanwhile).
///
/// It commits without waiting for the disk, as every commit of the stager: a flush of the disk
/// per delete was a wait for the ingest commits on the same connection, about 75 per walk at
/// 25,000 events/s. A lost delete leaves rows that their records still mark as moved;
/// `delete_walked` flushes the walk's deletes once before their records go.
async fn delete_moved(stager: &AnyPool, after: i64, through: i64) -> Result<()> {
    sqlx::query(&format!("DELETE FROM {STAGING} WHERE seq > $1 AND seq <= $2"))
        .bind(after)
        .bind(through)
        .execute(stager)
        .await
        .map_err(crate::db_error)?;
    Ok(())
}

/// Moves the staged events `seqs` (every staged event of the devices `lo` to `hi` numbered up to
/// `through`) into device_events and records the range moved; returns how many it moved. The
/// transaction writes the main file alone (its first statement takes that file's lock) and reads
/// the staging file.
///
/// It commits without waiting for the disk (`synchronous=NORMAL` on the main file, for this
/// transaction only): the events are on disk in the staging file already, and a move lost to a
/// power cut is lost with its record, so its rows are moved again. Only their delete from the
/// staging file must wait until the move is on disk: `delete_walked` commits a synced transaction
/// on the main file first. Every other write of the main file stays synced (FULL).
async fn move_devices(writer: &AnyPool, seqs: &[i64], lo: &str, hi: &str, through: i64) -> Result<u64> {
    let mut conn = Unsynced::acquire(writer).await?;
    conn.unsync().await?;
    let mut tx = conn.begin().await.map_err(crate::db_error)?;
    let mut selected = Sql::new("seq IN (SELECT value FROM json_each(");
    selected.bind(json_array(seqs)).push("))");
    // By device: each device's events go into its part of each index side by side.
    let mut insert = selected.prefixed(&format!(
        "INSERT INTO main.device_events ({COLUMNS}) SELECT {COLUMNS} FROM {STAGING} WHERE "
    ));
    insert.push(" ORDER BY device_id, device_ts, id");
    let rows = insert
        .query()
        .execute(&mut *tx)
        .await
        .map_err(crate::db_error)?
        .rows_affected();
    settle_shadows(&mut tx, &selected).await?;
    count_staged(&mut tx, &selected).await?;
    sqlx::query("INSERT INTO main.device_events_recent_moved (device_lo, device_hi, through) VALUES ($1, $2, $3)")
        .bind(lo)
        .bind(hi)
        .bind(through)
        .execute(&mut *tx)
        .await
        .map_err(crate::db_error)?;
    tx.commit().await.map_err(crate::db_error)?;
    conn.synced().await?;
    Ok(rows)
}

/// The writer's connection while its commits to the main file do not wait for the disk
/// (`synchronous=NORMAL`: the moves). Dropped before `synced` set FULL again (a failure, a walk
/// cancelled at shutdown), the connection is closed instead of going back to the pool, where an
/// API write would take it.
struct Unsynced {
    conn: PoolConnection<Any>,
    synced: bool,
}

impl Unsynced {
    /// A connection of `pool`, guarded from here on.
    async fn acquire(pool: &AnyPool) -> Result<Self> {
        Ok(Unsynced {
            conn: pool.acquire().await.map_err(crate::db_error)?,
            synced: false,
        })
    }

    async fn unsync(&mut self) -> Result<()> {
        sqlx::query("PRAGMA main.synchronous=NORMAL")
            .execute(&mut *self.conn)
            .await
            .map_err(crate::db_error)?;
        Ok(())
    }

    async fn begin(&mut self) -> std::result::Result<Transaction<'_, Any>, sqlx::Error> {
        sqlx::Connection::begin(&mut *self.conn).await
    }

    /// Back to the file's durability (FULL: `SQLITE_PRAGMAS`), after the transaction.
    async fn synced(mut self) -> Result<()> {
        sqlx::query("PRAGMA main.synchronous=FULL")
            .execute(&mut *self.conn)
            .await
            .map_err(crate::db_error)?;
        self.synced = true;
        Ok(())
    }
}

impl Drop for Unsynced {
    fn drop(&mut self) {
        if !self.synced {
            self.conn.close_on_drop();
        }
    }
}

#[cfg(test)]
mod tests {
    use gantry_core::enums::{Channel, DataType};
    use gantry_core::event::DeviceEvent;
    use gantry_core::ids::{DeviceId, EventId, ModelId, ProjectId, TenantId};
    use gantry_core::paging::PageRequest;
    use gantry_core::query::{EventQuery, TimeField};
    use gantry_core::store::EventStore;
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

    /// The value of `PRAGMA name` on a connection of `pool`.
    async fn pragma(pool: &AnyPool, name: &str) -> i64 {
        sqlx::query_scalar(&format!("PRAGMA {name}"))
            .fetch_one(pool)
            .await
            .unwrap()
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

    /// The numbers the index holds for a batch are the ones SQLite gave its rows, across the
    /// batch's statements and after a staged event was deleted (AUTOINCREMENT never reuses its
    /// number): reads find staged events by them.
    #[tokio::test]
    async fn staged_numbers_are_the_rows_numbers() {
        let dir = tempfile::tempdir().unwrap();
        let store = SqlStore::connect(&sqlite_url(dir.path())).await.unwrap();
        let _walking = store.staged.walk.lock().await;
        let batch = |from: i64| -> Vec<DeviceEvent> {
            (from..from + 300)
                .map(|ts| event(["dev-a", "dev-b", "dev-c"][ts as usize % 3], ts))
                .collect()
        };
        store.append_events(&batch(0)).await.unwrap();
        let last = sqlx::query_scalar::<_, String>("SELECT id FROM staging.device_events_recent ORDER BY seq DESC")
            .fetch_one(&store.pool)
            .await
            .unwrap();
        assert!(
            store
                .delete_event(&TenantId::default_tenant(), &EventId::from_string(&last))
                .await
                .unwrap()
        );
        store.append_events(&batch(300)).await.unwrap();
        let rows: Vec<(i64, String)> = sqlx::query_as("SELECT seq, id FROM staging.device_events_recent")
            .fetch_all(&store.pool)
            .await
            .unwrap();
        assert_eq!(rows.len(), 599);
        for (seq, id) in rows {
            assert_eq!(store.staged.seq_of(&id), Some(seq), "event {id}");
        }
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
        let staged: Vec<i64> =
            sqlx::query_scalar("SELECT seq FROM staging.device_events_recent WHERE device_id = 'dev-a'")
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
        let counts = || async {
            (
                count("device_events").await,
                count("staging.device_events_recent").await,
                count("device_events_recent_moved").await,
            )
        };
        assert_eq!(counts().await.0, 3, "each event moved once");
        assert_eq!(read(&store, "dev-a").await, expected_a, "after the next walk");
        assert_eq!(read(&store, "dev-b").await, expected_b);
        // The walk after, once the moves have settled, deletes what was moved from staging.
        tokio::time::sleep(SETTLE).await;
        store.merge_recent().await.unwrap();
        assert_eq!(counts().await, (3, 0, 0), "staging emptied, records cleared");
        let syncs: i64 = sqlx::query_scalar("SELECT syncs FROM main.walk_syncs")
            .fetch_one(&store.pool)
            .await
            .unwrap();
        // The background walk may have deleted too.
        assert!(syncs >= 1, "a walk that deleted moved rows synced the main file");
        assert_eq!(read(&store, "dev-a").await, expected_a, "after the deletes");
        assert_eq!(read(&store, "dev-b").await, expected_b);
    }

    /// A sync commits a change to the main file: a connection reading the file sees a new
    /// version of it (`data_version`), so the commit wrote pages and flushed the WAL. An UPDATE
    /// that leaves its row as it was commits no change, and so flushes nothing: why a sync counts.
    #[tokio::test]
    async fn a_sync_commits_a_change_to_the_main_file() {
        async fn version(conn: &mut sqlx::AnyConnection) -> i64 {
            sqlx::query_scalar("PRAGMA main.data_version")
                .fetch_one(conn)
                .await
                .unwrap()
        }
        let dir = tempfile::tempdir().unwrap();
        let store = SqlStore::connect(&sqlite_url(dir.path())).await.unwrap();
        let _walking = store.staged.walk.lock().await;
        let mut reader = store.pool.acquire().await.unwrap();
        let before = version(&mut reader).await;
        sync_main(&store.writer).await.unwrap();
        let synced = version(&mut reader).await;
        assert_ne!(synced, before, "the first sync");
        sqlx::query("UPDATE main.walk_syncs SET syncs = syncs")
            .execute(&store.writer)
            .await
            .unwrap();
        assert_eq!(version(&mut reader).await, synced, "an unchanged row");
        sync_main(&store.writer).await.unwrap();
        assert_ne!(version(&mut reader).await, synced, "the second sync");
        let syncs: i64 = sqlx::query_scalar("SELECT syncs FROM main.walk_syncs")
            .fetch_one(&store.writer)
            .await
            .unwrap();
        assert_eq!(syncs, 2);
    }

    /// A move commits unsynced on the writer's connection and sets it back to FULL after: the
    /// API's writes that take the connection next are synced.
    #[tokio::test]
    async fn the_writer_is_synced_again_after_a_move() {
        let dir = tempfile::tempdir().unwrap();
        let store = SqlStore::connect(&sqlite_url(dir.path())).await.unwrap();
        let _walking = store.staged.walk.lock().await;
        store
            .append_events(&[event("dev-a", 1), event("dev-a", 2)])
            .await
            .unwrap();
        let moved = move_devices(&store.writer, &[1, 2], "dev-a", "dev-a", 2).await.unwrap();
        assert_eq!(moved, 2);
        assert_eq!(pragma(&store.writer, "main.synchronous").await, 2, "FULL");
        assert_eq!(read(&store, "dev-a").await, (2, vec![2, 1], vec![json!(2)]));
    }

    /// The stager commits the staging file without waiting for the disk (NORMAL), every other
    /// connection with FULL; an ingest commit is answered after the flusher's flush, and its
    /// events are in the index then. A delete of moved rows needs the flusher too.
    #[tokio::test]
    async fn the_stager_commits_unsynced_and_the_flusher_flushes() {
        let dir = tempfile::tempdir().unwrap();
        let store = SqlStore::connect(&sqlite_url(dir.path())).await.unwrap();
        let _walking = store.staged.walk.lock().await;
        let flusher = store.stage.as_ref().unwrap().flusher.clone();
        flusher.stats().taken();
        let events = [event("dev-a", 1), event("dev-a", 2), event("dev-a", 3)];
        store.append_events(&events).await.unwrap();
        let taken = flusher.stats().taken();
        assert!(taken.flushes >= 1 && taken.requests == 1, "{taken:?}");
        assert_eq!(store.staged.seq_of(events[2].id.as_str()), Some(3));
        assert_eq!(pragma(&store.stager, "staging.synchronous").await, 1, "NORMAL");
        assert_eq!(pragma(&store.writer, "staging.synchronous").await, 2, "FULL");
        assert_eq!(pragma(&store.pool, "staging.synchronous").await, 2, "FULL");
        delete_moved(&store.stager, 0, 2).await.unwrap();
        let left: Vec<i64> = sqlx::query_scalar("SELECT seq FROM staging.device_events_recent")
            .fetch_all(&store.pool)
            .await
            .unwrap();
        assert_eq!(left, vec![3]);
    }

    /// A new staging file has small pages (`STAGING_PAGE_SIZE`); one written before keeps its
    /// pages, and ingest and the moves go on with it.
    #[tokio::test]
    async fn a_new_staging_file_has_small_pages_and_an_old_one_keeps_its_own() {
        let dir = tempfile::tempdir().unwrap();
        let store = SqlStore::connect(&sqlite_url(dir.path())).await.unwrap();
        assert_eq!(pragma(&store.pool, "staging.page_size").await, 2048);
        store.close().await;

        let old = tempfile::tempdir().unwrap();
        let options = sqlx::sqlite::SqliteConnectOptions::new()
            .filename(old.path().join("gantry-staging.db"))
            .create_if_missing(true)
            .page_size(4096)
            .journal_mode(sqlx::sqlite::SqliteJournalMode::Wal);
        let mut file = sqlx::ConnectOptions::connect(&options).await.unwrap();
        sqlx::query(&STAGING_TABLE.replace("staging.", "main."))
            .execute(&mut file)
            .await
            .unwrap();
        sqlx::Connection::close(file).await.unwrap();
        let store = SqlStore::connect(&sqlite_url(old.path())).await.unwrap();
        assert_eq!(pragma(&store.pool, "staging.page_size").await, 4096);
        store
            .append_events(&[event("dev-a", 1), event("dev-a", 2)])
            .await
            .unwrap();
        // This walk or the background's moves them.
        store.merge_recent().await.unwrap();
        let moved: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM main.device_events")
            .fetch_one(&store.pool)
            .await
            .unwrap();
        assert_eq!(moved, 2);
        assert_eq!(read(&store, "dev-a").await, (2, vec![2, 1], vec![json!(2)]));
    }
}
