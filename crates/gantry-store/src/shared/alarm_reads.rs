//! Alarms as rows (their columns, an alarm from its row), and the alarm reads of the console's
//! pages: open alarms per device of a listing, and a device's alarm periods under its chart.

use gantry_core::Result;
use gantry_core::alarm::Alarm;
use gantry_core::enums::{AlarmSource, AlarmStatus, Severity};
use gantry_core::ids::{AlarmId, AlarmRuleId, DeviceId, ProjectId, TenantId};
use sqlx::any::AnyRow;

use crate::SqlStore;
use crate::error::db_error;
use crate::row::{get, json, spelled};
use crate::sql::Sql;

/// The columns of an alarm's row, in `alarm_from_row`'s order.
pub(super) const COLUMNS: &str = "id, tenant_id, project_id, device_id, device_name, rule_id, alarm_key, attribute_code, name, \
                       severity, status, source, first_event_time, last_event_time, value, count, acknowledged_by, \
                       acknowledged_time, cleared_by, cleared_time, created_time, updated_time";

/// The alarm a row of `COLUMNS` holds.
pub(super) fn alarm_from_row(row: &AnyRow) -> Result<Alarm> {
    Ok(Alarm {
        id: AlarmId::from_string(get::<String>(row, "id")?),
        tenant_id: TenantId::from_string(get::<String>(row, "tenant_id")?),
        project_id: ProjectId::from_string(get::<String>(row, "project_id")?),
        device_id: DeviceId::from_string(get::<String>(row, "device_id")?),
        device_name: get(row, "device_name")?,
        rule_id: get::<Option<String>>(row, "rule_id")?.map(AlarmRuleId::from_string),
        alarm_key: get(row, "alarm_key")?,
        attribute_code: get(row, "attribute_code")?,
        name: get(row, "name")?,
        severity: spelled(row, "severity", Severity::parse)?,
        status: spelled(row, "status", AlarmStatus::parse)?,
        source: spelled(row, "source", AlarmSource::parse)?,
        first_event_time: get(row, "first_event_time")?,
        last_event_time: get(row, "last_event_time")?,
        value: json(row, "value")?,
        count: get(row, "count")?,
        acknowledged_by: get(row, "acknowledged_by")?,
        acknowledged_time: get(row, "acknowledged_time")?,
        cleared_by: get(row, "cleared_by")?,
        cleared_time: get(row, "cleared_time")?,
        created_time: get(row, "created_time")?,
        updated_time: get(row, "updated_time")?,
    })
}

/// The part of `AlarmStore` the console's pages read: open alarms per device of a listing, and a
/// device's alarm periods under its chart.
pub(super) async fn count_open_device_alarms(
    store: &SqlStore,
    tenant: &TenantId,
    project: &ProjectId,
    devices: &[DeviceId],
) -> Result<Vec<(DeviceId, u64)>> {
    if devices.is_empty() {
        return Ok(Vec::new());
    }
    // `status <> 'CLEARED'` is the predicate of the partial index `alarms_open`, whose first
    // column is the device: the count reads that index for the listed devices alone.
    let mut sql = Sql::new("SELECT device_id, COUNT(*) AS open FROM alarms WHERE tenant_id = ");
    sql.bind(tenant.as_str())
        .push(" AND project_id = ")
        .bind(project.as_str())
        .push(" AND status <> 'CLEARED'");
    crate::sql::push_in(&mut sql, " AND device_id IN (", devices.iter().map(|d| d.as_str()));
    sql.push(" GROUP BY device_id");
    let rows = sql.query().fetch_all(&store.pool).await.map_err(db_error)?;
    rows.iter()
        .map(|row| {
            let open: i64 = get(row, "open")?;
            Ok((
                DeviceId::from_string(get::<String>(row, "device_id")?),
                open.max(0) as u64,
            ))
        })
        .collect()
}

pub(super) async fn device_alarm_periods(
    store: &SqlStore,
    tenant: &TenantId,
    device: &DeviceId,
    attribute: &str,
    (start, end): (i64, i64),
    limit: u32,
) -> Result<Vec<Alarm>> {
    store.events.fold_before_alarm_read().await?;
    let rows = sqlx::query(&format!(
        "SELECT {COLUMNS} FROM alarms WHERE device_id = $1 AND attribute_code = $2 AND tenant_id = $3 \
         AND first_event_time <= $4 AND (cleared_time IS NULL OR cleared_time >= $5) \
         ORDER BY first_event_time, id LIMIT $6"
    ))
    .bind(device.as_str())
    .bind(attribute)
    .bind(tenant.as_str())
    .bind(end)
    .bind(start)
    .bind(i64::from(limit))
    .fetch_all(&store.pool)
    .await
    .map_err(db_error)?;
    rows.iter().map(alarm_from_row).collect()
}
