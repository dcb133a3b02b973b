//! Committed events onto their projects' push streams (`feed`), in commit order: the ingest
//! writers hand every durable batch here (`Ingest::on_committed`). Telemetry is published at
//! once, in the batch's order; the shadow attributes a batch changed need the shadow read back,
//! which a task of its own does per device, in the order the batches came, so the writers never
//! wait for a read. Events of projects nobody follows cost a map lookup per batch and project.

use std::collections::HashMap;
use std::sync::Arc;

use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::event::DeviceEvent;
use crate::feed::Feeds;
use crate::ids::{DeviceId, ProjectId};
use crate::ingest::CommitObserver;
use crate::store::Store;
use crate::stream::StreamType;

/// The observer to give `Ingest::on_committed`, and the task of `tasks` that publishes shadow
/// changes. It ends once `stop` is cancelled and the changes queued before are published (or
/// when the ingest pipeline, holding the observer, is dropped).
pub fn stream_publisher(
    store: Arc<dyn Store>,
    feeds: Arc<Feeds>,
    tasks: &TaskTracker,
    stop: CancellationToken,
) -> CommitObserver {
    let (shadows, mut changed) = mpsc::unbounded_channel::<Vec<DeviceEvent>>();
    let publisher_feeds = feeds.clone();
    tasks.spawn(async move {
        loop {
            // Biased: what was queued before the stop is published first.
            let events = tokio::select! {
                biased;
                events = changed.recv() => events,
                _ = stop.cancelled() => None,
            };
            let Some(events) = events else { break };
            publish_shadow(&*store, &publisher_feeds, &events).await;
        }
    });
    Arc::new(move |events: &[DeviceEvent]| {
        let mut followed: HashMap<&ProjectId, bool> = HashMap::new();
        // Each device's events, devices in the order they first come in the batch.
        let mut by_device: Vec<Vec<DeviceEvent>> = Vec::new();
        let mut slot: HashMap<&DeviceId, usize> = HashMap::new();
        for event in events {
            if !*followed
                .entry(&event.project_id)
                .or_insert_with(|| feeds.follows(&event.project_id))
            {
                continue;
            }
            feeds.publish(&event.project_id, StreamType::Telemetry, &event.device_id, || {
                serde_json::to_string(event).unwrap_or_default()
            });
            let at = *slot.entry(&event.device_id).or_insert_with(|| {
                by_device.push(Vec::new());
                by_device.len() - 1
            });
            by_device[at].push(event.clone());
        }
        for events in by_device {
            let _ = shadows.send(events);
        }
    })
}

/// Publishes the shadow attributes of one device that `events` (committed) changed: those whose
/// value in the shadow read now is one of theirs. A failure to read the shadow costs the stream
/// its `shadow` event, never the events' commit.
async fn publish_shadow(store: &dyn Store, feeds: &Feeds, events: &[DeviceEvent]) {
    let Some(first) = events.first() else {
        return;
    };
    let shadow = match store.shadow(&first.tenant_id, &first.device_id).await {
        Ok(shadow) => shadow,
        Err(e) => {
            tracing::warn!(device = %first.device_id, error = %e, "shadow change not pushed");
            return;
        }
    };
    let changed: serde_json::Map<String, serde_json::Value> = shadow
        .into_iter()
        .filter(|(attribute, _)| {
            events.iter().any(|e| {
                e.attribute_code == attribute.code
                    && e.device_timestamp == attribute.timestamp
                    && e.attribute_data == attribute.value
            })
        })
        .filter_map(|(attribute, _)| Some((attribute.code.clone(), serde_json::to_value(&attribute).ok()?)))
        .collect();
    if !changed.is_empty() {
        let device = &first.device_id;
        feeds.publish(&first.project_id, StreamType::Shadow, device, || {
            serde_json::json!({"deviceId": device, "attributeMap": changed}).to_string()
        });
    }
}
