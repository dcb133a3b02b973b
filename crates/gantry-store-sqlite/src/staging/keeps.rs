//! Alarm keeps: a step that only counts events into an open alarm (or moves a rule's timers) is
//! committed with those events by the stager, in their transaction, so that it is durable when
//! they are and a message that keeps an alarm open waits for one flush, not for the event-log
//! file's synced commit too. A commit's keeps are one row of `alarm_keep_packs` (staging
//! migration 0012), numbered by the commit's last event and appended like the events: a commit
//! writes the table's last pages only, whichever devices it counts for.
//!
//! The event-log file's alarm_states and alarms take the keeps later, folded in by the event-log
//! writer from the newest keep per key that this engine holds in memory (`Unfolded`): first in
//! every transaction that writes a device's alarms (`EventEngine::fold_alarm_keeps`), before a
//! read of what a keep changes (`EventEngine::fold_before_alarm_read`), and every `FOLD_EVERY`
//! (`Unfolded::fold_all`), which also lets the keeps and packs folded go. An evaluation's
//! snapshot lays the newest keeps over what it read (`Unfolded::lay_over`), as a fold would.
//!
//! Invariants: a keep holds the whole state and the open alarm's count, value and times after its
//! step, with the state version the step wrote, and is folded only over an older version: a fold
//! that runs twice, or after a crash between the two files, changes nothing more. A fold takes
//! only keeps whose commit is on disk (numbered no higher than `Staged::flushed_through`). A pack
//! is dropped only once each of its keeps is folded or replaced by a newer one in a later pack,
//! and a store that opens folds every pack left (`fold_packs`) before it serves.

use std::collections::HashMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::Duration;

use foldhash::fast::RandomState;
use gantry_core::Result;
use gantry_core::alarm::{Alarm, AlarmState, MessageKey};
use gantry_core::ids::{AlarmId, DeviceId};
use gantry_core::store::AlarmKeep;
use gantry_store::error::db_error;
use gantry_store::row::to_json;
use sqlx::{AnyConnection, AnyPool};

/// The packs, by their schema-qualified name.
const PACKS: &str = "staging.alarm_keep_packs";

/// The statement that stages one pack, run in the events' transaction right after the INSERT of
/// the events: its `seq` is the last event's number (`last_insert_rowid()`, unique, since every
/// commit with keeps has events).
pub(super) const STAGE_TEXT: &str = "INSERT INTO staging.alarm_keep_packs (seq, keeps) VALUES (last_insert_rowid(), ?)";

/// A keep as one row of a pack: the values of the event-log file's columns in `COLUMNS` order.
/// `levels` and `recent` are JSON arrays in the row itself, not JSON text in a string: `->>`
/// gives an array's text, the column's value, and a string's content alike, so a fold reads
/// packs written either way, and each keep's 16 message ids are not escaped a second time.
type Row<'a> = (
    &'a str,
    &'a str,
    i64,
    Option<i64>,
    Option<i64>,
    &'a [Option<i64>],
    Option<i64>,
    Option<i64>,
    &'a [MessageKey],
    i64,
    Option<&'a str>,
    Option<i64>,
    Option<String>,
    Option<i64>,
    Option<i64>,
);

/// The folded columns, in a row's order.
const COLUMNS: [&str; 15] = [
    "device_id",
    "alarm_key",
    "version",
    "raise_since",
    "clear_since",
    "levels",
    "last_time",
    "last_arrival",
    "recent",
    "no_data",
    "alarm_id",
    "count",
    "value",
    "last_event_time",
    "updated_time",
];

/// `keep` as a pack's row (JSON), with the state version its step writes and the state's columns
/// as the shared SQL stores them.
fn row(keep: &AlarmKeep) -> Result<String> {
    let alarm = keep.alarm.as_ref();
    let state = &keep.state;
    let row: Row = (
        keep.device.as_str(),
        &keep.key,
        state.version + 1,
        state.raise_since,
        state.clear_since,
        &state.levels,
        state.last_time,
        state.last_arrival,
        &state.recent,
        i64::from(state.no_data),
        alarm.map(|a| a.id.as_str()),
        alarm.map(|a| a.count),
        alarm.map(|a| to_json(&a.value)).transpose()?,
        alarm.map(|a| a.last_event_time),
        alarm.map(|a| a.updated_time),
    );
    to_json(&row)
}

/// The temporary table a fold fills first (on the event-log writer, created with each of its
/// connections): the newest keep per key of what is folded.
pub(crate) fn folding_table() -> String {
    format!(
        "CREATE TEMP TABLE IF NOT EXISTS alarm_folding ({}, PRIMARY KEY (device_id, alarm_key)) WITHOUT ROWID",
        COLUMNS.join(", ")
    )
}

/// Fills `temp.alarm_folding` with the rows read by `from` (aliased `j`, each row its `value`)
/// that `filter` keeps, the newest version per key.
fn fill_text(from: &str, filter: &str) -> String {
    let values: Vec<String> = (0..COLUMNS.len()).map(|i| format!("j.value ->> {i}")).collect();
    let updates: Vec<String> = COLUMNS[2..].iter().map(|c| format!("{c} = excluded.{c}")).collect();
    format!(
        "INSERT INTO temp.alarm_folding ({}) SELECT {} FROM {from} WHERE {filter} \
         ON CONFLICT (device_id, alarm_key) DO UPDATE SET {} WHERE excluded.version > alarm_folding.version",
        COLUMNS.join(", "),
        values.join(", "),
        updates.join(", ")
    )
}

/// A keep newer than the stored state of its key, joined as `k` to the state `s`.
const NEWER: &str = "k.device_id = s.device_id AND k.alarm_key = s.alarm_key AND k.version > s.version";

/// Puts what `temp.alarm_folding` holds into the event-log file's alarms (each while open) and
/// states, both only over an older version, and empties it.
async fn fold_filled(conn: &mut AnyConnection) -> Result<()> {
    let alarms = format!(
        "UPDATE logs.alarms SET count = k.count, value = k.value, last_event_time = k.last_event_time, \
             updated_time = k.updated_time \
         FROM temp.alarm_folding k JOIN logs.alarm_states s ON {NEWER} \
         WHERE alarms.id = k.alarm_id AND alarms.status <> 'CLEARED'"
    );
    let states = "UPDATE logs.alarm_states SET raise_since = k.raise_since, clear_since = k.clear_since, \
             levels = k.levels, last_time = k.last_time, last_arrival = k.last_arrival, recent = k.recent, \
             no_data = k.no_data, version = k.version \
         FROM temp.alarm_folding k \
         WHERE k.device_id = alarm_states.device_id AND k.alarm_key = alarm_states.alarm_key \
             AND k.version > alarm_states.version";
    for text in [alarms.as_str(), states, "DELETE FROM temp.alarm_folding"] {
        sqlx::query(text).execute(&mut *conn).await.map_err(db_error)?;
    }
    Ok(())
}

/// A JSON array of `rows`, each JSON already: a pack.
fn listed<'a>(rows: impl IntoIterator<Item = &'a str>) -> String {
    format!("[{}]", rows.into_iter().collect::<Vec<_>>().join(","))
}

/// Folds `pack` (keeps as a pack's rows, a JSON array) on the event-log writer's `conn`.
async fn fold_pack(conn: &mut AnyConnection, pack: String) -> Result<()> {
    sqlx::query(&fill_text("json_each($1) j", "true"))
        .bind(pack)
        .execute(&mut *conn)
        .await
        .map_err(db_error)?;
    fold_filled(conn).await
}

/// Folds every pack numbered `through` or lower (all on disk when the store opens) into the
/// event-log file, then drops them: before the store serves, so that nothing else runs.
pub(crate) async fn fold_packs(log_writer: &AnyPool, stager: &AnyPool, through: i64) -> Result<()> {
    let mut tx = log_writer.begin().await.map_err(db_error)?;
    sqlx::query(&fill_text(&format!("{PACKS} p, json_each(p.keeps) j"), "p.seq <= $1"))
        .bind(through)
        .execute(&mut *tx)
        .await
        .map_err(db_error)?;
    fold_filled(&mut tx).await?;
    tx.commit().await.map_err(db_error)?;
    drop_packs(stager, through).await
}

async fn drop_packs(stager: &AnyPool, through: i64) -> Result<()> {
    sqlx::query(&format!("DELETE FROM {PACKS} WHERE seq <= $1"))
        .bind(through)
        .execute(stager)
        .await
        .map_err(db_error)?;
    Ok(())
}

/// How often every keep on disk is folded and the packs folded dropped. A fold writes only the
/// newest keep of each key, so the rarer it runs, the fewer rows it writes per event counted;
/// reads fold first, so none waits for it. What it bounds: the packs a restart folds, and the
/// staging file's share of packs not dropped yet.
pub(crate) const FOLD_EVERY: Duration = Duration::from_secs(5);

/// The newest keep per key not folded by `fold_all` yet, in memory: the engine's only copy to
/// fold from (the packs are read only when the store opens).
#[derive(Debug, Default)]
pub(crate) struct Unfolded {
    newest: Mutex<Newest>,
    /// The highest number of a pack staged, and of one dropped.
    staged_through: AtomicI64,
    dropped_through: AtomicI64,
    /// One `fold_all` at a time.
    folding: tokio::sync::Mutex<()>,
}

/// What a keep is held by: its device and its key.
type KeepKey = (DeviceId, String);

/// The newest keeps, by device then key: an evaluation's snapshot and a keep's arrival look up
/// one device's keys without building a key of their own.
type Newest = HashMap<DeviceId, HashMap<String, Kept, RandomState>, RandomState>;

#[derive(Debug)]
struct Kept {
    /// The pack's number.
    seq: i64,
    row: String,
    /// The state after the step; its `version` is the one the step was computed over.
    state: AlarmState,
    /// What the step changed of the open alarm: its id, count, value and times.
    counted: Option<(AlarmId, i64, serde_json::Value, i64, i64)>,
}

impl Unfolded {
    /// The pack of `keeps` (JSON), and its rows.
    pub(super) fn pack(keeps: &[AlarmKeep]) -> Result<(String, Vec<String>)> {
        let rows = keeps.iter().map(row).collect::<Result<Vec<_>>>()?;
        Ok((listed(rows.iter().map(String::as_str)), rows))
    }

    /// Holds `keeps` (with their `rows`), committed in the pack numbered `seq`: each replaces an
    /// older keep of its key.
    pub(super) fn add(&self, seq: i64, keeps: &[AlarmKeep], rows: Vec<String>) {
        let mut newest = self.lock();
        for (keep, row) in keeps.iter().zip(rows) {
            let kept = Kept {
                seq,
                row,
                state: keep.state.clone(),
                counted: keep.alarm.as_ref().map(|a| {
                    (
                        a.id.clone(),
                        a.count,
                        a.value.clone(),
                        a.last_event_time,
                        a.updated_time,
                    )
                }),
            };
            let device = match newest.get_mut(&keep.device) {
                Some(device) => device,
                None => newest.entry(keep.device.clone()).or_default(),
            };
            match device.get_mut(keep.key.as_str()) {
                Some(held) if held.state.version > keep.state.version => {}
                Some(held) => *held = kept,
                None => {
                    device.insert(keep.key.clone(), kept);
                }
            }
        }
        self.staged_through.fetch_max(seq, Ordering::Relaxed);
    }

    /// The keeps numbered `through` or lower, of `devices` (all when None): each as its key and
    /// its pack's number, and all of them as one pack (None when there are none), their rows
    /// copied once, into it.
    fn taken(&self, through: i64, devices: Option<&[&DeviceId]>) -> (Vec<(KeepKey, i64)>, Option<String>) {
        let newest = self.lock();
        let held: Vec<(&DeviceId, &HashMap<String, Kept, RandomState>)> = match devices {
            Some(devices) => devices
                .iter()
                .filter_map(|device| newest.get_key_value(*device))
                .collect(),
            None => newest.iter().collect(),
        };
        let taken: Vec<(&DeviceId, &String, &Kept)> = held
            .into_iter()
            .flat_map(|(device, keeps)| keeps.iter().map(move |(key, kept)| (device, key, kept)))
            .filter(|(_, _, kept)| kept.seq <= through)
            .collect();
        let pack = (!taken.is_empty()).then(|| listed(taken.iter().map(|(_, _, kept)| kept.row.as_str())));
        let keys = taken
            .into_iter()
            .map(|(device, key, kept)| ((device.clone(), key.clone()), kept.seq))
            .collect();
        (keys, pack)
    }

    /// Folds the keeps of `devices` (all when None) numbered `through` or lower into `tx`, a
    /// transaction of the event-log writer. They stay held: only `fold_all` lets keeps go.
    pub(super) async fn fold(&self, tx: &mut AnyConnection, through: i64, devices: Option<&[&DeviceId]>) -> Result<()> {
        match self.taken(through, devices) {
            (_, Some(pack)) => fold_pack(tx, pack).await,
            (_, None) => Ok(()),
        }
    }

    /// Whether a keep numbered `through` or lower is held.
    pub(super) fn waiting(&self, through: i64) -> bool {
        self.lock()
            .values()
            .flat_map(HashMap::values)
            .any(|kept| kept.seq <= through)
    }

    /// Folds every keep numbered `through` or lower in a transaction of the event-log writer,
    /// lets go of those no newer keep replaced meanwhile, and with `stager` drops the packs that
    /// low: each of their keeps is folded now or replaced by a keep of a later pack. (A read
    /// passes no stager, so that it never waits for an ingest commit.)
    pub(crate) async fn fold_all(&self, log_writer: &AnyPool, stager: Option<&AnyPool>, through: i64) -> Result<()> {
        let _one = self.folding.lock().await;
        let started = std::time::Instant::now();
        let (taken, pack) = self.taken(through, None);
        let folded = taken.len();
        if let Some(pack) = pack {
            let mut tx = log_writer.begin().await.map_err(db_error)?;
            fold_pack(&mut tx, pack).await?;
            tx.commit().await.map_err(db_error)?;
            let mut newest = self.lock();
            for ((device, key), seq) in taken {
                let Some(keeps) = newest.get_mut(&device) else { continue };
                if keeps.get(&key).is_some_and(|kept| kept.seq == seq) {
                    keeps.remove(&key);
                }
                if keeps.is_empty() {
                    newest.remove(&device);
                }
            }
        }
        let Some(stager) = stager else {
            return Ok(());
        };
        let fold_ms = started.elapsed().as_secs_f64() * 1e3;
        let dropped = self.dropped_through.load(Ordering::Relaxed);
        if self.staged_through.load(Ordering::Relaxed) > dropped && through > dropped {
            drop_packs(stager, through).await?;
            self.dropped_through.fetch_max(through, Ordering::Relaxed);
        }
        // The drop holds the stager, where ingest commits wait: its time is worth watching.
        let drop_ms = started.elapsed().as_secs_f64() * 1e3 - fold_ms;
        tracing::debug!(folded, fold_ms, drop_ms, through, "folded alarm keeps");
        Ok(())
    }

    /// Lays the keeps held for `device` over `read`, what a snapshot found stored for some of its
    /// keys (key, state, open alarm), as a fold would: the state of a newer keep, and its
    /// count, value and times over the open alarm it counted into.
    pub(crate) fn lay_over(&self, device: &DeviceId, read: &mut [(String, AlarmState, Option<Alarm>)]) {
        let newest = self.lock();
        let Some(keeps) = newest.get(device) else {
            return;
        };
        for (key, state, open) in read.iter_mut() {
            let Some(kept) = keeps.get(key.as_str()) else {
                continue;
            };
            if kept.state.version < state.version {
                continue;
            }
            *state = AlarmState {
                version: kept.state.version + 1,
                ..kept.state.clone()
            };
            if let (Some(open), Some((id, count, value, last_event_time, updated_time))) =
                (open.as_mut(), kept.counted.as_ref())
                && &open.id == id
            {
                open.count = *count;
                open.value = value.clone();
                open.last_event_time = *last_event_time;
                open.updated_time = *updated_time;
            }
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Newest> {
        self.newest.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

/// The highest event number staged before this store opened: every pack in the staging file
/// then is on disk.
pub(crate) async fn through_at_open(pool: &AnyPool) -> std::result::Result<i64, sqlx::Error> {
    let through: Option<i64> =
        sqlx::query_scalar("SELECT seq FROM staging.sqlite_sequence WHERE name = 'device_events_recent'")
            .fetch_optional(pool)
            .await?;
    Ok(through.unwrap_or(0))
}
