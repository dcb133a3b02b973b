//! The data a run needs. The catalog (project, model, devices) is created over the REST API, so
//! its rows are exactly what the service writes; the millions of events for the listing scenario
//! are written straight into the store through `EventStore::append_events` while no server runs,
//! because posting them one by one over HTTP would take longer than the whole benchmark.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use anyhow::{Context, bail};
use bytes::Bytes;
use futures::{StreamExt, TryStreamExt};
use gantry_core::enums::{Channel, DataType};
use gantry_core::event::DeviceEvent;
use gantry_core::ids::{DeviceId, EventId, ModelId, ProjectId, TenantId};
use gantry_core::store::EventStore;
use hyper::{Method, StatusCode};
use serde::Serialize;
use serde_json::json;
use tokio::sync::mpsc;

use crate::http::{Api, Conn, Target};

/// The model's attributes; events cycle through them, so one attribute holds a third of a
/// device's events (what the attributeCode listing reads).
pub const ATTRIBUTES: [&str; 3] = ["temp", "load", "speed"];
/// A writable attribute of the model: what the control scenario sends down.
pub const CONTROL_ATTRIBUTE: &str = "setpoint";
/// The attribute the attributeCode listing asks for.
pub const LISTED_ATTRIBUTE: &str = "load";
/// The attribute of the series scenario's readings, one every `SERIES_SPACING_MS`.
pub const SERIES_ATTRIBUTE: &str = "level";
pub const SERIES_SPACING_MS: i64 = 60_000;
/// Device time of a device's first seeded event: 2024-01-01T00:00:00Z.
pub const FIRST_DEVICE_TS: i64 = 1_704_067_200_000;
/// Seeded events are this far apart in device time.
pub const SPACING_MS: i64 = 1000;
/// Events per `append_events` call: one transaction, which the store splits into short
/// statements. Large batches mean few commits, which is what bounds the seeding rate.
pub const BATCH: usize = 5000;

#[derive(Debug, Clone)]
pub struct DeviceRef {
    pub id: String,
    pub token: String,
}

/// What was created over REST.
#[derive(Debug, Clone)]
pub struct Fleet {
    pub project_id: String,
    pub model_id: String,
    /// Devices the ingest scenario posts to.
    pub ingest: Vec<DeviceRef>,
    /// Devices that hold the rest of the store's events (and are read by GET device/shadow).
    pub fillers: Vec<DeviceRef>,
    /// The device whose events are listed.
    pub listed: DeviceRef,
    /// Devices that take controls.
    pub control: Vec<DeviceRef>,
    /// Devices that reconnect with desired values waiting.
    pub reconnect: Vec<DeviceRef>,
    /// Devices that exist only to hold connections (with all the others).
    pub holders: Vec<DeviceRef>,
    pub seconds: f64,
}

/// How many devices of each kind to create.
#[derive(Debug, Clone, Copy, Default)]
pub struct FleetSize {
    pub ingest: usize,
    pub fillers: usize,
    pub control: usize,
    pub reconnect: usize,
    pub holders: usize,
}

impl Fleet {
    pub fn device_count(&self) -> usize {
        self.all().count()
    }

    /// Every device of the fleet.
    pub fn all(&self) -> impl Iterator<Item = &DeviceRef> {
        std::iter::once(&self.listed)
            .chain(&self.ingest)
            .chain(&self.fillers)
            .chain(&self.control)
            .chain(&self.reconnect)
            .chain(&self.holders)
    }
}

/// Creates a project, a model and the devices, 16 requests at a time. `tag` keeps names unique
/// when the same server is benchmarked twice.
pub async fn create_fleet(api: &Api, tag: &str, size: FleetSize) -> anyhow::Result<Fleet> {
    let started = Instant::now();
    let project = api
        .post(
            "/api/v1/projects",
            &json!({"name": format!("bench {tag}"), "status": "product", "address": "load generator"}),
        )
        .await
        .context("creating the project")?;
    let mut attributes: serde_json::Map<String, serde_json::Value> = ATTRIBUTES
        .iter()
        .map(|code| (code.to_string(), json!({"name": code, "dataType": "Float"})))
        .collect();
    attributes.insert(
        SERIES_ATTRIBUTE.to_owned(),
        json!({"name": SERIES_ATTRIBUTE, "dataType": "Float"}),
    );
    attributes.insert(
        CONTROL_ATTRIBUTE.to_owned(),
        json!({"name": CONTROL_ATTRIBUTE, "dataType": "Float", "readable": "W"}),
    );
    let model = api
        .post(
            "/api/v1/deviceModels",
            &json!({"name": format!("bench-model {tag}"), "deviceType": "TowerCrane", "attributesMap": attributes}),
        )
        .await
        .context("creating the model")?;
    let project_id = text(&project["id"])?;
    let model_id = text(&model["id"])?;
    let names: Vec<String> = std::iter::once(format!("bench-{tag}-listed"))
        .chain((0..size.ingest).map(|i| format!("bench-{tag}-ingest-{i:05}")))
        .chain((0..size.fillers).map(|i| format!("bench-{tag}-filler-{i:05}")))
        .chain((0..size.control).map(|i| format!("bench-{tag}-control-{i:02}")))
        .chain((0..size.reconnect).map(|i| format!("bench-{tag}-reconnect-{i:05}")))
        .chain((0..size.holders).map(|i| format!("bench-{tag}-held-{i:05}")))
        .collect();
    let mut devices: Vec<DeviceRef> = futures::stream::iter(names)
        .map(|name| {
            let body = json!({"deviceName": name, "projectId": project_id, "modelId": model_id});
            async move {
                let device = api.post("/api/v1/devices", &body).await?;
                Ok::<_, anyhow::Error>(DeviceRef {
                    id: text(&device["id"])?,
                    token: text(&device["accessToken"])?,
                })
            }
        })
        // `buffered` keeps the order, so the first device is the listed one.
        .buffered(16)
        .try_collect()
        .await
        .context("creating devices")?;
    let holders = devices.split_off(1 + size.ingest + size.fillers + size.control + size.reconnect);
    let reconnect = devices.split_off(1 + size.ingest + size.fillers + size.control);
    let control = devices.split_off(1 + size.ingest + size.fillers);
    let fillers = devices.split_off(1 + size.ingest);
    let ingest = devices.split_off(1);
    let listed = devices.pop().expect("the listed device was created first");
    Ok(Fleet {
        project_id,
        model_id,
        ingest,
        fillers,
        listed,
        control,
        reconnect,
        holders,
        seconds: started.elapsed().as_secs_f64(),
    })
}

fn text(value: &serde_json::Value) -> anyhow::Result<String> {
    value
        .as_str()
        .map(str::to_owned)
        .with_context(|| format!("expected a string, got {value}"))
}

/// How the store was filled.
#[derive(Debug, Clone, Serialize)]
pub struct Seeded {
    /// "store" (written through gantry-store) or "http" (posted to a running Gantry).
    pub method: &'static str,
    /// Events on the listed device.
    pub listed_device_events: u64,
    /// Events in the store, all devices.
    pub store_events: u64,
    pub seconds: f64,
    pub events_per_second: f64,
}

/// Device time of event `i` of a device.
pub fn device_ts(i: u64) -> i64 {
    FIRST_DEVICE_TS + i as i64 * SPACING_MS
}

/// A device's events as the ingest path would store them.
struct EventMaker {
    tenant: TenantId,
    project: ProjectId,
    model: ModelId,
    created: i64,
}

impl EventMaker {
    fn event(&self, device: &DeviceId, i: u64) -> DeviceEvent {
        let ts = device_ts(i);
        DeviceEvent {
            id: EventId::generate(),
            tenant_id: self.tenant.clone(),
            project_id: self.project.clone(),
            model_id: self.model.clone(),
            device_id: device.clone(),
            attribute_code: ATTRIBUTES[(i % ATTRIBUTES.len() as u64) as usize].to_owned(),
            attribute_type: DataType::Float,
            attribute_data: json!((i % 1000) as f64 / 10.0),
            channel: Channel::M,
            ingress_time_stamp: ts + 20,
            device_timestamp: ts,
            correlation_id: None,
            context: None,
            created_by: "DEVICE".to_owned(),
            created_time: self.created,
            deleted: false,
        }
    }
}

/// Writes `listed_events` events for the listed device and `store_events - listed_events` spread
/// over the filler devices, through the store, with no server running, `batch` events per
/// transaction. One task builds batches while `writers` tasks commit them (1 for SQLite, whose
/// writes are serial anyway).
pub async fn seed_store(
    store_url: &str,
    fleet: &Fleet,
    listed_events: u64,
    store_events: u64,
    batch: usize,
    writers: usize,
) -> anyhow::Result<Seeded> {
    let started = Instant::now();
    let store = gantry::store::connect(store_url)
        .await
        .context("opening the store to seed it")?;
    let maker = Arc::new(EventMaker {
        // The system administrator's records live in the default tenant.
        tenant: TenantId::default_tenant(),
        project: ProjectId::from_string(&fleet.project_id),
        model: ModelId::from_string(&fleet.model_id),
        created: gantry_core::time::now_ms(),
    });
    let mut plan: Vec<(DeviceId, u64)> = vec![(DeviceId::from_string(&fleet.listed.id), listed_events)];
    let rest = store_events.saturating_sub(listed_events);
    if rest > 0 && fleet.fillers.is_empty() {
        bail!("{rest} events to spread but no filler devices");
    }
    let per_filler = rest / fleet.fillers.len().max(1) as u64;
    let mut extra = rest % fleet.fillers.len().max(1) as u64;
    for filler in &fleet.fillers {
        let n = per_filler + u64::from(extra > 0);
        extra = extra.saturating_sub(1);
        plan.push((DeviceId::from_string(&filler.id), n));
    }

    // Each writer owns a share of the devices, with its own producer: two transactions never
    // touch one device's count and shadow rows at once (on PostgreSQL they would deadlock).
    let writers = writers.max(1);
    let mut shares: Vec<Vec<(DeviceId, u64)>> = vec![Vec::new(); writers];
    for (i, entry) in plan.into_iter().enumerate() {
        shares[i % writers].push(entry);
    }
    let written = Arc::new(AtomicU64::new(0));
    let mut tasks = Vec::new();
    for share in shares {
        let (tx, mut rx) = mpsc::channel::<Vec<DeviceEvent>>(4);
        // Device by device, in time order: each device's index entries go to one end of its
        // range, as they would from a live device, instead of scattering over the whole index.
        let maker = maker.clone();
        let producer = tokio::task::spawn_blocking(move || {
            for (device, count) in share {
                let mut i = 0;
                while i < count {
                    let end = (i + batch as u64).min(count);
                    let events: Vec<DeviceEvent> = (i..end).map(|k| maker.event(&device, k)).collect();
                    if tx.blocking_send(events).is_err() {
                        return;
                    }
                    i = end;
                }
            }
        });
        let (store, written) = (store.clone(), written.clone());
        tasks.push(tokio::spawn(async move {
            let step = (store_events / 10).max(1);
            while let Some(events) = rx.recv().await {
                store.append_events(&events).await?;
                let n = events.len() as u64;
                let done = written.fetch_add(n, Ordering::Relaxed) + n;
                // Progress at every tenth, whichever writer crosses it.
                if (done - n) / step != done / step {
                    eprintln!(
                        "    seeded {done} of {store_events} events ({:.0} s)",
                        started.elapsed().as_secs_f64()
                    );
                }
            }
            producer.await?;
            Ok::<_, anyhow::Error>(())
        }));
    }
    for task in tasks {
        task.await?.context("seeding events")?;
    }
    // Events are staged first and moved into the indexed table in the background; the read
    // scenario measures a store at rest, with everything moved.
    store.catch_up().await.context("moving the seeded events")?;
    // Closing the pool lets SQLite checkpoint its WAL before the server opens the file.
    store.close().await;
    let seconds = started.elapsed().as_secs_f64();
    let total = written.load(Ordering::Relaxed);
    Ok(Seeded {
        method: "store",
        listed_device_events: listed_events,
        store_events: total,
        seconds,
        events_per_second: total as f64 / seconds.max(f64::EPSILON),
    })
}

/// Writes `count` readings of `SERIES_ATTRIBUTE` for `device` (a filler), a minute apart from
/// `FIRST_DEVICE_TS`, through the store with no server running: the series scenario's data,
/// beside the read scenario's events.
pub async fn seed_series(store_url: &str, fleet: &Fleet, device: &DeviceRef, count: u64) -> anyhow::Result<f64> {
    let started = Instant::now();
    let store = gantry::store::connect(store_url)
        .await
        .context("opening the store to seed it")?;
    let maker = EventMaker {
        tenant: TenantId::default_tenant(),
        project: ProjectId::from_string(&fleet.project_id),
        model: ModelId::from_string(&fleet.model_id),
        created: gantry_core::time::now_ms(),
    };
    let device = DeviceId::from_string(&device.id);
    let mut i = 0;
    while i < count {
        let end = (i + BATCH as u64).min(count);
        let events: Vec<DeviceEvent> = (i..end)
            .map(|k| {
                let mut event = maker.event(&device, k);
                event.attribute_code = SERIES_ATTRIBUTE.to_owned();
                event.device_timestamp = FIRST_DEVICE_TS + k as i64 * SERIES_SPACING_MS;
                event.ingress_time_stamp = event.device_timestamp + 20;
                event
            })
            .collect();
        store.append_events(&events).await.context("seeding the series")?;
        i = end;
    }
    store.catch_up().await.context("moving the seeded series")?;
    store.close().await;
    Ok(started.elapsed().as_secs_f64())
}

/// Posts `count` events for the listed device over HTTP (a remote Gantry, whose store the bench
/// cannot open), `parallel` at a time, with the device's own token.
pub async fn seed_http(target: &Target, device: &DeviceRef, count: u64, parallel: usize) -> anyhow::Result<Seeded> {
    let started = Instant::now();
    let next = Arc::new(AtomicU64::new(0));
    let bearer = crate::http::bearer(&device.token)?;
    let mut tasks = Vec::new();
    for _ in 0..parallel.max(1) {
        let (next, target, bearer, id) = (next.clone(), target.clone(), bearer.clone(), device.id.clone());
        tasks.push(tokio::spawn(async move {
            let mut conn = Conn::connect(target.addr).await?;
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= count {
                    return Ok::<_, anyhow::Error>(());
                }
                let body = json!({
                    "deviceId": id,
                    "attributeCode": ATTRIBUTES[(i % ATTRIBUTES.len() as u64) as usize],
                    "attributeData": (i % 1000) as f64 / 10.0,
                    "attributeDataType": "Float",
                    "deviceTime": gantry_core::time::format_timestamp(device_ts(i)),
                });
                let request = target.request_as(
                    &bearer,
                    Method::POST,
                    "/api/v1/deviceEvents",
                    Some(Bytes::from(body.to_string())),
                );
                let (status, answer) = conn.send(request).await?;
                if status != StatusCode::OK {
                    bail!("seeding event {i}: {status} {}", String::from_utf8_lossy(&answer));
                }
            }
        }));
    }
    for task in tasks {
        task.await??;
    }
    let seconds = started.elapsed().as_secs_f64();
    Ok(Seeded {
        method: "http",
        listed_device_events: count,
        store_events: count,
        seconds,
        events_per_second: count as f64 / seconds.max(f64::EPSILON),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seeded_events_cycle_attributes_and_advance_in_time() {
        let maker = EventMaker {
            tenant: TenantId::default_tenant(),
            project: ProjectId::from_string("p"),
            model: ModelId::from_string("m"),
            created: 0,
        };
        let device = DeviceId::from_string("d");
        let events: Vec<DeviceEvent> = (0..4).map(|i| maker.event(&device, i)).collect();
        assert_eq!(events[0].attribute_code, "temp");
        assert_eq!(events[1].attribute_code, LISTED_ATTRIBUTE);
        assert_eq!(events[3].attribute_code, "temp");
        assert_eq!(events[1].device_timestamp - events[0].device_timestamp, SPACING_MS);
        assert_eq!(events[0].device_timestamp, FIRST_DEVICE_TS);
        assert_ne!(events[0].id, events[1].id);
    }
}
