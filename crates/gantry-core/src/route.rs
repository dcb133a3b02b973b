//! Message routes: a route as stored, the grant it gives a connected caller, and the view the
//! API shows. A WEB or APP route's password is kept only as its hash and shown once, when the
//! route is created.

use serde::Serialize;

use crate::enums::SourceType;
use crate::ids::{DeviceId, ProjectId, TenantId};

/// The temporary MQTT identity of a WEB or APP route.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct TemporaryRole {
    pub host: String,
    /// The MQTT/TCP port for APP, the MQTT-over-WebSocket port for WEB.
    pub port: u16,
    pub ssl_enable: bool,
    pub client_id: String,
    pub username: String,
    /// Shown when the route is created, never again.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub password: Option<String>,
}

/// The topics of a route.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct MessageRoute {
    /// `<prefix>/out/json/<target device>`: where the caller publishes.
    pub forward_topic: String,
    /// `<prefix>/out/json/<caller>`: where the caller receives the device's acks.
    pub ack_topic: String,
}

/// A route (`Route`).
#[derive(Debug, Clone, PartialEq, Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct Route {
    /// `routePolicy:<uuid>`.
    pub id: String,
    /// MQTT.
    pub protocol: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub temporary_role: Option<TemporaryRole>,
    /// When the route expires, epoch milliseconds.
    pub expired_time: i64,
    pub route: MessageRoute,
    pub device_id: DeviceId,
    pub source_type: SourceType,
    pub need_resp: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub source_device_id: Option<DeviceId>,
    pub tenant_id: TenantId,
    pub created_by: String,
    pub created_time: i64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub updated_by: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub updated_time: Option<i64>,
    pub deleted: bool,
}

/// A route as stored.
#[derive(Debug, Clone, PartialEq)]
pub struct StoredRoute {
    pub id: String,
    pub tenant_id: TenantId,
    pub project_id: ProjectId,
    pub device_id: DeviceId,
    pub source_type: SourceType,
    pub source_device_id: Option<DeviceId>,
    pub need_resp: bool,
    /// WEB and APP: the temporary identity.
    pub client_id: Option<String>,
    pub username: Option<String>,
    pub password_hash: Option<String>,
    pub expired_time: i64,
    pub created_by: String,
    pub created_time: i64,
    pub updated_by: Option<String>,
    pub updated_time: Option<i64>,
}

/// What a connected route caller may do: publish to `target`'s inbox until `expires`.
#[derive(Debug, Clone, PartialEq)]
pub struct RouteGrant {
    pub route_id: String,
    pub tenant: TenantId,
    pub target: DeviceId,
    /// Whose inbox gets the target's acks, when the route wants responses.
    pub reply_to: Option<String>,
    pub expires: i64,
}

impl StoredRoute {
    /// What the route lets its caller do.
    pub fn grant(&self) -> RouteGrant {
        let caller = self
            .client_id
            .clone()
            .or_else(|| self.source_device_id.as_ref().map(|d| d.to_string()));
        RouteGrant {
            route_id: self.id.clone(),
            tenant: self.tenant_id.clone(),
            target: self.device_id.clone(),
            reply_to: if self.need_resp { caller } else { None },
            expires: self.expired_time,
        }
    }
}
