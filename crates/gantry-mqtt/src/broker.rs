//! The embedded broker: listeners bound up front (so port 0 can be read back), hooks attached
//! once the services exist, and the downlink that publishes into it.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use anyhow::Context;
use async_trait::async_trait;
use gantry_core::Services;
use gantry_core::downlink::Downlink;
use gantry_core::ids::DeviceId;
use gantry_core::message::Message;
use rmqtt::codec::types::{Publish as CodecPublish, QoS};
use rmqtt::context::ServerContext;
use rmqtt::hook::Type;
use rmqtt::net::{Builder, Listener};
use rmqtt::server::MqttServer;
use rmqtt::session::SessionState;
use rmqtt::types::{ClientId, From, Id, Publish};
use rustls::ServerConfig;

use crate::connections::{Connections, Transports};
use crate::hooks::GantryHooks;
use crate::policy::Policy;
use crate::sessions::{SWEEP_PERIOD, Sessions};
use crate::stats::MqttStats;
use crate::tasks::BrokerTasks;
use crate::topics::Topics;

#[derive(Debug, Clone)]
pub struct BrokerConfig {
    /// MQTT over TCP and over WebSocket; `None` turns a listener off.
    pub tcp_addr: Option<SocketAddr>,
    pub ws_addr: Option<SocketAddr>,
    pub tls: Option<BrokerTls>,
    pub topics: Topics,
    pub limits: BrokerLimits,
}

/// What one client may cost the broker.
#[derive(Debug, Clone)]
pub struct BrokerLimits {
    /// Largest packet taken, in bytes.
    pub max_packet_size: u32,
    /// How long a new connection has to send its CONNECT (and finish its TLS or WebSocket
    /// handshake), so that silent sockets are not held.
    pub connect_timeout: std::time::Duration,
    /// Connections held at once, per listener.
    pub max_connections: usize,
    /// Publishes per second one connection may make (bursts of as many); 0: no limit.
    pub publishes_per_second: u32,
}

/// The broker's TLS listeners; `None` addresses are turned off.
#[derive(Debug, Clone)]
pub struct BrokerTls {
    pub mqtts_addr: Option<SocketAddr>,
    pub wss_addr: Option<SocketAddr>,
    /// MQTT over TLS; asks for client certificates when `client_certs`.
    pub mqtts: Arc<ServerConfig>,
    pub wss: Arc<ServerConfig>,
    /// Whether a device may log in with a certificate whose CN is its id (the configuration's
    /// verifier has checked the certificate against the device CA before the hooks see it).
    pub client_certs: bool,
}

/// The broker's listeners, in the order `EmbeddedBroker::bind` binds them.
#[derive(Debug, Clone, Copy)]
enum ListenerKind {
    Tcp,
    Ws,
    Tls,
    Wss,
}

impl ListenerKind {
    const ALL: [ListenerKind; 4] = [
        ListenerKind::Tcp,
        ListenerKind::Ws,
        ListenerKind::Tls,
        ListenerKind::Wss,
    ];

    /// The name rmqtt and the connection metrics know the listener by.
    fn transport(self) -> &'static str {
        match self {
            ListenerKind::Tcp => "tcp",
            ListenerKind::Ws => "ws",
            ListenerKind::Tls => "tls",
            ListenerKind::Wss => "wss",
        }
    }

    /// What an operator calls it, and the flag and variable that move it.
    fn moved_by(self) -> (&'static str, &'static str, &'static str) {
        match self {
            ListenerKind::Tcp => ("MQTT", "--mqtt-addr", "GANTRY_MQTT_ADDR"),
            ListenerKind::Ws => ("MQTT/WebSocket", "--mqtt-ws-addr", "GANTRY_MQTT_WS_ADDR"),
            ListenerKind::Tls => ("MQTT/TLS", "--mqtts-addr", "GANTRY_MQTTS_ADDR"),
            ListenerKind::Wss => ("MQTT/WSS", "--mqtt-wss-addr", "GANTRY_MQTT_WSS_ADDR"),
        }
    }

    /// Where the listener is wanted, and its TLS configuration, or None when it is off.
    fn wanted(self, config: &BrokerConfig) -> Option<(SocketAddr, Option<&BrokerTls>)> {
        let tls = config.tls.as_ref();
        match self {
            ListenerKind::Tcp => config.tcp_addr.map(|addr| (addr, None)),
            ListenerKind::Ws => config.ws_addr.map(|addr| (addr, None)),
            ListenerKind::Tls => tls.and_then(|t| t.mqtts_addr.map(|addr| (addr, Some(t)))),
            ListenerKind::Wss => tls.and_then(|t| t.wss_addr.map(|addr| (addr, Some(t)))),
        }
    }

    /// Binds the listener at `addr`; a refusal names the flag and variable that move it.
    fn bind(self, config: &BrokerConfig, addr: SocketAddr, tls: Option<&BrokerTls>) -> anyhow::Result<Listener> {
        let limits = &config.limits;
        // Without TCP_NODELAY a control round trip waits out Nagle's delay.
        // SO_REUSEADDR (as tokio's own bind sets it): a restart right after a crash must bind
        // again while the last run's connections sit in TIME_WAIT on the port.
        let mut builder = Builder::new()
            .name(self.transport())
            .laddr(addr)
            .nodelay(true)
            .reuseaddr(Some(true))
            .max_packet_size(limits.max_packet_size)
            .handshake_timeout(limits.connect_timeout)
            .max_connections(limits.max_connections)
            .allow_anonymous(false);
        match (self, tls) {
            // The certificate's CN reaches the login hook only when it was verified: without a
            // device CA no client certificate is asked for.
            (ListenerKind::Tls, Some(tls)) => {
                builder = builder
                    .tls_server_config(tls.mqtts.clone())
                    .collect_cert_info(tls.client_certs)
            }
            (ListenerKind::Wss, Some(tls)) => builder = builder.tls_server_config(tls.wss.clone()),
            _ => {}
        }
        let (what, flag, variable) = self.moved_by();
        let bound = builder.bind().with_context(|| {
            format!("binding {what} on {addr} (move it with {flag} or {variable}; `off` turns it off)")
        })?;
        Ok(match self {
            ListenerKind::Tcp => bound.tcp()?,
            ListenerKind::Ws => bound.ws()?,
            ListenerKind::Tls => bound.tls()?,
            ListenerKind::Wss => bound.wss()?,
        })
    }
}

/// The broker inside `gantry serve`.
pub struct EmbeddedBroker {
    scx: ServerContext,
    listeners: Vec<Listener>,
    tcp_addr: Option<SocketAddr>,
    ws_addr: Option<SocketAddr>,
    mqtts_addr: Option<SocketAddr>,
    wss_addr: Option<SocketAddr>,
    topics: Topics,
    stats: Arc<MqttStats>,
    sessions: Arc<Sessions>,
    /// Each listener's transport, in the order of `listeners`.
    transports: Transports,
    /// Publishes per second per connection (`BrokerLimits::publishes_per_second`).
    publish_rate: u32,
    /// The server's task, its sweeper (`Sessions::sweep` closes sessions whose credential
    /// ended) and the hooks' work, from `start` on.
    tasks: Option<BrokerTasks>,
}

impl EmbeddedBroker {
    /// Builds the broker and binds those of its listeners that are on (TCP, WebSocket, TLS, WSS);
    /// nothing is accepted until `start`.
    pub async fn bind(config: &BrokerConfig) -> anyhow::Result<Self> {
        let scx = ServerContext::new().build().await;
        let mut listeners = Vec::new();
        let mut transports = Vec::new();
        let mut bound = [None; 4];
        for (slot, kind) in ListenerKind::ALL.into_iter().enumerate() {
            let Some((addr, tls)) = kind.wanted(config) else {
                continue;
            };
            let listener = kind.bind(config, addr, tls)?;
            bound[slot] = Some(listener.local_addr()?);
            listeners.push(listener);
            transports.push(kind.transport());
        }
        let [tcp_addr, ws_addr, mqtts_addr, wss_addr] = bound;
        Ok(Self {
            scx,
            listeners,
            tcp_addr,
            ws_addr,
            mqtts_addr,
            wss_addr,
            topics: config.topics.clone(),
            stats: Arc::new(MqttStats {
                connections: Some(Connections::default()),
                ..MqttStats::default()
            }),
            sessions: Arc::default(),
            transports: Transports(transports),
            publish_rate: config.limits.publishes_per_second,
            tasks: None,
        })
    }

    /// MQTT over TCP, when on.
    pub fn tcp_addr(&self) -> Option<SocketAddr> {
        self.tcp_addr
    }

    /// MQTT over WebSocket, when on.
    pub fn ws_addr(&self) -> Option<SocketAddr> {
        self.ws_addr
    }

    /// MQTT over TLS, when on.
    pub fn mqtts_addr(&self) -> Option<SocketAddr> {
        self.mqtts_addr
    }

    /// MQTT over secure WebSocket, when on.
    pub fn wss_addr(&self) -> Option<SocketAddr> {
        self.wss_addr
    }

    pub fn stats(&self) -> Arc<MqttStats> {
        self.stats.clone()
    }

    /// The way the services reach devices through this broker.
    pub fn downlink(&self) -> Arc<dyn Downlink> {
        Arc::new(BrokerDownlink {
            scx: self.scx.clone(),
            topics: self.topics.clone(),
            stats: self.stats.clone(),
            sessions: self.sessions.clone(),
        })
    }

    /// Attaches the hooks over `services` and starts accepting connections; the broker's tasks
    /// are `tasks`.
    pub async fn start(&mut self, services: Arc<Services>, tasks: BrokerTasks) {
        let policy = Policy::new(&services, self.topics.clone());
        let hooks = GantryHooks::new(
            policy.clone(),
            self.downlink(),
            self.stats.clone(),
            self.sessions.clone(),
            self.publish_rate,
            self.transports.clone(),
            tasks.clone(),
        );
        let register = self.scx.extends.hook_mgr().register();
        for hook in [
            Type::ClientAuthenticate,
            Type::ClientSubscribeCheckAcl,
            Type::MessagePublishCheckAcl,
            Type::ClientConnected,
            Type::SessionSubscribed,
            Type::ClientDisconnected,
            Type::ClientKeepalive,
            Type::SessionTerminated,
        ] {
            register.add(hook, Box::new(hooks.clone())).await;
        }
        register.start().await;
        let mut server = MqttServer::new(self.scx.clone());
        // Ids given explicitly (rmqtt would key listeners by their configured port, 0 for both),
        // in the order of `transports`.
        for (id, listener) in self.listeners.drain(..).enumerate() {
            server = server.listener_by_id(listener, id as u16 + 1);
        }
        let server = server.build();
        tasks.spawn_until(async move {
            if let Err(e) = server.run().await {
                tracing::error!(error = %e, "MQTT broker stopped");
            }
        });
        let (scx, sessions) = (self.scx.clone(), self.sessions.clone());
        tasks.spawn_until(async move {
            let mut tick = tokio::time::interval(SWEEP_PERIOD);
            loop {
                tick.tick().await;
                sessions.sweep(&scx, &policy).await;
            }
        });
        self.tasks = Some(tasks);
    }

    /// Stops accepting connections and messages (the tasks' owner waits for those in flight).
    pub fn stop(&mut self) {
        if let Some(tasks) = &self.tasks {
            tasks.stop();
        }
    }
}

impl Drop for EmbeddedBroker {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Publishes into the embedded broker as the system.
struct BrokerDownlink {
    scx: ServerContext,
    topics: Topics,
    stats: Arc<MqttStats>,
    sessions: Arc<Sessions>,
}

#[async_trait]
impl Downlink for BrokerDownlink {
    async fn send(&self, owner: &str, message: &Message) -> gantry_core::Result<()> {
        let payload = serde_json::to_vec(message).map_err(gantry_core::Error::serialization)?;
        let publish = Publish::from(CodecPublish {
            dup: false,
            retain: false,
            qos: QoS::AtLeastOnce,
            topic: self.topics.inbox(owner).into(),
            packet_id: None,
            payload: payload.into(),
            properties: None,
        })
        .create_time(gantry_core::time::now_ms());
        let from = From::from_system(Id::from(self.scx.node.id(), ClientId::from_static("gantry")));
        SessionState::forwards(&self.scx, from, publish, false, None)
            .await
            .map_err(|e| gantry_core::Error::downlink(std::io::Error::other(e.to_string())))?;
        self.stats.messages_out.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }

    async fn disconnect(&self, device: &DeviceId) {
        self.sessions.kick(&self.scx, device.as_str()).await;
        for client in self.sessions.routed_to(device) {
            self.sessions.kick(&self.scx, &client).await;
        }
    }

    async fn expire_session(&self, client: &str, at: i64) {
        if self.sessions.end_at(client, at) {
            self.sessions.kick(&self.scx, client).await;
        }
    }
}
