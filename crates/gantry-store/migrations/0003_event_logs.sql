-- Event logs: control messages sent to devices and the responses they sent back.

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
    deleted        BIGINT NOT NULL DEFAULT 0
);
CREATE INDEX event_logs_project ON event_logs (tenant_id, project_id, created_time, id);
CREATE INDEX event_logs_event ON event_logs (device_id, event_id);
CREATE INDEX event_logs_pending ON event_logs (status, ack_deadline);
