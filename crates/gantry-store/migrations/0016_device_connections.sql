-- Device presence: one row per device that ever connected, kept after it disconnects (the
-- times of its last session stay). `connected` is 1 while a session is on; every row is set to
-- 0 when an embedded broker starts (no session outlives the process). `last_seen_time` is
-- written in batches (presence.rs), so it may lag the last packet by a few seconds.

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
