//! Alarm rules: their rows (the conditions kept as a JSON definition) and the lookups the
//! evaluation and the no-data sweep make.

use gantry_core::alarm_rule::{AlarmRule, RuleDefinition};
use gantry_core::ids::{AlarmRuleId, DeviceId, ModelId, TenantId};
use gantry_core::{Error, Result};
use sqlx::any::AnyRow;

use crate::SqlStore;
use crate::error::db_error;
use crate::row::{flag, get, json, record, to_json};

pub(super) const RULE_COLUMNS: &str = "id, tenant_id, model_id, name, attribute_code, enabled, definition, \
                                       created_by, created_time, updated_by, updated_time, deleted";

pub(super) fn rule_from_row(row: &AnyRow) -> Result<AlarmRule> {
    let definition: RuleDefinition = json(row, "definition")?;
    AlarmRule::from_stored(
        AlarmRuleId::from_string(get::<String>(row, "id")?),
        ModelId::from_string(get::<String>(row, "model_id")?),
        get(row, "name")?,
        get(row, "attribute_code")?,
        flag(row, "enabled")?,
        definition,
        record(row)?,
    )
}

impl SqlStore {
    pub(super) async fn insert_rule(&self, rule: &AlarmRule) -> Result<()> {
        let mut conn = self.writes().await?;
        sqlx::query(
            "INSERT INTO alarm_rules (id, tenant_id, model_id, name, attribute_code, enabled, no_data_seconds, \
                 definition, created_by, created_time, deleted) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, 0)",
        )
        .bind(rule.id.as_str())
        .bind(rule.record.tenant_id.as_str())
        .bind(rule.model_id.as_str())
        .bind(rule.name.as_str())
        .bind(rule.attribute_code.as_str())
        .bind(i64::from(rule.enabled))
        .bind(rule.no_data_seconds)
        .bind(to_json(&rule.definition())?)
        .bind(rule.record.created_by.as_str())
        .bind(rule.record.created_time)
        .execute(&mut *conn)
        .await
        .map_err(db_error)?;
        Ok(())
    }

    pub(super) async fn update_rule(&self, rule: &AlarmRule) -> Result<()> {
        let mut conn = self.writes().await?;
        let updated = sqlx::query(
            "UPDATE alarm_rules SET name = $1, attribute_code = $2, enabled = $3, no_data_seconds = $4, \
                 definition = $5, updated_by = $6, updated_time = $7 \
             WHERE id = $8 AND tenant_id = $9 AND deleted = 0",
        )
        .bind(rule.name.as_str())
        .bind(rule.attribute_code.as_str())
        .bind(i64::from(rule.enabled))
        .bind(rule.no_data_seconds)
        .bind(to_json(&rule.definition())?)
        .bind(rule.record.updated_by.as_deref())
        .bind(rule.record.updated_time)
        .bind(rule.id.as_str())
        .bind(rule.record.tenant_id.as_str())
        .execute(&mut *conn)
        .await
        .map_err(db_error)?;
        if updated.rows_affected() == 0 {
            return Err(Error::not_found("alarm rule", &rule.id));
        }
        Ok(())
    }

    pub(super) async fn get_rule(&self, tenant: &TenantId, id: &AlarmRuleId) -> Result<Option<AlarmRule>> {
        let row = sqlx::query(&format!(
            "SELECT {RULE_COLUMNS} FROM alarm_rules WHERE id = $1 AND tenant_id = $2 AND deleted = 0"
        ))
        .bind(id.as_str())
        .bind(tenant.as_str())
        .fetch_optional(&self.pool)
        .await
        .map_err(db_error)?;
        row.as_ref().map(rule_from_row).transpose()
    }

    pub(super) async fn model_rules(&self, tenant: &TenantId, model: &ModelId) -> Result<Vec<AlarmRule>> {
        let rows = sqlx::query(&format!(
            "SELECT {RULE_COLUMNS} FROM alarm_rules WHERE model_id = $1 AND tenant_id = $2 AND deleted = 0 \
             ORDER BY created_time, id"
        ))
        .bind(model.as_str())
        .bind(tenant.as_str())
        .fetch_all(&self.pool)
        .await
        .map_err(db_error)?;
        rows.iter().map(rule_from_row).collect()
    }

    pub(super) async fn delete_rule(&self, tenant: &TenantId, id: &AlarmRuleId, by: &str, at: i64) -> Result<()> {
        let mut tx = self.begin_write().await?;
        let deleted = sqlx::query(
            "UPDATE alarm_rules SET deleted = 1, updated_by = $1, updated_time = $2 \
             WHERE id = $3 AND tenant_id = $4 AND deleted = 0",
        )
        .bind(by)
        .bind(at)
        .bind(id.as_str())
        .bind(tenant.as_str())
        .execute(&mut *tx)
        .await
        .map_err(db_error)?;
        if deleted.rows_affected() == 0 {
            return Err(Error::not_found("alarm rule", id));
        }
        tx.commit().await.map_err(db_error)?;
        // The states are beside the alarms (the event-log writer's); a crash before this delete
        // leaves states of a rule nothing evaluates any more.
        let mut tx = self.begin_log_write().await?;
        sqlx::query("DELETE FROM alarm_states WHERE alarm_key = $1")
            .bind(format!("rule:{id}"))
            .execute(&mut *tx)
            .await
            .map_err(db_error)?;
        tx.commit().await.map_err(db_error)
    }

    pub(super) async fn rules_with_no_data(&self) -> Result<Vec<AlarmRule>> {
        let rows = sqlx::query(&format!(
            "SELECT {RULE_COLUMNS} FROM alarm_rules \
             WHERE deleted = 0 AND enabled = 1 AND no_data_seconds IS NOT NULL ORDER BY created_time, id"
        ))
        .fetch_all(&self.pool)
        .await
        .map_err(db_error)?;
        rows.iter().map(rule_from_row).collect()
    }

    pub(super) async fn devices_silent(&self, rule: &AlarmRule, before: i64) -> Result<Vec<DeviceId>> {
        self.events.fold_before_alarm_read().await?;
        let ids: Vec<String> = sqlx::query_scalar(
            "SELECT device_id FROM alarm_states \
             WHERE alarm_key = $1 AND tenant_id = $2 AND no_data = 0 AND last_arrival < $3 ORDER BY device_id",
        )
        .bind(format!("rule:{}", rule.id))
        .bind(rule.record.tenant_id.as_str())
        .bind(before)
        .fetch_all(&self.pool)
        .await
        .map_err(db_error)?;
        Ok(ids.into_iter().map(DeviceId::from_string).collect())
    }
}
