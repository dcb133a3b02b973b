//! Scale-out mode: an external broker (Mosquitto, EMQX) holds the devices' connections and
//! every Gantry node is one of its clients. The nodes share the upstream traffic through a
//! shared subscription and acknowledge each message to the broker only after its events are
//! committed (manual acks), so a node that dies mid-way leaves the message to be delivered again.

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use anyhow::{Context, bail};
use async_trait::async_trait;
use gantry_core::Services;
use gantry_core::downlink::Downlink;
use gantry_core::ids::{DeviceId, TenantId};
use gantry_core::message::Message;
use rumqttc::{AsyncClient, Event, EventLoop, MqttOptions, NetworkOptions, Packet, QoS};
use tokio::task::JoinHandle;

use crate::broker::MqttStats;
use crate::topics::Topics;

/// The group name of the shared subscription: all Gantry nodes of a deployment split the load.
const SHARE_GROUP: &str = "gantry";

pub struct ExternalBroker {
    client: AsyncClient,
    eventloop: Option<EventLoop>,
    topics: Topics,
    stats: Arc<MqttStats>,
    host: String,
    port: u16,
    task: Option<JoinHandle<()>>,
}

/// A user name and password.
type Credentials = (String, String);

/// `mqtt://[user[:password]@]host[:port]`.
fn parse_url(url: &str) -> anyhow::Result<(Option<Credentials>, String, u16)> {
    let rest = url
        .strip_prefix("mqtt://")
        .or_else(|| url.strip_prefix("tcp://"))
        .with_context(|| format!("{url}: the broker URL must start with mqtt://"))?;
    let (credentials, address) = match rest.rsplit_once('@') {
        Some((credentials, address)) => {
            let (user, password) = credentials.split_once(':').unwrap_or((credentials, ""));
            (Some((user.to_owned(), password.to_owned())), address)
        }
        None => (None, rest),
    };
    let address = address.trim_end_matches('/');
    let (host, port) = match address.rsplit_once(':') {
        Some((host, port)) => (host, port.parse().with_context(|| format!("{url}: bad port"))?),
        None => (address, 1883),
    };
    if host.is_empty() {
        bail!("{url}: no host");
    }
    Ok((credentials, host.to_owned(), port))
}

impl ExternalBroker {
    /// Prepares the connection as `client_id` (stable per node, so the broker keeps its session).
    pub fn new(url: &str, topics: Topics, client_id: &str) -> anyhow::Result<Self> {
        let (credentials, host, port) = parse_url(url)?;
        let mut options = MqttOptions::new(client_id, host.clone(), port);
        options.set_keep_alive(Duration::from_secs(30));
        options.set_clean_session(false);
        options.set_manual_acks(true);
        if let Some((user, password)) = credentials {
            options.set_credentials(user, password);
        }
        let (client, mut eventloop) = AsyncClient::new(options, 4096);
        let mut network = NetworkOptions::new();
        network.set_tcp_nodelay(true);
        eventloop.set_network_options(network);
        Ok(Self {
            client,
            eventloop: Some(eventloop),
            topics,
            stats: Arc::new(MqttStats::default()),
            host,
            port,
            task: None,
        })
    }

    pub fn host(&self) -> &str {
        &self.host
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    pub fn stats(&self) -> Arc<MqttStats> {
        self.stats.clone()
    }

    pub fn downlink(&self) -> Arc<dyn Downlink> {
        Arc::new(ExternalDownlink {
            client: self.client.clone(),
            topics: self.topics.clone(),
            stats: self.stats.clone(),
        })
    }

    /// Connects, subscribes to the shared upstream topic and starts handling messages. Waits for
    /// the first CONNACK so that a wrong URL fails the start.
    pub async fn start(&mut self, services: Arc<Services>) -> anyhow::Result<()> {
        let mut eventloop = self.eventloop.take().context("the external broker is started once")?;
        loop {
            match tokio::time::timeout(Duration::from_secs(10), eventloop.poll()).await {
                Err(_) => bail!("no answer from the broker {}:{}", self.host, self.port),
                Ok(Err(e)) => bail!("connecting to the broker {}:{}: {e}", self.host, self.port),
                Ok(Ok(Event::Incoming(Packet::ConnAck(_)))) => break,
                Ok(Ok(_)) => {}
            }
        }
        let filter = self.topics.shared_upstream(SHARE_GROUP);
        self.client.subscribe(&filter, QoS::AtLeastOnce).await?;
        let handler = Upstream {
            services,
            client: self.client.clone(),
            downlink: self.downlink(),
            topics: self.topics.clone(),
            stats: self.stats.clone(),
            tenants: Arc::default(),
        };
        self.task = Some(tokio::spawn(async move {
            loop {
                match eventloop.poll().await {
                    Ok(Event::Incoming(Packet::Publish(publish))) => {
                        let handler = handler.clone();
                        tokio::spawn(async move { handler.handle(publish).await });
                    }
                    Ok(Event::Incoming(Packet::ConnAck(ack))) if !ack.session_present => {
                        // A new session has no subscription: take the shared one again.
                        if let Err(e) = handler.client.subscribe(&filter, QoS::AtLeastOnce).await {
                            tracing::warn!(error = %e, "could not subscribe again");
                        }
                    }
                    Ok(_) => {}
                    Err(e) => {
                        tracing::warn!(error = %e, "external broker connection lost; reconnecting");
                        tokio::time::sleep(Duration::from_secs(1)).await;
                    }
                }
            }
        }));
        Ok(())
    }

    pub fn stop(&mut self) {
        if let Some(task) = self.task.take() {
            task.abort();
        }
    }
}

impl Drop for ExternalBroker {
    fn drop(&mut self) {
        self.stop();
    }
}

#[derive(Clone)]
struct Upstream {
    services: Arc<Services>,
    client: AsyncClient,
    downlink: Arc<dyn Downlink>,
    topics: Topics,
    stats: Arc<MqttStats>,
    /// A device's tenant never changes: look it up once.
    tenants: Arc<RwLock<HashMap<String, TenantId>>>,
}

impl Upstream {
    async fn tenant_of(&self, device: &str) -> gantry_core::Result<Option<TenantId>> {
        if let Some(tenant) = self.tenants.read().expect("tenants lock").get(device) {
            return Ok(Some(tenant.clone()));
        }
        let tenant = self
            .services
            .telemetry
            .device_tenant(&DeviceId::from_string(device))
            .await?;
        if let Some(tenant) = &tenant {
            self.tenants
                .write()
                .expect("tenants lock")
                .insert(device.to_owned(), tenant.clone());
        }
        Ok(tenant)
    }

    async fn handle(&self, publish: rumqttc::Publish) {
        let Some(device) = self.topics.upstream_owner(&publish.topic).map(str::to_owned) else {
            let _ = self.client.ack(&publish).await;
            return;
        };
        self.stats.messages_in.fetch_add(1, Ordering::Relaxed);
        let outcome = match self.tenant_of(&device).await {
            Ok(Some(tenant)) => {
                self.services
                    .telemetry
                    .handle_upstream(&tenant, &DeviceId::from_string(&device), &publish.payload)
                    .await
            }
            Ok(None) => {
                self.stats.entries_refused.fetch_add(1, Ordering::Relaxed);
                tracing::info!(device, "message for an unknown device dropped");
                let _ = self.client.ack(&publish).await;
                return;
            }
            Err(e) => Err(e),
        };
        match outcome {
            Ok(outcome) => {
                self.stats.settle(self.downlink.as_ref(), &device, outcome).await;
                // Committed: now the broker may forget the message.
                let _ = self.client.ack(&publish).await;
            }
            Err(e) => {
                // Not acknowledged: the broker delivers it again after the session is resumed.
                self.stats.ingest_failures.fetch_add(1, Ordering::Relaxed);
                tracing::warn!(device, error = %e, "upstream message not stored; left unacknowledged");
            }
        }
    }
}

struct ExternalDownlink {
    client: AsyncClient,
    topics: Topics,
    stats: Arc<MqttStats>,
}

#[async_trait]
impl Downlink for ExternalDownlink {
    async fn send(&self, owner: &str, message: &Message) -> gantry_core::Result<()> {
        let payload = serde_json::to_vec(message).map_err(gantry_core::Error::store)?;
        self.client
            .publish(self.topics.inbox(owner), QoS::AtLeastOnce, false, payload)
            .await
            .map_err(|e| gantry_core::Error::store(std::io::Error::other(e.to_string())))?;
        self.stats.messages_out.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }

    async fn disconnect(&self, device: &DeviceId) {
        // A generic broker offers no way to drop another client's session; its authentication
        // (backed by Gantry's) refuses the device from its next login on.
        tracing::info!(device = %device, "external broker: the device's session is not closed by Gantry");
    }

    async fn expire_session(&self, client: &str, _at: i64) {
        // As above: the broker refuses the old credential from the next login on, and its ACL
        // requests (answered by Gantry) find a revoked or expired route's identity no longer
        // allowed to publish.
        tracing::info!(client, "external broker: the session is not closed by Gantry");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn broker_urls() {
        assert_eq!(
            parse_url("mqtt://127.0.0.1:1883").unwrap(),
            (None, "127.0.0.1".to_owned(), 1883)
        );
        assert_eq!(
            parse_url("mqtt://broker.local").unwrap(),
            (None, "broker.local".to_owned(), 1883)
        );
        assert_eq!(
            parse_url("mqtt://gantry:s3cret@emqx:1884/").unwrap(),
            (
                Some(("gantry".to_owned(), "s3cret".to_owned())),
                "emqx".to_owned(),
                1884
            )
        );
        assert!(parse_url("http://x").is_err());
        assert!(parse_url("mqtt://:1883").is_err());
        assert!(parse_url("mqtt://h:port").is_err());
    }
}
