//! The staging engine's reads and deletes: device_events and, for a device with staged events,
//! its staged rows beside them, in one statement (one snapshot), so that a move committing
//! meanwhile never shows an event twice or not at all. A staged row is found by its number
//! (staged.rs) and skipped once a move has recorded it (`NOT_MOVED`). Lookups and deletes by id
//! look in device_events first: events only ever move from staging into device_events.

use std::collections::HashMap;

use gantry_core::Result;
use gantry_core::event::{DeviceEvent, ReportedPosition, ShadowAttribute};
use gantry_core::ids::{DeviceId, EventId, ModelId, ProjectId, TenantId};
use gantry_core::paging::{Page, PageRequest};
use gantry_core::query::EventQuery;
use sqlx::{Any, Transaction};

use super::StagingEvents;
use super::table::{LATEST_STAGED, NOT_MOVED, STAGING, in_staged, json_array, over_both_tables};
use gantry_store::events::counts::{add_range_count, kept_total};
use gantry_store::events::{
    COLUMNS, POSITIONS_HEAD, SHADOW_HEAD, by_id, clock_of, event_from_row, fetch_event, fetch_total, listing_filter,
    positions_filter, positions_from_rows, shadow_filter, shadow_from_rows, update_shadows,
};
use gantry_store::row::get;
use gantry_store::sql::Sql;

impl StagingEvents {
    pub(super) async fn get(&self, tenant: &TenantId, id: &EventId) -> Result<Option<DeviceEvent>> {
        // device_events first, by its key; then the staging table by the event's number, when it
        // is staged and not moved. One that a move took between the first two reads is in the
        // third. A moved row stays staged for a round: deleted from device_events meanwhile, it
        // must not be found again here.
        let kept = self.kept.get(tenant, id).await?;
        if kept.is_some() {
            return Ok(kept);
        }
        if let Some(seq) = self.staged().seq_of(id.as_str()) {
            let mut select = by_id(tenant, id).prefixed(&format!("SELECT {COLUMNS} FROM {STAGING} WHERE "));
            select.push(" AND seq = ").bind(seq).push(&format!(" AND {NOT_MOVED}"));
            if let Some(staged) = fetch_event(&self.kept.pool, &select).await? {
                return Ok(Some(staged));
            }
        }
        self.kept.get(tenant, id).await
    }

    pub(super) async fn delete(&self, tenant: &TenantId, id: &EventId) -> Result<bool> {
        let mut tx = self.begin_write().await?;
        let mut deleted = self.kept.delete(&mut tx, &by_id(tenant, id)).await?;
        // Not kept: staged, if the index knows it. No move commits during this transaction
        // (moves go through the same writer), so an event is in one of the two.
        if deleted == 0
            && let Some(seq) = self.staged().seq_of(id.as_str())
        {
            let mut staged = Sql::new(&format!("{NOT_MOVED} AND seq = "));
            staged
                .bind(seq)
                .push(" AND tenant_id = ")
                .bind(tenant.as_str())
                .push(" AND id = ")
                .bind(id.as_str());
            deleted = self.delete_staged(&mut tx, &staged).await?;
        }
        tx.commit().await.map_err(gantry_store::error::db_error)?;
        Ok(deleted > 0)
    }

    pub(super) async fn delete_before(&self, cutoff: i64, limit: i64) -> Result<u64> {
        let mut tx = self.begin_write().await?;
        let mut deleted = self.kept.delete_before(&mut tx, cutoff, limit).await?;
        if deleted < limit as u64 {
            // Rows a round has moved but not yet deleted from staging are deleted from
            // device_events.
            let mut selected = Sql::new(&format!("id IN (SELECT id FROM {STAGING} WHERE {NOT_MOVED} AND id < "));
            selected
                .bind(EventId::lower_bound_at(cutoff).as_str())
                .push(" ORDER BY id LIMIT ")
                .bind(limit - deleted as i64)
                .push(")");
            deleted += self.delete_staged(&mut tx, &selected).await?;
        }
        tx.commit().await.map_err(gantry_store::error::db_error)?;
        Ok(deleted)
    }

    /// Deletes the staged events `selected` picks. A deleted staged event still reaches the
    /// shadow (it was never counted). The staging file is written before anything reads it in
    /// the transaction (`begin_write`).
    async fn delete_staged(&self, tx: &mut Transaction<'static, Any>, selected: &Sql) -> Result<u64> {
        let rows = selected
            .prefixed(&format!("DELETE FROM {STAGING} WHERE "))
            .push(&format!(" RETURNING {COLUMNS}"))
            .query()
            .fetch_all(&mut **tx)
            .await
            .map_err(gantry_store::error::db_error)?;
        let deleted = rows.iter().map(event_from_row).collect::<Result<Vec<_>>>()?;
        update_shadows(tx, &deleted, super::ROWS_PER_STATEMENT).await?;
        Ok(deleted.len() as u64)
    }

    pub(super) async fn list(&self, query: &EventQuery, page: PageRequest) -> Result<Page<DeviceEvent>> {
        // Most devices have nothing staged when they are read: the listing is then one table's.
        // An event staged after this was written concurrently with the read.
        let Some(staged) = self.staged().of_device(query.device.as_str()) else {
            return self.kept.list(query, page).await;
        };
        let (_, time) = clock_of(query.time_field);
        let filter = listing_filter(query);
        let total = if query.start.is_none() && query.end.is_none() {
            self.kept_count(query, &staged).await?
        } else {
            self.range_count(query, &filter, &staged).await?
        };
        let items = self
            .page_of_both_tables(&query.device, &filter, &staged, time, page)
            .await?;
        Ok(Page {
            request: page,
            total,
            items,
        })
    }

    pub(super) async fn shadow_of(&self, tenant: &TenantId, device: &DeviceId) -> Result<Vec<(ShadowAttribute, i64)>> {
        let Some(staged) = self.staged().of_device(device.as_str()) else {
            return self.kept.shadow(tenant, device).await;
        };
        // With the newest of the device's staged events, in one statement: one snapshot, whether
        // or not a move commits meanwhile.
        let statement = over_both_tables(
            &shadow_filter(tenant, device),
            &staged,
            SHADOW_HEAD,
            &format!(
                " UNION ALL SELECT attribute_code, attribute_data, device_ts, ingress_ts, 1 FROM ({}",
                LATEST_STAGED.0
            ),
            &format!("{}) AS latest", LATEST_STAGED.1),
        );
        let rows = statement
            .query()
            .fetch_all(&self.kept.pool)
            .await
            .map_err(gantry_store::error::db_error)?;
        shadow_from_rows(&rows)
    }

    /// The project's positions: device_shadows and, when events are staged, the staged events
    /// numbered from the lowest to the highest number held, in one statement (one snapshot, as
    /// `shadow_of`), so that a device's position is what its shadow reads.
    pub(super) async fn positions_of(
        &self,
        tenant: &TenantId,
        project: &ProjectId,
        codes: &[(ModelId, Vec<String>)],
    ) -> Result<Vec<ReportedPosition>> {
        let Some((lowest, highest)) = self.staged().held() else {
            return self.kept.positions(tenant, project, codes).await;
        };
        let mut filter = positions_filter(tenant, project, codes);
        let (from, through) = (filter.placeholder(lowest), filter.placeholder(highest));
        // The staging table has no index but its number: its held stretch is read once, each row
        // finding its device by the devices' key (CROSS JOIN keeps that order).
        let statement = filter.wrapped(
            POSITIONS_HEAD,
            &format!(
                " UNION ALL SELECT d.id, d.device_name, x.attribute_code, x.attribute_data, x.device_ts, x.seq \
                 FROM (SELECT seq, device_id, tenant_id, attribute_code, attribute_data, device_ts FROM {STAGING} \
                 WHERE seq BETWEEN {from} AND {through} AND {NOT_MOVED}) AS x CROSS JOIN devices AS d WHERE x.device_id = d.id AND "
            ),
            "",
        );
        let rows = statement
            .query()
            .fetch_all(&self.kept.pool)
            .await
            .map_err(gantry_store::error::db_error)?;
        positions_from_rows(&rows)
    }

    /// A listing's total without a time range: the kept count and the device's staged events
    /// (numbers in `staged`) not yet counted.
    async fn kept_count(&self, query: &EventQuery, staged: &str) -> Result<u64> {
        let mut total = kept_total(query);
        let seqs = total.placeholder(staged);
        total.push(&format!(
            " + (SELECT COUNT(*) FROM {STAGING} WHERE {} AND device_id = $1",
            in_staged(&seqs)
        ));
        if query.attribute_code.is_some() {
            total.push(" AND attribute_code = $2");
        }
        total.push(")");
        fetch_total(&self.kept.pool, total.push(" AS total")).await
    }

    /// A listing's total with a date range: the kept hours and the part hours (`hours_total`),
    /// and the device's staged events in the range, which are not in the hours yet; counted by
    /// the indexes of both tables where the hours do not serve.
    async fn range_count(&self, query: &EventQuery, filter: &Sql, staged: &str) -> Result<u64> {
        let Some(mut total) = self.kept.rules.range_total(query) else {
            // Counted in each table apart: a count over their union would read every matching
            // row whole instead of counting index entries.
            let count = over_both_tables(
                filter,
                staged,
                "SELECT (SELECT COUNT(*) FROM device_events WHERE ",
                &format!(") + (SELECT COUNT(*) FROM {STAGING} WHERE "),
                ") AS total",
            );
            return fetch_total(&self.kept.pool, &count).await;
        };
        let seqs = total.placeholder(staged);
        let rows = format!("{STAGING} WHERE {} AND ", in_staged(&seqs));
        let (start, end) = (query.start.unwrap_or(i64::MIN), query.end.unwrap_or(i64::MAX));
        add_range_count(&mut total, query, &rows, start, end);
        fetch_total(&self.kept.pool, total.push(" AS total")).await
    }

    /// One page of the events matching `filter` in both tables, newest `time` first, ties by id.
    /// First the page's ids, from the indexes alone (SQLite merges the two tables' ordered index
    /// scans; rows skipped by OFFSET are never read whole), then those rows from whichever table
    /// holds them by then.
    async fn page_of_both_tables(
        &self,
        device: &DeviceId,
        filter: &Sql,
        staged: &str,
        time: &str,
        page: PageRequest,
    ) -> Result<Vec<DeviceEvent>> {
        let mut keys = over_both_tables(
            filter,
            staged,
            &format!("SELECT {time}, id, NULL AS seq FROM device_events WHERE "),
            &format!(" UNION ALL SELECT {time}, id, seq FROM {STAGING} WHERE "),
            "",
        );
        keys.push(&format!(" ORDER BY {time} DESC, id DESC LIMIT "))
            .bind(page.limit())
            .push(" OFFSET ")
            .bind(page.offset());
        let mut ids = Vec::new();
        let mut listed_staged = Vec::new();
        for row in keys
            .query()
            .fetch_all(&self.kept.pool)
            .await
            .map_err(gantry_store::error::db_error)?
        {
            ids.push(get::<String>(&row, "id")?);
            if let Some(seq) = get::<Option<i64>>(&row, "seq")? {
                listed_staged.push(seq);
            }
        }
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        // The rows by id from device_events, and by number from the staging table: an event that
        // a move took since the first statement is in device_events by now.
        let mut listed = Sql::new("SELECT ");
        listed
            .push(COLUMNS)
            .push(" FROM device_events WHERE device_id = ")
            .bind(device.as_str());
        listed.push(" AND id IN (");
        for (i, id) in ids.iter().enumerate() {
            listed.push(if i == 0 { "" } else { ", " }).bind(id.as_str());
        }
        listed.push(")");
        if !listed_staged.is_empty() {
            let seqs = listed.placeholder(json_array(&listed_staged));
            listed.push(&format!(
                " UNION ALL SELECT {COLUMNS} FROM {STAGING} WHERE {} AND device_id = $1",
                in_staged(&seqs)
            ));
        }
        let rows = listed
            .query()
            .fetch_all(&self.kept.pool)
            .await
            .map_err(gantry_store::error::db_error)?;
        let mut found: HashMap<String, DeviceEvent> = HashMap::with_capacity(rows.len());
        for row in &rows {
            let event = event_from_row(row)?;
            found.insert(event.id.as_str().to_owned(), event);
        }
        // An event deleted between the two statements is left out.
        Ok(ids.iter().filter_map(|id| found.remove(id)).collect())
    }
}
