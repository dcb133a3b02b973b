-- Device events and shadows. No foreign keys on events: they are the hot write path, and the
-- service checks the device before it accepts an event.

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
-- One index per listing: a device's events by device time, by arrival time, and one attribute's
-- by device time. Each ends in id so that ORDER BY time DESC, id DESC reads the index backwards.
CREATE INDEX device_events_by_device_ts ON device_events (device_id, device_ts, id);
CREATE INDEX device_events_by_ingress_ts ON device_events (device_id, ingress_ts, id);
CREATE INDEX device_events_by_attribute ON device_events (device_id, attribute_code, device_ts, id);

-- The latest value per device and attribute, by device time.
CREATE TABLE device_shadows (
    device_id      TEXT NOT NULL,
    attribute_code TEXT NOT NULL,
    tenant_id      TEXT NOT NULL,
    value          TEXT NOT NULL,
    device_ts      BIGINT NOT NULL,
    ingress_ts     BIGINT NOT NULL,
    PRIMARY KEY (device_id, attribute_code)
);
