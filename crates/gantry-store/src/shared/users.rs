//! User accounts and their sign-in sessions.

use async_trait::async_trait;
use gantry_core::ids::{ProjectId, TenantId};
use gantry_core::paging::{Page, PageRequest};
use gantry_core::store::UserStore;
use gantry_core::user::{Role, User, UserId, UserQuery, UserSession, UserStatus};
use gantry_core::{Error, Result};
use sqlx::any::AnyRow;

use crate::SqlStore;
use crate::error::{db_error, write_error};
use crate::row::{get, json, spelled, to_json};
use crate::sql::{Sql, contains_pattern, fetch_page};

const COLUMNS: &str = "u.id, u.tenant_id, u.username, u.display_name, u.email, u.role, u.project_ids, u.status, \
                       u.created_by, u.created_time, u.updated_by, u.updated_time, u.last_login_time";

fn user_from_row(row: &AnyRow) -> Result<User> {
    Ok(User {
        id: UserId::from_string(get::<String>(row, "id")?),
        tenant_id: TenantId::from_string(get::<String>(row, "tenant_id")?),
        username: get(row, "username")?,
        display_name: get(row, "display_name")?,
        email: get(row, "email")?,
        role: spelled(row, "role", Role::parse)?,
        project_ids: json::<Vec<ProjectId>>(row, "project_ids")?,
        status: spelled(row, "status", UserStatus::parse)?,
        created_by: get(row, "created_by")?,
        created_time: get(row, "created_time")?,
        updated_by: get(row, "updated_by")?,
        updated_time: get(row, "updated_time")?,
        last_login_time: get(row, "last_login_time")?,
    })
}

fn session_from_row(row: &AnyRow) -> Result<UserSession> {
    Ok(UserSession {
        token_hash: get(row, "token_hash")?,
        user: UserId::from_string(get::<String>(row, "user_id")?),
        tenant: TenantId::from_string(get::<String>(row, "session_tenant")?),
        created_time: get(row, "session_created")?,
        expires_time: get(row, "expires_time")?,
        max_expires_time: get(row, "max_expires_time")?,
    })
}

#[async_trait]
impl UserStore for SqlStore {
    async fn insert_user(&self, u: &User, password_hash: &str) -> Result<()> {
        sqlx::query(
            "INSERT INTO users (id, tenant_id, username, username_key, display_name, email, role, project_ids, \
             status, password_hash, created_by, created_time, updated_by, updated_time, last_login_time) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15)",
        )
        .bind(u.id.as_str())
        .bind(u.tenant_id.as_str())
        .bind(u.username.as_str())
        .bind(u.username.to_lowercase())
        .bind(u.display_name.as_deref())
        .bind(u.email.as_deref())
        .bind(u.role.as_str())
        .bind(to_json(&u.project_ids)?)
        .bind(u.status.as_str())
        .bind(password_hash)
        .bind(u.created_by.as_str())
        .bind(u.created_time)
        .bind(u.updated_by.as_deref())
        .bind(u.updated_time)
        .bind(u.last_login_time)
        .execute(&mut *self.writes().await?)
        .await
        .map_err(write_error("user", &u.username))?;
        Ok(())
    }

    async fn update_user(&self, u: &User, password_hash: Option<&str>) -> Result<()> {
        let done = sqlx::query(
            "UPDATE users SET username = $1, username_key = $2, display_name = $3, email = $4, role = $5, \
             project_ids = $6, status = $7, updated_by = $8, updated_time = $9, \
             password_hash = COALESCE($10, password_hash) WHERE tenant_id = $11 AND id = $12",
        )
        .bind(u.username.as_str())
        .bind(u.username.to_lowercase())
        .bind(u.display_name.as_deref())
        .bind(u.email.as_deref())
        .bind(u.role.as_str())
        .bind(to_json(&u.project_ids)?)
        .bind(u.status.as_str())
        .bind(u.updated_by.as_deref())
        .bind(u.updated_time)
        .bind(password_hash)
        .bind(u.tenant_id.as_str())
        .bind(u.id.as_str())
        .execute(&mut *self.writes().await?)
        .await
        .map_err(write_error("user", &u.username))?;
        if done.rows_affected() == 0 {
            return Err(Error::not_found("user", &u.id));
        }
        Ok(())
    }

    async fn get_user(&self, tenant: Option<&TenantId>, id: &UserId) -> Result<Option<User>> {
        let mut select = Sql::new(&format!("SELECT {COLUMNS} FROM users u WHERE u.id = "));
        select.bind(id.as_str());
        if let Some(tenant) = tenant {
            select.push(" AND u.tenant_id = ").bind(tenant.as_str());
        }
        let row = select.query().fetch_optional(&self.pool).await.map_err(db_error)?;
        row.as_ref().map(user_from_row).transpose()
    }

    async fn user_by_username(&self, username: &str) -> Result<Option<(User, String)>> {
        let row = sqlx::query(&format!(
            "SELECT {COLUMNS}, u.password_hash FROM users u WHERE u.username_key = $1"
        ))
        .bind(username.to_lowercase())
        .fetch_optional(&self.pool)
        .await
        .map_err(db_error)?;
        row.map(|row| Ok((user_from_row(&row)?, get(&row, "password_hash")?)))
            .transpose()
    }

    async fn password_hash(&self, tenant: &TenantId, id: &UserId) -> Result<Option<String>> {
        sqlx::query_scalar("SELECT password_hash FROM users WHERE tenant_id = $1 AND id = $2")
            .bind(tenant.as_str())
            .bind(id.as_str())
            .fetch_optional(&self.pool)
            .await
            .map_err(db_error)
    }

    async fn list_users(&self, tenant: &TenantId, query: &UserQuery, page: PageRequest) -> Result<Page<User>> {
        let mut from_where = Sql::new(" FROM users u WHERE u.tenant_id = ");
        from_where.bind(tenant.as_str());
        if let Some(role) = query.role {
            from_where.push(" AND u.role = ").bind(role.as_str());
        }
        if let Some(project) = &query.project {
            // Ids hold no LIKE wildcard; the quotes match one whole element of the JSON array.
            from_where
                .push(" AND u.project_ids LIKE ")
                .bind(format!("%\"{}\"%", project.as_str().replace(['%', '_', '\\'], "")));
        }
        if let Some(name) = &query.username {
            from_where
                .push(" AND u.username_key LIKE ")
                .bind(contains_pattern(&name.to_lowercase()))
                .push(" ESCAPE '\\'");
        }
        fetch_page(
            &self.pool,
            COLUMNS,
            &from_where,
            "u.username_key, u.id",
            page,
            user_from_row,
        )
        .await
    }

    async fn delete_user(&self, tenant: &TenantId, id: &UserId) -> Result<()> {
        let mut tx = self.begin_write().await?;
        sqlx::query("DELETE FROM user_sessions WHERE user_id = $1")
            .bind(id.as_str())
            .execute(&mut *tx)
            .await
            .map_err(db_error)?;
        let done = sqlx::query("DELETE FROM users WHERE tenant_id = $1 AND id = $2")
            .bind(tenant.as_str())
            .bind(id.as_str())
            .execute(&mut *tx)
            .await
            .map_err(db_error)?;
        if done.rows_affected() == 0 {
            return Err(Error::not_found("user", id));
        }
        tx.commit().await.map_err(db_error)
    }

    async fn record_sign_in(&self, id: &UserId, at: i64) -> Result<()> {
        sqlx::query("UPDATE users SET last_login_time = $1 WHERE id = $2")
            .bind(at)
            .bind(id.as_str())
            .execute(&mut *self.writes().await?)
            .await
            .map_err(db_error)?;
        Ok(())
    }

    async fn insert_session(&self, s: &UserSession) -> Result<()> {
        sqlx::query(
            "INSERT INTO user_sessions (token_hash, user_id, tenant_id, created_time, expires_time, max_expires_time) \
             VALUES ($1, $2, $3, $4, $5, $6)",
        )
        .bind(s.token_hash.as_str())
        .bind(s.user.as_str())
        .bind(s.tenant.as_str())
        .bind(s.created_time)
        .bind(s.expires_time)
        .bind(s.max_expires_time)
        .execute(&mut *self.writes().await?)
        .await
        .map_err(db_error)?;
        Ok(())
    }

    async fn session(&self, token_hash: &str, now: i64) -> Result<Option<(UserSession, User)>> {
        let row = sqlx::query(&format!(
            "SELECT {COLUMNS}, s.token_hash, s.user_id, s.tenant_id AS session_tenant, \
                    s.created_time AS session_created, s.expires_time, s.max_expires_time \
             FROM user_sessions s JOIN users u ON u.id = s.user_id AND u.status = 'ACTIVE' \
             WHERE s.token_hash = $1 AND s.expires_time > $2"
        ))
        .bind(token_hash)
        .bind(now)
        .fetch_optional(&self.pool)
        .await
        .map_err(db_error)?;
        row.map(|row| Ok((session_from_row(&row)?, user_from_row(&row)?)))
            .transpose()
    }

    async fn extend_session(&self, token_hash: &str, expires_time: i64) -> Result<()> {
        sqlx::query("UPDATE user_sessions SET expires_time = $1 WHERE token_hash = $2 AND expires_time < $1")
            .bind(expires_time)
            .bind(token_hash)
            .execute(&mut *self.writes().await?)
            .await
            .map_err(db_error)?;
        Ok(())
    }

    async fn delete_session(&self, token_hash: &str) -> Result<()> {
        sqlx::query("DELETE FROM user_sessions WHERE token_hash = $1")
            .bind(token_hash)
            .execute(&mut *self.writes().await?)
            .await
            .map_err(db_error)?;
        Ok(())
    }

    async fn delete_user_sessions(&self, id: &UserId) -> Result<()> {
        sqlx::query("DELETE FROM user_sessions WHERE user_id = $1")
            .bind(id.as_str())
            .execute(&mut *self.writes().await?)
            .await
            .map_err(db_error)?;
        Ok(())
    }

    async fn delete_expired_sessions(&self, now: i64) -> Result<u64> {
        let done = sqlx::query("DELETE FROM user_sessions WHERE expires_time <= $1")
            .bind(now)
            .execute(&mut *self.writes().await?)
            .await
            .map_err(db_error)?;
        Ok(done.rows_affected())
    }
}
