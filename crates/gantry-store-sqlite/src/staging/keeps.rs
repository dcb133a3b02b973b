//! Alarm keeps in the staging file (`alarm_keeps`, its migration 0008): a step that only counts
//! events into an open alarm (or moves a rule's timers) is committed with those events by the
//! stager, in their transaction, so that it is durable when they are and a message that keeps an
//! alarm open waits for one flush, not for the event-log file's synced commit too. The
//! event-log file's alarm_states and alarms take it later, folded in by the event-log writer:
//! first in every transaction that writes a device's alarms (`EventEngine::fold_alarm_keeps`),
//! and for all devices every `FOLD_EVERY` (`fold_all`), which also drops the rows folded.
//!
//! Invariants: a row holds the whole state and the open alarm's count, value and times after its
//! step, with the state version the step wrote, and is folded only over an older version: a fold
//! that runs twice, or after a crash between the two files, changes nothing more. A fold takes
//! only rows whose commit is on disk (numbered no higher than `Staged::flushed_through`). The
//! readers see alarm_states and alarms through views of the same names (`READER_VIEWS`, in
//! each reader's temp schema, which SQLite looks in first) that lay the keeps not folded yet over
//! the stored rows, so every read of the alarms shows the counts a fold has not reached.

use gantry_core::Result;
use gantry_core::ids::DeviceId;
use gantry_core::store::AlarmKeep;
use gantry_store::error::db_error;
use gantry_store::row::to_json;
use gantry_store::sql::values_clause;
use gantry_store::{AnyQuery, bind_alarm_state};
use std::sync::Arc;
use std::time::Duration;

use sqlx::{AnyConnection, AnyPool};

use super::staged::Staged;

/// The keeps, by their schema-qualified name.
const KEEPS: &str = "staging.alarm_keeps";

/// Values bound per keep (its `seq` is the statement's own).
const WIDTH: usize = 15;

/// Keeps per statement: 15 values each stays far below SQLite's 32,766.
pub(super) const KEEPS_PER_STATEMENT: usize = 512;

/// The statement that stages `rows` keeps, run in the events' transaction after the INSERT of
/// the events: each row's `seq` is the last event's number (`last_insert_rowid()`, which an
/// insert into a WITHOUT ROWID table leaves alone). A newer keep of a key replaces the older:
/// a device's evaluations write one after the other (`AlarmService`).
pub(super) fn stage_text(rows: usize) -> String {
    let values = values_clause(rows, WIDTH, true).replace("?)", "?, last_insert_rowid())");
    format!(
        "INSERT INTO {KEEPS} (device_id, alarm_key, version, raise_since, clear_since, levels, last_time, \
             last_arrival, recent, no_data, alarm_id, count, value, last_event_time, updated_time, seq) \
         VALUES {values} \
         ON CONFLICT (device_id, alarm_key) DO UPDATE SET version = excluded.version, \
             raise_since = excluded.raise_since, clear_since = excluded.clear_since, levels = excluded.levels, \
             last_time = excluded.last_time, last_arrival = excluded.last_arrival, recent = excluded.recent, \
             no_data = excluded.no_data, alarm_id = excluded.alarm_id, count = excluded.count, \
             value = excluded.value, last_event_time = excluded.last_event_time, \
             updated_time = excluded.updated_time, seq = excluded.seq"
    )
}

/// `query` with the values of `keep`'s row, in `stage_text`'s order.
pub(super) fn bind_keep<'q>(query: AnyQuery<'q>, keep: &'q AlarmKeep) -> Result<AnyQuery<'q>> {
    let alarm = keep.alarm.as_ref();
    let query = query
        .bind(keep.device.as_str())
        .bind(keep.key.as_str())
        .bind(keep.state.version + 1);
    Ok(bind_alarm_state(query, &keep.state)?
        .bind(alarm.map(|a| a.id.as_str()))
        .bind(alarm.map(|a| a.count))
        .bind(alarm.map(|a| to_json(&a.value)).transpose()?)
        .bind(alarm.map(|a| a.last_event_time))
        .bind(alarm.map(|a| a.updated_time)))
}

/// A keep newer than the stored state of its key, joined as `k` to the state `s`.
const NEWER: &str = "k.device_id = s.device_id AND k.alarm_key = s.alarm_key AND k.version > s.version";

/// The readers' views, created on each reader connection once the files are attached: the
/// event-log file's alarm_states and alarms with the newer keeps laid over them.
pub(crate) fn reader_views() -> [String; 2] {
    let state = |column: &str| format!("CASE WHEN k.version IS NULL THEN s.{column} ELSE k.{column} END AS {column}");
    let states: Vec<String> = [
        "raise_since",
        "clear_since",
        "levels",
        "last_time",
        "last_arrival",
        "recent",
        "no_data",
        "version",
    ]
    .iter()
    .map(|c| state(c))
    .collect();
    // The alarms' view reads the keep by a subquery per column, not a join: a view that is a join
    // is not flattened where it is the right side of a LEFT JOIN (the snapshot's), and would be
    // read whole there.
    let alarm = |column: &str| match column {
        "last_event_time" | "value" | "count" | "updated_time" => format!(
            "COALESCE((SELECT k.{column} FROM {KEEPS} k WHERE k.device_id = a.device_id AND k.alarm_key = a.alarm_key \
                 AND k.alarm_id = a.id AND a.status <> 'CLEARED' AND k.version > (SELECT s.version \
                 FROM logs.alarm_states s WHERE s.device_id = a.device_id AND s.alarm_key = a.alarm_key)), \
             a.{column}) AS {column}"
        ),
        other => format!("a.{other}"),
    };
    let alarms: Vec<String> = gantry_store::ALARM_COLUMNS.split(", ").map(alarm).collect();
    [
        format!(
            "CREATE TEMP VIEW IF NOT EXISTS alarm_states AS SELECT s.alarm_key, s.device_id, s.tenant_id, {} \
             FROM logs.alarm_states s LEFT JOIN {KEEPS} k ON {NEWER}",
            states.join(", ")
        ),
        format!(
            "CREATE TEMP VIEW IF NOT EXISTS alarms AS SELECT {} FROM logs.alarms a",
            alarms.join(", ")
        ),
    ]
}

/// Folds the keeps numbered `through` or lower (of `devices`, all when None) into the event-log
/// file's alarms and states, on the event-log writer's `conn`: each alarm while open, then each
/// state, both only over an older version.
pub(crate) async fn fold(conn: &mut AnyConnection, through: i64, devices: Option<&[&DeviceId]>) -> Result<()> {
    let devices = devices.map(|d| {
        let ids: Vec<&str> = d.iter().map(|d| d.as_str()).collect();
        serde_json::to_string(&ids).unwrap_or_default()
    });
    let only = match devices {
        Some(_) => " AND k.device_id IN (SELECT value FROM json_each($2))",
        None => "",
    };
    let alarms = format!(
        "UPDATE logs.alarms SET count = k.count, value = k.value, last_event_time = k.last_event_time, \
             updated_time = k.updated_time \
         FROM {KEEPS} k JOIN logs.alarm_states s ON {NEWER} \
         WHERE k.seq <= $1{only} AND alarms.id = k.alarm_id AND alarms.status <> 'CLEARED'"
    );
    let states = format!(
        "UPDATE logs.alarm_states SET raise_since = k.raise_since, clear_since = k.clear_since, levels = k.levels, \
             last_time = k.last_time, last_arrival = k.last_arrival, recent = k.recent, no_data = k.no_data, \
             version = k.version \
         FROM {KEEPS} k \
         WHERE k.seq <= $1{only} AND k.device_id = alarm_states.device_id AND k.alarm_key = alarm_states.alarm_key \
             AND k.version > alarm_states.version"
    );
    for text in [alarms, states] {
        let query = sqlx::query(&text).bind(through);
        let query = match &devices {
            Some(ids) => query.bind(ids.as_str()),
            None => query,
        };
        query.execute(&mut *conn).await.map_err(db_error)?;
    }
    Ok(())
}

/// The keeps folded already (no newer than their stored state) or whose state is gone, as
/// (device, key, version), read by a reader.
async fn folded(pool: &AnyPool) -> Result<Vec<(String, String, i64)>> {
    sqlx::query_as(&format!(
        "SELECT k.device_id, k.alarm_key, k.version FROM {KEEPS} k \
         LEFT JOIN logs.alarm_states s ON s.device_id = k.device_id AND s.alarm_key = k.alarm_key \
         WHERE s.version IS NULL OR k.version <= s.version"
    ))
    .fetch_all(pool)
    .await
    .map_err(db_error)
}

/// Deletes each of `rows` (from `folded`) that no newer keep has replaced since, on the stager.
async fn forget(conn: &mut AnyConnection, rows: &[(String, String, i64)]) -> Result<()> {
    for chunk in rows.chunks(KEEPS_PER_STATEMENT) {
        let listed: Vec<serde_json::Value> = chunk
            .iter()
            .map(|(device, key, version)| serde_json::json!([device, key, version]))
            .collect();
        sqlx::query(&format!(
            "DELETE FROM {KEEPS} WHERE (device_id, alarm_key, version) IN \
             (SELECT value ->> 0, value ->> 1, value ->> 2 FROM json_each($1))"
        ))
        .bind(serde_json::Value::Array(listed).to_string())
        .execute(&mut *conn)
        .await
        .map_err(db_error)?;
    }
    Ok(())
}

/// How often every keep on disk is folded and the folded ones dropped.
pub(crate) const FOLD_EVERY: Duration = Duration::from_secs(1);

/// Folds every keep on disk into the event-log file (a transaction of its writer), then drops
/// the keeps folded from the staging file (on the stager). A keep dropped is folded already; one
/// whose drop a crash lost is folded again, to no effect.
pub(crate) async fn fold_all(
    log_writer: AnyPool,
    (reader, stager): (AnyPool, AnyPool),
    staged: Arc<Staged>,
) -> Result<()> {
    let mut tx = log_writer.begin().await.map_err(db_error)?;
    fold(&mut tx, staged.flushed_through(), None).await?;
    tx.commit().await.map_err(db_error)?;
    let rows = folded(&reader).await?;
    if !rows.is_empty() {
        let mut conn = stager.acquire().await.map_err(db_error)?;
        forget(&mut conn, &rows).await?;
    }
    Ok(())
}

/// The highest event number staged before this store opened: every keep in the staging file
/// then is on disk.
pub(crate) async fn through_at_open(pool: &AnyPool) -> std::result::Result<i64, sqlx::Error> {
    let through: Option<i64> =
        sqlx::query_scalar("SELECT seq FROM staging.sqlite_sequence WHERE name = 'device_events_recent'")
            .fetch_optional(pool)
            .await?;
    Ok(through.unwrap_or(0))
}
