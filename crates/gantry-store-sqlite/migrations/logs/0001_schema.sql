-- The embedded store's event-log file (gantry-logs.db beside gantry.db, attached to every
-- connection as `logs`): event logs and the webhook events they cause, written by a connection of
-- their own, so that a control never waits for the mover's transactions on the main file.

-- Event logs: control messages sent to devices and the responses they sent back. `ack_deadline`:
-- when a control waiting for its ack ends in `exception`, kept in the store so that pending acks
-- survive a restart. `reply_to`: where the ack of a routed message is forwarded (a route's caller).
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

-- Event-log events waiting for webhooks, written by the event log's own transaction (a commit
-- across two attached WAL files is not atomic). `seq` rises in commit order (one writer). An event
-- is one row whatever the number of webhooks that want it: `pending` has a bit for each webhook
-- of its project that has not taken it yet (the webhook's `slot`); the row goes when none is left.
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
