//! The webhook outbox's rows: how a cause's transaction writes them (`write_outbox`: the
//! connections' into the main `webhook_outbox`, the event logs' into theirs, `Dialect::log_outbox`,
//! an engine's ingest commit into its own table, `EventEngine::engine_outbox_waiting`), how they are read
//! back (`waiting_rows`), and how they leave (`take_rows`).
//!
//! An event is one row whatever the number of webhooks that want it, so that webhooks cost a
//! commit nothing: `pending` holds a bit for each webhook of the project that has not taken it
//! yet (its `slot`, `Audience`). A delivery takes an event by clearing its webhook's bit; the
//! row goes when none is left. A webhook reads its project's rows alone (`project_id`).

use gantry_core::Result;
use gantry_core::ids::{DeviceId, ProjectId};
use gantry_core::stream::StreamType;
use gantry_core::time::now_ms;
use gantry_core::webhook::{Audience, OutboxKey, WebhookEvent};
use serde::Serialize;
use sqlx::any::AnyRow;
use sqlx::{Any, AnyConnection};

use crate::error::db_error;
use crate::row::{get, spelled};
use crate::sql::values_clause;

/// The outbox's columns but its number, in `write_outbox`'s order.
pub const OUTBOX_COLUMNS: &str = "id, project_id, pending, device_id, kind, time, data";

/// The stored form of an audience: a signed 64-bit integer whose bits are its slots.
fn stored(audience: Audience) -> i64 {
    audience.0 as i64
}

/// The mask that clears `slot`'s bit.
fn clearing(slot: u8) -> i64 {
    !Audience::bit(slot) as i64
}

/// Writes `events` into the outbox `table` on `conn` (inside the cause's transaction).
/// `anonymous`: `?` placeholders (`values_clause`), which only SQLite takes.
pub async fn write_outbox(
    conn: &mut AnyConnection,
    table: &str,
    events: &[WebhookEvent],
    anonymous: bool,
) -> Result<()> {
    for chunk in events.chunks(OUTBOX_ROWS) {
        let text = insert_text(table, chunk.len(), anonymous);
        let query = chunk.iter().fold(sqlx::query(&text), bind_row);
        query.execute(&mut *conn).await.map_err(db_error)?;
    }
    Ok(())
}

/// Rows one `insert_text` statement takes at the most.
pub const OUTBOX_ROWS: usize = 100;

/// The INSERT of `rows` outbox rows into `table` (`bind_row` binds each).
pub fn insert_text(table: &str, rows: usize, anonymous: bool) -> String {
    format!(
        "INSERT INTO {table} ({OUTBOX_COLUMNS}) VALUES {}",
        values_clause(rows, 7, anonymous)
    )
}

/// `query` with the values of `e`'s row (`OUTBOX_COLUMNS`' order).
pub fn bind_row<'q>(
    query: sqlx::query::Query<'q, Any, sqlx::any::AnyArguments<'q>>,
    e: &'q WebhookEvent,
) -> sqlx::query::Query<'q, Any, sqlx::any::AnyArguments<'q>> {
    query
        .bind(e.id.as_str())
        .bind(e.project_id.as_str())
        .bind(stored(e.pending))
        .bind(e.device_id.as_str())
        .bind(e.kind.as_str())
        .bind(e.time)
        .bind(e.data.as_str())
}

/// `record` as one event of `kind` for `webhooks` (none: no event), for the main outbox.
pub fn outbox_events(
    webhooks: Audience,
    kind: StreamType,
    project: &ProjectId,
    device: &DeviceId,
    record: &impl Serialize,
) -> Result<Vec<WebhookEvent>> {
    if webhooks.is_empty() {
        return Ok(Vec::new());
    }
    Ok(vec![WebhookEvent {
        id: WebhookEvent::new_id(),
        project_id: project.clone(),
        pending: webhooks,
        device_id: device.clone(),
        kind,
        time: now_ms(),
        data: crate::row::to_json(record)?,
    }])
}

/// Reads outbox rows (`seq` and `OUTBOX_COLUMNS`) of the outbox numbered `outbox` (`OutboxKey`).
pub fn outbox_from_row(row: &AnyRow, outbox: u8) -> Result<(OutboxKey, WebhookEvent)> {
    let pending: i64 = get(row, "pending")?;
    Ok((
        OutboxKey {
            outbox,
            seq: get(row, "seq")?,
        },
        WebhookEvent {
            id: get(row, "id")?,
            project_id: ProjectId::from_string(get::<String>(row, "project_id")?),
            pending: Audience(pending as u64),
            device_id: DeviceId::from_string(get::<String>(row, "device_id")?),
            kind: spelled(row, "kind", |k| StreamType::parse_field(k, "kind").ok())?,
            time: get(row, "time")?,
            data: get(row, "data")?,
        },
    ))
}

/// Up to `limit` of the rows of `table` (the outbox numbered `outbox`) that the webhook in
/// `slot` of `project` has not taken yet, oldest first.
pub async fn waiting_rows<'e>(
    executor: impl sqlx::Executor<'e, Database = Any>,
    (table, outbox): (&str, u8),
    slot: u8,
    project: &ProjectId,
    limit: usize,
) -> Result<Vec<(OutboxKey, WebhookEvent)>> {
    let rows = sqlx::query(&format!(
        "SELECT seq, {OUTBOX_COLUMNS} FROM {table} \
         WHERE project_id = $1 AND (pending & $2) <> 0 ORDER BY seq LIMIT $3"
    ))
    .bind(project.as_str())
    .bind(stored(Audience::default().with(slot)))
    .bind(limit as i64)
    .fetch_all(executor)
    .await
    .map_err(db_error)?;
    rows.iter().map(|row| outbox_from_row(row, outbox)).collect()
}

/// Takes the rows numbered `seqs` (not empty) of the outbox `table` for the webhook in `slot`, or
/// every row it has not taken when `seqs` is None; returns how many it took, which is fewer than
/// `seqs` when another delivery took some first. Rows no webhook waits for any more go. The rows
/// are locked in their order first (`lock`, `Dialect::lock_to_delete`), so that deliveries of
/// several webhooks taking the same rows at once queue one behind the other, never deadlock.
pub async fn take_rows(
    conn: &mut AnyConnection,
    (table, lock): (&str, &str),
    slot: u8,
    seqs: Option<&[i64]>,
) -> Result<u64> {
    let within = seqs
        .map(|seqs| format!(" AND {}", seq_in(3, seqs.len())))
        .unwrap_or_default();
    let take = format!(
        "UPDATE {table} SET pending = pending & $1 WHERE seq IN \
         (SELECT seq FROM {table} WHERE (pending & $2) <> 0{within} ORDER BY seq{lock})"
    );
    let taken = seqs
        .unwrap_or_default()
        .iter()
        .fold(
            sqlx::query(&take)
                .bind(clearing(slot))
                .bind(stored(Audience::default().with(slot))),
            |q, seq| q.bind(*seq),
        )
        .execute(&mut *conn)
        .await
        .map_err(db_error)?
        .rows_affected();
    let within = seqs
        .map(|seqs| format!(" AND {}", seq_in(1, seqs.len())))
        .unwrap_or_default();
    let done = format!("DELETE FROM {table} WHERE pending = 0{within}");
    seqs.unwrap_or_default()
        .iter()
        .fold(sqlx::query(&done), |q, seq| q.bind(*seq))
        .execute(&mut *conn)
        .await
        .map_err(db_error)?;
    Ok(taken)
}

/// `seq IN ($k, ...)` with the placeholders from `first`.
fn seq_in(first: usize, count: usize) -> String {
    let list: Vec<String> = (0..count).map(|i| format!("${}", first + i)).collect();
    format!("seq IN ({})", list.join(", "))
}

/// Merges the rows of two outboxes, each already in its own order, by time (a stable merge:
/// neither list's order changes; on a tie `first` goes first), and keeps the first `limit`.
pub fn merge_by_time(
    first: Vec<(OutboxKey, WebhookEvent)>,
    second: Vec<(OutboxKey, WebhookEvent)>,
    limit: usize,
) -> Vec<(OutboxKey, WebhookEvent)> {
    let mut merged = Vec::with_capacity(limit.min(first.len() + second.len()));
    let (mut first, mut second) = (first.into_iter().peekable(), second.into_iter().peekable());
    while merged.len() < limit {
        let take_first = match (first.peek(), second.peek()) {
            (Some(f), Some(s)) => f.1.time <= s.1.time,
            (Some(_), None) => true,
            (None, Some(_)) => false,
            (None, None) => break,
        };
        merged.extend(if take_first { first.next() } else { second.next() });
    }
    merged
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(outbox: u8, seq: i64, time: i64) -> (OutboxKey, WebhookEvent) {
        (
            OutboxKey { outbox, seq },
            WebhookEvent {
                id: format!("{outbox}-{seq}"),
                project_id: ProjectId::from_string("p"),
                pending: Audience(1),
                device_id: DeviceId::from_string("d"),
                kind: StreamType::Telemetry,
                time,
                data: "{}".into(),
            },
        )
    }

    #[test]
    fn merging_keeps_each_outboxs_order() {
        // The second list's second row is older than its first: it still comes after it.
        let main = vec![row(0, 1, 10), row(0, 2, 30)];
        let apart = vec![row(1, 7, 20), row(1, 8, 5), row(1, 9, 40)];
        let merged: Vec<String> = merge_by_time(main, apart, 4).into_iter().map(|(_, e)| e.id).collect();
        assert_eq!(merged, ["0-1", "1-7", "1-8", "0-2"]);
    }
}
