//! The staged events a move puts into device_events, added to the kept rollups in the move's
//! transaction (so that the rollups hold exactly device_events' rows, `gantry_store::events::rollups`):
//! SQLite's own way of `upsert_from`, which finds each group's first and last event by plain
//! aggregates over a text that sorts like (device time, id) instead of ranking every event.

use gantry_core::Result;
use gantry_store::events::rollups::{COUNTS_AS_NUMBER, HOUR_MS, MINUTE_MS, NUMBER, bucket_sql, upsert_from};
use gantry_store::sql::Sql;
use sqlx::AnyConnection;

/// An event's place in the order of first and last, as SQLite text that sorts like (device
/// time, id), followed by its value: its device time as a sign and 19 digits (offset by 2^63 when
/// negative), the id, `char(1)` (below every character of an id), the value. `MIN` and `MAX` of it
/// over a group are its first and last event with their values, in one pass and no ranking.
const ORDER_TEXT: &str = "(CASE WHEN device_ts >= 0 THEN '1' || printf('%019d', device_ts) \
    ELSE '0' || printf('%019d', device_ts + 9223372036854775807 + 1) END || id || char(1) || attribute_data)";

/// The device time, id and value of an `ORDER_TEXT` in `column`, as `ts, id, value` columns.
fn order_text_parts(column: &str, prefix: &str) -> String {
    let rest = format!("substr({column}, 21)");
    format!(
        "CASE WHEN substr({column}, 1, 1) = '1' THEN CAST(substr({column}, 2, 19) AS INTEGER) \
         ELSE CAST(substr({column}, 2, 19) AS INTEGER) - 9223372036854775807 - 1 END AS {prefix}_ts, \
         substr({rest}, 1, instr({rest}, char(1)) - 1) AS {prefix}_id, \
         substr({rest}, instr({rest}, char(1)) + 1) AS {prefix}_value"
    )
}

/// `upsert_from` for the moves: the narrowest rows by plain aggregates over `ORDER_TEXT`
/// instead of two rankings of every event, the larger part of what the rollups cost ingest.
fn upsert_sqlite(source: &str, widths: &[i64]) -> String {
    upsert_from(source, widths, |source, width| {
        format!(
            "SELECT device_id, attribute_code, width, grp, events, numbers, total, low, high, {}, {} FROM (\
             SELECT device_id, attribute_code, {width} AS width, {} AS grp, COUNT(*) AS events, \
             SUM({COUNTS_AS_NUMBER}) AS numbers, \
             CAST(SUM({NUMBER}) AS DOUBLE PRECISION) AS total, CAST(MIN({NUMBER}) AS DOUBLE PRECISION) AS low, \
             CAST(MAX({NUMBER}) AS DOUBLE PRECISION) AS high, MIN({ORDER_TEXT}) AS first_text, \
             MAX({ORDER_TEXT}) AS last_text FROM {source} GROUP BY device_id, attribute_code, grp) AS summed",
            order_text_parts("first_text", "first"),
            order_text_parts("last_text", "last"),
            bucket_sql("device_ts", width, 0),
        )
    })
}

/// Adds the events `source` selects (`table WHERE condition`) to the minute and hour rollups, in
/// the move that puts them into device_events.
pub async fn add(conn: &mut AnyConnection, source: &Sql) -> Result<()> {
    source
        .rewritten(|source| upsert_sqlite(source, &[MINUTE_MS, HOUR_MS]))
        .query()
        .execute(conn)
        .await
        .map_err(gantry_store::error::db_error)?;
    Ok(())
}
