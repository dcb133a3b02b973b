-- PostgreSQL folds its hour rollups from the minute rows in the background (events/folds.rs): an
-- hour row sums up the events of its hour before folded_through (a minute's start, epoch ms), the
-- minute rows hold every event. The hours kept so far hold every event, so the mark starts after
-- the newest minute kept.

CREATE TABLE device_event_rollup_folds (
    folded_through BIGINT NOT NULL
);

INSERT INTO device_event_rollup_folds (folded_through)
SELECT COALESCE(MAX(bucket) + 60000, 0) FROM device_event_rollups WHERE width = 60000;
