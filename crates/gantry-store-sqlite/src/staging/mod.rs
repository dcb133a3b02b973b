//! The staging engine, SQLite's event path. Ingest commits events into the staging table alone
//! (a table in arrival order, in a file of its own: file.rs, table.rs) without waiting for the
//! disk; the flusher puts each commit on disk before it is acknowledged (flush.rs); the mover puts
//! staged events into device_events in the background, settling the shadows and kept counts they
//! change (mover.rs); until then reads add a device's staged events, found by the numbers the
//! store keeps in memory (staged.rs, reads.rs).
//!
//! Why: an ingest commit holds at most a few events per device (a device's next message waits for
//! the acknowledgement of its last), so writing device_events directly would dirty a page of each
//! of its per-device indexes, and the device's shadow and count rows, for nearly every event.
//! Staged, they are appended to one table in arrival order, and a move writes each device's
//! accumulated events together, a page of each index once.

mod file;
mod flush;
mod keeps;
mod mover;
mod reads;
mod rollups;
mod staged;
mod table;
#[cfg(test)]
mod tests;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

use async_trait::async_trait;
use gantry_core::Result;
use gantry_core::alarm::{Alarm, AlarmState};
use gantry_core::event::{DeviceEvent, ReportedPosition, ShadowAttribute};
use gantry_core::ids::{DeviceId, EventId, ModelId, ProjectId, TenantId, WebhookId};
use gantry_core::paging::{Page, PageRequest};
use gantry_core::query::EventQuery;
use gantry_core::series::{Bucket, SeriesQuery};
use gantry_core::store::{AlarmKeep, Durable, EventStore};
use gantry_core::webhook::{OutboxKey, WebhookEvent};
use sqlx::{Any, AnyConnection, AnyPool, Transaction};

pub(crate) use self::file::{STAGER_PRAGMAS, StagingFile, WRITER_PRAGMAS, migrate, staging_file};
use self::flush::Flusher;
pub(crate) use self::keeps::folding_table;
use self::mover::{MOVE_EVERY, Mover, PACE};
use self::staged::{MAX_STAGED, Staged};
use self::table::{OUTBOX, STAGING};
use super::database::Database;
use gantry_store::engine::{EngineStats, EventEngine};
use gantry_store::events::counts::{CountChanges, hours_total};
use gantry_store::events::rollups::SeriesParts;
use gantry_store::events::{COLUMNS, EVENT_FIELDS, EventTableRules, EventTables, bind_event, values_clause};
use gantry_store::outbox::{
    OUTBOX_ROWS, WaitingRow, bind_row, bundle, insert_text, merge_by_time, take_rows, waiting_rows,
};
use gantry_store::sql::Sql;
use gantry_store::task::every;

/// Rows per multi-row statement: with anonymous placeholders (`values_clause`) wide statements
/// bind as fast as narrow ones, and fewer statements cost fewer steps; 128 × 15 values stays
/// under SQLite's 32,766.
const ROWS_PER_STATEMENT: usize = 128;

/// The engine. Its stager is the one connection that writes the staging file (but for the API's
/// deletes of staged events, on the main file's writer).
#[derive(Debug)]
pub(crate) struct StagingEvents {
    database: Database,
    /// Ingest's writes, unsynced (`STAGER_PRAGMAS`): the flusher puts them on disk.
    stager: AnyPool,
    /// device_events with the hours kept: the moves add them at no cost to ingest.
    kept: EventTables,
    mover: Arc<Mover>,
    /// The alarm keeps not folded yet (keeps.rs).
    keeps: Arc<keeps::Unfolded>,
    /// The write-ahead logs an operator watches: the main file's, the staging file's and the
    /// event-log file's.
    wal: [(&'static str, PathBuf); 3],
}

/// SQLite keeps counts per hour (its staged events are counted as they move) and keeps the
/// rollups whole in every transaction that writes events, so it has no fold mark; its staged
/// events are in no rollup yet.
#[derive(Debug)]
struct SqliteKept {
    staged: Arc<Staged>,
}

#[async_trait]
impl EventTableRules for SqliteKept {
    /// The all-time counts and the hours', which serve date-range totals.
    fn count<'a>(
        &self,
        changes: &mut CountChanges<'a>,
        device: &'a str,
        code: &'a str,
        device_ts: i64,
        ingress_ts: i64,
        n: i64,
    ) {
        changes.add(device, code, n);
        changes.add_hours(device, code, device_ts, ingress_ts, n);
    }

    fn range_total(&self, query: &EventQuery) -> Option<Sql> {
        hours_total(query)
    }

    /// The end of time: every event of device_events is in the rollups (the move that put it
    /// there added it).
    async fn rolled_up_before(&self, _tx: &mut sqlx::Transaction<'static, sqlx::Any>) -> Result<i64> {
        Ok(i64::MAX)
    }

    /// The device's staged events, over the whole window (they are not in device_events either).
    async fn add_unrolled(&self, _pool: &AnyPool, series: &mut SeriesParts<'_>) -> Result<()> {
        if let Some(staged) = self.staged.of_device(series.device()) {
            let seqs = series.placeholder(&staged);
            series.add_raw(
                &format!("{STAGING} WHERE {} AND ", table::in_staged(&seqs)),
                series.window(),
            );
        }
        Ok(())
    }
}

/// The numbers of the outboxes this engine keeps apart (`OutboxKey`): the staging file's and
/// the event-log file's.
const STAGED_OUTBOX: u8 = 1;
const LOGS_OUTBOX: u8 = 2;

impl StagingEvents {
    /// Starts the engine on `database`, with `stager` and `file` (whose schema is up to date):
    /// loads the index of staged events, and starts the flusher and the mover as chores of
    /// `database`.
    pub(crate) async fn start(
        database: Database,
        stager: AnyPool,
        file: StagingFile,
    ) -> std::result::Result<Self, sqlx::Error> {
        let staged = Arc::new(Staged::default());
        let wal = [
            ("main", database.wal_file()),
            ("staging", file.wal.clone()),
            ("logs", database.logs_wal.clone()),
        ];
        // The flusher outlives the mover: a round's deletes are flushed too.
        let flusher_stop = tokio_util::sync::CancellationToken::new();
        let (flusher, flushing) = Flusher::new(file.wal, staged.clone(), flusher_stop.clone());
        database.chores.spawn(flushing);
        let flusher = Arc::new(flusher);
        let (reader, writer) = (database.pool.clone(), database.writer.clone());
        staged.add(load_staged(&reader).await?);
        let through = keeps::through_at_open(&reader).await?;
        staged.flushed(through);
        keeps::fold_packs(&database.log_writer, &stager, through)
            .await
            .map_err(|e| sqlx::Error::Protocol(format!("folding the alarm keeps left: {e}")))?;
        let stopping = database.chores.stop_signal();
        let mover = Arc::new(Mover {
            reader: reader.clone(),
            writer: writer.clone(),
            stager: stager.clone(),
            staged,
            flusher,
            api_writes: database.api_writes.clone(),
            last_round: Default::default(),
            row_cost: Default::default(),
            stopping: stopping.clone(),
        });
        let rounds = every(
            MOVE_EVERY,
            writer,
            stopping,
            "moving staged events failed; retrying at the next round",
            {
                let mover = mover.clone();
                move |_| {
                    let mover = mover.clone();
                    async move {
                        // A round that waits for another (`catch_up`'s) does not start once the
                        // chores stop, so closing the store never waits on the holder.
                        let mut last_round = tokio::select! {
                            held = mover.last_round.lock() => held,
                            _ = mover.stopping.cancelled() => return Ok(0),
                        };
                        mover::round_held(&mover, &mut last_round, Some(PACE)).await
                    }
                }
            },
        );
        database.chores.spawn(async move {
            rounds.await;
            flusher_stop.cancel();
        });
        let unfolded = Arc::new(keeps::Unfolded::default());
        database.chores.every(
            keeps::FOLD_EVERY,
            database.log_writer.clone(),
            "folding alarm keeps failed; retrying at the next round",
            {
                let (unfolded, staged, stager) = (unfolded.clone(), mover.staged.clone(), stager.clone());
                move |log_writer| {
                    let (unfolded, staged, stager) = (unfolded.clone(), staged.clone(), stager.clone());
                    async move {
                        unfolded
                            .fold_all(&log_writer, Some(&stager), staged.flushed_through())
                            .await
                    }
                }
            },
        );
        Ok(StagingEvents {
            kept: EventTables {
                pool: reader,
                rules: Arc::new(SqliteKept {
                    staged: mover.staged.clone(),
                }),
            },
            database,
            stager,
            mover,
            keeps: unfolded,
            wal,
        })
    }

    pub(crate) fn database(&self) -> &Database {
        &self.database
    }

    fn staged(&self) -> &Staged {
        &self.mover.staged
    }

    /// The table of the outbox kept apart numbered `outbox` (`OutboxKey`), and the one
    /// connection that writes its file.
    fn outbox(&self, outbox: u8) -> (&'static str, &AnyPool) {
        if outbox == STAGED_OUTBOX {
            (OUTBOX, &self.stager)
        } else {
            (super::logs::LOG_OUTBOX, &self.database.log_writer)
        }
    }

    /// Stages `events` and writes the alarm keeps and webhook events they cause, in one
    /// transaction sent to the stager's thread as one text (one round trip, where a transaction
    /// of statements sent one by one would hold `committing` for each); returns each event's
    /// number, device and id. One statement of events alone commits by itself, with no
    /// transaction around it. A failure rolls the transaction back.
    async fn stage(
        &self,
        events: &[DeviceEvent],
        outbox: &[WebhookEvent],
        keeps: &[AlarmKeep],
    ) -> Result<Vec<(i64, String, String)>> {
        let alone = events.len() <= ROWS_PER_STATEMENT && outbox.is_empty() && keeps.is_empty();
        let mut text = String::from(if alone { "" } else { "BEGIN; " });
        // The rows of one INSERT take consecutive numbers in VALUES order (AUTOINCREMENT, one
        // writer), ending at the last inserted: cheaper than RETURNING a row for each. (sqlx's
        // Any driver does not pass SQLite's last rowid on.)
        for chunk in events.chunks(ROWS_PER_STATEMENT) {
            text.push_str(&format!(
                "INSERT INTO {STAGING} ({COLUMNS}) VALUES {}; SELECT last_insert_rowid(); ",
                values_clause(chunk.len(), EVENT_FIELDS, true),
            ));
        }
        // Right after the events: the pack's number is the last event's `last_insert_rowid()`,
        // which an insert into the outbox (a rowid table) would change.
        let pack = match keeps.is_empty() {
            true => None,
            false => {
                text.push_str(keeps::STAGE_TEXT);
                text.push_str("; ");
                Some(keeps::Unfolded::pack(keeps)?)
            }
        };
        let outbox = bundle(outbox);
        for chunk in outbox.chunks(OUTBOX_ROWS) {
            text.push_str(&insert_text(OUTBOX, chunk.len(), true));
            text.push_str("; ");
        }
        if !alone {
            text.push_str("COMMIT");
        }
        let query = events.iter().try_fold(sqlx::query(&text), bind_event)?;
        let query = match &pack {
            Some(packed) => query.bind(packed.as_str()),
            None => query,
        };
        let query = outbox.iter().fold(query, bind_row);
        let mut conn = self.stager.acquire().await.map_err(gantry_store::error::db_error)?;
        let rows = match query.fetch_all(&mut *conn).await {
            Ok(rows) => rows,
            Err(e) => {
                // The text's transaction may be open still (a statement after BEGIN failed).
                if !alone {
                    let _ = sqlx::query("ROLLBACK").execute(&mut *conn).await;
                }
                return Err(gantry_store::error::db_error(e));
            }
        };
        // One row per chunk of events: its SELECT's (the INSERTs return none).
        if rows.len() != events.len().div_ceil(ROWS_PER_STATEMENT) {
            return Err(gantry_store::error::db_error(sqlx::Error::RowNotFound));
        }
        let mut all = Vec::with_capacity(events.len());
        for (chunk, row) in events.chunks(ROWS_PER_STATEMENT).zip(&rows) {
            all.extend(numbered(chunk, row)?);
        }
        if let (Some(_), Some((last, _, _))) = (pack, all.last()) {
            self.keeps.add(*last, keeps);
        }
        Ok(all)
    }

    /// Tells the flusher of a commit, in commit order (`committing` is held): it puts the commit
    /// on disk and then the events into the index, before the caller acknowledges them.
    fn committed(&self, began: Instant, numbered: Vec<(i64, String, String)>) -> Durable {
        let flusher = &self.mover.flusher;
        flusher.stats().committed(began.elapsed());
        let flushed = flusher.after_commit(numbered);
        Box::pin(async move { flushed.await.map_err(gantry_store::error::io_unavailable) })
    }

    /// A transaction on the main file's writer. Deferred: `BEGIN IMMEDIATE` would take the write
    /// lock of every attached file, the staging file's too, and hold ingest commits. Each file's
    /// lock is taken by the transaction's first write to it; only this connection writes the main
    /// file and its transactions that write the staging file write it before they read it, so no
    /// upgrade from a read can fail with SQLITE_BUSY_SNAPSHOT. (Another process writing the main
    /// file meanwhile, the sqlite3 shell say, could make one fail.)
    async fn begin_write(&self) -> Result<Transaction<'static, Any>> {
        self.database
            .writer
            .begin()
            .await
            .map_err(gantry_store::error::db_error)
    }
}

/// Each of `events` with its number, device and id: an INSERT's rows take consecutive numbers in
/// VALUES order (AUTOINCREMENT, one writer), ending at the `last_insert_rowid()` that `row`, the
/// SELECT's after it, holds.
fn numbered(events: &[DeviceEvent], row: &sqlx::any::AnyRow) -> Result<Vec<(i64, String, String)>> {
    let last: i64 = sqlx::Row::try_get(row, 0).map_err(gantry_store::error::db_error)?;
    let first = last - events.len() as i64 + 1;
    Ok(events
        .iter()
        .zip(first..)
        .map(|(e, seq)| (seq, e.device_id.as_str().to_owned(), e.id.as_str().to_owned()))
        .collect())
}

#[async_trait]
impl EventEngine for StagingEvents {
    async fn catch_up(&self) -> Result<u64> {
        mover::round(&self.mover, None).await
    }

    /// The chores first (a round under way finishes), then the files.
    async fn close(&self) {
        self.database.chores.end().await;
        self.stager.close().await;
        self.database.close().await;
    }

    /// Telemetry and shadow events, which the ingest commits wrote into the staging file
    /// (`STAGED_OUTBOX`), and event-log events, which the event logs' writes wrote into the
    /// event-log file (`LOGS_OUTBOX`), merged by time.
    async fn engine_outbox_waiting(&self, slot: u8, project: &ProjectId, limit: usize) -> Result<Vec<WaitingRow>> {
        let pool = &self.database.pool;
        let staged = waiting_rows(pool, (OUTBOX, STAGED_OUTBOX), slot, project, limit).await?;
        let logs = waiting_rows(pool, (super::logs::LOG_OUTBOX, LOGS_OUTBOX), slot, project, limit).await?;
        Ok(merge_by_time(staged, logs, limit))
    }

    /// The keeps on disk (numbered no higher than the last flush), folded by the event-log writer
    /// (keeps.rs).
    async fn fold_alarm_keeps(&self, tx: &mut AnyConnection, devices: Option<&[&DeviceId]>) -> Result<()> {
        self.keeps.fold(tx, self.staged().flushed_through(), devices).await
    }

    /// Every keep on disk, when one is held (keeps.rs): a read then sees what an acknowledged
    /// event counted.
    async fn fold_before_alarm_read(&self) -> Result<()> {
        let through = self.staged().flushed_through();
        if !self.keeps.waiting(through) {
            return Ok(());
        }
        self.keeps.fold_all(&self.database.log_writer, None, through).await
    }

    /// The keeps held, over what a snapshot read (keeps.rs).
    fn lay_alarm_keeps(&self, device: &DeviceId, read: &mut [(String, AlarmState, Option<Alarm>)]) {
        self.keeps.lay_over(device, read);
    }

    /// Each outbox's on its file's one writer: the stager, the event logs' writer.
    async fn engine_outbox_drop(&self, slot: u8, keys: Option<&[OutboxKey]>) -> Result<()> {
        for outbox in [STAGED_OUTBOX, LOGS_OUTBOX] {
            let (table, writer) = self.outbox(outbox);
            let seqs: Option<Vec<i64>> =
                keys.map(|keys| keys.iter().filter(|k| k.outbox == outbox).map(|k| k.seq).collect());
            if seqs.as_ref().is_some_and(Vec::is_empty) {
                continue;
            }
            let mut tx = writer.begin().await.map_err(gantry_store::error::db_error)?;
            take_rows(&mut tx, (table, ""), slot, seqs.as_deref()).await?;
            tx.commit().await.map_err(gantry_store::error::db_error)?;
        }
        Ok(())
    }

    /// The read, writer and ingest pools, the staged events no move has taken, and the size of
    /// each file's write-ahead log.
    fn stats(&self) -> EngineStats {
        use gantry_store::stats::{file_size, pool};
        EngineStats {
            pools: vec![
                pool("read", &self.database.pool),
                pool("writer", &self.database.writer),
                pool("ingest", &self.stager),
                pool("event-logs", &self.database.log_writer),
            ],
            staged_events: Some(self.staged().waiting()),
            wal_bytes: self.wal.iter().map(|(name, path)| (*name, file_size(path))).collect(),
        }
    }

    /// Held: one process at a time opens the database (its lock file), so no other node asks.
    async fn lease_webhook(&self, _: &WebhookId, _: &str, _: i64, _: i64) -> Result<bool> {
        Ok(true)
    }
}

#[async_trait]
impl EventStore for StagingEvents {
    async fn append_events(&self, events: &[DeviceEvent]) -> Result<()> {
        self.commit_events(events, &[]).await?.await
    }

    /// One (one stager writes the staging file; its commits already overlap their flushes).
    fn ingest_writers(&self) -> usize {
        1
    }

    /// The commit to the staging file returns before its flush (flush.rs); the staged events
    /// enter the index when the flush is done, and the returned future resolves then. The
    /// outbox goes into the staging file's own (`OUTBOX`) in the same transaction.
    async fn commit_events(&self, events: &[DeviceEvent], outbox: &[WebhookEvent]) -> Result<Durable> {
        self.commit_events_keeping(events, outbox, &[]).await
    }

    /// Alarm keeps are staged with the events (keeps.rs).
    fn keeps_alarms_with_events(&self) -> bool {
        true
    }

    /// `commit_events`, with `keeps` in the same transaction of the staging file.
    async fn commit_events_keeping(
        &self,
        events: &[DeviceEvent],
        outbox: &[WebhookEvent],
        keeps: &[AlarmKeep],
    ) -> Result<Durable> {
        if events.is_empty() {
            return Ok(Box::pin(std::future::ready(Ok(()))));
        }
        // Beyond this many staged events ingest waits for the rounds (back-pressure), holding
        // nothing; then it tells the index in commit order (`Staged::committing`).
        self.staged().wait_for_room(MAX_STAGED).await;
        let _committing = self.staged().committing.lock().await;
        let began = Instant::now();
        let numbered = self.stage(events, outbox, keeps).await?;
        Ok(self.committed(began, numbered))
    }

    async fn get_event(&self, tenant: &TenantId, id: &EventId) -> Result<Option<DeviceEvent>> {
        self.get(tenant, id).await
    }

    async fn delete_event(&self, tenant: &TenantId, id: &EventId) -> Result<bool> {
        self.delete(tenant, id).await
    }

    async fn list_events(&self, query: &EventQuery, page: PageRequest) -> Result<Page<DeviceEvent>> {
        self.list(query, page).await
    }

    async fn delete_events_before(&self, cutoff: i64, limit: i64) -> Result<u64> {
        self.delete_before(cutoff, limit).await
    }

    async fn shadow(&self, tenant: &TenantId, device: &DeviceId) -> Result<Vec<(ShadowAttribute, i64)>> {
        self.shadow_of(tenant, device).await
    }

    async fn project_positions(
        &self,
        tenant: &TenantId,
        project: &ProjectId,
        codes: &[(ModelId, Vec<String>)],
    ) -> Result<Vec<ReportedPosition>> {
        self.positions_of(tenant, project, codes).await
    }

    async fn series(&self, query: &SeriesQuery) -> Result<Vec<Bucket>> {
        self.kept.series(query).await
    }
}

/// The staging table's rows (number, device, id), for the index in memory when the store opens.
async fn load_staged(pool: &AnyPool) -> std::result::Result<Vec<(i64, String, String)>, sqlx::Error> {
    sqlx::query_as(&format!("SELECT seq, device_id, id FROM {STAGING} ORDER BY seq"))
        .fetch_all(pool)
        .await
}
