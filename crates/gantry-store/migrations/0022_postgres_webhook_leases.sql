-- Several nodes on one PostgreSQL database: the node that holds a webhook's lease works its
-- deliveries alone (WebhookStore::lease_webhook), renewing it while it does. SQLite is opened by
-- one process at a time and keeps none.

ALTER TABLE webhooks ADD COLUMN lease_owner TEXT;
ALTER TABLE webhooks ADD COLUMN lease_until BIGINT NOT NULL DEFAULT 0;
