//! Gantry's store over SQL through sqlx's `Any` driver: what is the same SQL on every engine
//! (`shared`: the catalog, event logs, webhooks, presence, routes), the tables every event ends
//! in (`events`), and the seam an engine crate plugs its event path into (`engine`).
//!
//! The engines are crates of their own (`gantry-store-sqlite`, `gantry-store-postgres`), each
//! with its migrations; each builds a `SqlStore` through `SqlStore::from_engine`, and the binary
//! picks one by the database URL's scheme.

pub mod engine;
pub mod error;
pub mod events;
pub mod outbox;
pub mod row;
mod shared;
pub mod sql;
pub mod stats;
pub mod task;

use std::sync::Arc;

use async_trait::async_trait;
use gantry_core::event::{DeviceEvent, ReportedPosition, ShadowAttribute};
use gantry_core::ids::{DeviceId, EventId, ModelId, ProjectId, TenantId};
use gantry_core::paging::{Page, PageRequest};
use gantry_core::query::EventQuery;
use gantry_core::series::{Bucket, SeriesQuery};
use gantry_core::store::{Durable, EventStore};
use sqlx::pool::PoolConnection;
use sqlx::{Any, AnyPool, Transaction};

use crate::engine::{ApiWrites, Connected, Dialect, EventEngine};
pub use crate::stats::{PoolStats, StoreStats};

/// A query of the Any driver, its parameters partly bound.
pub use crate::shared::AnyQuery;

/// The store: every trait of `gantry_core::store`, the catalog's over `pool` and `writer`, the
/// events' through the engine.
#[derive(Debug, Clone)]
pub struct SqlStore {
    /// Reads.
    pool: AnyPool,
    /// Every write of the catalog (the engine chose it: on SQLite one connection, so that writers
    /// queue in order in this process instead of polling SQLite's lock).
    writer: AnyPool,
    /// Every write of the event logs (`Connected::log_writer`).
    log_writer: AnyPool,
    dialect: &'static Dialect,
    events: Arc<dyn EventEngine>,
    /// Every write through `writer` says so here as it asks for the connection (`ApiWrites`).
    api_writes: Arc<ApiWrites>,
}

impl SqlStore {
    /// The store over an engine that its crate connected (`gantry_store_sqlite::connect`,
    /// `gantry_store_postgres::connect`).
    pub fn from_engine(connected: Connected) -> SqlStore {
        let Connected {
            pool,
            writer,
            log_writer,
            dialect,
            events,
            api_writes,
        } = connected;
        SqlStore {
            pool,
            writer,
            log_writer,
            dialect,
            events,
            api_writes,
        }
    }

    /// `sqlite` or `postgres`.
    pub fn backend(&self) -> &'static str {
        self.dialect.name
    }

    pub fn pool(&self) -> &AnyPool {
        &self.pool
    }

    /// Closes the pools, waiting for connections in use to be returned, and lets the database
    /// files go (another store may open them now).
    pub async fn close(&self) {
        self.events.close().await;
    }

    /// Puts every event the engine holds apart (SQLite's staged events) into device_events now,
    /// as its background mover does, and on PostgreSQL folds every minute rollup into its hour;
    /// returns how many events moved (PostgreSQL holds none apart). For bulk loads and tests:
    /// reads see the events either way.
    pub async fn catch_up(&self) -> gantry_core::Result<u64> {
        self.events.catch_up().await
    }

    /// The connection a statement that writes outside `begin_write` runs on.
    async fn writes(&self) -> gantry_core::Result<PoolConnection<Any>> {
        self.api_writes.asking();
        let conn = self.writer.acquire().await.map_err(error::db_error)?;
        self.api_writes.asking();
        Ok(conn)
    }

    /// A transaction that writes the catalog.
    async fn begin_write(&self) -> gantry_core::Result<Transaction<'static, Any>> {
        self.api_writes.asking();
        let tx = self.writer.begin().await.map_err(error::db_error)?;
        self.api_writes.asking();
        Ok(tx)
    }

    /// A transaction of background work no request waits for (presence, webhook deliveries):
    /// unlike `begin_write` it does not tell `api_writes`, so that it leaves the SQLite mover's
    /// moves long. A write of it that meets a move in flight waits for the move.
    async fn begin_background_write(&self) -> gantry_core::Result<Transaction<'static, Any>> {
        self.writer.begin().await.map_err(error::db_error)
    }

    /// A transaction that writes the event logs (`Dialect::event_logs`) and their outbox.
    async fn begin_log_write(&self) -> gantry_core::Result<Transaction<'static, Any>> {
        self.log_writer.begin().await.map_err(error::db_error)
    }

    /// A transaction of the event-log writer that writes the alarms of `devices` (any when
    /// None), with the keeps the engine holds apart for them folded in first
    /// (`EventEngine::fold_alarm_keeps`).
    async fn begin_alarm_write(
        &self,
        devices: Option<&[&gantry_core::ids::DeviceId]>,
    ) -> gantry_core::Result<Transaction<'static, Any>> {
        let mut tx = self.begin_log_write().await?;
        self.events.fold_alarm_keeps(&mut tx, devices).await?;
        Ok(tx)
    }

    /// Text comparison by code point on both engines (`Dialect::collate`).
    fn collate(&self) -> &'static str {
        self.dialect.collate
    }
}

impl SqlStore {
    /// Reads the statistics: one indexed count, and what the engine keeps of its own.
    pub async fn stats(&self) -> gantry_core::Result<StoreStats> {
        let controls_pending: i64 = sqlx::query_scalar(&format!(
            "SELECT COUNT(*) FROM {} WHERE status = $1",
            self.dialect.event_logs
        ))
        .bind(gantry_core::enums::EventLogStatus::Processing.as_str())
        .fetch_one(&self.pool)
        .await
        .map_err(crate::error::db_error)?;
        let engine = self.events.stats();
        Ok(StoreStats {
            backend: self.backend(),
            pools: engine.pools,
            staged_events: engine.staged_events,
            wal_bytes: engine.wal_bytes,
            controls_pending: controls_pending.max(0) as u64,
        })
    }
}

#[async_trait]
impl EventStore for SqlStore {
    async fn append_events(&self, events: &[DeviceEvent]) -> gantry_core::Result<()> {
        self.events.append_events(events).await
    }

    async fn commit_events(
        &self,
        events: &[DeviceEvent],
        outbox: &[gantry_core::webhook::WebhookEvent],
    ) -> gantry_core::Result<Durable> {
        self.events.commit_events(events, outbox).await
    }

    fn ingest_writers(&self) -> usize {
        self.events.ingest_writers()
    }

    fn keeps_alarms_with_events(&self) -> bool {
        self.events.keeps_alarms_with_events()
    }

    async fn commit_events_keeping(
        &self,
        events: &[DeviceEvent],
        outbox: &[gantry_core::webhook::WebhookEvent],
        keeps: &[gantry_core::store::AlarmKeep],
    ) -> gantry_core::Result<Durable> {
        self.events.commit_events_keeping(events, outbox, keeps).await
    }

    async fn get_event(&self, tenant: &TenantId, id: &EventId) -> gantry_core::Result<Option<DeviceEvent>> {
        self.events.get_event(tenant, id).await
    }

    async fn delete_event(&self, tenant: &TenantId, id: &EventId) -> gantry_core::Result<bool> {
        self.events.delete_event(tenant, id).await
    }

    async fn list_events(&self, query: &EventQuery, page: PageRequest) -> gantry_core::Result<Page<DeviceEvent>> {
        self.events.list_events(query, page).await
    }

    async fn delete_events_before(&self, cutoff: i64, limit: i64) -> gantry_core::Result<u64> {
        self.events.delete_events_before(cutoff, limit).await
    }

    async fn shadow(&self, tenant: &TenantId, device: &DeviceId) -> gantry_core::Result<Vec<(ShadowAttribute, i64)>> {
        self.events.shadow(tenant, device).await
    }

    async fn project_positions(
        &self,
        tenant: &TenantId,
        project: &ProjectId,
        codes: &[(ModelId, Vec<String>)],
    ) -> gantry_core::Result<Vec<ReportedPosition>> {
        self.events.project_positions(tenant, project, codes).await
    }

    async fn series(&self, query: &SeriesQuery) -> gantry_core::Result<Vec<Bucket>> {
        self.events.series(query).await
    }
}
