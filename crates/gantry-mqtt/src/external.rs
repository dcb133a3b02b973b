//! Scale-out mode: an external broker (Mosquitto, EMQX) holds the devices' connections and
//! every Gantry node is one of its clients. The nodes share the upstream traffic through a
//! shared subscription and acknowledge each message to the broker only after its events are
//! committed (manual acks), so a node that dies mid-way leaves the message to be delivered again.
//!
//! Device presence comes from the broker's client events, where it publishes them: EMQX's
//! `$SYS/brokers/<node>/clients/<clientid>/connected` and `disconnected` (`presence_event`).
//! Every node takes them all (no shared subscription), handled in arrival order by one task.

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use anyhow::{Context, bail};
use async_trait::async_trait;
use gantry_core::Services;
use gantry_core::connection::{SessionEnd, SessionStart};
use gantry_core::downlink::Downlink;
use gantry_core::ids::{DeviceId, TenantId};
use gantry_core::message::Message;
use rumqttc::{AsyncClient, Event, EventLoop, MqttOptions, NetworkOptions, Packet, QoS};
use serde::Deserialize;
use tokio::sync::mpsc;

use crate::stats::MqttStats;
use crate::tasks::BrokerTasks;
use crate::topics::Topics;
use crate::upstream::{UpstreamAnswer, UpstreamPath, UpstreamSender};

/// The group name of the shared subscription: all Gantry nodes of a deployment split the load.
const SHARE_GROUP: &str = "gantry";

/// EMQX's client events; Mosquitto publishes none (presence then shows no device connected).
const CONNECTED_EVENTS: &str = "$SYS/brokers/+/clients/+/connected";
const DISCONNECTED_EVENTS: &str = "$SYS/brokers/+/clients/+/disconnected";

/// Client events waiting for the presence task; beyond, they are dropped with a warning.
const PRESENCE_QUEUE: usize = 4096;

pub struct ExternalBroker {
    client: AsyncClient,
    eventloop: Option<EventLoop>,
    topics: Topics,
    stats: Arc<MqttStats>,
    host: String,
    port: u16,
    /// The broker's listener ports and their transports, to name a client's transport by the
    /// port it connected to.
    transports: Vec<(u16, &'static str)>,
    /// The client's loop, the presence task and each message's handling, from `start` on.
    tasks: Option<BrokerTasks>,
    /// When this node last heard from each device, shared by the upstream handler, which
    /// counts connects by it, and the downlink, which tells a device recently heard connected.
    heard: Arc<Heard>,
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
            transports: vec![(port, "tcp")],
            host,
            port,
            tasks: None,
            heard: Arc::new(Heard::new(Duration::from_secs(60))),
        })
    }

    /// How long a device may send nothing before its next message counts as a connect. Set
    /// before `downlink` and `start`.
    pub fn set_presence_silence(&mut self, silence: Duration) {
        self.heard = Arc::new(Heard::new(silence));
    }

    /// The broker's ports for TLS, WebSocket and secure WebSocket clients, when known.
    pub fn set_transport_ports(&mut self, tls: Option<u16>, ws: Option<u16>, wss: Option<u16>) {
        let others = [(tls, "tls"), (ws, "ws"), (wss, "wss")];
        self.transports = std::iter::once((self.port, "tcp"))
            .chain(others.into_iter().filter_map(|(port, name)| Some((port?, name))))
            .collect();
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
            heard: self.heard.clone(),
        })
    }

    /// Connects, subscribes to the shared upstream topic and starts handling messages as
    /// `tasks`. Waits for the first CONNACK so that a wrong URL fails the start.
    pub async fn start(&mut self, services: Arc<Services>, tasks: BrokerTasks) -> anyhow::Result<()> {
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
        subscribe_client_events(&self.client).await?;
        let (presence_tx, presence_rx) = mpsc::channel::<PresenceEvent>(PRESENCE_QUEUE);
        let heard = self.heard.clone();
        // Ends once the client's loop has ended (it holds the sender) and the events queued are
        // recorded.
        tasks.spawn(record_presence(presence_rx, services.clone(), heard.clone()));
        let handler = ExternalUpstream {
            services,
            client: self.client.clone(),
            topics: self.topics.clone(),
            path: UpstreamPath::new(self.downlink(), self.stats.clone()),
            tenants: Arc::default(),
            heard,
        };
        let taking = take_messages(
            eventloop,
            handler,
            (filter, self.transports.clone()),
            presence_tx,
            tasks.clone(),
        );
        tasks.spawn_until(taking);
        self.tasks = Some(tasks);
        Ok(())
    }

    /// Stops taking messages (the tasks' owner waits for those in flight).
    pub fn stop(&mut self) {
        if let Some(tasks) = &self.tasks {
            tasks.stop();
        }
    }
}

/// Records the client events the client's loop passes on, in order, until it stops.
async fn record_presence(mut events: mpsc::Receiver<PresenceEvent>, services: Arc<Services>, heard: Arc<Heard>) {
    while let Some(event) = events.recv().await {
        heard.forget(&event);
        let done = match event {
            PresenceEvent::Connected(start) => match services.telemetry.device_tenant(&start.device).await {
                Ok(Some(tenant)) => services.presence.connected(&tenant, start).await,
                Ok(None) => Ok(()),
                Err(e) => Err(e),
            },
            PresenceEvent::Disconnected(end) => services.presence.disconnected(None, end).await,
        };
        if let Err(e) = done {
            tracing::warn!(error = %e, "device presence not recorded");
        }
    }
}

/// The client's loop: client events go to the presence task, each upstream message is handled
/// as a task of its own, and a new session subscribes again (`filter`).
async fn take_messages(
    mut eventloop: EventLoop,
    handler: ExternalUpstream,
    (filter, transports): (String, Vec<(u16, &'static str)>),
    presence: mpsc::Sender<PresenceEvent>,
    tasks: BrokerTasks,
) {
    loop {
        match eventloop.poll().await {
            Ok(Event::Incoming(Packet::Publish(publish))) if publish.topic.starts_with("$SYS/") => {
                match presence_event(&publish.topic, &publish.payload, &transports) {
                    Some(event) => {
                        if presence.try_send(event).is_err() {
                            tracing::warn!("client events arrive faster than they are recorded; one dropped");
                        }
                    }
                    None => tracing::debug!(topic = %publish.topic, "client event not understood"),
                }
            }
            Ok(Event::Incoming(Packet::Publish(publish))) => {
                let handler = handler.clone();
                tasks.spawn(async move { handler.handle(publish).await });
            }
            Ok(Event::Incoming(Packet::ConnAck(ack))) if !ack.session_present => {
                // A new session has no subscription: take the shared one again.
                if let Err(e) = handler.client.subscribe(&filter, QoS::AtLeastOnce).await {
                    tracing::warn!(error = %e, "could not subscribe again");
                }
                if let Err(e) = subscribe_client_events(&handler.client).await {
                    tracing::warn!(error = %e, "could not subscribe to client events again");
                }
            }
            Ok(_) => {}
            Err(e) => {
                tracing::warn!(error = %e, "external broker connection lost; reconnecting");
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
        }
    }
}

impl Drop for ExternalBroker {
    fn drop(&mut self) {
        self.stop();
    }
}

async fn subscribe_client_events(client: &AsyncClient) -> Result<(), rumqttc::ClientError> {
    client.subscribe(CONNECTED_EVENTS, QoS::AtMostOnce).await?;
    client.subscribe(DISCONNECTED_EVENTS, QoS::AtMostOnce).await
}

/// A client's connect or disconnect as the broker reported it.
#[derive(Debug, PartialEq, Eq)]
enum PresenceEvent {
    Connected(SessionStart),
    Disconnected(SessionEnd),
}

/// The fields of EMQX's client event payloads that presence uses.
#[derive(Deserialize)]
struct ClientEvent {
    clientid: String,
    ipaddress: Option<String>,
    sockport: Option<u16>,
    proto_ver: Option<u8>,
    connected_at: Option<i64>,
    disconnected_at: Option<i64>,
    ts: Option<i64>,
}

/// Epoch ms; older EMQX versions sent seconds.
fn epoch_ms(t: i64) -> i64 {
    if t < 100_000_000_000 { t * 1000 } else { t }
}

/// Reads an EMQX client event (`$SYS/brokers/<node>/clients/<clientid>/connected` or
/// `disconnected`); None for any other topic or a payload without its client id and time.
fn presence_event(topic: &str, payload: &[u8], transports: &[(u16, &'static str)]) -> Option<PresenceEvent> {
    let mut parts = topic.split('/');
    let (Some("$SYS"), Some("brokers"), Some(_node), Some("clients")) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return None;
    };
    let kind = topic.rsplit('/').next()?;
    let event: ClientEvent = serde_json::from_slice(payload).ok()?;
    let device = DeviceId::from_string(event.clientid);
    match kind {
        "connected" => {
            let at = epoch_ms(event.connected_at.or(event.ts)?);
            Some(PresenceEvent::Connected(SessionStart {
                device,
                at,
                client_address: event.ipaddress,
                protocol: event.proto_ver.map(|v| crate::connections::protocol_name(v).to_owned()),
                transport: event.sockport.and_then(|port| {
                    transports
                        .iter()
                        .find(|(p, _)| *p == port)
                        .map(|(_, name)| (*name).to_owned())
                }),
            }))
        }
        "disconnected" => {
            let at = epoch_ms(event.disconnected_at.or(event.ts)?);
            // The event does not say when the session began: any recorded before its end ended.
            Some(PresenceEvent::Disconnected(SessionEnd {
                device,
                started_by: at,
                at,
                last_seen: None,
            }))
        }
        _ => None,
    }
}

/// The external broker's upstream messages: which device sent each, then the shared upstream path,
/// then the manual ack.
#[derive(Clone)]
struct ExternalUpstream {
    services: Arc<Services>,
    client: AsyncClient,
    topics: Topics,
    path: UpstreamPath,
    /// A device's tenant never changes: look it up once.
    tenants: Arc<RwLock<HashMap<String, TenantId>>>,
    /// When each device was last heard from here, to tell its connects.
    heard: Arc<Heard>,
}

/// A device's connect as an external broker shows it to one node: the broker's client events
/// where it sends them (EMQX), else nothing but the device's messages. So a device's first
/// message after the broker said it (dis)connected, after this node last heard from it more
/// than the silence ago, or the first this node hears at all, counts as a connect: the device
/// publishes once it is subscribed, so its inbox exists then. Several nodes may each count one
/// connect; the store's claim sends each waiting control once whatever the count.
struct Heard {
    last: std::sync::Mutex<HashMap<String, std::time::Instant>>,
    silence: Duration,
}

impl Heard {
    fn new(silence: Duration) -> Self {
        Self {
            last: Default::default(),
            silence,
        }
    }

    /// A message from `device` now: whether it counts as a connect.
    fn message(&self, device: &str) -> bool {
        let now = std::time::Instant::now();
        let mut last = self.last.lock().expect("heard lock");
        match last.insert(device.to_owned(), now) {
            Some(before) => now.duration_since(before) > self.silence,
            None => true,
        }
    }

    /// Whether this node heard from `device` within the silence.
    fn recently(&self, device: &str) -> bool {
        let last = self.last.lock().expect("heard lock");
        last.get(device).is_some_and(|at| at.elapsed() <= self.silence)
    }

    /// The broker said the device connected or disconnected: its next message is a connect.
    fn forget(&self, event: &PresenceEvent) {
        let device = match event {
            PresenceEvent::Connected(start) => &start.device,
            PresenceEvent::Disconnected(end) => &end.device,
        };
        self.last.lock().expect("heard lock").remove(device.as_str());
    }
}

impl ExternalUpstream {
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
        self.services.presence.seen(&device);
        let connect = self.heard.message(&device);
        let tenant = self.tenant_of(&device).await;
        let ready = match (&tenant, connect) {
            (Ok(Some(tenant)), true) => Some(tenant.clone()),
            _ => None,
        };
        let sender = UpstreamSender {
            tenant,
            device: DeviceId::from_string(device),
        };
        let id = sender.device.clone();
        match self.path.handle(&self.services, sender, &publish.payload).await {
            // Committed, or never to be: now the broker may forget the message.
            UpstreamAnswer::Taken | UpstreamAnswer::Rejected(_) | UpstreamAnswer::Dropped => {
                let _ = self.client.ack(&publish).await;
            }
            // Not acknowledged: the broker delivers it again after the session is resumed.
            UpstreamAnswer::NotStored => {}
        }
        if let Some(tenant) = ready
            && let Err(e) = self.services.desired.device_connected(&tenant, &id).await
        {
            tracing::warn!(device = %id, error = %e, "waiting controls or desired state not sent");
        }
    }
}

struct ExternalDownlink {
    client: AsyncClient,
    topics: Topics,
    stats: Arc<MqttStats>,
    heard: Arc<Heard>,
}

#[async_trait]
impl Downlink for ExternalDownlink {
    async fn send(&self, owner: &str, message: &Message) -> gantry_core::Result<()> {
        let payload = serde_json::to_vec(message).map_err(gantry_core::Error::serialization)?;
        self.client
            .publish(self.topics.inbox(owner), QoS::AtLeastOnce, false, payload)
            .await
            .map_err(|e| gantry_core::Error::downlink(std::io::Error::other(e.to_string())))?;
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

    /// A broker's client events drop the device from `heard`, so with EMQX this agrees with
    /// presence; with Mosquitto it is all a node knows of a device's connection.
    fn recently_heard(&self, device: &DeviceId) -> bool {
        self.heard.recently(device.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_first_message_after_silence_or_an_event_counts_as_a_connect() {
        let heard = Heard::new(Duration::from_millis(50));
        assert!(heard.message("d1"), "the first this node hears");
        assert!(!heard.message("d1"));
        std::thread::sleep(Duration::from_millis(60));
        assert!(heard.message("d1"), "after the silence");
        let end = SessionEnd {
            device: DeviceId::from_string("d1"),
            started_by: 0,
            at: 0,
            last_seen: None,
        };
        heard.forget(&PresenceEvent::Disconnected(end));
        assert!(!heard.recently("d1"), "the broker said it disconnected");
        assert!(heard.message("d1"), "after the broker said it disconnected");
        assert!(!heard.message("d1"));
    }

    /// A device heard within the silence counts as connected (a change is sent to it at once);
    /// one not heard for longer, or never, does not.
    #[test]
    fn a_device_heard_within_the_silence_counts_as_connected() {
        let heard = Heard::new(Duration::from_millis(50));
        assert!(!heard.recently("d1"), "never heard");
        heard.message("d1");
        assert!(heard.recently("d1"));
        std::thread::sleep(Duration::from_millis(60));
        assert!(!heard.recently("d1"), "silent for longer than the silence");
    }

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

    const PORTS: &[(u16, &str)] = &[(1883, "tcp"), (8883, "tls"), (8083, "ws"), (8084, "wss")];

    #[test]
    fn emqx_client_events() {
        // EMQX 5's payloads, as its documentation shows them.
        let connected = br#"{"username":"d1","ts":1625572213873,"sockport":8084,"proto_ver":5,"proto_name":"MQTT",
            "keepalive":60,"ipaddress":"10.0.0.7","expiry_interval":0,"connected_at":1625572213870,"connack":0,
            "clientid":"d1","clean_start":true}"#;
        assert_eq!(
            presence_event("$SYS/brokers/emqx@10.0.0.1/clients/d1/connected", connected, PORTS),
            Some(PresenceEvent::Connected(SessionStart {
                device: DeviceId::from_string("d1"),
                at: 1625572213870,
                client_address: Some("10.0.0.7".into()),
                protocol: Some("MQTT 5".into()),
                transport: Some("wss".into()),
            }))
        );
        let disconnected = br#"{"username":"d1","ts":1625572213999,"sockport":1883,"reason":"tcp_closed",
            "proto_ver":4,"proto_name":"MQTT","ipaddress":"10.0.0.7","disconnected_at":1625572213990,"clientid":"d1"}"#;
        assert_eq!(
            presence_event("$SYS/brokers/n1/clients/d1/disconnected", disconnected, PORTS),
            Some(PresenceEvent::Disconnected(SessionEnd {
                device: DeviceId::from_string("d1"),
                started_by: 1625572213990,
                at: 1625572213990,
                last_seen: None,
            }))
        );
        // Older EMQX: seconds, a port Gantry was not told of, MQTT 3.1.1.
        let old = br#"{"clientid":"d2","connected_at":1582687922,"proto_ver":4,"sockport":9999}"#;
        let Some(PresenceEvent::Connected(start)) = presence_event("$SYS/brokers/n/clients/d2/connected", old, PORTS)
        else {
            panic!("not read");
        };
        assert_eq!(
            (start.at, start.protocol.as_deref(), start.transport),
            (1582687922000, Some("MQTT 3.1.1"), None)
        );
        for (topic, payload) in [
            ("$SYS/brokers/n/clients/d1/connected", &b"not json"[..]),
            ("$SYS/brokers/n/clients/d1/connected", br#"{"clientid":"d1"}"#),
            ("$SYS/brokers/n/uptime", br#"{"clientid":"d1","ts":1}"#),
            ("$SYS/brokers/n/clients/d1/subscribed", br#"{"clientid":"d1","ts":1}"#),
        ] {
            assert_eq!(presence_event(topic, payload, PORTS), None, "{topic}");
        }
    }
}
