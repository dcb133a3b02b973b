-- The staging file's webhook outbox: telemetry and shadow events waiting for a webhook, written
-- by the ingest commit that stages their events (so in the same file and transaction: a commit
-- across two attached WAL files is not atomic). The main file's webhook_outbox (migration 0017)
-- holds the other types. `seq` rises in commit order (one stager); a row leaves when a delivery
-- holds it.
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
