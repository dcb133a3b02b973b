-- SQLite only: a migration whose description starts with "sqlite" runs there alone (engine.rs).
--
-- The clustered engine's events (crates/gantry-store/src/sqlite/clustered), beside the staging
-- engine's device_events until a measurement decides between them (issue 26; which one a store
-- runs is GANTRY_SQLITE_ENGINE's choice meanwhile). Both keep their shadows and counts in
-- device_shadows and device_event_counts.
--
-- Each device that has events gets an integer key: the events table and its indexes hold the key
-- (8 bytes at most) where device_events holds the 36-character id in the row and in each of its
-- three indexes.
CREATE TABLE event_devices (
    device_key INTEGER PRIMARY KEY,
    device_id  TEXT NOT NULL UNIQUE
);

-- Clustered by device and device time: a device's events lie side by side, so that an ingest
-- commit holding a few events of a device writes about one leaf of the table for them, and the
-- listing by device time reads the table itself backwards. The other indexes are the listings'
-- (by arrival time; one attribute by device time; each ends in id, the tie-break) and the id's
-- (lookups and deletes by id; retention deletes by id order, UUIDv7 being time-ordered).
CREATE TABLE device_events_clustered (
    device_key     INTEGER NOT NULL,
    device_ts      BIGINT NOT NULL,
    id             TEXT NOT NULL,
    tenant_id      TEXT NOT NULL,
    project_id     TEXT NOT NULL,
    model_id       TEXT NOT NULL,
    attribute_code TEXT NOT NULL,
    attribute_type TEXT NOT NULL,
    attribute_data TEXT NOT NULL,
    channel        TEXT NOT NULL,
    ingress_ts     BIGINT NOT NULL,
    correlation_id TEXT,
    context        TEXT,
    created_by     TEXT NOT NULL,
    created_time   BIGINT NOT NULL,
    PRIMARY KEY (device_key, device_ts, id)
) WITHOUT ROWID;
CREATE INDEX device_events_clustered_by_ingress_ts ON device_events_clustered (device_key, ingress_ts, id);
CREATE INDEX device_events_clustered_by_attribute ON device_events_clustered (device_key, attribute_code, device_ts, id);
CREATE UNIQUE INDEX device_events_clustered_by_id ON device_events_clustered (id);
