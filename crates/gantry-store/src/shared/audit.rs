//! The audit log: one row per recorded change, read newest first.

use async_trait::async_trait;
use gantry_core::Result;
use gantry_core::audit::{AuditOutcome, AuditQuery, AuditRecord, PrincipalType};
use gantry_core::ids::TenantId;
use gantry_core::paging::{Page, PageRequest};
use gantry_core::store::AuditStore;
use sqlx::AnyConnection;
use sqlx::any::AnyRow;

use crate::error::db_error;
use crate::row::{get, json, spelled, to_json};
use crate::sql::{Sql, fetch_page, values_clause};
use crate::{AnyQuery, SqlStore};

const COLUMNS: &str = "id, tenant_id, created_time, principal_type, principal_id, principal_name, resource_type, \
                       resource_id, action, client_address, outcome, status, changed_fields";

fn record_from_row(row: &AnyRow) -> Result<AuditRecord> {
    Ok(AuditRecord {
        id: get(row, "id")?,
        tenant_id: TenantId::from_string(get::<String>(row, "tenant_id")?),
        time: get(row, "created_time")?,
        principal_type: spelled(row, "principal_type", PrincipalType::parse)?,
        principal_id: get(row, "principal_id")?,
        principal_name: get(row, "principal_name")?,
        resource_type: get(row, "resource_type")?,
        resource_id: get(row, "resource_id")?,
        action: get(row, "action")?,
        client_address: get(row, "client_address")?,
        outcome: spelled(row, "outcome", |s| match s {
            "SUCCESS" => Some(AuditOutcome::Success),
            "FAILURE" => Some(AuditOutcome::Failure),
            _ => None,
        })?,
        status: get::<Option<i64>>(row, "status")?.and_then(|s| u16::try_from(s).ok()),
        changed_fields: json(row, "changed_fields")?,
    })
}

/// Records one INSERT carries at most: a statement stays a few hundred values wide, as the
/// event logs' do.
const RECORDS_PER_STATEMENT: usize = 32;

/// Values bound per record, in `COLUMNS`' order.
const WIDTH: usize = 13;

/// Writes `records` into `table` on `conn`, in the caller's transaction: one of the event-log
/// writer's (`Dialect::audit_logs`).
pub(crate) async fn insert_audit_rows(conn: &mut AnyConnection, table: &str, records: &[&AuditRecord]) -> Result<()> {
    for chunk in records.chunks(RECORDS_PER_STATEMENT) {
        let text = format!(
            "INSERT INTO {table} ({COLUMNS}) VALUES {}",
            values_clause(chunk.len(), WIDTH, false)
        );
        let query = chunk.iter().try_fold(sqlx::query(&text), |q, r| bind_record(q, r))?;
        query.execute(&mut *conn).await.map_err(db_error)?;
    }
    Ok(())
}

/// `query` with the values of `r`'s row, in `COLUMNS`' order.
fn bind_record<'q>(query: AnyQuery<'q>, r: &'q AuditRecord) -> Result<AnyQuery<'q>> {
    Ok(query
        .bind(r.id.as_str())
        .bind(r.tenant_id.as_str())
        .bind(r.time)
        .bind(r.principal_type.as_str())
        .bind(r.principal_id.as_str())
        .bind(r.principal_name.as_str())
        .bind(r.resource_type.as_str())
        .bind(r.resource_id.as_deref())
        .bind(r.action.as_str())
        .bind(r.client_address.as_deref())
        .bind(r.outcome.as_str())
        .bind(r.status.map(i64::from))
        .bind(to_json(&r.changed_fields)?))
}

#[async_trait]
impl AuditStore for SqlStore {
    async fn insert_audit(&self, r: &AuditRecord) -> Result<()> {
        let mut tx = self.begin_log_write().await?;
        insert_audit_rows(&mut tx, self.dialect.audit_logs, &[r]).await?;
        tx.commit().await.map_err(db_error)
    }

    async fn list_audit(&self, tenant: &TenantId, q: &AuditQuery, page: PageRequest) -> Result<Page<AuditRecord>> {
        let mut from_where = Sql::new(&format!(" FROM {} WHERE tenant_id = ", self.dialect.audit_logs));
        from_where.bind(tenant.as_str());
        for (column, value) in [
            ("principal_id", &q.principal_id),
            ("resource_type", &q.resource_type),
            ("resource_id", &q.resource_id),
            ("action", &q.action),
        ] {
            if let Some(value) = value {
                from_where.push(&format!(" AND {column} = ")).bind(value.as_str());
            }
        }
        if let Some(start) = q.start {
            from_where.push(" AND created_time >= ").bind(start);
        }
        if let Some(end) = q.end {
            from_where.push(" AND created_time <= ").bind(end);
        }
        fetch_page(
            &self.pool,
            COLUMNS,
            &from_where,
            "created_time DESC, id DESC",
            page,
            record_from_row,
        )
        .await
    }

    async fn delete_audit_before(&self, cutoff: i64) -> Result<u64> {
        let mut tx = self.begin_log_write().await?;
        let done = sqlx::query(&format!(
            "DELETE FROM {} WHERE created_time < $1",
            self.dialect.audit_logs
        ))
        .bind(cutoff)
        .execute(&mut *tx)
        .await
        .map_err(db_error)?;
        tx.commit().await.map_err(db_error)?;
        Ok(done.rows_affected())
    }
}
