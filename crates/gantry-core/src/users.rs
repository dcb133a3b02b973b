//! User accounts and sign-in: the administrators' management of users, and the sessions people
//! sign in to. The API and the console both sign people in through `UserService::login`.
//!
//! Passwords are Argon2id hashes (the `argon2` crate's default parameters, its recommended
//! ones), computed on the blocking pool so that a sign-in does not hold up the runtime. A
//! session token is stored as its SHA-256, as every bearer token is. Any change of a user that
//! narrows what it may do (lock, delete, role, projects, password) ends all its sessions at
//! once: their rows are deleted and this process's token cache forgets them.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use argon2::password_hash::{PasswordHash, PasswordHasher, PasswordVerifier, SaltString};

use crate::audit::{Actor, AuditChange, AuditOutcome, PrincipalType};
use crate::auditing::AuditService;
use crate::auth::TokenCache;
use crate::guard::LoginGuard;
use crate::ids::{ProjectId, TenantId};
use crate::paging::{Page, PageRequest};
use crate::principal::{Principal, TokenSubject};
use crate::store::Store;
use crate::time::now_ms;
use crate::token::{generate_token, hash_token};
use crate::user::{Password, Role, SessionConfig, User, UserId, UserQuery, UserSession, UserStatus, Username};
use crate::{Error, Result};

/// Failures in a row after which a username waits `BACKOFF_WAIT` before its next check.
pub const BACKOFF_FAILURES: u32 = 5;
pub const BACKOFF_WAIT: Duration = Duration::from_secs(30);

/// What an administrator sends to create or change a user; absent fields stay as they are.
#[derive(Debug, Default)]
pub struct UserFields {
    pub tenant_id: Option<TenantId>,
    pub username: Option<String>,
    pub password: Option<String>,
    pub display_name: Option<String>,
    pub email: Option<String>,
    pub role: Option<Role>,
    pub project_ids: Option<Vec<ProjectId>>,
}

/// A user just created, with the initial password generated for it (shown this once).
#[derive(Debug)]
pub struct CreatedUser {
    pub user: User,
    pub generated_password: Option<Password>,
}

/// A session just started: its bearer token (shown this once) and when it ends unless used.
#[derive(Debug, Clone)]
pub struct SignedIn {
    pub token: String,
    pub expires_time: i64,
    pub user: User,
}

/// Users one tenant may hold unless configured otherwise.
pub const DEFAULT_USERS_PER_TENANT: u64 = 1000;

pub struct UserService {
    store: Arc<dyn Store>,
    tokens: Arc<TokenCache>,
    audit: Arc<AuditService>,
    guard: Arc<LoginGuard>,
    sessions: SessionConfig,
    backoff: Mutex<HashMap<String, Backoff>>,
    /// Users one tenant may hold (`--users-per-tenant`), checked before each create.
    max_per_tenant: std::sync::atomic::AtomicU64,
}

/// A username's failed sign-ins in a row, and the end of its wait.
#[derive(Debug, Default)]
struct Backoff {
    failures: u32,
    waits_until: Option<Instant>,
}

impl UserService {
    pub fn new(
        store: Arc<dyn Store>,
        tokens: Arc<TokenCache>,
        audit: Arc<AuditService>,
        guard: Arc<LoginGuard>,
        sessions: SessionConfig,
    ) -> Self {
        Self {
            store,
            tokens,
            audit,
            guard,
            sessions,
            max_per_tenant: std::sync::atomic::AtomicU64::new(DEFAULT_USERS_PER_TENANT),
            backoff: Mutex::new(HashMap::new()),
        }
    }

    pub fn session_config(&self) -> SessionConfig {
        self.sessions
    }

    // ---- administration --------------------------------------------------------------------

    /// The tenant whose users `who` manages: its own, or any (`tenant`) for the system administrator.
    fn managed_tenant(who: &Principal, tenant: Option<&TenantId>) -> Result<TenantId> {
        let own = who.require_admin()?;
        match tenant {
            Some(t) if t != own => {
                who.require_system()
                    .map_err(|_| Error::forbidden("only the system administrator manages another tenant's users"))?;
                Ok(t.clone())
            }
            _ => Ok(own.clone()),
        }
    }

    /// Sets the bound on users per tenant (`--users-per-tenant`).
    pub fn set_max_per_tenant(&self, max: u64) {
        self.max_per_tenant.store(max, std::sync::atomic::Ordering::Relaxed);
    }

    /// `LimitReached` when `tenant` holds its bound of users already. Counted before the
    /// write: concurrent creates may pass it by as many as are in flight.
    async fn check_room(&self, tenant: &TenantId) -> Result<()> {
        let max = self.max_per_tenant.load(std::sync::atomic::Ordering::Relaxed);
        let one = PageRequest::parse(None, Some(1), 1)?;
        let held = self.store.list_users(tenant, &UserQuery::default(), one).await?.total;
        crate::error::within_bound(held, max, "users per tenant", "users-per-tenant")
    }

    pub async fn create(&self, who: &Principal, input: UserFields) -> Result<CreatedUser> {
        let tenant = Self::managed_tenant(who, input.tenant_id.as_ref())?;
        if self.store.get_tenant(&tenant).await?.is_none() {
            return Err(Error::invalid("tenantId", "names no tenant"));
        }
        self.check_room(&tenant).await?;
        let username = Username::parse(
            input
                .username
                .as_deref()
                .ok_or_else(|| Error::invalid("username", "is required"))?,
        )?;
        let role = input.role.ok_or_else(|| Error::invalid("role", "is required"))?;
        let projects = self
            .checked_projects(&tenant, input.project_ids.unwrap_or_default())
            .await?;
        let (password, generated) = match input.password {
            Some(p) => (Password::parse("password", &p, username.as_str())?, false),
            None => (Password::generate(), true),
        };
        let user = User {
            id: UserId::generate(),
            tenant_id: tenant,
            username: username.as_str().to_owned(),
            display_name: text_field("displayName", input.display_name)?,
            email: text_field("email", input.email)?,
            role,
            project_ids: projects,
            status: UserStatus::Active,
            created_by: who.actor(),
            created_time: now_ms(),
            updated_by: None,
            updated_time: None,
            last_login_time: None,
        };
        let hash = hash_password(password.expose()).await?;
        self.store.insert_user(&user, &hash).await?;
        Ok(CreatedUser {
            user,
            generated_password: generated.then_some(password),
        })
    }

    /// Every project must be a live project of the tenant.
    async fn checked_projects(&self, tenant: &TenantId, projects: Vec<ProjectId>) -> Result<Vec<ProjectId>> {
        let mut checked: Vec<ProjectId> = Vec::with_capacity(projects.len());
        for project in projects {
            if self.store.get_project(tenant, &project).await?.is_none() {
                return Err(Error::invalid(
                    "projectIds",
                    format!("{project} is not a project of the tenant"),
                ));
            }
            if !checked.contains(&project) {
                checked.push(project);
            }
        }
        Ok(checked)
    }

    pub async fn get(&self, who: &Principal, id: &UserId) -> Result<User> {
        who.require_admin()?;
        let tenant = match who {
            Principal::Admin { system: true, .. } => None,
            _ => Some(who.tenant()),
        };
        self.store
            .get_user(tenant, id)
            .await?
            .ok_or_else(|| Error::not_found("user", id))
    }

    pub async fn list(
        &self,
        who: &Principal,
        tenant: Option<&TenantId>,
        query: UserQuery,
        page: PageRequest,
    ) -> Result<Page<User>> {
        let tenant = Self::managed_tenant(who, tenant)?;
        if let Some(name) = &query.username
            && name.len() > 64
        {
            return Err(Error::invalid("username", "must be at most 64 characters"));
        }
        self.store.list_users(&tenant, &query, page).await
    }

    /// Changes a user; a change of role, projects or password ends its sessions.
    pub async fn update(&self, who: &Principal, id: &UserId, input: UserFields) -> Result<User> {
        let mut user = self.get(who, id).await?;
        if input.tenant_id.as_ref().is_some_and(|t| t != &user.tenant_id) {
            return Err(Error::invalid("tenantId", "the tenant of a user cannot change"));
        }
        if let Some(name) = &input.username {
            user.username = Username::parse(name)?.as_str().to_owned();
        }
        let mut narrows = false;
        let hash = match &input.password {
            Some(p) => {
                narrows = true;
                Some(hash_password(Password::parse("password", p, &user.username)?.expose()).await?)
            }
            None => None,
        };
        if let Some(role) = input.role {
            narrows |= role != user.role;
            user.role = role;
        }
        if let Some(projects) = input.project_ids {
            let projects = self.checked_projects(&user.tenant_id, projects).await?;
            narrows |= projects != user.project_ids;
            user.project_ids = projects;
        }
        if input.display_name.is_some() {
            user.display_name = text_field("displayName", input.display_name)?;
        }
        if input.email.is_some() {
            user.email = text_field("email", input.email)?;
        }
        user.updated_by = Some(who.actor());
        user.updated_time = Some(now_ms());
        self.store.update_user(&user, hash.as_deref()).await?;
        if narrows {
            self.end_sessions(&user.id).await?;
        }
        Ok(user)
    }

    pub async fn delete(&self, who: &Principal, id: &UserId) -> Result<()> {
        let user = self.get(who, id).await?;
        if let Principal::User { user: own, .. } = who
            && own == id
        {
            return Err(Error::Conflict("a user cannot delete itself".to_owned()));
        }
        self.store.delete_user(&user.tenant_id, id).await?;
        self.forget(id);
        Ok(())
    }

    /// Locks (`locked`) or unlocks a user; a lock ends its sessions.
    pub async fn set_locked(&self, who: &Principal, id: &UserId, locked: bool) -> Result<User> {
        let mut user = self.get(who, id).await?;
        if locked && matches!(who, Principal::User { user: own, .. } if own == id) {
            return Err(Error::Conflict("a user cannot lock itself".to_owned()));
        }
        user.status = if locked { UserStatus::Locked } else { UserStatus::Active };
        user.updated_by = Some(who.actor());
        user.updated_time = Some(now_ms());
        self.store.update_user(&user, None).await?;
        if locked {
            self.end_sessions(&user.id).await?;
        }
        Ok(user)
    }

    async fn end_sessions(&self, id: &UserId) -> Result<()> {
        self.store.delete_user_sessions(id).await?;
        self.forget(id);
        Ok(())
    }

    fn forget(&self, id: &UserId) {
        let subject = TokenSubject::User(id.clone());
        self.tokens.forget(|_, owner| subject.owns(&owner.principal));
    }

    // ---- sign-in ---------------------------------------------------------------------------

    /// Signs a person in. A wrong password, an unknown username and a locked user are all 401
    /// and take the same time (an unknown username is checked against a stand-in hash). Each
    /// failure counts toward the address's login ban and the username's back-off.
    pub async fn login(&self, username: &str, password: &str, client: Option<IpAddr>) -> Result<SignedIn> {
        if client.is_some_and(|ip| self.guard.is_banned(ip)) {
            return Err(Error::Banned);
        }
        let key = username.to_lowercase();
        if let Some(wait) = self.waiting(&key) {
            return Err(Error::Busy(format!(
                "username: too many failed sign-ins in a row; retry in {} s",
                wait.as_secs().max(1)
            )));
        }
        let found = if username.len() <= 256 {
            self.store.user_by_username(&key).await?
        } else {
            None
        };
        let hash = found.as_ref().map(|(_, hash)| hash.clone());
        let matches = verify_password(password.to_owned(), hash).await?;
        match found {
            Some((user, _)) if matches && user.status == UserStatus::Active => {
                self.clear_backoff(&key);
                self.start_session(user, client).await
            }
            found => {
                self.failed_sign_in(&key, username, found.map(|(u, _)| u), client)
                    .await?;
                Err(Error::Unauthorized)
            }
        }
    }

    async fn start_session(&self, mut user: User, client: Option<IpAddr>) -> Result<SignedIn> {
        let now = now_ms();
        let token = generate_token();
        let ttl = duration_ms(self.sessions.ttl);
        let max = now + duration_ms(self.sessions.max_age);
        let session = UserSession {
            token_hash: hash_token(&token),
            user: user.id.clone(),
            tenant: user.tenant_id.clone(),
            created_time: now,
            expires_time: (now + ttl).min(max),
            max_expires_time: max,
        };
        self.store.insert_session(&session).await?;
        self.store.record_sign_in(&user.id, now).await?;
        user.last_login_time = Some(now);
        let actor = Actor::of(&Principal::of_user(&user));
        self.audit
            .record(&actor, sign_in_change(Some(&user), client, AuditOutcome::Success))
            .await?;
        Ok(SignedIn {
            token,
            expires_time: session.expires_time,
            user,
        })
    }

    async fn failed_sign_in(&self, key: &str, typed: &str, user: Option<User>, client: Option<IpAddr>) -> Result<()> {
        if let Some(ip) = client
            && self.guard.failed(ip)
        {
            tracing::warn!(address = %ip, "too many failed logins: address banned");
        }
        self.count_failure(key);
        let actor = Actor {
            tenant: user
                .as_ref()
                .map_or_else(TenantId::default_tenant, |u| u.tenant_id.clone()),
            kind: PrincipalType::User,
            id: user.as_ref().map(|u| u.id.to_string()).unwrap_or_default(),
            name: typed.chars().take(64).collect(),
        };
        self.audit
            .record(&actor, sign_in_change(user.as_ref(), client, AuditOutcome::Failure))
            .await
    }

    /// How long the username still waits, if it does.
    fn waiting(&self, key: &str) -> Option<Duration> {
        let now = Instant::now();
        let backoff = self.backoff.lock().expect("backoff lock");
        backoff
            .get(key)
            .and_then(|b| b.waits_until)
            .filter(|until| *until > now)
            .map(|until| until - now)
    }

    fn count_failure(&self, key: &str) {
        let mut backoff = self.backoff.lock().expect("backoff lock");
        if backoff.len() >= 4096 {
            let now = Instant::now();
            backoff.retain(|_, b| b.waits_until.is_some_and(|u| u > now) || b.failures > 0);
        }
        let entry = backoff.entry(key.to_owned()).or_default();
        entry.failures += 1;
        if entry.failures >= BACKOFF_FAILURES {
            entry.failures = 0;
            entry.waits_until = Some(Instant::now() + BACKOFF_WAIT);
        }
    }

    fn clear_backoff(&self, key: &str) {
        self.backoff.lock().expect("backoff lock").remove(key);
    }

    /// Ends the session whose bearer token is `token`.
    pub async fn logout(&self, who: &Principal, token: &str) -> Result<()> {
        if !matches!(who, Principal::User { .. }) {
            return Err(Error::invalid(
                "Authorization",
                "is not a session token: only a session signs out",
            ));
        }
        let digest = crate::token::token_digest(token);
        self.store.delete_session(&hex::encode(digest)).await?;
        self.tokens.remove(&digest);
        Ok(())
    }

    /// The signed-in user's record; None for a token's principal.
    pub async fn me(&self, who: &Principal) -> Result<Option<User>> {
        match who {
            Principal::User { user, tenant, .. } => Ok(self.store.get_user(Some(tenant), user).await?),
            _ => Ok(None),
        }
    }

    /// The signed-in user changes its own password; every session of the user ends.
    pub async fn change_password(&self, who: &Principal, current: &str, new: &str) -> Result<()> {
        let Principal::User { user, tenant, name, .. } = who else {
            return Err(Error::forbidden("only a signed-in user changes its password"));
        };
        let new = Password::parse("newPassword", new, name)?;
        let hash = self.store.password_hash(tenant, user).await?;
        if !verify_password(current.to_owned(), hash).await? {
            return Err(Error::invalid("currentPassword", "is not the user's password"));
        }
        let mut record = self
            .store
            .get_user(Some(tenant), user)
            .await?
            .ok_or_else(|| Error::not_found("user", user))?;
        record.updated_by = Some(who.actor());
        record.updated_time = Some(now_ms());
        let hash = hash_password(new.expose()).await?;
        self.store.update_user(&record, Some(&hash)).await?;
        self.end_sessions(user).await
    }

    /// Deletes the sessions that have ended; returns how many.
    pub async fn purge_sessions(&self) -> Result<u64> {
        self.store.delete_expired_sessions(now_ms()).await
    }
}

fn sign_in_change(user: Option<&User>, client: Option<IpAddr>, outcome: AuditOutcome) -> AuditChange {
    AuditChange {
        resource_type: "user".to_owned(),
        resource_id: user.map(|u| u.id.to_string()),
        action: "login".to_owned(),
        changed_fields: Vec::new(),
        client_address: client.map(|ip| ip.to_string()),
        outcome,
        status: Some(if outcome == AuditOutcome::Success { 200 } else { 401 }),
    }
}

fn duration_ms(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX / 4)
}

/// An optional free text field: at most 256 characters.
fn text_field(field: &'static str, value: Option<String>) -> Result<Option<String>> {
    match value {
        Some(v) if v.chars().count() > 256 => Err(Error::invalid(field, "must be at most 256 characters")),
        Some(v) if v.is_empty() => Ok(None),
        other => Ok(other),
    }
}

/// Hashes computed at once: each holds Argon2's memory cost and a core while it runs, so a
/// flood of sign-ins queues here instead of filling the blocking pool and the memory.
fn hashing_permits() -> &'static tokio::sync::Semaphore {
    static PERMITS: OnceLock<tokio::sync::Semaphore> = OnceLock::new();
    PERMITS.get_or_init(|| {
        let cores = std::thread::available_parallelism().map_or(2, std::num::NonZero::get);
        tokio::sync::Semaphore::new(cores * 2)
    })
}

/// The Argon2id hash (PHC string) of a password, computed on the blocking pool.
pub async fn hash_password(password: &str) -> Result<String> {
    let password = password.to_owned();
    let _permit = hashing_permits().acquire().await.map_err(Error::store)?;
    tokio::task::spawn_blocking(move || argon2_hash(&password))
        .await
        .map_err(Error::store)?
}

fn argon2_hash(password: &str) -> Result<String> {
    let mut salt = [0u8; 16];
    rand::RngCore::fill_bytes(&mut rand::rng(), &mut salt);
    let salt = SaltString::encode_b64(&salt).map_err(|e| Error::store(std::io::Error::other(e.to_string())))?;
    argon2::Argon2::default()
        .hash_password(password.as_bytes(), &salt)
        .map(|h| h.to_string())
        .map_err(|e| Error::store(std::io::Error::other(e.to_string())))
}

/// Whether `password` matches `hash`; without a hash it is checked against a stand-in, so
/// that it costs what a check of a real one does, and is false.
async fn verify_password(password: String, hash: Option<String>) -> Result<bool> {
    static STAND_IN: OnceLock<String> = OnceLock::new();
    let _permit = hashing_permits().acquire().await.map_err(Error::store)?;
    tokio::task::spawn_blocking(move || {
        let real = hash.is_some();
        let hash = match hash {
            Some(hash) => hash,
            None => STAND_IN
                .get_or_init(|| argon2_hash("a stand-in password no one has").unwrap_or_default())
                .clone(),
        };
        let Ok(parsed) = PasswordHash::new(&hash) else {
            return false;
        };
        let ok = argon2::Argon2::default()
            .verify_password(password.as_bytes(), &parsed)
            .is_ok();
        ok && real
    })
    .await
    .map_err(Error::store)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn passwords_hash_and_verify() {
        let hash = hash_password("correct horse battery").await.unwrap();
        assert!(hash.starts_with("$argon2id$"), "{hash}");
        assert!(!hash.contains("correct horse"));
        assert!(
            verify_password("correct horse battery".into(), Some(hash.clone()))
                .await
                .unwrap()
        );
        assert!(!verify_password("wrong horse battery".into(), Some(hash)).await.unwrap());
        assert!(
            !verify_password("a stand-in password no one has".into(), None)
                .await
                .unwrap()
        );
    }
}
