//! Device events, shadows and the kept counts: `EventStore`, and the SQLite engine's staging.

use super::*;

/// A listing of every event of `device`, by device time.
pub(crate) fn every_event_of(device: &Device) -> EventQuery {
    EventQuery {
        device: device.id.clone(),
        attribute_code: None,
        time_field: TimeField::Device,
        start: None,
        end: None,
    }
}

pub(crate) fn event_at(
    device: &Device,
    id: EventId,
    code: &str,
    value: serde_json::Value,
    device_ts: i64,
) -> DeviceEvent {
    DeviceEvent {
        id,
        tenant_id: device.record.tenant_id.clone(),
        project_id: device.project_id.clone(),
        model_id: device.model_id.clone(),
        device_id: device.id.clone(),
        attribute_code: code.to_owned(),
        attribute_type: DataType::Float,
        attribute_data: value,
        channel: Channel::M,
        ingress_time_stamp: 5_000,
        device_timestamp: device_ts,
        correlation_id: None,
        context: None,
        created_by: "DEVICE".to_owned(),
        created_time: 5_000,
        deleted: false,
    }
}

/// Appends `events` in batches of `batch`, each followed by a batch of `other`'s events at the
/// same device times.
pub(crate) async fn append_beside(store: &SqlStore, events: &[DeviceEvent], other: &Device, batch: usize) {
    for batch in events.chunks(batch) {
        store.append_events(batch).await.unwrap();
        let theirs: Vec<DeviceEvent> = batch
            .iter()
            .map(|e| event_at(other, EventId::generate(), "temp", json!(0), e.device_timestamp))
            .collect();
        store.append_events(&theirs).await.unwrap();
    }
}

/// Ingest commits its next batches before the last are on disk (`commit_events`, ingest.rs):
/// every batch is read, with its events in the listing and the shadow, once its durable future
/// resolves, whatever the batches after it are doing.
pub(crate) async fn commits_in_flight_are_read_once_durable(store: SqlStore) {
    let tenant = new_tenant(&store, "in-flight").await;
    let project = new_project(&store, &tenant, "p").await;
    let model = new_model(&store, &tenant, "m", DeviceType::Crane, false).await;
    let device = new_device(&store, &tenant, "d", &project, &model).await;
    let batches: Vec<Vec<DeviceEvent>> = (0..8)
        .map(|b| {
            (0..5)
                .map(|i| event_at(&device, EventId::generate(), "temp", json!(b * 5 + i), b * 5 + i))
                .collect()
        })
        .collect();
    let mut durable = Vec::new();
    for batch in &batches {
        durable.push(store.commit_events(batch, &[]).await.unwrap());
    }
    let query = every_event_of(&device);
    for (b, flushed) in durable.into_iter().enumerate() {
        flushed.await.unwrap();
        for event in &batches[b] {
            assert_eq!(
                store.get_event(&tenant, &event.id).await.unwrap().as_ref(),
                Some(event),
                "batch {b}"
            );
        }
        let listed = store.list_events(&query, all()).await.unwrap();
        assert!(listed.total >= (b as u64 + 1) * 5, "batch {b}: {}", listed.total);
    }
    let listed = store.list_events(&query, all()).await.unwrap();
    assert_eq!(listed.total, 40);
    let newest: Vec<i64> = listed.items.iter().map(|e| e.device_timestamp).take(3).collect();
    assert_eq!(newest, vec![39, 38, 37]);
    let shadow = store.shadow(&tenant, &device.id).await.unwrap();
    assert_eq!((shadow[0].0.value.clone(), shadow[0].0.timestamp), (json!(39), 39));
}

pub(crate) async fn events_list_by_window_and_feed_the_shadow(store: SqlStore) {
    let tenant = new_tenant(&store, "events").await;
    let project = new_project(&store, &tenant, "p").await;
    let model = new_model(&store, &tenant, "m", DeviceType::Crane, false).await;
    let device = new_device(&store, &tenant, "d", &project, &model).await;
    // one batch holds an older value after a newer one, and two values of one device time
    let batch: Vec<DeviceEvent> = [(1, 100), (2, 300), (3, 200), (4, 300)]
        .into_iter()
        .map(|(v, ts)| event_at(&device, EventId::generate(), "temp", json!(v), ts))
        .collect();
    store.append_events(&batch).await.unwrap();
    store
        .append_events(&[event_at(&device, EventId::generate(), "temp", json!(5), 250)])
        .await
        .unwrap();
    let shadow = store.shadow(&tenant, &device.id).await.unwrap();
    assert_eq!(shadow.len(), 1);
    assert_eq!(
        (shadow[0].0.value.clone(), shadow[0].0.timestamp),
        (json!(4), 300),
        "newest device time, later arrival on a tie"
    );

    let query = |start, end| EventQuery {
        device: device.id.clone(),
        attribute_code: None,
        time_field: TimeField::Device,
        start,
        end,
    };
    let page = store.list_events(&query(Some(200), Some(300)), all()).await.unwrap();
    assert_eq!(page.total, 4, "both ends inclusive");
    let times: Vec<i64> = page.items.iter().map(|e| e.device_timestamp).collect();
    assert_eq!(times, vec![300, 300, 250, 200]);
    let ties: Vec<&str> = page.items[..2].iter().map(|e| e.id.as_str()).collect();
    assert!(ties[0] > ties[1], "ties newest id first");
    assert_eq!(store.list_events(&query(None, Some(99)), all()).await.unwrap().total, 0);
    let other = new_tenant(&store, "other").await;
    assert!(
        store.shadow(&other, &device.id).await.unwrap().is_empty(),
        "tenant scoped"
    );

    // an unfiltered listing's total is the kept count, per device and per attribute
    let unfiltered = store.list_events(&query(None, None), all()).await.unwrap();
    assert_eq!((unfiltered.total, unfiltered.items.len()), (5, 5));
    let first = &page.items[0];
    assert_eq!(store.get_event(&tenant, &first.id).await.unwrap().as_ref(), Some(first));
    assert!(!store.delete_event(&other, &first.id).await.unwrap(), "tenant scoped");
    assert!(store.delete_event(&tenant, &first.id).await.unwrap());
    assert!(!store.delete_event(&tenant, &first.id).await.unwrap());
    assert_eq!(store.get_event(&tenant, &first.id).await.unwrap(), None);
    assert_eq!(store.list_events(&query(None, None), all()).await.unwrap().total, 4);
    store
        .append_events(&[event_at(&device, EventId::generate(), "other", json!(1), 1)])
        .await
        .unwrap();
    let by_attribute = |code: &str| EventQuery {
        attribute_code: Some(code.to_owned()),
        ..query(None, None)
    };
    assert_eq!(store.list_events(&by_attribute("temp"), all()).await.unwrap().total, 4);
    assert_eq!(store.list_events(&by_attribute("other"), all()).await.unwrap().total, 1);
    assert_eq!(store.list_events(&by_attribute("none"), all()).await.unwrap().total, 0);
    assert_eq!(store.list_events(&query(None, None), all()).await.unwrap().total, 5);
}

pub(crate) async fn retention_deletes_only_old_events(store: SqlStore) {
    let tenant = new_tenant(&store, "retention").await;
    let project = new_project(&store, &tenant, "p").await;
    let model = new_model(&store, &tenant, "m", DeviceType::Crane, false).await;
    let device = new_device(&store, &tenant, "d", &project, &model).await;
    let day = 86_400_000;
    let now = chrono_now();
    let old: Vec<DeviceEvent> = (0..7)
        .map(|i| {
            let id = EventId::lower_bound_at(now - 10 * day + i)
                .as_str()
                .replace("-8000-000000000000", &format!("-8000-{i:012}"));
            event_at(&device, EventId::from_string(id), "temp", json!(i), i)
        })
        .collect();
    store.append_events(&old).await.unwrap();
    store
        .append_events(&[event_at(&device, EventId::generate(), "temp", json!(99), 1)])
        .await
        .unwrap();
    assert_eq!(
        store.delete_events_before(now - day, 5).await.unwrap(),
        5,
        "batches are bounded"
    );
    assert_eq!(store.delete_events_before(now - day, 5).await.unwrap(), 2);
    assert_eq!(store.delete_events_before(now - day, 5).await.unwrap(), 0);
    let left = store.list_events(&every_event_of(&device), all()).await.unwrap();
    assert_eq!(
        left.items.iter().map(|e| e.attribute_data.clone()).collect::<Vec<_>>(),
        vec![json!(99)]
    );
    assert_eq!(left.total, 1, "the kept count follows the deletions");
}

pub(crate) fn chrono_now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
}

/// Several writers (nodes sharing one database) append batches that touch the same shadows and
/// counts in different orders, while rounds move staged events back to back (SQLite): all commit,
/// and the counts add up.
pub(crate) async fn concurrent_batches_on_the_same_devices(store: SqlStore) {
    let tenant = new_tenant(&store, "writers").await;
    let project = new_project(&store, &tenant, "p").await;
    let model = new_model(&store, &tenant, "m", DeviceType::Crane, false).await;
    let mut devices = Vec::new();
    for i in 0..6 {
        devices.push(new_device(&store, &tenant, &format!("d{i}"), &project, &model).await);
    }
    let writers: Vec<_> = (0..8)
        .map(|w| {
            let store = store.clone();
            let mut order = devices.clone();
            if w % 2 == 1 {
                order.reverse();
            }
            tokio::spawn(async move {
                for round in 0..10 {
                    let batch: Vec<DeviceEvent> = order
                        .iter()
                        .map(|d| event_at(d, EventId::generate(), "temp", json!(w), round))
                        .collect();
                    store.append_events(&batch).await.unwrap();
                }
            })
        })
        .collect();
    let rounds = MovingRounds::start(&store);
    for writer in writers {
        writer.await.expect("no writer failed");
    }
    rounds.stop().await;
    store.catch_up().await.unwrap();
    for device in &devices {
        let query = every_event_of(device);
        assert_eq!(store.list_events(&query, all()).await.unwrap().total, 80);
    }
}

/// The ingest pipeline (ingest.rs) with the writers the store asks for (two on PostgreSQL,
/// one on SQLite): each device's submissions are committed in the order they were queued, so with
/// equal device times each shadow ends at the device's last queued value; closing the pipeline
/// commits everything it accepted before the writers end. The observer of durable batches (the
/// push stream's source) sees every event once, in commit order: with one writer that is the
/// order they were queued in, with several each device's.
pub(crate) async fn ingest_keeps_each_devices_order(store: SqlStore) {
    use gantry_core::ingest::{Ingest, IngestConfig};
    let tenant = new_tenant(&store, "ingest-order").await;
    let project = new_project(&store, &tenant, "p").await;
    let model = new_model(&store, &tenant, "m", DeviceType::Crane, false).await;
    let mut devices = Vec::new();
    for i in 0..24 {
        devices.push(new_device(&store, &tenant, &format!("d{i}"), &project, &model).await);
    }
    let (ingest, writers) = Ingest::start(std::sync::Arc::new(store.clone()), IngestConfig::default());
    let observed = std::sync::Arc::new(std::sync::Mutex::new(Vec::<(DeviceId, i64)>::new()));
    ingest.on_committed({
        let observed = observed.clone();
        std::sync::Arc::new(move |events: &[DeviceEvent]| {
            let mut observed = observed.lock().unwrap();
            observed.extend(
                events
                    .iter()
                    .map(|e| (e.device_id.clone(), e.attribute_data.as_i64().unwrap())),
            );
        })
    });
    let rounds = 20;
    let mut submissions = Vec::new();
    for round in 0..rounds {
        for device in &devices {
            let event = event_at(device, EventId::generate(), "temp", json!(round), 7);
            // The first poll queues the submission (the queues have room; unconstrained: tokio's
            // budget would make sends after the 128th of this poll wait): queued in this order.
            let mut submission = Box::pin(tokio::task::unconstrained(ingest.submit(vec![event])));
            match futures::poll!(submission.as_mut()) {
                std::task::Poll::Ready(result) => result.expect("committed"),
                std::task::Poll::Pending => submissions.push(submission),
            }
        }
    }
    ingest.close();
    for submission in submissions {
        submission.await.expect("committed");
    }
    writers.join().await;
    assert_eq!(
        ingest.stats().committed.load(std::sync::atomic::Ordering::Relaxed),
        (rounds * devices.len()) as u64
    );
    for device in &devices {
        let listed = store.list_events(&every_event_of(device), all()).await.unwrap();
        assert_eq!(listed.total, rounds as u64, "{}", device.device_name);
        let shadow = store.shadow(&tenant, &device.id).await.unwrap();
        assert_eq!(shadow.len(), 1);
        assert_eq!(
            shadow[0].0.value,
            json!(rounds - 1),
            "{}: the last queued value",
            device.device_name
        );
    }
    assert!(
        ingest
            .submit(vec![event_at(&devices[0], EventId::generate(), "temp", json!(0), 8)])
            .await
            .is_err(),
        "closed"
    );
    let observed = observed.lock().unwrap().clone();
    assert_eq!(observed.len(), rounds * devices.len(), "every event observed once");
    for device in &devices {
        let values: Vec<i64> = observed
            .iter()
            .filter(|(d, _)| *d == device.id)
            .map(|(_, v)| *v)
            .collect();
        assert_eq!(values, (0..rounds as i64).collect::<Vec<_>>(), "{}", device.device_name);
    }
    if store.ingest_writers() == 1 {
        let queued: Vec<(DeviceId, i64)> = (0..rounds as i64)
            .flat_map(|round| devices.iter().map(move |d| (d.id.clone(), round)))
            .collect();
        assert_eq!(observed, queued, "one writer: observed in the order queued");
    }
}

/// Rounds of the mover back to back (`catch_up` in a loop, none on PostgreSQL's store) until
/// `stop`.
pub(crate) struct MovingRounds {
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    /// Events moved so far.
    moved: std::sync::Arc<std::sync::atomic::AtomicU64>,
    task: tokio::task::JoinHandle<()>,
}

impl MovingRounds {
    fn start(store: &SqlStore) -> Self {
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let moved = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
        let task = tokio::spawn({
            let (store, stop, moved) = (store.clone(), stop.clone(), moved.clone());
            async move {
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    let round = store.catch_up().await.unwrap();
                    moved.fetch_add(round, std::sync::atomic::Ordering::Relaxed);
                    tokio::task::yield_now().await;
                }
            }
        });
        MovingRounds { stop, moved, task }
    }

    /// Waits until the rounds have moved an event (at most `limit`): on a loaded machine the
    /// caller's own writes may otherwise all finish before a round comes.
    async fn moved_some(&self, limit: std::time::Duration) -> bool {
        let deadline = tokio::time::Instant::now() + limit;
        while self.moved.load(std::sync::atomic::Ordering::Relaxed) == 0 {
            if tokio::time::Instant::now() >= deadline {
                return false;
            }
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
        true
    }

    /// Stops the rounds, once the one under way has ended.
    async fn stop(self) {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        self.task.await.expect("no round failed");
    }
}

pub(crate) async fn staged_events(store: &SqlStore) -> (i64, i64) {
    let count = |table: &'static str| async move {
        sqlx::query_scalar::<_, i64>(&format!("SELECT COUNT(*) FROM {table}"))
            .fetch_one(store.pool())
            .await
            .unwrap()
    };
    // Moved rows stay in the staging file for a round, recorded as moved.
    let staged = if store.backend() == "sqlite" {
        count(
            "staging.device_events_recent AS staged WHERE NOT EXISTS (SELECT 1 FROM device_events_recent_moved AS moved \
             WHERE staged.device_id BETWEEN moved.device_lo AND moved.device_hi AND staged.seq <= moved.through)",
        )
        .await
    } else {
        0
    };
    (staged, count("device_events").await)
}

/// On SQLite events are committed into a staging table and moved into the indexed one in the
/// background: every listing, total, lookup and delete reads the same before and after the move.
/// (PostgreSQL writes the indexed table directly; the test holds there too.)
pub(crate) async fn moved_events_read_as_before(store: SqlStore) {
    let tenant = new_tenant(&store, "moves").await;
    let project = new_project(&store, &tenant, "p").await;
    let model = new_model(&store, &tenant, "m", DeviceType::Crane, false).await;
    let device = new_device(&store, &tenant, "d", &project, &model).await;
    let other = new_device(&store, &tenant, "e", &project, &model).await;
    for round in 0..3 {
        let batch: Vec<DeviceEvent> = (0..10)
            .flat_map(|i| {
                let code = if i % 3 == 0 { "load" } else { "temp" };
                let ts = 1_000 + round * 10 + i;
                [
                    event_at(&device, EventId::generate(), code, json!(ts), ts),
                    event_at(&other, EventId::generate(), code, json!(ts), ts),
                ]
            })
            .collect();
        store.append_events(&batch).await.unwrap();
    }
    let query = |code: Option<&str>, start, end| EventQuery {
        device: device.id.clone(),
        attribute_code: code.map(str::to_owned),
        time_field: TimeField::Device,
        start,
        end,
    };
    let queries = [
        query(None, None, None),
        query(Some("load"), None, None),
        query(None, Some(1_005), Some(1_024)),
        query(Some("temp"), Some(1_005), None),
        EventQuery {
            time_field: TimeField::Ingress,
            ..query(None, None, None)
        },
    ];
    let read = || async {
        let mut pages = Vec::new();
        for q in &queries {
            for p in [all(), page(2, 4)] {
                let listed = store.list_events(q, p).await.unwrap();
                pages.push((listed.total, listed.items));
            }
        }
        pages
    };
    let before = read().await;
    assert_eq!(before[0].0, 30);
    assert_eq!(before[0].1.len(), 30);
    assert_eq!(before[1].1.len(), 4, "page 2 of 4");
    assert_eq!(before[2].0, 12, "load: 4 of each 10");
    assert_eq!(before[4].0, 20, "1,005 to 1,024 inclusive");

    let staging = store.backend() == "sqlite";
    assert_eq!(staged_events(&store).await.0 > 0, staging);
    store.catch_up().await.unwrap();
    assert_eq!(staged_events(&store).await, (0, 60), "all moved, none twice");
    assert_eq!(read().await, before);
    let first = &before[0].1[0];
    assert_eq!(store.get_event(&tenant, &first.id).await.unwrap().as_ref(), Some(first));

    // a merged event and a newly staged one delete alike
    let staged = event_at(&device, EventId::generate(), "temp", json!(1), 2_000);
    store.append_events(std::slice::from_ref(&staged)).await.unwrap();
    assert_eq!(staged_events(&store).await.0, i64::from(staging));
    assert_eq!(
        store.get_event(&tenant, &staged.id).await.unwrap().as_ref(),
        Some(&staged)
    );
    assert!(store.delete_event(&tenant, &first.id).await.unwrap());
    assert!(store.delete_event(&tenant, &staged.id).await.unwrap());
    let after = store.list_events(&queries[0], all()).await.unwrap();
    assert_eq!((after.total, after.items.len()), (29, 29));
    assert_eq!(after.items[..], before[0].1[1..]);
}

/// On SQLite a staged event reaches the shadow table and the kept totals only when it is moved;
/// reads add the staged ones meanwhile. The shadow and the totals read the same before and after a
/// move, a late event never rolls the shadow back, a tie goes to the event that arrived last, and
/// deleting an event (staged or moved) leaves the shadow as it was.
pub(crate) async fn shadows_and_totals_hold_across_moves_and_deletes(store: SqlStore) {
    let tenant = new_tenant(&store, "shadows").await;
    let project = new_project(&store, &tenant, "p").await;
    let model = new_model(&store, &tenant, "m", DeviceType::Crane, false).await;
    let device = new_device(&store, &tenant, "d", &project, &model).await;
    let shadow = || async {
        let attributes = store.shadow(&tenant, &device.id).await.unwrap();
        attributes
            .into_iter()
            .map(|(a, _)| (a.code, (a.value, a.timestamp)))
            .collect::<Vec<_>>()
    };
    let totals = || async {
        let mut totals = Vec::new();
        for code in [None, Some("temp"), Some("load")] {
            let query = EventQuery {
                device: device.id.clone(),
                attribute_code: code.map(str::to_owned),
                time_field: TimeField::Device,
                start: None,
                end: None,
            };
            totals.push(store.list_events(&query, all()).await.unwrap().total);
        }
        totals
    };
    let append = |events: Vec<DeviceEvent>| {
        let store = store.clone();
        async move { store.append_events(&events).await.unwrap() }
    };

    append(vec![
        event_at(&device, EventId::generate(), "temp", json!(1), 100),
        event_at(&device, EventId::generate(), "temp", json!(2), 300),
        event_at(&device, EventId::generate(), "load", json!(5), 200),
    ])
    .await;
    // late for temp; a tie for load, arriving last
    let late = event_at(&device, EventId::generate(), "temp", json!(0), 50);
    let tie = event_at(&device, EventId::generate(), "load", json!(6), 200);
    append(vec![late.clone(), tie.clone()]).await;
    let expected = vec![
        ("load".to_owned(), (json!(6), 200)),
        ("temp".to_owned(), (json!(2), 300)),
    ];
    assert_eq!(shadow().await, expected);
    assert_eq!(totals().await, vec![5, 3, 2]);

    store.catch_up().await.unwrap();
    assert_eq!(shadow().await, expected, "the same after the move");
    assert_eq!(totals().await, vec![5, 3, 2]);

    // a tie between a moved event and a staged one goes to the staged one, which came later
    append(vec![event_at(&device, EventId::generate(), "temp", json!(3), 300)]).await;
    let expected = vec![
        ("load".to_owned(), (json!(6), 200)),
        ("temp".to_owned(), (json!(3), 300)),
    ];
    assert_eq!(shadow().await, expected);
    assert_eq!(totals().await, vec![6, 4, 2]);

    // deleting the newest events, one staged and one moved, leaves the shadow as it was
    let newest = event_at(&device, EventId::generate(), "load", json!(7), 400);
    append(vec![newest.clone()]).await;
    let expected = vec![
        ("load".to_owned(), (json!(7), 400)),
        ("temp".to_owned(), (json!(3), 300)),
    ];
    assert!(store.delete_event(&tenant, &newest.id).await.unwrap());
    assert!(store.delete_event(&tenant, &tie.id).await.unwrap());
    assert_eq!(shadow().await, expected);
    assert_eq!(totals().await, vec![5, 4, 1]);
    store.catch_up().await.unwrap();
    assert_eq!(shadow().await, expected);
    assert_eq!(totals().await, vec![5, 4, 1]);
    assert_eq!(staged_events(&store).await.0, 0);
}

/// While moves run back to back, listings never see an event twice or miss one, and every
/// lookup and delete finds its event in whichever table it is.
pub(crate) async fn deletes_and_listings_during_moves(store: SqlStore) {
    let tenant = new_tenant(&store, "racing").await;
    let project = new_project(&store, &tenant, "p").await;
    let model = new_model(&store, &tenant, "m", DeviceType::Crane, false).await;
    let device = new_device(&store, &tenant, "d", &project, &model).await;
    let rounds = MovingRounds::start(&store);
    let query = EventQuery {
        device: device.id.clone(),
        attribute_code: None,
        time_field: TimeField::Device,
        start: Some(0),
        end: None,
    };
    let mut ids = Vec::new();
    for round in 0..20 {
        let batch: Vec<DeviceEvent> = (0..10)
            .map(|i| event_at(&device, EventId::generate(), "temp", json!(i), round * 10 + i))
            .collect();
        ids.extend(batch.iter().map(|e| e.id.clone()));
        store.append_events(&batch).await.unwrap();
        for event in &batch {
            let found = store.get_event(&tenant, &event.id).await.unwrap();
            assert_eq!(found.as_ref(), Some(event), "found while moves run");
        }
        let listed = store.list_events(&query, all()).await.unwrap();
        let distinct: BTreeSet<&str> = listed.items.iter().map(|e| e.id.as_str()).collect();
        assert_eq!((listed.total, distinct.len()), (ids.len() as u64, ids.len()));
    }
    // The deletes below race the rounds over events both staged and moved.
    if store.backend() == "sqlite" {
        assert!(
            rounds.moved_some(std::time::Duration::from_secs(10)).await,
            "moves ran meanwhile"
        );
    }
    for (n, id) in ids.iter().enumerate() {
        assert!(
            store.delete_event(&tenant, id).await.unwrap(),
            "delete {n} found its event"
        );
        if n % 20 == 0 {
            let listed = store.list_events(&query, all()).await.unwrap();
            assert_eq!(listed.items.len(), ids.len() - n - 1);
        }
    }
    rounds.stop().await;
    assert_eq!(staged_events(&store).await, (0, 0));
}

/// A listing with a date range counts its total from per-hour counts and the events of its part
/// hours at each end (SQLite; PostgreSQL counts the range): for ranges of every shape (within an hour, on hour boundaries, open at one
/// end, before 1970, by arrival time, one attribute) the total is the number of events in the
/// range, with events staged and moved (SQLite), after deletes by id and by retention, and the
/// page holds the range's newest events.
pub(crate) async fn range_totals_match_the_events_in_range(store: SqlStore) {
    let tenant = new_tenant(&store, "ranges").await;
    let project = new_project(&store, &tenant, "p").await;
    let model = new_model(&store, &tenant, "m", DeviceType::Crane, false).await;
    let device = new_device(&store, &tenant, "d", &project, &model).await;
    let other = new_device(&store, &tenant, "e", &project, &model).await;
    let hour = 3_600_000_i64;
    let now = chrono_now();
    // A small linear congruential generator: the same events and ranges on every run.
    let mut seed = 0x2545_f491_4f6c_dd1d_u64;
    let mut next = move |below: i64| {
        seed = seed
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        ((seed >> 33) % below as u64) as i64
    };
    // Events over ten hours from -2 h (before 1970), some right on hour boundaries; arrival times
    // over three hours of their own, unrelated to the device's; old ids for some (retention).
    let mut events = Vec::new();
    for i in 0..600 {
        let device_ts = match i % 5 {
            0 => (next(10) - 2) * hour,
            1 => (next(10) - 2) * hour - 1,
            _ => next(10 * hour) - 2 * hour,
        };
        let code = ["temp", "load", "wind"][next(3) as usize];
        let old = i % 7 == 0;
        let id = if old {
            EventId::lower_bound_at(now - 10 * 86_400_000 + i)
                .as_str()
                .replace("-8000-000000000000", &format!("-8000-{i:012}"))
        } else {
            EventId::generate().as_str().to_owned()
        };
        let mut event = event_at(&device, EventId::from_string(id), code, json!(i), device_ts);
        event.ingress_time_stamp = 1_000 * hour + next(3 * hour);
        events.push(event);
    }
    // another device's events in the same hours count for it alone
    append_beside(&store, &events, &other, 50).await;

    let mut ranges: Vec<(Option<i64>, Option<i64>)> = vec![
        (Some(0), Some(hour - 1)),
        (Some(-2 * hour), Some(8 * hour)),
        (Some(-hour), Some(3 * hour)),
        (Some(-hour + 1), Some(3 * hour - 1)),
        (Some(hour / 2), None),
        (None, Some(5 * hour + 17)),
        (Some(7 * hour), Some(6 * hour)),
        (Some(i64::MIN), Some(i64::MAX)),
    ];
    for _ in 0..40 {
        let a = next(12 * hour) - 3 * hour;
        let b = a + next(6 * hour);
        ranges.push((Some(a), Some(b)));
    }
    let check = |events: Vec<DeviceEvent>, when: &'static str| {
        let ranges = ranges.clone();
        let (store, device) = (store.clone(), device.clone());
        async move {
            for (start, end) in ranges {
                for (field, code) in [
                    (TimeField::Device, None),
                    (TimeField::Ingress, None),
                    (TimeField::Device, Some("load")),
                ] {
                    // arrival-time ranges where the arrival times are
                    let shift = if field == TimeField::Ingress { 1_000 * hour } else { 0 };
                    let (start, end) = (
                        start.map(|t| t.saturating_add(shift)),
                        end.map(|t| t.saturating_add(shift)),
                    );
                    let mut expected: Vec<&DeviceEvent> = events
                        .iter()
                        .filter(|e| {
                            let t = match field {
                                TimeField::Device => e.device_timestamp,
                                TimeField::Ingress => e.ingress_time_stamp,
                            };
                            code.is_none_or(|c| e.attribute_code == c)
                                && start.is_none_or(|s| t >= s)
                                && end.is_none_or(|e| t <= e)
                        })
                        .collect();
                    let query = EventQuery {
                        device: device.id.clone(),
                        attribute_code: code.map(str::to_owned),
                        time_field: field,
                        start,
                        end,
                    };
                    let listed = store.list_events(&query, page(1, 5)).await.unwrap();
                    let what = format!("{when}: {field:?} {code:?} {start:?}..={end:?}");
                    assert_eq!(listed.total, expected.len() as u64, "{what}");
                    let time = |e: &DeviceEvent| match field {
                        TimeField::Device => e.device_timestamp,
                        TimeField::Ingress => e.ingress_time_stamp,
                    };
                    expected.sort_by(|a, b| (time(b), b.id.as_str()).cmp(&(time(a), a.id.as_str())));
                    let newest: Vec<&str> = expected.iter().take(5).map(|e| e.id.as_str()).collect();
                    let listed: Vec<&str> = listed.items.iter().map(|e| e.id.as_str()).collect();
                    assert_eq!(listed, newest, "{what}");
                }
            }
        }
    };
    check(events.clone(), "as committed").await;
    store.catch_up().await.unwrap();
    assert_eq!(staged_events(&store).await.0, 0);
    check(events.clone(), "moved").await;

    // deletes by id (one moved, one staged) and by retention take events off their hours
    let staged = event_at(&device, EventId::generate(), "load", json!(-1), 30 * 60_000);
    store.append_events(std::slice::from_ref(&staged)).await.unwrap();
    events.push(staged.clone());
    for gone in [events[3].id.clone(), staged.id.clone()] {
        assert!(store.delete_event(&tenant, &gone).await.unwrap());
        events.retain(|e| e.id != gone);
    }
    let old = events
        .iter()
        .filter(|e| e.id.as_str() < EventId::lower_bound_at(now - 86_400_000).as_str())
        .count();
    assert_eq!(
        store.delete_events_before(now - 86_400_000, 1_000).await.unwrap(),
        old as u64
    );
    events.retain(|e| e.id.as_str() >= EventId::lower_bound_at(now - 86_400_000).as_str());
    check(events.clone(), "after deletes").await;
    store.catch_up().await.unwrap();
    check(events.clone(), "after deletes, moved").await;
    let emptied: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM device_event_counts WHERE events <= 0")
        .fetch_one(store.pool())
        .await
        .unwrap();
    assert_eq!(emptied, 0, "hours left without events are removed");

    // The hours kept are the hours of the events stored; PostgreSQL keeps none: it counts ranges.
    let hours: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM device_event_counts WHERE clock <> ''")
        .fetch_one(store.pool())
        .await
        .unwrap();
    if store.backend() == "postgres" {
        assert_eq!(hours, 0, "PostgreSQL keeps no hours");
    } else {
        assert!(hours > 30, "{hours} hours");
    }
}

/// On SQLite a task copies committed WAL pages into the database file in the background: the
/// file grows with the events written, though the writer's own checkpoint (past 10,000 WAL
/// pages) never ran and nothing here asked for one.
#[tokio::test]
pub(crate) async fn sqlite_checkpoints_in_the_background() {
    let dir = tempfile::tempdir().unwrap();
    let store = gantry_store_sqlite::connect(&sqlite_url(dir.path())).await.unwrap();
    let file = dir.path().join("gantry.db");
    let size = || std::fs::metadata(&file).unwrap().len();
    let tenant = new_tenant(&store, "checkpoints").await;
    let project = new_project(&store, &tenant, "p").await;
    let model = new_model(&store, &tenant, "m", DeviceType::Crane, false).await;
    let device = new_device(&store, &tenant, "d", &project, &model).await;
    tokio::time::sleep(std::time::Duration::from_millis(600)).await;
    let before = size();
    let events: Vec<DeviceEvent> = (0..2000)
        .map(|i| event_at(&device, EventId::generate(), "temp", json!(i), i))
        .collect();
    store.append_events(&events).await.unwrap();
    let mut grown = false;
    for _ in 0..50 {
        if size() > before + 100 * 1024 {
            grown = true;
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    store.close().await;
    assert!(grown, "the database file stayed at {} bytes (was {before})", size());
}

/// A SQLite store in `dir` holding one device, closed: for tests that take its schema back to an
/// earlier version. Returns its URL, the tenant and the device.
pub(crate) async fn closed_store_with_a_device(dir: &std::path::Path) -> (String, TenantId, Device) {
    let url = sqlite_url(dir);
    let store = gantry_store_sqlite::connect(&url).await.unwrap();
    let tenant = new_tenant(&store, "upgrade").await;
    let project = new_project(&store, &tenant, "p").await;
    let model = new_model(&store, &tenant, "m", DeviceType::Crane, false).await;
    let device = new_device(&store, &tenant, "d", &project, &model).await;
    store.close().await;
    (url, tenant, device)
}

/// Ingest commits into the staging file while another connection holds the main file's write
/// lock (as a move of the mover, or a backup, does): they do not wait for it.
#[tokio::test]
pub(crate) async fn sqlite_ingest_commits_while_the_main_file_is_locked() {
    let dir = tempfile::tempdir().unwrap();
    let (url, tenant, device) = closed_store_with_a_device(dir.path()).await;
    let store = gantry_store_sqlite::connect(&url).await.unwrap();
    let mut holder = sqlx::SqliteConnection::connect(&url).await.unwrap();
    holder.execute("BEGIN IMMEDIATE").await.unwrap();
    let event = event_at(&device, EventId::generate(), "temp", json!(21.5), 1_000);
    // SQLite's busy timeout is 10 s: an ingest commit that needed the main file's lock would still
    // be waiting at 5.
    tokio::time::timeout(
        std::time::Duration::from_secs(5),
        store.append_events(std::slice::from_ref(&event)),
    )
    .await
    .expect("ingest committed while the main file was locked")
    .unwrap();
    let found = store.get_event(&tenant, &event.id).await.unwrap();
    assert_eq!(found.map(|e| e.attribute_data), Some(json!(21.5)));
    holder.execute("ROLLBACK").await.unwrap();
    store.catch_up().await.unwrap();
    assert_eq!(staged_events(&store).await, (0, 1));
}

/// Pages beyond 10,000 events (read by their ids first, `DEEP_OFFSET`) continue the pages before
/// them, ties in time ordered by id, with and without a date range and an attribute, staged and
/// moved.
pub(crate) async fn deep_pages_list_in_order(store: SqlStore) {
    let tenant = new_tenant(&store, "t").await;
    let project = new_project(&store, &tenant, "p").await;
    let model = new_model(&store, &tenant, "m", DeviceType::Crane, false).await;
    let device = new_device(&store, &tenant, "d", &project, &model).await;
    let other = new_device(&store, &tenant, "e", &project, &model).await;
    // 10,400 events, three to a millisecond of device time (ties), two attributes; another
    // device's events in the same times.
    let events: Vec<DeviceEvent> = (0..10_400_i64)
        .map(|i| {
            let code = if i % 4 == 0 { "load" } else { "temp" };
            event_at(&device, EventId::generate(), code, json!(i), 1_000_000 + i / 3)
        })
        .collect();
    append_beside(&store, &events, &other, 2_000).await;
    let check = |when: &'static str| {
        let (store, device, events) = (store.clone(), device.clone(), events.clone());
        async move {
            for (code, start, end) in [
                (None, None, None),
                (None, Some(1_000_010), Some(1_003_460)),
                (Some("temp"), None, None),
            ] {
                let mut expected: Vec<&DeviceEvent> = events
                    .iter()
                    .filter(|e| {
                        code.is_none_or(|c| e.attribute_code == c)
                            && start.is_none_or(|s| e.device_timestamp >= s)
                            && end.is_none_or(|t| e.device_timestamp <= t)
                    })
                    .collect();
                expected.sort_by(|a, b| (b.device_timestamp, b.id.as_str()).cmp(&(a.device_timestamp, a.id.as_str())));
                let query = EventQuery {
                    device: device.id.clone(),
                    attribute_code: code.map(str::to_owned),
                    time_field: TimeField::Device,
                    start,
                    end,
                };
                // Offsets 9,800 to 10,400 by pages of 100, then 1,000 from 9,000: across the
                // change of query, up to past the end.
                for (page_no, size) in (99..=105).map(|n| (n, 100)).chain([(10, 1_000), (11, 1_000)]) {
                    let listed = store.list_events(&query, page(page_no, size)).await.unwrap();
                    let what = format!("{when}: {code:?} {start:?}..={end:?} page {page_no} of {size}");
                    assert_eq!(listed.total, expected.len() as u64, "{what}");
                    let from = ((page_no - 1) * size) as usize;
                    let want: Vec<&str> = expected
                        .iter()
                        .skip(from)
                        .take(size as usize)
                        .map(|e| e.id.as_str())
                        .collect();
                    let got: Vec<&str> = listed.items.iter().map(|e| e.id.as_str()).collect();
                    assert_eq!(got, want, "{what}");
                    if let Some(first) = listed.items.first() {
                        let held = events.iter().find(|e| e.id == first.id).unwrap();
                        assert_eq!(first, held, "{what}: the row itself");
                    }
                }
            }
        }
    };
    check("as committed").await;
    store.catch_up().await.unwrap();
    check("moved").await;
    // The next round deletes the moved rows from staging: the listing reads device_events alone.
    store.catch_up().await.unwrap();
    check("moved and deleted from staging").await;
}

/// The project's positions in one read: per device the newest of its model's position
/// attributes by device time, as its shadow reads it, staged (SQLite) or moved; devices without
/// one, deleted ones, and other projects' and tenants' devices left out.
pub(crate) async fn positions_are_the_newest_of_each_devices_position_attributes(store: SqlStore) {
    let tenant = new_tenant(&store, "positions").await;
    let project = new_project(&store, &tenant, "p").await;
    let elsewhere = new_project(&store, &tenant, "q").await;
    let tracked_model = |tenant: &TenantId| {
        let mut tracked = model_record(tenant, "tracked", DeviceType::Crane, false, 1_000);
        for code in ["gps", "pos"] {
            let mut attribute = tracked.attributes_map["temp"].clone();
            (attribute.code, attribute.data_type, attribute.channel) = (code.to_owned(), DataType::String, Channel::G);
            tracked.attributes_map.insert(code.to_owned(), attribute);
        }
        tracked
    };
    let tracked = tracked_model(&tenant);
    store.insert_model(&tracked).await.unwrap();
    let plain = new_model(&store, &tenant, "plain", DeviceType::Crane, false).await;
    let two = new_device(&store, &tenant, "two", &project, &tracked).await;
    let late = new_device(&store, &tenant, "late", &project, &tracked).await;
    let silent = new_device(&store, &tenant, "silent", &project, &tracked).await;
    let untracked = new_device(&store, &tenant, "untracked", &project, &plain).await;
    let moved_away = new_device(&store, &tenant, "away", &elsewhere, &tracked).await;
    let gone = new_device(&store, &tenant, "gone", &project, &tracked).await;
    let other_tenant = new_tenant(&store, "positions elsewhere").await;
    let their_project = new_project(&store, &other_tenant, "p").await;
    let their_model = tracked_model(&other_tenant);
    store.insert_model(&their_model).await.unwrap();
    let theirs = new_device(&store, &other_tenant, "theirs", &their_project, &their_model).await;
    let position = |device: &Device, code: &str, text: &str, ts: i64| DeviceEvent {
        attribute_type: DataType::String,
        channel: Channel::G,
        ..event_at(device, EventId::generate(), code, json!(text), ts)
    };
    store
        .append_events(&[
            position(&two, "pos", "1,1", 100),
            position(&two, "gps", "2,2", 200),
            position(&late, "pos", "3,3", 300),
            position(&late, "pos", "4,4", 50),
            event_at(&silent, EventId::generate(), "temp", json!(20.5), 400),
            // `pos` is no position attribute of the plain model
            event_at(&untracked, EventId::generate(), "pos", json!("5,5"), 400),
            position(&moved_away, "pos", "6,6", 400),
            position(&gone, "pos", "7,7", 400),
            position(&theirs, "pos", "8,8", 400),
        ])
        .await
        .unwrap();
    store.delete_device(&tenant, &gone.id, "admin", 2_000).await.unwrap();
    let codes = vec![(tracked.id.clone(), vec!["gps".to_owned(), "pos".to_owned()])];
    let positions = |tenant: TenantId, project: ProjectId| {
        let (store, codes) = (store.clone(), codes.clone());
        async move {
            let mut read = store.project_positions(&tenant, &project, &codes).await.unwrap();
            read.sort_by(|a, b| a.device_name.cmp(&b.device_name));
            read.into_iter()
                .map(|p| (p.device, p.device_name, p.value))
                .collect::<Vec<_>>()
        }
    };
    let expected = |pairs: &[(&Device, &str)]| {
        pairs
            .iter()
            .map(|(d, v)| (d.id.clone(), d.device_name.clone(), (*v).to_owned()))
            .collect::<Vec<_>>()
    };
    // On SQLite every event is still staged after the read, so it was during the read.
    let staging = store.backend() == "sqlite";
    let first = expected(&[(&late, "3,3"), (&two, "2,2")]);
    assert_eq!(positions(tenant.clone(), project.id.clone()).await, first);
    assert_eq!(staged_events(&store).await.0, if staging { 9 } else { 0 });
    store.catch_up().await.unwrap();
    assert_eq!(
        positions(tenant.clone(), project.id.clone()).await,
        first,
        "the same once moved"
    );

    // a newly staged value, a tie that arrived last, and a late one
    store
        .append_events(&[
            position(&two, "pos", "9,9", 250),
            position(&late, "pos", "10,10", 300),
            position(&silent, "gps", "11,11", 10),
        ])
        .await
        .unwrap();
    let second = expected(&[(&late, "10,10"), (&silent, "11,11"), (&two, "9,9")]);
    assert_eq!(positions(tenant.clone(), project.id.clone()).await, second);
    assert_eq!(staged_events(&store).await.0, if staging { 3 } else { 0 });
    for device in [&two, &late, &silent] {
        let shadow = store.shadow(&tenant, &device.id).await.unwrap();
        let newest = shadow
            .iter()
            .filter(|(a, _)| a.code == "gps" || a.code == "pos")
            .max_by_key(|(a, _)| a.timestamp)
            .map(|(a, _)| a.value.clone());
        let listed = second
            .iter()
            .find(|(id, _, _)| id == &device.id)
            .map(|(_, _, v)| json!(v));
        assert_eq!(newest, listed, "as the shadow of {} reads", device.device_name);
    }
    store.catch_up().await.unwrap();
    assert_eq!(
        positions(tenant.clone(), project.id.clone()).await,
        second,
        "the same once moved"
    );

    assert_eq!(
        positions(tenant.clone(), elsewhere.id.clone()).await,
        expected(&[(&moved_away, "6,6")])
    );
    assert_eq!(positions(other_tenant.clone(), project.id.clone()).await, vec![]);
    assert_eq!(positions(tenant.clone(), their_project.id.clone()).await, vec![]);
    let their_codes = [(their_model.id.clone(), vec!["pos".to_owned()])];
    let read = store
        .project_positions(&other_tenant, &their_project.id, &their_codes)
        .await
        .unwrap();
    assert_eq!(
        read.iter().map(|p| (&p.device, p.value.as_str())).collect::<Vec<_>>(),
        [(&theirs.id, "8,8")]
    );
    let read = store
        .project_positions(&tenant, &their_project.id, &their_codes)
        .await
        .unwrap();
    assert_eq!(read, vec![], "not to another tenant, with the right codes either");
    let none = store.project_positions(&tenant, &project.id, &[]).await.unwrap();
    assert_eq!(none, vec![], "no position attributes, no positions");
}
