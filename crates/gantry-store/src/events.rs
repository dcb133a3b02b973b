//! Device events and shadows: batched inserts, the shadows and kept counts, and the time-window
//! listings.
//!
//! PostgreSQL writes device_events, the shadows and the counts in each ingest transaction. SQLite
//! commits events into device_events_recent alone (in a file of its own) and moves them into
//! device_events in the background (merge.rs), settling the shadows and counts of the moved events in the move's
//! transaction; until then reads add the staged events (`shadow`, `kept_count`, listings of a
//! device with staged events), found by the numbers the store keeps in memory (staged.rs). Lookups
//! and deletes by id look in both tables, device_events first (see `get_event`).

use std::collections::{BTreeMap, HashMap};
use std::fmt::Write;
use std::time::Instant;

use async_trait::async_trait;
use gantry_core::Result;
use gantry_core::enums::{Channel, DataType};
use gantry_core::event::{DeviceEvent, ShadowAttribute};
use gantry_core::ids::{DeviceId, EventId, ModelId, ProjectId, TenantId};
use gantry_core::paging::{Page, PageRequest};
use gantry_core::query::{EventQuery, TimeField};
use gantry_core::store::{Durable, EventStore};
use sqlx::any::AnyArguments;
use sqlx::any::AnyRow;
use sqlx::pool::PoolConnection;
use sqlx::query::Query;
use sqlx::{Any, AnyConnection, Transaction};

use crate::SqlStore;
use crate::merge::{NOT_MOVED, STAGING};
use crate::row::{get, json, json_opt, spelled, to_json};
use crate::sql::Sql;
use crate::staged::{MAX_STAGED, json_array};

pub(crate) const COLUMNS: &str = "id, tenant_id, project_id, model_id, device_id, attribute_code, attribute_type, attribute_data, \
                       channel, ingress_ts, device_ts, correlation_id, context, created_by, created_time";
const EVENT_FIELDS: usize = 15;
/// Rows per INSERT statement on PostgreSQL, where each statement is a round trip: 15 values each
/// stays well under its 65,535 parameters.
const ROWS_PER_STATEMENT: usize = 500;

/// From this offset on, a listing reads its page's ids first and then their rows: the events it
/// skips are index entries then, not rows (each listing index holds the id). Page 1000 of 100
/// (OFFSET 99,900) of one device's 1,000,000 events, `gantry-bench read`, p50 at 1 and 8
/// connections, two rounds: PostgreSQL 11.9 -> 8.9 and 44.4 -> 32.4 ms, 16.5 -> 13.6 and 51.9 ->
/// 46.4 ms. SQLite skips rows it does not return almost as cheaply as index entries (the same
/// statements alone: 4.3 -> 4.0 ms on SQLite 3.51, 6.0 -> 4.4 on 3.40; in the bench the same within
/// its noise). Nearer the front the second lookup costs more than it saves (PostgreSQL at OFFSET
/// 0: 0.16 -> 0.53 ms).
const DEEP_OFFSET: i64 = 10_000;

/// PostgreSQL's ingest writers (`ingest_writers`). MQTT ingest on a 2-core machine with
/// PostgreSQL on it (15 s each, small store), stored/s at 25,000 offered and PostgreSQL's cores at
/// 10,000: 1 writer 20,074 to 21,517 (falling behind), 0.61 cores; 2 writers 23,310 and 23,840,
/// 0.74; 4 writers 22,511 to 24,961, 0.87 (smaller batches, more commits); 8 writers 21,355.
pub(crate) const POSTGRES_INGEST_WRITERS: usize = 2;

fn event_from_row(row: &AnyRow) -> Result<DeviceEvent> {
    Ok(DeviceEvent {
        id: EventId::from_string(get::<String>(row, "id")?),
        tenant_id: TenantId::from_string(get::<String>(row, "tenant_id")?),
        project_id: ProjectId::from_string(get::<String>(row, "project_id")?),
        model_id: ModelId::from_string(get::<String>(row, "model_id")?),
        device_id: DeviceId::from_string(get::<String>(row, "device_id")?),
        attribute_code: get(row, "attribute_code")?,
        attribute_type: spelled(row, "attribute_type", DataType::parse)?,
        attribute_data: json(row, "attribute_data")?,
        channel: spelled(row, "channel", Channel::parse)?,
        ingress_time_stamp: get(row, "ingress_ts")?,
        device_timestamp: get(row, "device_ts")?,
        correlation_id: get(row, "correlation_id")?,
        context: json_opt(row, "context")?,
        created_by: get(row, "created_by")?,
        created_time: get(row, "created_time")?,
        deleted: false,
    })
}

/// `($1, $2, …), ($16, …)` for `rows` rows of `width` values; with `anonymous`, `(?, ?, …), …`.
/// SQLite looks a numbered placeholder's name up by walking a list of all of them, once per bound
/// value: a 240-value statement spent more time there than in the insert.
fn values_clause(rows: usize, width: usize, anonymous: bool) -> String {
    let mut text = String::with_capacity(rows * width * 5);
    for r in 0..rows {
        text.push_str(if r == 0 { "(" } else { ", (" });
        for c in 0..width {
            text.push_str(if c == 0 { "" } else { ", " });
            if anonymous {
                text.push('?');
            } else {
                let _ = write!(text, "${}", r * width + c + 1);
            }
        }
        text.push(')');
    }
    text
}

/// Per device and attribute, the event the shadow should end up holding from this batch: the
/// newest device time, and on a tie the one that arrived last.
fn shadow_candidates(events: &[DeviceEvent]) -> Vec<&DeviceEvent> {
    let mut latest: HashMap<(&str, &str), &DeviceEvent> = HashMap::new();
    for event in events {
        let key = (event.device_id.as_str(), event.attribute_code.as_str());
        match latest.get(&key) {
            Some(held) if held.device_timestamp > event.device_timestamp => {}
            _ => {
                latest.insert(key, event);
            }
        }
    }
    let mut candidates: Vec<&DeviceEvent> = latest.into_values().collect();
    // One lock order for every writer: concurrent batches (several nodes on one PostgreSQL)
    // then wait for each other instead of deadlocking.
    candidates.sort_by(|a, b| (&a.device_id, &a.attribute_code).cmp(&(&b.device_id, &b.attribute_code)));
    candidates
}

/// A shadow row is only replaced by a value at least as new by device time, so late events never
/// roll it back.
const SHADOW_UPSERT: &str = "ON CONFLICT (device_id, attribute_code) DO UPDATE SET value = excluded.value, \
                             device_ts = excluded.device_ts, ingress_ts = excluded.ingress_ts \
                             WHERE excluded.device_ts >= device_shadows.device_ts";

const COUNT_UPSERT: &str = "ON CONFLICT (device_id, attribute_code, clock, epoch_hour) \
                            DO UPDATE SET events = device_event_counts.events + excluded.events";

/// The width of the kept counts' hours (migration 0012).
const HOUR_MS: i64 = 3_600_000;

/// The number of `ts`'s hour: `ts` / HOUR_MS rounded down (before 1970 too).
fn hour_of(ts: i64) -> i64 {
    ts.div_euclid(HOUR_MS)
}

/// `hour_of` in SQL, for a column: both engines divide integers rounding toward zero.
fn hour_sql(column: &str) -> String {
    format!("({column} / {HOUR_MS} - CASE WHEN {column} % {HOUR_MS} < 0 THEN 1 ELSE 0 END)")
}

/// The clock a listing's date range applies to, as the kept counts name it, and its column (the
/// listing's order too).
fn clock_of(field: TimeField) -> (&'static str, &'static str) {
    match field {
        TimeField::Device => ("device", "device_ts"),
        TimeField::Ingress => ("ingress", "ingress_ts"),
    }
}

/// SQLite: around a filter of device_events_recent, per device and attribute the newest of the
/// staged events it selects, by device time and on a tie the one committed last (the higher
/// number): what the shadow holds once those events are settled.
const LATEST_STAGED: (&str, &str) = (
    "SELECT device_id, attribute_code, tenant_id, attribute_data, device_ts, ingress_ts FROM (\
     SELECT device_id, attribute_code, tenant_id, attribute_data, device_ts, ingress_ts, ROW_NUMBER() OVER \
     (PARTITION BY device_id, attribute_code ORDER BY device_ts DESC, seq DESC) AS newest \
     FROM staging.device_events_recent WHERE ",
    ") AS staged WHERE newest = 1",
);

/// SQLite: brings the shadows up to the staged events `staged` selects, in the transaction that
/// moves them into device_events. Until then a shadow read adds them (`shadow`): ingest commits
/// write the staging table alone, and a move writes each device's shadow once for all its events.
/// (A staged event deleted by id or by retention reaches the shadow from its deleted row:
/// `delete_from`.)
pub(crate) async fn settle_shadows(conn: &mut AnyConnection, staged: &Sql) -> Result<()> {
    let mut shadows = staged.prefixed(&format!(
        "INSERT INTO device_shadows (device_id, attribute_code, tenant_id, value, device_ts, ingress_ts) {}",
        LATEST_STAGED.0
    ));
    shadows.push(LATEST_STAGED.1).push(" ").push(SHADOW_UPSERT);
    shadows.query().execute(&mut *conn).await.map_err(crate::db_error)?;
    Ok(())
}

/// SQLite: adds the staged events `staged` selects to the kept counts, as they are moved. Until
/// then a listing's total adds the device's staged events (`kept_count`, `range_count`). The
/// staged rows are read once, counted per device, attribute and hour; the other keys are sums of
/// those.
pub(crate) async fn count_staged(conn: &mut AnyConnection, staged: &Sql) -> Result<()> {
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
    counts.query().execute(&mut *conn).await.map_err(crate::db_error)?;
    Ok(())
}

/// PostgreSQL: each device's and attribute's newest event of the batch into the shadows; SQLite:
/// the newest of the staged events a delete takes.
async fn update_shadows(tx: &mut Transaction<'static, Any>, events: &[DeviceEvent], rows: usize) -> Result<()> {
    for chunk in shadow_candidates(events).chunks(rows) {
        let text = format!(
            "INSERT INTO device_shadows (device_id, attribute_code, tenant_id, value, device_ts, ingress_ts) \
             VALUES {} {SHADOW_UPSERT}",
            values_clause(chunk.len(), 6, false)
        );
        let mut query = sqlx::query(&text);
        for e in chunk {
            query = query
                .bind(e.device_id.as_str())
                .bind(e.attribute_code.as_str())
                .bind(e.tenant_id.as_str())
                .bind(to_json(&e.attribute_data)?)
                .bind(e.device_timestamp)
                .bind(e.ingress_time_stamp);
        }
        query.execute(&mut **tx).await.map_err(crate::db_error)?;
    }
    Ok(())
}

/// `query` with the values of `e`'s row (COLUMNS' order).
fn bind_event<'q>(
    query: Query<'q, Any, AnyArguments<'q>>,
    e: &'q DeviceEvent,
) -> Result<Query<'q, Any, AnyArguments<'q>>> {
    Ok(query
        .bind(e.id.as_str())
        .bind(e.tenant_id.as_str())
        .bind(e.project_id.as_str())
        .bind(e.model_id.as_str())
        .bind(e.device_id.as_str())
        .bind(e.attribute_code.as_str())
        .bind(e.attribute_type.as_str())
        .bind(to_json(&e.attribute_data)?)
        .bind(e.channel.as_str())
        .bind(e.ingress_time_stamp)
        .bind(e.device_timestamp)
        .bind(e.correlation_id.as_deref())
        .bind(e.context.as_ref().map(to_json).transpose()?)
        .bind(e.created_by.as_str())
        .bind(e.created_time))
}

/// Where an ingest batch is written: alone on the stager's connection when it is one statement
/// (it commits with the statement), else in a transaction.
enum Writing {
    Alone(PoolConnection<Any>),
    Transaction(Transaction<'static, Any>),
}

#[async_trait]
impl EventStore for SqlStore {
    async fn append_events(&self, events: &[DeviceEvent]) -> Result<()> {
        self.commit_events(events).await?.await
    }

    /// SQLite: one (one stager writes the staging file; its commits already overlap their flushes).
    /// PostgreSQL: several, so that one writer's statements are built and sent while another's
    /// execute.
    fn ingest_writers(&self) -> usize {
        if self.stages_events() {
            1
        } else {
            POSTGRES_INGEST_WRITERS
        }
    }

    /// On SQLite the commit to the staging file returns before its flush (flush.rs); the staged
    /// events enter the index when the flush is done. On PostgreSQL the commit is durable.
    async fn commit_events(&self, events: &[DeviceEvent]) -> Result<Durable> {
        if events.is_empty() {
            return Ok(Box::pin(std::future::ready(Ok(()))));
        }
        let rows = self.rows_per_statement();
        let staging = self.stages_events();
        let _committing = if staging {
            // Beyond this many staged events ingest waits for the walks (back-pressure), holding
            // nothing; then it tells the index in commit order (`Staged::committing`).
            self.staged.wait_for_room(MAX_STAGED).await;
            Some(self.staged.committing.lock().await)
        } else {
            None
        };
        let began = Instant::now();
        let mut staged = Vec::new();
        // Staged events that fit one statement commit with it, in one round trip to the stager's
        // thread with the number query below (four with a transaction around them); more take a
        // transaction, so that a batch commits whole.
        let mut writing = if staging && events.len() <= rows {
            Writing::Alone(self.stager.acquire().await.map_err(crate::db_error)?)
        } else {
            Writing::Transaction(self.begin_ingest().await?)
        };
        for chunk in events.chunks(rows) {
            let conn: &mut AnyConnection = match &mut writing {
                Writing::Transaction(tx) => tx,
                Writing::Alone(conn) => conn,
            };
            if !staging {
                let text = format!(
                    "INSERT INTO device_events ({COLUMNS}) VALUES {}",
                    values_clause(chunk.len(), EVENT_FIELDS, false)
                );
                let query = chunk.iter().try_fold(sqlx::query(&text), bind_event)?;
                query.execute(&mut *conn).await.map_err(crate::db_error)?;
                continue;
            }
            // The rows of one INSERT take consecutive numbers in VALUES order (AUTOINCREMENT,
            // one writer), ending at the last inserted: cheaper than RETURNING a row for each.
            // (sqlx's Any driver does not pass SQLite's last rowid on.)
            let text = format!(
                "INSERT INTO {STAGING} ({COLUMNS}) VALUES {}; SELECT last_insert_rowid()",
                values_clause(chunk.len(), EVENT_FIELDS, true),
            );
            let query = chunk.iter().try_fold(sqlx::query(&text), bind_event)?;
            // The INSERT returns no row, the SELECT after it one (`fetch_one` ends with the
            // first statement on sqlx 0.8: RowNotFound).
            let rows = query.fetch_all(&mut *conn).await.map_err(crate::db_error)?;
            let last: i64 = rows
                .first()
                .ok_or(sqlx::Error::RowNotFound)
                .and_then(|row| sqlx::Row::try_get(row, 0))
                .map_err(crate::db_error)?;
            let first = last - chunk.len() as i64 + 1;
            staged.extend(
                chunk
                    .iter()
                    .zip(first..)
                    .map(|(e, seq)| (seq, e.device_id.as_str().to_owned(), e.id.as_str().to_owned())),
            );
        }
        if let Writing::Transaction(tx) = &mut writing
            && !staging
        {
            // Staged events reach the shadows and the counts when they are moved (merge.rs).
            update_shadows(tx, events, rows).await?;
            let mut tally = Tally::new(self.keeps_hours());
            for e in events {
                tally.add(
                    e.device_id.as_str(),
                    &e.attribute_code,
                    e.device_timestamp,
                    e.ingress_time_stamp,
                    1,
                );
            }
            tally.apply(tx, rows).await?;
        }
        if let Writing::Transaction(tx) = writing {
            tx.commit().await.map_err(crate::db_error)?;
        }
        match &self.stage {
            // Staged (the store has a stage on SQLite alone). Told in commit order (`committing`
            // is held): the flusher puts the commit on disk and then the events into the index,
            // before the caller acknowledges them.
            Some(stage) => {
                stage.flusher.stats().committed(began.elapsed());
                let flushed = stage.flusher.after_commit(staged);
                Ok(Box::pin(async move { flushed.await.map_err(crate::io_unavailable) }))
            }
            None => Ok(Box::pin(std::future::ready(Ok(())))),
        }
    }

    async fn get_event(&self, tenant: &TenantId, id: &EventId) -> Result<Option<DeviceEvent>> {
        // device_events first, by its key; then the staging table by the event's number, when it
        // is staged. Events only ever move from staging into device_events, so one that a move
        // took between the first two reads is in the third.
        let kept = self.event_in("device_events", None, tenant, id).await?;
        if kept.is_some() || !self.stages_events() {
            return Ok(kept);
        }
        if let Some(seq) = self.staged.seq_of(id.as_str())
            && let Some(staged) = self.event_in(STAGING, Some(seq), tenant, id).await?
        {
            return Ok(Some(staged));
        }
        self.event_in("device_events", None, tenant, id).await
    }

    async fn delete_event(&self, tenant: &TenantId, id: &EventId) -> Result<bool> {
        let mut selected = Sql::new("tenant_id = ");
        selected.bind(tenant.as_str()).push(" AND id = ").bind(id.as_str());
        let mut tx = self.begin_write().await?;
        let mut deleted = self.delete_from(&mut tx, "device_events", &selected).await?;
        // Not kept: staged, if the index knows it. No move commits during this transaction
        // (moves go through the same writer), so an event is in one of the two.
        if deleted == 0
            && self.stages_events()
            && let Some(seq) = self.staged.seq_of(id.as_str())
        {
            let mut staged = Sql::new(&format!("{NOT_MOVED} AND seq = "));
            staged
                .bind(seq)
                .push(" AND tenant_id = ")
                .bind(tenant.as_str())
                .push(" AND id = ")
                .bind(id.as_str());
            deleted = self.delete_from(&mut tx, STAGING, &staged).await?;
        }
        tx.commit().await.map_err(crate::db_error)?;
        Ok(deleted > 0)
    }

    async fn list_events(&self, query: &EventQuery, page: PageRequest) -> Result<Page<DeviceEvent>> {
        let (_, time) = clock_of(query.time_field);
        let mut filter = device_filter(query);
        if let Some(start) = query.start {
            filter.push(&format!(" AND {time} >= ")).bind(start);
        }
        if let Some(end) = query.end {
            filter.push(&format!(" AND {time} <= ")).bind(end);
        }
        // Most devices have nothing staged when they are read: the listing is then one table's. An
        // event staged after this was written concurrently with the read.
        let staged = self.staged_of(&query.device);
        let total = if query.start.is_none() && query.end.is_none() {
            self.kept_count(query, staged.as_deref()).await?
        } else {
            self.range_count(query, &filter, staged.as_deref()).await?
        };
        let items = if let Some(staged) = &staged {
            self.page_of_both_tables(&query.device, &filter, staged, time, page)
                .await?
        } else {
            let order = format!(" ORDER BY {time} DESC, id DESC");
            // Deep: the page's ids from the listing's index alone, then its rows by id.
            let deep = page.offset() >= DEEP_OFFSET;
            let mut select = filter.prefixed(&format!(
                "SELECT {COLUMNS} FROM device_events WHERE {}",
                if deep {
                    "id IN (SELECT id FROM device_events WHERE "
                } else {
                    ""
                }
            ));
            select
                .push(&format!("{order} LIMIT "))
                .bind(page.limit())
                .push(" OFFSET ")
                .bind(page.offset());
            if deep {
                select.push(&format!("){order}"));
            }
            let rows = select.query().fetch_all(&self.pool).await.map_err(crate::db_error)?;
            rows.iter().map(event_from_row).collect::<Result<Vec<_>>>()?
        };
        Ok(Page {
            request: page,
            total,
            items,
        })
    }

    async fn delete_events_before(&self, cutoff: i64, limit: i64) -> Result<u64> {
        // Event ids are UUIDv7, so the primary key orders them by arrival: no time index needed.
        let mut tx = self.begin_write().await?;
        let mut deleted = 0;
        for table in self.event_tables() {
            if deleted >= limit as u64 {
                break;
            }
            // Rows a walk has moved but not yet deleted from staging are deleted from device_events.
            let not_moved = if *table == STAGING {
                format!("{NOT_MOVED} AND ")
            } else {
                String::new()
            };
            let mut selected = Sql::new(&format!("id IN (SELECT id FROM {table} WHERE {not_moved}id < "));
            selected
                .bind(EventId::lower_bound_at(cutoff).as_str())
                .push(" ORDER BY id LIMIT ")
                .bind(limit - deleted as i64)
                .push(")");
            deleted += self.delete_from(&mut tx, table, &selected).await?;
        }
        tx.commit().await.map_err(crate::db_error)?;
        Ok(deleted)
    }

    async fn shadow(&self, tenant: &TenantId, device: &DeviceId) -> Result<Vec<(ShadowAttribute, i64)>> {
        let mut selected = Sql::new("device_id = ");
        selected
            .bind(device.as_str())
            .push(" AND tenant_id = ")
            .bind(tenant.as_str());
        let head = "SELECT attribute_code, value, device_ts, ingress_ts, 0 AS staged FROM device_shadows WHERE ";
        // On SQLite with the newest of the device's staged events, in one statement: one
        // snapshot, whether or not a move commits meanwhile.
        let statement = match self.staged_of(device) {
            Some(staged) => over_both_tables(
                &selected,
                &staged,
                head,
                &format!(
                    " UNION ALL SELECT attribute_code, attribute_data, device_ts, ingress_ts, 1 FROM ({}",
                    LATEST_STAGED.0
                ),
                &format!("{}) AS latest", LATEST_STAGED.1),
            ),
            None => selected.prefixed(head),
        };
        let rows = statement.query().fetch_all(&self.pool).await.map_err(crate::db_error)?;
        let mut shadow: BTreeMap<String, (ShadowAttribute, i64)> = BTreeMap::new();
        for row in &rows {
            let attribute = ShadowAttribute {
                code: get(row, "attribute_code")?,
                value: json(row, "value")?,
                timestamp: get(row, "device_ts")?,
            };
            // A staged event arrived after every settled one: it wins a tie, as it will when it
            // is settled.
            let staged = get::<i64>(row, "staged")? == 1;
            let replaces = match shadow.get(&attribute.code) {
                Some((held, _)) => {
                    attribute.timestamp > held.timestamp || (staged && attribute.timestamp == held.timestamp)
                }
                None => true,
            };
            if replaces {
                shadow.insert(attribute.code.clone(), (attribute, get(row, "ingress_ts")?));
            }
        }
        Ok(shadow.into_values().collect())
    }
}

impl SqlStore {
    /// Whether events are staged in device_events_recent (SQLite) or go straight into device_events
    /// (PostgreSQL). PostgreSQL's ingest measured no faster staged, many writers there do not share
    /// one WAL page by page, and its planner does not merge a listing's index scan of
    /// device_events with the staging table's rows (it read the device's whole index instead).
    pub(crate) fn stages_events(&self) -> bool {
        self.is_sqlite()
    }

    /// Whether the kept counts hold counts per hour for date-range totals (`range_count`): on
    /// SQLite, where the moves add them beside the totals at no measurable cost. On PostgreSQL
    /// the ingest transaction would add them, five keys per device and attribute of a batch
    /// instead of two: single-event POSTs measured 12,845/s against 15,704 and 15,863 without
    /// (docs/PERFORMANCE.md), so a date range is counted there (migration 0014 drops the hours
    /// 0012 counted).
    pub(crate) fn keeps_hours(&self) -> bool {
        self.is_sqlite()
    }

    /// SQLite bound wide statements slowly while they had numbered placeholders (batches of 256
    /// events: 4,300 events/s at 500 rows per statement, 6,800 at 16), because each bound value
    /// looked its placeholder's name up in a list of all of them. With anonymous placeholders
    /// (`values_clause`) 128 rows per statement cost no more: ingest-rest measured the same at 16
    /// and 128 (4,478 and 4,473/s), and a batch of 1,000 MQTT events takes 8 statements per table
    /// instead of 63. 128 × 15 values stays under SQLite's 32,766. PostgreSQL gets few large
    /// statements, each a network round trip.
    fn rows_per_statement(&self) -> usize {
        if self.is_sqlite() { 128 } else { ROWS_PER_STATEMENT }
    }

    /// The numbers of `device`'s staged events as a JSON array, or None when it has none (always
    /// on PostgreSQL).
    fn staged_of(&self, device: &DeviceId) -> Option<String> {
        if self.stages_events() {
            self.staged.of_device(device.as_str())
        } else {
            None
        }
    }

    /// A listing without a time range: its total is the count kept by the ingest transactions,
    /// and with `staged` (numbers) the device's staged events not yet counted (one statement: one
    /// snapshot).
    async fn kept_count(&self, query: &EventQuery, staged: Option<&str>) -> Result<u64> {
        let mut total = Sql::new("SELECT COALESCE((SELECT events FROM device_event_counts WHERE device_id = ");
        total
            .bind(query.device.as_str())
            .push(" AND attribute_code = ")
            .bind(query.attribute_code.as_deref().unwrap_or(""))
            .push(" AND clock = '' AND epoch_hour = 0), 0)");
        if let Some(staged) = staged {
            let seqs = total.placeholder(staged);
            total.push(&format!(
                " + (SELECT COUNT(*) FROM {STAGING} WHERE {} AND device_id = $1",
                in_staged(&seqs)
            ));
            if query.attribute_code.is_some() {
                total.push(" AND attribute_code = $2");
            }
            total.push(")");
        }
        self.fetch_total(total.push(" AS total")).await
    }

    /// A listing with a date range: its total from the kept counts of the range's whole hours,
    /// and by the index for the events of its first and last part hour (up to two hours' worth of
    /// the device's events, however long the range), in one statement: one snapshot. The device's
    /// staged events (`staged`, on SQLite) are not in the hours yet: they are counted in the range.
    /// A range within two hours, or a key the hours do not keep, is counted by the index
    /// (`count_events`, with `filter` the listing's).
    async fn range_count(&self, query: &EventQuery, filter: &Sql, staged: Option<&str>) -> Result<u64> {
        let start = query.start.unwrap_or(i64::MIN);
        let end = query.end.unwrap_or(i64::MAX);
        let kept = self.keeps_hours() && (query.attribute_code.is_none() || query.time_field == TimeField::Device);
        let Some(((first, last), (first_ms, after_ms))) = whole_hours(start, end).filter(|_| kept) else {
            return self.count_events(filter, staged).await;
        };
        let (clock, column) = clock_of(query.time_field);
        let mut total =
            Sql::new("SELECT COALESCE((SELECT CAST(SUM(events) AS BIGINT) FROM device_event_counts WHERE device_id = ");
        total
            .bind(query.device.as_str())
            .push(" AND attribute_code = ")
            .bind(query.attribute_code.as_deref().unwrap_or(""))
            .push(" AND clock = ")
            .bind(clock)
            .push(" AND epoch_hour >= ")
            .bind(first)
            .push(" AND epoch_hour <= ")
            .bind(last)
            .push("), 0)");
        // The events of `query`'s device (and attribute) in `rows` (`table WHERE [condition AND ]`)
        // with `column` in `from..=to`.
        let count = |total: &mut Sql, rows: &str, from: i64, to: i64| {
            total.push(&format!(" + (SELECT COUNT(*) FROM {rows}device_id = "));
            total.bind(query.device.as_str());
            if let Some(code) = &query.attribute_code {
                total.push(" AND attribute_code = ").bind(code.as_str());
            }
            total.push(&format!(" AND {column} >= ")).bind(from);
            total.push(&format!(" AND {column} <= ")).bind(to).push(")");
        };
        count(&mut total, "device_events WHERE ", start, first_ms.saturating_sub(1));
        count(&mut total, "device_events WHERE ", after_ms, end);
        if let Some(staged) = staged {
            let seqs = total.placeholder(staged);
            count(
                &mut total,
                &format!("{STAGING} WHERE {} AND ", in_staged(&seqs)),
                start,
                end,
            );
        }
        self.fetch_total(total.push(" AS total")).await
    }

    /// The tables events are kept in.
    fn event_tables(&self) -> &'static [&'static str] {
        if self.stages_events() {
            &["device_events", STAGING]
        } else {
            &["device_events"]
        }
    }

    /// The event `id` of `tenant` in `table`; in the staging table, by its number `seq`.
    async fn event_in(
        &self,
        table: &str,
        seq: Option<i64>,
        tenant: &TenantId,
        id: &EventId,
    ) -> Result<Option<DeviceEvent>> {
        let mut select = Sql::new(&format!("SELECT {COLUMNS} FROM {table} WHERE tenant_id = "));
        select.bind(tenant.as_str()).push(" AND id = ").bind(id.as_str());
        if let Some(seq) = seq {
            select.push(" AND seq = ").bind(seq);
        }
        let row = select
            .query()
            .fetch_optional(&self.pool)
            .await
            .map_err(crate::db_error)?;
        row.as_ref().map(event_from_row).transpose()
    }

    /// Deletes the events `selected` picks in `table`. A deleted staged event still reaches the
    /// shadow (it was never counted); a moved event comes off the counts. The staging file is
    /// written before anything reads it in the transaction (`begin_write`).
    async fn delete_from(&self, tx: &mut Transaction<'static, Any>, table: &str, selected: &Sql) -> Result<u64> {
        let mut delete = selected.prefixed(&format!("DELETE FROM {table} WHERE "));
        if table == STAGING {
            let rows = delete
                .push(&format!(" RETURNING {COLUMNS}"))
                .query()
                .fetch_all(&mut **tx)
                .await
                .map_err(crate::db_error)?;
            let deleted = rows.iter().map(event_from_row).collect::<Result<Vec<_>>>()?;
            update_shadows(tx, &deleted, self.rows_per_statement()).await?;
            return Ok(deleted.len() as u64);
        }
        let rows = delete
            .push(" RETURNING device_id, attribute_code, device_ts, ingress_ts")
            .query()
            .fetch_all(&mut **tx)
            .await
            .map_err(crate::db_error)?;
        uncount(tx, &rows, self.keeps_hours()).await?;
        Ok(rows.len() as u64)
    }

    /// The events matching `filter`; with `staged` (numbers), counted in each table apart: a count
    /// over their union would read every matching row whole instead of counting index entries.
    async fn count_events(&self, filter: &Sql, staged: Option<&str>) -> Result<u64> {
        let count = if let Some(staged) = staged {
            over_both_tables(
                filter,
                staged,
                "SELECT (SELECT COUNT(*) FROM device_events WHERE ",
                &format!(") + (SELECT COUNT(*) FROM {STAGING} WHERE "),
                ") AS total",
            )
        } else {
            filter.prefixed("SELECT COUNT(*) AS total FROM device_events WHERE ")
        };
        self.fetch_total(&count).await
    }

    /// The `total` column of the one row `count` returns (a count: never below 0).
    async fn fetch_total(&self, count: &Sql) -> Result<u64> {
        let total: i64 = count
            .query()
            .fetch_one(&self.pool)
            .await
            .and_then(|row| sqlx::Row::try_get(&row, "total"))
            .map_err(crate::db_error)?;
        Ok(total.max(0) as u64)
    }

    /// One page of the events matching `filter` in both tables, newest `time` first, ties by id.
    /// First the page's ids, from the indexes alone (SQLite merges the two tables' ordered index
    /// scans; rows skipped by OFFSET are never read whole: reading them whole made a page at OFFSET
    /// 99,900 fourteen times slower), then those rows from whichever table holds them by then.
    async fn page_of_both_tables(
        &self,
        device: &DeviceId,
        filter: &Sql,
        staged: &str,
        time: &str,
        page: PageRequest,
    ) -> Result<Vec<DeviceEvent>> {
        let mut keys = over_both_tables(
            filter,
            staged,
            &format!("SELECT {time}, id, NULL AS seq FROM device_events WHERE "),
            &format!(" UNION ALL SELECT {time}, id, seq FROM {STAGING} WHERE "),
            "",
        );
        keys.push(&format!(" ORDER BY {time} DESC, id DESC LIMIT "))
            .bind(page.limit())
            .push(" OFFSET ")
            .bind(page.offset());
        let mut ids = Vec::new();
        let mut listed_staged = Vec::new();
        for row in keys.query().fetch_all(&self.pool).await.map_err(crate::db_error)? {
            ids.push(get::<String>(&row, "id")?);
            if let Some(seq) = get::<Option<i64>>(&row, "seq")? {
                listed_staged.push(seq);
            }
        }
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        // The rows by id from device_events, and by number from the staging table: an event that
        // a move took since the first statement is in device_events by now.
        let mut listed = Sql::new("SELECT ");
        listed
            .push(COLUMNS)
            .push(" FROM device_events WHERE device_id = ")
            .bind(device.as_str());
        listed.push(" AND id IN (");
        for (i, id) in ids.iter().enumerate() {
            listed.push(if i == 0 { "" } else { ", " }).bind(id.as_str());
        }
        listed.push(")");
        if !listed_staged.is_empty() {
            let seqs = listed.placeholder(json_array(&listed_staged));
            listed.push(&format!(
                " UNION ALL SELECT {COLUMNS} FROM {STAGING} WHERE {} AND device_id = $1",
                in_staged(&seqs)
            ));
        }
        let rows = listed.query().fetch_all(&self.pool).await.map_err(crate::db_error)?;
        let mut found: HashMap<String, DeviceEvent> = HashMap::with_capacity(rows.len());
        for row in &rows {
            let event = event_from_row(row)?;
            found.insert(event.id.as_str().to_owned(), event);
        }
        // An event deleted between the two statements is left out.
        Ok(ids.iter().filter_map(|id| found.remove(id)).collect())
    }
}

/// The staged rows whose numbers the JSON array bound at `placeholder` lists, each found by the
/// staging table's key, less those a walk of the mover has put into device_events already.
fn in_staged(placeholder: &str) -> String {
    format!("seq IN (SELECT value FROM json_each({placeholder})) AND {NOT_MOVED}")
}

/// One statement over both tables: `head`, `filter` (of device_events), `middle` (ending in the
/// staging table's `WHERE `), the staged rows numbered in `staged` that match `filter`, `tail`.
/// The filter's placeholders serve both copies.
fn over_both_tables(filter: &Sql, staged: &str, head: &str, middle: &str, tail: &str) -> Sql {
    let mut filter = filter.clone();
    let seqs = filter.placeholder(staged);
    filter.wrapped(head, &format!("{middle}{} AND ", in_staged(&seqs)), tail)
}

/// `device_id = $1 [AND attribute_code = $2]`. The device id alone selects: it is unique across
/// tenants, and the caller checked the tenant.
fn device_filter(query: &EventQuery) -> Sql {
    let mut filter = Sql::new("device_id = ");
    filter.bind(query.device.as_str());
    if let Some(code) = &query.attribute_code {
        filter.push(" AND attribute_code = ").bind(code.as_str());
    }
    filter
}

/// The first and the last hour (`hour_of`) wholly in `start..=end`, if any, and the
/// milliseconds between them and the range's ends: `start..first hour's start` and
/// `last hour's end..=end`.
fn whole_hours(start: i64, end: i64) -> Option<((i64, i64), (i64, i64))> {
    let hour = i128::from(HOUR_MS);
    let first = i128::from(start).div_euclid(hour) + i128::from(start.rem_euclid(HOUR_MS) != 0);
    // The hour that holds end + 1 is the first one not wholly in the range.
    let last = (i128::from(end) + 1).div_euclid(hour) - 1;
    if first > last {
        return None;
    }
    let edge = |ms: i128| i64::try_from(ms).ok();
    Some((
        (i64::try_from(first).ok()?, i64::try_from(last).ok()?),
        (edge(first * hour)?, edge((last + 1) * hour)?),
    ))
}

/// Changes to the kept counts of one transaction, by key (device, attribute ('' = every one),
/// clock ('' = all time), hour): see migration 0012. Per hour only with `hours`
/// (`SqlStore::keeps_hours`).
struct Tally<'a> {
    counts: HashMap<(&'a str, &'a str, &'static str, i64), i64>,
    hours: bool,
}

impl<'a> Tally<'a> {
    fn new(hours: bool) -> Self {
        Tally {
            counts: HashMap::new(),
            hours,
        }
    }

    /// Adds `n` events (-1: one deleted) of `device` and `code` at these times.
    fn add(&mut self, device: &'a str, code: &'a str, device_ts: i64, ingress_ts: i64, n: i64) {
        let all_time = [(device, "", "", 0), (device, code, "", 0)];
        let hours = self.hours.then(|| {
            let device_hour = hour_of(device_ts);
            [
                (device, "", "device", device_hour),
                (device, "", "ingress", hour_of(ingress_ts)),
                (device, code, "device", device_hour),
            ]
        });
        for key in all_time.into_iter().chain(hours.into_iter().flatten()) {
            *self.counts.entry(key).or_default() += n;
        }
    }

    /// Writes the changes, `rows` keys per statement, in key order (the one lock order of every
    /// writer). Keys that a delete left without events are removed.
    async fn apply(self, tx: &mut Transaction<'static, Any>, rows: usize) -> Result<()> {
        let mut counts: Vec<_> = self.counts.into_iter().filter(|(_, n)| *n != 0).collect();
        counts.sort_unstable();
        for chunk in counts.chunks(rows) {
            let text = format!(
                "INSERT INTO device_event_counts (device_id, attribute_code, clock, epoch_hour, events) VALUES {} \
                 {COUNT_UPSERT}",
                values_clause(chunk.len(), 5, false)
            );
            let mut query = sqlx::query(&text);
            for ((device, code, clock, hour), n) in chunk {
                query = query.bind(*device).bind(*code).bind(*clock).bind(*hour).bind(*n);
            }
            query.execute(&mut **tx).await.map_err(crate::db_error)?;
            if chunk.iter().any(|(_, n)| *n < 0) {
                let mut emptied = Sql::new("DELETE FROM device_event_counts WHERE events <= 0 AND (");
                for (i, ((device, code, clock, hour), _)) in chunk.iter().filter(|(_, n)| *n < 0).enumerate() {
                    emptied
                        .push(if i == 0 { "(device_id = " } else { " OR (device_id = " })
                        .bind(*device)
                        .push(" AND attribute_code = ")
                        .bind(*code)
                        .push(" AND clock = ")
                        .bind(*clock)
                        .push(" AND epoch_hour = ")
                        .bind(*hour)
                        .push(")");
                }
                emptied
                    .push(")")
                    .query()
                    .execute(&mut **tx)
                    .await
                    .map_err(crate::db_error)?;
            }
        }
        Ok(())
    }
}

/// Takes deleted events (rows of device_id, attribute_code, device_ts, ingress_ts) off the kept
/// counts.
async fn uncount(tx: &mut Transaction<'static, Any>, deleted: &[AnyRow], hours: bool) -> Result<()> {
    let deleted = deleted
        .iter()
        .map(|row| {
            Ok((
                get::<String>(row, "device_id")?,
                get::<String>(row, "attribute_code")?,
                get::<i64>(row, "device_ts")?,
                get::<i64>(row, "ingress_ts")?,
            ))
        })
        .collect::<Result<Vec<_>>>()?;
    let mut tally = Tally::new(hours);
    for (device, code, device_ts, ingress_ts) in &deleted {
        tally.add(device, code, *device_ts, *ingress_ts, -1);
    }
    tally.apply(tx, ROWS_PER_STATEMENT / 5).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn whole_hours_lie_inside_the_range() {
        let h = HOUR_MS;
        // exactly one hour, and the range's edges around it
        assert_eq!(whole_hours(0, h - 1), Some(((0, 0), (0, h))));
        assert_eq!(whole_hours(1, 2 * h), Some(((1, 1), (h, 2 * h))));
        assert_eq!(whole_hours(1, 2 * h - 2), None, "no hour whole");
        // before 1970 an hour rounds down
        assert_eq!(hour_of(-1), -1);
        assert_eq!(whole_hours(-h, -1), Some(((-1, -1), (-h, 0))));
        assert_eq!(whole_hours(-h - 1, h), Some(((-1, 0), (-h, h))));
        // open ends: every hour representable, the edges in range
        let ((first, last), (first_ms, after_ms)) = whole_hours(i64::MIN, i64::MAX).unwrap();
        assert_eq!((first, last), (i64::MIN / h, i64::MAX / h - 1));
        assert!(
            first_ms < i64::MIN + h && after_ms > i64::MAX - h,
            "the part hours at the ends"
        );
        assert_eq!(whole_hours(5, 4), None);
    }

    #[test]
    fn values_clause_numbers_rows_in_order() {
        assert_eq!(values_clause(2, 3, false), "($1, $2, $3), ($4, $5, $6)");
        assert_eq!(values_clause(2, 2, true), "(?, ?), (?, ?)");
    }
}
