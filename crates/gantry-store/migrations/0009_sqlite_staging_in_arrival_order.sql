-- SQLite only: a migration whose description starts with "sqlite" runs there alone (lib.rs).
--
-- The staging table in arrival order, with no index but its arrival number: an ingest commit then
-- appends its events to the last page or two of one table. Clustered by device (migration 0007),
-- nearly every event of a commit landed on its own leaf and often split it: a commit of 20 to 30
-- events wrote a median 56 pages of WAL. The reads find a device's staged events by their numbers,
-- which the store keeps in memory (staged.rs); the numbers are AUTOINCREMENT, never reused, and
-- rise in commit order. Moves take ranges of numbers (merge.rs).
--
-- Events staged by the previous version are not in the shadows or the kept counts yet: they stay
-- staged, and the next move settles them.

ALTER TABLE device_events_recent RENAME TO device_events_recent_0007;

CREATE TABLE device_events_recent (
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

INSERT INTO device_events_recent (id, tenant_id, project_id, model_id, device_id, attribute_code, attribute_type,
                                  attribute_data, channel, ingress_ts, device_ts, correlation_id, context, created_by,
                                  created_time)
SELECT id, tenant_id, project_id, model_id, device_id, attribute_code, attribute_type, attribute_data, channel,
       ingress_ts, device_ts, correlation_id, context, created_by, created_time
FROM device_events_recent_0007
ORDER BY id;

DROP TABLE device_events_recent_0007;

-- The device ranges a walk of the mover has moved so far, each up to a number: such staged rows
-- are in device_events already and are read there; the walk deletes them from the staging table
-- at its end, all at once (its numbers are contiguous), and empties this table in the same
-- transaction (merge.rs).
CREATE TABLE device_events_recent_moved (
    device_lo TEXT NOT NULL,
    device_hi TEXT NOT NULL,
    through   INTEGER NOT NULL
);
