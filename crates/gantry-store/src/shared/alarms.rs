//! Alarms, their history and the rules' state per device. A state row is written only over the
//! version its step read, and every other writer of an alarm (an operator's change, a rule's
//! clear) moves the version of its state, so that a step computed before is run again. A new
//! alarm enters through the partial unique index `alarms_open`, so that a device never has two
//! open alarms of one rule or attribute. The locked step here holds the state row first, so
//! steps of one device and rule queue on every node; the batched way is `alarm_plans.rs`.
//!
//! Every write of these tables goes through the event-log writer (`begin_log_write`), with its
//! webhook events in the event logs' outbox (`Dialect::log_outbox`): SQLite keeps them in the
//! event-log file (its migration 0005), where an alarm commit on the ingest path never queues
//! behind the mover's transactions on the main file. The statements name the tables plainly:
//! on SQLite the main file has none of that name, so the attached event-log file's are meant.

use std::collections::HashMap;

use async_trait::async_trait;
use gantry_core::alarm::{Alarm, AlarmHistoryEntry, AlarmQuery, AlarmSort, AlarmState, AlarmWrite, Transition};
use gantry_core::alarm_rule::AlarmRule;
use gantry_core::enums::{AlarmStatus, AlarmTransition, Severity, SortOrder};
use gantry_core::ids::{AlarmId, AlarmRuleId, DeviceId, ModelId, ProjectId, TenantId};
use gantry_core::paging::{Page, PageRequest};
use gantry_core::store::{AlarmChange, AlarmPlan, AlarmStep, AlarmStore};
use gantry_core::stream::StreamType;
use gantry_core::webhook::Audience;
use gantry_core::{Error, Result};
use sqlx::AnyConnection;
use sqlx::any::AnyRow;

use crate::SqlStore;
use crate::error::db_error;
use crate::outbox::{outbox_events, write_outbox};
use crate::row::{get, json, spelled, to_json};
use crate::sql::{Sql, fetch_page};

use super::alarm_reads::{COLUMNS, alarm_from_row};
use super::alarm_states::{RESET, hold_state, move_version, put_state, read_state};

/// How often a step runs again over a state another writer changed before it gives up.
const STEP_ATTEMPTS: usize = 16;

const HISTORY_COLUMNS: &str = "id, alarm_id, kind, severity, status, value, actor, time, text";

fn history_from_row(row: &AnyRow) -> Result<AlarmHistoryEntry> {
    Ok(AlarmHistoryEntry {
        id: get(row, "id")?,
        alarm_id: AlarmId::from_string(get::<String>(row, "alarm_id")?),
        kind: spelled(row, "kind", AlarmTransition::parse)?,
        severity: spelled(row, "severity", Severity::parse)?,
        status: spelled(row, "status", AlarmStatus::parse)?,
        value: json(row, "value")?,
        by: get(row, "actor")?,
        time: get(row, "time")?,
        text: get(row, "text")?,
    })
}

async fn open_alarm(conn: &mut AnyConnection, key: &str, device: &DeviceId) -> Result<Option<Alarm>> {
    let row = sqlx::query(&format!(
        "SELECT {COLUMNS} FROM alarms WHERE device_id = $1 AND alarm_key = $2 AND status <> 'CLEARED'"
    ))
    .bind(device.as_str())
    .bind(key)
    .fetch_optional(&mut *conn)
    .await
    .map_err(db_error)?;
    row.as_ref().map(alarm_from_row).transpose()
}

/// Inserts a new alarm through the unique index of open alarms: when one is open already (a
/// writer that did not see it), that one counts the event instead. Returns the alarm as stored
/// and whether it is the new one.
async fn insert_alarm(conn: &mut AnyConnection, a: &Alarm) -> Result<(Alarm, bool)> {
    let row = sqlx::query(&format!(
        "INSERT INTO alarms ({COLUMNS}) \
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, NULL, NULL, NULL, NULL, $17, $18) \
         ON CONFLICT (device_id, alarm_key) WHERE status <> 'CLEARED' DO UPDATE SET \
             count = alarms.count + 1, updated_time = excluded.updated_time, \
             value = CASE WHEN excluded.last_event_time >= alarms.last_event_time THEN excluded.value ELSE alarms.value END, \
             last_event_time = CASE WHEN excluded.last_event_time >= alarms.last_event_time \
                 THEN excluded.last_event_time ELSE alarms.last_event_time END \
         RETURNING {COLUMNS}"
    ))
    .bind(a.id.as_str())
    .bind(a.tenant_id.as_str())
    .bind(a.project_id.as_str())
    .bind(a.device_id.as_str())
    .bind(a.device_name.as_str())
    .bind(a.rule_id.as_ref().map(AlarmRuleId::as_str))
    .bind(a.alarm_key.as_str())
    .bind(a.attribute_code.as_str())
    .bind(a.name.as_str())
    .bind(a.severity.as_str())
    .bind(a.status.as_str())
    .bind(a.source.as_str())
    .bind(a.first_event_time)
    .bind(a.last_event_time)
    .bind(to_json(&a.value)?)
    .bind(a.count)
    .bind(a.created_time)
    .bind(a.updated_time)
    .fetch_one(&mut *conn)
    .await
    .map_err(db_error)?;
    let stored = alarm_from_row(&row)?;
    let new = stored.id == a.id;
    Ok((stored, new))
}

/// Writes what may change of an existing alarm.
async fn update_alarm(conn: &mut AnyConnection, a: &Alarm) -> Result<()> {
    write_alarm(conn, a, "").await.map(|_| ())
}

/// Writes what may change of an alarm; `only` narrows the row further (` AND ...`). Whether the
/// row was written.
async fn write_alarm(conn: &mut AnyConnection, a: &Alarm, only: &str) -> Result<bool> {
    let written = sqlx::query(&format!(
        "UPDATE alarms SET severity = $1, status = $2, last_event_time = $3, value = $4, count = $5, \
             acknowledged_by = $6, acknowledged_time = $7, cleared_by = $8, cleared_time = $9, updated_time = $10 \
         WHERE id = $11{only}"
    ))
    .bind(a.severity.as_str())
    .bind(a.status.as_str())
    .bind(a.last_event_time)
    .bind(to_json(&a.value)?)
    .bind(a.count)
    .bind(a.acknowledged_by.as_deref())
    .bind(a.acknowledged_time)
    .bind(a.cleared_by.as_deref())
    .bind(a.cleared_time)
    .bind(a.updated_time)
    .bind(a.id.as_str())
    .execute(&mut *conn)
    .await
    .map_err(db_error)?;
    Ok(written.rows_affected() == 1)
}

/// Writes a transition of the state of `key` for `device`: the state over the version it was
/// computed from, a new alarm through the unique index of open alarms, a changed one only while
/// it is still open, each with its history and webhook events. None, with part of it written,
/// when the state or the alarm moved since it was read: the caller rolls back.
pub(super) async fn write_transition(
    conn: &mut AnyConnection,
    at: (&TenantId, &DeviceId, &str),
    transition: Transition,
    (webhooks, outbox): (Audience, &str),
) -> Result<Option<Vec<AlarmWrite>>> {
    if !put_state(conn, at, &transition.state).await? {
        return Ok(None);
    }
    let mut written = Vec::with_capacity(transition.writes.len());
    for mut write in transition.writes {
        if write.new {
            let (stored, new) = insert_alarm(conn, &write.alarm).await?;
            if !new {
                write.history.clear();
            }
            write.alarm = stored;
            write.new = new;
        } else if !write_alarm(conn, &write.alarm, " AND status <> 'CLEARED'").await? {
            return Ok(None);
        }
        append_history(conn, &write.history).await?;
        alarm_outbox(conn, outbox, &write.alarm, write.history.len(), webhooks).await?;
        written.push(write);
    }
    Ok(Some(written))
}

/// Appends entries to an alarm's history, after the ones it has (the alarm's row is written
/// first in the transaction, which keeps another writer of its history waiting).
async fn append_history(conn: &mut AnyConnection, entries: &[AlarmHistoryEntry]) -> Result<()> {
    for e in entries {
        sqlx::query(&format!(
            "INSERT INTO alarm_history (seq, {HISTORY_COLUMNS}) \
             SELECT COALESCE(MAX(seq), 0) + 1, $1, $2, $3, $4, $5, $6, $7, $8, $9 FROM alarm_history WHERE alarm_id = $2"
        ))
        .bind(e.id.as_str())
        .bind(e.alarm_id.as_str())
        .bind(e.kind.as_str())
        .bind(e.severity.as_str())
        .bind(e.status.as_str())
        .bind(to_json(&e.value)?)
        .bind(e.by.as_str())
        .bind(e.time)
        .bind(e.text.as_deref())
        .execute(&mut *conn)
        .await
        .map_err(db_error)?;
    }
    Ok(())
}

/// The alarm's webhook events into `outbox` (`Dialect::log_outbox`, beside the alarms): one per
/// history entry, the alarm as it is after them.
async fn alarm_outbox(
    conn: &mut AnyConnection,
    outbox: &str,
    alarm: &Alarm,
    entries: usize,
    webhooks: Audience,
) -> Result<()> {
    let mut events = Vec::new();
    for _ in 0..entries {
        events.extend(outbox_events(
            webhooks,
            StreamType::Alarm,
            &alarm.project_id,
            &alarm.device_id,
            alarm,
        )?);
    }
    write_outbox(conn, outbox, &events, false).await
}

/// Starts the alarm's rule state over (its condition must hold anew), moving its version so that
/// a step computed over the old state is run again.
async fn forget_state(conn: &mut AnyConnection, alarm: &Alarm) -> Result<()> {
    sqlx::query(&format!(
        "UPDATE alarm_states SET {RESET} WHERE alarm_key = $1 AND device_id = $2"
    ))
    .bind(alarm.alarm_key.as_str())
    .bind(alarm.device_id.as_str())
    .execute(&mut *conn)
    .await
    .map_err(db_error)?;
    Ok(())
}

impl SqlStore {
    /// One attempt of `apply_alarm_step`; None when the state changed under it.
    async fn try_step(
        &self,
        (tenant, device, key): (&TenantId, &DeviceId, &str),
        step: &AlarmStep<'_>,
        webhooks: Audience,
    ) -> Result<Option<Vec<AlarmWrite>>> {
        let mut tx = self.begin_alarm_write(Some(&[device])).await?;
        hold_state(&mut tx, tenant, key, device).await?;
        let state = read_state(&mut tx, key, device).await?;
        let open = open_alarm(&mut tx, key, device).await?;
        let Some(transition) = step(&state, open.as_ref()) else {
            return Ok(Some(Vec::new()));
        };
        let outbox = (webhooks, self.dialect.log_outbox);
        let Some(written) = write_transition(&mut tx, (tenant, device, key), transition, outbox).await? else {
            return Ok(None);
        };
        tx.commit().await.map_err(db_error)?;
        Ok(Some(written))
    }
}

#[async_trait]
impl AlarmStore for SqlStore {
    async fn insert_alarm_rule(&self, rule: &AlarmRule) -> Result<()> {
        self.insert_rule(rule).await
    }

    async fn update_alarm_rule(&self, rule: &AlarmRule) -> Result<()> {
        self.update_rule(rule).await
    }

    async fn get_alarm_rule(&self, tenant: &TenantId, id: &AlarmRuleId) -> Result<Option<AlarmRule>> {
        self.get_rule(tenant, id).await
    }

    async fn model_alarm_rules(&self, tenant: &TenantId, model: &ModelId) -> Result<Vec<AlarmRule>> {
        self.model_rules(tenant, model).await
    }

    async fn delete_alarm_rule(&self, tenant: &TenantId, id: &AlarmRuleId, by: &str, at: i64) -> Result<()> {
        self.delete_rule(tenant, id, by, at).await
    }

    async fn no_data_rules(&self) -> Result<Vec<AlarmRule>> {
        self.rules_with_no_data().await
    }

    async fn silent_devices(&self, rule: &AlarmRule, before: i64) -> Result<Vec<DeviceId>> {
        self.devices_silent(rule, before).await
    }

    async fn apply_alarm_step(
        &self,
        tenant: &TenantId,
        device: &DeviceId,
        key: &str,
        step: &AlarmStep<'_>,
        webhooks: Audience,
    ) -> Result<Vec<AlarmWrite>> {
        for _ in 0..STEP_ATTEMPTS {
            if let Some(written) = self.try_step((tenant, device, key), step, webhooks).await? {
                return Ok(written);
            }
        }
        Err(Error::Busy(format!(
            "the alarm state of {key} on device {device} keeps changing"
        )))
    }

    async fn alarm_snapshot(&self, device: &DeviceId, keys: &[String]) -> Result<Vec<(AlarmState, Option<Alarm>)>> {
        self.snapshot(device, keys).await
    }

    async fn commit_alarm_plans(&self, plans: Vec<AlarmPlan>) -> Result<Vec<Option<Vec<AlarmWrite>>>> {
        self.commit_plans(plans).await
    }

    async fn change_alarm(
        &self,
        tenant: &TenantId,
        id: &AlarmId,
        change: &AlarmChange<'_>,
        webhooks: &HashMap<ProjectId, Audience>,
    ) -> Result<(Alarm, AlarmHistoryEntry)> {
        let mut tx = self.begin_log_write().await?;
        let key: Option<(String, String)> =
            sqlx::query_as("SELECT alarm_key, device_id FROM alarms WHERE id = $1 AND tenant_id = $2")
                .bind(id.as_str())
                .bind(tenant.as_str())
                .fetch_optional(&mut *tx)
                .await
                .map_err(db_error)?;
        let (key, device) = key.ok_or_else(|| Error::not_found("alarm", id))?;
        // The state row first, as a step takes it, then the alarm's: changes and steps queue.
        let device = DeviceId::from_string(device);
        self.events.fold_alarm_keeps(&mut tx, Some(&[&device])).await?;
        hold_state(&mut tx, tenant, &key, &device).await?;
        move_version(&mut tx, &key, &device).await?;
        let row = sqlx::query(&format!(
            "UPDATE alarms SET updated_time = updated_time WHERE id = $1 AND tenant_id = $2 RETURNING {COLUMNS}"
        ))
        .bind(id.as_str())
        .bind(tenant.as_str())
        .fetch_optional(&mut *tx)
        .await
        .map_err(db_error)?;
        let alarm = row
            .as_ref()
            .map(alarm_from_row)
            .transpose()?
            .ok_or_else(|| Error::not_found("alarm", id))?;
        let (changed, entry) = change(&alarm)?;
        update_alarm(&mut tx, &changed).await?;
        append_history(&mut tx, std::slice::from_ref(&entry)).await?;
        if changed.status == AlarmStatus::Cleared && alarm.status != AlarmStatus::Cleared {
            forget_state(&mut tx, &changed).await?;
        }
        let audience = webhooks.get(&changed.project_id).copied().unwrap_or_default();
        alarm_outbox(&mut tx, self.dialect.log_outbox, &changed, 1, audience).await?;
        tx.commit().await.map_err(db_error)?;
        Ok((changed, entry))
    }

    async fn clear_rule_alarms(
        &self,
        tenant: &TenantId,
        rule: &AlarmRuleId,
        by: &str,
        at: i64,
        webhooks: &HashMap<ProjectId, Audience>,
    ) -> Result<Vec<Alarm>> {
        let mut tx = self.begin_alarm_write(None).await?;
        // The rule's state rows first, as a step takes them, then its alarms; the states start
        // over, their versions moved.
        sqlx::query(&format!("UPDATE alarm_states SET {RESET} WHERE alarm_key = $1"))
            .bind(format!("rule:{rule}"))
            .execute(&mut *tx)
            .await
            .map_err(db_error)?;
        let rows = sqlx::query(&format!(
            "UPDATE alarms SET status = 'CLEARED', cleared_by = $1, cleared_time = $2, updated_time = $2 \
             WHERE rule_id = $3 AND tenant_id = $4 AND status <> 'CLEARED' RETURNING {COLUMNS}"
        ))
        .bind(by)
        .bind(at)
        .bind(rule.as_str())
        .bind(tenant.as_str())
        .fetch_all(&mut *tx)
        .await
        .map_err(db_error)?;
        let cleared = rows.iter().map(alarm_from_row).collect::<Result<Vec<_>>>()?;
        for alarm in &cleared {
            let entry = AlarmHistoryEntry::of(alarm, AlarmTransition::Cleared, by, at, None);
            append_history(&mut tx, &[entry]).await?;
            let audience = webhooks.get(&alarm.project_id).copied().unwrap_or_default();
            alarm_outbox(&mut tx, self.dialect.log_outbox, alarm, 1, audience).await?;
        }
        tx.commit().await.map_err(db_error)?;
        Ok(cleared)
    }

    async fn get_alarm(&self, tenant: &TenantId, id: &AlarmId) -> Result<Option<Alarm>> {
        self.events.fold_before_alarm_read().await?;
        let row = sqlx::query(&format!(
            "SELECT {COLUMNS} FROM alarms WHERE id = $1 AND tenant_id = $2"
        ))
        .bind(id.as_str())
        .bind(tenant.as_str())
        .fetch_optional(&self.pool)
        .await
        .map_err(db_error)?;
        row.as_ref().map(alarm_from_row).transpose()
    }

    async fn list_alarms(&self, tenant: &TenantId, query: &AlarmQuery, page: PageRequest) -> Result<Page<Alarm>> {
        self.events.fold_before_alarm_read().await?;
        let mut sql = Sql::new(" FROM alarms WHERE tenant_id = ");
        sql.bind(tenant.as_str())
            .push(" AND project_id = ")
            .bind(query.project.as_str());
        if let Some(device) = &query.device {
            sql.push(" AND device_id = ").bind(device.as_str());
        }
        one_of(&mut sql, "status", query.statuses.iter().map(|s| s.as_str()));
        one_of(&mut sql, "severity", query.severities.iter().map(|s| s.as_str()));
        if let Some(start) = query.start {
            sql.push(" AND first_event_time >= ").bind(start);
        }
        if let Some(end) = query.end {
            sql.push(" AND first_event_time <= ").bind(end);
        }
        let column = match query.sort_by {
            AlarmSort::UpdatedTime => "updated_time",
            AlarmSort::CreatedTime => "created_time",
            AlarmSort::FirstEventTime => "first_event_time",
            AlarmSort::LastEventTime => "last_event_time",
            AlarmSort::Count => "count",
        };
        let direction = match query.sort_order {
            SortOrder::Asc => "ASC",
            SortOrder::Desc => "DESC",
        };
        let order = format!("{column} {direction}, id {direction}");
        fetch_page(&self.pool, COLUMNS, &sql, &order, page, alarm_from_row).await
    }

    async fn alarm_history(&self, tenant: &TenantId, id: &AlarmId) -> Result<Vec<AlarmHistoryEntry>> {
        let rows = sqlx::query(&format!(
            "SELECT {} FROM alarm_history h JOIN alarms a ON a.id = h.alarm_id \
             WHERE h.alarm_id = $1 AND a.tenant_id = $2 ORDER BY h.seq",
            HISTORY_COLUMNS
                .split(", ")
                .map(|c| format!("h.{c}"))
                .collect::<Vec<_>>()
                .join(", ")
        ))
        .bind(id.as_str())
        .bind(tenant.as_str())
        .fetch_all(&self.pool)
        .await
        .map_err(db_error)?;
        rows.iter().map(history_from_row).collect()
    }

    async fn count_open_device_alarms(
        &self,
        tenant: &TenantId,
        project: &ProjectId,
        devices: &[DeviceId],
    ) -> Result<Vec<(DeviceId, u64)>> {
        super::alarm_reads::count_open_device_alarms(self, tenant, project, devices).await
    }

    async fn device_alarm_periods(
        &self,
        tenant: &TenantId,
        device: &DeviceId,
        attribute: &str,
        window: (i64, i64),
        limit: u32,
    ) -> Result<Vec<Alarm>> {
        super::alarm_reads::device_alarm_periods(self, tenant, device, attribute, window, limit).await
    }

    async fn count_open_alarms(&self, project: Option<(&TenantId, &ProjectId)>) -> Result<Vec<(Severity, u64)>> {
        let mut sql = Sql::new("SELECT severity, COUNT(*) AS open FROM alarms WHERE status <> 'CLEARED'");
        if let Some((tenant, project)) = project {
            sql.push(" AND tenant_id = ").bind(tenant.as_str());
            sql.push(" AND project_id = ").bind(project.as_str());
        }
        let rows = sql
            .push(" GROUP BY severity")
            .query()
            .fetch_all(&self.pool)
            .await
            .map_err(db_error)?;
        rows.iter()
            .map(|row| {
                let open: i64 = get(row, "open")?;
                Ok((spelled(row, "severity", Severity::parse)?, open.max(0) as u64))
            })
            .collect()
    }
}

/// ` AND column IN (...)` when `values` holds any.
fn one_of<'a>(sql: &mut Sql, column: &str, values: impl Iterator<Item = &'a str>) {
    let values: Vec<&str> = values.collect();
    if values.is_empty() {
        return;
    }
    sql.push(&format!(" AND {column} IN ("));
    for (i, value) in values.into_iter().enumerate() {
        if i > 0 {
            sql.push(", ");
        }
        sql.bind(value);
    }
    sql.push(")");
}
