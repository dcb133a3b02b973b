//! The webhook outbox's rows: how a cause's transaction writes them (`write_outbox`: the
//! connections' into the main `webhook_outbox`, the event logs' into theirs, `Dialect::log_outbox`,
//! an engine's ingest commit into its own table, `EventEngine::engine_outbox_waiting`), how they are read
//! back (`waiting_rows`), and how they leave (`take_rows`).
//!
//! An event is written once whatever the number of webhooks that want it, so that webhooks cost a
//! commit nothing: `pending` holds a bit for each webhook of the project that has not taken it
//! yet (its `slot`, `Audience`). A delivery takes a row by clearing its webhook's bit; the
//! row goes when none is left. A webhook reads its project's rows alone (`project_id`).
//!
//! The events one commit writes for the same webhooks share a row (`bundle`), packed with LZ4, so
//! that a commit of many events writes a few small rows: what ingest pays for webhooks is the
//! pages its commits dirty, which rows and bytes both add to. The events of a bundle repeat their
//! tenant, project, model and often device: packed they take a fraction of their text. A delivery
//! takes whole rows, so a bundle's events leave together.

use gantry_core::Result;
use gantry_core::ids::{DeviceId, ProjectId};
use gantry_core::stream::StreamType;
use gantry_core::time::now_ms;
use gantry_core::webhook::{Audience, OutboxKey, WebhookEvent};
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use sqlx::any::AnyRow;
use sqlx::{Any, AnyConnection};

use crate::error::db_error;
use crate::row::{get, spelled};
use crate::sql::values_clause;

/// The outbox's columns but its number, in `write_outbox`'s order.
pub const OUTBOX_COLUMNS: &str = "id, project_id, pending, device_id, kind, time, events, data, packed";

/// Columns `bind_row` binds for each row.
const OUTBOX_WIDTH: usize = 9;

/// Events one row holds at the most: a webhook's delivery (100 events unless configured) takes
/// whole rows, so a bundle never makes one larger than this.
pub const BUNDLE_EVENTS: usize = 100;

/// One outbox row as `bundle` makes it: `first`'s id, project, audience, device, kind and
/// time, and `first`'s data when the row holds it alone (`data`), else the `events` it holds as
/// a JSON array (`Bundled`), in commit order, LZ4-packed with its length first (`packed`).
pub struct OutboxRow<'a> {
    first: &'a WebhookEvent,
    events: usize,
    data: &'a str,
    packed: Option<Vec<u8>>,
}

/// An event in a bundle's array.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Bundled<'a> {
    id: String,
    device_id: String,
    time: i64,
    #[serde(borrow)]
    data: &'a RawValue,
}

/// `events` as the rows that hold them: per project and kind, each run of events in commit
/// order that the same webhooks want, up to `BUNDLE_EVENTS`, is one row. So a webhook still
/// gets the events of one type in commit order, and a change of audience within a commit
/// (a webhook created between two of its causes) starts a new row.
pub fn bundle(events: &[WebhookEvent]) -> Vec<OutboxRow<'_>> {
    let mut runs: Vec<Vec<&WebhookEvent>> = Vec::new();
    // The run each project and kind adds to, by its index in `runs`.
    let mut open: std::collections::HashMap<(&str, StreamType), usize> = std::collections::HashMap::new();
    for event in events {
        let key = (event.project_id.as_str(), event.kind);
        match open.get(&key) {
            Some(&at) if runs[at][0].pending == event.pending && runs[at].len() < BUNDLE_EVENTS => {
                runs[at].push(event);
            }
            _ => {
                open.insert(key, runs.len());
                runs.push(vec![event]);
            }
        }
    }
    runs.into_iter().map(bundled_row).collect()
}

/// The row that holds `run` (not empty).
fn bundled_row(run: Vec<&WebhookEvent>) -> OutboxRow<'_> {
    let first = run[0];
    if run.len() == 1 {
        return OutboxRow {
            first,
            events: 1,
            data: &first.data,
            packed: None,
        };
    }
    // Written by hand, not through serde: `data` is JSON already, and is taken as it is.
    let mut data = String::with_capacity(run.iter().map(|e| e.data.len() + 120).sum());
    data.push('[');
    for (i, event) in run.iter().enumerate() {
        use std::fmt::Write;
        let _ = write!(
            data,
            r#"{}{{"id":{},"deviceId":{},"time":{},"data":{}}}"#,
            if i == 0 { "" } else { "," },
            serde_json::Value::from(event.id.as_str()),
            serde_json::Value::from(event.device_id.as_str()),
            event.time,
            event.data,
        );
    }
    data.push(']');
    OutboxRow {
        first,
        events: run.len(),
        data: "",
        packed: Some(lz4_flex::compress_prepend_size(data.as_bytes())),
    }
}

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
    let rows = bundle(events);
    for chunk in rows.chunks(OUTBOX_ROWS) {
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
        values_clause(rows, OUTBOX_WIDTH, anonymous)
    )
}

/// `query` with the values of `row` (`OUTBOX_COLUMNS`' order).
pub fn bind_row<'q>(
    query: sqlx::query::Query<'q, Any, sqlx::any::AnyArguments<'q>>,
    row: &'q OutboxRow<'_>,
) -> sqlx::query::Query<'q, Any, sqlx::any::AnyArguments<'q>> {
    let e = row.first;
    query
        .bind(e.id.as_str())
        .bind(e.project_id.as_str())
        .bind(stored(e.pending))
        .bind(e.device_id.as_str())
        .bind(e.kind.as_str())
        .bind(e.time)
        .bind(row.events as i64)
        .bind(row.data)
        .bind(row.packed.as_deref())
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

/// An outbox row as it is read back: its key and the events it holds, in commit order.
pub type WaitingRow = (OutboxKey, Vec<WebhookEvent>);

/// Reads an outbox row (`seq` and `OUTBOX_COLUMNS`) of the outbox numbered `outbox` (`OutboxKey`).
pub fn outbox_from_row(row: &AnyRow, outbox: u8) -> Result<WaitingRow> {
    let pending: i64 = get(row, "pending")?;
    let first = WebhookEvent {
        id: get(row, "id")?,
        project_id: ProjectId::from_string(get::<String>(row, "project_id")?),
        pending: Audience(pending as u64),
        device_id: DeviceId::from_string(get::<String>(row, "device_id")?),
        kind: spelled(row, "kind", |k| StreamType::parse_field(k, "kind").ok())?,
        time: get(row, "time")?,
        data: get(row, "data")?,
    };
    let key = OutboxKey {
        outbox,
        seq: get(row, "seq")?,
    };
    if get::<i64>(row, "events")? == 1 {
        return Ok((key, vec![first]));
    }
    let packed: Vec<u8> = get(row, "packed")?;
    let text = lz4_flex::decompress_size_prepended(&packed).map_err(gantry_core::Error::store)?;
    let bundled: Vec<Bundled> = serde_json::from_slice(&text).map_err(gantry_core::Error::store)?;
    let events = bundled
        .into_iter()
        .map(|b| WebhookEvent {
            id: b.id,
            project_id: first.project_id.clone(),
            pending: first.pending,
            device_id: DeviceId::from_string(b.device_id),
            kind: first.kind,
            time: b.time,
            data: b.data.get().to_owned(),
        })
        .collect();
    Ok((key, events))
}

/// Up to `limit` of the oldest rows of `table` (the outbox numbered `outbox`) that the webhook
/// in `slot` of `project` has not taken yet: enough, since a row holds one event at least.
/// `merge_by_time`, which every reader's rows go through, keeps those that hold `limit` events.
pub async fn waiting_rows<'e>(
    executor: impl sqlx::Executor<'e, Database = Any>,
    (table, outbox): (&str, u8),
    slot: u8,
    project: &ProjectId,
    limit: usize,
) -> Result<Vec<WaitingRow>> {
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

/// The first of `rows` that hold up to `limit` events together, and the first row whatever it
/// holds: a delivery takes whole rows.
fn cut(rows: Vec<WaitingRow>, limit: usize) -> Vec<WaitingRow> {
    let mut events = 0;
    rows.into_iter()
        .take_while(|(_, row)| {
            let take = events == 0 || events + row.len() <= limit;
            events += row.len();
            take
        })
        .collect()
}

/// The events of `rows`, each with its row's key (a bundle's events share it).
pub fn events_of(rows: Vec<WaitingRow>) -> Vec<(OutboxKey, WebhookEvent)> {
    rows.into_iter()
        .flat_map(|(key, events)| events.into_iter().map(move |e| (key, e)))
        .collect()
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
/// neither list's order changes; on a tie `first` goes first), and keeps as many as hold up to
/// `limit` events (`cut`).
pub fn merge_by_time(first: Vec<WaitingRow>, second: Vec<WaitingRow>, limit: usize) -> Vec<WaitingRow> {
    let mut merged = Vec::with_capacity(first.len() + second.len());
    let (mut first, mut second) = (first.into_iter().peekable(), second.into_iter().peekable());
    let time = |row: &WaitingRow| row.1.first().map_or(0, |e| e.time);
    loop {
        let take_first = match (first.peek(), second.peek()) {
            (Some(f), Some(s)) => time(f) <= time(s),
            (Some(_), None) => true,
            (None, Some(_)) => false,
            (None, None) => break,
        };
        merged.extend(if take_first { first.next() } else { second.next() });
    }
    cut(merged, limit)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(id: &str, project: &str, kind: StreamType, pending: u64, time: i64) -> WebhookEvent {
        WebhookEvent {
            id: id.to_owned(),
            project_id: ProjectId::from_string(project),
            pending: Audience(pending),
            device_id: DeviceId::from_string("d"),
            kind,
            time,
            data: format!(r#"{{"n":"{id}"}}"#),
        }
    }

    fn row(outbox: u8, seq: i64, time: i64, events: usize) -> WaitingRow {
        let events = (0..events)
            .map(|i| event(&format!("{outbox}-{seq}-{i}"), "p", StreamType::Telemetry, 1, time))
            .collect();
        (OutboxKey { outbox, seq }, events)
    }

    fn ids(rows: Vec<WaitingRow>) -> Vec<String> {
        events_of(rows).into_iter().map(|(_, e)| e.id).collect()
    }

    #[test]
    fn merging_keeps_each_outboxs_order_and_whole_rows() {
        // The second list's second row is older than its first: it still comes after it.
        let main = vec![row(0, 1, 10, 1), row(0, 2, 30, 1)];
        let apart = vec![row(1, 7, 20, 2), row(1, 8, 5, 1), row(1, 9, 40, 1)];
        let merged = ids(merge_by_time(main.clone(), apart.clone(), 4));
        assert_eq!(merged, ["0-1-0", "1-7-0", "1-7-1", "1-8-0"]);
        // A row that would go beyond the limit waits for the next delivery; the first does not.
        assert_eq!(ids(merge_by_time(main.clone(), apart.clone(), 2)), ["0-1-0"]);
        assert_eq!(ids(merge_by_time(Vec::new(), apart, 1)), ["1-7-0", "1-7-1"]);
    }

    #[test]
    fn a_commits_events_share_rows_per_project_kind_and_audience_in_order() {
        use StreamType::{Shadow, Telemetry};
        let events = [
            event("a", "p", Telemetry, 1, 1),
            event("b", "q", Telemetry, 1, 1),
            event("c", "p", Shadow, 1, 1),
            event("d", "p", Telemetry, 1, 2),
            // A webhook created between two causes: a new row, after the ones before it.
            event("e", "p", Telemetry, 3, 3),
            event("f", "p", Telemetry, 1, 4),
        ];
        let rows = bundle(&events);
        let shape: Vec<(&str, usize)> = rows.iter().map(|r| (r.first.id.as_str(), r.events)).collect();
        assert_eq!(shape, [("a", 2), ("b", 1), ("c", 1), ("e", 1), ("f", 1)]);
        // A bundle's data reads back as its events, each with its own id, time and data.
        let text = lz4_flex::decompress_size_prepended(rows[0].packed.as_deref().unwrap()).unwrap();
        let read: Vec<Bundled> = serde_json::from_slice(&text).unwrap();
        let read: Vec<(String, i64, &str)> = read.iter().map(|b| (b.id.clone(), b.time, b.data.get())).collect();
        assert_eq!(
            read,
            [("a".to_owned(), 1, r#"{"n":"a"}"#), ("d".to_owned(), 2, r#"{"n":"d"}"#)]
        );
        assert_eq!(
            (rows[1].data, rows[1].packed.is_none()),
            (events[1].data.as_str(), true),
            "a row of one event holds its data as it is"
        );
    }

    #[test]
    fn a_row_holds_a_hundred_events_at_the_most() {
        let events: Vec<WebhookEvent> = (0..250)
            .map(|i| event(&i.to_string(), "p", StreamType::Telemetry, 1, i))
            .collect();
        let sizes: Vec<usize> = bundle(&events).iter().map(|r| r.events).collect();
        assert_eq!(sizes, [100, 100, 50]);
    }
}
