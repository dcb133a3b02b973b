-- The catalog: tenants, bearer tokens, device models, projects and devices.
-- Portable types only (TEXT, BIGINT, DOUBLE PRECISION) so that SQLite and PostgreSQL run this file
-- as it is: flags are BIGINT 0/1, times BIGINT epoch milliseconds, JSON documents TEXT.
-- Records are soft-deleted (deleted = 1); names are unique per tenant among live rows only.

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
-- because a device may move between projects.
CREATE TABLE tokens (
    token_hash   TEXT PRIMARY KEY,
    kind         TEXT NOT NULL CHECK (kind IN ('system', 'admin', 'application', 'device')),
    tenant_id    TEXT NOT NULL REFERENCES tenants (id),
    project_id   TEXT REFERENCES projects (id),
    device_id    TEXT REFERENCES devices (id),
    created_time BIGINT NOT NULL
);
CREATE INDEX tokens_project ON tokens (project_id);
CREATE INDEX tokens_device ON tokens (device_id);
