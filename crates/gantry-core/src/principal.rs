//! Who is calling: the principal a bearer token stands for, and what each kind of principal may
//! do. Every scope rule of the API is one of the `require_*` checks here, so HTTP and MQTT apply
//! the same ones.

use crate::ids::{DeviceId, ProjectId, TenantId};
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

    /// Reading device models and their alarm rules: administrators and applications.
    pub fn require_model_read(&self) -> Result<()> {
        match self {
            Principal::Device { .. } => Err(Error::forbidden("a device token cannot read device models")),
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

#[cfg(test)]
mod tests {
    use super::*;

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
