-- PostgreSQL's store: the catalog, the events, what is kept of them, event logs, presence and
-- webhooks, in one database that several nodes may share. Ingest writes device_events directly;
-- the rollups are folded from them by arrival time in the background.

-- The catalog: tenants, bearer tokens, device models, projects and devices.
-- Portable types only (TEXT, BIGINT, DOUBLE PRECISION): flags are BIGINT 0/1, times BIGINT epoch
-- milliseconds, JSON documents TEXT. Records are soft-deleted (deleted = 1); names are unique per
-- tenant among live rows only.

CREATE TABLE tenants (
    id           TEXT PRIMARY KEY,
    name         TEXT NOT NULL,
    created_by   TEXT NOT NULL,
    created_time BIGINT NOT NULL,
    updated_by   TEXT,
    updated_time BIGINT,
    deleted      BIGINT NOT NULL DEFAULT 0
);
CREATE UNIQUE INDEX tenants_name ON tenants (name);

CREATE TABLE device_models (
    id           TEXT PRIMARY KEY,
    tenant_id    TEXT NOT NULL REFERENCES tenants (id),
    name         TEXT NOT NULL,
    description  TEXT,
    device_type  TEXT NOT NULL,
    image_url    TEXT,
    attributes   TEXT NOT NULL,
    actions      TEXT NOT NULL,
    -- Kept beside `actions` so device listings need not parse every model's actions.
    has_actions  BIGINT NOT NULL,
    metadata     TEXT NOT NULL,
    gateway_id   TEXT,
    created_by   TEXT NOT NULL,
    created_time BIGINT NOT NULL,
    updated_by   TEXT,
    updated_time BIGINT,
    deleted      BIGINT NOT NULL DEFAULT 0
);
CREATE UNIQUE INDEX device_models_name ON device_models (tenant_id, name) WHERE deleted = 0;
CREATE INDEX device_models_listing ON device_models (tenant_id, created_time, id);

CREATE TABLE projects (
    id                       TEXT PRIMARY KEY,
    tenant_id                TEXT NOT NULL REFERENCES tenants (id),
    name                     TEXT NOT NULL,
    description              TEXT,
    image_url                TEXT,
    status                   TEXT NOT NULL,
    address                  TEXT,
    map_info                 TEXT,
    application_access_token TEXT NOT NULL,
    restful_api_addr         TEXT NOT NULL,
    mq_api_addr              TEXT NOT NULL,
    template_id              TEXT,
    metadata                 TEXT NOT NULL,
    created_by               TEXT NOT NULL,
    created_time             BIGINT NOT NULL,
    updated_by               TEXT,
    updated_time             BIGINT,
    deleted                  BIGINT NOT NULL DEFAULT 0
);
CREATE UNIQUE INDEX projects_name ON projects (tenant_id, name) WHERE deleted = 0;
CREATE INDEX projects_listing ON projects (tenant_id, created_time, id);

CREATE TABLE devices (
    id           TEXT PRIMARY KEY,
    tenant_id    TEXT NOT NULL REFERENCES tenants (id),
    device_name  TEXT NOT NULL,
    project_id   TEXT NOT NULL REFERENCES projects (id),
    model_id     TEXT NOT NULL REFERENCES device_models (id),
    status       TEXT NOT NULL,
    access_token TEXT NOT NULL,
    is_virtual   BIGINT NOT NULL,
    comments     TEXT,
    metadata     TEXT NOT NULL,
    created_by   TEXT NOT NULL,
    created_time BIGINT NOT NULL,
    updated_by   TEXT,
    updated_time BIGINT,
    deleted      BIGINT NOT NULL DEFAULT 0
);
CREATE UNIQUE INDEX devices_name ON devices (tenant_id, device_name) WHERE deleted = 0;
CREATE INDEX devices_project ON devices (tenant_id, project_id);
CREATE INDEX devices_model ON devices (tenant_id, model_id);

-- Bearer tokens by their SHA-256 hash. A device token's project is read from the device row,
-- because a device may move between projects. A token replaced with a grace period keeps its
-- row until `expires_at` (epoch ms); the current token has none (NULL).
CREATE TABLE tokens (
    token_hash   TEXT PRIMARY KEY,
    kind         TEXT NOT NULL CHECK (kind IN ('system', 'admin', 'application', 'device')),
    tenant_id    TEXT NOT NULL REFERENCES tenants (id),
    project_id   TEXT REFERENCES projects (id),
    device_id    TEXT REFERENCES devices (id),
    created_time BIGINT NOT NULL,
    expires_at   BIGINT
);
CREATE INDEX tokens_project ON tokens (project_id);
CREATE INDEX tokens_device ON tokens (device_id);

-- Message routes: a temporary MQTT identity (`client_id`, `username`, `password_hash`) or a
-- device pair, until `expired_time`. A revoked route (revoked = 1) no longer logs in, lists or
-- refreshes; its row stays so that event logs can still name it.
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
    updated_time     BIGINT,
    revoked          BIGINT NOT NULL DEFAULT 0
);
CREATE UNIQUE INDEX routes_client ON routes (client_id);
CREATE INDEX routes_device_pair ON routes (source_device_id, device_id, expired_time);
CREATE INDEX routes_device ON routes (device_id, created_time, id);

-- Device presence: one row per device that ever connected, kept after it disconnects (the times
-- of its last session stay). `connected` is 1 while a session is on. `last_seen_time` is written
-- in batches, so it may lag the last packet by a few seconds.
CREATE TABLE device_connections (
    device_id         TEXT PRIMARY KEY,
    tenant_id         TEXT NOT NULL,
    connected         BIGINT NOT NULL,
    connected_time    BIGINT,
    disconnected_time BIGINT,
    last_seen_time    BIGINT,
    client_address    TEXT,
    protocol          TEXT,
    transport         TEXT
);

-- Device events. No foreign keys: they are the hot write path, and the service checks the device
-- before it accepts an event. One index per listing: a device's events by device time, by
-- arrival time, and one attribute's by device time. Each ends in id so that
-- ORDER BY time DESC, id DESC reads the index backwards.
CREATE TABLE device_events (
    id             TEXT PRIMARY KEY,
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
CREATE INDEX device_events_by_device_ts ON device_events (device_id, device_ts, id);
CREATE INDEX device_events_by_ingress_ts ON device_events (device_id, ingress_ts, id);
CREATE INDEX device_events_by_attribute ON device_events (device_id, attribute_code, device_ts, id);

-- Found by arrival time by the fold of the rollups: events are stored about in arrival order, so
-- a BRIN index costs ingest next to nothing. The fold sums up the index's new page ranges itself
-- before each pass (brin_summarize_new_values), so PostgreSQL is not asked to (autosummarize off):
-- its requests overflow autovacuum's queue under a steady ingest.
CREATE INDEX device_events_by_arrival ON device_events USING brin (ingress_ts)
    WITH (pages_per_range = 32, autosummarize = off);

-- The latest value per device and attribute, by device time. Ingest updates these rows many times
-- a second; room left on their pages lets an update write the row's new version on the same page,
-- with no new index entry.
CREATE TABLE device_shadows (
    device_id      TEXT NOT NULL,
    attribute_code TEXT NOT NULL,
    tenant_id      TEXT NOT NULL,
    value          TEXT NOT NULL,
    device_ts      BIGINT NOT NULL,
    ingress_ts     BIGINT NOT NULL,
    PRIMARY KEY (device_id, attribute_code)
)
WITH (fillfactor = 50);

-- How many events are stored per device (attribute_code '') and per device and attribute, so
-- that an unfiltered listing's totalResults costs one row read instead of counting an index
-- range: the rows with clock '' and epoch_hour 0. (The hourly keys the embedded store keeps are
-- not kept here: they would cost ingest more keys per batch than the range counts save.)
-- Ingest updates these rows many times a second: room left on their pages lets an update write
-- the new version on the same page, with no new index entry.
CREATE TABLE device_event_counts (
    device_id      TEXT NOT NULL,
    attribute_code TEXT NOT NULL,
    clock          TEXT NOT NULL,
    epoch_hour     BIGINT NOT NULL,
    events         BIGINT NOT NULL,
    PRIMARY KEY (device_id, attribute_code, clock, epoch_hour)
)
WITH (fillfactor = 50);

-- The rollups sum up the events that arrived before `device_event_rollup_folds.ingested_through`:
-- a fold adds those that arrived since, and ingest writes a rollup row only for an event that
-- arrives late (before the mark).
-- The kept rollups: per device, attribute and minute (width 60000), and per device, attribute
-- and hour (width 3600000), by device time, what the series endpoint sums up: how many events,
-- how many of them Integer or Float and their sum, least and greatest (NULL when there are none),
-- and the first and the last event by (device time, id) with its value.
CREATE TABLE device_event_rollups (
    device_id      TEXT NOT NULL,
    attribute_code TEXT NOT NULL,
    width          BIGINT NOT NULL,
    bucket         BIGINT NOT NULL,
    events         BIGINT NOT NULL,
    numbers        BIGINT NOT NULL,
    total          DOUBLE PRECISION,
    low            DOUBLE PRECISION,
    high           DOUBLE PRECISION,
    first_ts       BIGINT NOT NULL,
    first_id       TEXT NOT NULL,
    first_value    TEXT NOT NULL,
    last_ts        BIGINT NOT NULL,
    last_id        TEXT NOT NULL,
    last_value     TEXT NOT NULL,
    PRIMARY KEY (device_id, attribute_code, width, bucket)
);

-- The fold marks, one row: the rollups hold every event that arrived before `ingested_through`
-- (an ingress time, epoch ms); a running fold puts up a fence at `folding_through` before it sums
-- up, and a writer with an event between the mark and the fence waits for the fold to end. With
-- no fold running the fence is the mark.
CREATE TABLE device_event_rollup_folds (
    ingested_through BIGINT NOT NULL,
    folding_through  BIGINT NOT NULL
);
INSERT INTO device_event_rollup_folds (ingested_through, folding_through) VALUES (0, 0);

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

-- Webhooks: a project's receivers; `types` is a comma list of stream types, `secret` the HMAC key
-- of the signatures (kept as it is: a delivery needs it), `slot` its bit in the outbox's
-- `pending` (0 to 62, unique among the project's webhooks).
-- With several nodes on one database, the node that holds a webhook's lease (`lease_owner`
-- until `lease_until`) works its deliveries alone, renewing it while it does.
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
    updated_time BIGINT,
    slot         BIGINT NOT NULL,
    lease_owner  TEXT,
    lease_until  BIGINT NOT NULL DEFAULT 0
);
CREATE INDEX webhooks_by_project ON webhooks (project_id, created_time, id);

-- Events waiting for webhooks: the outbox of every cause (ingest commits, event logs and
-- connection changes), each written in its cause's transaction. An event is one row whatever the
-- number of webhooks that want it: `pending` has a bit for each webhook of its project that has
-- not taken it into a delivery yet (the webhook's `slot`), and a webhook reads the rows of its own
-- project. A delivery takes an event by clearing its bit; the row goes when none is left.
CREATE TABLE webhook_outbox (
    seq        BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    id         TEXT NOT NULL,
    project_id TEXT NOT NULL,
    pending    BIGINT NOT NULL,
    device_id  TEXT NOT NULL,
    kind       TEXT NOT NULL,
    time       BIGINT NOT NULL,
    data       TEXT NOT NULL
);
CREATE INDEX webhook_outbox_by_project ON webhook_outbox (project_id, seq);

-- Each POST of a batch of events to a webhook, with its retries; `body` is sent as it is on each
-- attempt, so its signature stays the same.
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
