-- Alarm keeps: per device and key (`rule:<ruleId>` or `attribute:<code>`), the newest step that
-- only counted events into the open alarm or moved the rule's timers, committed with the events
-- it counts (so durable exactly when they are). Each row holds the state and the open alarm's
-- count, value and times after the step, whole, and the state `version` it wrote; it is folded
-- into the event-log file's alarm_states and alarms only over an older version, so folding it
-- twice changes nothing. `alarm_id` is null when the step changed no alarm. `seq` is the number
-- of the last event staged with it: a fold takes only rows whose commit is on disk.
CREATE TABLE alarm_keeps (
    device_id        TEXT NOT NULL,
    alarm_key        TEXT NOT NULL,
    version          BIGINT NOT NULL,
    raise_since      BIGINT,
    clear_since      BIGINT,
    levels           TEXT NOT NULL,
    last_time        BIGINT,
    last_arrival     BIGINT,
    recent           TEXT NOT NULL,
    no_data          BIGINT NOT NULL,
    alarm_id         TEXT,
    count            BIGINT,
    value            TEXT,
    last_event_time  BIGINT,
    updated_time     BIGINT,
    seq              BIGINT NOT NULL,
    PRIMARY KEY (device_id, alarm_key)
) WITHOUT ROWID;
