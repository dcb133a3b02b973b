//! The kept events: device_events with the shadows, the kept counts and the kept rollups, the
//! tables every event ends in on both engines, and the statements over them that both run
//! (`EventTables`). How an event gets there is each engine's own
//! (`postgres`, `sqlite`).
//!
//! Invariants: a shadow only ever moves forward in device time (`SHADOW_UPSERT`), and device_events,
//! the kept counts and the rollups change in the same transaction (`counts`, `rollups`).

pub mod counts;
pub mod rollups;

use std::collections::{BTreeMap, HashMap};

use gantry_core::Result;
use gantry_core::enums::{Channel, DataType};
use gantry_core::event::{DeviceEvent, ReportedPosition, ShadowAttribute};
use gantry_core::ids::{DeviceId, EventId, ModelId, ProjectId, TenantId};
use gantry_core::paging::{Page, PageRequest};
use gantry_core::query::EventQuery;
use gantry_core::series::{Bucket, SeriesQuery};
use sqlx::any::{AnyArguments, AnyRow};
use sqlx::query::Query;
use sqlx::{Any, AnyPool, Transaction};

use crate::row::{get, json, json_opt, spelled, to_json};
use crate::sql::Sql;
pub use crate::sql::values_clause;
pub use counts::clock_of;
use counts::{CountChanges, kept_total};

pub const COLUMNS: &str = "id, tenant_id, project_id, model_id, device_id, attribute_code, attribute_type, attribute_data, \
                       channel, ingress_ts, device_ts, correlation_id, context, created_by, created_time";
pub const EVENT_FIELDS: usize = 15;

/// From this offset on, a listing reads its page's ids first and then their rows: the events it
/// skips are index entries then, not rows (each listing index holds the id). Nearer the front
/// the second lookup costs more than it saves.
const DEEP_OFFSET: i64 = 10_000;

pub fn event_from_row(row: &AnyRow) -> Result<DeviceEvent> {
    Ok(DeviceEvent {
        id: EventId::from_string(get::<String>(row, "id")?),
        tenant_id: TenantId::from_string(get::<String>(row, "tenant_id")?),
        project_id: ProjectId::from_string(get::<String>(row, "project_id")?),
        model_id: ModelId::from_string(get::<String>(row, "model_id")?),
        device_id: DeviceId::from_string(get::<String>(row, "device_id")?),
        attribute_code: get(row, "attribute_code")?,
        attribute_type: spelled(row, "attribute_type", DataType::parse)?,
        attribute_data: json(row, "attribute_data")?,
        channel: spelled(row, "channel", Channel::parse)?,
        ingress_time_stamp: get(row, "ingress_ts")?,
        device_timestamp: get(row, "device_ts")?,
        correlation_id: get(row, "correlation_id")?,
        context: json_opt(row, "context")?,
        created_by: get(row, "created_by")?,
        created_time: get(row, "created_time")?,
        deleted: false,
    })
}

/// `query` with the values of `e`'s row (COLUMNS' order).
pub fn bind_event<'q>(
    query: Query<'q, Any, AnyArguments<'q>>,
    e: &'q DeviceEvent,
) -> Result<Query<'q, Any, AnyArguments<'q>>> {
    Ok(query
        .bind(e.id.as_str())
        .bind(e.tenant_id.as_str())
        .bind(e.project_id.as_str())
        .bind(e.model_id.as_str())
        .bind(e.device_id.as_str())
        .bind(e.attribute_code.as_str())
        .bind(e.attribute_type.as_str())
        .bind(to_json(&e.attribute_data)?)
        .bind(e.channel.as_str())
        .bind(e.ingress_time_stamp)
        .bind(e.device_timestamp)
        .bind(e.correlation_id.as_deref())
        .bind(e.context.as_ref().map(to_json).transpose()?)
        .bind(e.created_by.as_str())
        .bind(e.created_time))
}

/// Per device and attribute, the event the shadow should end up holding from this batch: the
/// newest device time, and on a tie the one that arrived last.
fn shadow_candidates(events: &[DeviceEvent]) -> Vec<&DeviceEvent> {
    let mut latest: HashMap<(&str, &str), &DeviceEvent> = HashMap::new();
    for event in events {
        let key = (event.device_id.as_str(), event.attribute_code.as_str());
        match latest.get(&key) {
            Some(held) if held.device_timestamp > event.device_timestamp => {}
            _ => {
                latest.insert(key, event);
            }
        }
    }
    let mut candidates: Vec<&DeviceEvent> = latest.into_values().collect();
    // One lock order for every writer: concurrent batches (several nodes on one PostgreSQL)
    // then wait for each other instead of deadlocking.
    candidates.sort_by(|a, b| (&a.device_id, &a.attribute_code).cmp(&(&b.device_id, &b.attribute_code)));
    candidates
}

/// A shadow row is only replaced by a value at least as new by device time, so late events never
/// roll it back.
pub const SHADOW_UPSERT: &str = "ON CONFLICT (device_id, attribute_code) DO UPDATE SET value = excluded.value, \
                             device_ts = excluded.device_ts, ingress_ts = excluded.ingress_ts \
                             WHERE excluded.device_ts >= device_shadows.device_ts";

/// Brings the shadows up to `events`: each device's and attribute's newest, `rows` per statement.
pub async fn update_shadows(tx: &mut Transaction<'static, Any>, events: &[DeviceEvent], rows: usize) -> Result<()> {
    for chunk in shadow_candidates(events).chunks(rows) {
        let text = format!(
            "INSERT INTO device_shadows (device_id, attribute_code, tenant_id, value, device_ts, ingress_ts) \
             VALUES {} {SHADOW_UPSERT}",
            values_clause(chunk.len(), 6, false)
        );
        let mut query = sqlx::query(&text);
        for e in chunk {
            query = query
                .bind(e.device_id.as_str())
                .bind(e.attribute_code.as_str())
                .bind(e.tenant_id.as_str())
                .bind(to_json(&e.attribute_data)?)
                .bind(e.device_timestamp)
                .bind(e.ingress_time_stamp);
        }
        query.execute(&mut **tx).await.map_err(crate::error::db_error)?;
    }
    Ok(())
}

/// A listing's filter: `device_id = $1 [AND attribute_code = $2]` and its time range. The device
/// id alone selects: it is unique across tenants, and the caller checked the tenant.
pub fn listing_filter(query: &EventQuery) -> Sql {
    let (_, time) = clock_of(query.time_field);
    let mut filter = Sql::new("device_id = ");
    filter.bind(query.device.as_str());
    if let Some(code) = &query.attribute_code {
        filter.push(" AND attribute_code = ").bind(code.as_str());
    }
    if let Some(start) = query.start {
        filter.push(&format!(" AND {time} >= ")).bind(start);
    }
    if let Some(end) = query.end {
        filter.push(&format!(" AND {time} <= ")).bind(end);
    }
    filter
}

/// `tenant_id = $1 AND id = $2`.
pub fn by_id(tenant: &TenantId, id: &EventId) -> Sql {
    let mut selected = Sql::new("tenant_id = ");
    selected.bind(tenant.as_str()).push(" AND id = ").bind(id.as_str());
    selected
}

/// A shadow read's head, to which `WHERE`'s condition is appended; `staged` tells an engine's
/// not yet settled rows (1) from the shadow's (0) in `shadow_from_rows`.
pub const SHADOW_HEAD: &str =
    "SELECT attribute_code, value, device_ts, ingress_ts, 0 AS staged FROM device_shadows WHERE ";

/// `device_id = $1 AND tenant_id = $2`.
pub fn shadow_filter(tenant: &TenantId, device: &DeviceId) -> Sql {
    let mut selected = Sql::new("device_id = ");
    selected
        .bind(device.as_str())
        .push(" AND tenant_id = ")
        .bind(tenant.as_str());
    selected
}

/// A shadow from the rows of a shadow read: per attribute the newest by device time; a staged
/// row arrived after every settled one and wins a tie, as it will once settled.
pub fn shadow_from_rows(rows: &[AnyRow]) -> Result<Vec<(ShadowAttribute, i64)>> {
    let mut shadow: BTreeMap<String, (ShadowAttribute, i64)> = BTreeMap::new();
    for row in rows {
        let attribute = ShadowAttribute {
            code: get(row, "attribute_code")?,
            value: json(row, "value")?,
            timestamp: get(row, "device_ts")?,
        };
        let staged = get::<i64>(row, "staged")? == 1;
        let replaces = match shadow.get(&attribute.code) {
            Some((held, _)) => {
                attribute.timestamp > held.timestamp || (staged && attribute.timestamp == held.timestamp)
            }
            None => true,
        };
        if replaces {
            shadow.insert(attribute.code.clone(), (attribute, get(row, "ingress_ts")?));
        }
    }
    Ok(shadow.into_values().collect())
}

/// A positions read's head, to which `WHERE`'s condition (`positions_filter`) is appended: the
/// project's devices (`d`) with their shadow rows (`x`); `staged` as in `SHADOW_HEAD`, and for
/// an engine's not yet settled rows their order of arrival (above 0).
pub const POSITIONS_HEAD: &str = "SELECT d.id AS device_id, d.device_name, x.attribute_code, x.value, x.device_ts, \
     0 AS staged FROM devices AS d JOIN device_shadows AS x ON x.device_id = d.id WHERE ";

/// The live devices of `project` (`d`) and, of their rows in `x`, those of the codes `codes`
/// names for their model.
pub fn positions_filter(tenant: &TenantId, project: &ProjectId, codes: &[(ModelId, Vec<String>)]) -> Sql {
    let mut filter = Sql::new("d.tenant_id = ");
    filter
        .bind(tenant.as_str())
        .push(" AND d.project_id = ")
        .bind(project.as_str())
        .push(" AND d.deleted = 0 AND x.tenant_id = d.tenant_id AND (");
    for (i, (model, codes)) in codes.iter().enumerate() {
        filter
            .push(if i == 0 { "(d.model_id = " } else { " OR (d.model_id = " })
            .bind(model.as_str());
        crate::sql::push_in(
            &mut filter,
            " AND x.attribute_code IN (",
            codes.iter().map(String::as_str),
        );
        filter.push(")");
    }
    if codes.is_empty() {
        filter.push("1 = 0");
    }
    filter.push(")");
    filter
}

/// The positions from the rows of a positions read: per device and attribute the newest as in
/// `shadow_from_rows` (of two staged rows the later arrival), then per device the newest of its
/// attributes, on a tie the last by code; devices in id order. A value that is not text is none.
pub fn positions_from_rows(rows: &[AnyRow]) -> Result<Vec<ReportedPosition>> {
    type Key = (i64, i64);
    let mut newest: BTreeMap<(String, String), (Key, String, serde_json::Value)> = BTreeMap::new();
    for row in rows {
        let key: Key = (get(row, "device_ts")?, get(row, "staged")?);
        let slot = (get::<String>(row, "device_id")?, get::<String>(row, "attribute_code")?);
        if newest.get(&slot).is_none_or(|(held, _, _)| key > *held) {
            newest.insert(slot, (key, get(row, "device_name")?, json(row, "value")?));
        }
    }
    let mut positions: BTreeMap<String, (i64, String, serde_json::Value)> = BTreeMap::new();
    // Codes ascend within a device: a later one wins a tie in device time.
    for ((device, _), ((device_ts, _), name, value)) in newest {
        if positions.get(&device).is_none_or(|(held, _, _)| device_ts >= *held) {
            positions.insert(device, (device_ts, name, value));
        }
    }
    Ok(positions
        .into_iter()
        .filter_map(|(device, (_, device_name, value))| {
            Some(ReportedPosition {
                device: DeviceId::from_string(device),
                device_name,
                value: value.as_str()?.to_owned(),
            })
        })
        .collect())
}

/// The `total` column of the one row `count` returns (a count: never below 0).
pub async fn fetch_total(pool: &AnyPool, count: &Sql) -> Result<u64> {
    let total: i64 = count
        .query()
        .fetch_one(pool)
        .await
        .and_then(|row| sqlx::Row::try_get(&row, "total"))
        .map_err(crate::error::db_error)?;
    Ok(total.max(0) as u64)
}

/// The one event `select` (a SELECT of `COLUMNS`) finds, if any.
pub async fn fetch_event(pool: &AnyPool, select: &Sql) -> Result<Option<DeviceEvent>> {
    let row = select
        .query()
        .fetch_optional(pool)
        .await
        .map_err(crate::error::db_error)?;
    row.as_ref().map(event_from_row).transpose()
}

/// What an engine decides about its kept tables: the one place its choices reach the shared
/// statements over them (`EventTables`).
#[async_trait::async_trait]
pub trait EventTableRules: std::fmt::Debug + Send + Sync {
    /// Adds `n` events (-1: one deleted) of `device` and `code` at these times to the kept counts
    /// the engine keeps: every engine the all-time ones (`CountChanges::add`), one that serves
    /// date-range totals from them its hours too (`CountChanges::add_hours`).
    fn count<'a>(
        &self,
        changes: &mut CountChanges<'a>,
        device: &'a str,
        code: &'a str,
        device_ts: i64,
        ingress_ts: i64,
        n: i64,
    );

    /// A listing's total with a date range from the kept counts, as `SELECT <expression>`
    /// without its alias (`counts::hours_total`); None where they do not serve it: the range is
    /// then counted by the index.
    fn range_total(&self, query: &EventQuery) -> Option<Sql>;

    /// The arrival time before which every event of device_events is in the rollups, which a
    /// delete recomputes its events' rollups from, taken in `tx` so that no fold crosses the
    /// delete: the fold mark where the engine folds in the background, the end of time where
    /// every write keeps the rollups whole.
    async fn rolled_up_before(&self, tx: &mut Transaction<'static, Any>) -> Result<i64>;

    /// Adds to `series` the events its rollups do not hold yet, where the engine keeps such
    /// (SQLite's staged events, PostgreSQL's events not folded yet), read from `pool` in the
    /// series' own statement.
    async fn add_unrolled(&self, pool: &AnyPool, series: &mut rollups::SeriesParts<'_>) -> Result<()>;
}

/// The statements over the kept tables alone, as an engine's `EventTableRules` shape them.
#[derive(Debug, Clone)]
pub struct EventTables {
    /// Reads.
    pub pool: AnyPool,
    pub rules: std::sync::Arc<dyn EventTableRules>,
}

impl EventTables {
    /// The event `id` of `tenant`, if device_events holds it.
    pub async fn get(&self, tenant: &TenantId, id: &EventId) -> Result<Option<DeviceEvent>> {
        let select = by_id(tenant, id).prefixed(&format!("SELECT {COLUMNS} FROM device_events WHERE "));
        fetch_event(&self.pool, &select).await
    }

    /// Deletes the events of device_events that `selected` picks, in `tx`, takes them off the
    /// kept counts and recomputes their rollups; returns how many.
    pub async fn delete(&self, tx: &mut Transaction<'static, Any>, selected: &Sql) -> Result<u64> {
        let rolled_up_before = self.rules.rolled_up_before(tx).await?;
        let rows = selected
            .prefixed("DELETE FROM device_events WHERE ")
            .push(" RETURNING device_id, attribute_code, device_ts, ingress_ts")
            .query()
            .fetch_all(&mut **tx)
            .await
            .map_err(crate::error::db_error)?;
        let deleted = rows
            .iter()
            .map(|row| {
                Ok((
                    get::<String>(row, "device_id")?,
                    get::<String>(row, "attribute_code")?,
                    get::<i64>(row, "device_ts")?,
                    get::<i64>(row, "ingress_ts")?,
                ))
            })
            .collect::<Result<Vec<_>>>()?;
        // Off the kept counts the engine keeps.
        let mut changes = CountChanges::new();
        for (device, code, device_ts, ingress_ts) in &deleted {
            self.rules
                .count(&mut changes, device, code, *device_ts, *ingress_ts, -1);
        }
        changes.apply(tx, counts::KEYS_PER_STATEMENT).await?;
        let deleted: Vec<_> = deleted
            .into_iter()
            .map(|(device, code, ts, _)| (device, code, ts))
            .collect();
        rollups::recompute(tx, &deleted, rolled_up_before).await?;
        Ok(rows.len() as u64)
    }

    /// Deletes up to `limit` events of device_events stored before `cutoff`, in `tx`.
    pub async fn delete_before(&self, tx: &mut Transaction<'static, Any>, cutoff: i64, limit: i64) -> Result<u64> {
        // Event ids are UUIDv7, so the primary key orders them by arrival: no time index needed.
        let mut selected = Sql::new("id IN (SELECT id FROM device_events WHERE id < ");
        selected
            .bind(EventId::lower_bound_at(cutoff).as_str())
            .push(" ORDER BY id LIMIT ")
            .bind(limit)
            .push(")");
        self.delete(tx, &selected).await
    }

    /// A listing of device_events alone: newest `time` first, ties by id, with its total.
    pub async fn list(&self, query: &EventQuery, page: PageRequest) -> Result<Page<DeviceEvent>> {
        let (_, time) = clock_of(query.time_field);
        let filter = listing_filter(query);
        let total = if query.start.is_none() && query.end.is_none() {
            fetch_total(&self.pool, kept_total(query).push(" AS total")).await?
        } else {
            match self.rules.range_total(query) {
                Some(mut total) => fetch_total(&self.pool, total.push(" AS total")).await?,
                None => {
                    let count = filter.prefixed("SELECT COUNT(*) AS total FROM device_events WHERE ");
                    fetch_total(&self.pool, &count).await?
                }
            }
        };
        let order = format!(" ORDER BY {time} DESC, id DESC");
        // Deep: the page's ids from the listing's index alone, then its rows by id.
        let deep = page.offset() >= DEEP_OFFSET;
        let mut select = filter.prefixed(&format!(
            "SELECT {COLUMNS} FROM device_events WHERE {}",
            if deep {
                "id IN (SELECT id FROM device_events WHERE "
            } else {
                ""
            }
        ));
        select
            .push(&format!("{order} LIMIT "))
            .bind(page.limit())
            .push(" OFFSET ")
            .bind(page.offset());
        if deep {
            select.push(&format!("){order}"));
        }
        let rows = select
            .query()
            .fetch_all(&self.pool)
            .await
            .map_err(crate::error::db_error)?;
        let items = rows.iter().map(event_from_row).collect::<Result<Vec<_>>>()?;
        Ok(Page {
            request: page,
            total,
            items,
        })
    }

    /// A series from the rollups, device_events and the events the engine adds
    /// (`EventTableRules::add_unrolled`), in one statement (one snapshot of them all).
    pub async fn series(&self, query: &SeriesQuery) -> Result<Vec<Bucket>> {
        let mut series = rollups::SeriesParts::new(query);
        self.rules.add_unrolled(&self.pool, &mut series).await?;
        rollups::fetch_series(&self.pool, &series.statement(), query.first_last).await
    }

    /// The project's positions from device_shadows alone.
    pub async fn positions(
        &self,
        tenant: &TenantId,
        project: &ProjectId,
        codes: &[(ModelId, Vec<String>)],
    ) -> Result<Vec<ReportedPosition>> {
        let rows = positions_filter(tenant, project, codes)
            .prefixed(POSITIONS_HEAD)
            .query()
            .fetch_all(&self.pool)
            .await
            .map_err(crate::error::db_error)?;
        positions_from_rows(&rows)
    }

    /// The device's shadow from device_shadows alone.
    pub async fn shadow(&self, tenant: &TenantId, device: &DeviceId) -> Result<Vec<(ShadowAttribute, i64)>> {
        let rows = shadow_filter(tenant, device)
            .prefixed(SHADOW_HEAD)
            .query()
            .fetch_all(&self.pool)
            .await
            .map_err(crate::error::db_error)?;
        shadow_from_rows(&rows)
    }
}
