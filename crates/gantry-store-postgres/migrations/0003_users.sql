-- People who sign in, their sessions, and the audit log of changes.

-- User accounts. `username_key` is the username in lower case: unique in the installation.
-- `project_ids` is a JSON array of project ids (empty: all of the tenant's projects).
-- `password_hash` is an Argon2id PHC string; no password is stored.
CREATE TABLE users (
    id              TEXT PRIMARY KEY,
    tenant_id       TEXT NOT NULL REFERENCES tenants (id),
    username        TEXT NOT NULL,
    username_key    TEXT NOT NULL,
    display_name    TEXT,
    email           TEXT,
    role            TEXT NOT NULL CHECK (role IN ('ADMIN', 'OPERATOR', 'VIEWER')),
    project_ids     TEXT NOT NULL,
    status          TEXT NOT NULL CHECK (status IN ('ACTIVE', 'LOCKED')),
    password_hash   TEXT NOT NULL,
    created_by      TEXT NOT NULL,
    created_time    BIGINT NOT NULL,
    updated_by      TEXT,
    updated_time    BIGINT,
    last_login_time BIGINT
);
CREATE UNIQUE INDEX users_username ON users (username_key);
CREATE INDEX users_listing ON users (tenant_id, username_key, id);

-- Sign-in sessions by the SHA-256 of their token. A session ends at `expires_time`, which use
-- moves forward up to `max_expires_time`.
CREATE TABLE user_sessions (
    token_hash       TEXT PRIMARY KEY,
    user_id          TEXT NOT NULL,
    tenant_id        TEXT NOT NULL,
    created_time     BIGINT NOT NULL,
    expires_time     BIGINT NOT NULL,
    max_expires_time BIGINT NOT NULL
);
CREATE INDEX user_sessions_user ON user_sessions (user_id);
CREATE INDEX user_sessions_expiry ON user_sessions (expires_time);

-- The audit log: one row per change (or attempt), kept for the retention period.
-- `changed_fields` is a JSON array of field names, never their values.
CREATE TABLE audit_logs (
    id             TEXT PRIMARY KEY,
    tenant_id      TEXT NOT NULL,
    created_time   BIGINT NOT NULL,
    principal_type TEXT NOT NULL,
    principal_id   TEXT NOT NULL,
    principal_name TEXT NOT NULL,
    resource_type  TEXT NOT NULL,
    resource_id    TEXT,
    action         TEXT NOT NULL,
    client_address TEXT,
    outcome        TEXT NOT NULL,
    status         BIGINT,
    changed_fields TEXT NOT NULL
);
CREATE INDEX audit_logs_listing ON audit_logs (tenant_id, created_time, id);
CREATE INDEX audit_logs_age ON audit_logs (created_time);
