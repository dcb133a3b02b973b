-- SQLite only: a migration whose description starts with "sqlite" runs there alone (lib.rs).
--
-- The move records by the number they reach. Every read of a staged row and the mover's scan ask
-- whether a record covers the row (a record reaching its number or beyond, for a range of devices
-- holding its device): without an index each staged row was compared with every record, and the
-- records of a walk stay until the next walk's delete (about 200 of them under heavy load, against
-- 100,000 rows scanned), which made the scan take seconds. With it a row newer than every record
-- finds none at once.
CREATE INDEX device_events_recent_moved_through ON device_events_recent_moved (through);
