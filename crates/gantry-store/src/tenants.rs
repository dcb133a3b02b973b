//! Tenants and bearer tokens: the rows that turn a token hash into a principal.

use async_trait::async_trait;
use gantry_core::Result;
use gantry_core::auth::Principal;
use gantry_core::enums::DeviceStatus;
use gantry_core::ids::{self, DeviceId, ProjectId, TenantId};
use gantry_core::records::Tenant;
use gantry_core::store::TenantStore;

use crate::row::{bad_value, get};
use crate::{SqlStore, write_error};

#[async_trait]
impl TenantStore for SqlStore {
    async fn ensure_default_tenant(&self, now: i64) -> Result<()> {
        sqlx::query(
            "INSERT INTO tenants (id, name, created_by, created_time, deleted) VALUES ($1, 'default', 'system', $2, 0) \
             ON CONFLICT DO NOTHING",
        )
        .bind(ids::DEFAULT_TENANT)
        .bind(now)
        .execute(self.writes())
        .await
        .map_err(crate::db_error)?;
        Ok(())
    }

    async fn insert_tenant(&self, tenant: &Tenant, admin_token_hash: &str) -> Result<()> {
        let record = &tenant.record;
        let mut tx = self.begin_write().await?;
        sqlx::query(
            "INSERT INTO tenants (id, name, created_by, created_time, updated_by, updated_time, deleted) \
             VALUES ($1, $2, $3, $4, $5, $6, 0)",
        )
        .bind(tenant.id.as_str())
        .bind(&tenant.name)
        .bind(&record.created_by)
        .bind(record.created_time)
        .bind(record.updated_by.as_deref())
        .bind(record.updated_time)
        .execute(&mut *tx)
        .await
        .map_err(write_error("tenant", &tenant.name))?;
        insert_token(
            &mut tx,
            admin_token_hash,
            "admin",
            &tenant.id,
            None,
            None,
            record.created_time,
        )
        .await?;
        tx.commit().await.map_err(crate::db_error)
    }

    async fn set_system_token(&self, tenant: &TenantId, token_hash: &str) -> Result<()> {
        let mut tx = self.begin_write().await?;
        sqlx::query("DELETE FROM tokens WHERE kind = 'system'")
            .execute(&mut *tx)
            .await
            .map_err(crate::db_error)?;
        insert_token(
            &mut tx,
            token_hash,
            "system",
            tenant,
            None,
            None,
            gantry_core::time::now_ms(),
        )
        .await?;
        tx.commit().await.map_err(crate::db_error)
    }

    async fn has_system_token(&self) -> Result<bool> {
        let count: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM tokens WHERE kind = 'system'")
            .fetch_one(&self.pool)
            .await
            .map_err(crate::db_error)?;
        Ok(count > 0)
    }

    async fn principal_for_token(&self, token_hash: &str) -> Result<Option<Principal>> {
        // The joins only find live rows, so a token outliving its project or device grants nothing.
        let row = sqlx::query(
            "SELECT t.kind, t.tenant_id, p.id AS project_id, d.id AS device_id, d.project_id AS device_project, \
                    d.status AS device_status \
             FROM tokens t \
             LEFT JOIN projects p ON t.kind = 'application' AND p.id = t.project_id AND p.deleted = 0 \
             LEFT JOIN devices d ON t.kind = 'device' AND d.id = t.device_id AND d.deleted = 0 \
             WHERE t.token_hash = $1",
        )
        .bind(token_hash)
        .fetch_optional(&self.pool)
        .await
        .map_err(crate::db_error)?;
        let Some(row) = row else { return Ok(None) };
        let tenant = TenantId::from_string(get::<String>(&row, "tenant_id")?);
        let kind: String = get(&row, "kind")?;
        let principal = match kind.as_str() {
            "system" => Some(Principal::Admin { tenant, system: true }),
            "admin" => Some(Principal::Admin { tenant, system: false }),
            "application" => get::<Option<String>>(&row, "project_id")?.map(|project| Principal::Application {
                tenant,
                project: ProjectId::from_string(project),
            }),
            "device" => match (
                get::<Option<String>>(&row, "device_id")?,
                get::<Option<String>>(&row, "device_project")?,
            ) {
                (Some(device), Some(project)) => {
                    let status: String = get(&row, "device_status")?;
                    Some(Principal::Device {
                        tenant,
                        project: ProjectId::from_string(project),
                        device: DeviceId::from_string(device),
                        locked: status == DeviceStatus::Locked.as_str(),
                    })
                }
                _ => None,
            },
            other => return Err(bad_value("kind", format!("`{other}` is not a token kind").into())),
        };
        Ok(principal)
    }
}

/// Stores a token hash for its principal, inside the transaction that creates the principal.
pub(crate) async fn insert_token(
    tx: &mut sqlx::Transaction<'static, sqlx::Any>,
    token_hash: &str,
    kind: &str,
    tenant: &TenantId,
    project: Option<&ProjectId>,
    device: Option<&DeviceId>,
    now: i64,
) -> Result<()> {
    sqlx::query(
        "INSERT INTO tokens (token_hash, kind, tenant_id, project_id, device_id, created_time) \
         VALUES ($1, $2, $3, $4, $5, $6)",
    )
    .bind(token_hash)
    .bind(kind)
    .bind(tenant.as_str())
    .bind(project.map(ProjectId::as_str))
    .bind(device.map(DeviceId::as_str))
    .bind(now)
    .execute(&mut **tx)
    .await
    .map_err(crate::db_error)?;
    Ok(())
}
