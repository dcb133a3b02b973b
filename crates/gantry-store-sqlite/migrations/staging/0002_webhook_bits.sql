-- Webhook events of ingest commits, kept on the staged rows instead of rows of their own: `hooks`
-- has a bit for each webhook (its slot) that wants the event as `telemetry`; the last row of a
-- submission carries its `shadow` event (`shadow_hooks` who wants it, `shadow_id` its id, `shadow`
-- its data). The mover writes them into the main file's outbox as it moves the rows.
-- `webhook_outbox` stays for the rows an earlier version staged there.
ALTER TABLE device_events_recent ADD COLUMN hooks BIGINT NOT NULL DEFAULT 0;
ALTER TABLE device_events_recent ADD COLUMN shadow_hooks BIGINT NOT NULL DEFAULT 0;
ALTER TABLE device_events_recent ADD COLUMN shadow_id TEXT;
ALTER TABLE device_events_recent ADD COLUMN shadow TEXT;
