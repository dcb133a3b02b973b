//! Alarm evaluation's quick way: the states and open alarms of a device's keys read in one
//! snapshot, and many devices' plans written in one transaction, each plan only over what its
//! snapshot read. A plan that is out of date is rolled back to its savepoint and answered None;
//! its caller runs it through the locked step (`apply_alarm_step`) instead.
//!
//! Most plans only count events into open alarms (a count, a value, a time, the message ids a
//! state remembers). Those are written together, a few statements for the whole batch instead of
//! a few per plan: every state over the version it was read at, then every alarm. When any of
//! them is out of date, that part is rolled back and each of its plans goes the one-by-one way.

use gantry_core::Result;
use gantry_core::alarm::{Alarm, AlarmState, AlarmWrite};
use gantry_core::ids::DeviceId;
use gantry_core::store::AlarmPlan;
use sqlx::AnyConnection;

use super::alarm_reads::{COLUMNS, alarm_from_row};
use super::alarm_states::{bind_state, state_from_row};
use super::alarms::write_transition;
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
        let mut read = Vec::with_capacity(rows.len());
        for row in &rows {
            let open = match get::<Option<String>>(row, "id")? {
                Some(_) => Some(alarm_from_row(row)?),
                None => None,
            };
            read.push((get::<String>(row, "state_key")?, state_from_row(row)?, open));
        }
        self.events.lay_alarm_keeps(device, &mut read);
        let mut found: std::collections::HashMap<String, (AlarmState, Option<Alarm>)> = read
            .into_iter()
            .map(|(key, state, open)| (key, (state, open)))
            .collect();
        Ok(keys.iter().map(|key| found.remove(key).unwrap_or_default()).collect())
    }

    pub(super) async fn commit_plans(&self, plans: Vec<AlarmPlan>) -> Result<Vec<Option<Vec<AlarmWrite>>>> {
        let devices: Vec<&DeviceId> = plans.iter().map(|p| &p.device).collect();
        let mut tx = self.begin_alarm_write(Some(&devices)).await?;
        drop(devices);
        let mut answers: Vec<Option<Vec<AlarmWrite>>> = vec![None; plans.len()];
        let (counts, others) = counting_apart(plans);
        let others = match write_counts(&mut tx, &counts).await? {
            true => {
                for (at, plan) in counts {
                    answers[at] = Some(plan.steps.into_iter().flat_map(|(_, t)| t.writes).collect());
                }
                others
            }
            false => {
                let mut all: Vec<_> = counts.into_iter().chain(others).collect();
                all.sort_by_key(|(at, _)| *at);
                all
            }
        };
        for (at, plan) in others {
            sqlx::query("SAVEPOINT alarm_plan")
                .execute(&mut *tx)
                .await
                .map_err(db_error)?;
            match write_plan(&mut tx, plan, self.dialect.log_outbox).await? {
                Ok(written) => answers[at] = Some(written),
                Err(OutOfDate) => {
                    sqlx::query("ROLLBACK TO SAVEPOINT alarm_plan")
                        .execute(&mut *tx)
                        .await
                        .map_err(db_error)?;
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
async fn write_plan(
    conn: &mut AnyConnection,
    plan: AlarmPlan,
    outbox: &str,
) -> Result<Result<Vec<AlarmWrite>, OutOfDate>> {
    let mut written = Vec::new();
    for (key, transition) in plan.steps {
        let at = (&plan.tenant, &plan.device, key.as_str());
        match write_transition(conn, at, transition, (plan.webhooks, outbox)).await? {
            Some(writes) => written.extend(writes),
            None => return Ok(Err(OutOfDate)),
        }
    }
    Ok(Ok(written))
}

/// Plans by their place in the batch: those that only count events into open alarms (over a
/// stored state, and no other plan of the batch on one of their keys, so that a device's plans
/// are written in their order), and the others.
type Placed = Vec<(usize, AlarmPlan)>;

fn counting_apart(plans: Vec<AlarmPlan>) -> (Placed, Placed) {
    let mut plans_of = std::collections::HashMap::new();
    for plan in &plans {
        for (key, _) in &plan.steps {
            *plans_of.entry((plan.device.clone(), key.clone())).or_insert(0) += 1;
        }
    }
    let (mut counts, mut others) = (Vec::new(), Vec::new());
    for (at, plan) in plans.into_iter().enumerate() {
        let counting = plan.steps.iter().all(|(key, t)| {
            t.state.version > 0
                && t.writes.iter().all(|w| !w.new && w.history.is_empty())
                && plans_of[&(plan.device.clone(), key.clone())] == 1
        });
        match counting {
            true => counts.push((at, plan)),
            false => others.push((at, plan)),
        }
    }
    (counts, others)
}

/// Rows one statement of `write_counts` carries at most (its parameters stay far below both
/// engines' limits).
const COUNT_ROWS: usize = 500;

/// Writes the counting plans' states, each over the version it was read at, then their alarms,
/// each while still open; false, with nothing of it written, when any of them is out of date.
async fn write_counts(conn: &mut AnyConnection, counts: &Placed) -> Result<bool> {
    let states: Vec<_> = counts
        .iter()
        .flat_map(|(_, plan)| plan.steps.iter().map(move |(key, t)| (&plan.device, key, &t.state)))
        .collect();
    let alarms: Vec<&Alarm> = counts
        .iter()
        .flat_map(|(_, plan)| plan.steps.iter().flat_map(|(_, t)| t.writes.iter().map(|w| &w.alarm)))
        .collect();
    if states.is_empty() {
        return Ok(true);
    }
    savepoint(conn, "SAVEPOINT alarm_counts").await?;
    let mut current = true;
    for chunk in states.chunks(COUNT_ROWS) {
        current = current && put_states(conn, chunk).await? == chunk.len();
    }
    for chunk in alarms.chunks(COUNT_ROWS) {
        current = current && put_counts(conn, chunk).await? == chunk.len();
    }
    if !current {
        savepoint(conn, "ROLLBACK TO SAVEPOINT alarm_counts").await?;
    }
    savepoint(conn, "RELEASE SAVEPOINT alarm_counts").await?;
    Ok(current)
}

async fn savepoint(conn: &mut AnyConnection, statement: &str) -> Result<()> {
    sqlx::query(statement).execute(&mut *conn).await.map_err(db_error)?;
    Ok(())
}

/// `rows` placeholders of `width` parameters each, `cast` saying which are integers.
fn values(rows: usize, width: usize, cast: impl Fn(usize) -> bool) -> String {
    let row = |r: usize| {
        let places: Vec<String> = (1..=width)
            .map(|c| match cast(c) {
                true => format!("CAST(${} AS BIGINT)", r * width + c),
                false => format!("${}", r * width + c),
            })
            .collect();
        format!("({})", places.join(", "))
    };
    (0..rows).map(row).collect::<Vec<_>>().join(", ")
}

/// Each state over the version it was read at; how many were written.
async fn put_states(conn: &mut AnyConnection, rows: &[(&DeviceId, &String, &AlarmState)]) -> Result<usize> {
    // column1 key, 2 device, 3 version read, 4 raise_since, 5 clear_since, 6 levels,
    // 7 last_time, 8 last_arrival, 9 recent, 10 no_data
    let text = format!(
        "UPDATE alarm_states SET raise_since = v.column4, clear_since = v.column5, levels = v.column6, \
             last_time = v.column7, last_arrival = v.column8, recent = v.column9, no_data = v.column10, \
             version = alarm_states.version + 1 \
         FROM (VALUES {}) AS v \
         WHERE alarm_states.alarm_key = v.column1 AND alarm_states.device_id = v.column2 \
             AND alarm_states.version = v.column3 \
         RETURNING alarm_states.alarm_key",
        values(rows.len(), 10, |c| matches!(c, 3 | 4 | 5 | 7 | 8 | 10))
    );
    let mut query = sqlx::query(&text);
    for (device, key, state) in rows {
        let keyed = query.bind(key.as_str()).bind(device.as_str()).bind(state.version);
        query = bind_state(keyed, state)?;
    }
    Ok(query.fetch_all(&mut *conn).await.map_err(db_error)?.len())
}

/// Each open alarm's count, value and times; how many were written.
async fn put_counts(conn: &mut AnyConnection, alarms: &[&Alarm]) -> Result<usize> {
    let text = format!(
        "UPDATE alarms SET count = v.column2, value = v.column3, last_event_time = v.column4, \
             updated_time = v.column5 \
         FROM (VALUES {}) AS v \
         WHERE alarms.id = v.column1 AND alarms.status <> 'CLEARED' \
         RETURNING alarms.id",
        values(alarms.len(), 5, |c| matches!(c, 2 | 4 | 5))
    );
    let mut query = sqlx::query(&text);
    for a in alarms {
        query = query
            .bind(a.id.as_str())
            .bind(a.count)
            .bind(to_json(&a.value)?)
            .bind(a.last_event_time)
            .bind(a.updated_time);
    }
    Ok(query.fetch_all(&mut *conn).await.map_err(db_error)?.len())
}
