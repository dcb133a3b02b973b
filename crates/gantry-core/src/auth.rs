//! Who is calling: bearer tokens, the principals they stand for, and what each may do.

use std::sync::Arc;

use rand::RngCore;
use sha2::{Digest, Sha256};

use crate::ids::{DeviceId, ProjectId, TenantId};
use crate::store::Store;
use crate::{Error, Result};

/// The caller behind a bearer token.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Principal {
    /// A tenant administrator: everything inside the tenant. The system administrator is the
    /// administrator of the default tenant and may also create tenants.
    Admin { tenant: TenantId, system: bool },
    /// A project's `applicationAccessToken`: that project and its devices, and reading models.
    Application { tenant: TenantId, project: ProjectId },
    /// A device's `accessToken`: that device only.
    Device {
        tenant: TenantId,
        project: ProjectId,
        device: DeviceId,
        locked: bool,
    },
}

impl Principal {
    pub fn tenant(&self) -> &TenantId {
        match self {
            Principal::Admin { tenant, .. }
            | Principal::Application { tenant, .. }
            | Principal::Device { tenant, .. } => tenant,
        }
    }

    /// What records created by this caller show as `createdBy` / `updatedBy`.
    pub fn actor(&self) -> String {
        match self {
            Principal::Admin { system: true, .. } => "system".to_owned(),
            Principal::Admin { .. } => "admin".to_owned(),
            Principal::Application { project, .. } => format!("application:{project}"),
            Principal::Device { .. } => "DEVICE".to_owned(),
        }
    }

    pub fn require_admin(&self) -> Result<&TenantId> {
        match self {
            Principal::Admin { tenant, .. } => Ok(tenant),
            _ => Err(Error::forbidden("this operation needs a tenant administrator token")),
        }
    }

    pub fn require_system(&self) -> Result<()> {
        match self {
            Principal::Admin { system: true, .. } => Ok(()),
            _ => Err(Error::forbidden("this operation needs the system administrator token")),
        }
    }

    /// Reading a project and its listings: administrators, and the project's own applications.
    pub fn require_project(&self, project: &ProjectId) -> Result<()> {
        match self {
            Principal::Admin { .. } => Ok(()),
            Principal::Application { project: own, .. } if own == project => Ok(()),
            _ => Err(Error::forbidden("this token does not grant access to that project")),
        }
    }

    /// Reading a device: administrators, its project's applications and the device itself.
    pub fn require_device_read(&self, project: &ProjectId, device: &DeviceId) -> Result<()> {
        match self {
            Principal::Device { device: own, .. } if own == device => Ok(()),
            Principal::Device { .. } => Err(Error::forbidden("a device token grants access to its own device only")),
            _ => self.require_project(project),
        }
    }

    /// Writing data of a device (its events): as reading, but a Locked device's own token is refused.
    pub fn require_device_write(&self, project: &ProjectId, device: &DeviceId) -> Result<()> {
        self.require_device_read(project, device)?;
        match self {
            Principal::Device { locked: true, .. } => Err(Error::forbidden("the device is Locked")),
            _ => Ok(()),
        }
    }

    /// Managing a device (update, delete, control, routes): administrators and its project's applications.
    pub fn require_device_manage(&self, project: &ProjectId) -> Result<()> {
        match self {
            Principal::Device { .. } => Err(Error::forbidden("a device token cannot manage devices")),
            _ => self.require_project(project),
        }
    }
}

/// A token's principal and, for a token replaced with a grace period, when it stops working
/// (epoch ms). A cached owner is served only before `expires`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TokenOwner {
    pub principal: Principal,
    pub expires: Option<i64>,
}

/// Whose token a rotation replaces.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TokenSubject {
    /// The system administrator (the default tenant's administrator).
    System,
    Admin(TenantId),
    Application(ProjectId),
    Device(DeviceId),
}

impl TokenSubject {
    /// Whether `principal` is what a token of this subject stands for.
    pub fn owns(&self, principal: &Principal) -> bool {
        match (self, principal) {
            (TokenSubject::System, Principal::Admin { system, .. }) => *system,
            (TokenSubject::Admin(t), Principal::Admin { tenant, system }) => !system && tenant == t,
            (TokenSubject::Application(p), Principal::Application { project, .. }) => project == p,
            (TokenSubject::Device(d), Principal::Device { device, .. }) => device == d,
            _ => false,
        }
    }
}

/// The longest grace period a rotation may give the replaced token: one day.
pub const MAX_GRACE_SECONDS: i64 = 86_400;

/// Body of the rotation endpoints: how long the replaced token keeps working.
#[derive(Debug, Clone, Default, serde::Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct RotateInput {
    /// 0 (default: the old token stops at once) to 86400 seconds.
    #[schema(minimum = 0, maximum = 86400)]
    pub grace_seconds: Option<i64>,
}

impl RotateInput {
    /// The grace period in milliseconds, checked.
    pub fn grace_ms(&self) -> Result<i64> {
        let grace = self.grace_seconds.unwrap_or(0);
        if !(0..=MAX_GRACE_SECONDS).contains(&grace) {
            return Err(Error::invalid(
                "graceSeconds",
                format!("must be a whole number from 0 to {MAX_GRACE_SECONDS}"),
            ));
        }
        Ok(grace * 1000)
    }
}

/// A new random bearer token: 192 bits, hex.
pub fn generate_token() -> String {
    let mut bytes = [0u8; 24];
    rand::rng().fill_bytes(&mut bytes);
    hex::encode(bytes)
}

/// Tokens are looked up by this hash, so the lookup does not compare secrets byte by byte.
pub fn hash_token(token: &str) -> String {
    hex::encode(token_digest(token))
}

/// The SHA-256 of a token: `hash_token` is its hex text; the token cache keys on its bytes.
fn token_digest(token: &str) -> [u8; 32] {
    Sha256::digest(token.as_bytes()).into()
}

/// Recently seen tokens (by the SHA-256 of the token, kept as its 32 bytes rather than its hex
/// text: one entry per device that logged in), so that a request does not cost a store lookup.
/// The catalog drops the entries of a device it Locks, moves or deletes, of a project it
/// deletes and of every token it rotates; an entry of a token in its grace period carries the
/// token's end, past which it is not served.
pub type TokenCache = crate::cache::TtlCache<[u8; 32], TokenOwner>;

/// Turns bearer tokens into principals.
pub struct AuthService {
    store: Arc<dyn Store>,
    cache: Arc<TokenCache>,
}

impl AuthService {
    pub fn new(store: Arc<dyn Store>, cache: Arc<TokenCache>) -> Self {
        Self { store, cache }
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
        let owner = self
            .store
            .token_owner(&hex::encode(digest), now)
            .await?
            .ok_or(Error::Unauthorized)?;
        self.cache.put(digest, owner.clone());
        Ok(owner)
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_are_long_and_distinct() {
        let (a, b) = (generate_token(), generate_token());
        assert_eq!(a.len(), 48);
        assert_ne!(a, b);
        assert_eq!(hash_token(&a), hash_token(&a));
        assert_ne!(hash_token(&a), hash_token(&b));
    }

    #[test]
    fn scopes() {
        let t = TenantId::default_tenant();
        let (p1, p2) = (ProjectId::generate(), ProjectId::generate());
        let d1 = DeviceId::generate();
        let app = Principal::Application {
            tenant: t.clone(),
            project: p1.clone(),
        };
        assert!(app.require_project(&p1).is_ok());
        assert!(matches!(app.require_project(&p2), Err(Error::Forbidden(_))));
        assert!(app.require_admin().is_err());
        let dev = Principal::Device {
            tenant: t.clone(),
            project: p1.clone(),
            device: d1.clone(),
            locked: true,
        };
        assert!(dev.require_device_read(&p1, &d1).is_ok());
        assert!(dev.require_device_write(&p1, &d1).is_err());
        assert!(dev.require_device_read(&p1, &DeviceId::generate()).is_err());
        assert!(dev.require_device_manage(&p1).is_err());
        assert_eq!(dev.actor(), "DEVICE");
    }
}
