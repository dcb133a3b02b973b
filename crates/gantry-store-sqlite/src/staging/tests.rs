//! The staging engine's own tests: the numbers of staged rows, rounds cut short, the files'
//! durability settings and page sizes. (The store suite runs every behaviour on both engines.)

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use gantry_core::enums::{Channel, DataType};
use gantry_core::event::DeviceEvent;
use gantry_core::ids::{DeviceId, EventId, ModelId, ProjectId, TenantId};
use gantry_core::paging::PageRequest;
use gantry_core::query::{EventQuery, TimeField};
use gantry_core::store::EventStore;
use serde_json::json;
use sqlx::AnyPool;

use super::StagingEvents;
use super::mover::{DELETE_MOVED_AFTER, ROWS_PER_SHORT_MOVE, delete_moved, move_devices, round_held, sync_main};
use crate::file::sqlite_url;
use gantry_store::engine::EventEngine;

/// The engine on the database at `url`, as `connect` starts it.
async fn open_store(url: &str) -> Result<StagingEvents, sqlx::Error> {
    sqlx::any::install_default_drivers();
    crate::open(url, gantry_store::task::Chores::alone()).await
}

fn event(device: &str, ts: i64) -> DeviceEvent {
    DeviceEvent {
        id: EventId::generate(),
        tenant_id: TenantId::default_tenant(),
        project_id: ProjectId::from_string("p"),
        model_id: ModelId::from_string("m"),
        device_id: DeviceId::from_string(device),
        attribute_code: "temp".to_owned(),
        attribute_type: DataType::Float,
        attribute_data: json!(ts),
        channel: Channel::M,
        ingress_time_stamp: ts,
        device_timestamp: ts,
        correlation_id: None,
        context: None,
        created_by: "DEVICE".to_owned(),
        created_time: ts,
        deleted: false,
    }
}

/// The value of `PRAGMA name` on a connection of `pool`.
async fn pragma(pool: &AnyPool, name: &str) -> i64 {
    sqlx::query_scalar(&format!("PRAGMA {name}"))
        .fetch_one(pool)
        .await
        .unwrap()
}

/// What a user reads of `device`: the listing's total and times, and the shadow's value.
async fn read(store: &StagingEvents, device: &str) -> (u64, Vec<i64>, Vec<serde_json::Value>) {
    let query = EventQuery {
        device: DeviceId::from_string(device),
        attribute_code: None,
        time_field: TimeField::Device,
        start: None,
        end: None,
    };
    let listed = store
        .list_events(
            &query,
            PageRequest {
                page_no: 1,
                page_size: 100,
            },
        )
        .await
        .unwrap();
    let shadow = store.shadow(&TenantId::default_tenant(), &query.device).await.unwrap();
    (
        listed.total,
        listed.items.iter().map(|e| e.device_timestamp).collect(),
        shadow.into_iter().map(|(a, _)| a.value).collect(),
    )
}

/// The numbers the index holds for a batch are the ones SQLite gave its rows, across the
/// batch's statements and after a staged event was deleted (AUTOINCREMENT never reuses its
/// number): reads find staged events by them.
#[tokio::test]
async fn staged_numbers_are_the_rows_numbers() {
    let dir = tempfile::tempdir().unwrap();
    let store = open_store(&sqlite_url(dir.path())).await.unwrap();
    let _round = store.mover.last_round.lock().await;
    let batch = |from: i64| -> Vec<DeviceEvent> {
        (from..from + 300)
            .map(|ts| event(["dev-a", "dev-b", "dev-c"][ts as usize % 3], ts))
            .collect()
    };
    store.append_events(&batch(0)).await.unwrap();
    let last = sqlx::query_scalar::<_, String>("SELECT id FROM staging.device_events_recent ORDER BY seq DESC")
        .fetch_one(&store.database.pool)
        .await
        .unwrap();
    assert!(
        store
            .delete_event(&TenantId::default_tenant(), &EventId::from_string(&last))
            .await
            .unwrap()
    );
    store.append_events(&batch(300)).await.unwrap();
    let rows: Vec<(i64, String)> = sqlx::query_as("SELECT seq, id FROM staging.device_events_recent")
        .fetch_all(&store.database.pool)
        .await
        .unwrap();
    assert_eq!(rows.len(), 599);
    for (seq, id) in rows {
        assert_eq!(store.staged().seq_of(&id), Some(seq), "event {id}");
    }
}

/// A batch of any size is staged in one transaction: every event numbered as its row, its
/// webhook events written, and its alarm keeps one pack numbered by the batch's last event (a
/// fold takes a keep once that number is on disk), also when the webhook events outnumber the
/// events.
#[tokio::test]
async fn a_batch_stages_its_events_keeps_and_webhook_events_together() {
    use gantry_core::store::AlarmKeep;
    use gantry_core::stream::StreamType;
    use gantry_core::webhook::{Audience, WebhookEvent};
    let dir = tempfile::tempdir().unwrap();
    let store = open_store(&sqlite_url(dir.path())).await.unwrap();
    let _round = store.mover.last_round.lock().await;
    let outbox = |event: &DeviceEvent, kind: StreamType| WebhookEvent {
        id: WebhookEvent::new_id(),
        project_id: event.project_id.clone(),
        pending: Audience::default().with(0),
        device_id: event.device_id.clone(),
        kind,
        time: event.created_time,
        data: "{}".to_owned(),
    };
    let keep = |device: &str| AlarmKeep {
        device: DeviceId::from_string(device),
        key: "rule".to_owned(),
        after: std::sync::Arc::new((
            gantry_core::alarm::AlarmState {
                version: 1,
                ..Default::default()
            },
            None,
        )),
        remembered: Vec::new(),
    };
    // The keys' stored states: a keep of a key with none would be dropped as gone.
    for device in ["dev-a", "dev-b"] {
        sqlx::query(
            "INSERT INTO logs.alarm_states (alarm_key, device_id, tenant_id, levels, recent, no_data, version) \
             VALUES ('rule', ?, 't', '[]', '[]', 0, 0)",
        )
        .bind(device)
        .execute(&store.database.log_writer)
        .await
        .unwrap();
    }
    // One event with two webhook events, then more of each than one statement takes.
    for (from, events) in [(0, 1), (1, 700)] {
        let batch: Vec<DeviceEvent> = (from..from + events).map(|ts| event("dev-a", ts)).collect();
        let webhook_events: Vec<WebhookEvent> = batch
            .iter()
            .flat_map(|e| [outbox(e, StreamType::Telemetry), outbox(e, StreamType::Shadow)])
            .collect();
        // Staged, not told to the flusher: nothing is on disk as far as a fold can tell, so
        // the keeps stay in the staging file to be read.
        let numbered = store
            .stage(&batch, &webhook_events, &[keep("dev-a"), keep("dev-b")])
            .await
            .unwrap();
        let rows: Vec<(i64, String)> =
            sqlx::query_as("SELECT seq, id FROM staging.device_events_recent WHERE seq > ? ORDER BY seq")
                .bind(from)
                .fetch_all(&store.database.pool)
                .await
                .unwrap();
        let given: Vec<(i64, String)> = numbered.into_iter().map(|(seq, _, id)| (seq, id)).collect();
        assert_eq!(given, rows);
        let (last, staged): (i64, i64) = sqlx::query_as("SELECT MAX(seq), COUNT(*) FROM staging.device_events_recent")
            .fetch_one(&store.database.pool)
            .await
            .unwrap();
        assert_eq!(staged, from + events);
        let packs: Vec<(i64, i64)> =
            sqlx::query_as("SELECT seq, json_array_length(keeps) FROM staging.alarm_keep_packs WHERE seq > ?")
                .bind(from)
                .fetch_all(&store.database.pool)
                .await
                .unwrap();
        assert_eq!(packs, [(last, 2)], "after {events} events: one pack of both keeps");
        // Per kind a row per hundred events (`BUNDLE_EVENTS`): 2 rows, then 2 + 14.
        let (rows, written): (i64, i64) = sqlx::query_as("SELECT COUNT(*), SUM(events) FROM staging.webhook_outbox")
            .fetch_one(&store.database.pool)
            .await
            .unwrap();
        assert_eq!((rows, written), (2 + 2 * (events / 100), 2 * (from + events)));
    }
}

/// The stored states of the key `rule` of `devices`, version 0, remembering `recent`.
async fn stored_states(store: &StagingEvents, devices: &[&str], recent: &str) {
    for device in devices {
        sqlx::query(
            "INSERT INTO logs.alarm_states (alarm_key, device_id, tenant_id, levels, recent, no_data, version) \
             VALUES ('rule', ?, 't', '[]', ?, 0, 0)",
        )
        .bind(device)
        .bind(recent)
        .execute(&store.database.log_writer)
        .await
        .unwrap();
    }
}

/// A keep of `device`'s key `rule` over the state version `version`, after which the state
/// remembers `recent` (the last one remembered by the step) at the device time `time`.
fn keep_of(device: &str, version: i64, recent: &[u64], time: i64) -> gantry_core::store::AlarmKeep {
    use gantry_core::alarm::{AlarmState, MessageKey};
    let recent: Vec<MessageKey> = recent.iter().copied().map(MessageKey).collect();
    gantry_core::store::AlarmKeep {
        device: DeviceId::from_string(device),
        key: "rule".to_owned(),
        remembered: recent[recent.len() - 1..].to_vec(),
        after: std::sync::Arc::new((
            AlarmState {
                levels: vec![Some(7), None],
                last_time: Some(time),
                recent,
                version: version + 1,
                ..Default::default()
            },
            None,
        )),
    }
}

/// What the event-log file holds of the key `rule`: per device its version, device time,
/// levels and remembered messages.
async fn folded_states(store: &StagingEvents) -> Vec<(String, i64, Option<i64>, String, String)> {
    sqlx::query_as("SELECT device_id, version, last_time, levels, recent FROM logs.alarm_states ORDER BY device_id")
        .fetch_all(&store.database.pool)
        .await
        .unwrap()
}

/// The remembered messages `ids` as a state's column holds them.
fn recent_text(ids: &[u64]) -> String {
    let ids: Vec<String> = ids.iter().map(|id| format!("\"{id:016x}\"")).collect();
    format!("[{}]", ids.join(","))
}

/// A keep's pack row holds only the messages its step remembered, and its levels as arrays; a
/// store that opens replays each key's rows over its stored state in order. Packs left by a
/// release that wrote whole rows with JSON text in strings (and by the upgrade from one row per
/// key) fold as they did.
#[tokio::test]
async fn packs_left_are_replayed_in_order_over_the_stored_states() {
    let dir = tempfile::tempdir().unwrap();
    let url = sqlite_url(dir.path());
    let store = open_store(&url).await.unwrap();
    stored_states(&store, &["dev-a"], &recent_text(&[0xaa])).await;
    stored_states(&store, &["dev-b"], "[]").await;
    // Staged, not told to the flusher: no fold takes them before the store stops.
    store
        .stage(&[event("dev-a", 8)], &[], &[keep_of("dev-a", 0, &[0xaa, 0xbb], 8)])
        .await
        .unwrap();
    store
        .stage(
            &[event("dev-a", 9)],
            &[],
            &[keep_of("dev-a", 1, &[0xaa, 0xbb, 0xcc], 9)],
        )
        .await
        .unwrap();
    let numbered = store.stage(&[event("dev-b", 2)], &[], &[]).await.unwrap();
    sqlx::query(
        "INSERT INTO staging.alarm_keep_packs (seq, keeps) VALUES (?, json_array(json_array('dev-b', 'rule', 1, \
         NULL, NULL, '[7,null]', 9, NULL, '[\"00000000000000ab\",\"00000000000000cd\"]', 0, NULL, NULL, NULL, \
         NULL, NULL)))",
    )
    .bind(numbered[0].0)
    .execute(&store.stager)
    .await
    .unwrap();
    let forms: Vec<(String, String, Option<i64>)> = sqlx::query_as(
        "SELECT json_type(keeps, '$[0][5]'), json_type(keeps, '$[0][8]'), keeps ->> '$[0][15]' \
         FROM staging.alarm_keep_packs ORDER BY seq",
    )
    .fetch_all(&store.stager)
    .await
    .unwrap();
    let new = ("array".to_owned(), "array".to_owned(), Some(1));
    assert_eq!(forms, [new.clone(), new, ("text".to_owned(), "text".to_owned(), None)]);
    store.close().await;
    let store = open_store(&url).await.unwrap();
    let state = |device: &str, version, recent: &[u64]| {
        (
            device.to_owned(),
            version,
            Some(9),
            "[7,null]".to_owned(),
            recent_text(recent),
        )
    };
    assert_eq!(
        folded_states(&store).await,
        [state("dev-a", 2, &[0xaa, 0xbb, 0xcc]), state("dev-b", 1, &[0xab, 0xcd])]
    );
    let packs: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM staging.alarm_keep_packs")
        .fetch_one(&store.stager)
        .await
        .unwrap();
    assert_eq!(packs, 0, "every pack folded is dropped");
    store.close().await;
}

/// The fold every `FOLD_EVERY` drops no pack a held keep may still be replayed from: a key
/// whose newest keep is not on disk yet keeps its older packs until that keep is folded.
#[tokio::test]
async fn a_pack_stays_while_a_later_keep_of_its_key_waits_for_its_fold() {
    let dir = tempfile::tempdir().unwrap();
    let store = open_store(&sqlite_url(dir.path())).await.unwrap();
    stored_states(&store, &["dev-a"], "[]").await;
    let first = store
        .stage(&[event("dev-a", 1)], &[], &[keep_of("dev-a", 0, &[1], 1)])
        .await
        .unwrap();
    let second = store
        .stage(&[event("dev-a", 2)], &[], &[keep_of("dev-a", 1, &[1, 2], 2)])
        .await
        .unwrap();
    let packs = || async {
        sqlx::query_scalar::<_, i64>("SELECT seq FROM staging.alarm_keep_packs ORDER BY seq")
            .fetch_all(&store.stager)
            .await
            .unwrap()
    };
    let (first, second) = (first[0].0, second[0].0);
    let log_writer = &store.database.log_writer;
    store
        .keeps
        .fold_all(log_writer, Some(&store.stager), first)
        .await
        .unwrap();
    assert_eq!(packs().await, [first, second], "the first keep's pack stays");
    assert_eq!(folded_states(&store).await[0].1, 0, "nothing folded");
    store
        .keeps
        .fold_all(log_writer, Some(&store.stager), second)
        .await
        .unwrap();
    assert_eq!(
        packs().await,
        Vec::<i64>::new(),
        "both dropped once the newest is folded"
    );
    let folded = &folded_states(&store).await[0];
    assert_eq!((folded.1, folded.4.as_str()), (2, recent_text(&[1, 2]).as_str()));
    store.close().await;
}

/// A round cut short after its first move (a crash between two of its transactions): reads
/// stay exact before and after the store reopens, and the next round moves the rest without
/// moving anything twice.
#[tokio::test]
async fn a_round_cut_short_is_finished_by_the_next() {
    let dir = tempfile::tempdir().unwrap();
    let url = sqlite_url(dir.path());
    let store = open_store(&url).await.unwrap();
    // The background round waits: this test makes the round's first move itself.
    let held = store.mover.last_round.lock().await;
    store
        .append_events(&[event("dev-a", 1), event("dev-b", 2), event("dev-a", 3)])
        .await
        .unwrap();
    let expected_a = (2, vec![3, 1], vec![json!(3)]);
    let expected_b = (1, vec![2], vec![json!(2)]);
    let staged: Vec<i64> = sqlx::query_scalar("SELECT seq FROM staging.device_events_recent WHERE device_id = 'dev-a'")
        .fetch_all(&store.database.pool)
        .await
        .unwrap();
    let moved = move_devices(&store.database.writer, &staged, "dev-a", "dev-a", 3)
        .await
        .unwrap();
    assert_eq!(moved, 2);
    assert_eq!(
        read(&store, "dev-a").await,
        expected_a,
        "moved, not yet deleted from staging"
    );
    assert_eq!(read(&store, "dev-b").await, expected_b);
    EventEngine::close(&store).await;
    drop(held);
    drop(store);

    let store = open_store(&url).await.unwrap();
    assert_eq!(read(&store, "dev-a").await, expected_a, "after reopening");
    assert_eq!(read(&store, "dev-b").await, expected_b);
    store.catch_up().await.unwrap();
    let count = |table: &'static str| {
        let pool = store.database.pool.clone();
        async move {
            sqlx::query_scalar::<_, i64>(&format!("SELECT COUNT(*) FROM {table}"))
                .fetch_one(&pool)
                .await
                .unwrap()
        }
    };
    let counts = || async {
        (
            count("device_events").await,
            count("staging.device_events_recent").await,
            count("device_events_recent_moved").await,
        )
    };
    assert_eq!(counts().await.0, 3, "each event moved once");
    assert_eq!(read(&store, "dev-a").await, expected_a, "after the next round");
    assert_eq!(read(&store, "dev-b").await, expected_b);
    // The round after, once the moves have settled, deletes what was moved from staging.
    tokio::time::sleep(DELETE_MOVED_AFTER).await;
    store.catch_up().await.unwrap();
    assert_eq!(counts().await, (3, 0, 0), "staging emptied, records cleared");
    let syncs: i64 = sqlx::query_scalar("SELECT syncs FROM main.round_syncs")
        .fetch_one(&store.database.pool)
        .await
        .unwrap();
    // The background round may have deleted too.
    assert!(syncs >= 1, "a round that deleted moved rows synced the main file");
    assert_eq!(read(&store, "dev-a").await, expected_a, "after the deletes");
    assert_eq!(read(&store, "dev-b").await, expected_b);
}

/// An event deleted after a round moved it, while its staged row waits for the next round to be
/// deleted, is gone for every read: found neither by id nor deleted twice.
#[tokio::test]
async fn a_moved_event_deleted_before_its_staged_row_goes_stays_deleted() {
    let dir = tempfile::tempdir().unwrap();
    let store = open_store(&sqlite_url(dir.path())).await.unwrap();
    // The background round waits: this test makes the move itself.
    let _held = store.mover.last_round.lock().await;
    let gone = event("dev-a", 1);
    let (tenant, id) = (gone.tenant_id.clone(), gone.id.clone());
    store.append_events(&[gone, event("dev-a", 2)]).await.unwrap();
    let staged: Vec<i64> = sqlx::query_scalar("SELECT seq FROM staging.device_events_recent")
        .fetch_all(&store.database.pool)
        .await
        .unwrap();
    let moved = move_devices(&store.database.writer, &staged, "dev-a", "dev-a", 2)
        .await
        .unwrap();
    assert_eq!(moved, 2);
    assert!(
        store.get_event(&tenant, &id).await.unwrap().is_some(),
        "moved, still found"
    );
    assert!(
        store.delete_event(&tenant, &id).await.unwrap(),
        "the first delete finds it"
    );
    assert_eq!(store.get_event(&tenant, &id).await.unwrap(), None, "deleted, not found");
    assert!(
        !store.delete_event(&tenant, &id).await.unwrap(),
        "a second delete finds nothing"
    );
    assert_eq!(
        read(&store, "dev-a").await.1,
        vec![2],
        "the listing has the other event alone"
    );
}

/// While API writes come (a control's event log), a round moves in short transactions, each of
/// which such a write may have to wait for; without them, in long ones. Counted by the round's
/// records, one per move.
#[tokio::test]
async fn moves_are_short_while_api_writes_come() {
    let dir = tempfile::tempdir().unwrap();
    let store = open_store(&sqlite_url(dir.path())).await.unwrap();
    // The background round waits: this test runs the rounds itself, and reads the records before a next
    // round clears them.
    let mut last_round = store.mover.last_round.lock().await;
    let devices = ["dev-a", "dev-b", "dev-c"];
    let mut ts = 0;
    let mut stage = || {
        let events: Vec<DeviceEvent> = devices
            .iter()
            .flat_map(|device| (0..ROWS_PER_SHORT_MOVE + 100).map(move |i| (device, i)))
            .map(|(device, i)| event(device, ts + i as i64))
            .collect();
        ts += events.len() as i64;
        events
    };
    let moves = || async {
        sqlx::query_scalar::<_, i64>(
            "SELECT COUNT(*) FROM device_events_recent_moved \
             WHERE through = (SELECT MAX(through) FROM device_events_recent_moved)",
        )
        .fetch_one(&store.database.pool)
        .await
        .unwrap()
    };

    store.append_events(&stage()).await.unwrap();
    round_held(&store.mover, &mut last_round, None).await.unwrap();
    assert_eq!(moves().await, 1, "no API write yet: one move");

    // An API write, as `SqlStore::begin_write` makes one.
    store.database.api_writes.asking();
    let mut tx = store.database.writer.begin().await.unwrap();
    sqlx::query("INSERT INTO tenants (id, name, created_by, created_time, deleted) VALUES ('t', 't', 'system', 0, 0)")
        .execute(&mut *tx)
        .await
        .unwrap();
    tx.commit().await.unwrap();
    store.append_events(&stage()).await.unwrap();
    round_held(&store.mover, &mut last_round, None).await.unwrap();
    assert_eq!(moves().await, 3, "after an API write: one move per device");
    assert_eq!(read(&store, "dev-c").await.0, 2 * (ROWS_PER_SHORT_MOVE as u64 + 100));
}

/// While API writes come, a short move takes what the writer moves in about `SHORT_MOVE`, at
/// most `ROWS_PER_SHORT_MOVE`, and splits a device's events where they are more, each part with
/// a record of its own. Every event is read once after the round, the shadow holds the newest, and
/// the next round deletes the moved rows.
#[tokio::test]
async fn short_moves_split_a_devices_events() {
    let dir = tempfile::tempdir().unwrap();
    let store = open_store(&sqlite_url(dir.path())).await.unwrap();
    let mut last_round = store.mover.last_round.lock().await;
    let per_device = ROWS_PER_SHORT_MOVE as i64 + 100;
    let events: Vec<DeviceEvent> = ["dev-a", "dev-b"]
        .iter()
        .flat_map(|device| (0..per_device).map(move |ts| event(device, ts)))
        .collect();
    store.append_events(&events).await.unwrap();
    store.database.api_writes.asking();
    round_held(&store.mover, &mut last_round, None).await.unwrap();
    let records: Vec<(String, String, i64)> =
        sqlx::query_as("SELECT device_lo, device_hi, through FROM device_events_recent_moved ORDER BY through")
            .fetch_all(&store.database.pool)
            .await
            .unwrap();
    assert!(
        records.len() >= 4,
        "{} moves of at most {ROWS_PER_SHORT_MOVE} rows",
        records.len()
    );
    let parts = records.iter().filter(|(lo, hi, _)| lo == hi).count();
    assert!(parts >= 4, "{parts} parts of a device's events");
    for device in ["dev-a", "dev-b"] {
        let (total, newest, shadow) = read(&store, device).await;
        assert_eq!(total, per_device as u64, "{device}: every event once");
        assert_eq!(newest[0], per_device - 1, "{device}: newest first");
        assert_eq!(shadow, vec![json!(per_device - 1)], "{device}: the shadow");
    }
    round_held(&store.mover, &mut last_round, None).await.unwrap();
    let staged: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM staging.device_events_recent")
        .fetch_one(&store.database.pool)
        .await
        .unwrap();
    assert_eq!(staged, 0, "the next round deleted the moved rows");
    assert_eq!(read(&store, "dev-b").await.0, per_device as u64);
}

/// While API writes keep coming a few milliseconds apart (a series of controls), a round holds
/// its moves back; once they stop it moves. A stream of them that never stops delays a round by
/// a bounded time, never stops it.
#[tokio::test]
async fn a_round_waits_for_a_gap_between_api_writes() {
    let dir = tempfile::tempdir().unwrap();
    let store = open_store(&sqlite_url(dir.path())).await.unwrap();
    // The background round waits: this test runs the rounds itself.
    let mut last_round = store.mover.last_round.lock().await;
    let moved = || async {
        sqlx::query_scalar::<_, i64>("SELECT COUNT(*) FROM main.device_events")
            .fetch_one(&store.database.pool)
            .await
            .unwrap()
    };
    // API writes every millisecond until `stop` is set, from a thread of their own, each also
    // counting for a while ahead (`asking_at`), longer than `YIELD_QUIET`: a stall of this
    // thread on a loaded machine (the other tests run beside) is no gap between them.
    let keep_asking = |stop: Arc<AtomicBool>| {
        let api_writes = store.database.api_writes.clone();
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                api_writes.asking_at(std::time::Instant::now() + Duration::from_millis(20));
                std::thread::sleep(Duration::from_millis(1));
            }
        })
    };

    let stop = Arc::new(AtomicBool::new(false));
    let asking = keep_asking(stop.clone());
    store
        .append_events(&[event("dev-a", 1), event("dev-a", 2)])
        .await
        .unwrap();
    let watching = async {
        tokio::time::sleep(Duration::from_millis(300)).await;
        let during = moved().await;
        stop.store(true, Ordering::Relaxed);
        during
    };
    let (round, during) = tokio::join!(round_held(&store.mover, &mut last_round, None), watching);
    asking.join().unwrap();
    assert_eq!(during, 0, "no move while API writes come");
    assert_eq!(round.unwrap(), 2, "moved once they stopped");

    // Writes that never stop: the round still moves.
    let stop = Arc::new(AtomicBool::new(false));
    let asking = keep_asking(stop.clone());
    store.append_events(&[event("dev-b", 3)]).await.unwrap();
    let round = tokio::time::timeout(Duration::from_secs(10), round_held(&store.mover, &mut last_round, None)).await;
    stop.store(true, Ordering::Relaxed);
    asking.join().unwrap();
    assert_eq!(round.expect("the round ends while API writes go on").unwrap(), 1);
    assert_eq!(moved().await, 3);
}

/// A sync commits a change to the main file: a connection reading the file sees a new
/// version of it (`data_version`), so the commit wrote pages and flushed the WAL. An UPDATE
/// that leaves its row as it was commits no change, and so flushes nothing: why a sync counts.
#[tokio::test]
async fn a_sync_commits_a_change_to_the_main_file() {
    async fn version(conn: &mut sqlx::AnyConnection) -> i64 {
        sqlx::query_scalar("PRAGMA main.data_version")
            .fetch_one(conn)
            .await
            .unwrap()
    }
    let dir = tempfile::tempdir().unwrap();
    let store = open_store(&sqlite_url(dir.path())).await.unwrap();
    let _round = store.mover.last_round.lock().await;
    let mut reader = store.database.pool.acquire().await.unwrap();
    let before = version(&mut reader).await;
    sync_main(&store.database.writer).await.unwrap();
    let synced = version(&mut reader).await;
    assert_ne!(synced, before, "the first sync");
    sqlx::query("UPDATE main.round_syncs SET syncs = syncs")
        .execute(&store.database.writer)
        .await
        .unwrap();
    assert_eq!(version(&mut reader).await, synced, "an unchanged row");
    sync_main(&store.database.writer).await.unwrap();
    assert_ne!(version(&mut reader).await, synced, "the second sync");
    let syncs: i64 = sqlx::query_scalar("SELECT syncs FROM main.round_syncs")
        .fetch_one(&store.database.writer)
        .await
        .unwrap();
    assert_eq!(syncs, 2);
}

/// A move commits unsynced on the writer's connection and sets it back to FULL after: the
/// API's writes that take the connection next are synced.
#[tokio::test]
async fn the_writer_is_synced_again_after_a_move() {
    let dir = tempfile::tempdir().unwrap();
    let store = open_store(&sqlite_url(dir.path())).await.unwrap();
    let _round = store.mover.last_round.lock().await;
    store
        .append_events(&[event("dev-a", 1), event("dev-a", 2)])
        .await
        .unwrap();
    let moved = move_devices(&store.database.writer, &[1, 2], "dev-a", "dev-a", 2)
        .await
        .unwrap();
    assert_eq!(moved, 2);
    assert_eq!(pragma(&store.database.writer, "main.synchronous").await, 2, "FULL");
    assert_eq!(read(&store, "dev-a").await, (2, vec![2, 1], vec![json!(2)]));
}

/// The stager commits the staging file without waiting for the disk (NORMAL), every other
/// connection with FULL; an ingest commit is answered after the flusher's flush, and its
/// events are in the index then. A delete of moved rows needs the flusher too.
#[tokio::test]
async fn the_stager_commits_unsynced_and_the_flusher_flushes() {
    let dir = tempfile::tempdir().unwrap();
    let store = open_store(&sqlite_url(dir.path())).await.unwrap();
    let _round = store.mover.last_round.lock().await;
    let flusher = store.mover.flusher.clone();
    flusher.stats().taken();
    let events = [event("dev-a", 1), event("dev-a", 2), event("dev-a", 3)];
    store.append_events(&events).await.unwrap();
    let taken = flusher.stats().taken();
    assert!(taken.flushes >= 1 && taken.requests == 1, "{taken:?}");
    assert_eq!(store.staged().seq_of(events[2].id.as_str()), Some(3));
    assert_eq!(pragma(&store.stager, "staging.synchronous").await, 1, "NORMAL");
    assert_eq!(pragma(&store.database.writer, "staging.synchronous").await, 2, "FULL");
    assert_eq!(pragma(&store.database.pool, "staging.synchronous").await, 2, "FULL");
    delete_moved(&store.stager, 0, 2).await.unwrap();
    let left: Vec<i64> = sqlx::query_scalar("SELECT seq FROM staging.device_events_recent")
        .fetch_all(&store.database.pool)
        .await
        .unwrap();
    assert_eq!(left, vec![3]);
}

/// A new staging file has small pages (`STAGING_PAGE_SIZE`); one written before keeps its
/// pages, and ingest and the moves go on with it.
#[tokio::test]
async fn a_new_staging_file_has_small_pages_and_an_old_one_keeps_its_own() {
    let dir = tempfile::tempdir().unwrap();
    let store = open_store(&sqlite_url(dir.path())).await.unwrap();
    assert_eq!(pragma(&store.database.pool, "staging.page_size").await, 2048);
    EventEngine::close(&store).await;

    let old = tempfile::tempdir().unwrap();
    let options = sqlx::sqlite::SqliteConnectOptions::new()
        .filename(old.path().join("gantry-staging.db"))
        .create_if_missing(true)
        .page_size(4096)
        .journal_mode(sqlx::sqlite::SqliteJournalMode::Wal);
    let mut file = sqlx::ConnectOptions::connect(&options).await.unwrap();
    // Its page size is set once something is written.
    sqlx::query("CREATE TABLE earlier (x)")
        .execute(&mut file)
        .await
        .unwrap();
    sqlx::Connection::close(file).await.unwrap();
    let store = open_store(&sqlite_url(old.path())).await.unwrap();
    assert_eq!(pragma(&store.database.pool, "staging.page_size").await, 4096);
    store
        .append_events(&[event("dev-a", 1), event("dev-a", 2)])
        .await
        .unwrap();
    // This round or the background's moves them.
    store.catch_up().await.unwrap();
    let moved: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM main.device_events")
        .fetch_one(&store.database.pool)
        .await
        .unwrap();
    assert_eq!(moved, 2);
    assert_eq!(read(&store, "dev-a").await, (2, vec![2, 1], vec![json!(2)]));
}
