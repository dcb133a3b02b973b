-- A fold puts up a fence where it will fold through before it sums up, and the writers wait only
-- for that (events/folds.rs): a writer with an event between the mark and the fence waits for the
-- fold to end. With no fold running the fence is the mark.

ALTER TABLE device_event_rollup_folds ADD COLUMN folding_through BIGINT;
UPDATE device_event_rollup_folds SET folding_through = ingested_through;
ALTER TABLE device_event_rollup_folds ALTER COLUMN folding_through SET NOT NULL;
