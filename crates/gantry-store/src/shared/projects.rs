//! Projects: their rows with the application token, and the project listing.

use async_trait::async_trait;
use gantry_core::enums::ProjectStatus;
use gantry_core::ids::{ProjectId, TenantId};
use gantry_core::paging::{Page, PageRequest};
use gantry_core::query::ProjectQuery;
use gantry_core::records::Project;
use gantry_core::store::ProjectStore;
use gantry_core::{Error, Result};
use sqlx::any::AnyRow;

use super::device_count;
use super::soft_delete::{Intent, PROJECTS, soft_delete};
use super::tenants::{Holder, insert_token, rotate_record_token};
use crate::SqlStore;
use crate::error::write_error;
use crate::row::{get, json, json_opt, record, spelled, to_json};
use crate::sql::{Sql, fetch_page};

const COLUMNS: &str = "p.id, p.tenant_id, p.name, p.description, p.image_url, p.status, p.address, p.map_info, \
                       p.application_access_token, p.restful_api_addr, p.mq_api_addr, p.template_id, p.metadata, \
                       p.created_by, p.created_time, p.updated_by, p.updated_time, p.deleted";

fn project_from_row(row: &AnyRow) -> Result<Project> {
    Ok(Project {
        id: ProjectId::from_string(get::<String>(row, "id")?),
        name: get(row, "name")?,
        description: get(row, "description")?,
        image_url: get(row, "image_url")?,
        status: spelled(row, "status", ProjectStatus::parse)?,
        address: get(row, "address")?,
        map_info: json_opt(row, "map_info")?,
        application_access_token: get(row, "application_access_token")?,
        restful_api_addr: get(row, "restful_api_addr")?,
        mq_api_addr: get(row, "mq_api_addr")?,
        template_id: get(row, "template_id")?,
        metadata: json(row, "metadata")?,
        record: record(row)?,
    })
}

#[async_trait]
impl ProjectStore for SqlStore {
    async fn insert_project(&self, project: &Project, app_token_hash: &str) -> Result<()> {
        let record = &project.record;
        let mut tx = self.begin_write().await?;
        sqlx::query(
            "INSERT INTO projects (id, tenant_id, name, description, image_url, status, address, map_info, \
                 application_access_token, restful_api_addr, mq_api_addr, template_id, metadata, \
                 created_by, created_time, updated_by, updated_time, deleted) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, 0)",
        )
        .bind(project.id.as_str())
        .bind(record.tenant_id.as_str())
        .bind(&project.name)
        .bind(project.description.as_deref())
        .bind(project.image_url.as_deref())
        .bind(project.status.as_str())
        .bind(project.address.as_deref())
        .bind(project.map_info.as_ref().map(to_json).transpose()?)
        .bind(&project.application_access_token)
        .bind(&project.restful_api_addr)
        .bind(&project.mq_api_addr)
        .bind(project.template_id.as_deref())
        .bind(to_json(&project.metadata)?)
        .bind(&record.created_by)
        .bind(record.created_time)
        .bind(record.updated_by.as_deref())
        .bind(record.updated_time)
        .execute(&mut *tx)
        .await
        .map_err(write_error("project", &project.name))?;
        insert_token(
            &mut tx,
            app_token_hash,
            "application",
            &record.tenant_id,
            Some(&project.id),
            None,
            record.created_time,
        )
        .await?;
        tx.commit().await.map_err(crate::error::db_error)
    }

    async fn update_project(&self, project: &Project) -> Result<()> {
        let record = &project.record;
        let done = sqlx::query(
            "UPDATE projects SET name = $3, description = $4, image_url = $5, status = $6, address = $7, \
                 map_info = $8, template_id = $9, metadata = $10, updated_by = $11, updated_time = $12 \
             WHERE tenant_id = $1 AND id = $2 AND deleted = 0",
        )
        .bind(record.tenant_id.as_str())
        .bind(project.id.as_str())
        .bind(&project.name)
        .bind(project.description.as_deref())
        .bind(project.image_url.as_deref())
        .bind(project.status.as_str())
        .bind(project.address.as_deref())
        .bind(project.map_info.as_ref().map(to_json).transpose()?)
        .bind(project.template_id.as_deref())
        .bind(to_json(&project.metadata)?)
        .bind(record.updated_by.as_deref())
        .bind(record.updated_time)
        .execute(&mut *self.writes().await?)
        .await
        .map_err(write_error("project", &project.name))?;
        if done.rows_affected() == 0 {
            return Err(Error::not_found("project", &project.id));
        }
        Ok(())
    }

    async fn get_project(&self, tenant: &TenantId, id: &ProjectId) -> Result<Option<Project>> {
        let row = sqlx::query(&format!(
            "SELECT {COLUMNS} FROM projects p WHERE p.tenant_id = $1 AND p.id = $2 AND p.deleted = 0"
        ))
        .bind(tenant.as_str())
        .bind(id.as_str())
        .fetch_optional(&self.pool)
        .await
        .map_err(crate::error::db_error)?;
        row.as_ref().map(project_from_row).transpose()
    }

    async fn list_projects(&self, tenant: &TenantId, query: &ProjectQuery, page: PageRequest) -> Result<Page<Project>> {
        let mut from_where = Sql::new(" FROM projects p WHERE p.deleted = 0 AND p.tenant_id = ");
        from_where.bind(tenant.as_str());
        if let Some(status) = query.status {
            from_where.push(" AND p.status = ").bind(status.as_str());
        }
        if let Some(only) = &query.only {
            crate::sql::push_in(&mut from_where, " AND p.id IN (", only.iter().map(|p| p.as_str()));
        }
        fetch_page(
            &self.pool,
            COLUMNS,
            &from_where,
            "p.created_time, p.id",
            page,
            project_from_row,
        )
        .await
    }

    async fn rotate_application_token(&self, project: &Project, token_hash: &str, old_until: i64) -> Result<()> {
        let holder = Holder::Project(&project.record.tenant_id, &project.id);
        let secret = &project.application_access_token;
        let target = ("projects", "application_access_token", "application");
        rotate_record_token(self, target, (&project.record, holder), secret, token_hash, old_until).await
    }

    async fn delete_project(&self, tenant: &TenantId, id: &ProjectId, by: &str, at: i64) -> Result<()> {
        let mut tx = self.begin_write().await?;
        // Locked before counting, so that a device being written into the project is counted or fails.
        self.lock_live(&mut tx, &PROJECTS, tenant, id.as_str(), Intent::Delete)
            .await?;
        let members: i64 =
            sqlx::query_scalar("SELECT COUNT(*) FROM devices WHERE tenant_id = $1 AND project_id = $2 AND deleted = 0")
                .bind(tenant.as_str())
                .bind(id.as_str())
                .fetch_one(&mut *tx)
                .await
                .map_err(crate::error::db_error)?;
        if members > 0 {
            return Err(Error::Conflict(format!("the project has {}", device_count(members))));
        }
        soft_delete(&mut tx, &PROJECTS, tenant, id.as_str(), by, at).await?;
        tx.commit().await.map_err(crate::error::db_error)
    }
}
