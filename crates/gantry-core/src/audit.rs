//! The audit log's records: who changed what, when, from where, and how it ended. A record
//! names the fields an update changed, never their values, so it holds no secret.

use std::sync::atomic::{AtomicBool, Ordering};

use serde::{Deserialize, Serialize};

use crate::ids::TenantId;
use crate::principal::Principal;

/// What kind of caller made a change.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum PrincipalType {
    /// A person signed in with a user account (or trying to).
    User,
    /// A tenant's administrator token, the system administrator's included.
    TenantToken,
    /// A project's `applicationAccessToken`.
    ApplicationToken,
    /// A device's `accessToken`.
    Device,
    /// Gantry itself.
    System,
}

impl PrincipalType {
    pub fn as_str(self) -> &'static str {
        match self {
            PrincipalType::User => "USER",
            PrincipalType::TenantToken => "TENANT_TOKEN",
            PrincipalType::ApplicationToken => "APPLICATION_TOKEN",
            PrincipalType::Device => "DEVICE",
            PrincipalType::System => "SYSTEM",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        [
            PrincipalType::User,
            PrincipalType::TenantToken,
            PrincipalType::ApplicationToken,
            PrincipalType::Device,
            PrincipalType::System,
        ]
        .into_iter()
        .find(|t| t.as_str() == s)
    }
}

/// How a change ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "UPPERCASE")]
pub enum AuditOutcome {
    Success,
    Failure,
}

impl AuditOutcome {
    pub fn as_str(self) -> &'static str {
        match self {
            AuditOutcome::Success => "SUCCESS",
            AuditOutcome::Failure => "FAILURE",
        }
    }
}

/// Who did something, as the audit log names it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Actor {
    pub tenant: TenantId,
    pub kind: PrincipalType,
    pub id: String,
    pub name: String,
}

impl Actor {
    /// The caller behind a principal: its kind, id and a name a person recognises.
    pub fn of(principal: &Principal) -> Self {
        let (kind, id, name) = match principal {
            Principal::Admin { tenant, system } => (
                PrincipalType::TenantToken,
                tenant.to_string(),
                if *system {
                    "system administrator"
                } else {
                    "tenant administrator"
                }
                .to_owned(),
            ),
            Principal::Application { project, .. } => (
                PrincipalType::ApplicationToken,
                project.to_string(),
                format!("application:{project}"),
            ),
            Principal::Device { device, .. } => (PrincipalType::Device, device.to_string(), device.to_string()),
            Principal::User { user, name, .. } => (PrincipalType::User, user.to_string(), name.clone()),
        };
        Actor {
            tenant: principal.tenant().clone(),
            kind,
            id,
            name,
        }
    }
}

/// What a change did, as the caller of `AuditService::record` describes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuditChange {
    /// `device`, `project`, `user`, `route`, ...: the resource's name in the API's paths.
    pub resource_type: String,
    pub resource_id: Option<String>,
    /// `create`, `update`, `delete`, `lock`, `control`, `login`, ...
    pub action: String,
    /// For updates: the names of the fields the request set (never their values).
    pub changed_fields: Vec<String>,
    pub client_address: Option<String>,
    pub outcome: AuditOutcome,
    /// The HTTP status the caller got, when the change came through the API.
    pub status: Option<u16>,
}

/// One record of the audit log.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct AuditRecord {
    pub id: String,
    pub tenant_id: TenantId,
    /// Epoch milliseconds.
    pub time: i64,
    pub principal_type: PrincipalType,
    pub principal_id: String,
    pub principal_name: String,
    pub resource_type: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub resource_id: Option<String>,
    pub action: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub client_address: Option<String>,
    pub outcome: AuditOutcome,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub status: Option<u16>,
    pub changed_fields: Vec<String>,
}

impl AuditRecord {
    /// The record of `change` made by `actor`, now.
    pub fn of(actor: &Actor, change: AuditChange) -> Self {
        AuditRecord {
            id: uuid::Uuid::now_v7().to_string(),
            tenant_id: actor.tenant.clone(),
            time: crate::time::now_ms(),
            principal_type: actor.kind,
            principal_id: actor.id.clone(),
            principal_name: actor.name.clone(),
            resource_type: change.resource_type,
            resource_id: change.resource_id,
            action: change.action,
            client_address: change.client_address,
            outcome: change.outcome,
            status: change.status,
            changed_fields: change.changed_fields,
        }
    }
}

/// The record of a change as it reads when the change succeeds, offered to the service that
/// makes it, to commit in the change's own transaction (a control's, with its event log). The
/// service says when it did; whoever records changes otherwise (the API's audit layer) then
/// writes no record of its own.
#[derive(Debug)]
pub struct PendingAudit {
    change: AuditChange,
    committed: AtomicBool,
}

impl PendingAudit {
    pub fn new(change: AuditChange) -> Self {
        PendingAudit {
            change,
            committed: AtomicBool::new(false),
        }
    }

    /// The record to commit, of the change made by `who`, now.
    pub fn record_for(&self, who: &Principal) -> AuditRecord {
        AuditRecord::of(&Actor::of(who), self.change.clone())
    }

    /// Says the record was committed with the change.
    pub fn set_committed(&self) {
        self.committed.store(true, Ordering::Release);
    }

    pub fn is_committed(&self) -> bool {
        self.committed.load(Ordering::Acquire)
    }
}

/// Filters of an audit log listing; times are epoch ms, both ends inclusive.
#[derive(Debug, Clone, Default)]
pub struct AuditQuery {
    pub principal_id: Option<String>,
    pub resource_type: Option<String>,
    pub resource_id: Option<String>,
    pub action: Option<String>,
    pub start: Option<i64>,
    pub end: Option<i64>,
}
