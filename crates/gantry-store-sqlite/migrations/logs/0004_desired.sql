-- Controls that wait for their device: `expires_time` is when a control sent with a time to live
-- ends in `exception` unless it was delivered by then; `delivered_time` when it was published to
-- the device (its ack deadline counts from then). `reason` says why a log ended in `exception`
-- (expired, cancelled).
ALTER TABLE event_logs ADD COLUMN expires_time BIGINT;
ALTER TABLE event_logs ADD COLUMN delivered_time BIGINT;
ALTER TABLE event_logs ADD COLUMN reason TEXT;
CREATE INDEX event_logs_waiting ON event_logs (device_id, status, delivered_time, created_time);
CREATE INDEX event_logs_expiring ON event_logs (status, expires_time);
