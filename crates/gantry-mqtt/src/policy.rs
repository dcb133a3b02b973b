//! Who may connect and which topics they may use. The embedded broker's hooks apply these
//! rules, and so does the HTTP authentication an external broker (EMQX) calls in scale-out mode.

use std::sync::{Arc, Weak};

use gantry_core::Services;
use gantry_core::ids::{DeviceId, TenantId};
use gantry_core::principal::{Principal, TokenOwner};
use gantry_core::route::RouteGrant;

use crate::topics::Topics;

/// A client that logged in: a device, or the temporary identity of a WEB or APP route.
/// The broker keeps one per connected client, most of them devices: the grant is boxed so that
/// a device's takes 32 bytes instead of the grant's 104.
#[derive(Debug, Clone)]
pub enum Identity {
    Device(TenantId),
    Route(Box<RouteGrant>),
}

/// A login that succeeded: who the client is, and when its credential ends (epoch ms), if it
/// does: a route identity's route expiry, a replaced device token's end of grace.
#[derive(Debug, Clone)]
pub struct Login {
    pub identity: Identity,
    pub until: Option<i64>,
}

/// Why a login is refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LoginRefusal {
    BadCredentials,
    NotAuthorized,
}

/// What a permitted publish is.
#[derive(Debug, Clone)]
pub enum Publishing {
    /// A device's own upstream message: ingest it.
    Upstream(TenantId),
    /// A message along a route to its target: record it and let it through.
    Relay(RouteGrant),
}

#[derive(Clone)]
pub struct Policy {
    /// Weak: rmqtt's background work keeps the broker context (and so this) alive after the
    /// application is gone; a strong reference would keep the services and their pool alive.
    services: Weak<Services>,
    topics: Topics,
}

impl Policy {
    pub fn new(services: &Arc<Services>, topics: Topics) -> Self {
        Self {
            services: Arc::downgrade(services),
            topics,
        }
    }

    pub fn services(&self) -> Option<Arc<Services>> {
        self.services.upgrade()
    }

    /// A device: client id = username = device id, password = its access token, not Locked.
    /// A route's identity: its client id, username and password, before expiry, while its
    /// target device exists and is not Locked.
    /// A device with a verified client certificate whose CN (`cert_cn`) is its client id needs
    /// no password; a certificate naming another client grants nothing.
    pub async fn login(
        &self,
        client_id: &str,
        username: &str,
        password: &str,
        cert_cn: Option<&str>,
    ) -> Result<Login, LoginRefusal> {
        let services = self.services().ok_or(LoginRefusal::NotAuthorized)?;
        if cert_cn == Some(client_id) {
            match services.auth.device(&DeviceId::from_string(client_id)).await {
                Ok(Some(Principal::Device { locked: true, .. })) => return Err(LoginRefusal::NotAuthorized),
                Ok(Some(Principal::Device { tenant, .. })) => {
                    return Ok(Login {
                        identity: Identity::Device(tenant),
                        until: None,
                    });
                }
                Ok(_) => {}
                Err(e) => {
                    tracing::error!(error = %e, "certificate login failed on the store");
                    return Err(LoginRefusal::NotAuthorized);
                }
            }
        }
        match services.auth.authenticate_until(password).await {
            Ok(TokenOwner {
                principal: Principal::Device {
                    tenant, device, locked, ..
                },
                expires,
            }) if device.as_str() == client_id && username == client_id => {
                if locked {
                    Err(LoginRefusal::NotAuthorized)
                } else {
                    Ok(Login {
                        identity: Identity::Device(tenant),
                        until: expires,
                    })
                }
            }
            Ok(_) | Err(gantry_core::Error::Unauthorized) => {
                match services.routes.login(client_id, username, password).await {
                    Ok(Some(grant)) => Ok(Login {
                        until: Some(grant.expires),
                        identity: Identity::Route(Box::new(grant)),
                    }),
                    Ok(None) => Err(LoginRefusal::BadCredentials),
                    Err(e) => {
                        tracing::error!(error = %e, "route login failed on the store");
                        Err(LoginRefusal::NotAuthorized)
                    }
                }
            }
            Err(e) => {
                tracing::error!(error = %e, "device login failed on the store");
                Err(LoginRefusal::NotAuthorized)
            }
        }
    }

    /// The identity of a client known by its id alone (a device, or a live route identity).
    pub async fn identify(&self, client_id: &str) -> Option<Identity> {
        let services = self.services()?;
        if let Ok(Some(tenant)) = services
            .telemetry
            .device_tenant(&DeviceId::from_string(client_id))
            .await
        {
            return Some(Identity::Device(tenant));
        }
        services
            .routes
            .grant_of_client(client_id)
            .await
            .ok()
            .flatten()
            .map(|grant| Identity::Route(Box::new(grant)))
    }

    /// Whether `client_id` may publish to `topic`, and what the publish is: a device to its own
    /// upstream topic or, along a live DEVICE route, to its target's inbox; a route's identity
    /// to its target's inbox while the route lives.
    pub async fn may_publish(&self, identity: &Identity, client_id: &str, topic: &str) -> Option<Publishing> {
        let services = self.services()?;
        match identity {
            Identity::Device(tenant) if self.topics.is_upstream_of(topic, client_id) => {
                Some(Publishing::Upstream(tenant.clone()))
            }
            Identity::Device(tenant) => {
                let target = self.topics.inbox_owner(topic)?;
                let grant = services
                    .routes
                    .device_grant(tenant, &DeviceId::from_string(client_id), target)
                    .await
                    .ok()??;
                Some(Publishing::Relay(grant))
            }
            Identity::Route(grant) => {
                let grant = services.routes.current(grant).await.ok()??;
                self.topics
                    .is_inbox_of(topic, grant.target.as_str())
                    .then_some(Publishing::Relay(grant))
            }
        }
    }

    /// Whether `topic` is one of Gantry's (an upstream topic or an inbox), whoever owns it.
    pub fn is_gantry_topic(&self, topic: &str) -> bool {
        self.topics.upstream_owner(topic).is_some() || self.topics.inbox_owner(topic).is_some()
    }

    /// A client subscribes only to its own inbox (a route's ack topic is its identity's inbox).
    pub fn may_subscribe(&self, client_id: &str, filter: &str) -> bool {
        self.topics.is_inbox_of(filter, client_id)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The broker holds an identity per connected client (19,000 in gantry-bench's connections
    /// scenario): a device's must not pay for a route's grant.
    #[test]
    fn a_device_identity_is_no_larger_than_its_tenant() {
        assert!(
            std::mem::size_of::<Identity>() <= std::mem::size_of::<TenantId>() + 8,
            "Identity is {} bytes",
            std::mem::size_of::<Identity>()
        );
    }
}
