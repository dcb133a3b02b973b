-- On SQLite events are committed here first and moved into device_events in the background,
-- device by device (see merge.rs). A commit then appends to one small table instead of dirtying a
-- leaf of each per-device index for every event, and the move writes each device's events side by
-- side. Reads see both tables. PostgreSQL writes device_events directly; this table stays empty.

CREATE TABLE device_events_recent (
    id             TEXT PRIMARY KEY,
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
CREATE INDEX device_events_recent_by_device ON device_events_recent (device_id);
