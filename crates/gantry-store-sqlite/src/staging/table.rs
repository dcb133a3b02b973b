//! The staging table as the statements name it, and the pieces of SQL that read staged rows
//! beside device_events.

use gantry_store::sql::Sql;

/// The staging table, by its schema-qualified name (in the staging file, `file.rs`).
pub(crate) const STAGING: &str = "staging.device_events_recent";

/// The staging file's webhook outbox (telemetry and shadow events; the main file has its own).
pub(crate) const OUTBOX: &str = "staging.webhook_outbox";

/// Staged rows a round has moved already (in device_events, deleted from staging a round later):
/// excluded wherever staged rows are read (a round excludes them by the records it reads).
pub(crate) const NOT_MOVED: &str = "NOT EXISTS (SELECT 1 FROM main.device_events_recent_moved AS moved \
     WHERE device_events_recent.device_id BETWEEN moved.device_lo AND moved.device_hi \
     AND device_events_recent.seq <= moved.through)";

/// Around a filter of the staging table, per device and attribute the newest of the staged events
/// it selects, by device time and on a tie the one committed last (the higher number): what the
/// shadow holds once those events are settled.
pub(crate) const LATEST_STAGED: (&str, &str) = (
    "SELECT device_id, attribute_code, tenant_id, attribute_data, device_ts, ingress_ts FROM (\
     SELECT device_id, attribute_code, tenant_id, attribute_data, device_ts, ingress_ts, ROW_NUMBER() OVER \
     (PARTITION BY device_id, attribute_code ORDER BY device_ts DESC, seq DESC) AS newest \
     FROM staging.device_events_recent WHERE ",
    ") AS staged WHERE newest = 1",
);

/// The staged rows whose numbers the JSON array bound at `placeholder` lists, each found by the
/// staging table's key, less those a round of the mover has put into device_events already.
pub(crate) fn in_staged(placeholder: &str) -> String {
    format!("seq IN (SELECT value FROM json_each({placeholder})) AND {NOT_MOVED}")
}

/// One statement over both tables: `head`, `filter` (of device_events), `middle` (ending in the
/// staging table's `WHERE `), the staged rows numbered in `staged` that match `filter`, `tail`.
/// The filter's placeholders serve both copies.
pub(crate) fn over_both_tables(filter: &Sql, staged: &str, head: &str, middle: &str, tail: &str) -> Sql {
    let mut filter = filter.clone();
    let seqs = filter.placeholder(staged);
    filter.wrapped(head, &format!("{middle}{} AND ", in_staged(&seqs)), tail)
}

/// `[1,2,3]`, for `json_each`.
pub(crate) fn json_array(seqs: &[i64]) -> String {
    let mut text = String::with_capacity(seqs.len() * 8 + 2);
    text.push('[');
    for (i, seq) in seqs.iter().enumerate() {
        if i > 0 {
            text.push(',');
        }
        text.push_str(&seq.to_string());
    }
    text.push(']');
    text
}
