-- The two indexes that find waiting controls hold only controls sent with a time to live (an
-- `expires_time`): an ordinary control then writes no page of them, at its insert or at its end.
-- Every query that uses them says `expires_time IS NOT NULL`, so the planner may take them.
DROP INDEX event_logs_waiting;
DROP INDEX event_logs_expiring;
CREATE INDEX event_logs_waiting ON event_logs (device_id, status, delivered_time, created_time)
    WHERE expires_time IS NOT NULL;
CREATE INDEX event_logs_expiring ON event_logs (status, expires_time) WHERE expires_time IS NOT NULL;
