-- The kept rollups (events/rollups.rs): per device, attribute and minute (width 60000), and per
-- device, attribute and hour (width 3600000), by device time, what the series endpoint sums up:
-- how many events, how many of them Integer or Float and their sum, least and greatest (NULL
-- when there are none), and the first and the last event by (device time, id) with its value.
-- They hold exactly device_events' rows: the transaction that puts events there adds them, and
-- one that deletes events recomputes the minutes and hours they were in.

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

-- The events stored before: each minute and hour from its raw events, as the ingest path would.
INSERT INTO device_event_rollups (device_id, attribute_code, width, bucket, events, numbers, total, low, high,
                                  first_ts, first_id, first_value, last_ts, last_id, last_value)
SELECT device_id, attribute_code, width, grp, CAST(SUM(events) AS BIGINT), CAST(SUM(numbers) AS BIGINT),
       SUM(total), MIN(low), MAX(high),
       MAX(CASE WHEN up = 1 THEN first_ts END), MAX(CASE WHEN up = 1 THEN first_id END),
       MAX(CASE WHEN up = 1 THEN first_value END),
       MAX(CASE WHEN down = 1 THEN last_ts END), MAX(CASE WHEN down = 1 THEN last_id END),
       MAX(CASE WHEN down = 1 THEN last_value END)
FROM (
    SELECT parts.*,
           ROW_NUMBER() OVER (PARTITION BY device_id, attribute_code, width, grp ORDER BY first_ts, first_id) AS up,
           ROW_NUMBER() OVER (PARTITION BY device_id, attribute_code, width, grp
                              ORDER BY last_ts DESC, last_id DESC) AS down
    FROM (
        SELECT device_id, attribute_code, widths.width AS width,
               (device_ts / widths.width - CASE WHEN device_ts % widths.width < 0 THEN 1 ELSE 0 END) * widths.width AS grp,
               1 AS events,
               CASE WHEN attribute_type IN ('Integer', 'Float') THEN 1 ELSE 0 END AS numbers,
               CASE WHEN attribute_type IN ('Integer', 'Float') THEN CAST(attribute_data AS DOUBLE PRECISION) END AS total,
               CASE WHEN attribute_type IN ('Integer', 'Float') THEN CAST(attribute_data AS DOUBLE PRECISION) END AS low,
               CASE WHEN attribute_type IN ('Integer', 'Float') THEN CAST(attribute_data AS DOUBLE PRECISION) END AS high,
               device_ts AS first_ts, id AS first_id, attribute_data AS first_value,
               device_ts AS last_ts, id AS last_id, attribute_data AS last_value
        FROM device_events
        CROSS JOIN (SELECT 60000 AS width UNION ALL SELECT 3600000) AS widths
    ) AS parts
) AS ranked
GROUP BY device_id, attribute_code, width, grp;
