//! Desired states: one row per device, its attributes as JSON. Every write is conditional on
//! the revision it read (compare and set), so of two writers that read one revision only one
//! writes; the other reads again. No row lock, so the same SQL runs on both engines.

use async_trait::async_trait;
use gantry_core::Result;
use gantry_core::desired::DesiredState;
use gantry_core::ids::{DeviceId, ProjectId, TenantId};
use gantry_core::store::DesiredStore;
use gantry_core::stream::StreamType;
use gantry_core::webhook::Audience;

use crate::SqlStore;
use crate::error::db_error;
use crate::outbox::{outbox_events, write_outbox};
use crate::row::{get, json, to_json};

#[async_trait]
impl DesiredStore for SqlStore {
    async fn desired_state(&self, tenant: &TenantId, device: &DeviceId) -> Result<Option<(DesiredState, i64)>> {
        let row = sqlx::query(
            "SELECT version, revision, attributes FROM desired_states WHERE device_id = $1 AND tenant_id = $2",
        )
        .bind(device.as_str())
        .bind(tenant.as_str())
        .fetch_optional(&self.pool)
        .await
        .map_err(db_error)?;
        let Some(row) = row else { return Ok(None) };
        let state = DesiredState {
            device_id: device.clone(),
            tenant_id: tenant.clone(),
            version: get(&row, "version")?,
            attributes: json(&row, "attributes")?,
        };
        Ok(Some((state, get(&row, "revision")?)))
    }

    async fn save_desired_state(
        &self,
        state: &DesiredState,
        project: &ProjectId,
        revision: i64,
        at: i64,
        webhooks: Audience,
    ) -> Result<bool> {
        let attributes = to_json(&state.attributes)?;
        let outbox = outbox_events(webhooks, StreamType::Desired, project, &state.device_id, state)?;
        let mut tx = self.begin_write().await?;
        let done = if revision == 0 {
            sqlx::query(
                "INSERT INTO desired_states (device_id, tenant_id, version, revision, attributes, updated_time) \
                 VALUES ($1, $2, $3, 1, $4, $5) ON CONFLICT (device_id) DO NOTHING",
            )
            .bind(state.device_id.as_str())
            .bind(state.tenant_id.as_str())
            .bind(state.version)
            .bind(attributes)
            .bind(at)
            .execute(&mut *tx)
            .await
        } else {
            sqlx::query(
                "UPDATE desired_states SET version = $1, revision = revision + 1, attributes = $2, updated_time = $3 \
                 WHERE device_id = $4 AND tenant_id = $5 AND revision = $6",
            )
            .bind(state.version)
            .bind(attributes)
            .bind(at)
            .bind(state.device_id.as_str())
            .bind(state.tenant_id.as_str())
            .bind(revision)
            .execute(&mut *tx)
            .await
        };
        if done.map_err(db_error)?.rows_affected() != 1 {
            return Ok(false);
        }
        // The webhook events commit with the write that caused them.
        write_outbox(&mut tx, "webhook_outbox", &outbox, false).await?;
        tx.commit().await.map_err(db_error)?;
        Ok(true)
    }
}
