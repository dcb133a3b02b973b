-- PostgreSQL folds its rollups from device_events by arrival time (events/folds.rs): the minute
-- and hour rows sum up the events that arrived before ingested_through (an ingress time, epoch
-- ms), and ingest writes a rollup row only for an event that arrives late. Until now the minute
-- rows held every event and the hour rows those before folded_through (a device time): the
-- hours from there on are summed up again from the events, and the mark starts after the newest
-- event stored. A fold finds what arrived since the mark by a BRIN index on the arrival time,
-- which costs ingest next to nothing: events are stored about in arrival order.

DELETE FROM device_event_rollups
WHERE width = 3600000
  AND bucket >= (SELECT (folded_through / 3600000 - CASE WHEN folded_through % 3600000 < 0 THEN 1 ELSE 0 END) * 3600000
                 FROM device_event_rollup_folds);

INSERT INTO device_event_rollups (device_id, attribute_code, width, bucket, events, numbers, total, low, high,
                                  first_ts, first_id, first_value, last_ts, last_id, last_value)
SELECT device_id, attribute_code, 3600000, grp, CAST(SUM(events) AS BIGINT), CAST(SUM(numbers) AS BIGINT),
       SUM(total), MIN(low), MAX(high),
       MAX(CASE WHEN up = 1 THEN first_ts END), MAX(CASE WHEN up = 1 THEN first_id END),
       MAX(CASE WHEN up = 1 THEN first_value END),
       MAX(CASE WHEN down = 1 THEN last_ts END), MAX(CASE WHEN down = 1 THEN last_id END),
       MAX(CASE WHEN down = 1 THEN last_value END)
FROM (
    SELECT parts.*,
           ROW_NUMBER() OVER (PARTITION BY device_id, attribute_code, grp ORDER BY first_ts, first_id) AS up,
           ROW_NUMBER() OVER (PARTITION BY device_id, attribute_code, grp ORDER BY last_ts DESC, last_id DESC) AS down
    FROM (
        SELECT device_id, attribute_code,
               (device_ts / 3600000 - CASE WHEN device_ts % 3600000 < 0 THEN 1 ELSE 0 END) * 3600000 AS grp,
               1 AS events,
               CASE WHEN attribute_type IN ('Integer', 'Float') THEN 1 ELSE 0 END AS numbers,
               CASE WHEN attribute_type IN ('Integer', 'Float') THEN CAST(attribute_data AS DOUBLE PRECISION) END AS total,
               CASE WHEN attribute_type IN ('Integer', 'Float') THEN CAST(attribute_data AS DOUBLE PRECISION) END AS low,
               CASE WHEN attribute_type IN ('Integer', 'Float') THEN CAST(attribute_data AS DOUBLE PRECISION) END AS high,
               device_ts AS first_ts, id AS first_id, attribute_data AS first_value,
               device_ts AS last_ts, id AS last_id, attribute_data AS last_value
        FROM device_events
        WHERE device_ts >= (SELECT (folded_through / 3600000 - CASE WHEN folded_through % 3600000 < 0 THEN 1 ELSE 0 END) * 3600000
                            FROM device_event_rollup_folds)
    ) AS parts
) AS ranked
GROUP BY device_id, attribute_code, grp;

ALTER TABLE device_event_rollup_folds ADD COLUMN ingested_through BIGINT;
UPDATE device_event_rollup_folds SET ingested_through = (SELECT COALESCE(MAX(ingress_ts) + 1, 0) FROM device_events);
ALTER TABLE device_event_rollup_folds ALTER COLUMN ingested_through SET NOT NULL;
ALTER TABLE device_event_rollup_folds DROP COLUMN folded_through;

CREATE INDEX device_events_by_arrival ON device_events USING brin (ingress_ts)
    WITH (pages_per_range = 32, autosummarize = on);
