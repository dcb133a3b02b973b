//! Devices: their rows joined to their model and project for the derived fields, and the
//! filtered, sorted device listing.

use async_trait::async_trait;
use gantry_core::enums::{DeviceStatus, DeviceType, SortOrder};
use gantry_core::ids::{DeviceId, ModelId, ProjectId, TenantId};
use gantry_core::paging::{Page, PageRequest};
use gantry_core::query::{DeviceQuery, DeviceSort};
use gantry_core::records::{Device, DeviceCounts, JsonMap};
use gantry_core::store::DeviceStore;
use gantry_core::{Error, Result};
use sqlx::any::AnyRow;

use super::soft_delete::{DEVICES, Intent, MODELS, PROJECTS, soft_delete};
use super::tenants::{Holder, insert_token, rotate_record_token};
use crate::SqlStore;
use crate::error::write_error;
use crate::row::{flag, get, json, record, spelled, to_json};
use crate::sql::{Sql, contains_pattern, fetch_page};

const COLUMNS: &str = "d.id, d.tenant_id, d.device_name, d.project_id, d.model_id, d.status, d.access_token, \
                       d.is_virtual, d.comments, d.metadata, \
                       d.created_by, d.created_time, d.updated_by, d.updated_time, d.deleted, \
                       m.device_type AS model_type, m.name AS model_name, m.has_actions AS model_has_actions, \
                       m.image_url AS model_url, p.name AS project_name";

/// Whether device `d` is connected now: a device never connected has no row.
const CONNECTED_NOW: &str = "EXISTS (SELECT 1 FROM device_connections c WHERE c.device_id = d.id AND c.connected = 1)";

/// Devices with their model and project; the service keeps both alive while devices use them.
const JOINED: &str = " FROM devices d \
                      JOIN device_models m ON m.id = d.model_id \
                      JOIN projects p ON p.id = d.project_id";

fn device_from_row(row: &AnyRow) -> Result<Device> {
    let is_virtual = flag(row, "is_virtual")?;
    Ok(Device {
        id: DeviceId::from_string(get::<String>(row, "id")?),
        device_name: get(row, "device_name")?,
        project_id: ProjectId::from_string(get::<String>(row, "project_id")?),
        model_id: ModelId::from_string(get::<String>(row, "model_id")?),
        status: spelled(row, "status", DeviceStatus::parse)?,
        access_token: get(row, "access_token")?,
        is_virtual,
        virtual_: is_virtual,
        comments: get(row, "comments")?,
        metadata: json(row, "metadata")?,
        device_model_type: spelled(row, "model_type", DeviceType::parse)?,
        device_model_name: get(row, "model_name")?,
        project_name: get(row, "project_name")?,
        has_actions: flag(row, "model_has_actions")?,
        device_model_url: get(row, "model_url")?,
        record: record(row)?,
    })
}

#[async_trait]
impl DeviceStore for SqlStore {
    async fn insert_device(&self, device: &Device, token_hash: &str) -> Result<()> {
        let record = &device.record;
        let tenant = &record.tenant_id;
        let mut tx = self.begin_write().await?;
        // The service has looked both up, but they may have been deleted since.
        self.lock_live(&mut tx, &PROJECTS, tenant, device.project_id.as_str(), Intent::Use)
            .await?;
        self.lock_live(&mut tx, &MODELS, tenant, device.model_id.as_str(), Intent::Use)
            .await?;
        sqlx::query(
            "INSERT INTO devices (id, tenant_id, device_name, project_id, model_id, status, access_token, is_virtual, \
                 comments, metadata, created_by, created_time, updated_by, updated_time, deleted) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, 0)",
        )
        .bind(device.id.as_str())
        .bind(record.tenant_id.as_str())
        .bind(&device.device_name)
        .bind(device.project_id.as_str())
        .bind(device.model_id.as_str())
        .bind(device.status.as_str())
        .bind(&device.access_token)
        .bind(i64::from(device.is_virtual))
        .bind(device.comments.as_deref())
        .bind(to_json(&device.metadata)?)
        .bind(&record.created_by)
        .bind(record.created_time)
        .bind(record.updated_by.as_deref())
        .bind(record.updated_time)
        .execute(&mut *tx)
        .await
        .map_err(write_error("device", &device.device_name))?;
        insert_token(
            &mut tx,
            token_hash,
            "device",
            &record.tenant_id,
            None,
            Some(&device.id),
            record.created_time,
        )
        .await?;
        tx.commit().await.map_err(crate::error::db_error)
    }

    async fn update_device(&self, device: &Device) -> Result<()> {
        let record = &device.record;
        let mut tx = self.begin_write().await?;
        // The device may be moving into a project deleted since the service looked it up.
        self.lock_live(
            &mut tx,
            &PROJECTS,
            &record.tenant_id,
            device.project_id.as_str(),
            Intent::Use,
        )
        .await?;
        let done = sqlx::query(
            "UPDATE devices SET device_name = $3, project_id = $4, status = $5, comments = $6, is_virtual = $7, \
                 metadata = $8, updated_by = $9, updated_time = $10 \
             WHERE tenant_id = $1 AND id = $2 AND deleted = 0",
        )
        .bind(record.tenant_id.as_str())
        .bind(device.id.as_str())
        .bind(&device.device_name)
        .bind(device.project_id.as_str())
        .bind(device.status.as_str())
        .bind(device.comments.as_deref())
        .bind(i64::from(device.is_virtual))
        .bind(to_json(&device.metadata)?)
        .bind(record.updated_by.as_deref())
        .bind(record.updated_time)
        .execute(&mut *tx)
        .await
        .map_err(write_error("device", &device.device_name))?;
        if done.rows_affected() == 0 {
            return Err(Error::not_found("device", &device.id));
        }
        tx.commit().await.map_err(crate::error::db_error)
    }

    /// By the primary key alone, the tenant and the deletion checked on the row: with them in the
    /// query, PostgreSQL without statistics for the table yet (a new store, its first minute of
    /// devices) chose the (tenant, name) index and read every device of the tenant.
    async fn get_device(&self, tenant: &TenantId, id: &DeviceId) -> Result<Option<Device>> {
        let row = sqlx::query(&format!("SELECT {COLUMNS}{JOINED} WHERE d.id = $1"))
            .bind(id.as_str())
            .fetch_optional(&self.pool)
            .await
            .map_err(crate::error::db_error)?;
        let device = row.as_ref().map(device_from_row).transpose()?;
        Ok(device.filter(|d| d.record.tenant_id == *tenant && !d.record.deleted))
    }

    async fn device_tenant(&self, id: &DeviceId) -> Result<Option<TenantId>> {
        let tenant: Option<String> = sqlx::query_scalar("SELECT tenant_id FROM devices WHERE id = $1 AND deleted = 0")
            .bind(id.as_str())
            .fetch_optional(&self.pool)
            .await
            .map_err(crate::error::db_error)?;
        Ok(tenant.map(TenantId::from_string))
    }

    async fn count_project_devices(&self, tenant: &TenantId, project: &ProjectId) -> Result<DeviceCounts> {
        // One pass over the project's devices (index `devices_project`), without the model and
        // project joins and the order a listing needs.
        let row = sqlx::query(&format!(
            "SELECT COUNT(*) AS total, \
             COALESCE(SUM(CASE WHEN {CONNECTED_NOW} THEN 1 ELSE 0 END), 0) AS connected, \
             COALESCE(SUM(CASE WHEN d.status = $3 THEN 1 ELSE 0 END), 0) AS locked \
             FROM devices d WHERE d.tenant_id = $1 AND d.project_id = $2 AND d.deleted = 0"
        ))
        .bind(tenant.as_str())
        .bind(project.as_str())
        .bind(DeviceStatus::Locked.as_str())
        .fetch_one(&self.pool)
        .await
        .map_err(crate::error::db_error)?;
        let count = |column: &str| get::<i64>(&row, column).map(|n| n.max(0) as u64);
        Ok(DeviceCounts {
            total: count("total")?,
            connected: count("connected")?,
            locked: count("locked")?,
        })
    }

    async fn model_device_metadata(&self, tenant: &TenantId, model: &ModelId) -> Result<(u64, Vec<JsonMap>)> {
        let of_model = "FROM devices WHERE tenant_id = $1 AND model_id = $2 AND deleted = 0";
        let devices: i64 = sqlx::query_scalar(&format!("SELECT COUNT(*) {of_model}"))
            .bind(tenant.as_str())
            .bind(model.as_str())
            .fetch_one(&self.pool)
            .await
            .map_err(crate::error::db_error)?;
        // Metadata is stored as its JSON text: an empty map is `{}`, which holds no key, so
        // those rows are counted and not read.
        let rows = sqlx::query(&format!("SELECT metadata {of_model} AND metadata <> '{{}}'"))
            .bind(tenant.as_str())
            .bind(model.as_str())
            .fetch_all(&self.pool)
            .await
            .map_err(crate::error::db_error)?;
        let metadata = rows
            .iter()
            .map(|row| json(row, "metadata"))
            .collect::<Result<Vec<JsonMap>>>()?;
        Ok((devices.max(0) as u64, metadata))
    }

    async fn list_devices(&self, tenant: &TenantId, query: &DeviceQuery, page: PageRequest) -> Result<Page<Device>> {
        let mut from_where = Sql::new(&format!("{JOINED} WHERE d.deleted = 0 AND d.tenant_id = "));
        from_where.bind(tenant.as_str());
        if let Some(project) = &query.project {
            from_where.push(" AND d.project_id = ").bind(project.as_str());
        }
        if let Some(within) = &query.within {
            crate::sql::push_in(
                &mut from_where,
                " AND d.project_id IN (",
                within.iter().map(|p| p.as_str()),
            );
        }
        if let Some(model) = &query.model {
            from_where.push(" AND d.model_id = ").bind(model.as_str());
        }
        if let Some(name) = &query.device_name {
            from_where
                .push(" AND LOWER(d.device_name) LIKE LOWER(")
                .bind(contains_pattern(name))
                .push(") ESCAPE '\\'");
        }
        if let Some(device_type) = query.device_type {
            from_where.push(" AND m.device_type = ").bind(device_type.as_str());
        }
        if let Some(is_virtual) = query.is_virtual {
            from_where.push(" AND d.is_virtual = ").bind(i64::from(is_virtual));
        }
        if let Some(status) = query.status {
            from_where.push(" AND d.status = ").bind(status.as_str());
        }
        if let Some(connected) = query.connected {
            // A device never connected has no row: it is among the disconnected.
            from_where
                .push(if connected { " AND " } else { " AND NOT " })
                .push(CONNECTED_NOW);
        }
        let order_by = order_by(query.sort_by, query.sort_order, self.collate());
        fetch_page(&self.pool, COLUMNS, &from_where, &order_by, page, device_from_row).await
    }

    async fn rotate_device_token(&self, device: &Device, token_hash: &str, old_until: i64) -> Result<()> {
        let holder = Holder::Device(&device.record.tenant_id, &device.id);
        let secret = &device.access_token;
        let target = ("devices", "access_token", "device");
        rotate_record_token(self, target, (&device.record, holder), secret, token_hash, old_until).await
    }

    async fn delete_device(&self, tenant: &TenantId, id: &DeviceId, by: &str, at: i64) -> Result<()> {
        let mut tx = self.begin_write().await?;
        soft_delete(&mut tx, &DEVICES, tenant, id.as_str(), by, at).await?;
        tx.commit().await.map_err(crate::error::db_error)
    }
}

/// The sort field, then the id in the same direction, so that equal keys keep one order across pages.
fn order_by(sort: DeviceSort, order: SortOrder, collate: &str) -> String {
    let key = match sort {
        DeviceSort::UpdatedTime => "COALESCE(d.updated_time, d.created_time)".to_owned(),
        DeviceSort::CreatedTime => "d.created_time".to_owned(),
        DeviceSort::DeviceName => format!("d.device_name{collate}"),
        DeviceSort::Status => "d.status".to_owned(),
    };
    let direction = order.as_str();
    format!("{key} {direction}, d.id {direction}")
}
