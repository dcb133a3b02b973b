-- The fold sums up the arrival index's new page ranges itself before each pass
-- (brin_summarize_new_values). PostgreSQL's own requests for it, one per filled range, overflow
-- autovacuum's queue under a steady ingest and each one that does not fit is logged: the server
-- log took a line every 80 ms at 10,000 events/s. Vacuum still sums up what the fold could not.
ALTER INDEX device_events_by_arrival SET (autosummarize = off);
