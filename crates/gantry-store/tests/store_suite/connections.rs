//! Device sessions: `ConnectionStore`.

use super::*;

pub(crate) fn session(device: &Device, at: i64, transport: &str) -> SessionStart {
    SessionStart {
        device: device.id.clone(),
        at,
        client_address: Some("10.0.0.7:50000".into()),
        protocol: Some("MQTT 5".into()),
        transport: Some(transport.into()),
    }
}

pub(crate) fn end(device: &Device, started_by: i64, at: i64, last_seen: Option<i64>) -> SessionEnd {
    SessionEnd {
        device: device.id.clone(),
        started_by,
        at,
        last_seen,
    }
}

pub(crate) async fn device_sessions_start_end_and_survive_a_restart(store: SqlStore) {
    let tenant = new_tenant(&store, "presence").await;
    let model = new_model(&store, &tenant, "m", DeviceType::Light, false).await;
    let project = new_project(&store, &tenant, "p").await;
    let (a, b) = (
        new_device(&store, &tenant, "a", &project, &model).await,
        new_device(&store, &tenant, "b", &project, &model).await,
    );
    assert_eq!(store.connection(&a.id).await.unwrap(), None);
    let connected = |value| DeviceQuery {
        connected: Some(value),
        ..DeviceQuery::default()
    };

    store
        .session_started(&tenant, &session(&a, 1_000, "tcp"), Default::default())
        .await
        .unwrap();
    let on = store.connection(&a.id).await.unwrap().unwrap();
    assert!(on.connected);
    assert_eq!(
        (on.connected_time, on.disconnected_time, on.last_seen_time),
        (Some(1_000), None, Some(1_000))
    );
    assert_eq!(
        (
            on.client_address.as_deref(),
            on.protocol.as_deref(),
            on.transport.as_deref()
        ),
        (Some("10.0.0.7:50000"), Some("MQTT 5"), Some("tcp"))
    );
    assert_eq!(device_names(&store, &tenant, connected(true)).await, names(&["a"]));
    assert_eq!(device_names(&store, &tenant, connected(false)).await, names(&["b"]));

    // Last seen moves forward only.
    store
        .record_last_seen(&[(a.id.clone(), 1_500), (b.id.clone(), 1_500)])
        .await
        .unwrap();
    store.record_last_seen(&[(a.id.clone(), 1_200)]).await.unwrap();
    assert_eq!(
        store.connection(&a.id).await.unwrap().unwrap().last_seen_time,
        Some(1_500)
    );
    assert_eq!(
        store.connection(&b.id).await.unwrap(),
        None,
        "no row for a device never connected"
    );

    // A newer session takes over; the older one's end, arriving late, changes nothing, nor
    // does the older one's start.
    store
        .session_started(&tenant, &session(&a, 2_000, "ws"), Default::default())
        .await
        .unwrap();
    assert!(
        !store
            .session_ended(&end(&a, 1_000, 2_001, Some(1_900)), Default::default())
            .await
            .unwrap()
    );
    store
        .session_started(&tenant, &session(&a, 1_000, "tcp"), Default::default())
        .await
        .unwrap();
    let taken_over = store.connection(&a.id).await.unwrap().unwrap();
    assert!(taken_over.connected);
    assert_eq!(
        (taken_over.connected_time, taken_over.transport.as_deref()),
        (Some(2_000), Some("ws"))
    );

    assert!(
        store
            .session_ended(&end(&a, 2_000, 3_000, Some(2_900)), Default::default())
            .await
            .unwrap()
    );
    let off = store.connection(&a.id).await.unwrap().unwrap();
    assert!(!off.connected);
    assert_eq!(
        (off.connected_time, off.disconnected_time, off.last_seen_time),
        (Some(2_000), Some(3_000), Some(2_900))
    );
    assert_eq!(device_names(&store, &tenant, connected(true)).await, names(&[]));

    // A session the process did not see end (a crash): ended at its last-seen time at start.
    store
        .session_started(&tenant, &session(&b, 4_000, "tls"), Default::default())
        .await
        .unwrap();
    // A flush of a large fleet, the known device last: devices without a row are skipped.
    let mut fleet: Vec<_> = (0..1_200)
        .map(|_| (gantry_core::ids::DeviceId::generate(), 4_600))
        .collect();
    fleet.push((b.id.clone(), 4_700));
    store.record_last_seen(&fleet).await.unwrap();
    assert_eq!(store.end_all_sessions().await.unwrap(), 1);
    let after = store.connection(&b.id).await.unwrap().unwrap();
    assert!(!after.connected);
    assert_eq!(
        (after.connected_time, after.disconnected_time, after.last_seen_time),
        (Some(4_000), Some(4_700), Some(4_700))
    );
    assert_eq!(store.end_all_sessions().await.unwrap(), 0);
    // The next session keeps the last one's end until its own.
    store
        .session_started(&tenant, &session(&b, 5_000, "tls"), Default::default())
        .await
        .unwrap();
    let back = store.connection(&b.id).await.unwrap().unwrap();
    assert_eq!((back.connected, back.disconnected_time), (true, Some(4_700)));
}

/// A page of a project's devices reads their records at once: only those of the project, of the
/// tenant, that ever connected.
pub(crate) async fn a_projects_connections_are_read_at_once(store: SqlStore) {
    let tenant = new_tenant(&store, "presence at once").await;
    let model = new_model(&store, &tenant, "m", DeviceType::Light, false).await;
    let project = new_project(&store, &tenant, "p").await;
    let elsewhere = new_project(&store, &tenant, "q").await;
    let on = new_device(&store, &tenant, "on", &project, &model).await;
    let off = new_device(&store, &tenant, "off", &project, &model).await;
    let never = new_device(&store, &tenant, "never", &project, &model).await;
    let away = new_device(&store, &tenant, "away", &elsewhere, &model).await;
    let stranger = new_tenant(&store, "presence stranger").await;
    let their_project = new_project(&store, &stranger, "p").await;
    let their_model = new_model(&store, &stranger, "m", DeviceType::Light, false).await;
    let theirs = new_device(&store, &stranger, "theirs", &their_project, &their_model).await;
    for (owner, device) in [(&tenant, &on), (&tenant, &off), (&tenant, &away), (&stranger, &theirs)] {
        store
            .session_started(owner, &session(device, 1_000, "tcp"), Default::default())
            .await
            .unwrap();
    }
    assert!(
        store
            .session_ended(&end(&off, 1_000, 2_000, Some(1_500)), Default::default())
            .await
            .unwrap()
    );

    let ids = [&on, &off, &never, &away, &theirs].map(|d| d.id.clone());
    let mut read = store.project_connections(&tenant, &project.id, &ids).await.unwrap();
    read.sort_by(|a, b| a.device_id.cmp(&b.device_id));
    let mut expected = vec![
        store.connection(&on.id).await.unwrap().unwrap(),
        store.connection(&off.id).await.unwrap().unwrap(),
    ];
    expected.sort_by(|a, b| a.device_id.cmp(&b.device_id));
    assert_eq!(read, expected);
    let states: BTreeMap<DeviceId, bool> = read.iter().map(|c| (c.device_id.clone(), c.connected)).collect();
    assert_eq!(states, BTreeMap::from([(on.id.clone(), true), (off.id.clone(), false)]));
    let theirs_read = store
        .project_connections(&stranger, &their_project.id, &ids)
        .await
        .unwrap();
    assert_eq!(theirs_read.len(), 1, "the other tenant's own device alone");
    assert_eq!(theirs_read[0].device_id, theirs.id);
    assert_eq!(
        store.project_connections(&tenant, &project.id, &[]).await.unwrap(),
        vec![]
    );

    // The overview's figures: the project's live devices, those connected now, those locked.
    let mut locked = never.clone();
    locked.status = DeviceStatus::Locked;
    store.update_device(&locked).await.unwrap();
    let gone = new_device(&store, &tenant, "gone", &project, &model).await;
    store
        .session_started(&tenant, &session(&gone, 1_000, "tcp"), Default::default())
        .await
        .unwrap();
    store.delete_device(&tenant, &gone.id, "admin", 3_000).await.unwrap();
    let counts = |total, connected, locked| DeviceCounts {
        total,
        connected,
        locked,
    };
    assert_eq!(
        store.count_project_devices(&tenant, &project.id).await.unwrap(),
        counts(3, 1, 1)
    );
    assert_eq!(
        store.count_project_devices(&tenant, &elsewhere.id).await.unwrap(),
        counts(1, 1, 0)
    );
    assert_eq!(
        store.count_project_devices(&stranger, &project.id).await.unwrap(),
        counts(0, 0, 0),
        "another tenant counts none of the project's devices"
    );
}
