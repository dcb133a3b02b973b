-- Webhooks (crates/gantry-core/src/webhook.rs), on SQLite; 0018 is the same on PostgreSQL but
-- for the outbox's arrival number.
--
-- webhooks: a project's receivers; `types` is a comma list of stream types, `secret` the HMAC key
-- of the signatures (kept as it is: a delivery needs it).
-- webhook_outbox: events waiting for a webhook, written in the transaction of their cause (an
-- event log, a connection change); `seq` rises in commit order (one writer). Telemetry and
-- shadow events wait in the staging file's own outbox instead (migrations/staging/0002), written
-- in the ingest commit. A row leaves when a delivery holds it.
-- webhook_deliveries: each POST of a batch with its retries; `body` is sent as it is on each
-- attempt, so its signature is the same.

CREATE TABLE webhooks (
    id           TEXT PRIMARY KEY,
    tenant_id    TEXT NOT NULL,
    project_id   TEXT NOT NULL,
    url          TEXT NOT NULL,
    types        TEXT NOT NULL,
    description  TEXT,
    enabled      BIGINT NOT NULL,
    secret       TEXT NOT NULL,
    created_by   TEXT NOT NULL,
    created_time BIGINT NOT NULL,
    updated_by   TEXT,
    updated_time BIGINT
);
CREATE INDEX webhooks_by_project ON webhooks (project_id, created_time, id);

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

CREATE TABLE webhook_deliveries (
    id                 TEXT PRIMARY KEY,
    tenant_id          TEXT NOT NULL,
    webhook_id         TEXT NOT NULL,
    status             TEXT NOT NULL,
    event_count        BIGINT NOT NULL,
    attempts           BIGINT NOT NULL,
    last_http_status   BIGINT,
    last_error         TEXT,
    created_time       BIGINT NOT NULL,
    first_attempt_time BIGINT,
    last_attempt_time  BIGINT,
    next_attempt_time  BIGINT,
    finished_time      BIGINT,
    body               TEXT NOT NULL
);
CREATE INDEX webhook_deliveries_by_webhook ON webhook_deliveries (webhook_id, created_time, id);
CREATE INDEX webhook_deliveries_pending ON webhook_deliveries (status, webhook_id, created_time);
