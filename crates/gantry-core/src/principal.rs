//! Who is calling: the principal a bearer token stands for, and what each kind of principal may
//! do. Every scope rule of the API is one of the `require_*` checks here, so HTTP and MQTT apply
//! the same ones.

use crate::ids::{DeviceId, ProjectId, TenantId};
use crate::user::{Role, User, UserId};
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
    /// A person signed in with a user account: what its role allows, on its projects (empty:
    /// all of the tenant's).
    User {
        tenant: TenantId,
        user: UserId,
        /// The username, for `createdBy` and the audit log.
        name: String,
        role: Role,
        projects: Vec<ProjectId>,
    },
}

/// The scope of a listing: every project of the tenant, or only these.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ProjectScope {
    All,
    Only(Vec<ProjectId>),
}

impl Principal {
    /// The principal a sign-in session of `user` stands for.
    pub fn of_user(user: &User) -> Self {
        Principal::User {
            tenant: user.tenant_id.clone(),
            user: user.id.clone(),
            name: user.username.clone(),
            role: user.role,
            projects: user.project_ids.clone(),
        }
    }

    pub fn tenant(&self) -> &TenantId {
        match self {
            Principal::Admin { tenant, .. }
            | Principal::Application { tenant, .. }
            | Principal::Device { tenant, .. }
            | Principal::User { tenant, .. } => tenant,
        }
    }

    /// What records created by this caller show as `createdBy` / `updatedBy`.
    pub fn actor(&self) -> String {
        match self {
            Principal::Admin { system: true, .. } => "system".to_owned(),
            Principal::Admin { .. } => "admin".to_owned(),
            Principal::Application { project, .. } => format!("application:{project}"),
            Principal::Device { .. } => "DEVICE".to_owned(),
            Principal::User { name, .. } => format!("user:{name}"),
        }
    }

    /// The role a signed-in user has; None for a token.
    fn role(&self) -> Option<Role> {
        match self {
            Principal::User { role, .. } => Some(*role),
            _ => None,
        }
    }

    /// Whether the caller sees the project at all (a project it does not see is not found).
    pub fn sees_project(&self, project: &ProjectId) -> bool {
        match self {
            Principal::Admin { .. } => true,
            Principal::Application { project: own, .. } | Principal::Device { project: own, .. } => own == project,
            Principal::User { role: Role::Admin, .. } => true,
            Principal::User { projects, .. } => projects.is_empty() || projects.contains(project),
        }
    }

    /// The projects whose records the caller's listings show.
    pub fn project_scope(&self) -> ProjectScope {
        match self {
            Principal::Admin { .. } | Principal::User { role: Role::Admin, .. } => ProjectScope::All,
            Principal::User { projects, .. } if projects.is_empty() => ProjectScope::All,
            Principal::User { projects, .. } => ProjectScope::Only(projects.clone()),
            Principal::Application { project, .. } | Principal::Device { project, .. } => {
                ProjectScope::Only(vec![project.clone()])
            }
        }
    }

    /// Whether reads show device `accessToken`s: not to a VIEWER.
    pub fn reads_device_tokens(&self) -> bool {
        self.role() != Some(Role::Viewer)
    }

    /// Whether reads show `applicationAccessToken`s and webhook secrets: not to an OPERATOR or
    /// a VIEWER, who may not manage them.
    pub fn reads_application_secrets(&self) -> bool {
        matches!(self.role(), None | Some(Role::Admin))
    }

    pub fn require_admin(&self) -> Result<&TenantId> {
        match self {
            Principal::Admin { tenant, .. }
            | Principal::User {
                tenant,
                role: Role::Admin,
                ..
            } => Ok(tenant),
            _ => Err(Error::forbidden("this operation needs a tenant administrator")),
        }
    }

    pub fn require_system(&self) -> Result<()> {
        match self {
            Principal::Admin { system: true, .. } => Ok(()),
            _ => Err(Error::forbidden("this operation needs the system administrator token")),
        }
    }

    /// Reading a project and its listings: administrators, the project's own applications and
    /// the users who see it. A user who does not see it gets `NotFound`.
    pub fn require_project(&self, project: &ProjectId) -> Result<()> {
        match self {
            Principal::Admin { .. } => Ok(()),
            Principal::Application { project: own, .. } if own == project => Ok(()),
            Principal::User { .. } if self.sees_project(project) => Ok(()),
            Principal::User { .. } => Err(Error::not_found("project", project)),
            _ => Err(Error::forbidden("this token does not grant access to that project")),
        }
    }

    /// Changing a project itself (its fields, its application token): administrators and the
    /// project's own applications; not an OPERATOR or a VIEWER.
    pub fn require_project_manage(&self, project: &ProjectId) -> Result<()> {
        self.require_project(project)?;
        match self.role() {
            Some(Role::Operator | Role::Viewer) => Err(Error::forbidden(
                "this user's role cannot change projects or their application tokens",
            )),
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

    /// Reading a device: administrators, its project's applications and users, and the device itself.
    pub fn require_device_read(&self, project: &ProjectId, device: &DeviceId) -> Result<()> {
        match self {
            Principal::Device { device: own, .. } if own == device => Ok(()),
            Principal::Device { .. } => Err(Error::forbidden("a device token grants access to its own device only")),
            Principal::User { .. } if !self.sees_project(project) => Err(Error::not_found("device", device)),
            _ => self.require_project(project),
        }
    }

    /// Writing data of a device (its events): as reading, but a Locked device's own token is
    /// refused, and a VIEWER writes nothing.
    pub fn require_device_write(&self, project: &ProjectId, device: &DeviceId) -> Result<()> {
        self.require_device_read(project, device)?;
        match self {
            Principal::Device { locked: true, .. } => Err(Error::forbidden("the device is Locked")),
            Principal::User { role: Role::Viewer, .. } => Err(viewer_refused()),
            _ => Ok(()),
        }
    }

    /// Managing a device (create, update, lock, delete, rotate its token) and its routes:
    /// administrators, its project's applications, and the project's ADMIN and OPERATOR users.
    pub fn require_device_manage(&self, project: &ProjectId) -> Result<()> {
        self.require_operate(project)
    }

    /// Sending a control (or a configuration message) to a device of the project.
    pub fn require_device_control(&self, project: &ProjectId) -> Result<()> {
        self.require_operate(project)
    }

    /// Acknowledging, commenting or clearing an alarm of the project.
    pub fn require_alarm_act(&self, project: &ProjectId) -> Result<()> {
        self.require_operate(project)
    }

    /// Setting desired attribute values of a device of the project.
    pub fn require_desired_set(&self, project: &ProjectId) -> Result<()> {
        self.require_operate(project)
    }

    /// Managing the project's webhooks: administrators and the project's applications; not an
    /// OPERATOR or a VIEWER.
    pub fn require_webhook_manage(&self, project: &ProjectId) -> Result<()> {
        match self {
            Principal::Device { .. } => Err(Error::forbidden("a device token cannot manage webhooks")),
            _ => self.require_project_manage(project),
        }
    }

    /// The operations of the OPERATOR role, on a project the caller sees.
    fn require_operate(&self, project: &ProjectId) -> Result<()> {
        match self {
            Principal::Device { .. } => Err(Error::forbidden("a device token cannot manage devices")),
            Principal::User { role: Role::Viewer, .. } => {
                self.require_project(project)?;
                Err(viewer_refused())
            }
            _ => self.require_project(project),
        }
    }
}

fn viewer_refused() -> Error {
    Error::forbidden("a VIEWER user may only read")
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
    /// Every session of a user.
    User(UserId),
}

impl TokenSubject {
    /// Whether `principal` is what a token of this subject stands for.
    pub fn owns(&self, principal: &Principal) -> bool {
        match (self, principal) {
            (TokenSubject::System, Principal::Admin { system, .. }) => *system,
            (TokenSubject::Admin(t), Principal::Admin { tenant, system }) => !system && tenant == t,
            (TokenSubject::Application(p), Principal::Application { project, .. }) => project == p,
            (TokenSubject::Device(d), Principal::Device { device, .. }) => device == d,
            (TokenSubject::User(u), Principal::User { user, .. }) => user == u,
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

    /// The role matrix, one row per operation: what ADMIN, OPERATOR and VIEWER users of one
    /// project may do on it (`Ok`), are refused (`Forbidden`) or do not see (`NotFound`).
    #[test]
    fn role_matrix() {
        let t = TenantId::default_tenant();
        let (mine, other) = (ProjectId::generate(), ProjectId::generate());
        let user = |role| Principal::User {
            tenant: t.clone(),
            user: UserId::generate(),
            name: "u".into(),
            role,
            projects: vec![mine.clone()],
        };
        let d = DeviceId::generate();
        type Check = fn(&Principal, &ProjectId, &DeviceId) -> Result<()>;
        let rows: [(&str, Check, [char; 3]); 8] = [
            ("read project", |w, p, _| w.require_project(p), ['y', 'y', 'y']),
            ("read device", |w, p, d| w.require_device_read(p, d), ['y', 'y', 'y']),
            ("manage device", |w, p, _| w.require_device_manage(p), ['y', 'y', 'n']),
            ("send control", |w, p, _| w.require_device_control(p), ['y', 'y', 'n']),
            ("act on alarm", |w, p, _| w.require_alarm_act(p), ['y', 'y', 'n']),
            ("set desired", |w, p, _| w.require_desired_set(p), ['y', 'y', 'n']),
            ("manage project", |w, p, _| w.require_project_manage(p), ['y', 'n', 'n']),
            (
                "manage webhooks",
                |w, p, _| w.require_webhook_manage(p),
                ['y', 'n', 'n'],
            ),
        ];
        for (op, check, expected) in rows {
            for (role, want) in [Role::Admin, Role::Operator, Role::Viewer].into_iter().zip(expected) {
                let who = user(role);
                let got = check(&who, &mine, &d);
                assert_eq!(got.is_ok(), want == 'y', "{op} as {role:?}: {got:?}");
                if want == 'n' {
                    assert!(matches!(got, Err(Error::Forbidden(_))), "{op} as {role:?}: {got:?}");
                }
                let elsewhere = check(&who, &other, &d);
                match role {
                    Role::Admin => assert_eq!(elsewhere.is_ok(), want == 'y', "{op} elsewhere as ADMIN"),
                    _ => assert!(
                        matches!(elsewhere, Err(Error::NotFound { .. })),
                        "{op} elsewhere as {role:?}"
                    ),
                }
            }
        }
        assert!(user(Role::Admin).require_admin().is_ok());
        assert!(user(Role::Operator).require_admin().is_err());
        assert!(user(Role::Admin).require_system().is_err());
        assert!(!user(Role::Viewer).reads_device_tokens());
        assert!(user(Role::Operator).reads_device_tokens());
        assert!(!user(Role::Operator).reads_application_secrets());
        assert_eq!(
            user(Role::Viewer).project_scope(),
            ProjectScope::Only(vec![mine.clone()])
        );
    }
}
