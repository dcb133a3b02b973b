-- PostgreSQL only: a migration whose description starts with "postgres" runs there alone (lib.rs).
-- PostgreSQL writes device_events directly (SqlStore::stages_events); the staging table 0006 made
-- there stayed empty and is no longer read.

DROP TABLE device_events_recent;
