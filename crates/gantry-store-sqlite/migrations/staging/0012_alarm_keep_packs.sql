-- Alarm keeps, packed: one row per ingest commit that counted events into open alarms (or moved
-- a rule's timers), appended like the events instead of one row per device and key written in
-- place, so that a commit writes the table's last pages only. `seq` is the number of the commit's
-- last event (a fold takes only packs whose commit is on disk); `keeps` is a JSON array of rows,
-- each the values of the event-log file's columns (device_id, alarm_key, version, raise_since,
-- clear_since, levels, last_time, last_arrival, recent, no_data, alarm_id, count, value,
-- last_event_time, updated_time), the state version the keep's step wrote.
CREATE TABLE alarm_keep_packs (
    seq    INTEGER PRIMARY KEY,
    keeps  TEXT NOT NULL
);

-- The keeps of the table before, still to fold, as one pack numbered by the newest of them.
INSERT INTO alarm_keep_packs (seq, keeps)
SELECT MAX(seq), json_group_array(json_array(device_id, alarm_key, version, raise_since, clear_since, levels,
           last_time, last_arrival, recent, no_data, alarm_id, count, value, last_event_time, updated_time))
FROM alarm_keeps
HAVING COUNT(*) > 0;

DROP TABLE alarm_keeps;
