//! Event logs: controls, their acks and the deadline sweep.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use gantry_core::Result;
use gantry_core::enums::{Classification, EventLogStatus, SortOrder};
use gantry_core::event_log::EventLog;
use gantry_core::ids::{DeviceId, ProjectId, TenantId};
use gantry_core::paging::{Page, PageRequest};
use gantry_core::query::{EventLogQuery, EventLogSort};
use gantry_core::store::{AckOutcome, AckRecord, EventLogStore, NewEventLog};
use gantry_core::stream::StreamType;
use gantry_core::webhook::Audience;
use sqlx::any::AnyRow;

use crate::SqlStore;
use crate::outbox::{outbox_events, write_outbox};
use crate::row::{flag, get, json, spelled, to_json};
use crate::sql::{Sql, fetch_page, values_clause};

const COLUMNS: &str = "id, tenant_id, project_id, status, classification, device_id, device_name, event_data, \
                       context_id, responses, event_id, created_by, created_time, updated_by, updated_time, deleted, \
                       reply_to, expires_time, delivered_time, reason";

/// A control's event-log write, for following a slow control (debug level): its time in all
/// and the part it waited for the event logs' writer; the rest is its statements and its synced
/// commit.
fn written(log: &EventLog, what: &str, started: Instant, waited: Duration) {
    tracing::debug!(
        event_log = %log.id,
        device = %log.device_id,
        took_ms = started.elapsed().as_secs_f64() * 1e3,
        waited_ms = waited.as_secs_f64() * 1e3,
        "event log {what}"
    );
}

/// Event logs one INSERT carries at most: SQLite looks each numbered placeholder up in a list
/// of all of them, so a statement stays a few hundred values wide.
const LOGS_PER_STATEMENT: usize = 32;

/// The values an inserted event log binds (`bind_new_log`).
const INSERTED_COLUMNS: usize = 21;

/// `query` with the values of `new`'s row, in the INSERT's order of columns.
fn bind_new_log<'q>(
    query: sqlx::query::Query<'q, sqlx::Any, sqlx::any::AnyArguments<'q>>,
    new: &'q NewEventLog,
) -> Result<sqlx::query::Query<'q, sqlx::Any, sqlx::any::AnyArguments<'q>>> {
    let log = &new.log;
    Ok(query
        .bind(log.id.as_str())
        .bind(log.tenant_id.as_str())
        .bind(log.project_id.as_str())
        .bind(log.status.as_str())
        .bind(log.classification.as_str())
        .bind(log.device_id.as_str())
        .bind(log.device_name.as_str())
        .bind(to_json(&log.event_data)?)
        .bind(log.context_id.as_deref())
        .bind(to_json(&log.responses)?)
        .bind(log.event_id.as_str())
        .bind(new.ack_deadline)
        .bind(log.created_by.as_str())
        .bind(log.created_time)
        .bind(log.updated_by.as_deref())
        .bind(log.updated_time)
        .bind(0_i64)
        .bind(log.reply_to.as_deref())
        .bind(log.expires_time)
        .bind(log.delivered_time)
        .bind(log.reason.as_deref()))
}

fn log_from_row(row: &AnyRow) -> Result<EventLog> {
    Ok(EventLog {
        id: get(row, "id")?,
        tenant_id: TenantId::from_string(get::<String>(row, "tenant_id")?),
        project_id: ProjectId::from_string(get::<String>(row, "project_id")?),
        status: spelled(row, "status", EventLogStatus::parse)?,
        classification: spelled(row, "classification", Classification::parse)?,
        device_id: DeviceId::from_string(get::<String>(row, "device_id")?),
        device_name: get(row, "device_name")?,
        event_data: json(row, "event_data")?,
        context_id: get(row, "context_id")?,
        responses: json(row, "responses")?,
        event_id: get(row, "event_id")?,
        created_by: get(row, "created_by")?,
        created_time: get(row, "created_time")?,
        updated_by: get(row, "updated_by")?,
        updated_time: get(row, "updated_time")?,
        deleted: flag(row, "deleted")?,
        reply_to: get(row, "reply_to")?,
        expires_time: get(row, "expires_time")?,
        delivered_time: get(row, "delivered_time")?,
        reason: get(row, "reason")?,
    })
}

impl SqlStore {
    /// One ack of `record_acks`, in its transaction.
    async fn record_one_ack(&self, tx: &mut sqlx::AnyConnection, ack: &AckRecord) -> Result<Option<EventLog>> {
        let table = self.dialect.event_logs;
        let row = sqlx::query(&format!(
            "SELECT {COLUMNS} FROM {table} \
             WHERE device_id = $1 AND event_id = $2 AND tenant_id = $3 AND classification = $4"
        ))
        .bind(ack.device.as_str())
        .bind(ack.correlation_id.as_str())
        .bind(ack.tenant.as_str())
        .bind(Classification::DeviceControll.as_str())
        .fetch_optional(&mut *tx)
        .await
        .map_err(crate::error::db_error)?;
        let Some(row) = row else { return Ok(None) };
        let mut log = log_from_row(&row)?;
        log.responses.push(ack.response.clone());
        // A late ack is kept as a response, but does not undo the `exception` of its control.
        if log.status == EventLogStatus::Processing {
            log.status = EventLogStatus::Completed;
        }
        log.updated_by = Some("DEVICE".to_owned());
        log.updated_time = Some(ack.at);
        sqlx::query(&format!(
            "UPDATE {table} SET responses = $1, status = $2, updated_by = $3, updated_time = $4 WHERE id = $5"
        ))
        .bind(to_json(&log.responses)?)
        .bind(log.status.as_str())
        .bind("DEVICE")
        .bind(ack.at)
        .bind(log.id.as_str())
        .execute(&mut *tx)
        .await
        .map_err(crate::error::db_error)?;
        let outbox = outbox_events(
            ack.webhooks,
            StreamType::EventLog,
            &log.project_id,
            &log.device_id,
            &log,
        )?;
        write_outbox(tx, self.dialect.log_outbox, &outbox, false).await?;
        Ok(Some(log))
    }

    /// Inserts `logs` in `tx`, each with its webhook events and audit record.
    async fn insert_logs_in(&self, tx: &mut sqlx::AnyConnection, logs: &[NewEventLog]) -> Result<()> {
        let mut outbox = Vec::new();
        for new in logs {
            let log = &new.log;
            outbox.extend(outbox_events(
                new.webhooks,
                StreamType::EventLog,
                &log.project_id,
                &log.device_id,
                log,
            )?);
        }
        for chunk in logs.chunks(LOGS_PER_STATEMENT) {
            let text = format!(
                "INSERT INTO {} (id, tenant_id, project_id, status, classification, device_id, device_name, \
                     event_data, context_id, responses, event_id, ack_deadline, created_by, created_time, updated_by, \
                     updated_time, deleted, reply_to, expires_time, delivered_time, reason) VALUES {}",
                self.dialect.event_logs,
                values_clause(chunk.len(), INSERTED_COLUMNS, false)
            );
            let query = chunk.iter().try_fold(sqlx::query(&text), bind_new_log)?;
            query.execute(&mut *tx).await.map_err(crate::error::db_error)?;
        }
        // The outbox rows and the audit records commit with the logs.
        write_outbox(tx, self.dialect.log_outbox, &outbox, false).await?;
        let audit: Vec<_> = logs.iter().filter_map(|new| new.audit.as_ref()).collect();
        super::audit::insert_audit_rows(tx, self.dialect.audit_logs, &audit).await
    }
}

#[async_trait]
impl EventLogStore for SqlStore {
    async fn insert_event_logs(&self, logs: &[NewEventLog]) -> Result<()> {
        if logs.is_empty() {
            return Ok(());
        }
        let started = Instant::now();
        let mut tx = self.begin_log_write().await?;
        let waited = started.elapsed();
        self.insert_logs_in(&mut tx, logs).await?;
        tx.commit().await.map_err(crate::error::db_error)?;
        for new in logs {
            written(&new.log, "inserted", started, waited);
        }
        Ok(())
    }

    async fn record_acks(&self, acks: &[AckRecord]) -> Result<Vec<AckOutcome>> {
        if acks.is_empty() {
            return Ok(Vec::new());
        }
        let started = Instant::now();
        let mut tx = self.begin_log_write().await?;
        let waited = started.elapsed();
        let mut outcomes = Vec::with_capacity(acks.len());
        let mut replies = Vec::new();
        for ack in acks {
            let answered = self.record_one_ack(&mut tx, ack).await?;
            let reply = ack.reply.clone().map(|mut reply| {
                reply.context_id = answered.as_ref().and_then(|log| log.context_id.clone());
                reply
            });
            if let Some(reply) = &reply {
                replies.push(NewEventLog {
                    log: reply.clone(),
                    ack_deadline: None,
                    webhooks: ack.webhooks,
                    audit: None,
                });
            }
            outcomes.push(AckOutcome { answered, reply });
        }
        self.insert_logs_in(&mut tx, &replies).await?;
        tx.commit().await.map_err(crate::error::db_error)?;
        for outcome in &outcomes {
            if let Some(log) = &outcome.answered {
                written(log, "completed", started, waited);
            }
            if let Some(reply) = &outcome.reply {
                written(reply, "inserted", started, waited);
            }
        }
        Ok(outcomes)
    }

    async fn expire_event_logs(&self, now: i64, webhooks: &HashMap<ProjectId, Audience>) -> Result<Vec<EventLog>> {
        // Most sweeps find nothing: they look on a reader first, so that they do not take the
        // writer from a control.
        let table = self.dialect.event_logs;
        let overdue: Option<i64> = sqlx::query_scalar(&format!(
            "SELECT 1 FROM {table} WHERE status = $1 AND ack_deadline <= $2 \
             UNION ALL SELECT 1 FROM {table} WHERE status = $1 AND delivered_time IS NULL \
                 AND expires_time IS NOT NULL AND expires_time <= $2 LIMIT 1"
        ))
        .bind(EventLogStatus::Processing.as_str())
        .bind(now)
        .fetch_optional(&self.pool)
        .await
        .map_err(crate::error::db_error)?;
        if overdue.is_none() {
            return Ok(Vec::new());
        }
        let mut tx = self.begin_log_write().await?;
        let rows = sqlx::query(&format!(
            "UPDATE {table} SET status = $1, updated_by = 'system', updated_time = $2, \
                 reason = CASE WHEN ack_deadline IS NULL THEN 'expired' ELSE reason END \
             WHERE status = $3 AND (ack_deadline <= $2 \
                 OR (delivered_time IS NULL AND expires_time IS NOT NULL AND expires_time <= $2)) \
             RETURNING {COLUMNS}"
        ))
        .bind(EventLogStatus::Exception.as_str())
        .bind(now)
        .bind(EventLogStatus::Processing.as_str())
        .fetch_all(&mut *tx)
        .await
        .map_err(crate::error::db_error)?;
        let expired = rows.iter().map(log_from_row).collect::<Result<Vec<_>>>()?;
        let mut outbox = Vec::new();
        for log in &expired {
            if let Some(hooks) = webhooks.get(&log.project_id) {
                outbox.extend(outbox_events(
                    *hooks,
                    StreamType::EventLog,
                    &log.project_id,
                    &log.device_id,
                    log,
                )?);
            }
        }
        write_outbox(&mut tx, self.dialect.log_outbox, &outbox, false).await?;
        tx.commit().await.map_err(crate::error::db_error)?;
        Ok(expired)
    }

    async fn list_event_logs(
        &self,
        tenant: &TenantId,
        query: &EventLogQuery,
        page: PageRequest,
    ) -> Result<Page<EventLog>> {
        let mut sql = Sql::new(&format!(
            " FROM {} WHERE deleted = 0 AND tenant_id = ",
            self.dialect.event_logs
        ));
        sql.bind(tenant.as_str())
            .push(" AND project_id = ")
            .bind(query.project.as_str());
        if let Some(device) = &query.device {
            sql.push(" AND device_id = ").bind(device.as_str());
        }
        if let Some(event_id) = &query.event_id {
            sql.push(" AND event_id = ").bind(event_id.as_str());
        }
        if let Some(context_id) = &query.context_id {
            sql.push(" AND context_id = ").bind(context_id.as_str());
        }
        let time = match query.sort_by {
            EventLogSort::UpdatedTime => "COALESCE(updated_time, created_time)",
            EventLogSort::CreatedTime => "created_time",
        };
        let direction = match query.sort_order {
            SortOrder::Asc => "ASC",
            SortOrder::Desc => "DESC",
        };
        fetch_page(
            &self.pool,
            COLUMNS,
            &sql,
            &format!("{time} {direction}, id {direction}"),
            page,
            log_from_row,
        )
        .await
    }

    async fn get_event_log(&self, tenant: &TenantId, id: &str) -> Result<Option<EventLog>> {
        let row = sqlx::query(&format!(
            "SELECT {COLUMNS} FROM {} WHERE id = $1 AND tenant_id = $2 AND deleted = 0",
            self.dialect.event_logs
        ))
        .bind(id)
        .bind(tenant.as_str())
        .fetch_optional(&self.pool)
        .await
        .map_err(crate::error::db_error)?;
        row.as_ref().map(log_from_row).transpose()
    }

    async fn claim_waiting_controls(&self, device: &DeviceId, now: i64, ack_deadline: i64) -> Result<Vec<EventLog>> {
        // Most connects find nothing waiting: look on a reader first.
        let table = self.dialect.event_logs;
        let waiting = format!(
            "FROM {table} WHERE device_id = $1 AND status = $2 AND delivered_time IS NULL \
             AND expires_time IS NOT NULL AND expires_time > $3"
        );
        let any: Option<i64> = sqlx::query_scalar(&format!("SELECT 1 {waiting} LIMIT 1"))
            .bind(device.as_str())
            .bind(EventLogStatus::Processing.as_str())
            .bind(now)
            .fetch_optional(&self.pool)
            .await
            .map_err(crate::error::db_error)?;
        if any.is_none() {
            return Ok(Vec::new());
        }
        // The condition on `delivered_time` is checked again by the update itself: of two nodes
        // claiming at once, each row goes to one.
        let mut tx = self.begin_log_write().await?;
        let rows = sqlx::query(&format!(
            "UPDATE {table} SET delivered_time = $4, ack_deadline = $5, updated_by = 'system', updated_time = $4 \
             WHERE id IN (SELECT id {waiting}) AND delivered_time IS NULL RETURNING {COLUMNS}"
        ))
        .bind(device.as_str())
        .bind(EventLogStatus::Processing.as_str())
        .bind(now)
        .bind(now)
        .bind(ack_deadline)
        .fetch_all(&mut *tx)
        .await
        .map_err(crate::error::db_error)?;
        tx.commit().await.map_err(crate::error::db_error)?;
        let mut claimed = rows.iter().map(log_from_row).collect::<Result<Vec<_>>>()?;
        claimed.sort_by(|a, b| (a.created_time, &a.id).cmp(&(b.created_time, &b.id)));
        Ok(claimed)
    }

    async fn finish_waiting_control(
        &self,
        tenant: &TenantId,
        id: &str,
        (status, reason): (EventLogStatus, Option<&str>),
        at: i64,
        webhooks: Audience,
    ) -> Result<Option<EventLog>> {
        // Completed is the end of a delivered control that asked no ack; the other ends are of
        // one still waiting.
        let delivered = if status == EventLogStatus::Completed {
            "IS NOT NULL"
        } else {
            "IS NULL"
        };
        let mut tx = self.begin_log_write().await?;
        let row = sqlx::query(&format!(
            "UPDATE {} SET status = $1, reason = $2, updated_by = 'system', updated_time = $3 \
             WHERE id = $4 AND tenant_id = $5 AND status = $6 AND expires_time IS NOT NULL \
             AND delivered_time {delivered} RETURNING {COLUMNS}",
            self.dialect.event_logs
        ))
        .bind(status.as_str())
        .bind(reason)
        .bind(at)
        .bind(id)
        .bind(tenant.as_str())
        .bind(EventLogStatus::Processing.as_str())
        .fetch_optional(&mut *tx)
        .await
        .map_err(crate::error::db_error)?;
        let Some(row) = row else { return Ok(None) };
        let log = log_from_row(&row)?;
        let outbox = outbox_events(webhooks, StreamType::EventLog, &log.project_id, &log.device_id, &log)?;
        write_outbox(&mut tx, self.dialect.log_outbox, &outbox, false).await?;
        tx.commit().await.map_err(crate::error::db_error)?;
        Ok(Some(log))
    }

    async fn list_waiting_controls(
        &self,
        tenant: &TenantId,
        device: &DeviceId,
        page: PageRequest,
    ) -> Result<Page<EventLog>> {
        let mut sql = Sql::new(&format!(
            " FROM {} WHERE deleted = 0 AND delivered_time IS NULL AND expires_time IS NOT NULL AND tenant_id = ",
            self.dialect.event_logs
        ));
        sql.bind(tenant.as_str())
            .push(" AND device_id = ")
            .bind(device.as_str())
            .push(" AND status = ")
            .bind(EventLogStatus::Processing.as_str());
        fetch_page(
            &self.pool,
            COLUMNS,
            &sql,
            "created_time ASC, id ASC",
            page,
            log_from_row,
        )
        .await
    }
}
