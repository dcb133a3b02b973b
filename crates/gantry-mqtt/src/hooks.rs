//! The embedded broker's hooks: logins and the topic ACL by the policy, upstream ingest and
//! routed messages on their way through.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use async_trait::async_trait;
use gantry_core::connection::{SessionEnd, SessionStart};
use gantry_core::downlink::Downlink;
use gantry_core::ids::{DeviceId, TenantId};
use gantry_core::route::RouteGrant;
use gantry_core::telemetry::Rejection;
use rmqtt::codec::v5::{DisconnectReasonCode, PublishAckReason, SubscribeAckReason};
use rmqtt::hook::{Handler, HookResult, Parameter, ReturnType};
use rmqtt::session::Session;
use rmqtt::types::{
    AuthResult, ConnectInfo, LastWill, Publish, PublishAclResult, PublishResult, Reason, SubscribeAclResult,
};
use tracing::instrument;

use crate::connections::{self, Kind, Transports};
use crate::policy::{Login, LoginRefusal, Policy, Publishing};
use crate::rate::PublishRate;
use crate::sessions::Sessions;
use crate::stats::MqttStats;
use crate::tasks::BrokerTasks;
use crate::upstream::{UpstreamAnswer, UpstreamPath, UpstreamSender};

#[derive(Clone)]
pub(crate) struct GantryHooks {
    policy: Policy,
    upstream: UpstreamPath,
    stats: Arc<MqttStats>,
    sessions: Arc<Sessions>,
    publish_rate: Arc<PublishRate>,
    transports: Transports,
    /// Where the work a connect starts goes, and what counts a message in flight.
    tasks: BrokerTasks,
}

impl GantryHooks {
    pub(crate) fn new(
        policy: Policy,
        downlink: Arc<dyn Downlink>,
        stats: Arc<MqttStats>,
        sessions: Arc<Sessions>,
        publishes_per_second: u32,
        transports: Transports,
        tasks: BrokerTasks,
    ) -> Self {
        Self {
            policy,
            upstream: UpstreamPath::new(downlink, stats.clone()),
            stats,
            sessions,
            publish_rate: Arc::new(PublishRate::new(publishes_per_second)),
            transports,
            tasks,
        }
    }

    /// Per connection, at info: the span of a login, with the client id and address.
    #[instrument(
        name = "mqtt_login",
        skip_all,
        fields(client_id = %info.client_id(), address = %info.id().remote_addr.map(|a| a.ip().to_string()).unwrap_or_default())
    )]
    async fn authenticate(&self, info: &ConnectInfo) -> AuthResult {
        let client_id = info.client_id().to_string();
        let username = info.username().map(|u| u.to_string()).unwrap_or_default();
        let password = info
            .password()
            .and_then(|p| std::str::from_utf8(p).ok())
            .unwrap_or_default();
        let peer = info.id().remote_addr.map(|a| a.ip());
        let guard = self.policy.services().map(|s| s.login_guard.clone());
        // Counted before the check, so concurrent attempts cannot outrun the ban.
        let attempt = match (peer, &guard) {
            (Some(ip), Some(guard)) => match guard.attempt(ip).await {
                Some(attempt) => Some(attempt),
                None => {
                    // No line per attempt: a flood from a banned address would fill the log.
                    self.stats.logins_refused.fetch_add(1, Ordering::Relaxed);
                    return AuthResult::NotAuthorized;
                }
            },
            _ => None,
        };
        // Present only for a certificate the MQTT/TLS listener verified against --mqtt-client-ca.
        let cert_cn = info.cert().and_then(|cert| cert.common_name.as_deref());
        let login = match self.policy.login(&client_id, &username, password, cert_cn).await {
            Ok(login) => self.check_will(info, &client_id, login).await,
            refused => refused,
        };
        match login {
            Ok(login) => {
                if let Some(attempt) = attempt {
                    attempt.succeeded();
                }
                self.publish_rate.reset(&client_id);
                self.sessions.logged_in(client_id, login, info.id().create_time);
                AuthResult::Allow(false, None)
            }
            Err(refusal) => {
                self.stats.logins_refused.fetch_add(1, Ordering::Relaxed);
                let address = peer.map(|ip| ip.to_string()).unwrap_or_default();
                let why = match refusal {
                    LoginRefusal::BadCredentials => "unknown client or wrong password",
                    LoginRefusal::NotAuthorized => "not authorized (Locked, or a Last Will the ACL refuses)",
                };
                tracing::info!(client_id, address, reason = why, "MQTT login refused");
                if let Some(attempt) = attempt
                    && attempt.failed()
                {
                    tracing::warn!(address, "too many failed logins: address banned");
                }
                match refusal {
                    LoginRefusal::BadCredentials => AuthResult::BadUsernameOrPassword,
                    LoginRefusal::NotAuthorized => AuthResult::NotAuthorized,
                }
            }
        }
    }

    /// A Last Will is a publish made on the client's behalf when it drops, so its topic must
    /// pass the publish ACL now (else the CONNECT is refused) and again when it is sent (the
    /// broker runs the ACL hook then). Nothing is retained here, so a will asking for it is refused.
    async fn check_will(&self, info: &ConnectInfo, client_id: &str, login: Login) -> Result<Login, LoginRefusal> {
        let Some(will) = info.last_will() else {
            return Ok(login);
        };
        let topic = match will {
            LastWill::V3(w) => &w.topic,
            LastWill::V5(w) => &w.topic,
        };
        if will.retain()
            || self
                .policy
                .may_publish(&login.identity, client_id, topic)
                .await
                .is_none()
        {
            self.stats.acls_denied.fetch_add(1, Ordering::Relaxed);
            tracing::info!(client_id, topic = %topic, retain = will.retain(), "Last Will refused by the ACL");
            return Err(LoginRefusal::NotAuthorized);
        }
        Ok(login)
    }

    /// A client's publish, taken or refused: rmqtt's publish ACL hook is the one whose answer
    /// becomes the PUBACK, so upstream messages are ingested and routed ones relayed from here.
    /// Per message, at debug: nothing is recorded or allocated when the level is off.
    #[instrument(level = "debug", name = "mqtt_publish", skip_all, fields(client_id = client_id))]
    async fn take_publish(&self, client_id: &str, publish: &Publish) -> PublishAclResult {
        // Counted until answered, so the shutdown drains ingest after it; once the broker stops,
        // not taken (and not acknowledged: the device sends it again after reconnecting).
        let Some(_in_flight) = self.tasks.in_flight() else {
            return PublishAclResult::rejected(true, None);
        };
        let Some(identity) = self.sessions.identity(client_id) else {
            return PublishAclResult::rejected(true, None);
        };
        if !self.publish_rate.allow(client_id) {
            self.stats.publishes_over_rate.fetch_add(1, Ordering::Relaxed);
            tracing::info!(client_id, "publishing faster than --mqtt-publish-rate; disconnecting");
            // No PUBACK for it: the client sends it again after reconnecting. An MQTT 5 client
            // is told why: DISCONNECT 0x96, message rate too high.
            return PublishAclResult(
                PublishResult::reason_code(
                    PublishAckReason::QuotaExceeded,
                    Some("over the publish rate".into()),
                    true,
                )
                .disconnect_with(DisconnectReasonCode::MessageRateTooHigh),
            );
        }
        match self.policy.may_publish(&identity, client_id, &publish.topic).await {
            Some(Publishing::Upstream(tenant)) => self.ingest(client_id, tenant, publish).await,
            Some(Publishing::Relay(grant)) => self.relay(client_id, &grant, publish).await,
            None => {
                self.stats.acls_denied.fetch_add(1, Ordering::Relaxed);
                tracing::info!(client_id, topic = %publish.topic, "publish refused by the ACL");
                // A topic outside Gantry's tree is not a name it knows; one inside it that the
                // client may not use is not authorized.
                if self.policy.is_gantry_topic(&publish.topic) {
                    refused(
                        PublishAckReason::NotAuthorized,
                        "this client may not publish to that topic",
                    )
                } else {
                    refused(PublishAckReason::TopicNameInvalid, "not a Gantry topic")
                }
            }
        }
    }

    /// A message along a route: recorded as an event log, then delivered by the broker.
    async fn relay(&self, client_id: &str, grant: &RouteGrant, publish: &Publish) -> PublishAclResult {
        let Some(services) = self.policy.services() else {
            return PublishAclResult::rejected(false, None);
        };
        match services.routes.relay(grant, client_id, &publish.payload).await {
            Ok(()) => PublishAclResult::allow(),
            Err(e) => {
                self.stats.entries_refused.fetch_add(1, Ordering::Relaxed);
                tracing::info!(client_id, error = %e, "routed message refused");
                match e {
                    gantry_core::Error::Invalid { .. } => {
                        refused(PublishAckReason::PayloadFormatInvalid, "not a Message")
                    }
                    _ => refused(PublishAckReason::NotAuthorized, "the route does not carry it now"),
                }
            }
        }
    }

    /// What a device publishes to its upstream topic is ingested before the publish is
    /// acknowledged, so a QoS 1 PUBACK means the events are durable.
    async fn ingest(&self, client_id: &str, tenant: TenantId, publish: &Publish) -> PublishAclResult {
        let Some(services) = self.policy.services() else {
            return PublishAclResult::rejected(true, None);
        };
        let sender = UpstreamSender {
            device: DeviceId::from_string(client_id),
            tenant: Ok(Some(tenant)),
        };
        puback(self.upstream.handle(&services, sender, &publish.payload).await)
    }

    /// A client is in: counted by kind and transport, a line says who, from where, how, and a
    /// device's presence is recorded.
    async fn connected(&self, session: &Session) {
        let client_id = &session.id.client_id;
        let identity = self.sessions.identity(client_id);
        let kind = match identity {
            Some(crate::policy::Identity::Route(_)) => Kind::Temporary,
            _ => Kind::Device,
        };
        let transport = self.transports.of(session.id.lid);
        if let Some(connections) = &self.stats.connections {
            connections.connected(&session.id, kind, transport);
        }
        let protocol = connections::protocol_name(session.protocol().await.unwrap_or_default());
        let address = session.id.remote_addr.map(|a| a.to_string()).unwrap_or_default();
        match kind {
            Kind::Device => tracing::info!(device = %client_id, address, protocol, transport, "device connected"),
            Kind::Temporary => {
                tracing::info!(client_id = %client_id, address, protocol, transport, "route identity connected")
            }
        }
        if let (Some(crate::policy::Identity::Device(tenant)), Some(services)) = (identity, self.policy.services()) {
            let start = SessionStart {
                device: DeviceId::from_string(&**client_id),
                at: session.id.create_time,
                client_address: Some(address),
                protocol: Some(protocol.to_owned()),
                transport: Some(transport.to_owned()),
            };
            // Off the handshake: rmqtt holds the client id's entry locked meanwhile, and a
            // reconnect that finds it locked is refused. The store orders the writes by the
            // sessions' start times, so the order they land in does not matter.
            self.tasks.spawn(async move {
                let device = start.device.clone();
                if let Err(e) = services.presence.connected(&tenant, start).await {
                    tracing::warn!(device = %device, error = %e, "device presence not recorded");
                }
            });
        }
    }

    /// A client is gone: its count ends, a line says why, and a device's presence is recorded.
    async fn disconnected(&self, session: &Session, reason: &Reason) {
        let Some((kind, transport)) = self
            .stats
            .connections
            .as_ref()
            .and_then(|c| c.disconnected(&session.id))
        else {
            return;
        };
        let client_id = &session.id.client_id;
        let address = session.id.remote_addr.map(|a| a.to_string()).unwrap_or_default();
        let reason = connections::describe(reason);
        match kind {
            Kind::Device => tracing::info!(device = %client_id, address, transport, reason, "device disconnected"),
            Kind::Temporary => {
                tracing::info!(client_id = %client_id, address, transport, reason, "route identity disconnected")
            }
        }
        if let (Kind::Device, Some(services)) = (kind, self.policy.services()) {
            let end = SessionEnd {
                device: DeviceId::from_string(&**client_id),
                started_by: session.id.create_time,
                at: gantry_core::time::now_ms(),
                last_seen: None,
            };
            // As at connect: not while rmqtt holds the entry locked.
            self.tasks.spawn(async move {
                let device = end.device.clone();
                if let Err(e) = services.presence.disconnected(None, end).await {
                    tracing::warn!(device = %device, error = %e, "device presence not recorded");
                }
            });
        }
    }

    /// A device is ready for its inbox's messages (it subscribed, or came back to a session
    /// that holds its subscription): its waiting controls and desired values are sent now.
    fn device_ready(&self, client_id: &str) {
        let (Some(crate::policy::Identity::Device(tenant)), Some(services)) =
            (self.sessions.identity(client_id), self.policy.services())
        else {
            return;
        };
        let device = DeviceId::from_string(client_id);
        // Off the broker's handling of the packet: the delivery publishes to this very session.
        self.tasks.spawn(async move {
            if let Err(e) = services.desired.device_connected(&tenant, &device).await {
                tracing::warn!(device = %device, error = %e, "waiting controls or desired state not sent");
            }
        });
    }

    /// A reconnect to a session that kept its subscriptions is ready at once.
    async fn resumed(&self, session: &Session) {
        let present = session.session_present().await.unwrap_or(false);
        let subscribed = match session.subscriptions().await {
            Ok(subs) => subs.len().await > 0,
            Err(_) => false,
        };
        if present && subscribed {
            self.device_ready(&session.id.client_id);
        }
    }

    fn check_subscribe(&self, client_id: &str, filter: &str, qos: rmqtt::codec::types::QoS) -> SubscribeAclResult {
        let known = self.sessions.is_known(client_id);
        if known && self.policy.may_subscribe(client_id, filter) {
            SubscribeAclResult::new_success(qos, None)
        } else {
            self.stats.acls_denied.fetch_add(1, Ordering::Relaxed);
            tracing::info!(client_id, filter, "subscription refused by the ACL");
            SubscribeAclResult::new_failure(SubscribeAckReason::NotAuthorized)
        }
    }
}

/// The embedded broker's answer to an upstream publish. MQTT 3.1.1 has no reason codes: its
/// PUBACK is sent whatever the result, except for `NotStored`.
fn puback(answer: UpstreamAnswer) -> PublishAclResult {
    match answer {
        UpstreamAnswer::Taken => PublishAclResult::allow(),
        UpstreamAnswer::Rejected(Rejection::Malformed) => {
            refused(PublishAckReason::PayloadFormatInvalid, "not a Message")
        }
        UpstreamAnswer::Rejected(Rejection::NotAuthorized) | UpstreamAnswer::Dropped => refused(
            PublishAckReason::NotAuthorized,
            "the device may not send this message now",
        ),
        UpstreamAnswer::Rejected(Rejection::Refused) => refused(
            PublishAckReason::ImplementationSpecificError,
            "every entry was refused by the device's model",
        ),
        // Not acknowledged: disconnecting makes the device send its QoS 1 message again.
        UpstreamAnswer::NotStored => PublishAclResult::rejected(true, None),
    }
}

/// A publish not taken, with the reason an MQTT 5 PUBACK carries; the client stays connected.
fn refused(reason: PublishAckReason, why: &'static str) -> PublishAclResult {
    PublishAclResult(PublishResult::reason_code(reason, Some(why.into()), false))
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
                    self.take_publish(&session.id.client_id, publish).await,
                )),
            ),
            Parameter::ClientConnected(session) => {
                self.connected(session).await;
                self.resumed(session).await;
                (true, acc)
            }
            Parameter::SessionSubscribed(session, _) => {
                // Only its own inbox passed the subscribe ACL.
                self.device_ready(&session.id.client_id);
                (true, acc)
            }
            Parameter::ClientDisconnected(session, reason) => {
                self.disconnected(session, reason).await;
                (true, acc)
            }
            Parameter::SessionTerminated(session, _) => {
                // Over for good: its Last Will was sent (through the publish ACL, which needs
                // the identity) and its offline queue is gone.
                let client_id = &session.id.client_id;
                if self.sessions.ended(client_id, session.id.create_time) {
                    self.publish_rate.reset(client_id);
                }
                (true, acc)
            }
            Parameter::ClientKeepalive(session, _) => {
                // Every packet from the client: its last-seen time, in memory.
                if let Some(services) = self.policy.services() {
                    services.presence.seen(&session.id.client_id);
                }
                (true, acc)
            }
            _ => (true, acc),
        }
    }
}
