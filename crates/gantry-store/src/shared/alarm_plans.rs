//! Alarm evaluation's quick way: the states and open alarms of a device's keys read in one
//! snapshot, and many devices' plans written in one transaction, each plan only over what its
//! snapshot read. A plan that is out of date is rolled back to its savepoint and answered None;
//! its caller runs it through the locked step (`apply_alarm_step`) instead.

use gantry_core::Result;
use gantry_core::alarm::{Alarm, AlarmState, AlarmWrite};
use gantry_core::ids::DeviceId;
use gantry_core::store::AlarmPlan;
use sqlx::AnyConnection;

use super::alarms::{COLUMNS, alarm_from_row, state_from_row, write_transition};
use crate::SqlStore;
use crate::error::db_error;
use crate::row::get;

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
        let at = (&plan.tenant, &plan.device, key.as_str());
        match write_transition(conn, at, transition, plan.webhooks).await? {
            Some(writes) => written.extend(writes),
            None => return Ok(Err(OutOfDate)),
        }
    }
    Ok(Ok(written))
}
