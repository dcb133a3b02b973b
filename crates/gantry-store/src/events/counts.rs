//! The kept counts: per device, per device and attribute, and optionally
//! per hour, how many events device_events holds, so that a listing's total reads a few rows
//! instead of counting an index range. Every change to device_events changes them in the same
//! transaction; changes are written in key order, the one lock order of every writer.

use std::collections::HashMap;

use gantry_core::Result;
use gantry_core::query::{EventQuery, TimeField};
use sqlx::{Any, Transaction};

use crate::sql::{Sql, values_clause};

pub const COUNT_UPSERT: &str = "ON CONFLICT (device_id, attribute_code, clock, epoch_hour) \
                                       DO UPDATE SET events = device_event_counts.events + excluded.events";

/// Keys per statement when a delete takes events off the counts (5 values each).
pub const KEYS_PER_STATEMENT: usize = 100;

/// The width of the kept counts' hours.
const HOUR_MS: i64 = 3_600_000;

/// The number of `ts`'s hour: `ts` / HOUR_MS rounded down (before 1970 too).
fn hour_of(ts: i64) -> i64 {
    ts.div_euclid(HOUR_MS)
}

/// `hour_of` in SQL, for a column: both engines divide integers rounding toward zero.
pub fn hour_sql(column: &str) -> String {
    format!("({column} / {HOUR_MS} - CASE WHEN {column} % {HOUR_MS} < 0 THEN 1 ELSE 0 END)")
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

/// The clock a listing's date range applies to, as the kept counts name it, and its column (the
/// listing's order too).
pub fn clock_of(field: TimeField) -> (&'static str, &'static str) {
    match field {
        TimeField::Device => ("device", "device_ts"),
        TimeField::Ingress => ("ingress", "ingress_ts"),
    }
}

/// A listing's total without a time range: the count kept for its device (and attribute), as
/// `SELECT <expression>` without its alias, so that an engine can add to it in one statement.
pub fn kept_total(query: &EventQuery) -> Sql {
    let mut total = Sql::new("SELECT COALESCE((SELECT events FROM device_event_counts WHERE device_id = ");
    total
        .bind(query.device.as_str())
        .push(" AND attribute_code = ")
        .bind(query.attribute_code.as_deref().unwrap_or(""))
        .push(" AND clock = '' AND epoch_hour = 0), 0)");
    total
}

/// A listing's total with a date range, for an engine that keeps counts per hour
/// (`CountChanges::add_hours`): the kept counts of the range's whole hours, and by the index the
/// events of device_events in its first and last part hour (up to two hours' worth of the
/// device's events, however long the range), as `SELECT <expression>` without its alias. None
/// when the range holds no whole hour or the hours are not kept for its key: then the range is
/// counted by the index.
pub fn hours_total(query: &EventQuery) -> Option<Sql> {
    let start = query.start.unwrap_or(i64::MIN);
    let end = query.end.unwrap_or(i64::MAX);
    let kept = query.attribute_code.is_none() || query.time_field == TimeField::Device;
    let ((first, last), (first_ms, after_ms)) = whole_hours(start, end).filter(|_| kept)?;
    let (clock, _) = clock_of(query.time_field);
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
    add_range_count(
        &mut total,
        query,
        "device_events WHERE ",
        start,
        first_ms.saturating_sub(1),
    );
    add_range_count(&mut total, query, "device_events WHERE ", after_ms, end);
    Some(total)
}

/// Adds to `total` the events of `query`'s device (and attribute) in `rows` (`table WHERE
/// [condition AND ]`) whose listing time is in `from..=to`.
pub fn add_range_count(total: &mut Sql, query: &EventQuery, rows: &str, from: i64, to: i64) {
    let (_, column) = clock_of(query.time_field);
    total.push(&format!(" + (SELECT COUNT(*) FROM {rows}device_id = "));
    total.bind(query.device.as_str());
    if let Some(code) = &query.attribute_code {
        total.push(" AND attribute_code = ").bind(code.as_str());
    }
    total.push(&format!(" AND {column} >= ")).bind(from);
    total.push(&format!(" AND {column} <= ")).bind(to).push(")");
}

/// Changes to the kept counts of one transaction, by key (device, attribute ('' = every one),
/// clock ('' = all time), hour): see the table in the schema. Which keys an event is counted in
/// is its engine's choice (`EventTableRules::count`).
#[derive(Default)]
pub struct CountChanges<'a> {
    counts: HashMap<(&'a str, &'a str, &'static str, i64), i64>,
}

impl<'a> CountChanges<'a> {
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds `n` events (-1: one deleted) of `device` and `code` to their all-time counts.
    pub fn add(&mut self, device: &'a str, code: &'a str, n: i64) {
        for key in [(device, "", "", 0), (device, code, "", 0)] {
            *self.counts.entry(key).or_default() += n;
        }
    }

    /// Adds `n` events of `device` and `code` at these times to their hours' counts: the device's
    /// by both clocks, the attribute's by device time.
    pub fn add_hours(&mut self, device: &'a str, code: &'a str, device_ts: i64, ingress_ts: i64, n: i64) {
        let device_hour = hour_of(device_ts);
        for key in [
            (device, "", "device", device_hour),
            (device, "", "ingress", hour_of(ingress_ts)),
            (device, code, "device", device_hour),
        ] {
            *self.counts.entry(key).or_default() += n;
        }
    }

    /// Writes the changes, `rows` keys per statement, in key order (the one lock order of every
    /// writer). Keys that a delete left without events are removed.
    pub async fn apply(self, tx: &mut Transaction<'static, Any>, rows: usize) -> Result<()> {
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
            query.execute(&mut **tx).await.map_err(crate::error::db_error)?;
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
                    .map_err(crate::error::db_error)?;
            }
        }
        Ok(())
    }
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
}
