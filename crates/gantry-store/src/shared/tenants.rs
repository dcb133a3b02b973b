//! Tenants and bearer tokens: the rows that turn a token hash into a principal.

use async_trait::async_trait;
use gantry_core::Result;
use gantry_core::enums::DeviceStatus;
use gantry_core::ids::{self, DeviceId, ProjectId, TenantId};
use gantry_core::paging::{Page, PageRequest};
use gantry_core::principal::{Principal, TokenOwner};
use gantry_core::records::{RecordMeta, Tenant};
use gantry_core::store::TenantStore;
use sqlx::any::AnyRow;

use crate::SqlStore;
use crate::error::write_error;
use crate::row::{bad_value, get, record};
use crate::sql::{Sql, fetch_page};

/// A tenant's columns; its own id is its records' `tenantId`.
const TENANT_COLUMNS: &str =
    "t.id, t.name, t.id AS tenant_id, t.created_by, t.created_time, t.updated_by, t.updated_time, t.deleted";

fn tenant_from_row(row: &AnyRow) -> Result<Tenant> {
    Ok(Tenant {
        id: TenantId::from_string(get::<String>(row, "id")?),
        name: get(row, "name")?,
        record: record(row)?,
    })
}

#[async_trait]
impl TenantStore for SqlStore {
    async fn ensure_default_tenant(&self, now: i64) -> Result<()> {
        sqlx::query(
            "INSERT INTO tenants (id, name, created_by, created_time, deleted) VALUES ($1, 'default', 'system', $2, 0) \
             ON CONFLICT DO NOTHING",
        )
        .bind(ids::DEFAULT_TENANT)
        .bind(now)
        .execute(&mut *self.writes().await?)
        .await
        .map_err(crate::error::db_error)?;
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
        tx.commit().await.map_err(crate::error::db_error)
    }

    async fn set_system_token(&self, tenant: &TenantId, token_hash: &str) -> Result<()> {
        let mut tx = self.begin_write().await?;
        sqlx::query("DELETE FROM tokens WHERE kind = 'system'")
            .execute(&mut *tx)
            .await
            .map_err(crate::error::db_error)?;
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
        tx.commit().await.map_err(crate::error::db_error)
    }

    async fn has_system_token(&self) -> Result<bool> {
        let count: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM tokens WHERE kind = 'system'")
            .fetch_one(&self.pool)
            .await
            .map_err(crate::error::db_error)?;
        Ok(count > 0)
    }

    async fn token_owner(&self, token_hash: &str, now: i64) -> Result<Option<TokenOwner>> {
        // The joins only find live rows, so a token outliving its project or device grants nothing.
        let row = sqlx::query(
            "SELECT t.kind, t.tenant_id, t.expires_at, p.id AS project_id, d.id AS device_id, \
                    d.project_id AS device_project, d.status AS device_status \
             FROM tokens t \
             LEFT JOIN projects p ON t.kind = 'application' AND p.id = t.project_id AND p.deleted = 0 \
             LEFT JOIN devices d ON t.kind = 'device' AND d.id = t.device_id AND d.deleted = 0 \
             WHERE t.token_hash = $1 AND (t.expires_at IS NULL OR t.expires_at > $2)",
        )
        .bind(token_hash)
        .bind(now)
        .fetch_optional(&self.pool)
        .await
        .map_err(crate::error::db_error)?;
        let Some(row) = row else { return Ok(None) };
        let tenant = TenantId::from_string(get::<String>(&row, "tenant_id")?);
        let expires: Option<i64> = get(&row, "expires_at")?;
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
        Ok(principal.map(|principal| TokenOwner { principal, expires }))
    }

    async fn get_tenant(&self, id: &TenantId) -> Result<Option<Tenant>> {
        let row = sqlx::query(&format!(
            "SELECT {TENANT_COLUMNS} FROM tenants t WHERE t.id = $1 AND t.deleted = 0"
        ))
        .bind(id.as_str())
        .fetch_optional(&self.pool)
        .await
        .map_err(crate::error::db_error)?;
        row.as_ref().map(tenant_from_row).transpose()
    }

    async fn list_tenants(&self, only: Option<&TenantId>, page: PageRequest) -> Result<Page<Tenant>> {
        let mut from_where = Sql::new(" FROM tenants t WHERE t.deleted = 0");
        if let Some(only) = only {
            from_where.push(" AND t.id = ").bind(only.as_str());
        }
        fetch_page(
            &self.pool,
            TENANT_COLUMNS,
            &from_where,
            "t.created_time, t.id",
            page,
            tenant_from_row,
        )
        .await
    }

    async fn rotate_admin_token(
        &self,
        tenant: &TenantId,
        system: bool,
        token_hash: &str,
        old_until: i64,
        at: i64,
    ) -> Result<()> {
        let mut tx = self.begin_write().await?;
        let kind = if system { "system" } else { "admin" };
        replace_token(&mut tx, kind, Holder::Tenant(tenant), token_hash, old_until, at).await?;
        tx.commit().await.map_err(crate::error::db_error)
    }
}

/// A device's or project's rotation, in one transaction: the new secret in its record's
/// `column` of `table` (reads show it), with the record's updater and time, then its token hash
/// replaced. `NotFound` when the record is gone (deleted meanwhile).
pub(crate) async fn rotate_record_token(
    store: &SqlStore,
    (table, column, kind): (&str, &str, &str),
    (record, holder): (&RecordMeta, Holder<'_>),
    secret: &str,
    token_hash: &str,
    old_until: i64,
) -> Result<()> {
    let (tenant, id, what) = match holder {
        Holder::Device(t, d) => (t, d.as_str(), "device"),
        Holder::Project(t, p) => (t, p.as_str(), "project"),
        Holder::Tenant(t) => (t, t.as_str(), "tenant"),
    };
    let at = record.updated_time.unwrap_or(record.created_time);
    let mut tx = store.begin_write().await?;
    let done = sqlx::query(&format!(
        "UPDATE {table} SET {column} = $3, updated_by = $4, updated_time = $5 \
         WHERE tenant_id = $1 AND id = $2 AND deleted = 0"
    ))
    .bind(tenant.as_str())
    .bind(id)
    .bind(secret)
    .bind(record.updated_by.as_deref())
    .bind(at)
    .execute(&mut *tx)
    .await
    .map_err(crate::error::db_error)?;
    if done.rows_affected() == 0 {
        return Err(gantry_core::Error::not_found(what, id));
    }
    replace_token(&mut tx, kind, holder, token_hash, old_until, at).await?;
    tx.commit().await.map_err(crate::error::db_error)
}

/// Whose tokens `replace_token` replaces: the column of `tokens` that names the holder.
#[derive(Clone, Copy)]
pub(crate) enum Holder<'a> {
    Tenant(&'a TenantId),
    Project(&'a TenantId, &'a ProjectId),
    Device(&'a TenantId, &'a DeviceId),
}

/// Gives the holder's tokens of `kind` an end at `old_until` (removes them when that is not
/// after `now`), drops those whose end has passed, and stores `token_hash` as the current one.
/// A token already ending sooner keeps its earlier end.
pub(crate) async fn replace_token(
    tx: &mut sqlx::Transaction<'static, sqlx::Any>,
    kind: &str,
    holder: Holder<'_>,
    token_hash: &str,
    old_until: i64,
    now: i64,
) -> Result<()> {
    let (tenant, project, device, column, key) = match holder {
        Holder::Tenant(t) => (t, None, None, "tenant_id", t.as_str()),
        Holder::Project(t, p) => (t, Some(p), None, "project_id", p.as_str()),
        Holder::Device(t, d) => (t, None, Some(d), "device_id", d.as_str()),
    };
    sqlx::query(&format!(
        "DELETE FROM tokens WHERE kind = $1 AND {column} = $2 AND expires_at <= $3"
    ))
    .bind(kind)
    .bind(key)
    .bind(now)
    .execute(&mut **tx)
    .await
    .map_err(crate::error::db_error)?;
    if old_until <= now {
        sqlx::query(&format!("DELETE FROM tokens WHERE kind = $1 AND {column} = $2"))
            .bind(kind)
            .bind(key)
            .execute(&mut **tx)
            .await
            .map_err(crate::error::db_error)?;
    } else {
        sqlx::query(&format!(
            "UPDATE tokens SET expires_at = $3 WHERE kind = $1 AND {column} = $2 \
             AND (expires_at IS NULL OR expires_at > $3)"
        ))
        .bind(kind)
        .bind(key)
        .bind(old_until)
        .execute(&mut **tx)
        .await
        .map_err(crate::error::db_error)?;
    }
    insert_token(tx, token_hash, kind, tenant, project, device, now).await
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
    .map_err(crate::error::db_error)?;
    Ok(())
}
