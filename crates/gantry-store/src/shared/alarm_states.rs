//! The rules' state per device and rule (`alarm_states`): read, held and written over the version
//! a step computed from (see `alarms.rs`), for the locked step there and the batched plans
//! (`alarm_plans.rs`).

use gantry_core::Result;
use gantry_core::alarm::AlarmState;
use gantry_core::ids::{DeviceId, TenantId};
use sqlx::AnyConnection;
use sqlx::any::AnyRow;

use crate::error::db_error;
use crate::row::{get, json, to_json};

pub(super) fn state_from_row(row: &AnyRow) -> Result<AlarmState> {
    Ok(AlarmState {
        raise_since: get(row, "raise_since")?,
        clear_since: get(row, "clear_since")?,
        levels: json(row, "levels")?,
        last_time: get(row, "last_time")?,
        last_arrival: get(row, "last_arrival")?,
        recent: json(row, "recent")?,
        no_data: get::<i64>(row, "no_data")? != 0,
        version: get(row, "version")?,
    })
}

/// Holds the state row of `key` for `device` until the transaction ends, creating it (version 0)
/// when missing: steps of one device and rule queue here, on every node, rather than compute
/// over a state another writer is changing. Every writer takes this row before the alarm's.
pub(super) async fn hold_state(
    conn: &mut AnyConnection,
    tenant: &TenantId,
    key: &str,
    device: &DeviceId,
) -> Result<()> {
    sqlx::query(
        "INSERT INTO alarm_states (alarm_key, device_id, tenant_id, levels, recent, no_data, version) \
         VALUES ($1, $2, $3, '[]', '[]', 0, 0) \
         ON CONFLICT (alarm_key, device_id) DO UPDATE SET version = alarm_states.version",
    )
    .bind(key)
    .bind(device.as_str())
    .bind(tenant.as_str())
    .execute(&mut *conn)
    .await
    .map_err(db_error)?;
    Ok(())
}

/// The stored state of `key` for `device` (held: `hold_state`).
pub(super) async fn read_state(conn: &mut AnyConnection, key: &str, device: &DeviceId) -> Result<AlarmState> {
    let row = sqlx::query(
        "SELECT raise_since, clear_since, levels, last_time, last_arrival, recent, no_data, version \
         FROM alarm_states WHERE alarm_key = $1 AND device_id = $2",
    )
    .bind(key)
    .bind(device.as_str())
    .fetch_optional(&mut *conn)
    .await
    .map_err(db_error)?;
    row.as_ref()
        .map(state_from_row)
        .transpose()
        .map(Option::unwrap_or_default)
}

/// Writes `state` over the version it was computed from (`state.version`; 0 when there was no
/// row, or a row of version 0); false when the stored row is of another version.
pub(super) async fn put_state(
    conn: &mut AnyConnection,
    (tenant, device, key): (&TenantId, &DeviceId, &str),
    state: &AlarmState,
) -> Result<bool> {
    let query = sqlx::query(
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
    .bind(tenant.as_str());
    let written = bind_state(query, state)?
        .bind(state.version)
        .execute(&mut *conn)
        .await
        .map_err(db_error)?;
    Ok(written.rows_affected() == 1)
}

/// Binds what a state holds, in the order of the columns from `raise_since` to `no_data`, as
/// they are stored.
pub(super) fn bind_state<'q>(query: AnyQuery<'q>, state: &AlarmState) -> Result<AnyQuery<'q>> {
    Ok(query
        .bind(state.raise_since)
        .bind(state.clear_since)
        .bind(to_json(&state.levels)?)
        .bind(state.last_time)
        .bind(state.last_arrival)
        .bind(to_json(&state.recent)?)
        .bind(i64::from(state.no_data)))
}

/// A query of the Any driver, its parameters partly bound.
pub type AnyQuery<'q> = sqlx::query::Query<'q, sqlx::Any, sqlx::any::AnyArguments<'q>>;

/// A state as if new, its version moved.
pub(super) const RESET: &str = "raise_since = NULL, clear_since = NULL, levels = '[]', last_time = NULL, last_arrival = NULL, \
                     recent = '[]', no_data = 0, version = version + 1";

/// Moves the version of the state of `key` for `device` (held already), so that a step
/// computed over it is run again.
pub(super) async fn move_version(conn: &mut AnyConnection, key: &str, device: &DeviceId) -> Result<()> {
    sqlx::query("UPDATE alarm_states SET version = version + 1 WHERE alarm_key = $1 AND device_id = $2")
        .bind(key)
        .bind(device.as_str())
        .execute(&mut *conn)
        .await
        .map_err(db_error)?;
    Ok(())
}
