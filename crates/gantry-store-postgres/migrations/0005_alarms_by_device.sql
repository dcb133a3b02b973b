-- A device's alarms on one attribute by the time they were raised: the periods a device's chart
-- marks, and a device's alarm listing, read them without going through the project's alarms.
CREATE INDEX alarms_by_device ON alarms (device_id, attribute_code, first_event_time);
