//! EventRateStore: each project's events per minute, added up across flushes and nodes, read
//! per project and tenant, deleted once old; and the counting service over it.

use std::sync::Arc;

use gantry_core::event::EventMinute;
use gantry_core::event_rate::{EventRateService, KEPT_MS, WINDOW_MINUTES};
use gantry_core::store::EventRateStore;

use super::*;

const MINUTE: i64 = 60_000;

fn row(project: &Project, minute: i64, events: u64) -> EventMinute {
    EventMinute {
        tenant_id: project.record.tenant_id.clone(),
        project_id: project.id.clone(),
        minute,
        events,
    }
}

pub(crate) async fn event_minutes_add_up_per_project_and_are_deleted_once_old(store: SqlStore) {
    let t1 = new_tenant(&store, "rate-t1").await;
    let t2 = new_tenant(&store, "rate-t2").await;
    let p1 = new_project(&store, &t1, "rate-p1").await;
    let p2 = new_project(&store, &t1, "rate-p2").await;
    let foreign = new_project(&store, &t2, "rate-p3").await;
    let base = 1_000 * MINUTE;
    store
        .add_event_minutes(&[row(&p1, base, 3), row(&p1, base + MINUTE, 5), row(&p2, base, 7)])
        .await
        .unwrap();
    // A second flush (or another node's) adds to the minutes it shares.
    store
        .add_event_minutes(&[
            row(&p1, base + MINUTE, 10),
            row(&p1, base + 3 * MINUTE, 1),
            row(&foreign, base, 9),
        ])
        .await
        .unwrap();
    store.add_event_minutes(&[]).await.unwrap();

    assert_eq!(
        store.event_minutes(&t1, &p1.id, base).await.unwrap(),
        [(base, 3), (base + MINUTE, 15), (base + 3 * MINUTE, 1)]
    );
    assert_eq!(
        store.event_minutes(&t1, &p1.id, base + MINUTE).await.unwrap(),
        [(base + MINUTE, 15), (base + 3 * MINUTE, 1)],
        "the window starts at `since`, included"
    );
    assert_eq!(store.event_minutes(&t1, &p2.id, base).await.unwrap(), [(base, 7)]);
    assert_eq!(
        store.event_minutes(&t1, &foreign.id, 0).await.unwrap(),
        [],
        "another tenant's project reads as having none"
    );
    assert_eq!(store.event_minutes(&t2, &foreign.id, 0).await.unwrap(), [(base, 9)]);

    assert_eq!(store.delete_event_minutes_before(base + MINUTE).await.unwrap(), 3);
    assert_eq!(
        store.event_minutes(&t1, &p1.id, 0).await.unwrap(),
        [(base + MINUTE, 15), (base + 3 * MINUTE, 1)]
    );
    assert_eq!(store.event_minutes(&t1, &p2.id, 0).await.unwrap(), []);
    assert_eq!(store.delete_event_minutes_before(base + MINUTE).await.unwrap(), 0);
}

/// Two nodes' services on one store: each reads its own unflushed counts at once and the
/// other's once flushed; a flush adds each count once.
pub(crate) async fn counted_events_read_per_minute_across_nodes(store: SqlStore) {
    let tenant = new_tenant(&store, "rate-nodes").await;
    let model = new_model(&store, &tenant, "m", DeviceType::Crane, false).await;
    let project = new_project(&store, &tenant, "rate-nodes-p").await;
    let other = new_project(&store, &tenant, "rate-nodes-q").await;
    let device = new_device(&store, &tenant, "d", &project, &model).await;
    let elsewhere = new_device(&store, &tenant, "e", &other, &model).await;
    let events = |device: &Device, n: usize| -> Vec<DeviceEvent> {
        (0..n)
            .map(|i| event_at(device, EventId::generate(), "temp", json!(i), i as i64))
            .collect()
    };
    let store: Arc<SqlStore> = Arc::new(store);
    let (a, b) = (
        EventRateService::new(store.clone()),
        EventRateService::new(store.clone()),
    );
    let now = 2_000 * MINUTE + 30_000;
    let mut batch = events(&device, 4);
    batch.extend(events(&elsewhere, 2));
    batch.extend(events(&device, 1));
    a.count(&batch, now - 2 * MINUTE);
    a.count(&events(&device, 3), now);
    b.count(&events(&device, 20), now);

    let minutes =
        |rate: gantry_core::event_rate::EventRate| -> Vec<u64> { rate.minutes[WINDOW_MINUTES - 3..].to_vec() };
    let read = a.last_hour(&project, now).await.unwrap();
    assert_eq!(read.start, now - 30_000 - 59 * MINUTE);
    assert_eq!(minutes(read), [5, 0, 3], "node a sees its own counts before a flush");
    a.flush().await.unwrap();
    a.flush().await.unwrap();
    assert_eq!(
        minutes(a.last_hour(&project, now).await.unwrap()),
        [5, 0, 3],
        "each count once"
    );
    assert_eq!(minutes(b.last_hour(&project, now).await.unwrap()), [5, 0, 23]);
    b.flush().await.unwrap();
    let read = a.last_hour(&project, now).await.unwrap();
    assert_eq!(minutes(read.clone()), [5, 0, 23], "node b's flush adds up");
    assert_eq!((read.current(), read.last_full(), read.total()), (23, 0, 28));
    assert_eq!(read.minutes.len(), WINDOW_MINUTES);
    assert_eq!(a.last_hour(&other, now).await.unwrap().total(), 2);
    assert_eq!(
        a.last_hour(&project, now + 60 * MINUTE).await.unwrap().total(),
        0,
        "an hour on, the minutes are out of the window"
    );

    assert_eq!(
        a.purge(now - 30_000 + KEPT_MS).await.unwrap(),
        2,
        "the older minute of each project"
    );
    assert_eq!(a.last_hour(&project, now).await.unwrap().total(), 23);
}
