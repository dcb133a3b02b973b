//! Webhooks, their outbox and deliveries: `WebhookStore`.

use super::*;

pub(crate) fn webhook_record(
    project: &Project,
    types: Vec<gantry_core::stream::StreamType>,
) -> gantry_core::webhook::Webhook {
    gantry_core::webhook::Webhook {
        id: gantry_core::ids::WebhookId::generate(),
        tenant_id: project.record.tenant_id.clone(),
        project_id: project.id.clone(),
        url: "https://hooks.example.com/in".to_owned(),
        types,
        description: Some("ops".to_owned()),
        enabled: true,
        secret: "0123456789abcdef".to_owned(),
        created_by: "admin".to_owned(),
        created_time: 1_000,
        updated_by: None,
        updated_time: None,
        slot: 0,
    }
}

/// With several nodes on one PostgreSQL database, one node at a time holds a webhook's lease:
/// it renews it, another takes it only once it ended, and a webhook's lease says nothing of
/// another's. SQLite, opened by one process at a time, grants every lease.
pub(crate) async fn a_webhook_lease_has_one_holder(store: SqlStore) {
    use gantry_core::stream::StreamType;
    let tenant = new_tenant(&store, "lease").await;
    let project = new_project(&store, &tenant, "p").await;
    let hook = webhook_record(&project, vec![StreamType::Telemetry]);
    let other = webhook_record(&project, vec![StreamType::Telemetry]);
    store.insert_webhook(&hook, 20).await.unwrap();
    store.insert_webhook(&other, 20).await.unwrap();
    let lease = |owner: &'static str, webhook: &gantry_core::ids::WebhookId, now: i64| {
        let (store, webhook) = (store.clone(), webhook.clone());
        async move { store.lease_webhook(&webhook, owner, now, now + 30_000).await.unwrap() }
    };
    assert!(lease("a", &hook.id, 1_000).await, "a free lease is taken");
    assert!(lease("a", &hook.id, 20_000).await, "its holder renews it");
    let one_process = store.backend() == "sqlite";
    assert_eq!(
        lease("b", &hook.id, 40_000).await,
        one_process,
        "held by a until 50,000"
    );
    assert!(lease("b", &other.id, 40_000).await, "another webhook's lease is free");
    assert!(lease("b", &hook.id, 50_000).await, "taken once it ended");
    assert_eq!(lease("a", &hook.id, 50_001).await, one_process, "now b's");
}

pub(crate) async fn webhooks_are_managed_per_tenant(store: SqlStore) {
    use gantry_core::stream::StreamType;
    let (t1, t2) = (new_tenant(&store, "one").await, new_tenant(&store, "two").await);
    let p1 = new_project(&store, &t1, "p").await;
    let p2 = new_project(&store, &t2, "p").await;
    let mut hook = webhook_record(&p1, vec![StreamType::Telemetry, StreamType::EventLog]);
    store.insert_webhook(&hook, 20).await.unwrap();
    let mut other = webhook_record(&p2, vec![StreamType::Connection]);
    other.created_time = 2_000;
    store.insert_webhook(&other, 20).await.unwrap();
    assert_eq!(store.get_webhook(&t1, &hook.id).await.unwrap(), Some(hook.clone()));
    assert_eq!(
        store.get_webhook(&t2, &hook.id).await.unwrap(),
        None,
        "another tenant's"
    );
    let listed = store.list_webhooks(&t1, &p1.id, all()).await.unwrap();
    assert_eq!((listed.total, listed.items), (1, vec![hook.clone()]));
    assert_eq!(store.list_webhooks(&t2, &p1.id, all()).await.unwrap().total, 0);

    hook.url = "https://hooks.example.com/other".to_owned();
    hook.types = vec![StreamType::Shadow];
    hook.enabled = false;
    hook.secret = "fedcba9876543210".to_owned();
    hook.description = None;
    hook.updated_by = Some("admin".to_owned());
    hook.updated_time = Some(3_000);
    store.update_webhook(&hook).await.unwrap();
    assert_eq!(store.get_webhook(&t1, &hook.id).await.unwrap(), Some(hook.clone()));
    let mut stranger = hook.clone();
    stranger.tenant_id = t2.clone();
    assert_not_found(store.update_webhook(&stranger).await);
    let enabled: Vec<_> = store
        .enabled_webhooks()
        .await
        .unwrap()
        .into_iter()
        .map(|w| w.id)
        .collect();
    assert!(
        enabled.contains(&other.id) && !enabled.contains(&hook.id),
        "{enabled:?}"
    );

    assert_not_found(store.delete_webhook(&t2, &hook.id).await);
    store.delete_webhook(&t1, &hook.id).await.unwrap();
    assert_eq!(store.get_webhook(&t1, &hook.id).await.unwrap(), None);
    assert_not_found(store.delete_webhook(&t1, &hook.id).await);
}

/// Telemetry (committed with its events, where the engine keeps it) and event logs and
/// connection changes (with their writes) wait for the webhook in commit order, and leave the
/// outbox when a delivery holds them; deleting the webhook drops what waits and its deliveries.
pub(crate) async fn webhook_events_wait_in_order_until_a_delivery_holds_them(store: SqlStore) {
    use gantry_core::enums::{Classification, DeliveryStatus, EventLogStatus};
    use gantry_core::ids::DeliveryId;
    use gantry_core::stream::StreamType;
    use gantry_core::webhook::{Audience, Delivery, WebhookEvent};
    let tenant = new_tenant(&store, "hooks").await;
    let project = new_project(&store, &tenant, "p").await;
    let model = new_model(&store, &tenant, "m", DeviceType::Crane, false).await;
    let device = new_device(&store, &tenant, "d", &project, &model).await;
    let hook = webhook_record(&project, StreamType::ALL.to_vec());
    let quiet = webhook_record(&project, vec![StreamType::Telemetry]);
    store.insert_webhook(&hook, 20).await.unwrap();
    store.insert_webhook(&quiet, 20).await.unwrap();
    // As the store keeps them: each with its slot.
    let hook = store.get_webhook(&tenant, &hook.id).await.unwrap().unwrap();
    let quiet = store.get_webhook(&tenant, &quiet.id).await.unwrap().unwrap();
    assert_ne!(hook.slot, quiet.slot);

    let events: Vec<DeviceEvent> = (0..3)
        .map(|i| event_at(&device, EventId::generate(), "temp", json!(i), i))
        .collect();
    let outbox: Vec<WebhookEvent> = events
        .iter()
        .map(|e| WebhookEvent {
            id: WebhookEvent::new_id(),
            project_id: project.id.clone(),
            // One row for both webhooks that want telemetry.
            pending: Audience::default().with(hook.slot).with(quiet.slot),
            device_id: device.id.clone(),
            kind: StreamType::Telemetry,
            time: 10,
            data: serde_json::to_string(e).unwrap(),
        })
        .collect();
    store.commit_events(&events, &outbox).await.unwrap().await.unwrap();
    let log = gantry_core::event_log::EventLog {
        id: "log-1".to_owned(),
        tenant_id: tenant.clone(),
        project_id: project.id.clone(),
        status: EventLogStatus::Processing,
        classification: Classification::DeviceControll,
        device_id: device.id.clone(),
        device_name: device.device_name.clone(),
        event_data: json!({"meta": {"id": "c-1"}}),
        context_id: None,
        responses: Vec::new(),
        event_id: "c-1".to_owned(),
        created_by: "admin".to_owned(),
        created_time: 20,
        updated_by: None,
        updated_time: None,
        deleted: false,
        expires_time: None,
        delivered_time: None,
        reason: None,
        reply_to: None,
    };
    store
        .insert_event_log(&log, Some(i64::MAX), Audience::default().with(hook.slot))
        .await
        .unwrap();
    store
        .session_started(
            &tenant,
            &session(&device, 1_000, "tcp"),
            Audience::default().with(hook.slot),
        )
        .await
        .unwrap();
    // Written without webhooks: nothing waits.
    store
        .record_ack(
            &tenant,
            &device.id,
            "c-1",
            &json!({"ok": true}),
            30,
            Audience::default(),
        )
        .await
        .unwrap();

    let waiting = store.waiting_events(&hook, 100).await.unwrap();
    let telemetry: Vec<&str> = waiting
        .iter()
        .filter(|(_, e)| e.kind == StreamType::Telemetry)
        .map(|(_, e)| e.id.as_str())
        .collect();
    assert_eq!(telemetry, outbox.iter().map(|e| e.id.as_str()).collect::<Vec<_>>());
    let read_back: Vec<&WebhookEvent> = waiting
        .iter()
        .filter(|(_, e)| e.kind == StreamType::Telemetry)
        .map(|(_, e)| e)
        .collect();
    assert_eq!(
        read_back,
        outbox.iter().collect::<Vec<_>>(),
        "each event as it was written"
    );
    // Committed together for the same webhooks: one row, whose events leave together, the
    // first row whole even beyond the limit.
    assert!(waiting[..3].iter().all(|(key, _)| *key == waiting[0].0));
    assert_eq!(store.waiting_events(&hook, 1).await.unwrap(), waiting[..3]);
    assert_eq!(store.waiting_events(&hook, 4).await.unwrap(), waiting[..4]);
    let kinds: BTreeSet<&str> = waiting.iter().map(|(_, e)| e.kind.as_str()).collect();
    assert_eq!(kinds, BTreeSet::from(["telemetry", "eventLog", "connection"]));
    assert_eq!(waiting.len(), 5);
    let logged = waiting.iter().find(|(_, e)| e.kind == StreamType::EventLog).unwrap();
    let data: serde_json::Value = serde_json::from_str(&logged.1.data).unwrap();
    assert_eq!(
        (data["id"].clone(), data["status"].clone()),
        (json!("log-1"), json!("processing"))
    );
    let connection = waiting.iter().find(|(_, e)| e.kind == StreamType::Connection).unwrap();
    let data: serde_json::Value = serde_json::from_str(&connection.1.data).unwrap();
    assert_eq!(
        (data["connected"].clone(), data["connectedTime"].clone()),
        (json!(true), json!(1_000))
    );
    let telemetry_of = |waiting: &[(gantry_core::webhook::OutboxKey, WebhookEvent)]| -> Vec<String> {
        waiting.iter().map(|(_, e)| e.id.clone()).collect()
    };
    let quiet_waits = store.waiting_events(&quiet, 100).await.unwrap();
    assert_eq!(telemetry_of(&quiet_waits), telemetry, "the same rows wait for both");
    // Another project's webhook reads none of them.
    let elsewhere = new_project(&store, &tenant, "elsewhere").await;
    let stranger_hook = webhook_record(&elsewhere, StreamType::ALL.to_vec());
    store.insert_webhook(&stranger_hook, 20).await.unwrap();
    let stranger_hook = store.get_webhook(&tenant, &stranger_hook.id).await.unwrap().unwrap();
    assert_eq!(stranger_hook.slot, hook.slot, "slots are per project");
    assert!(store.waiting_events(&stranger_hook, 100).await.unwrap().is_empty());

    // A delivery of the first event takes its row's other two with it: the rest still wait, in order.
    let delivery = |id: DeliveryId, created: i64, count: u32| Delivery {
        id,
        webhook_id: hook.id.clone(),
        tenant_id: tenant.clone(),
        status: DeliveryStatus::Pending,
        event_count: count,
        attempts: 0,
        last_http_status: None,
        last_error: None,
        created_time: created,
        first_attempt_time: None,
        last_attempt_time: None,
        next_attempt_time: Some(created),
        finished_time: None,
        body: "{}".to_owned(),
    };
    let first = delivery(DeliveryId::generate(), 100, 3);
    let keys: Vec<_> = waiting.iter().take(3).map(|(k, _)| *k).collect();
    store.insert_delivery(&first, &keys).await.unwrap();
    let rest = store.waiting_events(&hook, 100).await.unwrap();
    assert_eq!(
        rest.iter().map(|(_, e)| e.id.clone()).collect::<Vec<_>>(),
        waiting[3..].iter().map(|(_, e)| e.id.clone()).collect::<Vec<_>>()
    );
    assert_eq!(store.pending_delivery(&hook.id).await.unwrap(), Some(first.clone()));
    assert!(store.count_pending_deliveries().await.unwrap() >= 1);

    let mut done = first.clone();
    done.status = DeliveryStatus::Delivered;
    done.attempts = 3;
    done.last_http_status = Some(204);
    done.last_error = None;
    done.first_attempt_time = Some(100);
    done.last_attempt_time = Some(400);
    done.next_attempt_time = None;
    done.finished_time = Some(401);
    store.update_delivery(&done).await.unwrap();
    assert_eq!(store.pending_delivery(&hook.id).await.unwrap(), None);
    let second = delivery(DeliveryId::generate(), 500, 2);
    let keys: Vec<_> = rest.iter().map(|(k, _)| *k).collect();
    store.insert_delivery(&second, &keys).await.unwrap();
    // Another node taking the same events stores nothing.
    let again = delivery(DeliveryId::generate(), 600, 2);
    assert!(matches!(
        store.insert_delivery(&again, &keys).await,
        Err(Error::Conflict(_))
    ));
    assert!(store.waiting_events(&hook, 100).await.unwrap().is_empty());
    // Taken by one webhook, an event still waits for the other, until it takes it too.
    let still = store.waiting_events(&quiet, 100).await.unwrap();
    assert_eq!(telemetry_of(&still), telemetry_of(&quiet_waits));
    let quiet_delivery = Delivery {
        webhook_id: quiet.id.clone(),
        ..delivery(DeliveryId::generate(), 700, 3)
    };
    let keys: Vec<_> = still.iter().map(|(k, _)| *k).collect();
    store.insert_delivery(&quiet_delivery, &keys).await.unwrap();
    assert!(store.waiting_events(&quiet, 100).await.unwrap().is_empty());
    let listed = store.list_deliveries(&tenant, &hook.id, all()).await.unwrap();
    assert_eq!((listed.total, listed.items), (2, vec![second.clone(), done]));
    let stranger = new_tenant(&store, "stranger").await;
    assert_eq!(
        store.list_deliveries(&stranger, &hook.id, all()).await.unwrap().total,
        0
    );

    // Deleting the webhook drops its deliveries and whatever still waits for it.
    let late = [event_at(&device, EventId::generate(), "temp", json!(9), 9)];
    store.commit_events(&late, &outbox[..1]).await.unwrap().await.unwrap();
    assert_eq!(store.waiting_events(&hook, 100).await.unwrap().len(), 1);
    store.delete_webhook(&tenant, &hook.id).await.unwrap();
    assert!(store.waiting_events(&hook, 100).await.unwrap().is_empty());
    assert_eq!(
        store.waiting_events(&quiet, 100).await.unwrap().len(),
        1,
        "what waits for the other webhook stays"
    );
    assert_eq!(store.list_deliveries(&tenant, &hook.id, all()).await.unwrap().total, 0);
    assert_eq!(store.pending_delivery(&hook.id).await.unwrap(), None);
}
