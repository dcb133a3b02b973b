-- Credential rotation and route revocation.
-- A token replaced with a grace period keeps its row until `expires_at` (epoch ms); a token with
-- no expiry (NULL) is the current one. A revoked route (revoked = 1) no longer logs in, lists or
-- refreshes; its row stays so that event logs can still name it.

ALTER TABLE tokens ADD COLUMN expires_at BIGINT;
ALTER TABLE routes ADD COLUMN revoked BIGINT NOT NULL DEFAULT 0;
CREATE INDEX routes_device ON routes (device_id, created_time, id);
