-- Desired state: one document per device that ever had one. `attributes` is the JSON map of
-- desired attributes (value, version, status and times of each); `version` rises with every
-- change an operator makes; `revision` rises with every write (a delivery, an ack), and each
-- write is conditional on the revision it read, so two nodes never overwrite each other.
CREATE TABLE desired_states (
    device_id    TEXT PRIMARY KEY,
    tenant_id    TEXT NOT NULL,
    version      BIGINT NOT NULL,
    revision     BIGINT NOT NULL,
    attributes   TEXT NOT NULL,
    updated_time BIGINT NOT NULL
);
