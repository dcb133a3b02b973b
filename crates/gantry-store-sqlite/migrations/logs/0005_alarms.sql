-- Alarms, their history and the rules' states per device, in the event-log file: evaluation
-- writes them on the ingest path (through the event-log file's own writer), where on the main
-- file each commit would queue behind the mover's transactions. The rules stay in the main file;
-- nothing here refers to them by a key the database checks.

-- Alarms, raised by a rule or by a device (an attribute on channel w). `alarm_key` is what an
-- alarm is raised for: `rule:<ruleId>` or `attribute:<code>`.
CREATE TABLE alarms (
    id                 TEXT PRIMARY KEY,
    tenant_id          TEXT NOT NULL,
    project_id         TEXT NOT NULL,
    device_id          TEXT NOT NULL,
    device_name        TEXT NOT NULL,
    rule_id            TEXT,
    alarm_key          TEXT NOT NULL,
    attribute_code     TEXT NOT NULL,
    name               TEXT NOT NULL,
    severity           TEXT NOT NULL,
    status             TEXT NOT NULL,
    source             TEXT NOT NULL,
    first_event_time   BIGINT NOT NULL,
    last_event_time    BIGINT NOT NULL,
    value              TEXT NOT NULL,
    count              BIGINT NOT NULL,
    acknowledged_by    TEXT,
    acknowledged_time  BIGINT,
    cleared_by         TEXT,
    cleared_time       BIGINT,
    created_time       BIGINT NOT NULL,
    updated_time       BIGINT NOT NULL
);
-- At most one alarm that is not CLEARED per device and rule (or attribute, for device alarms):
-- of two concurrent raises, one inserts and the other updates the alarm it finds.
CREATE UNIQUE INDEX alarms_open ON alarms (device_id, alarm_key) WHERE status <> 'CLEARED';
CREATE INDEX alarms_by_project ON alarms (project_id, updated_time, id);
CREATE INDEX alarms_by_rule ON alarms (rule_id, status);
-- A device's alarms on one attribute by the time they were raised: the periods a device's chart
-- marks, and a device's alarm listing, read them without going through the project's alarms.
CREATE INDEX alarms_by_device ON alarms (device_id, attribute_code, first_event_time);

-- Every transition of an alarm, oldest first by `seq`.
CREATE TABLE alarm_history (
    id        TEXT PRIMARY KEY,
    alarm_id  TEXT NOT NULL,
    seq       BIGINT NOT NULL,
    kind      TEXT NOT NULL,
    severity  TEXT NOT NULL,
    status    TEXT NOT NULL,
    value     TEXT NOT NULL,
    actor     TEXT NOT NULL,
    time      BIGINT NOT NULL,
    text      TEXT
);
CREATE UNIQUE INDEX alarm_history_by_alarm ON alarm_history (alarm_id, seq);

-- A rule's state per device (and a device alarm's, keyed as its alarm is), so that timers under
-- way survive a restart and every node sees the same: since when the raise condition, the clear
-- condition and each escalation have held (device time), the newest device time evaluated, the
-- last arrival (the no-data clock), the message ids evaluated lately (a redelivery is not counted
-- twice) and whether a no-data alarm is up. `version` grows with each write: a transition is
-- written only over the state it was computed from.
CREATE TABLE alarm_states (
    alarm_key     TEXT NOT NULL,
    device_id     TEXT NOT NULL,
    tenant_id     TEXT NOT NULL,
    raise_since   BIGINT,
    clear_since   BIGINT,
    levels        TEXT NOT NULL,
    last_time     BIGINT,
    last_arrival  BIGINT,
    recent        TEXT NOT NULL,
    no_data       BIGINT NOT NULL,
    version       BIGINT NOT NULL,
    PRIMARY KEY (alarm_key, device_id)
);
