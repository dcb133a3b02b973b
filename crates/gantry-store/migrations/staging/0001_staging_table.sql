-- The staging file (gantry-staging.db beside gantry.db, attached to every connection as
-- `staging`): its one table, where SQLite's ingest commits events before the mover puts them into
-- device_events (crates/gantry-store/src/sqlite/staging).
--
-- Arrival order, no index but the arrival number, which rises in commit order (one writer) and
-- is never reused (AUTOINCREMENT). The same columns as migration 0009's table in the main file,
-- which the store empties into this one and drops when it opens. IF NOT EXISTS: staging files
-- written before this migration existed have the table already.
CREATE TABLE IF NOT EXISTS device_events_recent (
    seq            INTEGER PRIMARY KEY AUTOINCREMENT,
    id             TEXT NOT NULL,
    tenant_id      TEXT NOT NULL,
    project_id     TEXT NOT NULL,
    model_id       TEXT NOT NULL,
    device_id      TEXT NOT NULL,
    attribute_code TEXT NOT NULL,
    attribute_type TEXT NOT NULL,
    attribute_data TEXT NOT NULL,
    channel        TEXT NOT NULL,
    ingress_ts     BIGINT NOT NULL,
    device_ts      BIGINT NOT NULL,
    correlation_id TEXT,
    context        TEXT,
    created_by     TEXT NOT NULL,
    created_time   BIGINT NOT NULL
);
