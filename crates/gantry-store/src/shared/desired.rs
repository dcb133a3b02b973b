//! Desired states: one row per device, its attributes as JSON. Every write is conditional on
//! the revision it read (compare and set), so of two writers that read one revision only one
//! writes; the other reads again. No row lock, so the same SQL runs on both engines.

use async_trait::async_trait;
use gantry_core::Result;
use gantry_core::desired::DesiredState;
use gantry_core::ids::{DeviceId, TenantId};
use gantry_core::store::{DesiredStore, DesiredWrite};
use gantry_core::stream::StreamType;

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

    async fn save_desired_states(&self, writes: &[DesiredWrite]) -> Result<Vec<bool>> {
        if writes.is_empty() {
            return Ok(Vec::new());
        }
        let mut tx = self.begin_write().await?;
        let mut written = Vec::with_capacity(writes.len());
        for write in writes {
            written.push(save_one(&mut tx, write).await?);
        }
        tx.commit().await.map_err(db_error)?;
        Ok(written)
    }
}

/// One write of `save_desired_states`, in its transaction: whether the stored document was still
/// at the revision the write read.
async fn save_one(tx: &mut sqlx::AnyConnection, write: &DesiredWrite) -> Result<bool> {
    let state = &write.state;
    let attributes = to_json(&state.attributes)?;
    let done = if write.revision == 0 {
        sqlx::query(
            "INSERT INTO desired_states (device_id, tenant_id, version, revision, attributes, updated_time) \
             VALUES ($1, $2, $3, 1, $4, $5) ON CONFLICT (device_id) DO NOTHING",
        )
        .bind(state.device_id.as_str())
        .bind(state.tenant_id.as_str())
        .bind(state.version)
        .bind(attributes)
        .bind(write.at)
        .execute(&mut *tx)
        .await
    } else {
        sqlx::query(
            "UPDATE desired_states SET version = $1, revision = revision + 1, attributes = $2, updated_time = $3 \
             WHERE device_id = $4 AND tenant_id = $5 AND revision = $6",
        )
        .bind(state.version)
        .bind(attributes)
        .bind(write.at)
        .bind(state.device_id.as_str())
        .bind(state.tenant_id.as_str())
        .bind(write.revision)
        .execute(&mut *tx)
        .await
    };
    if done.map_err(db_error)?.rows_affected() != 1 {
        return Ok(false);
    }
    // The webhook events commit with the write that caused them.
    let outbox = outbox_events(
        write.webhooks,
        StreamType::Desired,
        &write.project,
        &state.device_id,
        state,
    )?;
    write_outbox(tx, "webhook_outbox", &outbox, false).await?;
    Ok(true)
}
