-- The audit log moves to the event-log file (its migration 0009, run before this one), which is
-- attached as `logs` while this runs: the records are copied there, then the main file's table
-- is dropped, so that its name means the event-log file's table.
INSERT OR IGNORE INTO logs.audit_logs SELECT * FROM main.audit_logs;
DROP TABLE main.audit_logs;
