-- Alarms, their history and the rules' states move to the event-log file (its migration 0005,
-- run before this one), which is attached as `logs` while this runs: the rows are copied there,
-- then the main file's tables are dropped, so that their names mean the event-log file's tables.
INSERT OR IGNORE INTO logs.alarms SELECT * FROM main.alarms;
INSERT OR IGNORE INTO logs.alarm_history SELECT * FROM main.alarm_history;
INSERT OR IGNORE INTO logs.alarm_states SELECT * FROM main.alarm_states;
DROP TABLE main.alarms;
DROP TABLE main.alarm_history;
DROP TABLE main.alarm_states;
