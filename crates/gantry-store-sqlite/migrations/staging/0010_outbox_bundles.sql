-- An outbox row may hold several events that one commit wrote for the same webhooks: `events`
-- says how many. When more than one, `data` is empty and `packed` holds them as a JSON array,
-- each with its own id, device, time and data (the row's own id, device and time are its first
-- event's), LZ4-packed with the array's length first.
ALTER TABLE webhook_outbox ADD COLUMN events BIGINT NOT NULL DEFAULT 1;
ALTER TABLE webhook_outbox ADD COLUMN packed BLOB;
