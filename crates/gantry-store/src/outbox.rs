//! The webhook outbox's rows: how a cause's transaction writes them (`write_outbox`: the
//! connections' into the main `webhook_outbox`, the event logs' into theirs, `Dialect::log_outbox`,
//! an engine's ingest commit into its own table, `EventEngine::waiting_apart`), how they are read
//! back, and how they leave (`delete_rows`).

use gantry_core::Result;
use gantry_core::ids::{DeviceId, WebhookId};
use gantry_core::stream::StreamType;
use gantry_core::time::now_ms;
use gantry_core::webhook::{OutboxKey, WebhookEvent};
use serde::Serialize;
use sqlx::any::AnyRow;
use sqlx::{Any, AnyConnection};

use crate::error::db_error;
use crate::row::{get, spelled};
use crate::sql::values_clause;

/// The outbox's columns but its number, in `write_outbox`'s order.
pub(crate) const OUTBOX_COLUMNS: &str = "id, webhook_id, device_id, kind, time, data";

/// Outbox rows per INSERT.
const OUTBOX_ROWS: usize = 100;

/// Writes `events` into the outbox `table` on `conn` (inside the cause's transaction).
/// `anonymous`: `?` placeholders (`values_clause`), which only SQLite takes.
pub(crate) async fn write_outbox(
    conn: &mut AnyConnection,
    table: &str,
    events: &[WebhookEvent],
    anonymous: bool,
) -> Result<()> {
    for chunk in events.chunks(OUTBOX_ROWS) {
        let text = format!(
            "INSERT INTO {table} ({OUTBOX_COLUMNS}) VALUES {}",
            values_clause(chunk.len(), 6, anonymous)
        );
        let query = chunk.iter().fold(sqlx::query(&text), |query, e| {
            query
                .bind(e.id.as_str())
                .bind(e.webhook_id.as_str())
                .bind(e.device_id.as_str())
                .bind(e.kind.as_str())
                .bind(e.time)
                .bind(e.data.as_str())
        });
        query.execute(&mut *conn).await.map_err(db_error)?;
    }
    Ok(())
}

/// `record` as an event of `kind` for each of `webhooks`, for the main outbox.
pub(crate) fn outbox_events(
    webhooks: &[WebhookId],
    kind: StreamType,
    device: &DeviceId,
    record: &impl Serialize,
) -> Result<Vec<WebhookEvent>> {
    if webhooks.is_empty() {
        return Ok(Vec::new());
    }
    let data = crate::row::to_json(record)?;
    let now = now_ms();
    Ok(webhooks
        .iter()
        .map(|webhook| WebhookEvent {
            id: WebhookEvent::new_id(),
            webhook_id: webhook.clone(),
            device_id: device.clone(),
            kind,
            time: now,
            data: data.clone(),
        })
        .collect())
}

/// Reads outbox rows (`seq` and `OUTBOX_COLUMNS`) of the outbox numbered `outbox` (`OutboxKey`).
pub(crate) fn outbox_from_row(row: &AnyRow, outbox: u8) -> Result<(OutboxKey, WebhookEvent)> {
    Ok((
        OutboxKey {
            outbox,
            seq: get(row, "seq")?,
        },
        WebhookEvent {
            id: get(row, "id")?,
            webhook_id: WebhookId::from_string(get::<String>(row, "webhook_id")?),
            device_id: DeviceId::from_string(get::<String>(row, "device_id")?),
            kind: spelled(row, "kind", |k| StreamType::parse_field(k, "kind").ok())?,
            time: get(row, "time")?,
            data: get(row, "data")?,
        },
    ))
}

/// Deletes the webhook's rows numbered `seqs` (not empty) from the outbox `table`, or all of its
/// rows when `seqs` is None; returns how many went.
pub(crate) async fn delete_rows<'e>(
    executor: impl sqlx::Executor<'e, Database = Any>,
    table: &str,
    webhook: &WebhookId,
    seqs: Option<&[i64]>,
) -> Result<u64> {
    let text = match seqs {
        Some(seqs) => format!(
            "DELETE FROM {table} WHERE webhook_id = $1 AND {}",
            seq_in(2, seqs.len())
        ),
        None => format!("DELETE FROM {table} WHERE webhook_id = $1"),
    };
    let query = seqs
        .unwrap_or_default()
        .iter()
        .fold(sqlx::query(&text).bind(webhook.as_str()), |q, seq| q.bind(*seq));
    Ok(query.execute(executor).await.map_err(db_error)?.rows_affected())
}

/// `seq IN ($k, ...)` with the placeholders after `first`.
fn seq_in(first: usize, count: usize) -> String {
    let list: Vec<String> = (0..count).map(|i| format!("${}", first + i)).collect();
    format!("seq IN ({})", list.join(", "))
}

/// Merges the rows of two outboxes, each already in its own order, by time (a stable merge:
/// neither list's order changes; on a tie `first` goes first), and keeps the first `limit`.
pub(crate) fn merge_by_time(
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
                webhook_id: WebhookId::from_string("w"),
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
