//! Message routes.

use async_trait::async_trait;
use gantry_core::enums::SourceType;
use gantry_core::ids::{DeviceId, ProjectId, TenantId};
use gantry_core::paging::{Page, PageRequest};
use gantry_core::route::StoredRoute;
use gantry_core::store::RouteStore;
use gantry_core::{Error, Result};
use sqlx::any::AnyRow;

use crate::SqlStore;
use crate::row::{flag, get, spelled};
use crate::sql::{Sql, fetch_page};

const COLUMNS: &str = "id, tenant_id, project_id, device_id, source_type, source_device_id, need_resp, client_id, \
                       username, password_hash, expired_time, created_by, created_time, updated_by, updated_time";

fn route_from_row(row: &AnyRow) -> Result<StoredRoute> {
    Ok(StoredRoute {
        id: get(row, "id")?,
        tenant_id: TenantId::from_string(get::<String>(row, "tenant_id")?),
        project_id: ProjectId::from_string(get::<String>(row, "project_id")?),
        device_id: DeviceId::from_string(get::<String>(row, "device_id")?),
        source_type: spelled(row, "source_type", SourceType::parse)?,
        source_device_id: get::<Option<String>>(row, "source_device_id")?.map(DeviceId::from_string),
        need_resp: flag(row, "need_resp")?,
        client_id: get(row, "client_id")?,
        username: get(row, "username")?,
        password_hash: get(row, "password_hash")?,
        expired_time: get(row, "expired_time")?,
        created_by: get(row, "created_by")?,
        created_time: get(row, "created_time")?,
        updated_by: get(row, "updated_by")?,
        updated_time: get(row, "updated_time")?,
    })
}

#[async_trait]
impl RouteStore for SqlStore {
    async fn insert_route(&self, r: &StoredRoute) -> Result<()> {
        sqlx::query(&format!(
            "INSERT INTO routes ({COLUMNS}) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15)"
        ))
        .bind(r.id.as_str())
        .bind(r.tenant_id.as_str())
        .bind(r.project_id.as_str())
        .bind(r.device_id.as_str())
        .bind(r.source_type.as_str())
        .bind(r.source_device_id.as_ref().map(|d| d.as_str()))
        .bind(i64::from(r.need_resp))
        .bind(r.client_id.as_deref())
        .bind(r.username.as_deref())
        .bind(r.password_hash.as_deref())
        .bind(r.expired_time)
        .bind(r.created_by.as_str())
        .bind(r.created_time)
        .bind(r.updated_by.as_deref())
        .bind(r.updated_time)
        .execute(&mut *self.writes().await?)
        .await
        .map_err(crate::error::db_error)?;
        Ok(())
    }

    async fn update_route(&self, r: &StoredRoute) -> Result<()> {
        let done = sqlx::query(
            "UPDATE routes SET expired_time = $1, updated_by = $2, updated_time = $3 WHERE tenant_id = $4 AND id = $5",
        )
        .bind(r.expired_time)
        .bind(r.updated_by.as_deref())
        .bind(r.updated_time)
        .bind(r.tenant_id.as_str())
        .bind(r.id.as_str())
        .execute(&mut *self.writes().await?)
        .await
        .map_err(crate::error::db_error)?;
        if done.rows_affected() == 0 {
            return Err(Error::not_found("route", &r.id));
        }
        Ok(())
    }

    async fn get_route(&self, tenant: &TenantId, id: &str) -> Result<Option<StoredRoute>> {
        let row = sqlx::query(&format!(
            "SELECT {COLUMNS} FROM routes WHERE tenant_id = $1 AND id = $2 AND revoked = 0"
        ))
        .bind(tenant.as_str())
        .bind(id)
        .fetch_optional(&self.pool)
        .await
        .map_err(crate::error::db_error)?;
        row.as_ref().map(route_from_row).transpose()
    }

    async fn list_device_routes(
        &self,
        tenant: &TenantId,
        device: &DeviceId,
        now: i64,
        page: PageRequest,
    ) -> Result<Page<StoredRoute>> {
        let mut from_where = Sql::new(" FROM routes WHERE revoked = 0 AND device_id = ");
        from_where
            .bind(device.as_str())
            .push(" AND tenant_id = ")
            .bind(tenant.as_str())
            .push(" AND expired_time > ")
            .bind(now);
        fetch_page(
            &self.pool,
            COLUMNS,
            &from_where,
            "created_time DESC, id DESC",
            page,
            route_from_row,
        )
        .await
    }

    async fn revoke_route(&self, tenant: &TenantId, id: &str, by: &str, at: i64) -> Result<()> {
        let done = sqlx::query(
            "UPDATE routes SET revoked = 1, updated_by = $3, updated_time = $4 \
             WHERE tenant_id = $1 AND id = $2 AND revoked = 0",
        )
        .bind(tenant.as_str())
        .bind(id)
        .bind(by)
        .bind(at)
        .execute(&mut *self.writes().await?)
        .await
        .map_err(crate::error::db_error)?;
        if done.rows_affected() == 0 {
            return Err(Error::not_found("route", id));
        }
        Ok(())
    }

    async fn route_by_client(&self, client_id: &str) -> Result<Option<StoredRoute>> {
        let row = sqlx::query(&format!(
            "SELECT {COLUMNS} FROM routes WHERE client_id = $1 AND revoked = 0"
        ))
        .bind(client_id)
        .fetch_optional(&self.pool)
        .await
        .map_err(crate::error::db_error)?;
        row.as_ref().map(route_from_row).transpose()
    }

    async fn device_route(
        &self,
        tenant: &TenantId,
        source: &DeviceId,
        target: &DeviceId,
        now: i64,
    ) -> Result<Option<StoredRoute>> {
        let row = sqlx::query(&format!(
            "SELECT {COLUMNS} FROM routes WHERE source_device_id = $1 AND device_id = $2 AND tenant_id = $3 \
             AND expired_time > $4 AND revoked = 0 ORDER BY expired_time DESC LIMIT 1"
        ))
        .bind(source.as_str())
        .bind(target.as_str())
        .bind(tenant.as_str())
        .bind(now)
        .fetch_optional(&self.pool)
        .await
        .map_err(crate::error::db_error)?;
        row.as_ref().map(route_from_row).transpose()
    }
}
