//! The mover: the move of events from the staging table, where ingest commits them, into
//! device_events, with the shadows and kept counts they change.
//!
//! The staging table is in a file of its own (attached to every connection as `staging`), which
//! only the stager connection writes: SQLite locks each file apart, so ingest commits go on while
//! a move holds the main file (file.rs).
//!
//! A round (every `MOVE_EVERY`) takes the events staged when it starts from the in-memory index of
//! staged events (staged.rs), grouped by device, less those recorded as moved, and moves a few
//! devices' events per transaction on the main file's writer (spread over `PACE`): an INSERT into
//! device_events sorted by device, the shadows, kept counts and rollups brought up to them
//! (`settle_shadows`, `count_staged`, `rollups::add`), and a record of the device range moved
//! (device_events_recent_moved, in the main file). Reads skip recorded rows (`NOT_MOVED`) and find
//! them in device_events. The moved rows leave the staging file one round later (`DELETE_MOVED_AFTER`), a
//! stretch of numbers per transaction on the stager; then the in-memory index of staged events
//! (staged.rs) forgets those numbers and the records of those rows are cleared.
//!
//! The catalog's writes (the API's, a webhook delivery's) share the main file's writer: one that
//! waits goes before the round's next move (the pool queues in order); while they come, the round's
//! writes wait for a quiet moment between them (`Yielding`, bounded per round) and the moves are
//! short (`SHORT_MOVE`, a device's events split where they are more), so that such a write rarely
//! meets a move, and then a short one. A control's event logs do not meet the moves at all: they
//! have a file and a writer of their own (logs.rs).
//!
//! Why one round later: a statement that reads both files takes its snapshot of the main file
//! first and of the staging file an instant later (SQLite opens them in schema order). A row
//! whose move committed and whose delete committed both within that instant would be read in
//! neither file. A move committed `DELETE_MOVED_AFTER` before the delete leaves that to a statement that
//! stalls for seconds between its first two steps. The other way round holds without a delay:
//! a statement whose main snapshot holds a move's record skips the row in staging, and the record
//! is cleared only after the row's delete committed.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::{Duration, Instant};

use gantry_core::Result;
use sqlx::pool::PoolConnection;
use sqlx::{Any, AnyConnection, AnyPool, Transaction};

use super::flush::Flusher;
use super::rollups;
use super::staged::Staged;
use super::table::{LATEST_STAGED, STAGING, json_array};
use gantry_store::engine::ApiWrites;
use gantry_store::events::counts::{COUNT_UPSERT, hour_sql};
use gantry_store::events::{COLUMNS, SHADOW_UPSERT};
use gantry_store::sql::Sql;

/// How often the mover runs a round over the staged events. Each round writes a page of each of a device's
/// indexes once for all the device's staged events, so the longer the round waits, the fewer pages
/// per event; readers meanwhile find staged events by their numbers (one key lookup each), and
/// more of them wait.
pub(crate) const MOVE_EVERY: Duration = Duration::from_secs(3);

/// The background round spreads its moves over this long, when they take less (each waits until
/// its share of this time is due; a round behind that pace does not wait): a burst of moves holds
/// a core while the ingest path shares the other with everything else.
pub(crate) const PACE: Duration = MOVE_EVERY;

/// Staged events moved per transaction, about (whole devices): the round moves each device's
/// staged events in one transaction, so its per-device index pages are written once per round
/// however the round is cut. Not so the index of event ids: every move of a round inserts ids spread
/// over the round's whole stretch of time, so each move writes most of that stretch's leaves again,
/// and fewer, larger moves write fewer pages. The price is the wait of a main-file write that
/// meets a move, while no API writes come (`ROWS_PER_SHORT_MOVE`); ingest does not wait for moves
/// (they write the main file).
const ROWS_PER_MOVE: usize = 4_000;

/// Staged events moved per transaction at most while API writes come (one within
/// `API_WRITES_RECENT`): a catalog write that meets a move waits for it, and a write synced after
/// unsynced moves puts their pages on disk with its own. Fewer rows per move cost pages (see
/// `ROWS_PER_MOVE`) only while such writes come.
pub(super) const ROWS_PER_SHORT_MOVE: usize = 500;

/// How long a short move should hold the writer: it takes as many rows as the moves before it
/// took in this long (`Mover::row_cost`), within `MIN_ROWS_PER_SHORT_MOVE` and
/// `ROWS_PER_SHORT_MOVE`, and splits a device's events where they are more. A catalog write
/// that meets one waits for the rest of it.
const SHORT_MOVE: Duration = Duration::from_millis(20);

/// The fewest rows a short move takes: below it each move's own statements cost more than its
/// rows.
const MIN_ROWS_PER_SHORT_MOVE: usize = 100;

/// How long after an API write the moves stay short: a round's length, so that the next write of
/// a series (an operator's script, a webhook's deliveries) finds them short too.
const API_WRITES_RECENT: Duration = MOVE_EVERY;

/// The round's writes on the main file wait until no API write has had the writer for this
/// long (a series of writes comes a few milliseconds apart), so that they start between the
/// writes rather than in front of one. A round waits so at most `YIELD_PER_ROUND` in all (of
/// `MOVE_EVERY`), and not while ingest waits for room (`staged::MAX_STAGED`): API writes delay
/// the moves, never stop them.
const YIELD_QUIET: Duration = Duration::from_millis(5);

/// The most a round waits for API writes in all (see `YIELD_QUIET`).
const YIELD_PER_ROUND: Duration = Duration::from_secs(1);

/// How long moved rows stay in the staging file after their move committed, at least (see the
/// module's doc): the next round deletes them, waiting first if it starts sooner.
pub(super) const DELETE_MOVED_AFTER: Duration = Duration::from_secs(1);

/// The mover: the main file's writer and a reader, the staging file's side of a round (its one
/// writer, the index of its rows, its flushes), and what the last round left for the next.
#[derive(Debug)]
pub(crate) struct Mover {
    pub(crate) reader: AnyPool,
    pub(crate) writer: AnyPool,
    pub(crate) stager: AnyPool,
    pub(crate) staged: Arc<Staged>,
    pub(crate) flusher: Arc<Flusher>,
    /// When the API's writes last asked for `writer`.
    pub(crate) api_writes: Arc<ApiWrites>,
    /// Held by a round from its first delete to its last move: two rounds at once (the background
    /// one and `SqlStore::catch_up`) would move the same rows.
    pub(crate) last_round: tokio::sync::Mutex<LastRound>,
    /// What a moved row cost the writer lately, in nanoseconds: the last move's time over its
    /// rows (`SHORT_MOVE`).
    pub(crate) row_cost: std::sync::atomic::AtomicU64,
    /// Cancelled when the store's chores are to stop: a round under way then moves the rest of
    /// its events without the pace's waits, so the shutdown waits for the moves alone.
    pub(crate) stopping: tokio_util::sync::CancellationToken,
}

impl Mover {
    /// Rows per move now: `ROWS_PER_MOVE`; while API writes come, what `SHORT_MOVE` holds, unless
    /// ingest waits for room (then API writes delay the moves, never slow them down further).
    fn rows_per_move(&self) -> usize {
        if !self.api_writes.asked_within(API_WRITES_RECENT) {
            return ROWS_PER_MOVE;
        }
        if self.staged.waiting() >= super::staged::MAX_STAGED {
            return ROWS_PER_SHORT_MOVE;
        }
        let cost = self.row_cost.load(std::sync::atomic::Ordering::Relaxed).max(1);
        let rows = SHORT_MOVE.as_nanos() as u64 / cost;
        (rows as usize).clamp(MIN_ROWS_PER_SHORT_MOVE, ROWS_PER_SHORT_MOVE)
    }
}

/// What a round leaves for the next: the highest number it took and when its moves ended.
#[derive(Debug, Default)]
pub(crate) struct LastRound {
    moved: Option<(i64, Instant)>,
}

/// A round: deletes from the staging file what the last round moved (`DELETE_MOVED_AFTER` after it ended, at
/// least), a stretch of numbers per transaction, while it moves every event staged when it
/// starts, a few devices per transaction (each device's events in one, but for short moves);
/// returns how many moved.
/// Events staged meanwhile wait for the next round.
///
/// Until they are deleted, moved rows stay in the staging table, excluded from reads by
/// `NOT_MOVED` (each move records its device range in its transaction). A round cut short (a
/// failure, a crash) leaves its records; the next round skips those rows, and the round after it
/// deletes them with the next's own.
pub(crate) async fn round(mover: &Mover, pace: Option<Duration>) -> Result<u64> {
    round_held(mover, &mut *mover.last_round.lock().await, pace).await
}

/// `round`, with `mover.last_round` held by the caller.
pub(super) async fn round_held(mover: &Mover, last_round: &mut LastRound, pace: Option<Duration>) -> Result<u64> {
    let previous = last_round.moved.take();
    let yielding = Yielding::new();
    // The delete of the last round's rows (on the stager) and this round's moves (on the writer)
    // write different files: they run side by side.
    let deleting = async {
        match previous {
            Some((through, ended)) => delete_last_round(mover, through, ended, &yielding).await,
            None => Ok(()),
        }
    };
    let (deleted, moving) = tokio::join!(deleting, move_staged(mover, pace, &yielding));
    // Rows left undeleted (a failure) are deleted with the next round's: its mark is no lower.
    last_round.moved = match &moving {
        Ok(Some((_, through))) => Some((*through, Instant::now())),
        _ if deleted.is_err() => previous,
        _ => None,
    };
    deleted?;
    Ok(moving?.map_or(0, |(moved, _)| moved))
}

/// Deletes the rows a round moved, numbered up to `through`, from the staging file, `DELETE_MOVED_AFTER` after
/// its moves `ended` at least, then clears their records.
async fn delete_last_round(mover: &Mover, through: i64, ended: Instant, yielding: &Yielding) -> Result<()> {
    let writer = &mover.writer;
    // Rounds that take most of `MOVE_EVERY` start less than `DELETE_MOVED_AFTER` after the last ended.
    tokio::time::sleep(DELETE_MOVED_AFTER.saturating_sub(ended.elapsed())).await;
    let started = Instant::now();
    // The moves committed without waiting for the disk (`move_devices`): on disk before their
    // rows leave the staging file.
    yielding.wait(mover).await;
    sync_main(writer).await?;
    let stretches = mover.staged.stretches(through, ROWS_PER_DELETE);
    let mut after = 0;
    for &end in &stretches {
        delete_moved(&mover.stager, after, end).await?;
        // Only now, with the rows gone: a read that no longer finds these numbers reads a
        // snapshot without them.
        mover.staged.moved_through(end);
        after = end;
    }
    // The deletes committed without waiting for the disk (the stager's commits): on disk before
    // their records go, or a delete lost to a power cut would bring back rows that no record
    // marks as moved, to be moved twice.
    let since = mover.flusher.stats().taken();
    mover
        .flusher
        .flush()
        .await
        .map_err(gantry_store::error::io_unavailable)?;
    yielding.wait(mover).await;
    sqlx::query("DELETE FROM main.device_events_recent_moved WHERE through <= $1")
        .bind(through)
        .execute(writer)
        .await
        .map_err(gantry_store::error::db_error)?;
    tracing::debug!(
        through,
        deletes = stretches.len(),
        deleting_ms = started.elapsed().as_secs_f64() * 1e3,
        // Since the round before's deletes: the staging file's flushes, the requests they answered
        // (about one per ingest commit) and the ingest commits' time on the stager.
        flushes = since.flushes,
        flush_requests = since.requests,
        committing_ms = since.committing.as_secs_f64() * 1e3,
        "deleted moved events"
    );
    Ok(())
}

/// Puts every commit before it on the main file on disk: a synced commit (FULL, the writer's
/// durability) that counts one more sync in round_syncs. Its flush takes the whole WAL file, and
/// recovery replays the WAL in order up to its last whole commit (what left the WAL before had
/// been checkpointed into the synced database file). The staging file's commits are put on disk
/// by the flusher (flush.rs).
///
/// It must change bytes: SQLite writes no page for an UPDATE that leaves a row as it was, and a
/// commit that wrote no page flushes nothing.
pub(super) async fn sync_main(writer: &AnyPool) -> Result<()> {
    sqlx::query(
        "INSERT INTO main.round_syncs (id, syncs) VALUES (1, 1) ON CONFLICT (id) DO UPDATE SET syncs = syncs + 1",
    )
    .execute(writer)
    .await
    .map_err(gantry_store::error::db_error)?;
    Ok(())
}

/// Moves every event staged now, a few devices per transaction (each device's events in one, but
/// for short moves, which split a device's events in parts, each with its own record);
/// returns how many moved and the highest number the round took (every row up to it is then in
/// device_events, or was deleted), or None when nothing is staged. With `pace`, the moves are
/// spread over that long (`PACE`).
async fn move_staged(mover: &Mover, pace: Option<Duration>, yielding: &Yielding) -> Result<Option<(u64, i64)>> {
    let Some((through, mut devices)) = not_yet_moved(mover).await? else {
        return Ok(None);
    };
    let pending: usize = devices.iter().map(|(_, seqs)| seqs.len()).sum();
    let (mut taken, mut moved, mut moves) = (0, 0, 0);
    let started = Instant::now();
    // The time the moves took, without the waits between them: how much of the pace the writer
    // needs at this rate.
    let mut busy = Duration::ZERO;
    while !devices.is_empty() {
        // An API write waiting for the writer goes before this move (the pool's queue is in
        // order); the move it meets in flight is short while API writes come.
        yielding.wait(mover).await;
        let next = next_move(&mut devices, mover.rows_per_move(), through);
        let move_started = Instant::now();
        moved += move_devices(&mover.writer, &next.seqs, &next.lo, &next.hi, next.through).await?;
        let took = move_started.elapsed();
        busy += took;
        let cost = took.as_nanos() as u64 / next.seqs.len().max(1) as u64;
        mover.row_cost.store(cost, std::sync::atomic::Ordering::Relaxed);
        mover.staged.moved(next.seqs.len());
        moves += 1;
        taken += next.seqs.len();
        if let Some(pace) = pace {
            // Ahead of an even spread over `pace`: wait until the moves done are due.
            let due = pace.mul_f64(taken as f64 / pending as f64);
            tokio::select! {
                _ = tokio::time::sleep(due.saturating_sub(started.elapsed())) => {}
                _ = mover.stopping.cancelled() => {}
            }
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

/// The staged events no record of a move covers yet, per device in device order, and the
/// highest number staged now; None when nothing is staged.
async fn not_yet_moved(mover: &Mover) -> Result<Option<(i64, VecDeque<(String, Vec<i64>)>)>> {
    // The records of moves first, then the index: the rows of a record cleared meanwhile (by this
    // round's delete, running beside) left the index before their record went.
    let records: Vec<(String, String, i64)> =
        sqlx::query_as("SELECT device_lo, device_hi, through FROM main.device_events_recent_moved")
            .fetch_all(&mover.reader)
            .await
            .map_err(gantry_store::error::db_error)?;
    // The staged events from the index in memory, not from the staging table (reading every
    // staged row through sqlx costs CPU that ingest needs). Rows moved
    // but not yet deleted count for `through`: they are deleted with this round's.
    let Some((through, mut by_device)) = mover.staged.by_device() else {
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
    Ok(Some((through, by_device.into_iter().collect())))
}

/// One move's events: whole devices from the front of `devices` up to `rows_per_move` rows,
/// over the device range `lo..=hi`, recorded as moved through `through`.
struct NextMove {
    seqs: Vec<i64>,
    lo: String,
    hi: String,
    through: i64,
}

/// Takes the next move off the front of `devices`. A short move (fewer rows than `ROWS_PER_MOVE`)
/// that meets a device with more events than it has room for takes that device's first events
/// alone, recorded through the last one's number; the rest stays in front for the next move.
fn next_move(devices: &mut VecDeque<(String, Vec<i64>)>, rows_per_move: usize, through: i64) -> NextMove {
    let mut seqs = Vec::new();
    let mut range: Option<(String, String)> = None;
    let mut moved_through = through;
    while seqs.len() < rows_per_move
        && let Some((device, mut device_seqs)) = devices.pop_front()
    {
        let room = rows_per_move - seqs.len();
        if device_seqs.len() > room && rows_per_move < ROWS_PER_MOVE {
            if !seqs.is_empty() {
                devices.push_front((device, device_seqs));
                break;
            }
            device_seqs.sort_unstable();
            let rest = device_seqs.split_off(room);
            moved_through = device_seqs[room - 1];
            devices.push_front((device.clone(), rest));
            seqs = device_seqs;
            range = Some((device.clone(), device));
            break;
        }
        seqs.extend(device_seqs);
        range = Some(match range {
            Some((lo, _)) => (lo, device),
            None => (device.clone(), device),
        });
    }
    let (lo, hi) = range.expect("at least one device");
    NextMove {
        seqs,
        lo,
        hi,
        through: moved_through,
    }
}

/// What a round has left of `YIELD_PER_ROUND`, shared by its moves and its deletes.
struct Yielding {
    left: std::sync::Mutex<Duration>,
}

impl Yielding {
    fn new() -> Self {
        Yielding {
            left: std::sync::Mutex::new(YIELD_PER_ROUND),
        }
    }

    /// Waits until the API's writes leave the writer quiet for `YIELD_QUIET`, within what the
    /// round has left and while ingest is not waiting for room.
    async fn wait(&self, mover: &Mover) {
        loop {
            let left = *self.left.lock().expect("not poisoned");
            let Some(since) = mover.api_writes.since() else { return };
            if since >= YIELD_QUIET || left.is_zero() || mover.staged.waiting() >= super::staged::MAX_STAGED {
                return;
            }
            let nap = (YIELD_QUIET - since).min(left);
            tokio::time::sleep(nap).await;
            let mut left = self.left.lock().expect("not poisoned");
            *left = left.saturating_sub(nap);
        }
    }
}

/// The staged rows deleted per transaction, at most: ingest commits on the same connection wait
/// for each.
const ROWS_PER_DELETE: usize = 1_000;

/// Deletes the moved rows numbered after `after` and up to `through` on the stager, the staging
/// file's one writer (ingest commits wait for the connection meanwhile).
///
/// It commits without waiting for the disk, as every commit of the stager: a flush of the disk
/// per delete would be a wait for the ingest commits on the same connection, many per round. A
/// lost delete leaves rows that their records still mark as moved;
/// `delete_last_round` flushes the round's deletes once before their records go.
pub(super) async fn delete_moved(stager: &AnyPool, after: i64, through: i64) -> Result<()> {
    sqlx::query(&format!("DELETE FROM {STAGING} WHERE seq > $1 AND seq <= $2"))
        .bind(after)
        .bind(through)
        .execute(stager)
        .await
        .map_err(gantry_store::error::db_error)?;
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
/// staging file must wait until the move is on disk: `delete_last_round` commits a synced transaction
/// on the main file first. Every other write of the main file stays synced (FULL).
pub(super) async fn move_devices(writer: &AnyPool, seqs: &[i64], lo: &str, hi: &str, through: i64) -> Result<u64> {
    let mut conn = Unsynced::acquire(writer).await?;
    conn.unsync().await?;
    let mut tx = conn.begin().await.map_err(gantry_store::error::db_error)?;
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
        .map_err(gantry_store::error::db_error)?
        .rows_affected();
    settle_shadows(&mut tx, &selected).await?;
    count_staged(&mut tx, &selected).await?;
    rollups::add(&mut tx, &selected.prefixed(&format!("{STAGING} WHERE "))).await?;
    sqlx::query("INSERT INTO main.device_events_recent_moved (device_lo, device_hi, through) VALUES ($1, $2, $3)")
        .bind(lo)
        .bind(hi)
        .bind(through)
        .execute(&mut *tx)
        .await
        .map_err(gantry_store::error::db_error)?;
    tx.commit().await.map_err(gantry_store::error::db_error)?;
    conn.synced().await?;
    Ok(rows)
}

/// Brings the shadows up to the staged events `staged` selects, in the transaction that moves
/// them into device_events. Until then a shadow read adds them (reads.rs): ingest commits write
/// the staging table alone, and a move writes each device's shadow once for all its events. (A
/// staged event deleted by id or by retention reaches the shadow from its deleted row.)
async fn settle_shadows(conn: &mut AnyConnection, staged: &Sql) -> Result<()> {
    let mut shadows = staged.prefixed(&format!(
        "INSERT INTO device_shadows (device_id, attribute_code, tenant_id, value, device_ts, ingress_ts) {}",
        LATEST_STAGED.0
    ));
    shadows.push(LATEST_STAGED.1).push(" ").push(SHADOW_UPSERT);
    shadows
        .query()
        .execute(&mut *conn)
        .await
        .map_err(gantry_store::error::db_error)?;
    Ok(())
}

/// Adds the staged events `staged` selects to the kept counts, as they are moved. Until then a
/// listing's total adds the device's staged events (reads.rs). The staged rows are read once,
/// counted per device, attribute and hour; the other keys are sums of those.
async fn count_staged(conn: &mut AnyConnection, staged: &Sql) -> Result<()> {
    let mut counts = staged.prefixed(&format!(
        "WITH moved AS MATERIALIZED (SELECT device_id, attribute_code, {} AS device_hour, {} AS ingress_hour, \
         COUNT(*) AS events FROM {STAGING} WHERE ",
        hour_sql("device_ts"),
        hour_sql("ingress_ts"),
    ));
    counts.push(&format!(
        " GROUP BY device_id, attribute_code, device_hour, ingress_hour) \
         INSERT INTO device_event_counts (device_id, attribute_code, clock, epoch_hour, events) \
         SELECT device_id, code, clock, hour, events FROM (\
         SELECT device_id, '' AS code, '' AS clock, 0 AS hour, SUM(events) AS events FROM moved GROUP BY device_id \
         UNION ALL SELECT device_id, attribute_code, '', 0, SUM(events) FROM moved GROUP BY device_id, attribute_code \
         UNION ALL SELECT device_id, '', 'device', device_hour, SUM(events) FROM moved GROUP BY device_id, device_hour \
         UNION ALL SELECT device_id, '', 'ingress', ingress_hour, SUM(events) FROM moved GROUP BY device_id, ingress_hour \
         UNION ALL SELECT device_id, attribute_code, 'device', device_hour, SUM(events) FROM moved \
         GROUP BY device_id, attribute_code, device_hour\
         ) AS counted WHERE true {COUNT_UPSERT}"
    ));
    counts
        .query()
        .execute(&mut *conn)
        .await
        .map_err(gantry_store::error::db_error)?;
    Ok(())
}

/// The writer's connection while its commits to the main file do not wait for the disk
/// (`synchronous=NORMAL`: the moves). Dropped before `synced` set FULL again (a failure, a round
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
            conn: pool.acquire().await.map_err(gantry_store::error::db_error)?,
            synced: false,
        })
    }

    async fn unsync(&mut self) -> Result<()> {
        sqlx::query("PRAGMA main.synchronous=NORMAL")
            .execute(&mut *self.conn)
            .await
            .map_err(gantry_store::error::db_error)?;
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
            .map_err(gantry_store::error::db_error)?;
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
