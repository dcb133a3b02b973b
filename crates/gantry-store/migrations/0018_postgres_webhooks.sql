-- Webhooks (crates/gantry-core/src/webhook.rs), on PostgreSQL: the tables of 0017 (which says
-- what each is for), but the outbox's number is an identity column. It is not in commit order
-- across concurrent transactions; a device's events still are (one ingest writer per device),
-- and rows leave the outbox by their numbers, never by a range, so a row committed late is not
-- skipped. Here the outbox holds every type: ingest writes it in its own transaction.

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
    seq        BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
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
