-- The embedded store's staging file (gantry-staging.db beside gantry.db, attached to every
-- connection as `staging`): where ingest commits events before the mover puts them into
-- device_events, and the webhook events those commits cause.
--
-- Arrival order, no index but the arrival number, which rises in commit order (one writer) and is
-- never reused (AUTOINCREMENT): an ingest commit appends to the last page or two of one table.
-- The reads find a device's staged events by their numbers, which the store keeps in memory.
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

-- Telemetry and shadow events waiting for webhooks, written by the ingest commit that stages their
-- events (so in the same file and transaction: a commit across two attached WAL files is not
-- atomic). `seq` rises in commit order (one writer). An event is one row whatever the number of
-- webhooks that want it: `pending` has a bit for each webhook of its project that has not taken
-- it yet (the webhook's `slot`); the row goes when none is left.
CREATE TABLE webhook_outbox (
    seq        INTEGER PRIMARY KEY,
    id         TEXT NOT NULL,
    project_id TEXT NOT NULL,
    pending    BIGINT NOT NULL,
    device_id  TEXT NOT NULL,
    kind       TEXT NOT NULL,
    time       BIGINT NOT NULL,
    data       TEXT NOT NULL
);
CREATE INDEX webhook_outbox_by_project ON webhook_outbox (project_id, seq);
