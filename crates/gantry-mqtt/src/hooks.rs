//! The broker's hooks: device login against the store, the topic ACL, and upstream ingest.

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::{Arc, RwLock};

use async_trait::async_trait;
use gantry_core::Services;
use gantry_core::auth::Principal;
use gantry_core::control::Downlink;
use gantry_core::ids::{DeviceId, TenantId};
use rmqtt::codec::v5::SubscribeAckReason;
use rmqtt::hook::{Handler, HookResult, Parameter, ReturnType};
use rmqtt::types::{AuthResult, ConnectInfo, Publish, PublishAclResult, SubscribeAclResult};

use crate::broker::MqttStats;
use crate::topics::Topics;

#[derive(Clone)]
pub(crate) struct GantryHooks {
    services: Arc<Services>,
    topics: Topics,
    downlink: Arc<dyn Downlink>,
    stats: Arc<MqttStats>,
    /// The tenant of each device that logged in: the ACL hooks see only the client id.
    tenants: Arc<RwLock<HashMap<String, TenantId>>>,
}

impl GantryHooks {
    pub(crate) fn new(
        services: Arc<Services>,
        topics: Topics,
        downlink: Arc<dyn Downlink>,
        stats: Arc<MqttStats>,
    ) -> Self {
        Self {
            services,
            topics,
            downlink,
            stats,
            tenants: Default::default(),
        }
    }

    /// Client id = username = device id, password = the device's access token; a Locked device
    /// is refused.
    async fn authenticate(&self, info: &ConnectInfo) -> AuthResult {
        let client_id = info.client_id().to_string();
        let username = info.username().map(|u| u.to_string());
        let token = info
            .password()
            .and_then(|p| std::str::from_utf8(p).ok())
            .unwrap_or_default();
        let result = match self.services.auth.authenticate(token).await {
            Ok(Principal::Device {
                tenant, device, locked, ..
            }) if device.as_str() == client_id && username.as_deref() == Some(client_id.as_str()) => {
                if locked {
                    AuthResult::NotAuthorized
                } else {
                    self.tenants
                        .write()
                        .expect("tenants lock")
                        .insert(client_id.clone(), tenant);
                    AuthResult::Allow(false, None)
                }
            }
            Ok(_) | Err(gantry_core::Error::Unauthorized) => AuthResult::BadUsernameOrPassword,
            Err(e) => {
                tracing::error!(error = %e, "device login failed on the store");
                AuthResult::NotAuthorized
            }
        };
        if !matches!(result, AuthResult::Allow(..)) {
            self.stats.logins_refused.fetch_add(1, Ordering::Relaxed);
            tracing::info!(client_id, "MQTT login refused");
        }
        result
    }

    /// A device publishes only to its own upstream topic. What it publishes there is ingested
    /// before the publish is acknowledged, so a QoS 1 PUBACK means the events are durable.
    async fn check_publish(&self, client_id: &str, publish: &Publish) -> PublishAclResult {
        if !self.topics.is_upstream_of(&publish.topic, client_id) {
            self.stats.acls_denied.fetch_add(1, Ordering::Relaxed);
            tracing::info!(client_id, topic = %publish.topic, "publish refused by the ACL");
            return PublishAclResult::rejected(false, None);
        }
        let Some(tenant) = self.tenants.read().expect("tenants lock").get(client_id).cloned() else {
            return PublishAclResult::rejected(true, None);
        };
        self.stats.messages_in.fetch_add(1, Ordering::Relaxed);
        let device = DeviceId::from_string(client_id);
        match self
            .services
            .telemetry
            .handle_upstream(&tenant, &device, &publish.payload)
            .await
        {
            Ok(outcome) => {
                self.stats
                    .events_stored
                    .fetch_add(outcome.stored as u64, Ordering::Relaxed);
                if !outcome.refused.is_empty() {
                    self.stats
                        .entries_refused
                        .fetch_add(outcome.refused.len() as u64, Ordering::Relaxed);
                    tracing::info!(client_id, refused = ?outcome.refused, "upstream entries refused");
                }
                if let Some(reply) = outcome.reply
                    && let Err(e) = self.downlink.send(&device, &reply).await
                {
                    tracing::warn!(client_id, error = %e, "could not send the ack");
                }
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

    /// A device subscribes only to its own inbox.
    fn check_subscribe(&self, client_id: &str, filter: &str, qos: rmqtt::codec::types::QoS) -> SubscribeAclResult {
        if self.topics.is_inbox_of(filter, client_id) {
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
