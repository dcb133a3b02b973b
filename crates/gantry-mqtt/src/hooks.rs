//! The broker's hooks: device login against the store, the topic ACL, and upstream ingest.

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::{Arc, RwLock, Weak};

use async_trait::async_trait;
use gantry_core::Services;
use gantry_core::auth::Principal;
use gantry_core::control::Downlink;
use gantry_core::ids::{DeviceId, TenantId};
use gantry_core::routes::RouteGrant;
use rmqtt::codec::v5::SubscribeAckReason;
use rmqtt::hook::{Handler, HookResult, Parameter, ReturnType};
use rmqtt::types::{AuthResult, ConnectInfo, Publish, PublishAclResult, SubscribeAclResult};

use crate::broker::MqttStats;
use crate::topics::Topics;

#[derive(Clone)]
pub(crate) struct GantryHooks {
    /// Weak: the broker's context outlives the application in rmqtt's background work, and a
    /// strong reference from it would keep the services (and their database pool) alive.
    services: Weak<Services>,
    topics: Topics,
    downlink: Arc<dyn Downlink>,
    stats: Arc<MqttStats>,
    /// Who each client that logged in is: the ACL hooks see only the client id.
    identities: Arc<RwLock<HashMap<String, Identity>>>,
}

/// A logged-in client: a device, or the temporary identity of a WEB or APP route.
#[derive(Clone)]
enum Identity {
    Device(TenantId),
    Route(RouteGrant),
}

impl GantryHooks {
    pub(crate) fn new(
        services: Arc<Services>,
        topics: Topics,
        downlink: Arc<dyn Downlink>,
        stats: Arc<MqttStats>,
    ) -> Self {
        Self {
            services: Arc::downgrade(&services),
            topics,
            downlink,
            stats,
            identities: Default::default(),
        }
    }

    /// A device: client id = username = device id, password = its access token, not Locked.
    /// A route's temporary identity: its client id, username and password, before expiry.
    async fn authenticate(&self, info: &ConnectInfo) -> AuthResult {
        let Some(services) = self.services.upgrade() else {
            return AuthResult::NotAuthorized;
        };
        let client_id = info.client_id().to_string();
        let username = info.username().map(|u| u.to_string()).unwrap_or_default();
        let token = info
            .password()
            .and_then(|p| std::str::from_utf8(p).ok())
            .unwrap_or_default();
        let identity = match services.auth.authenticate(token).await {
            Ok(Principal::Device {
                tenant, device, locked, ..
            }) if device.as_str() == client_id && username == client_id => {
                if locked {
                    Err(AuthResult::NotAuthorized)
                } else {
                    Ok(Identity::Device(tenant))
                }
            }
            Ok(_) | Err(gantry_core::Error::Unauthorized) => {
                match services.routes.login(&client_id, &username, token).await {
                    Ok(Some(grant)) => Ok(Identity::Route(grant)),
                    Ok(None) => Err(AuthResult::BadUsernameOrPassword),
                    Err(e) => {
                        tracing::error!(error = %e, "route login failed on the store");
                        Err(AuthResult::NotAuthorized)
                    }
                }
            }
            Err(e) => {
                tracing::error!(error = %e, "device login failed on the store");
                Err(AuthResult::NotAuthorized)
            }
        };
        match identity {
            Ok(identity) => {
                self.identities
                    .write()
                    .expect("identities lock")
                    .insert(client_id, identity);
                AuthResult::Allow(false, None)
            }
            Err(refusal) => {
                self.stats.logins_refused.fetch_add(1, Ordering::Relaxed);
                tracing::info!(client_id, "MQTT login refused");
                refusal
            }
        }
    }

    /// A device publishes to its own upstream topic, and to the inbox of a device it holds a
    /// live DEVICE route to; a route's identity only to its target's inbox.
    async fn check_publish(&self, client_id: &str, publish: &Publish) -> PublishAclResult {
        let Some(services) = self.services.upgrade() else {
            return PublishAclResult::rejected(true, None);
        };
        let identity = self.identities.read().expect("identities lock").get(client_id).cloned();
        let topic = &publish.topic;
        match identity {
            None => PublishAclResult::rejected(true, None),
            Some(Identity::Device(tenant)) if self.topics.is_upstream_of(topic, client_id) => {
                self.ingest(client_id, tenant, publish).await
            }
            Some(Identity::Device(tenant)) => {
                let grant = match self.topics.inbox_owner(topic) {
                    Some(target) => {
                        services
                            .routes
                            .device_grant(&tenant, &DeviceId::from_string(client_id), target)
                            .await
                    }
                    None => Ok(None),
                };
                match grant {
                    Ok(Some(grant)) => self.relay(client_id, &grant, publish).await,
                    _ => self.deny(client_id, topic),
                }
            }
            Some(Identity::Route(grant)) => match services.routes.current(&grant).await {
                Ok(Some(grant)) if self.topics.is_inbox_of(topic, grant.target.as_str()) => {
                    self.relay(client_id, &grant, publish).await
                }
                Ok(Some(_)) => self.deny(client_id, topic),
                Ok(None) => {
                    tracing::info!(client_id, "route expired; disconnecting its identity");
                    PublishAclResult::rejected(true, None)
                }
                Err(e) => {
                    tracing::warn!(client_id, error = %e, "route lookup failed");
                    PublishAclResult::rejected(false, None)
                }
            },
        }
    }

    fn deny(&self, client_id: &str, topic: &str) -> PublishAclResult {
        self.stats.acls_denied.fetch_add(1, Ordering::Relaxed);
        tracing::info!(client_id, topic, "publish refused by the ACL");
        PublishAclResult::rejected(false, None)
    }

    /// A message along a route: recorded as an event log, then delivered by the broker.
    async fn relay(&self, client_id: &str, grant: &RouteGrant, publish: &Publish) -> PublishAclResult {
        let Some(services) = self.services.upgrade() else {
            return PublishAclResult::rejected(false, None);
        };
        match services.routes.relay(grant, client_id, &publish.payload).await {
            Ok(()) => PublishAclResult::allow(),
            Err(e) => {
                self.stats.entries_refused.fetch_add(1, Ordering::Relaxed);
                tracing::info!(client_id, error = %e, "routed message refused");
                PublishAclResult::rejected(false, None)
            }
        }
    }

    /// What a device publishes to its upstream topic is ingested before the publish is
    /// acknowledged, so a QoS 1 PUBACK means the events are durable.
    async fn ingest(&self, client_id: &str, tenant: TenantId, publish: &Publish) -> PublishAclResult {
        let Some(services) = self.services.upgrade() else {
            return PublishAclResult::rejected(true, None);
        };
        self.stats.messages_in.fetch_add(1, Ordering::Relaxed);
        let device = DeviceId::from_string(client_id);
        match services
            .telemetry
            .handle_upstream(&tenant, &device, &publish.payload)
            .await
        {
            Ok(outcome) => {
                self.stats.settle(self.downlink.as_ref(), client_id, outcome).await;
                PublishAclResult::allow()
            }
            Err(e) => {
                // Not acknowledged: disconnecting makes the device send its QoS 1 message again.
                self.stats.ingest_failures.fetch_add(1, Ordering::Relaxed);
                tracing::warn!(client_id, error = %e, "upstream message not stored; disconnecting the device");
                PublishAclResult::rejected(true, None)
            }
        }
    }

    /// A device subscribes only to its own inbox, a route's identity only to its ack topic
    /// (its own inbox too).
    fn check_subscribe(&self, client_id: &str, filter: &str, qos: rmqtt::codec::types::QoS) -> SubscribeAclResult {
        let known = self.identities.read().expect("identities lock").contains_key(client_id);
        if known && self.topics.is_inbox_of(filter, client_id) {
            SubscribeAclResult::new_success(qos, None)
        } else {
            self.stats.acls_denied.fetch_add(1, Ordering::Relaxed);
            tracing::info!(client_id, filter, "subscription refused by the ACL");
            SubscribeAclResult::new_failure(SubscribeAckReason::NotAuthorized)
        }
    }
}

#[async_trait]
impl Handler for GantryHooks {
    async fn hook(&self, param: &Parameter, acc: Option<HookResult>) -> ReturnType {
        match param {
            Parameter::ClientAuthenticate(info) => (false, Some(HookResult::AuthResult(self.authenticate(info).await))),
            Parameter::ClientSubscribeCheckAcl(session, subscribe) => {
                let result = self.check_subscribe(&session.id.client_id, &subscribe.topic_filter, subscribe.opts.qos());
                (false, Some(HookResult::SubscribeAclResult(result)))
            }
            Parameter::MessagePublishCheckAcl(session, publish) => (
                false,
                Some(HookResult::PublishAclResult(
                    self.check_publish(&session.id.client_id, publish).await,
                )),
            ),
            _ => (true, acc),
        }
    }
}
