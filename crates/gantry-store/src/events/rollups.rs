//! The kept rollups: per device, attribute and minute, and per hour, by device
//! time, the count, the Integer and Float events' count, sum, least and greatest, and the first
//! and last event by (device time, id), so that a series reads a row per minute or hour instead
//! of every event.
//!
//! Invariant: a rollup sums up exactly the rows of device_events in its minute or hour (where the
//! engine folds them, `folds`, those that arrived before the fold mark). Whatever transaction
//! adds events to the rollups merges them into the rows there (late events land in old
//! minutes): from the rows in SQL (`upsert`, or an engine's own way over `upsert_from`) or from a
//! batch in memory (`add_batch`). One that deletes events recomputes their minutes and hours from
//! the rows left (`recompute`: least, greatest, first and last cannot be subtracted).
//!
//! The same SQL sums up rollup rows and raw events: each is a partial row (`PARTIAL`), a raw
//! event one of a single event (`raw_partial`), and `combine` merges partial rows per group. Sums
//! are in double precision, so a sum's last bits depend on the order it was added in.

use std::collections::{BTreeMap, BTreeSet};

use gantry_core::Result;
use gantry_core::enums::DataType;
use gantry_core::event::DeviceEvent;
use gantry_core::query::TimeField;
use gantry_core::series::{Bucket, SeriesQuery};
use sqlx::{Any, AnyConnection, AnyPool, Transaction};

use crate::row::{get, to_json};
use crate::sql::Sql;

pub const MINUTE_MS: i64 = 60_000;
pub const HOUR_MS: i64 = 3_600_000;

/// A partial row's columns, after its key and `grp`.
const PARTIAL: &str =
    "events, numbers, total, low, high, first_ts, first_id, first_value, last_ts, last_id, last_value";

/// Keys per statement when a delete recomputes rollups (4 values each).
const KEYS_PER_STATEMENT: usize = 50;

/// The start of the bucket of `width` (ms) that holds `column`, in a zone `offset` ms from UTC.
/// Both engines divide integers rounding toward zero; this rounds down, before 1970 too.
pub fn bucket_sql(column: &str, width: i64, offset: i64) -> String {
    let shifted = format!("({column} + ({offset}))");
    format!("(({shifted} / {width} - CASE WHEN {shifted} % {width} < 0 THEN 1 ELSE 0 END) * {width} - ({offset}))")
}

/// 1 for an event of an Integer or Float attribute, else 0: what it adds to `numbers`.
pub const COUNTS_AS_NUMBER: &str = "CASE WHEN attribute_type IN ('Integer', 'Float') THEN 1 ELSE 0 END";

/// An event's number: its value, for an Integer or Float attribute; NULL otherwise.
pub const NUMBER: &str =
    "CASE WHEN attribute_type IN ('Integer', 'Float') THEN CAST(attribute_data AS DOUBLE PRECISION) END";

/// An event of device_events or the staging table as a partial row, first and last by `ts`.
fn raw_partial(ts: &str) -> String {
    format!(
        "1 AS events, {COUNTS_AS_NUMBER} AS numbers, \
         {NUMBER} AS total, {NUMBER} AS low, {NUMBER} AS high, \
         {ts} AS first_ts, id AS first_id, attribute_data AS first_value, \
         {ts} AS last_ts, id AS last_id, attribute_data AS last_value"
    )
}

/// `rows` (partial rows with the columns `keys` and `grp`) merged per key and `grp`: the
/// statement's `SELECT keys grp, PARTIAL`; without `first_last`, first and last are left out.
fn combine(keys: &str, rows: &str, first_last: bool) -> String {
    let sums = "CAST(SUM(events) AS BIGINT) AS events, CAST(SUM(numbers) AS BIGINT) AS numbers, \
                CAST(SUM(total) AS DOUBLE PRECISION) AS total, CAST(MIN(low) AS DOUBLE PRECISION) AS low, \
                CAST(MAX(high) AS DOUBLE PRECISION) AS high";
    if !first_last {
        return format!("SELECT {keys}grp, {sums} FROM ({rows}) AS parts GROUP BY {keys}grp");
    }
    let pick = |rank: &str, column: &str| format!("MAX(CASE WHEN {rank} = 1 THEN {column} END) AS {column}");
    format!(
        "SELECT {keys}grp, {sums}, {}, {}, {}, {}, {}, {} FROM (SELECT parts.*, \
         ROW_NUMBER() OVER (PARTITION BY {keys}grp ORDER BY first_ts, first_id) AS up, \
         ROW_NUMBER() OVER (PARTITION BY {keys}grp ORDER BY last_ts DESC, last_id DESC) AS down \
         FROM ({rows}) AS parts) AS ranked GROUP BY {keys}grp",
        pick("up", "first_ts"),
        pick("up", "first_id"),
        pick("up", "first_value"),
        pick("down", "last_ts"),
        pick("down", "last_id"),
        pick("down", "last_value"),
    )
}

/// Merges a new partial row (`excluded`) into the kept one: counts and sums add, the least and
/// greatest win, the earlier first and the later last (by time, then id) win.
const MERGE: &str = "ON CONFLICT (device_id, attribute_code, width, bucket) DO UPDATE SET \
    events = device_event_rollups.events + excluded.events, \
    numbers = device_event_rollups.numbers + excluded.numbers, \
    total = CASE WHEN device_event_rollups.total IS NULL THEN excluded.total \
        WHEN excluded.total IS NULL THEN device_event_rollups.total \
        ELSE device_event_rollups.total + excluded.total END, \
    low = CASE WHEN device_event_rollups.low IS NULL OR excluded.low < device_event_rollups.low \
        THEN excluded.low ELSE device_event_rollups.low END, \
    high = CASE WHEN device_event_rollups.high IS NULL OR excluded.high > device_event_rollups.high \
        THEN excluded.high ELSE device_event_rollups.high END, \
    first_ts = CASE WHEN FIRST_WINS THEN excluded.first_ts ELSE device_event_rollups.first_ts END, \
    first_id = CASE WHEN FIRST_WINS THEN excluded.first_id ELSE device_event_rollups.first_id END, \
    first_value = CASE WHEN FIRST_WINS THEN excluded.first_value ELSE device_event_rollups.first_value END, \
    last_ts = CASE WHEN LAST_WINS THEN excluded.last_ts ELSE device_event_rollups.last_ts END, \
    last_id = CASE WHEN LAST_WINS THEN excluded.last_id ELSE device_event_rollups.last_id END, \
    last_value = CASE WHEN LAST_WINS THEN excluded.last_value ELSE device_event_rollups.last_value END";

fn merge() -> String {
    MERGE
        .replace(
            "FIRST_WINS",
            "(excluded.first_ts < device_event_rollups.first_ts OR (excluded.first_ts = device_event_rollups.first_ts \
             AND excluded.first_id < device_event_rollups.first_id))",
        )
        .replace(
            "LAST_WINS",
            "(excluded.last_ts > device_event_rollups.last_ts OR (excluded.last_ts = device_event_rollups.last_ts \
             AND excluded.last_id > device_event_rollups.last_id))",
        )
}

/// The statement that adds the events `source` picks (`table WHERE condition`) to the rollups of
/// `widths` (narrowest first, each a multiple of it), merging into the rows kept. The events are
/// summed up once, into partial rows of the narrowest width (`narrowest`, given the source and
/// the width), and the wider widths from those. Its rows go in key order, the one lock order of
/// every writer.
pub fn upsert_from(source: &str, widths: &[i64], narrowest: fn(&str, i64) -> String) -> String {
    let (first, wider) = widths.split_first().expect("at least one width");
    let keys = "device_id, attribute_code, width, ";
    let mut parts = vec![format!("SELECT {keys}grp, {PARTIAL} FROM narrowest")];
    for width in wider {
        let rows = format!(
            "SELECT device_id, attribute_code, {width} AS width, {} AS grp, {PARTIAL} FROM narrowest",
            bucket_sql("grp", *width, 0)
        );
        parts.push(combine(keys, &rows, true));
    }
    format!(
        "WITH narrowest AS MATERIALIZED ({}) \
         INSERT INTO device_event_rollups (device_id, attribute_code, width, bucket, {PARTIAL}) \
         SELECT device_id, attribute_code, width, grp, {PARTIAL} FROM ({}) AS rolled WHERE true \
         ORDER BY device_id, attribute_code, width, grp {}",
        narrowest(source, *first),
        parts.join(" UNION ALL "),
        merge()
    )
}

/// `upsert_from` in SQL both engines run: first and last by ranking the events (window
/// functions).
pub fn upsert(source: &str, widths: &[i64]) -> String {
    upsert_from(source, widths, |source, width| {
        let raw = format!(
            "SELECT device_id, attribute_code, {width} AS width, {} AS grp, {} FROM {source}",
            bucket_sql("device_ts", width, 0),
            raw_partial("device_ts")
        );
        combine("device_id, attribute_code, width, ", &raw, true)
    })
}

/// A partial row of a batch's events in one rollup key, summed up in memory (`add_batch`).
struct Partial<'a> {
    events: i64,
    numbers: i64,
    /// The Integer and Float values' sum, least and greatest: None when there are none (then
    /// `numbers` is 0).
    numeric: Option<(f64, f64, f64)>,
    first: &'a DeviceEvent,
    last: &'a DeviceEvent,
}

impl<'a> Partial<'a> {
    fn new(e: &'a DeviceEvent) -> Self {
        Partial {
            events: 0,
            numbers: 0,
            numeric: None,
            first: e,
            last: e,
        }
    }

    /// Adds `e`: what `raw_partial` makes of a row and `combine` of a group, in Rust. First and
    /// last are by (device time, id), as the kept rows compare them (`MERGE`).
    fn add(&mut self, e: &'a DeviceEvent) {
        fn order(e: &DeviceEvent) -> (i64, &str) {
            (e.device_timestamp, e.id.as_str())
        }
        self.events += 1;
        let number = match e.attribute_type {
            DataType::Integer | DataType::Float => e.attribute_data.as_f64(),
            DataType::String | DataType::Boolean => None,
        };
        if let Some(x) = number {
            self.numbers += 1;
            self.numeric = Some(match self.numeric {
                Some((total, low, high)) => (total + x, low.min(x), high.max(x)),
                None => (x, x, x),
            });
        }
        if order(e) < order(self.first) {
            self.first = e;
        }
        if order(e) > order(self.last) {
            self.last = e;
        }
    }
}

/// Adds a batch's events that arrived before the fold mark `folded` (late, `folds`) to the minute
/// and hour rollups, in the transaction that inserts them into device_events (PostgreSQL's
/// ingest): summed up per key in memory and merged into the kept rows with plain VALUES in key
/// order, `rows` keys per statement. The same rows as `upsert` over those events, without the
/// database grouping and ranking each batch.
pub async fn add_batch(
    tx: &mut Transaction<'static, Any>,
    events: &[DeviceEvent],
    folded: i64,
    rows: usize,
) -> Result<()> {
    let mut partials: BTreeMap<(&str, &str, i64, i64), Partial<'_>> = BTreeMap::new();
    for e in events.iter().filter(|e| e.ingress_time_stamp < folded) {
        for width in [MINUTE_MS, HOUR_MS] {
            let bucket = e.device_timestamp.div_euclid(width).saturating_mul(width);
            partials
                .entry((e.device_id.as_str(), e.attribute_code.as_str(), width, bucket))
                .or_insert_with(|| Partial::new(e))
                .add(e);
        }
    }
    let partials: Vec<_> = partials.into_iter().collect();
    for chunk in partials.chunks(rows) {
        let text = format!(
            "INSERT INTO device_event_rollups (device_id, attribute_code, width, bucket, {PARTIAL}) VALUES {} {}",
            partial_values(chunk.len()),
            merge()
        );
        let mut query = sqlx::query(&text);
        for ((device, code, width, bucket), p) in chunk {
            let (total, low, high) = p.numeric.unwrap_or_default();
            query = query
                .bind(*device)
                .bind(*code)
                .bind(*width)
                .bind(*bucket)
                .bind(p.events)
                .bind(p.numbers)
                .bind(total)
                .bind(low)
                .bind(high)
                .bind(p.first.device_timestamp)
                .bind(p.first.id.as_str())
                .bind(to_json(&p.first.attribute_data)?)
                .bind(p.last.device_timestamp)
                .bind(p.last.id.as_str())
                .bind(to_json(&p.last.attribute_data)?);
        }
        query.execute(&mut **tx).await.map_err(crate::error::db_error)?;
    }
    Ok(())
}

/// Values per row of `add_batch`'s statement: the key's four and `PARTIAL`'s eleven.
const KEYED_PARTIAL_VALUES: usize = 15;

/// `rows` rows of placeholders for a key and a partial row (`KEYED_PARTIAL_VALUES` each). The
/// sum, least and greatest (the 7th to 9th) are bound as numbers always and become NULL where no
/// number was counted (the 6th, `numbers`, is 0): sqlx binds a NULL double as a single-precision
/// parameter, which PostgreSQL then keeps for the statement.
fn partial_values(rows: usize) -> String {
    let mut text = String::with_capacity(rows * 150);
    for r in 0..rows {
        let p = |c: usize| r * KEYED_PARTIAL_VALUES + c;
        text.push_str(if r == 0 { "(" } else { ", (" });
        for c in 1..=KEYED_PARTIAL_VALUES {
            text.push_str(if c == 1 { "" } else { ", " });
            let value = if (7..=9).contains(&c) {
                format!("CASE WHEN ${} > 0 THEN ${} END", p(6), p(c))
            } else {
                format!("${}", p(c))
            };
            text.push_str(&value);
        }
        text.push(')');
    }
    text
}

/// Recomputes from device_events the minute and hour rollups that held the deleted events
/// (device, attribute, device time), in the transaction that deleted them: from the events that
/// arrived before `rolled_up_before` (`EventTableRules::rolled_up_before`).
pub async fn recompute(
    conn: &mut AnyConnection,
    deleted: &[(String, String, i64)],
    rolled_up_before: i64,
) -> Result<()> {
    for width in [MINUTE_MS, HOUR_MS] {
        let keys: BTreeSet<(&str, &str, i64)> = deleted
            .iter()
            .map(|(device, code, ts)| (device.as_str(), code.as_str(), ts.div_euclid(width) * width))
            .collect();
        let keys: Vec<_> = keys.into_iter().collect();
        for chunk in keys.chunks(KEYS_PER_STATEMENT) {
            let mut gone = Sql::new("DELETE FROM device_event_rollups WHERE ");
            let mut rows = Sql::new("device_events WHERE ");
            for (i, (device, code, bucket)) in chunk.iter().enumerate() {
                let or = if i == 0 { "(" } else { " OR (" };
                gone.push(or).push("device_id = ").bind(*device);
                gone.push(" AND attribute_code = ").bind(*code);
                gone.push(&format!(" AND width = {width} AND bucket = "))
                    .bind(*bucket)
                    .push(")");
                rows.push(or).push("device_id = ").bind(*device);
                rows.push(" AND attribute_code = ").bind(*code);
                rows.push(" AND device_ts >= ").bind(*bucket);
                rows.push(" AND device_ts < ").bind(*bucket + width);
                rows.push(" AND ingress_ts < ").bind(rolled_up_before).push(")");
            }
            gone.query().execute(&mut *conn).await.map_err(crate::error::db_error)?;
            rows.rewritten(|source| upsert(source, &[width]))
                .query()
                .execute(&mut *conn)
                .await
                .map_err(crate::error::db_error)?;
        }
    }
    Ok(())
}

/// The condition, for a statement over device_events, that picks the events not yet in the
/// rollups (read in the statement's own snapshot, as its rollup rows are).
const UNFOLDED: &str = "ingress_ts >= (SELECT ingested_through FROM device_event_rollup_folds)";

/// `UNFOLDED`, given a mark read before (`folds::read_mark`), which the mark only ever passes:
/// with it, PostgreSQL plans for the few newest events and reads them by arrival, where it would
/// plan for a share of the device's events (the mark's value unknown) and read its whole window.
pub fn unfolded(read_before: i64) -> String {
    format!("ingress_ts >= {read_before} AND {UNFOLDED}")
}

/// The statement that answers a series query, as it is put together: per bucket, the rollups of
/// the whole minutes (or hours) in its window and the raw events of device_events in the part
/// minutes at the window's edges, by device time; by arrival time the raw events alone (the
/// rollups are by device time). The engine adds the rows its rollups do not hold yet
/// (`EventTableRules::add_unrolled`), then `statement` sums the parts up per bucket.
pub struct SeriesParts<'q> {
    query: &'q SeriesQuery,
    sql: Sql,
    /// The placeholders of the device and the attribute code.
    device: String,
    code: String,
    /// The column the query's clock reads.
    ts: &'static str,
    /// The whole units the rollups answer (`kept_span`).
    span: Option<(i64, (i64, i64))>,
    parts: Vec<String>,
}

impl<'q> SeriesParts<'q> {
    /// The rollups' part and device_events' raw events around it.
    pub fn new(query: &'q SeriesQuery) -> Self {
        let mut sql = Sql::new("");
        let device = sql.placeholder(query.device.as_str());
        let code = sql.placeholder(query.attribute_code.as_str());
        let ts = match query.clock {
            TimeField::Device => "device_ts",
            TimeField::Ingress => "ingress_ts",
        };
        let mut series = SeriesParts {
            query,
            sql,
            device,
            code,
            ts,
            span: kept_span(query),
            parts: Vec::new(),
        };
        let (width, offset) = (query.interval.ms(), query.offset_ms);
        match series.span {
            Some((unit, (first, after))) => {
                let (device, code) = (&series.device, &series.code);
                series.parts.push(format!(
                    "SELECT {} AS grp, {PARTIAL} FROM device_event_rollups WHERE device_id = {device} \
                     AND attribute_code = {code} AND width = {unit} AND bucket >= {first} AND bucket < {after}",
                    bucket_sql("bucket", width, offset)
                ));
                if query.start < first {
                    series.add_raw("device_events WHERE ", (query.start, first - 1));
                }
                if after <= query.end {
                    series.add_raw("device_events WHERE ", (after, query.end));
                }
            }
            None => series.add_raw("device_events WHERE ", series.window()),
        }
        series
    }

    /// The query's window, both ends in.
    pub fn window(&self) -> (i64, i64) {
        (self.query.start, self.query.end)
    }

    /// The part of the window the rollups answer, both ends in; None when they answer none.
    pub fn rolled_up(&self) -> Option<(i64, i64)> {
        self.span.map(|(_, (first, after))| (first, after - 1))
    }

    /// The query's device.
    pub fn device(&self) -> &'q str {
        self.query.device.as_str()
    }

    /// A placeholder that binds `value` in the statement.
    pub fn placeholder(&mut self, value: &str) -> String {
        self.sql.placeholder(value)
    }

    /// Adds the raw events of `rows` (`table WHERE condition AND `) of the query's device and
    /// attribute whose time (by the query's clock) is in `from..=to`.
    pub fn add_raw(&mut self, rows: &str, (from, to): (i64, i64)) {
        let (ts, device, code) = (self.ts, &self.device, &self.code);
        self.parts.push(format!(
            "SELECT {} AS grp, {} FROM {rows}device_id = {device} AND attribute_code = {code} \
             AND {ts} >= {from} AND {ts} <= {to}",
            bucket_sql(ts, self.query.interval.ms(), self.query.offset_ms),
            raw_partial(ts)
        ));
    }

    /// The parts summed up per bucket, in bucket order.
    pub fn statement(self) -> Sql {
        let mut sql = self.sql;
        let statement = combine("", &self.parts.join(" UNION ALL "), self.query.first_last);
        sql.push(&statement).push(" ORDER BY grp");
        sql
    }
}

/// The rollups' width a query reads (minutes, or hours where every hour lies in one bucket: the
/// zone's offset is a whole number of hours and the interval one hour or more) and the whole
/// units in its window: the first one's start and the end of the last. None by arrival time,
/// and when no unit lies wholly in the window.
fn kept_span(query: &SeriesQuery) -> Option<(i64, (i64, i64))> {
    if query.clock != TimeField::Device {
        return None;
    }
    let unit = if query.interval.ms() >= HOUR_MS && query.offset_ms % HOUR_MS == 0 {
        HOUR_MS
    } else {
        MINUTE_MS
    };
    let first = query.start.div_euclid(unit) * unit + if query.start.rem_euclid(unit) == 0 { 0 } else { unit };
    let after = (query.end + 1).div_euclid(unit) * unit;
    (first < after).then_some((unit, (first, after)))
}

/// Runs a series statement and reads its buckets.
pub async fn fetch_series(pool: &AnyPool, statement: &Sql, first_last: bool) -> Result<Vec<Bucket>> {
    let rows = statement
        .query()
        .fetch_all(pool)
        .await
        .map_err(crate::error::db_error)?;
    let value = |row, column| -> Result<Option<serde_json::Value>> {
        if first_last {
            crate::row::json_opt(row, column)
        } else {
            Ok(None)
        }
    };
    rows.iter()
        .map(|row| {
            Ok(Bucket {
                start: get(row, "grp")?,
                events: get::<i64>(row, "events")?.max(0) as u64,
                numbers: get::<i64>(row, "numbers")?.max(0) as u64,
                sum: get(row, "total")?,
                min: get(row, "low")?,
                max: get(row, "high")?,
                first: value(row, "first_value")?,
                last: value(row, "last_value")?,
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use gantry_core::ids::DeviceId;
    use gantry_core::series::{Aggregates, Interval};

    use super::*;

    fn query(start: i64, end: i64, interval: Interval, offset_ms: i64) -> SeriesQuery {
        SeriesQuery::new(
            DeviceId::from_string("d".to_owned()),
            "temp".to_owned(),
            TimeField::Device,
            (start, end),
            interval,
            offset_ms,
            &Aggregates::default(),
        )
        .unwrap()
    }

    #[test]
    fn whole_units_come_from_the_rollups() {
        let (m, h) = (MINUTE_MS, HOUR_MS);
        // hours where every hour lies in one bucket, else minutes
        assert_eq!(
            kept_span(&query(0, 5 * h - 1, Interval::Hour, 0)),
            Some((h, (0, 5 * h)))
        );
        assert_eq!(
            kept_span(&query(0, 5 * h - 1, Interval::Day, -h)),
            Some((h, (0, 5 * h)))
        );
        assert_eq!(
            kept_span(&query(0, 5 * h - 1, Interval::Day, 30 * m)),
            Some((m, (0, 5 * h)))
        );
        assert_eq!(
            kept_span(&query(0, 5 * h - 1, Interval::FifteenMinutes, 0)),
            Some((m, (0, 5 * h)))
        );
        // part units at the edges are left to the raw events
        assert_eq!(kept_span(&query(1, 5 * h, Interval::Hour, 0)), Some((h, (h, 5 * h))));
        assert_eq!(kept_span(&query(-h - 1, h - 2, Interval::Hour, 0)), Some((h, (-h, 0))));
        assert_eq!(kept_span(&query(1, h - 1, Interval::Hour, 0)), None);
        assert_eq!(kept_span(&query(-m + 1, m - 1, Interval::Minute, 0)), Some((m, (0, m))));
        assert_eq!(kept_span(&query(-m + 1, m - 2, Interval::Minute, 0)), None);
    }
}
