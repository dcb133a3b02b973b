//! Webhooks, their outbox and their deliveries. The outbox is written by
//! `outbox::write_outbox` in the transaction of each cause. A delivery's own writes (taking
//! events, recording attempts) are background work no request waits for
//! (`SqlStore::begin_background_write`): a webhook whose receiver is down retries all along, and
//! its records must not keep the SQLite mover's moves short.

use async_trait::async_trait;
use gantry_core::enums::DeliveryStatus;
use gantry_core::ids::{DeliveryId, ProjectId, TenantId, WebhookId};
use gantry_core::paging::{Page, PageRequest};
use gantry_core::store::WebhookStore;
use gantry_core::stream::StreamType;
use gantry_core::webhook::{Audience, Delivery, OutboxKey, Webhook, WebhookEvent};
use gantry_core::{Error, Result};
use sqlx::any::AnyRow;

use crate::SqlStore;
use crate::error::db_error;
use crate::outbox::{events_of, merge_by_time, take_rows, waiting_rows};
use crate::row::{flag, get, spelled};
use crate::sql::{Sql, fetch_page};

const COLUMNS: &str = "id, tenant_id, project_id, url, types, description, enabled, secret, created_by, created_time, \
                       updated_by, updated_time, slot";

const DELIVERY_COLUMNS: &str = "id, tenant_id, webhook_id, status, event_count, attempts, last_http_status, last_error, \
                                created_time, first_attempt_time, last_attempt_time, next_attempt_time, finished_time, body";

fn webhook_from_row(row: &AnyRow) -> Result<Webhook> {
    let types: String = get(row, "types")?;
    Ok(Webhook {
        id: WebhookId::from_string(get::<String>(row, "id")?),
        tenant_id: TenantId::from_string(get::<String>(row, "tenant_id")?),
        project_id: ProjectId::from_string(get::<String>(row, "project_id")?),
        url: get(row, "url")?,
        types: types
            .split(',')
            .filter(|t| !t.is_empty())
            .map(|t| StreamType::parse_field(t, "types"))
            .collect::<Result<_>>()?,
        description: get(row, "description")?,
        enabled: flag(row, "enabled")?,
        secret: get(row, "secret")?,
        created_by: get(row, "created_by")?,
        created_time: get(row, "created_time")?,
        updated_by: get(row, "updated_by")?,
        updated_time: get(row, "updated_time")?,
        slot: slot_of(get(row, "slot")?)?,
    })
}

/// A webhook's slot as stored; one out of range is a store failure (the store gives 0 to 62).
fn slot_of(stored: i64) -> Result<u8> {
    u8::try_from(stored).map_err(Error::store)
}

fn types_text(webhook: &Webhook) -> String {
    webhook.types.iter().map(|t| t.as_str()).collect::<Vec<_>>().join(",")
}

fn delivery_from_row(row: &AnyRow) -> Result<Delivery> {
    let count = |column| -> Result<u32> { Ok(get::<i64>(row, column)?.clamp(0, u32::MAX.into()) as u32) };
    Ok(Delivery {
        id: DeliveryId::from_string(get::<String>(row, "id")?),
        webhook_id: WebhookId::from_string(get::<String>(row, "webhook_id")?),
        tenant_id: TenantId::from_string(get::<String>(row, "tenant_id")?),
        status: spelled(row, "status", DeliveryStatus::parse)?,
        event_count: count("event_count")?,
        attempts: count("attempts")?,
        last_http_status: get::<Option<i64>>(row, "last_http_status")?.map(|s| s.clamp(0, 999) as u16),
        last_error: get(row, "last_error")?,
        created_time: get(row, "created_time")?,
        first_attempt_time: get(row, "first_attempt_time")?,
        last_attempt_time: get(row, "last_attempt_time")?,
        next_attempt_time: get(row, "next_attempt_time")?,
        finished_time: get(row, "finished_time")?,
        body: get(row, "body")?,
    })
}

#[async_trait]
impl WebhookStore for SqlStore {
    async fn insert_webhook(&self, w: &Webhook, max_per_project: u64) -> Result<()> {
        let mut tx = self.begin_write().await?;
        // The no-op update locks the project's row, so concurrent creates in one project count
        // one after another and never pass the bound together.
        sqlx::query("UPDATE projects SET updated_time = updated_time WHERE id = $1")
            .bind(w.project_id.as_str())
            .execute(&mut *tx)
            .await
            .map_err(db_error)?;
        // The project's webhooks, by the slots they hold: how many there are, and which slot is
        // free for this one's bit in the outbox's rows (the lowest).
        let taken: Vec<i64> = sqlx::query_scalar("SELECT slot FROM webhooks WHERE project_id = $1")
            .bind(w.project_id.as_str())
            .fetch_all(&mut *tx)
            .await
            .map_err(db_error)?;
        let max = max_per_project.min(Audience::MAX_WEBHOOKS);
        let slot = (0..Audience::MAX_WEBHOOKS as i64).find(|slot| !taken.contains(slot));
        let (Some(slot), true) = (slot, (taken.len() as u64) < max) else {
            return Err(Error::LimitReached {
                what: "webhooks per project",
                limit: "webhooks-per-project",
                max,
            });
        };
        sqlx::query(&format!(
            "INSERT INTO webhooks ({COLUMNS}) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13)"
        ))
        .bind(w.id.as_str())
        .bind(w.tenant_id.as_str())
        .bind(w.project_id.as_str())
        .bind(w.url.as_str())
        .bind(types_text(w))
        .bind(w.description.as_deref())
        .bind(i64::from(w.enabled))
        .bind(w.secret.as_str())
        .bind(w.created_by.as_str())
        .bind(w.created_time)
        .bind(w.updated_by.as_deref())
        .bind(w.updated_time)
        .bind(slot)
        .execute(&mut *tx)
        .await
        .map_err(db_error)?;
        tx.commit().await.map_err(db_error)?;
        Ok(())
    }

    async fn update_webhook(&self, w: &Webhook) -> Result<()> {
        let done = sqlx::query(
            "UPDATE webhooks SET url = $1, types = $2, description = $3, enabled = $4, secret = $5, \
             updated_by = $6, updated_time = $7 WHERE tenant_id = $8 AND id = $9",
        )
        .bind(w.url.as_str())
        .bind(types_text(w))
        .bind(w.description.as_deref())
        .bind(i64::from(w.enabled))
        .bind(w.secret.as_str())
        .bind(w.updated_by.as_deref())
        .bind(w.updated_time)
        .bind(w.tenant_id.as_str())
        .bind(w.id.as_str())
        .execute(&mut *self.writes().await?)
        .await
        .map_err(db_error)?;
        if done.rows_affected() == 0 {
            return Err(Error::not_found("webhook", &w.id));
        }
        Ok(())
    }

    async fn get_webhook(&self, tenant: &TenantId, id: &WebhookId) -> Result<Option<Webhook>> {
        let row = sqlx::query(&format!(
            "SELECT {COLUMNS} FROM webhooks WHERE tenant_id = $1 AND id = $2"
        ))
        .bind(tenant.as_str())
        .bind(id.as_str())
        .fetch_optional(&self.pool)
        .await
        .map_err(db_error)?;
        row.as_ref().map(webhook_from_row).transpose()
    }

    async fn list_webhooks(&self, tenant: &TenantId, project: &ProjectId, page: PageRequest) -> Result<Page<Webhook>> {
        let mut from_where = Sql::new(" FROM webhooks WHERE project_id = ");
        from_where
            .bind(project.as_str())
            .push(" AND tenant_id = ")
            .bind(tenant.as_str());
        fetch_page(
            &self.pool,
            COLUMNS,
            &from_where,
            "created_time, id",
            page,
            webhook_from_row,
        )
        .await
    }

    async fn delete_webhook(&self, tenant: &TenantId, id: &WebhookId) -> Result<()> {
        let mut tx = self.begin_write().await?;
        let slot: Option<i64> =
            sqlx::query_scalar("DELETE FROM webhooks WHERE tenant_id = $1 AND id = $2 RETURNING slot")
                .bind(tenant.as_str())
                .bind(id.as_str())
                .fetch_optional(&mut *tx)
                .await
                .map_err(db_error)?;
        let slot = slot_of(slot.ok_or_else(|| Error::not_found("webhook", id))?)?;
        sqlx::query("DELETE FROM webhook_deliveries WHERE webhook_id = $1")
            .bind(id.as_str())
            .execute(&mut *tx)
            .await
            .map_err(db_error)?;
        take_rows(&mut tx, ("webhook_outbox", self.dialect.lock_to_delete), slot, None).await?;
        tx.commit().await.map_err(db_error)?;
        // No new rows come for it now that it is gone (`WebhookService` forgets it).
        self.events.engine_outbox_drop(slot, None).await
    }

    async fn enabled_webhooks(&self) -> Result<Vec<Webhook>> {
        let rows = sqlx::query(&format!(
            "SELECT {COLUMNS} FROM webhooks WHERE enabled = 1 ORDER BY created_time, id"
        ))
        .fetch_all(&self.pool)
        .await
        .map_err(db_error)?;
        rows.iter().map(webhook_from_row).collect()
    }

    async fn waiting_events(&self, webhook: &Webhook, limit: usize) -> Result<Vec<(OutboxKey, WebhookEvent)>> {
        let (slot, project) = (webhook.slot, &webhook.project_id);
        let main = waiting_rows(&self.pool, ("webhook_outbox", OutboxKey::MAIN), slot, project, limit).await?;
        let apart = self.events.engine_outbox_waiting(slot, project, limit).await?;
        Ok(events_of(merge_by_time(main, apart, limit)))
    }

    /// The main outbox's rows leave in the delivery's transaction: when another node
    /// (PostgreSQL) took one of them already, the delivery is not stored (`Conflict`).
    async fn insert_delivery(&self, d: &Delivery, taken: &[OutboxKey]) -> Result<()> {
        let mut tx = self.begin_background_write().await?;
        let slot: Option<i64> = sqlx::query_scalar("SELECT slot FROM webhooks WHERE id = $1")
            .bind(d.webhook_id.as_str())
            .fetch_optional(&mut *tx)
            .await
            .map_err(db_error)?;
        let slot = slot_of(slot.ok_or_else(|| Error::not_found("webhook", &d.webhook_id))?)?;
        sqlx::query(&format!(
            "INSERT INTO webhook_deliveries ({DELIVERY_COLUMNS}) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14)"
        ))
        .bind(d.id.as_str())
        .bind(d.tenant_id.as_str())
        .bind(d.webhook_id.as_str())
        .bind(d.status.as_str())
        .bind(i64::from(d.event_count))
        .bind(i64::from(d.attempts))
        .bind(d.last_http_status.map(i64::from))
        .bind(d.last_error.as_deref())
        .bind(d.created_time)
        .bind(d.first_attempt_time)
        .bind(d.last_attempt_time)
        .bind(d.next_attempt_time)
        .bind(d.finished_time)
        .bind(d.body.as_str())
        .execute(&mut *tx)
        .await
        .map_err(db_error)?;
        // A row's key comes once per event it holds.
        let mut main: Vec<i64> = taken.iter().filter(|k| k.in_main()).map(|k| k.seq).collect();
        main.sort_unstable();
        main.dedup();
        let mut apart: Vec<OutboxKey> = taken.iter().filter(|k| !k.in_main()).copied().collect();
        apart.sort_unstable_by_key(|k| (k.outbox, k.seq));
        apart.dedup();
        if !main.is_empty() {
            let taken = take_rows(
                &mut tx,
                ("webhook_outbox", self.dialect.lock_to_delete),
                slot,
                Some(&main),
            )
            .await?;
            if taken != main.len() as u64 {
                // Dropped: the transaction rolls back, the delivery is not stored.
                return Err(Error::Conflict("another node took these webhook events".to_owned()));
            }
        }
        tx.commit().await.map_err(db_error)?;
        if !apart.is_empty() {
            self.events.engine_outbox_drop(slot, Some(&apart)).await?;
        }
        Ok(())
    }

    async fn update_delivery(&self, d: &Delivery) -> Result<()> {
        let done = sqlx::query(
            "UPDATE webhook_deliveries SET status = $1, attempts = $2, last_http_status = $3, last_error = $4, \
             first_attempt_time = $5, last_attempt_time = $6, next_attempt_time = $7, finished_time = $8 \
             WHERE id = $9",
        )
        .bind(d.status.as_str())
        .bind(i64::from(d.attempts))
        .bind(d.last_http_status.map(i64::from))
        .bind(d.last_error.as_deref())
        .bind(d.first_attempt_time)
        .bind(d.last_attempt_time)
        .bind(d.next_attempt_time)
        .bind(d.finished_time)
        .bind(d.id.as_str())
        .execute(&self.writer)
        .await
        .map_err(db_error)?;
        if done.rows_affected() == 0 {
            return Err(Error::not_found("delivery", &d.id));
        }
        Ok(())
    }

    async fn lease_webhook(&self, webhook: &WebhookId, owner: &str, now: i64, until: i64) -> Result<bool> {
        self.events.lease_webhook(webhook, owner, now, until).await
    }

    async fn pending_delivery(&self, webhook: &WebhookId) -> Result<Option<Delivery>> {
        let row = sqlx::query(&format!(
            "SELECT {DELIVERY_COLUMNS} FROM webhook_deliveries WHERE status = $1 AND webhook_id = $2 \
             ORDER BY created_time, id LIMIT 1"
        ))
        .bind(DeliveryStatus::Pending.as_str())
        .bind(webhook.as_str())
        .fetch_optional(&self.pool)
        .await
        .map_err(db_error)?;
        row.as_ref().map(delivery_from_row).transpose()
    }

    async fn list_deliveries(
        &self,
        tenant: &TenantId,
        webhook: &WebhookId,
        page: PageRequest,
    ) -> Result<Page<Delivery>> {
        let mut from_where = Sql::new(" FROM webhook_deliveries WHERE webhook_id = ");
        from_where
            .bind(webhook.as_str())
            .push(" AND tenant_id = ")
            .bind(tenant.as_str());
        fetch_page(
            &self.pool,
            DELIVERY_COLUMNS,
            &from_where,
            "created_time DESC, id DESC",
            page,
            delivery_from_row,
        )
        .await
    }

    async fn count_pending_deliveries(&self) -> Result<u64> {
        let count: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM webhook_deliveries WHERE status = $1")
            .bind(DeliveryStatus::Pending.as_str())
            .fetch_one(&self.pool)
            .await
            .map_err(db_error)?;
        Ok(count.max(0) as u64)
    }
}
