//! Message routes: short-lived MQTT identities (WEB, APP) or grants (DEVICE) that let a caller
//! talk to one device in real time, and what the broker asks of them. A grant is given only
//! while its route is live: not expired, not revoked, its target device there and not Locked.

use std::sync::Arc;
use std::time::Duration;

use crate::catalog::CatalogService;
use crate::control::ControlService;
use crate::downlink::Downlink;
use crate::enums::{DeviceStatus, SourceType};
use crate::fields::RouteFields;
use crate::ids::{DeviceId, TenantId};
use crate::message::Message;
use crate::paging::{Page, PageRequest};
use crate::principal::Principal;
use crate::route::{MessageRoute, Route, RouteGrant, StoredRoute, TemporaryRole};
use crate::store::Store;
use crate::time::now_ms;
use crate::token::{generate_token, hash_token};
use crate::{Error, Result};

/// Where route callers connect and what topics look like.
#[derive(Debug, Clone)]
pub struct RouteConfig {
    pub host: String,
    /// Where APP callers connect (MQTT over TCP or TLS); None when the server has no such
    /// listener, and APP routes are then refused.
    pub app: Option<RouteListener>,
    /// Where WEB callers connect (MQTT over WebSocket or secure WebSocket); None as for `app`.
    pub web: Option<RouteListener>,
    pub topic_prefix: String,
    pub ttl: Duration,
}

/// A listener temporary identities are told to use: `port` and `sslEnable`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RouteListener {
    pub port: u16,
    pub ssl_enable: bool,
}

pub struct RouteService {
    store: Arc<dyn Store>,
    catalog: Arc<CatalogService>,
    control: Arc<ControlService>,
    downlink: Arc<dyn Downlink>,
    config: RouteConfig,
}

impl RouteService {
    pub fn new(
        store: Arc<dyn Store>,
        catalog: Arc<CatalogService>,
        control: Arc<ControlService>,
        downlink: Arc<dyn Downlink>,
        config: RouteConfig,
    ) -> Self {
        Self {
            store,
            catalog,
            control,
            downlink,
            config,
        }
    }

    fn inbox(&self, owner: &str) -> String {
        format!("{}/out/json/{owner}", self.config.topic_prefix)
    }

    pub async fn create_route(&self, who: &Principal, device_id: &DeviceId, input: RouteFields) -> Result<Route> {
        let device = self.catalog.load_device(who.tenant(), device_id).await?;
        who.require_device_manage(&device.project_id)?;
        let source_type = input
            .source_type
            .ok_or_else(|| Error::invalid("sourceType", "is required (APP, WEB or DEVICE)"))?;
        if device.status == DeviceStatus::Locked {
            return Err(Error::Conflict(format!("device {} is Locked", device.id)));
        }
        let now = now_ms();
        let mut stored = StoredRoute {
            id: format!("routePolicy:{}", uuid::Uuid::new_v4()),
            tenant_id: device.record.tenant_id.clone(),
            project_id: device.project_id.clone(),
            device_id: device.id.clone(),
            source_type,
            source_device_id: None,
            need_resp: input.need_resp,
            client_id: None,
            username: None,
            password_hash: None,
            expired_time: now + self.config.ttl.as_millis() as i64,
            created_by: who.actor(),
            created_time: now,
            updated_by: None,
            updated_time: None,
        };
        let mut password = None;
        match source_type {
            SourceType::Device => {
                let source_id = input
                    .source_device_id
                    .ok_or_else(|| Error::invalid("sourceDeviceId", "is required when sourceType is DEVICE"))?;
                let key = input
                    .source_device_key
                    .ok_or_else(|| Error::invalid("sourceDeviceKey", "is required when sourceType is DEVICE"))?;
                if source_id == device.id {
                    return Err(Error::invalid("sourceDeviceId", "a device needs no route to itself"));
                }
                let source = self.catalog.load_device(who.tenant(), &source_id).await?;
                if key != source.access_token {
                    return Err(Error::forbidden("sourceDeviceKey is not the source device's key"));
                }
                stored.source_device_id = Some(source.id.clone());
            }
            SourceType::App | SourceType::Web => {
                // An identity with nowhere to connect is useless: refused, nothing stored.
                if self.listener(source_type).is_none() {
                    return Err(Error::invalid(
                        "sourceType",
                        format!("{source_type} routes are not offered: this server has no MQTT listener for them"),
                    ));
                }
                let client_id = format!("route-{}", uuid::Uuid::new_v4().simple());
                let secret = generate_token();
                stored.username = Some(client_id.clone());
                stored.password_hash = Some(hash_token(&secret));
                stored.client_id = Some(client_id);
                password = Some(secret);
            }
        }
        self.store.insert_route(&stored).await?;
        Ok(self.view(&stored, password))
    }

    /// Extends a route that has not expired by the route TTL.
    pub async fn refresh(&self, who: &Principal, route_id: &str) -> Result<Route> {
        let mut stored = self
            .store
            .get_route(who.tenant(), route_id)
            .await?
            .ok_or_else(|| Error::not_found("route", route_id))?;
        who.require_device_manage(&stored.project_id)?;
        let device = self.catalog.load_device(who.tenant(), &stored.device_id).await?;
        if device.status == DeviceStatus::Locked {
            return Err(Error::Conflict(format!("device {} is Locked", device.id)));
        }
        let now = now_ms();
        if stored.expired_time <= now {
            return Err(Error::Conflict("the route has expired; create a new one".to_owned()));
        }
        stored.expired_time += self.config.ttl.as_millis() as i64;
        stored.updated_by = Some(who.actor());
        stored.updated_time = Some(now);
        self.store.update_route(&stored).await?;
        Ok(self.view(&stored, None))
    }

    /// The device's live routes (not expired, not revoked), newest first, without passwords.
    pub async fn list(&self, who: &Principal, device_id: &DeviceId, page: PageRequest) -> Result<Page<Route>> {
        let device = self.catalog.load_device(who.tenant(), device_id).await?;
        if let Principal::Device { .. } = who {
            return Err(Error::forbidden("a device token cannot list routes"));
        }
        who.require_device_read(&device.project_id, &device.id)?;
        let page = self
            .store
            .list_device_routes(who.tenant(), device_id, now_ms(), page)
            .await?;
        Ok(page.map(|stored| self.view(&stored, None)))
    }

    /// Revokes a route: its temporary identity is disconnected and can no longer log in, and a
    /// DEVICE route no longer lets its source publish.
    pub async fn revoke(&self, who: &Principal, route_id: &str) -> Result<()> {
        let stored = self
            .store
            .get_route(who.tenant(), route_id)
            .await?
            .ok_or_else(|| Error::not_found("route", route_id))?;
        who.require_device_manage(&stored.project_id)?;
        let now = now_ms();
        self.store
            .revoke_route(who.tenant(), route_id, &who.actor(), now)
            .await?;
        if let Some(client_id) = &stored.client_id {
            self.downlink.expire_session(client_id, now).await;
        }
        Ok(())
    }

    /// Whether a route's target may be reached: it exists and is not Locked.
    async fn target_open(&self, stored: &StoredRoute) -> Result<bool> {
        match self.catalog.load_device(&stored.tenant_id, &stored.device_id).await {
            Ok(device) => Ok(device.status != DeviceStatus::Locked),
            Err(Error::NotFound { .. }) => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// The grant of a stored route that is live at `now`: not expired, its target open.
    async fn live_grant(&self, stored: Option<StoredRoute>) -> Result<Option<RouteGrant>> {
        match stored {
            Some(s) if s.expired_time > now_ms() && self.target_open(&s).await? => Ok(Some(s.grant())),
            _ => Ok(None),
        }
    }

    /// The listener of WEB or APP callers, when the server has one.
    fn listener(&self, source_type: SourceType) -> Option<RouteListener> {
        match source_type {
            SourceType::Web => self.config.web,
            _ => self.config.app,
        }
    }

    fn view(&self, stored: &StoredRoute, password: Option<String>) -> Route {
        let caller = stored
            .client_id
            .clone()
            .or_else(|| stored.source_device_id.as_ref().map(|d| d.to_string()))
            .unwrap_or_default();
        // Port 0: a route made before its listener was turned off has none to use now.
        let listener = self.listener(stored.source_type).unwrap_or(RouteListener {
            port: 0,
            ssl_enable: false,
        });
        let temporary_role = stored.client_id.as_ref().map(|client_id| TemporaryRole {
            host: self.config.host.clone(),
            port: listener.port,
            ssl_enable: listener.ssl_enable,
            client_id: client_id.clone(),
            username: stored.username.clone().unwrap_or_default(),
            password,
        });
        Route {
            id: stored.id.clone(),
            protocol: "MQTT".to_owned(),
            temporary_role,
            expired_time: stored.expired_time,
            route: MessageRoute {
                forward_topic: self.inbox(stored.device_id.as_str()),
                ack_topic: self.inbox(&caller),
            },
            device_id: stored.device_id.clone(),
            source_type: stored.source_type,
            need_resp: stored.need_resp,
            source_device_id: stored.source_device_id.clone(),
            tenant_id: stored.tenant_id.clone(),
            created_by: stored.created_by.clone(),
            created_time: stored.created_time,
            updated_by: stored.updated_by.clone(),
            updated_time: stored.updated_time,
            deleted: false,
        }
    }

    /// The grant of a WEB or APP identity logging in, if the credentials are right, the route
    /// was not revoked and has not expired, and its target exists and is not Locked.
    pub async fn login(&self, client_id: &str, username: &str, password: &str) -> Result<Option<RouteGrant>> {
        let stored = self.store.route_by_client(client_id).await?.filter(|stored| {
            stored.username.as_deref() == Some(username)
                && stored.password_hash.as_deref() == Some(hash_token(password).as_str())
        });
        self.live_grant(stored).await
    }

    /// The live grant of a WEB or APP identity known by its client id alone (an external broker
    /// asking whether a client it authenticated may use a topic).
    pub async fn grant_of_client(&self, client_id: &str) -> Result<Option<RouteGrant>> {
        let stored = self.store.route_by_client(client_id).await?;
        self.live_grant(stored).await
    }

    /// The current grant of a route refreshed or not, if it is still live: for callers already
    /// connected.
    pub async fn current(&self, grant: &RouteGrant) -> Result<Option<RouteGrant>> {
        let stored = self.store.get_route(&grant.tenant, &grant.route_id).await?;
        self.live_grant(stored).await
    }

    /// A live DEVICE route from `source` to `target`, if there is one.
    pub async fn device_grant(&self, tenant: &TenantId, source: &DeviceId, target: &str) -> Result<Option<RouteGrant>> {
        let stored = self
            .store
            .device_route(tenant, source, &DeviceId::from_string(target), now_ms())
            .await?;
        Ok(stored.map(|s| s.grant()))
    }

    /// A message sent along a route to its target: it must be a Message, the target must not
    /// be Locked; it is recorded as an event log whose ack goes back to the caller.
    pub async fn relay(&self, grant: &RouteGrant, caller: &str, bytes: &[u8]) -> Result<()> {
        let message = Message::from_device(bytes)?;
        let device = self.catalog.load_device(&grant.tenant, &grant.target).await?;
        if device.status == DeviceStatus::Locked {
            return Err(Error::Conflict(format!("device {} is Locked", device.id)));
        }
        self.control
            .record_relayed(&device, &message, caller, grant.reply_to.clone())
            .await
    }
}
