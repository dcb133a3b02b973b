-- PostgreSQL only (lib.rs). The kept counts and the shadows are rows that ingest updates many
-- times a second each. With room left on their pages, an update writes the row's new version on
-- the same page and no new index entry (a heap-only tuple), and the page's old versions are pruned
-- as it is read.
ALTER TABLE device_event_counts SET (fillfactor = 50);
ALTER TABLE device_shadows SET (fillfactor = 50);
