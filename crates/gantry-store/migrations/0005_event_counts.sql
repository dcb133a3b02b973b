-- Per device (attribute_code '') and per device and attribute: how many events are stored, so
-- that an unfiltered listing's totalResults costs one row read instead of counting an index range.

CREATE TABLE device_event_counts (
    device_id      TEXT NOT NULL,
    attribute_code TEXT NOT NULL,
    events         BIGINT NOT NULL,
    PRIMARY KEY (device_id, attribute_code)
);

INSERT INTO device_event_counts (device_id, attribute_code, events)
SELECT device_id, '', COUNT(*) FROM device_events GROUP BY device_id;

INSERT INTO device_event_counts (device_id, attribute_code, events)
SELECT device_id, attribute_code, COUNT(*) FROM device_events GROUP BY device_id, attribute_code;
