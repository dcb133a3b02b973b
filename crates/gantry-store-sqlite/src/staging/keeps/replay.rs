//! The packs left when a store opens, replayed: a pack's row remembers only the messages its step
//! remembered (`REMEMBERED`), so a key's state is its stored state with each of its rows after the
//! stored version laid over it in order, the messages each remembered added to what the state
//! remembers. Rows written whole (`WHOLE`, and every row of a pack written before, 15 values)
//! replace what the state remembers.
//!
//! Complete because packs are dropped only once every keep in them and every keep of their keys
//! before them is folded (`Unfolded::fold_all`): the rows left of a key begin right after its
//! stored version, and a key's rows come in the order of their packs, the order of its steps (a
//! device's steps wait for each other).

use std::collections::HashMap;

use gantry_core::Result;
use gantry_core::alarm::{AlarmState, MessageKey};
use gantry_core::error::Error;
use gantry_store::error::db_error;
use serde::Deserialize;
use serde_json::Value;
use sqlx::{AnyConnection, AnyPool};

use super::{COLUMNS, PACKS, REMEMBERED, listed};

/// Packs read at a time.
const PACKS_PER_READ: i64 = 64;

/// A key's replay: its stored version and what its state remembers, then its newest row laid
/// over it.
struct Replay {
    version: i64,
    state: AlarmState,
    newest: Option<Vec<Value>>,
}

/// The packs numbered `through` or lower, read from `stager` in order, replayed over the states
/// `conn` (the event-log writer's transaction) reads: one whole row per key changed, as one pack
/// (None when there is none). Keys without a stored state are left out (a fold drops them too).
pub(super) async fn replayed(conn: &mut AnyConnection, stager: &AnyPool, through: i64) -> Result<Option<String>> {
    let mut keys: HashMap<(String, String), Option<Replay>> = HashMap::new();
    let mut after = i64::MIN;
    loop {
        let packs: Vec<(i64, String)> = sqlx::query_as(&format!(
            "SELECT seq, keeps FROM {PACKS} WHERE seq > $1 AND seq <= $2 ORDER BY seq LIMIT {PACKS_PER_READ}"
        ))
        .bind(after)
        .bind(through)
        .fetch_all(stager)
        .await
        .map_err(db_error)?;
        let Some((last, _)) = packs.last() else { break };
        after = *last;
        for (_, pack) in packs {
            let rows: Vec<Vec<Value>> = serde_json::from_str(&pack).map_err(Error::serialization)?;
            for row in rows {
                let key = (text(&row, 0)?, text(&row, 1)?);
                let replay = match keys.get_mut(&key) {
                    Some(replay) => replay,
                    None => {
                        let stored = stored(conn, &key).await?;
                        keys.entry(key).or_insert(stored)
                    }
                };
                if let Some(replay) = replay {
                    replay.lay(row)?;
                }
            }
        }
    }
    let rows = keys
        .into_values()
        .flatten()
        .filter_map(|replay| replay.whole_row().transpose())
        .collect::<Result<Vec<_>>>()?;
    Ok((!rows.is_empty()).then(|| listed(rows.iter().map(String::as_str))))
}

/// The stored version and remembered messages of `key` (device, key), None when it has no state.
async fn stored(conn: &mut AnyConnection, (device, key): &(String, String)) -> Result<Option<Replay>> {
    let row: Option<(i64, String)> =
        sqlx::query_as("SELECT version, recent FROM logs.alarm_states WHERE device_id = $1 AND alarm_key = $2")
            .bind(device)
            .bind(key)
            .fetch_optional(&mut *conn)
            .await
            .map_err(db_error)?;
    row.map(|(version, recent)| {
        Ok(Replay {
            version,
            state: AlarmState {
                recent: serde_json::from_str(&recent).map_err(Error::serialization)?,
                ..Default::default()
            },
            newest: None,
        })
    })
    .transpose()
}

impl Replay {
    /// Lays `row` over the state when it is newer than what the state holds.
    fn lay(&mut self, row: Vec<Value>) -> Result<()> {
        let version = row.get(2).and_then(Value::as_i64).unwrap_or_default();
        if version <= self.version {
            return Ok(());
        }
        if version > self.version + 1 {
            // Not expected (see the module's doc): the steps between remembered messages that
            // are lost, so a redelivery of one of those would be counted again.
            tracing::warn!(
                stored = self.version,
                version,
                "alarm keeps replayed with a gap in their versions"
            );
        }
        let messages = messages(&row[8])?;
        match row.get(COLUMNS.len()).and_then(Value::as_u64) == Some(u64::from(REMEMBERED)) {
            true => self.state.remember(&messages),
            false => self.state.recent = messages,
        }
        self.version = version;
        self.newest = Some(row);
        Ok(())
    }

    /// The newest row laid over, whole (its `recent` what the state remembers), when any was.
    fn whole_row(self) -> Result<Option<String>> {
        let Some(mut row) = self.newest else { return Ok(None) };
        row.truncate(COLUMNS.len());
        row[8] = serde_json::to_value(&self.state.recent).map_err(Error::serialization)?;
        Ok(Some(serde_json::to_string(&row).map_err(Error::serialization)?))
    }
}

/// The row's value at `index`, a string.
fn text(row: &[Value], index: usize) -> Result<String> {
    String::deserialize(row.get(index).unwrap_or(&Value::Null)).map_err(Error::serialization)
}

/// Messages as a row holds them: a JSON array, or JSON text of one in a string (rows written
/// before, and by the upgrade from one row per key).
fn messages(value: &Value) -> Result<Vec<MessageKey>> {
    match value {
        Value::String(text) => serde_json::from_str(text).map_err(Error::serialization),
        value => Vec::deserialize(value).map_err(Error::serialization),
    }
}
