-- Message routes, and where an event log's ack is forwarded to (a route's caller).

CREATE TABLE routes (
    id               TEXT PRIMARY KEY,
    tenant_id        TEXT NOT NULL,
    project_id       TEXT NOT NULL,
    device_id        TEXT NOT NULL,
    source_type      TEXT NOT NULL,
    source_device_id TEXT,
    need_resp        BIGINT NOT NULL,
    client_id        TEXT,
    username         TEXT,
    password_hash    TEXT,
    expired_time     BIGINT NOT NULL,
    created_by       TEXT NOT NULL,
    created_time     BIGINT NOT NULL,
    updated_by       TEXT,
    updated_time     BIGINT
);
CREATE UNIQUE INDEX routes_client ON routes (client_id);
CREATE INDEX routes_device_pair ON routes (source_device_id, device_id, expired_time);

ALTER TABLE event_logs ADD COLUMN reply_to TEXT;
