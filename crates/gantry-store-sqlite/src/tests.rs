//! The engine's own tests: what opening, keeps and upgrades leave in its files.

use super::*;

/// A second store on the same file waits for the first to close, and gives up with an error
/// that names the file when it does not. The first is not dropped: `close` lets the file go.
#[tokio::test]
async fn one_store_at_a_time_has_a_database_file() {
    let dir = tempfile::tempdir().unwrap();
    let url = sqlite_url(dir.path());
    let first = connect(&url).await.unwrap();
    let refused = file::Lock::take(&url, Duration::ZERO).await.unwrap_err().to_string();
    assert!(refused.contains("gantry.db is open in another Gantry"), "{refused}");
    let second = tokio::spawn({
        let url = url.clone();
        async move { connect(&url).await }
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!second.is_finished(), "the second store waits for the first");
    first.close().await;
    let second = tokio::time::timeout(Duration::from_secs(5), second)
        .await
        .expect("the second store opens once the first is gone")
        .unwrap();
    assert!(second.is_ok());
}

fn control(id: &str) -> gantry_core::event_log::EventLog {
    use gantry_core::enums::{Classification, EventLogStatus};
    use gantry_core::ids::{DeviceId, ProjectId, TenantId};
    gantry_core::event_log::EventLog {
        id: id.to_owned(),
        tenant_id: TenantId::from_string("t"),
        project_id: ProjectId::from_string("p"),
        status: EventLogStatus::Processing,
        classification: Classification::DeviceControll,
        device_id: DeviceId::from_string("d"),
        device_name: "crane".to_owned(),
        event_data: serde_json::json!({"meta": {"id": id}}),
        context_id: None,
        responses: Vec::new(),
        event_id: id.to_owned(),
        created_by: "admin".to_owned(),
        created_time: 1,
        updated_by: None,
        updated_time: None,
        deleted: false,
        expires_time: None,
        delivered_time: None,
        reason: None,
        reply_to: None,
    }
}

/// A control's event-log writes go on while the main file's writer is held (as a move of
/// telemetry holds it): the event logs have a file and a writer of their own.
#[tokio::test]
async fn event_logs_are_written_while_the_main_writer_is_held() {
    use gantry_core::store::EventLogStore;
    let dir = tempfile::tempdir().unwrap();
    let connected = engine(&sqlite_url(dir.path()), Chores::alone()).await.unwrap();
    let writer = connected.writer.clone();
    let store = SqlStore::from_engine(connected);
    let mut held = writer.begin().await.unwrap();
    sqlx::query(
        "INSERT INTO main.round_syncs (id, syncs) VALUES (1, 1) ON CONFLICT (id) DO UPDATE SET syncs = syncs + 1",
    )
    .execute(&mut *held)
    .await
    .unwrap();
    let log = control("c-1");
    const WITHIN: Duration = Duration::from_secs(5);
    let waited = "written without waiting for the main file's writer";
    tokio::time::timeout(WITHIN, store.insert_event_log(&log, Some(i64::MAX), Default::default()))
        .await
        .expect(waited)
        .unwrap();
    let response = serde_json::json!({"ok": true});
    let ack = store.record_ack(&log.tenant_id, &log.device_id, "c-1", &response, 2, Default::default());
    let acked = tokio::time::timeout(WITHIN, ack)
        .await
        .expect(waited)
        .unwrap()
        .expect("the control is found");
    assert_eq!(acked.status, gantry_core::enums::EventLogStatus::Completed);
    held.commit().await.unwrap();
    store.close().await;
}

/// An alarm plan is committed while the main file's writer is held (as a move of telemetry
/// holds it): alarms are in the event-log file, written through its writer.
#[tokio::test]
async fn alarm_plans_are_written_while_the_main_writer_is_held() {
    use gantry_core::alarm::{AlarmState, Raiser, SubjectParts, Trigger, fold};
    use gantry_core::ids::{DeviceId, ProjectId, TenantId};
    use gantry_core::store::{AlarmPlan, AlarmStore};
    let dir = tempfile::tempdir().unwrap();
    let connected = engine(&sqlite_url(dir.path()), Chores::alone()).await.unwrap();
    let writer = connected.writer.clone();
    let checkpoint_at: i64 = sqlx::query_scalar("PRAGMA wal_autocheckpoint")
        .fetch_one(&connected.log_writer)
        .await
        .unwrap();
    assert_eq!(
        checkpoint_at, 4000,
        "the event-log writer checkpoints as seldom as the main one"
    );
    let store = SqlStore::from_engine(connected);
    let subject = SubjectParts {
        tenant: TenantId::from_string("t"),
        project: ProjectId::from_string("p"),
        device: DeviceId::from_string("d"),
        device_name: "crane".to_owned(),
        metadata: Default::default(),
    };
    let jammed = Trigger::Reading {
        value: serde_json::json!(true),
        device_time: 1,
        arrival: 1,
        message: None,
    };
    let raiser = Raiser::Device("jam");
    let transition = fold(raiser, &subject.subject(), &AlarmState::default(), None, &[jammed]).expect("a raise");
    let plan = AlarmPlan {
        tenant: subject.tenant.clone(),
        device: subject.device.clone(),
        steps: vec![(raiser.key(), transition)],
        webhooks: Default::default(),
    };
    let mut held = writer.begin().await.unwrap();
    sqlx::query(
        "INSERT INTO main.round_syncs (id, syncs) VALUES (1, 1) ON CONFLICT (id) DO UPDATE SET syncs = syncs + 1",
    )
    .execute(&mut *held)
    .await
    .unwrap();
    let written = tokio::time::timeout(Duration::from_secs(5), store.commit_alarm_plans(vec![plan]))
        .await
        .expect("written without waiting for the main file's writer")
        .unwrap();
    assert!(written[0].as_ref().is_some_and(|w| w[0].new));
    held.commit().await.unwrap();
    store.close().await;
}

/// An alarm keep committed with its events is what every read shows at once and after a
/// restart, before any fold; a transition written later starts from it (the keep folded in
/// first), and folding it again changes nothing.
#[tokio::test]
async fn a_keep_is_read_before_its_fold_and_folded_once() {
    use gantry_core::alarm::{AlarmState, fold};
    use gantry_core::enums::{AlarmStatus, Channel, DataType};
    use gantry_core::event::DeviceEvent;
    use gantry_core::ids::{EventId, ModelId};
    use gantry_core::store::{AlarmKeep, AlarmStore, EventStore};
    let dir = tempfile::tempdir().unwrap();
    let url = sqlite_url(dir.path());
    let (subject, raiser, key) = jammed();
    let store = connect(&url).await.unwrap();
    let (alarm_id, state, open) = raise_jam(&store).await;
    let kept = fold(
        raiser,
        &subject.subject(),
        &state,
        open.as_ref(),
        &[jam(true, 2), jam(true, 3)],
    )
    .expect("a keep");
    assert!(kept.writes.iter().all(|w| !w.new && w.history.is_empty()), "{kept:?}");
    let after = AlarmState {
        version: kept.state.version + 1,
        ..kept.state.clone()
    };
    let keep = AlarmKeep {
        device: subject.device.clone(),
        key: key.clone(),
        after: std::sync::Arc::new((after, kept.writes.last().map(|w| w.alarm.clone()))),
        remembered: kept.state.remembered_since(&state),
    };
    let event = DeviceEvent {
        id: EventId::generate(),
        tenant_id: subject.tenant.clone(),
        project_id: subject.project.clone(),
        model_id: ModelId::from_string("m"),
        device_id: subject.device.clone(),
        attribute_code: "jam".to_owned(),
        attribute_type: DataType::Boolean,
        attribute_data: serde_json::json!(true),
        channel: Channel::W,
        ingress_time_stamp: 3,
        device_timestamp: 3,
        correlation_id: None,
        context: None,
        created_by: "DEVICE".to_owned(),
        created_time: 3,
        deleted: false,
    };
    assert!(store.keeps_alarms_with_events());
    store
        .commit_events_keeping(std::slice::from_ref(&event), &[], &[keep])
        .await
        .unwrap()
        .await
        .unwrap();
    let count = |alarm: Option<gantry_core::alarm::Alarm>| alarm.map(|a| (a.count, a.last_event_time, a.status));
    // An evaluation's snapshot finds the keep laid over what is stored, before any fold.
    let [(state, open)]: [_; 1] = store
        .alarm_snapshot(&subject.device, std::slice::from_ref(&key))
        .await
        .unwrap()
        .try_into()
        .unwrap();
    assert_eq!(
        (state.version, state.last_time, count(open)),
        (kept.state.version + 1, Some(3), Some((3, 3, AlarmStatus::Active))),
        "the snapshot shows the keep"
    );
    let read = store.get_alarm(&subject.tenant, &alarm_id).await.unwrap();
    assert_eq!(
        count(read),
        Some((3, 3, AlarmStatus::Active)),
        "the keep is read before its fold"
    );
    store.close().await;
    let store = connect(&url).await.unwrap();
    let read = store.get_alarm(&subject.tenant, &alarm_id).await.unwrap();
    assert_eq!(count(read), Some((3, 3, AlarmStatus::Active)), "and after a restart");
    let [(state, open)]: [_; 1] = store
        .alarm_snapshot(&subject.device, std::slice::from_ref(&key))
        .await
        .unwrap()
        .try_into()
        .unwrap();
    assert_eq!(
        (state.version, open.map(|a| a.count)),
        (kept.state.version + 1, Some(3))
    );
    // A clear written over the stored state: the keep is folded in first, so the state it is
    // written over is the keep's, and the cleared alarm keeps the keep's count.
    let clear = |state: &AlarmState, open: Option<&gantry_core::alarm::Alarm>| {
        fold(raiser, &subject.subject(), state, open, &[jam(false, 4)])
    };
    let cleared = store
        .apply_alarm_step(&subject.tenant, &subject.device, &key, &clear, Default::default())
        .await
        .unwrap();
    assert_eq!(cleared[0].alarm.status, AlarmStatus::Cleared);
    let read = store.get_alarm(&subject.tenant, &alarm_id).await.unwrap();
    assert_eq!(count(read), Some((3, 3, AlarmStatus::Cleared)));
    store.close().await;
    let store = connect(&url).await.unwrap();
    let read = store.get_alarm(&subject.tenant, &alarm_id).await.unwrap();
    assert_eq!(
        count(read),
        Some((3, 3, AlarmStatus::Cleared)),
        "the keep is not laid over the clear"
    );
    store.close().await;
}

/// Keeps staged before they were packed (the staging file's table of one row per key, of a
/// store stopped before its fold) are folded when the upgraded store opens: a count an event
/// was acknowledged for is not lost, and no pack is left.
#[tokio::test]
async fn an_upgrade_folds_the_keeps_staged_one_row_per_key() {
    use gantry_core::store::AlarmStore;
    use sqlx::Connection;
    let dir = tempfile::tempdir().unwrap();
    let url = sqlite_url(dir.path());
    let (subject, _, key) = jammed();
    let store = connect(&url).await.unwrap();
    let (alarm_id, state, _) = raise_jam(&store).await;
    store.close().await;
    // The staging file as the release before packs left it: its keeps table with one row.
    let mut conn = sqlx::AnyConnection::connect(&url).await.unwrap();
    let staging = staging::staging_file(&url).unwrap();
    sqlx::raw_sql(&staging.attach).execute(&mut conn).await.unwrap();
    let before =
        include_str!("../migrations/staging/0008_alarm_keeps.sql").replace("CREATE TABLE ", "CREATE TABLE staging.");
    sqlx::raw_sql(&format!(
        "DROP TABLE staging.alarm_keep_packs; DELETE FROM staging._sqlx_migrations WHERE version = 12; {before}"
    ))
    .execute(&mut conn)
    .await
    .unwrap();
    sqlx::query(
        "INSERT INTO staging.alarm_keeps (device_id, alarm_key, version, levels, last_time, recent, no_data, \
             alarm_id, count, value, last_event_time, updated_time, seq) \
         VALUES ('d', ?, ?, '[]', 9, '[]', 0, ?, 5, 'true', 9, 9, 0)",
    )
    .bind(&key)
    .bind(state.version + 1)
    .bind(alarm_id.as_str())
    .execute(&mut conn)
    .await
    .unwrap();
    conn.close().await.unwrap();
    let store = connect(&url).await.unwrap();
    let read = store.get_alarm(&subject.tenant, &alarm_id).await.unwrap().unwrap();
    assert_eq!((read.count, read.last_event_time), (5, 9), "the keep is folded");
    let [(folded, _)]: [_; 1] = store
        .alarm_snapshot(&subject.device, std::slice::from_ref(&key))
        .await
        .unwrap()
        .try_into()
        .unwrap();
    assert_eq!((folded.version, folded.last_time), (state.version + 1, Some(9)));
    store.close().await;
    let mut conn = sqlx::AnyConnection::connect(&url).await.unwrap();
    sqlx::raw_sql(&staging.attach).execute(&mut conn).await.unwrap();
    let packs: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM staging.alarm_keep_packs")
        .fetch_one(&mut conn)
        .await
        .unwrap();
    assert_eq!(packs, 0, "and its pack dropped");
    conn.close().await.unwrap();
}

/// A store opened on a database whose main file was migrated up to `version` (its other
/// files as they are now, as an upgrade finds them once `open` has migrated them first),
/// after `row` was written into it.
async fn upgraded_from(version: i64, row: &str) -> (tempfile::TempDir, StagingEvents) {
    use sqlx::Connection;
    sqlx::any::install_default_drivers();
    let dir = tempfile::tempdir().unwrap();
    let url = sqlite_url(dir.path());
    file::create_database_file(&url).unwrap();
    let before = sqlx::migrate::Migrator {
        migrations: MIGRATOR
            .migrations
            .iter()
            .filter(|m| m.version <= version)
            .cloned()
            .collect(),
        ..sqlx::migrate::Migrator::DEFAULT
    };
    let event_logs = logs::logs_file(&url).unwrap();
    logs::migrate(&event_logs).await.unwrap();
    let mut conn = sqlx::AnyConnection::connect(&url).await.unwrap();
    sqlx::raw_sql(&event_logs.attach).execute(&mut conn).await.unwrap();
    before.run_direct(&mut conn).await.unwrap();
    sqlx::query(row).execute(&mut conn).await.unwrap();
    conn.close().await.unwrap();
    let events = open(&url, Chores::alone()).await.unwrap();
    (dir, events)
}

/// A database made before alarms moved to the event-log file keeps its alarms: the upgrade
/// copies them there and drops the main file's tables.
#[tokio::test]
async fn an_upgrade_moves_the_alarms_with_their_rows() {
    use gantry_store::engine::EventEngine as _;
    let (_dir, events) = upgraded_from(
        4,
        "INSERT INTO main.alarm_states (alarm_key, device_id, tenant_id, levels, recent, no_data, version) \
         VALUES ('attribute:jam', 'd', 't', '[]', '[]', 0, 3)",
    )
    .await;
    let pool = events.database().pool.clone();
    let in_main: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM main.sqlite_master WHERE name LIKE 'alarm%s'")
        .fetch_one(&pool)
        .await
        .unwrap();
    let version: i64 = sqlx::query_scalar("SELECT version FROM logs.alarm_states WHERE device_id = 'd'")
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!((in_main, version), (1, 3), "alarm_rules alone stays in the main file");
    events.close().await;
}

/// A database made before the audit log moved to the event-log file keeps its records.
#[tokio::test]
async fn an_upgrade_moves_the_audit_log_with_its_records() {
    use gantry_store::engine::EventEngine as _;
    let (_dir, events) = upgraded_from(
        8,
        "INSERT INTO main.audit_logs (id, tenant_id, created_time, principal_type, principal_id, principal_name, \
         resource_type, action, outcome, changed_fields) \
         VALUES ('a1', 't', 1, 'USER', 'u', 'alice', 'device', 'control', 'SUCCESS', '[]')",
    )
    .await;
    let pool = events.database().pool.clone();
    let in_main: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM main.sqlite_master WHERE name = 'audit_logs'")
        .fetch_one(&pool)
        .await
        .unwrap();
    let moved: String = sqlx::query_scalar("SELECT principal_name FROM logs.audit_logs WHERE id = 'a1'")
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!((in_main, moved.as_str()), (0, "alice"));
    events.close().await;
}

/// A webhook's delivery records (taking its events, each attempt) are background writes:
/// they leave the mover's moves long (`ApiWrites`), where a webhook whose receiver is down,
/// retrying all along, would keep them short and multiply the moves. A catalog write still
/// makes them short.
#[tokio::test]
async fn delivery_records_leave_the_moves_long() {
    use gantry_core::enums::DeliveryStatus;
    use gantry_core::ids::{DeliveryId, TenantId, WebhookId};
    use gantry_core::store::WebhookStore;
    use gantry_core::webhook::Delivery;
    let dir = tempfile::tempdir().unwrap();
    let connected = engine(&sqlite_url(dir.path()), Chores::alone()).await.unwrap();
    let (writer, api_writes) = (connected.writer.clone(), connected.api_writes.clone());
    let store = SqlStore::from_engine(connected);
    sqlx::query(
        "INSERT INTO webhooks (id, tenant_id, project_id, url, types, enabled, secret, created_by, created_time, slot) \
         VALUES ('w', 't', 'p', 'http://127.0.0.1:9/', 'telemetry', 1, 's', 'admin', 1, 0)",
    )
    .execute(&writer)
    .await
    .unwrap();
    let long_ago = std::time::Instant::now() - Duration::from_secs(60);
    api_writes.asking_at(long_ago);
    let mut delivery = Delivery {
        id: DeliveryId::generate(),
        webhook_id: WebhookId::from_string("w"),
        tenant_id: TenantId::from_string("t"),
        status: DeliveryStatus::Pending,
        event_count: 0,
        attempts: 0,
        last_http_status: None,
        last_error: None,
        created_time: 1,
        first_attempt_time: None,
        last_attempt_time: None,
        next_attempt_time: Some(1),
        finished_time: None,
        body: "[]".to_owned(),
    };
    store.insert_delivery(&delivery, &[]).await.unwrap();
    delivery.attempts = 1;
    delivery.last_error = Some("connection refused".to_owned());
    store.update_delivery(&delivery).await.unwrap();
    let pending = store
        .pending_delivery(&delivery.webhook_id)
        .await
        .unwrap()
        .expect("stored");
    assert_eq!(
        (pending.attempts, pending.last_error.as_deref()),
        (1, Some("connection refused"))
    );
    let since = api_writes.since().expect("set above");
    assert!(
        since >= Duration::from_secs(59),
        "a delivery record counted as an API write: {since:?}"
    );
    let mut webhook = store
        .get_webhook(&TenantId::from_string("t"), &WebhookId::from_string("w"))
        .await
        .unwrap()
        .expect("stored");
    webhook.description = Some("crane alarms".to_owned());
    store.update_webhook(&webhook).await.unwrap();
    assert!(
        api_writes.asked_within(Duration::from_secs(5)),
        "a catalog write is an API write"
    );
    store.close().await;
}

/// The device "d" (of tenant "t" and project "p") whose device alarm "jam" the keep tests raise:
/// the subject, the raiser and its key.
fn jammed() -> (
    gantry_core::alarm::SubjectParts,
    gantry_core::alarm::Raiser<'static>,
    String,
) {
    use gantry_core::ids::{DeviceId, ProjectId, TenantId};
    let subject = gantry_core::alarm::SubjectParts {
        tenant: TenantId::from_string("t"),
        project: ProjectId::from_string("p"),
        device: DeviceId::from_string("d"),
        device_name: "crane".to_owned(),
        metadata: Default::default(),
    };
    let raiser = gantry_core::alarm::Raiser::Device("jam");
    let key = raiser.key();
    (subject, raiser, key)
}

/// A reading of "jam" at `time` (device and arrival time), a message of its own.
fn jam(value: bool, time: i64) -> gantry_core::alarm::Trigger {
    gantry_core::alarm::Trigger::Reading {
        value: serde_json::json!(value),
        device_time: time,
        arrival: time,
        message: Some(gantry_core::alarm::MessageKey::of_text(&format!("m{time}"))),
    }
}

/// Raises "jam" in `store` by a reading at time 1: the alarm's id, and the key's state and open
/// alarm after it.
async fn raise_jam(
    store: &SqlStore,
) -> (
    gantry_core::ids::AlarmId,
    gantry_core::alarm::AlarmState,
    Option<gantry_core::alarm::Alarm>,
) {
    use gantry_core::store::AlarmStore;
    let (subject, raiser, key) = jammed();
    let raise = |state: &gantry_core::alarm::AlarmState, open: Option<&gantry_core::alarm::Alarm>| {
        gantry_core::alarm::fold(raiser, &subject.subject(), state, open, &[jam(true, 1)])
    };
    let raised = store
        .apply_alarm_step(&subject.tenant, &subject.device, &key, &raise, Default::default())
        .await
        .unwrap();
    let [(state, open)]: [_; 1] = store
        .alarm_snapshot(&subject.device, std::slice::from_ref(&key))
        .await
        .unwrap()
        .try_into()
        .unwrap();
    (raised[0].alarm.id.clone(), state, open)
}
