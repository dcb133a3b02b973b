//! The clustered engine, SQLite's other event path, beside the staging engine until a
//! measurement decides between them (issue 26; docs/PERFORMANCE.md, "The clustered engine").
//! Ingest commits events straight into device_events_clustered (migration 0019) with the shadows
//! and kept counts they change, in the main file, on its one writer connection; those commits do
//! not wait for the disk, and the flusher (sqlite/flush.rs) puts them on disk before they are
//! acknowledged. Reads and deletes are the shared ones (`Kept`) over that table.
//!
//! Why no staging: the table is clustered by device and device time, and a batch is written
//! sorted by device, so a commit writes about one leaf of the table and of each listing index
//! per device it holds, however many of the device's events it holds.
//!
//! The API's writes share the writer (sqlite/mod.rs): a commit holds at most
//! `EVENTS_PER_COMMIT` events (whole devices, but for a device with more) and a larger batch
//! commits in several, releasing the writer between them, so that an API write that waits meets
//! at most one such commit (issue 26 item 4).
//!
//! Reads may see a commit before its flush has ended: nobody is told it is stored until then,
//! but a read may show an event that a power cut within those milliseconds takes back.

mod keys;

use std::time::Instant;

use async_trait::async_trait;
use gantry_core::Result;
use gantry_core::event::{DeviceEvent, ShadowAttribute};
use gantry_core::ids::{DeviceId, EventId, TenantId};
use gantry_core::paging::{Page, PageRequest};
use gantry_core::query::EventQuery;
use gantry_core::store::{Durable, EventStore};
use sqlx::AnyConnection;

use self::keys::{DeviceKeys, Keys};
use super::database::{Database, Unsynced};
use super::flush::Flusher;
use crate::engine::{EngineFigures, EventEngine};
use crate::events::counts::Tally;
use crate::events::{EventsTable, Kept, by_id, update_shadows, values_clause};
use crate::row::to_json;

/// The table's rows for reads: the join gives each its device id (`COLUMNS` unqualified).
const CLUSTERED: EventsTable = EventsTable {
    rows: "event_devices JOIN device_events_clustered USING (device_key)",
    table: "device_events_clustered",
    device_id: "(SELECT device_id FROM event_devices WHERE event_devices.device_key = device_events_clustered.device_key)",
};

/// The table's columns as an insert binds them (`bind_event`).
const INSERT_COLUMNS: &str = "device_key, device_ts, id, tenant_id, project_id, model_id, attribute_code, \
                              attribute_type, attribute_data, channel, ingress_ts, correlation_id, context, \
                              created_by, created_time";
const INSERT_FIELDS: usize = 15;

/// Rows per multi-row statement (anonymous placeholders: 128 × 15 values stays under SQLite's
/// 32,766), as the staging engine's.
const ROWS_PER_STATEMENT: usize = 128;

/// Events per ingest transaction, about (whole devices): an API write waiting for the writer meets
/// at most one commit this large; fewer per commit write more pages per event.
const EVENTS_PER_COMMIT: usize = 1_024;

/// The engine: the database's pools, the devices' keys, the flusher of the main file's WAL.
#[derive(Debug)]
pub(crate) struct ClusteredEvents {
    database: Database,
    kept: Kept,
    keys: DeviceKeys,
    flusher: Flusher,
}

impl ClusteredEvents {
    pub(crate) fn start(database: Database) -> Self {
        let flusher = Flusher::start(database.wal_file());
        ClusteredEvents {
            kept: Kept {
                pool: database.pool.clone(),
                hours: true,
                events: &CLUSTERED,
            },
            database,
            keys: DeviceKeys::default(),
            flusher,
        }
    }

    pub(crate) fn database(&self) -> &Database {
        &self.database
    }

    /// Commits `events` (whole devices) in one transaction on the writer, unsynced.
    async fn commit_part(&self, events: &[&DeviceEvent]) -> Result<()> {
        let began = Instant::now();
        let mut conn = Unsynced::acquire(&self.database.writer).await?;
        conn.unsync().await?;
        let mut tx = conn.begin().await.map_err(crate::error::db_error)?;
        let keys = self.keys.of(&mut tx, events).await?;
        write_events(&mut tx, events, &keys).await?;
        tx.commit().await.map_err(crate::error::db_error)?;
        conn.synced().await?;
        self.keys.learn(keys);
        self.flusher.stats().committed(began.elapsed());
        Ok(())
    }
}

/// What an ingest transaction writes: the events, each device's and attribute's newest into the
/// shadows, and the kept counts. Whatever else must change with the events goes here, in the same
/// transaction.
async fn write_events(conn: &mut AnyConnection, events: &[&DeviceEvent], keys: &Keys<'_>) -> Result<()> {
    insert_events(conn, events, keys).await?;
    update_shadows(conn, events.iter().copied(), ROWS_PER_STATEMENT).await?;
    count_events(conn, events).await
}

async fn insert_events(conn: &mut AnyConnection, events: &[&DeviceEvent], keys: &Keys<'_>) -> Result<()> {
    for chunk in events.chunks(ROWS_PER_STATEMENT) {
        let text = format!(
            "INSERT INTO device_events_clustered ({INSERT_COLUMNS}) VALUES {}",
            values_clause(chunk.len(), INSERT_FIELDS, true)
        );
        let mut query = sqlx::query(&text);
        for e in chunk {
            query = query
                .bind(keys.of(e.device_id.as_str()))
                .bind(e.device_timestamp)
                .bind(e.id.as_str())
                .bind(e.tenant_id.as_str())
                .bind(e.project_id.as_str())
                .bind(e.model_id.as_str())
                .bind(e.attribute_code.as_str())
                .bind(e.attribute_type.as_str())
                .bind(to_json(&e.attribute_data)?)
                .bind(e.channel.as_str())
                .bind(e.ingress_time_stamp)
                .bind(e.correlation_id.as_deref())
                .bind(e.context.as_ref().map(to_json).transpose()?)
                .bind(e.created_by.as_str())
                .bind(e.created_time);
        }
        query.execute(&mut *conn).await.map_err(crate::error::db_error)?;
    }
    Ok(())
}

/// Keys of the kept counts per statement (5 values each).
const KEYS_PER_STATEMENT: usize = 500;

async fn count_events(conn: &mut AnyConnection, events: &[&DeviceEvent]) -> Result<()> {
    let mut tally = Tally::new(true);
    for e in events {
        tally.add(
            e.device_id.as_str(),
            &e.attribute_code,
            e.device_timestamp,
            e.ingress_time_stamp,
            1,
        );
    }
    tally.apply(conn, KEYS_PER_STATEMENT).await
}

/// `events` sorted by device (each device's in their order) cut into parts of whole devices of
/// about `size` events; a device with more than `size` is cut too.
fn parts(events: &[DeviceEvent], size: usize) -> Vec<Vec<&DeviceEvent>> {
    let mut sorted: Vec<&DeviceEvent> = events.iter().collect();
    sorted.sort_by(|a, b| a.device_id.as_str().cmp(b.device_id.as_str()));
    let mut parts = Vec::new();
    let mut part: Vec<&DeviceEvent> = Vec::new();
    for device in sorted.chunk_by(|a, b| a.device_id == b.device_id) {
        if !part.is_empty() && part.len() + device.len() > size {
            parts.push(std::mem::take(&mut part));
        }
        for event in device {
            if part.len() == size {
                parts.push(std::mem::take(&mut part));
            }
            part.push(event);
        }
    }
    if !part.is_empty() {
        parts.push(part);
    }
    parts
}

#[async_trait]
impl EventEngine for ClusteredEvents {
    fn name(&self) -> &'static str {
        "clustered"
    }

    async fn close(&self) {
        self.database.close().await;
    }

    fn figures(&self) -> EngineFigures {
        use crate::figures::{file_size, pool};
        EngineFigures {
            pools: vec![pool("read", &self.database.pool), pool("writer", &self.database.writer)],
            staged_events: None,
            wal_bytes: vec![("main", file_size(&self.database.wal_file()))],
        }
    }
}

#[async_trait]
impl EventStore for ClusteredEvents {
    async fn append_events(&self, events: &[DeviceEvent]) -> Result<()> {
        self.commit_events(events).await?.await
    }

    /// One: the main file has one writer, and commits overlap their flushes already.
    fn ingest_writers(&self) -> usize {
        1
    }

    /// The commits return before their flush; the returned future resolves once a flush after
    /// the last has ended.
    async fn commit_events(&self, events: &[DeviceEvent]) -> Result<Durable> {
        if events.is_empty() {
            return Ok(Box::pin(std::future::ready(Ok(()))));
        }
        for part in parts(events, EVENTS_PER_COMMIT) {
            self.commit_part(&part).await?;
        }
        let flushed = self.flusher.after_commit(None);
        Ok(Box::pin(
            async move { flushed.await.map_err(crate::error::io_unavailable) },
        ))
    }

    async fn get_event(&self, tenant: &TenantId, id: &EventId) -> Result<Option<DeviceEvent>> {
        self.kept.get(tenant, id).await
    }

    async fn delete_event(&self, tenant: &TenantId, id: &EventId) -> Result<bool> {
        let mut tx = self.database.writer.begin().await.map_err(crate::error::db_error)?;
        let deleted = self.kept.delete(&mut tx, &by_id(tenant, id)).await?;
        tx.commit().await.map_err(crate::error::db_error)?;
        Ok(deleted > 0)
    }

    async fn list_events(&self, query: &EventQuery, page: PageRequest) -> Result<Page<DeviceEvent>> {
        self.kept.list(query, page).await
    }

    async fn delete_events_before(&self, cutoff: i64, limit: i64) -> Result<u64> {
        let mut tx = self.database.writer.begin().await.map_err(crate::error::db_error)?;
        let deleted = self.kept.delete_before(&mut tx, cutoff, limit).await?;
        tx.commit().await.map_err(crate::error::db_error)?;
        Ok(deleted)
    }

    async fn shadow(&self, tenant: &TenantId, device: &DeviceId) -> Result<Vec<(ShadowAttribute, i64)>> {
        self.kept.shadow(tenant, device).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use gantry_core::enums::{Channel, DataType};
    use gantry_core::ids::{ModelId, ProjectId};

    fn event(device: &str, n: i64) -> DeviceEvent {
        DeviceEvent {
            id: EventId::generate(),
            tenant_id: TenantId::from_string("t".to_owned()),
            project_id: ProjectId::from_string("p".to_owned()),
            model_id: ModelId::from_string("m".to_owned()),
            device_id: DeviceId::from_string(device.to_owned()),
            attribute_code: "temp".into(),
            attribute_type: DataType::Float,
            attribute_data: serde_json::json!(n),
            channel: Channel::M,
            ingress_time_stamp: n,
            device_timestamp: n,
            correlation_id: None,
            context: None,
            created_by: "DEVICE".into(),
            created_time: n,
            deleted: false,
        }
    }

    /// Parts hold whole devices, each device's events in their order, and no more than their
    /// size but for a device that has more on its own.
    #[test]
    fn parts_hold_whole_devices_in_order() {
        let events: Vec<DeviceEvent> = [("b", 1), ("a", 2), ("b", 3), ("c", 4), ("a", 5), ("c", 6), ("c", 7)]
            .into_iter()
            .map(|(d, n)| event(d, n))
            .collect();
        let shape = |size| -> Vec<Vec<(String, i64)>> {
            parts(&events, size)
                .iter()
                .map(|part| {
                    part.iter()
                        .map(|e| (e.device_id.to_string(), e.device_timestamp))
                        .collect()
                })
                .collect()
        };
        let pair = |d: &str, n| (d.to_owned(), n);
        assert_eq!(
            shape(4),
            vec![
                vec![pair("a", 2), pair("a", 5), pair("b", 1), pair("b", 3)],
                vec![pair("c", 4), pair("c", 6), pair("c", 7)],
            ]
        );
        assert_eq!(shape(3)[0], vec![pair("a", 2), pair("a", 5)]);
        assert_eq!(
            shape(2)[2],
            vec![pair("c", 4), pair("c", 6)],
            "a device larger than a part is cut"
        );
        assert_eq!(shape(100).len(), 1);
    }
}
