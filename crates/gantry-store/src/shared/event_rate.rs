//! Each project's events per minute: one row per project and minute, which every node's flush
//! adds its counts to.

use async_trait::async_trait;
use gantry_core::Result;
use gantry_core::event::EventMinute;
use gantry_core::ids::{ProjectId, TenantId};
use gantry_core::store::EventRateStore;

use crate::SqlStore;
use crate::error::db_error;
use crate::row::get;
use crate::sql::values_clause;

/// Rows per statement: a flush holds a few per project that had events.
const ROWS_PER_STATEMENT: usize = 500;

#[async_trait]
impl EventRateStore for SqlStore {
    async fn add_event_minutes(&self, rows: &[EventMinute]) -> Result<()> {
        if rows.is_empty() {
            return Ok(());
        }
        let mut tx = self.writer.begin().await.map_err(db_error)?;
        for chunk in rows.chunks(ROWS_PER_STATEMENT) {
            let text = format!(
                "INSERT INTO project_event_minutes (project_id, minute, tenant_id, events) VALUES {} \
                 ON CONFLICT (project_id, minute) DO UPDATE SET events = project_event_minutes.events + excluded.events",
                values_clause(chunk.len(), 4, false)
            );
            let query = chunk.iter().fold(sqlx::query(&text), |q, row| {
                q.bind(row.project_id.as_str())
                    .bind(row.minute)
                    .bind(row.tenant_id.as_str())
                    .bind(i64::try_from(row.events).unwrap_or(i64::MAX))
            });
            query.execute(&mut *tx).await.map_err(db_error)?;
        }
        tx.commit().await.map_err(db_error)
    }

    async fn event_minutes(&self, tenant: &TenantId, project: &ProjectId, since: i64) -> Result<Vec<(i64, u64)>> {
        let rows = sqlx::query(
            "SELECT minute, events FROM project_event_minutes \
             WHERE project_id = $1 AND tenant_id = $2 AND minute >= $3 ORDER BY minute",
        )
        .bind(project.as_str())
        .bind(tenant.as_str())
        .bind(since)
        .fetch_all(&self.pool)
        .await
        .map_err(db_error)?;
        rows.iter()
            .map(|row| Ok((get(row, "minute")?, get::<i64>(row, "events")?.max(0) as u64)))
            .collect()
    }

    async fn delete_event_minutes_before(&self, cutoff: i64) -> Result<u64> {
        let done = sqlx::query("DELETE FROM project_event_minutes WHERE minute < $1")
            .bind(cutoff)
            .execute(&self.writer)
            .await
            .map_err(db_error)?;
        Ok(done.rows_affected())
    }
}
