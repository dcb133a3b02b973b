//! Alarm evaluation's quick way: the states and open alarms of a device's keys read in one
//! snapshot, and many devices' plans written in one transaction, each plan only over what its
//! snapshot read. A plan that is out of date is rolled back to its savepoint and answered None;
//! its caller runs it through the locked step (`apply_alarm_step`) instead.

use gantry_core::Result;
use gantry_core::alarm::{Alarm, AlarmState, AlarmWrite, Transition};
use gantry_core::ids::{DeviceId, TenantId};
use gantry_core::store::AlarmPlan;
use sqlx::AnyConnection;

use super::alarms::{COLUMNS, alarm_from_row, alarm_outbox, append_history, insert_alarm, state_from_row, write_alarm};
use crate::SqlStore;
use crate::error::db_error;
use crate::row::{get, to_json};

/// A plan that cannot be written over its snapshot.
struct OutOfDate;

impl SqlStore {
    pub(super) async fn snapshot(
        &self,
        device: &DeviceId,
        keys: &[String],
    ) -> Result<Vec<(AlarmState, Option<Alarm>)>> {
        if keys.is_empty() {
            return Ok(Vec::new());
        }
        let places: Vec<String> = (0..keys.len()).map(|i| format!("${}", i + 2)).collect();
        let alarm_columns: Vec<String> = COLUMNS.split(", ").map(|c| format!("a.{c}")).collect();
        let text = format!(
            "SELECT s.alarm_key AS state_key, s.raise_since, s.clear_since, s.levels, s.last_time, s.last_arrival, \
                 s.recent, s.no_data, s.version, {} \
             FROM alarm_states s LEFT JOIN alarms a \
                 ON a.device_id = s.device_id AND a.alarm_key = s.alarm_key AND a.status <> 'CLEARED' \
             WHERE s.device_id = $1 AND s.alarm_key IN ({})",
            alarm_columns.join(", "),
            places.join(", ")
        );
        let query = keys
            .iter()
            .fold(sqlx::query(&text).bind(device.as_str()), |q, key| q.bind(key.as_str()));
        let rows = query.fetch_all(&self.pool).await.map_err(db_error)?;
        let mut found = std::collections::HashMap::with_capacity(rows.len());
        for row in &rows {
            let open = match get::<Option<String>>(row, "id")? {
                Some(_) => Some(alarm_from_row(row)?),
                None => None,
            };
            found.insert(get::<String>(row, "state_key")?, (state_from_row(row)?, open));
        }
        Ok(keys.iter().map(|key| found.remove(key).unwrap_or_default()).collect())
    }

    pub(super) async fn commit_plans(&self, plans: Vec<AlarmPlan>) -> Result<Vec<Option<Vec<AlarmWrite>>>> {
        let mut tx = self.begin_write().await?;
        let mut answers = Vec::with_capacity(plans.len());
        for plan in plans {
            sqlx::query("SAVEPOINT alarm_plan")
                .execute(&mut *tx)
                .await
                .map_err(db_error)?;
            match write_plan(&mut tx, plan).await? {
                Ok(written) => answers.push(Some(written)),
                Err(OutOfDate) => {
                    sqlx::query("ROLLBACK TO SAVEPOINT alarm_plan")
                        .execute(&mut *tx)
                        .await
                        .map_err(db_error)?;
                    answers.push(None);
                }
            }
            sqlx::query("RELEASE SAVEPOINT alarm_plan")
                .execute(&mut *tx)
                .await
                .map_err(db_error)?;
        }
        tx.commit().await.map_err(db_error)?;
        Ok(answers)
    }
}

/// One plan's writes; `OutOfDate` when its snapshot is (what it wrote is then rolled back).
async fn write_plan(conn: &mut AnyConnection, plan: AlarmPlan) -> Result<Result<Vec<AlarmWrite>, OutOfDate>> {
    let mut written = Vec::new();
    for (key, transition) in plan.steps {
        let Transition { state, writes } = transition;
        if !put_state(conn, (&plan.tenant, &plan.device, &key), &state).await? {
            return Ok(Err(OutOfDate));
        }
        for mut write in writes {
            if write.new {
                let (stored, new) = insert_alarm(conn, &write.alarm).await?;
                if !new {
                    write.history.clear();
                }
                write.alarm = stored;
                write.new = new;
            } else if !update_open_alarm(conn, &write.alarm).await? {
                return Ok(Err(OutOfDate));
            }
            append_history(conn, &write.history).await?;
            alarm_outbox(conn, &write.alarm, write.history.len(), plan.webhooks).await?;
            written.push(write);
        }
    }
    Ok(Ok(written))
}

/// Writes `state` over the version it was computed from (`state.version`; 0 when there was no
/// row, or a row of version 0); false when the stored row is of another version.
async fn put_state(
    conn: &mut AnyConnection,
    (tenant, device, key): (&TenantId, &DeviceId, &str),
    state: &AlarmState,
) -> Result<bool> {
    let written = sqlx::query(
        "INSERT INTO alarm_states \
             (alarm_key, device_id, tenant_id, raise_since, clear_since, levels, last_time, last_arrival, recent, no_data, version) \
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11 + 1) \
         ON CONFLICT (alarm_key, device_id) DO UPDATE SET \
             raise_since = excluded.raise_since, clear_since = excluded.clear_since, levels = excluded.levels, \
             last_time = excluded.last_time, last_arrival = excluded.last_arrival, recent = excluded.recent, \
             no_data = excluded.no_data, version = excluded.version \
         WHERE alarm_states.version = $11",
    )
    .bind(key)
    .bind(device.as_str())
    .bind(tenant.as_str())
    .bind(state.raise_since)
    .bind(state.clear_since)
    .bind(to_json(&state.levels)?)
    .bind(state.last_time)
    .bind(state.last_arrival)
    .bind(to_json(&state.recent)?)
    .bind(i64::from(state.no_data))
    .bind(state.version)
    .execute(&mut *conn)
    .await
    .map_err(db_error)?;
    Ok(written.rows_affected() == 1)
}

/// Writes what may change of an alarm the snapshot saw open; false when it is cleared by now.
async fn update_open_alarm(conn: &mut AnyConnection, a: &Alarm) -> Result<bool> {
    write_alarm(conn, a, " AND status <> 'CLEARED'").await
}
