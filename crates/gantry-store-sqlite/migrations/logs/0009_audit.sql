-- The audit log, in the event-log file: a control's record is committed in its event log's
-- transaction, so a control waits for one synced commit, not for a second one in the main file.
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
