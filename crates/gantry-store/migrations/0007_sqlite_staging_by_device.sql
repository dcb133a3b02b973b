-- SQLite only: a migration whose description starts with "sqlite" runs there alone (lib.rs).
--
-- The staging table clustered by device, without a rowid: a move takes a range of devices, whose
-- events then lie side by side in the table, where in arrival order they lay on nearly every page
-- of it (a move of 500 events dirtied about 400 pages of staging for the DELETE alone; its commit
-- took 13 ms, and ingest commits waited behind it). An ingest commit now writes one leaf per device
-- instead of a table page plus a leaf of the device index. There is no index on id: a lookup of an
-- event by id reads the staging table whole, which holds about a second of events.
--
-- Events staged by the previous version are already in the shadows and the kept counts: they go
-- straight into device_events.

INSERT INTO device_events (id, tenant_id, project_id, model_id, device_id, attribute_code, attribute_type,
                           attribute_data, channel, ingress_ts, device_ts, correlation_id, context, created_by,
                           created_time)
SELECT id, tenant_id, project_id, model_id, device_id, attribute_code, attribute_type, attribute_data, channel,
       ingress_ts, device_ts, correlation_id, context, created_by, created_time
FROM device_events_recent;

DROP TABLE device_events_recent;

CREATE TABLE device_events_recent (
    device_id      TEXT NOT NULL,
    id             TEXT NOT NULL,
    tenant_id      TEXT NOT NULL,
    project_id     TEXT NOT NULL,
    model_id       TEXT NOT NULL,
    attribute_code TEXT NOT NULL,
    attribute_type TEXT NOT NULL,
    attribute_data TEXT NOT NULL,
    channel        TEXT NOT NULL,
    ingress_ts     BIGINT NOT NULL,
    device_ts      BIGINT NOT NULL,
    correlation_id TEXT,
    context        TEXT,
    created_by     TEXT NOT NULL,
    created_time   BIGINT NOT NULL,
    PRIMARY KEY (device_id, id)
) WITHOUT ROWID;
