//! Authentication: turning a bearer token into its principal, through a short-lived cache that
//! the catalog clears whenever it changes or rotates a token.

use std::sync::Arc;
use std::time::Duration;

use crate::cache::TtlCache;
use crate::ids::{DeviceId, TenantId};
use crate::principal::{Principal, TokenOwner};
use crate::store::Store;
use crate::token::{generate_token, hash_token, token_digest};
use crate::user::SessionConfig;
use crate::{Error, Result};

/// How long a token's principal is served from the cache: a rotation or deletion made through
/// another process on the same database takes this long to be seen here (README, "Rotating
/// tokens"); a longer time spares more store lookups.
pub const TOKEN_CACHE_TTL: Duration = Duration::from_secs(5);

/// Recently seen tokens (by the SHA-256 of the token, kept as its 32 bytes rather than its hex
/// text: one entry per device that logged in), so that a request does not cost a store lookup.
/// The catalog drops the entries of a device it Locks, moves or deletes, of a project it
/// deletes and of every token it rotates; an entry of a token in its grace period carries the
/// token's end, past which it is not served.
pub type TokenCache = TtlCache<[u8; 32], TokenOwner>;

/// A session's end moves forward on use at most once per this step, so that requests in a
/// row do not each write it.
const SESSION_EXTEND_STEP_MS: i64 = 60_000;

/// Turns bearer tokens (and sign-in sessions) into principals.
pub struct AuthService {
    store: Arc<dyn Store>,
    cache: Arc<TokenCache>,
    sessions: SessionConfig,
}

impl AuthService {
    pub fn new(store: Arc<dyn Store>, cache: Arc<TokenCache>, sessions: SessionConfig) -> Self {
        Self { store, cache, sessions }
    }

    pub async fn authenticate(&self, token: &str) -> Result<Principal> {
        self.authenticate_until(token).await.map(|owner| owner.principal)
    }

    /// The token's principal and when the token stops working, if it was replaced with a grace
    /// period (the broker closes a session logged in with it then).
    pub async fn authenticate_until(&self, token: &str) -> Result<TokenOwner> {
        if token.is_empty() || token.len() > 256 {
            return Err(Error::Unauthorized);
        }
        let digest = token_digest(token);
        let now = crate::time::now_ms();
        let live = |owner: &TokenOwner| owner.expires.is_none_or(|end| end > now);
        if let Some(owner) = self.cache.get(&digest).filter(live) {
            return Ok(owner);
        }
        let hash = hex::encode(digest);
        let owner = match self.store.token_owner(&hash, now).await? {
            Some(owner) => owner,
            None => self.session_owner(&hash, now).await?.ok_or(Error::Unauthorized)?,
        };
        self.cache.put(digest, owner.clone());
        Ok(owner)
    }

    /// The user of a live sign-in session, whose end this use moves forward (up to its
    /// maximum). The cached owner carries the session's end, past which it is not served.
    async fn session_owner(&self, hash: &str, now: i64) -> Result<Option<TokenOwner>> {
        let Some((session, user)) = self.store.session(hash, now).await? else {
            return Ok(None);
        };
        let ttl = i64::try_from(self.sessions.ttl.as_millis()).unwrap_or(i64::MAX / 4);
        let extended = (now + ttl).min(session.max_expires_time);
        let expires = if extended - session.expires_time >= SESSION_EXTEND_STEP_MS {
            self.store.extend_session(hash, extended).await?;
            extended
        } else {
            session.expires_time
        };
        Ok(Some(TokenOwner {
            principal: Principal::of_user(&user),
            expires: Some(expires),
        }))
    }

    /// The principal of a live device known by its id alone: for a device whose verified client
    /// certificate names it, which presents no token.
    pub async fn device(&self, id: &DeviceId) -> Result<Option<Principal>> {
        let Some(tenant) = self.store.device_tenant(id).await? else {
            return Ok(None);
        };
        Ok(self
            .store
            .get_device(&tenant, id)
            .await?
            .map(|device| Principal::Device {
                locked: device.status == crate::enums::DeviceStatus::Locked,
                project: device.project_id,
                device: device.id,
                tenant,
            }))
    }

    /// Makes sure the default tenant exists and sets the system administrator's token: `fixed`
    /// when given (replacing any earlier one), else a generated one when none exists yet.
    /// Returns the token when it was generated now.
    pub async fn bootstrap(&self, fixed: Option<&str>) -> Result<Option<String>> {
        self.store.ensure_default_tenant(crate::time::now_ms()).await?;
        let tenant = TenantId::default_tenant();
        if let Some(token) = fixed {
            self.store.set_system_token(&tenant, &hash_token(token)).await?;
            self.cache
                .forget(|_, o| matches!(o.principal, Principal::Admin { system: true, .. }));
            return Ok(None);
        }
        if self.store.has_system_token().await? {
            return Ok(None);
        }
        let token = generate_token();
        self.store.set_system_token(&tenant, &hash_token(&token)).await?;
        Ok(Some(token))
    }
}
