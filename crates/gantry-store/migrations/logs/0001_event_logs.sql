-- The event-log file (gantry-logs.db beside gantry.db, attached to the store's readers and to
-- the event logs' own writer as `logs`): SQLite's event logs, in a file of their own so that a
-- control's writes never wait for the main file's writer (crates/gantry-store/src/sqlite/logs.rs).
--
-- The same table and indexes as the main file's event_logs (migrations 0003 and 0004), which the
-- store empties into this one and drops when it opens; later changes to SQLite's event logs go
-- into this directory, PostgreSQL's into the main migrations.
CREATE TABLE event_logs (
    id             TEXT PRIMARY KEY,
    tenant_id      TEXT NOT NULL,
    project_id     TEXT NOT NULL,
    status         TEXT NOT NULL,
    classification TEXT NOT NULL,
    device_id      TEXT NOT NULL,
    device_name    TEXT NOT NULL,
    event_data     TEXT NOT NULL,
    context_id     TEXT,
    responses      TEXT NOT NULL,
    event_id       TEXT NOT NULL,
    -- When a control waiting for its ack ends in `exception`; kept in the store so that pending
    -- acks survive a restart.
    ack_deadline   BIGINT,
    created_by     TEXT NOT NULL,
    created_time   BIGINT NOT NULL,
    updated_by     TEXT,
    updated_time   BIGINT,
    deleted        BIGINT NOT NULL DEFAULT 0,
    reply_to       TEXT
);
CREATE INDEX event_logs_project ON event_logs (tenant_id, project_id, created_time, id);
CREATE INDEX event_logs_event ON event_logs (device_id, event_id);
CREATE INDEX event_logs_pending ON event_logs (status, ack_deadline);

-- The event logs' webhook outbox: eventLog events waiting for a webhook, written by the event
-- log's own transaction (a commit across two attached WAL files is not atomic). `seq` rises in
-- commit order (one writer); a row leaves when a delivery holds it.
CREATE TABLE webhook_outbox (
    seq        INTEGER PRIMARY KEY,
    id         TEXT NOT NULL,
    webhook_id TEXT NOT NULL,
    device_id  TEXT NOT NULL,
    kind       TEXT NOT NULL,
    time       BIGINT NOT NULL,
    data       TEXT NOT NULL
);
CREATE INDEX webhook_outbox_by_webhook ON webhook_outbox (webhook_id, seq);
