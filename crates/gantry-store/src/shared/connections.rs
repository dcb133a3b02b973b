//! Device presence: one row per device that ever connected. A session's start and end are
//! conditional writes keyed by the session's start time, so that events that arrive out of
//! order (an old session's end after a new session's start) never undo the newer state.
//! They are background writes no request waits for (`SqlStore::begin_background_write`), so
//! they must not make the SQLite mover's moves short (`engine::ApiWrites`).

use async_trait::async_trait;
use gantry_core::Result;
use gantry_core::connection::{Connection, SessionEnd, SessionStart};
use gantry_core::ids::{DeviceId, ProjectId, TenantId};
use gantry_core::store::ConnectionStore;
use gantry_core::stream::StreamType;
use gantry_core::webhook::Audience;
use sqlx::any::AnyRow;

use crate::SqlStore;
use crate::error::db_error;
use crate::outbox::{outbox_events, write_outbox};
use crate::row::{flag, get};
use crate::sql::{Sql, push_in, values_clause};

/// Devices per statement of a last-seen flush: a statement per device made each flush of a large
/// fleet as many round trips on a writer connection.
const LAST_SEEN_PER_STATEMENT: usize = 500;

const COLUMNS: &str = "device_id, connected, connected_time, disconnected_time, last_seen_time, client_address, \
                       protocol, transport";

fn connection_from_row(row: &AnyRow) -> Result<Connection> {
    Ok(Connection {
        device_id: DeviceId::from_string(get::<String>(row, "device_id")?),
        connected: flag(row, "connected")?,
        connected_time: get(row, "connected_time")?,
        disconnected_time: get(row, "disconnected_time")?,
        last_seen_time: get(row, "last_seen_time")?,
        client_address: get(row, "client_address")?,
        protocol: get(row, "protocol")?,
        transport: get(row, "transport")?,
    })
}

#[async_trait]
impl ConnectionStore for SqlStore {
    async fn sessions_started(&self, starts: &[(TenantId, SessionStart, Audience)]) -> Result<()> {
        if starts.is_empty() {
            return Ok(());
        }
        let mut tx = self.begin_background_write().await?;
        for (tenant, start, webhooks) in starts {
            start_one(&mut tx, tenant, start, *webhooks).await?;
        }
        tx.commit().await.map_err(db_error)
    }

    async fn sessions_ended(&self, ends: &[(SessionEnd, Audience)]) -> Result<Vec<bool>> {
        if ends.is_empty() {
            return Ok(Vec::new());
        }
        let mut tx = self.begin_background_write().await?;
        let mut ended = Vec::with_capacity(ends.len());
        for (end, webhooks) in ends {
            ended.push(end_one(&mut tx, end, *webhooks).await?);
        }
        tx.commit().await.map_err(db_error)?;
        Ok(ended)
    }

    async fn record_last_seen(&self, seen: &[(DeviceId, i64)]) -> Result<()> {
        if seen.is_empty() {
            return Ok(());
        }
        let mut tx = self.begin_background_write().await?;
        for chunk in seen.chunks(LAST_SEEN_PER_STATEMENT) {
            // VALUES names its columns column1, column2 on both engines.
            let text = format!(
                "UPDATE device_connections SET last_seen_time = seen.column2 FROM (VALUES {}) AS seen \
                 WHERE device_connections.device_id = seen.column1 \
                 AND (device_connections.last_seen_time IS NULL OR device_connections.last_seen_time < seen.column2)",
                values_clause(chunk.len(), 2, false)
            );
            let query = chunk
                .iter()
                .fold(sqlx::query(&text), |q, (device, at)| q.bind(device.as_str()).bind(*at));
            query.execute(&mut *tx).await.map_err(db_error)?;
        }
        tx.commit().await.map_err(db_error)
    }

    async fn connection(&self, device: &DeviceId) -> Result<Option<Connection>> {
        let row = sqlx::query(&format!(
            "SELECT {COLUMNS} FROM device_connections WHERE device_id = $1"
        ))
        .bind(device.as_str())
        .fetch_optional(&self.pool)
        .await
        .map_err(db_error)?;
        row.as_ref().map(connection_from_row).transpose()
    }

    async fn project_connections(
        &self,
        tenant: &TenantId,
        project: &ProjectId,
        devices: &[DeviceId],
    ) -> Result<Vec<Connection>> {
        if devices.is_empty() {
            return Ok(Vec::new());
        }
        let mut select = Sql::new(&format!("SELECT {COLUMNS} FROM device_connections WHERE tenant_id = "));
        select.bind(tenant.as_str());
        push_in(&mut select, " AND device_id IN (", devices.iter().map(DeviceId::as_str));
        select
            .push(" AND device_id IN (SELECT id FROM devices WHERE tenant_id = $1 AND project_id = ")
            .bind(project.as_str())
            .push(")");
        let rows = select.query().fetch_all(&self.pool).await.map_err(db_error)?;
        rows.iter().map(connection_from_row).collect()
    }

    async fn end_all_sessions(&self) -> Result<u64> {
        // The last packet is the best known end of a session the process did not see end.
        let done = sqlx::query(
            "UPDATE device_connections SET connected = 0, \
             disconnected_time = COALESCE(last_seen_time, connected_time) WHERE connected = 1",
        )
        .execute(&self.writer)
        .await
        .map_err(db_error)?;
        Ok(done.rows_affected())
    }
}

/// One start of `sessions_started`, in its transaction.
async fn start_one(
    conn: &mut sqlx::AnyConnection,
    tenant: &TenantId,
    start: &SessionStart,
    webhooks: Audience,
) -> Result<()> {
    // An older session's start that arrives late leaves a newer one as it is.
    let done = sqlx::query(
        "INSERT INTO device_connections (device_id, tenant_id, connected, connected_time, \
         disconnected_time, last_seen_time, client_address, protocol, transport) \
         VALUES ($1, $2, 1, $3, NULL, $3, $4, $5, $6) \
         ON CONFLICT (device_id) DO UPDATE SET connected = 1, \
         connected_time = excluded.connected_time, \
         last_seen_time = CASE WHEN excluded.last_seen_time > COALESCE(device_connections.last_seen_time, 0) \
             THEN excluded.last_seen_time ELSE device_connections.last_seen_time END, \
         client_address = excluded.client_address, protocol = excluded.protocol, \
         transport = excluded.transport \
         WHERE device_connections.connected_time IS NULL \
            OR device_connections.connected_time <= excluded.connected_time",
    )
    .bind(start.device.as_str())
    .bind(tenant.as_str())
    .bind(start.at)
    .bind(start.client_address.as_deref())
    .bind(start.protocol.as_deref())
    .bind(start.transport.as_deref())
    .execute(&mut *conn)
    .await
    .map_err(db_error)?;
    if done.rows_affected() > 0 {
        changed(conn, &start.device, webhooks).await?;
    }
    Ok(())
}

/// One end of `sessions_ended`, in its transaction: whether it recorded it.
async fn end_one(conn: &mut sqlx::AnyConnection, end: &SessionEnd, webhooks: Audience) -> Result<bool> {
    let done = sqlx::query(
        "UPDATE device_connections SET connected = 0, disconnected_time = $1, \
         last_seen_time = CASE WHEN $2 > COALESCE(last_seen_time, 0) THEN $2 ELSE last_seen_time END \
         WHERE device_id = $3 AND connected = 1 AND connected_time <= $4",
    )
    .bind(end.at)
    .bind(end.last_seen.unwrap_or(0))
    .bind(end.device.as_str())
    .bind(end.started_by)
    .execute(&mut *conn)
    .await
    .map_err(db_error)?;
    let ended = done.rows_affected() > 0;
    if ended {
        changed(conn, &end.device, webhooks).await?;
    }
    Ok(ended)
}

/// The device's record as the transaction left it, as a `connection` event for each of
/// `webhooks`, written in the transaction.
async fn changed(conn: &mut sqlx::AnyConnection, device: &DeviceId, webhooks: Audience) -> Result<()> {
    if webhooks.is_empty() {
        return Ok(());
    }
    let row = sqlx::query(&format!(
        "SELECT {COLUMNS} FROM device_connections WHERE device_id = $1"
    ))
    .bind(device.as_str())
    .fetch_one(&mut *conn)
    .await
    .map_err(db_error)?;
    let connection = connection_from_row(&row)?;
    let project: String = sqlx::query_scalar("SELECT project_id FROM devices WHERE id = $1")
        .bind(device.as_str())
        .fetch_one(&mut *conn)
        .await
        .map_err(db_error)?;
    let project = ProjectId::from_string(project);
    let outbox = outbox_events(webhooks, StreamType::Connection, &project, device, &connection)?;
    write_outbox(conn, "webhook_outbox", &outbox, false).await
}
