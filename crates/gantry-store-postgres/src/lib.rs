//! The PostgreSQL engine (scale-out): one pool for reads and writes, and an event path that
//! writes device_events, the shadows and the kept counts in each ingest transaction, which is
//! durable when it commits. Several ingest writers commit side by side, each for its own share
//! of the devices (gantry-core's ingest.rs), so a device's events still commit in order.
//!
//! Its schema is its own migrations (`migrations/`).

use async_trait::async_trait;
use gantry_core::Result;
use gantry_core::event::{DeviceEvent, ReportedPosition, ShadowAttribute};
use gantry_core::ids::{DeviceId, EventId, ModelId, ProjectId, TenantId, WebhookId};
use gantry_core::paging::{Page, PageRequest};
use gantry_core::query::EventQuery;
use gantry_core::series::{Bucket, SeriesQuery};
use gantry_core::store::{Durable, EventStore};
use gantry_core::time::now_ms;
use gantry_core::webhook::WebhookEvent;
use sqlx::AnyPool;

use gantry_store::engine::{Connected, Dialect, EngineStats, EventEngine};
use gantry_store::events::counts::CountChanges;
use gantry_store::events::rollups::SeriesParts;
use gantry_store::events::{COLUMNS, EVENT_FIELDS, EventTables, bind_event, by_id, update_shadows, values_clause};
use gantry_store::events::{EventTableRules, rollups};
use gantry_store::sql::Sql;
pub use gantry_store::task::Chores;

mod folds;

/// PostgreSQL's schema (migrations/).
static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("./migrations");

/// Rows per multi-row statement, each one a network round trip: 15 values each stays well under
/// PostgreSQL's 65,535 parameters.
const ROWS_PER_STATEMENT: usize = 500;

/// Ingest writers: enough that one writer's statements are built and sent while another's
/// execute; more make smaller batches and more commits.
const INGEST_WRITERS: usize = 2;

/// Text compared by code point (not by the database's locale), so name orders match SQLite's.
/// Row locks keep a model or project live while a device is written into it: KEY SHARE rather
/// than SHARE, so device writes do not wait for updates of the record.
const DIALECT: Dialect = Dialect {
    name: "postgres",
    collate: " COLLATE \"C\"",
    lock_in_use: " FOR KEY SHARE",
    lock_to_delete: " FOR UPDATE",
    event_logs: "event_logs",
    log_outbox: "webhook_outbox",
    audit_logs: "audit_logs",
};

/// PostgreSQL counts date ranges by the index: kept counts per hour would add five keys per
/// device and attribute to every ingest transaction instead of two. Its rollups are folded in the
/// background (`folds`); ingest writes them only for late events.
#[derive(Debug)]
struct PostgresKept;

#[async_trait]
impl EventTableRules for PostgresKept {
    /// The all-time counts alone.
    fn count<'a>(&self, changes: &mut CountChanges<'a>, device: &'a str, code: &'a str, _: i64, _: i64, n: i64) {
        changes.add(device, code, n);
    }

    /// None: a date range is counted by the index.
    fn range_total(&self, _query: &EventQuery) -> Option<Sql> {
        None
    }

    /// The fold mark: later arrivals are folded in the background.
    async fn rolled_up_before(&self, tx: &mut sqlx::Transaction<'static, sqlx::Any>) -> Result<i64> {
        folds::mark_for_delete(tx).await
    }

    /// The events that arrived after the fold mark, in the whole units the rollups answer (the
    /// edges are read raw already).
    async fn add_unrolled(&self, pool: &AnyPool, series: &mut SeriesParts<'_>) -> Result<()> {
        if let Some(units) = series.rolled_up() {
            let mark = folds::read_mark(pool).await?;
            series.add_raw(&format!("device_events WHERE {} AND ", rollups::unfolded(mark)), units);
        }
        Ok(())
    }
}

/// `connect_in` with chores of its own: for a store that a tool or a test opens alone.
pub async fn connect(url: &str) -> std::result::Result<gantry_store::SqlStore, sqlx::Error> {
    connect_in(url, Chores::alone()).await
}

/// The store on the database at `url`: connects, brings the schema up to date and starts the
/// engine, its folds run as `chores`, which `SqlStore::close` ends before the pool closes. The
/// pool also holds one connection for each ingest writer, so that ingest under load leaves the
/// API its share.
pub async fn connect_in(url: &str, chores: Chores) -> std::result::Result<gantry_store::SqlStore, sqlx::Error> {
    sqlx::any::install_default_drivers();
    Ok(gantry_store::SqlStore::from_engine(engine(url, chores).await?))
}

/// The engine at `url`, connected, for `SqlStore::from_engine`.
async fn engine(url: &str, chores: Chores) -> std::result::Result<Connected, sqlx::Error> {
    let pool = gantry_store::engine::pool_options(gantry_store::engine::POOL_SIZE + INGEST_WRITERS as u32)
        .connect(url)
        .await?;
    MIGRATOR.run(&pool).await?;
    chores.every(
        folds::FOLD_PERIOD,
        pool.clone(),
        "folding the rollups failed",
        |pool| async move { folds::fold(&pool, now_ms()).await },
    );
    let events = PostgresEvents {
        kept: EventTables {
            pool: pool.clone(),
            rules: std::sync::Arc::new(PostgresKept),
        },
        chores,
    };
    Ok(Connected {
        writer: pool.clone(),
        log_writer: pool.clone(),
        pool,
        dialect: &DIALECT,
        events: std::sync::Arc::new(events),
        api_writes: Default::default(),
    })
}

#[derive(Debug)]
struct PostgresEvents {
    kept: EventTables,
    /// The folds; they end when the store closes or goes.
    chores: Chores,
}

impl PostgresEvents {
    fn pool(&self) -> &AnyPool {
        &self.kept.pool
    }

    /// One transaction: the events, the rollups of those that arrived late (summed up in memory;
    /// the rest are folded in later, `folds`; a batch with events in a running fold's range waits
    /// for it), each device's and attribute's newest into the shadows, the kept counts, each in
    /// statements of `ROWS_PER_STATEMENT` rows (each one a round trip), and the webhook events
    /// they cause (`outbox`).
    async fn write(&self, events: &[DeviceEvent], outbox: &[WebhookEvent]) -> Result<()> {
        if events.is_empty() {
            return Ok(());
        }
        let (mut tx, folded) = loop {
            let mut tx = self.pool().begin().await.map_err(gantry_store::error::db_error)?;
            let marks = folds::marks(&mut tx).await?;
            if !events.iter().any(|e| marks.folding(e.ingress_time_stamp)) {
                break (tx, marks.folded);
            }
            // A fold sums up the range some of these events arrived in: written once it ended.
            tx.rollback().await.map_err(gantry_store::error::db_error)?;
            folds::wait_folded(self.pool(), marks.fence).await?;
        };
        for chunk in events.chunks(ROWS_PER_STATEMENT) {
            let text = format!(
                "INSERT INTO device_events ({COLUMNS}) VALUES {}",
                values_clause(chunk.len(), EVENT_FIELDS, false)
            );
            let query = chunk.iter().try_fold(sqlx::query(&text), bind_event)?;
            query.execute(&mut *tx).await.map_err(gantry_store::error::db_error)?;
        }
        rollups::add_batch(&mut tx, events, folded, ROWS_PER_STATEMENT).await?;
        update_shadows(&mut tx, events, ROWS_PER_STATEMENT).await?;
        let mut changes = CountChanges::new();
        for e in events {
            let (device, code) = (e.device_id.as_str(), e.attribute_code.as_str());
            self.kept
                .rules
                .count(&mut changes, device, code, e.device_timestamp, e.ingress_time_stamp, 1);
        }
        changes.apply(&mut tx, ROWS_PER_STATEMENT).await?;
        gantry_store::outbox::write_outbox(&mut tx, "webhook_outbox", outbox, false).await?;
        tx.commit().await.map_err(gantry_store::error::db_error)
    }
}

#[async_trait]
impl EventEngine for PostgresEvents {
    /// Folds every event stored into the rollups (`folds::fold_all`).
    async fn catch_up(&self) -> Result<u64> {
        folds::fold_all(self.pool()).await?;
        Ok(0)
    }

    /// The folds first (one under way finishes), then the pool.
    async fn close(&self) {
        self.chores.end().await;
        self.pool().close().await;
    }

    /// One pool serves reads, the catalog's writes and ingest; nothing is held apart.
    fn stats(&self) -> EngineStats {
        EngineStats {
            pools: vec![gantry_store::stats::pool("main", self.pool())],
            ..EngineStats::default()
        }
    }

    /// Taken through the webhook's row: nodes share this database.
    async fn lease_webhook(&self, webhook: &WebhookId, owner: &str, now: i64, until: i64) -> Result<bool> {
        gantry_store::engine::take_webhook_lease(self.pool(), webhook, owner, now, until).await
    }
}

#[async_trait]
impl EventStore for PostgresEvents {
    async fn append_events(&self, events: &[DeviceEvent]) -> Result<()> {
        self.write(events, &[]).await
    }

    /// Durable when it returns: the commit is the flush.
    async fn commit_events(&self, events: &[DeviceEvent], outbox: &[WebhookEvent]) -> Result<Durable> {
        self.write(events, outbox).await?;
        Ok(Box::pin(std::future::ready(Ok(()))))
    }

    fn ingest_writers(&self) -> usize {
        INGEST_WRITERS
    }

    async fn get_event(&self, tenant: &TenantId, id: &EventId) -> Result<Option<DeviceEvent>> {
        self.kept.get(tenant, id).await
    }

    async fn delete_event(&self, tenant: &TenantId, id: &EventId) -> Result<bool> {
        let mut tx = self.pool().begin().await.map_err(gantry_store::error::db_error)?;
        let deleted = self.kept.delete(&mut tx, &by_id(tenant, id)).await?;
        tx.commit().await.map_err(gantry_store::error::db_error)?;
        Ok(deleted > 0)
    }

    async fn list_events(&self, query: &EventQuery, page: PageRequest) -> Result<Page<DeviceEvent>> {
        self.kept.list(query, page).await
    }

    async fn delete_events_before(&self, cutoff: i64, limit: i64) -> Result<u64> {
        let mut tx = self.pool().begin().await.map_err(gantry_store::error::db_error)?;
        let deleted = self.kept.delete_before(&mut tx, cutoff, limit).await?;
        tx.commit().await.map_err(gantry_store::error::db_error)?;
        Ok(deleted)
    }

    async fn shadow(&self, tenant: &TenantId, device: &DeviceId) -> Result<Vec<(ShadowAttribute, i64)>> {
        self.kept.shadow(tenant, device).await
    }

    async fn project_positions(
        &self,
        tenant: &TenantId,
        project: &ProjectId,
        codes: &[(ModelId, Vec<String>)],
    ) -> Result<Vec<ReportedPosition>> {
        self.kept.positions(tenant, project, codes).await
    }

    async fn series(&self, query: &SeriesQuery) -> Result<Vec<Bucket>> {
        self.kept.series(query).await
    }
}
