//! Device models: their rows, the model listing and the models a project's devices use.

use async_trait::async_trait;
use gantry_core::enums::DeviceType;
use gantry_core::ids::{ModelId, ProjectId, TenantId};
use gantry_core::paging::{Page, PageRequest};
use gantry_core::records::DeviceModel;
use gantry_core::store::ModelStore;
use gantry_core::{Error, Result};
use sqlx::any::AnyRow;

use super::device_count;
use super::soft_delete::{Intent, MODELS, soft_delete};
use crate::SqlStore;
use crate::error::write_error;
use crate::row::{get, json, record, spelled, to_json};
use crate::sql::{Sql, fetch_page};

const COLUMNS: &str = "m.id, m.tenant_id, m.name, m.description, m.device_type, m.image_url, m.attributes, m.actions, \
                       m.metadata, m.gateway_id, m.created_by, m.created_time, m.updated_by, m.updated_time, m.deleted";

fn model_from_row(row: &AnyRow) -> Result<DeviceModel> {
    Ok(DeviceModel {
        id: ModelId::from_string(get::<String>(row, "id")?),
        name: get(row, "name")?,
        description: get(row, "description")?,
        device_type: spelled(row, "device_type", DeviceType::parse)?,
        image_url: get(row, "image_url")?,
        attributes_map: json(row, "attributes")?,
        actions_map: json(row, "actions")?,
        metadata: json(row, "metadata")?,
        gateway_id: get(row, "gateway_id")?,
        record: record(row)?,
    })
}

#[async_trait]
impl ModelStore for SqlStore {
    async fn insert_model(&self, model: &DeviceModel) -> Result<()> {
        let record = &model.record;
        sqlx::query(
            "INSERT INTO device_models (id, tenant_id, name, description, device_type, image_url, attributes, actions, \
                 has_actions, metadata, gateway_id, created_by, created_time, updated_by, updated_time, deleted) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, 0)",
        )
        .bind(model.id.as_str())
        .bind(record.tenant_id.as_str())
        .bind(&model.name)
        .bind(model.description.as_deref())
        .bind(model.device_type.as_str())
        .bind(model.image_url.as_deref())
        .bind(to_json(&model.attributes_map)?)
        .bind(to_json(&model.actions_map)?)
        .bind(i64::from(!model.actions_map.is_empty()))
        .bind(to_json(&model.metadata)?)
        .bind(model.gateway_id.as_deref())
        .bind(&record.created_by)
        .bind(record.created_time)
        .bind(record.updated_by.as_deref())
        .bind(record.updated_time)
        .execute(&mut *self.writes().await?)
        .await
        .map_err(write_error("device model", &model.name))?;
        Ok(())
    }

    async fn update_model(&self, model: &DeviceModel) -> Result<()> {
        let record = &model.record;
        let done = sqlx::query(
            "UPDATE device_models SET name = $3, description = $4, device_type = $5, image_url = $6, \
                 attributes = $7, actions = $8, has_actions = $9, metadata = $10, gateway_id = $11, \
                 updated_by = $12, updated_time = $13 \
             WHERE tenant_id = $1 AND id = $2 AND deleted = 0",
        )
        .bind(record.tenant_id.as_str())
        .bind(model.id.as_str())
        .bind(&model.name)
        .bind(model.description.as_deref())
        .bind(model.device_type.as_str())
        .bind(model.image_url.as_deref())
        .bind(to_json(&model.attributes_map)?)
        .bind(to_json(&model.actions_map)?)
        .bind(i64::from(!model.actions_map.is_empty()))
        .bind(to_json(&model.metadata)?)
        .bind(model.gateway_id.as_deref())
        .bind(record.updated_by.as_deref())
        .bind(record.updated_time)
        .execute(&mut *self.writes().await?)
        .await
        .map_err(write_error("device model", &model.name))?;
        if done.rows_affected() == 0 {
            return Err(Error::not_found("device model", &model.id));
        }
        Ok(())
    }

    async fn get_model(&self, tenant: &TenantId, id: &ModelId) -> Result<Option<DeviceModel>> {
        let row = sqlx::query(&format!(
            "SELECT {COLUMNS} FROM device_models m WHERE m.tenant_id = $1 AND m.id = $2 AND m.deleted = 0"
        ))
        .bind(tenant.as_str())
        .bind(id.as_str())
        .fetch_optional(&self.pool)
        .await
        .map_err(crate::error::db_error)?;
        row.as_ref().map(model_from_row).transpose()
    }

    async fn list_models(&self, tenant: &TenantId, page: PageRequest) -> Result<Page<DeviceModel>> {
        let mut from_where = Sql::new(" FROM device_models m WHERE m.deleted = 0 AND m.tenant_id = ");
        from_where.bind(tenant.as_str());
        fetch_page(
            &self.pool,
            COLUMNS,
            &from_where,
            "m.created_time, m.id",
            page,
            model_from_row,
        )
        .await
    }

    async fn project_models(&self, tenant: &TenantId, project: &ProjectId) -> Result<Vec<DeviceModel>> {
        let collate = self.collate();
        let rows = sqlx::query(&format!(
            "SELECT {COLUMNS} FROM device_models m \
             WHERE m.tenant_id = $1 AND m.deleted = 0 AND m.id IN \
                 (SELECT d.model_id FROM devices d WHERE d.tenant_id = $1 AND d.project_id = $2 AND d.deleted = 0) \
             ORDER BY m.name{collate}, m.id"
        ))
        .bind(tenant.as_str())
        .bind(project.as_str())
        .fetch_all(&self.pool)
        .await
        .map_err(crate::error::db_error)?;
        rows.iter().map(model_from_row).collect()
    }

    async fn delete_model(&self, tenant: &TenantId, id: &ModelId, by: &str, at: i64) -> Result<()> {
        let mut tx = self.begin_write().await?;
        // Locked before counting, so that a device being written with the model is counted or fails.
        self.lock_live(&mut tx, &MODELS, tenant, id.as_str(), Intent::Delete)
            .await?;
        let users: i64 =
            sqlx::query_scalar("SELECT COUNT(*) FROM devices WHERE tenant_id = $1 AND model_id = $2 AND deleted = 0")
                .bind(tenant.as_str())
                .bind(id.as_str())
                .fetch_one(&mut *tx)
                .await
                .map_err(crate::error::db_error)?;
        if users > 0 {
            return Err(Error::Conflict(format!(
                "the device model is used by {}",
                device_count(users)
            )));
        }
        soft_delete(&mut tx, &MODELS, tenant, id.as_str(), by, at).await?;
        tx.commit().await.map_err(crate::error::db_error)
    }
}
