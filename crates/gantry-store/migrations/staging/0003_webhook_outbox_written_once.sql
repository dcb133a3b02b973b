-- This file's webhook outbox holds an event once, whatever the number of webhooks that want it:
-- `webhooks` lists those that have not taken it into a delivery yet, each id between commas
-- (`,a,b,`), and a webhook reads the rows of its own project (`project_id`; empty on a row the
-- file held before it was recorded, which every webhook of the file reads). A delivery takes an
-- event by removing its webhook from the list; the row goes when the list is empty.
ALTER TABLE webhook_outbox ADD COLUMN project_id TEXT NOT NULL DEFAULT '';
ALTER TABLE webhook_outbox ADD COLUMN webhooks TEXT NOT NULL DEFAULT '';
UPDATE webhook_outbox SET
    webhooks = ',' || webhook_id || ',',
    project_id = COALESCE(json_extract(data, '$.projectId'), '');
DROP INDEX webhook_outbox_by_webhook;
ALTER TABLE webhook_outbox DROP COLUMN webhook_id;
CREATE INDEX webhook_outbox_by_project ON webhook_outbox (project_id, seq);
