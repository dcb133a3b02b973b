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
//! Invariants: a keep held in memory holds the whole state and the open alarm's count, value and
//! times after its step, with the state version the step wrote, and is folded only over an older
//! version: a fold that runs twice, or after a crash between the two files, changes nothing more.
//! A fold takes only keeps whose commit is on disk (numbered no higher than
//! `Staged::flushed_through`). A pack's row holds the same but for the state's remembered
//! messages: only those its step remembered, so that a store that opens replays a key's rows in
//! order over its stored state (replay.rs). So a pack is dropped only once every keep in it, and
//! every keep of its keys before it, is folded (`Unfolded::fold_all`), and a store that opens
//! folds every pack left (`fold_packs`) before it serves.

mod replay;

use std::collections::HashMap;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Mutex};
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

/// A keep as one row: the values of the event-log file's columns in `COLUMNS` order, then
/// `REMEMBERED` (1) when `recent` holds only the messages its step remembered (a pack's row) or
/// `WHOLE` (0) when it holds them all (a row folded from memory). `levels` and `recent` are JSON
/// arrays in the row itself, not JSON text in a string: `->>` gives an array's text, the column's
/// value, and a string's content alike, so a fold reads rows written either way (those of packs
/// written before, 15 values, are whole).
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
    u8,
);

/// A row's last value when its `recent` holds only what its step remembered.
const REMEMBERED: u8 = 1;

/// A row's last value when its `recent` holds every message the state remembers.
const WHOLE: u8 = 0;

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

/// A keep's open alarm as a row's columns: its id, count, value and times.
type Counted<'a> = (&'a AlarmId, i64, &'a serde_json::Value, i64, i64);

/// `keep` as a pack's row (`REMEMBERED`).
fn pack_row(keep: &AlarmKeep) -> Result<Row<'_>> {
    row((&keep.device, &keep.key), &keep.after, (&keep.remembered, REMEMBERED))
}

/// The row of the keep of `key` after which the store holds `after` (the state, with the
/// version the keep writes, and the open alarm), with `recent` for the state's remembered
/// messages (all of them or those of the step).
fn row<'a>(
    (device, key): (&'a DeviceId, &'a str),
    after: &'a (AlarmState, Option<Alarm>),
    (recent, form): (&'a [MessageKey], u8),
) -> Result<Row<'a>> {
    let (state, open) = after;
    let alarm: Option<Counted> = open
        .as_ref()
        .map(|a| (&a.id, a.count, &a.value, a.last_event_time, a.updated_time));
    let row: Row = (
        device.as_str(),
        key,
        state.version,
        state.raise_since,
        state.clear_since,
        &state.levels,
        state.last_time,
        state.last_arrival,
        recent,
        i64::from(state.no_data),
        alarm.map(|a| a.0.as_str()),
        alarm.map(|a| a.1),
        alarm.map(|a| to_json(a.2)).transpose()?,
        alarm.map(|a| a.3),
        alarm.map(|a| a.4),
        form,
    );
    Ok(row)
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
/// event-log file, each key's rows replayed in order over its stored state (replay.rs), then
/// drops them: before the store serves, so that nothing else runs.
pub(crate) async fn fold_packs(log_writer: &AnyPool, stager: &AnyPool, through: i64) -> Result<()> {
    let mut tx = log_writer.begin().await.map_err(db_error)?;
    if let Some(pack) = replay::replayed(&mut tx, stager, through).await? {
        fold_pack(&mut tx, pack).await?;
    }
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

/// Keeps taken to fold: each by its key and its pack's number, and all of them as one pack.
type Taken = (Vec<(KeepKey, i64)>, Option<String>);

/// The newest keeps, by device then key: an evaluation's snapshot and a keep's arrival look up
/// one device's keys without building a key of their own.
type Newest = HashMap<DeviceId, HashMap<String, Kept, RandomState>, RandomState>;

#[derive(Debug)]
struct Kept {
    /// The pack's number.
    seq: i64,
    /// The number of the oldest pack with a keep of this key not folded: packs from it on are
    /// replayed for the key if the store stops now.
    since: i64,
    /// What the store holds of the key after the step (`AlarmKeep::after`), shared with the
    /// evaluation: the state, with the version the keep writes, and the open alarm.
    after: Arc<(AlarmState, Option<Alarm>)>,
}

impl Kept {
    /// This keep as a row with every message its state remembers (`WHOLE`).
    fn row<'a>(&'a self, key: (&'a DeviceId, &'a str)) -> Result<Row<'a>> {
        row(key, &self.after, (&self.after.0.recent, WHOLE))
    }

    fn version(&self) -> i64 {
        self.after.0.version
    }
}

impl Unfolded {
    /// The pack of `keeps` (JSON).
    pub(super) fn pack(keeps: &[AlarmKeep]) -> Result<String> {
        let rows = keeps.iter().map(pack_row).collect::<Result<Vec<_>>>()?;
        to_json(&rows)
    }

    /// Holds `keeps`, committed in the pack numbered `seq`: each replaces an older keep of its
    /// key.
    pub(super) fn add(&self, seq: i64, keeps: &[AlarmKeep]) {
        let mut newest = self.lock();
        for keep in keeps {
            let mut kept = Kept {
                seq,
                since: seq,
                after: keep.after.clone(),
            };
            let device = match newest.get_mut(&keep.device) {
                Some(device) => device,
                None => newest.entry(keep.device.clone()).or_default(),
            };
            match device.get_mut(keep.key.as_str()) {
                Some(held) if held.version() > kept.version() => {}
                Some(held) => {
                    kept.since = held.since;
                    *held = kept;
                }
                None => {
                    device.insert(keep.key.clone(), kept);
                }
            }
        }
        self.staged_through.fetch_max(seq, Ordering::Relaxed);
    }

    /// The keeps numbered `through` or lower, of `devices` (all when None): each as its key and
    /// its pack's number, and all of them as one pack of `WHOLE` rows (None when there are none).
    fn taken(&self, through: i64, devices: Option<&[&DeviceId]>) -> Result<Taken> {
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
        let rows = taken
            .iter()
            .map(|(device, key, kept)| kept.row((device, key)))
            .collect::<Result<Vec<_>>>()?;
        let pack = (!rows.is_empty()).then(|| to_json(&rows)).transpose()?;
        let keys = taken
            .into_iter()
            .map(|(device, key, kept)| ((device.clone(), key.clone()), kept.seq))
            .collect();
        Ok((keys, pack))
    }

    /// Folds the keeps of `devices` (all when None) numbered `through` or lower into `tx`, a
    /// transaction of the event-log writer. They stay held: only `fold_all` lets keeps go.
    pub(super) async fn fold(&self, tx: &mut AnyConnection, through: i64, devices: Option<&[&DeviceId]>) -> Result<()> {
        match self.taken(through, devices)? {
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
    /// low but for those a held keep may still be replayed from (`Kept::since`): every keep of
    /// the packs dropped is folded. (A read passes no stager, so that it never waits for an
    /// ingest commit.)
    pub(crate) async fn fold_all(&self, log_writer: &AnyPool, stager: Option<&AnyPool>, through: i64) -> Result<()> {
        let _one = self.folding.lock().await;
        let started = std::time::Instant::now();
        let (taken, pack) = self.taken(through, None)?;
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
        let held_since = self
            .lock()
            .values()
            .flat_map(HashMap::values)
            .map(|kept| kept.since)
            .min();
        let droppable = held_since.map_or(through, |since| through.min(since - 1));
        let dropped = self.dropped_through.load(Ordering::Relaxed);
        if self.staged_through.load(Ordering::Relaxed) > dropped && droppable > dropped {
            drop_packs(stager, droppable).await?;
            self.dropped_through.fetch_max(droppable, Ordering::Relaxed);
        }
        // The drop holds the stager, where ingest commits wait: its time is worth watching.
        let drop_ms = started.elapsed().as_secs_f64() * 1e3 - fold_ms;
        tracing::debug!(folded, fold_ms, drop_ms, through, droppable, "folded alarm keeps");
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
            if kept.version() <= state.version {
                continue;
            }
            *state = kept.after.0.clone();
            if let (Some(open), Some(counted)) = (open.as_mut(), kept.after.1.as_ref())
                && open.id == counted.id
            {
                open.count = counted.count;
                open.value = counted.value.clone();
                open.last_event_time = counted.last_event_time;
                open.updated_time = counted.updated_time;
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
