//! Soft deletes (a record is marked deleted and the tokens naming it revoked), and the row locks
//! that keep a model or project from being deleted while a device is written into it.

use gantry_core::ids::TenantId;
use gantry_core::{Error, Result};
use sqlx::{Any, Transaction};

use crate::SqlStore;

/// A table of soft-deleted records.
pub(crate) struct Table {
    name: &'static str,
    /// What a `NotFound` calls a record of the table.
    kind: &'static str,
    /// The column of `tokens` that names a record of the table, if its records have tokens.
    token_column: Option<&'static str>,
}

pub(crate) const DEVICES: Table = Table {
    name: "devices",
    kind: "device",
    token_column: Some("device_id"),
};

pub(crate) const PROJECTS: Table = Table {
    name: "projects",
    kind: "project",
    token_column: Some("project_id"),
};

pub(crate) const MODELS: Table = Table {
    name: "device_models",
    kind: "device model",
    token_column: None,
};

/// What the transaction that locks a live record is going to do.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Intent {
    /// Write a device that uses the record: the record must stay live until the commit.
    Use,
    /// Delete the record: no writer may start using it until the commit.
    Delete,
}

/// Marks the tenant's live record `id` deleted and revokes its tokens; `NotFound` when there is none.
pub(crate) async fn soft_delete(
    tx: &mut Transaction<'static, Any>,
    table: &Table,
    tenant: &TenantId,
    id: &str,
    by: &str,
    at: i64,
) -> Result<()> {
    let done = sqlx::query(&format!(
        "UPDATE {} SET deleted = 1, updated_by = $3, updated_time = $4 \
         WHERE tenant_id = $1 AND id = $2 AND deleted = 0",
        table.name
    ))
    .bind(tenant.as_str())
    .bind(id)
    .bind(by)
    .bind(at)
    .execute(&mut **tx)
    .await
    .map_err(crate::error::db_error)?;
    if done.rows_affected() == 0 {
        return Err(Error::not_found(table.kind, id));
    }
    if let Some(column) = table.token_column {
        sqlx::query(&format!("DELETE FROM tokens WHERE {column} = $1"))
            .bind(id)
            .execute(&mut **tx)
            .await
            .map_err(crate::error::db_error)?;
    }
    Ok(())
}

impl SqlStore {
    /// `NotFound` unless `id` is a live record of the tenant. Where the engine has row locks
    /// (`Dialect::lock_in_use`, `lock_to_delete`) the row stays locked until `tx` ends: users
    /// share the lock and a delete takes it alone, so a delete that counts a record's devices
    /// cannot miss one being written. An engine whose write transactions run one at a time needs
    /// none.
    pub(crate) async fn lock_live(
        &self,
        tx: &mut Transaction<'static, Any>,
        table: &Table,
        tenant: &TenantId,
        id: &str,
        intent: Intent,
    ) -> Result<()> {
        let lock = match intent {
            Intent::Use => self.dialect.lock_in_use,
            Intent::Delete => self.dialect.lock_to_delete,
        };
        let live: Option<String> = sqlx::query_scalar(&format!(
            "SELECT id FROM {} WHERE tenant_id = $1 AND id = $2 AND deleted = 0{lock}",
            table.name
        ))
        .bind(tenant.as_str())
        .bind(id)
        .fetch_optional(&mut **tx)
        .await
        .map_err(crate::error::db_error)?;
        match live {
            Some(_) => Ok(()),
            None => Err(Error::not_found(table.kind, id)),
        }
    }
}
