//! The MQTT side of a node: the embedded broker, or a client of an external one (scale-out).

use std::net::{SocketAddr, ToSocketAddrs};
use std::path::Path;
use std::sync::Arc;

use anyhow::Context;
use gantry_core::Services;
use gantry_core::downlink::Downlink;
use gantry_mqtt::{BrokerConfig, BrokerTasks, BrokerTls, EmbeddedBroker, ExternalBroker, MqttStats, Topics};

use crate::config::ServeConfig;

pub enum MqttFront {
    Embedded(EmbeddedBroker),
    External {
        broker: Box<ExternalBroker>,
        addr: SocketAddr,
        ws_port: Option<u16>,
        mqtts_port: Option<u16>,
        wss_port: Option<u16>,
    },
}

impl MqttFront {
    /// Binds the embedded broker's listeners (the TLS ones with `tls`), or prepares the client
    /// of `--mqtt-broker-url`, named after the node `node` (`node_id`).
    pub async fn open(config: &ServeConfig, tls: Option<BrokerTls>, node: &str) -> anyhow::Result<Self> {
        let topics = Topics::new(&config.topic_prefix);
        match &config.mqtt_broker_url {
            None => {
                let broker_config = BrokerConfig {
                    tcp_addr: config.mqtt_addr.0,
                    ws_addr: config.mqtt_ws_addr.0,
                    tls,
                    topics,
                    limits: gantry_mqtt::BrokerLimits {
                        max_packet_size: config.mqtt_max_packet_size,
                        connect_timeout: std::time::Duration::from_secs(config.mqtt_connect_timeout),
                        publishes_per_second: config.mqtt_publish_rate,
                        max_connections: config
                            .mqtt_max_connections
                            .unwrap_or_else(crate::limits::default_max_connections),
                    },
                };
                Ok(MqttFront::Embedded(EmbeddedBroker::bind(&broker_config).await?))
            }
            Some(url) => {
                let client_id = format!("gantry-{node}");
                let mut broker = Box::new(ExternalBroker::new(url, topics, &client_id)?);
                broker.set_presence_silence(std::time::Duration::from_secs(config.presence_silence));
                broker.set_transport_ports(
                    config.mqtts_addr.0.map(|a| a.port()),
                    config.mqtt_ws_addr.0.map(|a| a.port()),
                    config.mqtt_wss_addr.0.map(|a| a.port()),
                );
                let addr = (broker.host(), broker.port())
                    .to_socket_addrs()
                    .with_context(|| format!("resolving {url}"))?
                    .next()
                    .with_context(|| format!("{url} resolves to no address"))?;
                Ok(MqttFront::External {
                    broker,
                    addr,
                    ws_port: config.mqtt_ws_addr.0.map(|a| a.port()),
                    mqtts_port: config.mqtts_addr.0.map(|a| a.port()),
                    wss_port: config.mqtt_wss_addr.0.map(|a| a.port()),
                })
            }
        }
    }

    /// Where devices connect over MQTT/TCP, when on (an external broker's is always on).
    pub fn tcp_addr(&self) -> Option<SocketAddr> {
        match self {
            MqttFront::Embedded(broker) => broker.tcp_addr(),
            MqttFront::External { addr, .. } => Some(*addr),
        }
    }

    /// Where web pages connect over MQTT/WebSocket, when on (for an external broker, the port
    /// of --mqtt-ws-addr is taken as its WebSocket port).
    pub fn ws_addr(&self) -> Option<SocketAddr> {
        match self {
            MqttFront::Embedded(broker) => broker.ws_addr(),
            MqttFront::External { addr, ws_port, .. } => ws_port.map(|p| SocketAddr::new(addr.ip(), p)),
        }
    }

    /// Where devices connect over MQTT/TLS, when on (for an external broker, the port of
    /// --mqtts-addr is taken as its TLS port).
    pub fn mqtts_addr(&self) -> Option<SocketAddr> {
        match self {
            MqttFront::Embedded(broker) => broker.mqtts_addr(),
            MqttFront::External { addr, mqtts_port, .. } => mqtts_port.map(|p| SocketAddr::new(addr.ip(), p)),
        }
    }

    /// Where web pages connect over MQTT/WSS, when on (for an external broker, the port of
    /// --mqtt-wss-addr).
    pub fn wss_addr(&self) -> Option<SocketAddr> {
        match self {
            MqttFront::Embedded(broker) => broker.wss_addr(),
            MqttFront::External { addr, wss_port, .. } => wss_port.map(|p| SocketAddr::new(addr.ip(), p)),
        }
    }

    pub fn downlink(&self) -> Arc<dyn Downlink> {
        match self {
            MqttFront::Embedded(broker) => broker.downlink(),
            MqttFront::External { broker, .. } => broker.downlink(),
        }
    }

    pub fn stats(&self) -> Arc<MqttStats> {
        match self {
            MqttFront::Embedded(broker) => broker.stats(),
            MqttFront::External { broker, .. } => broker.stats(),
        }
    }

    /// Whether the device sessions live in this process (so none outlives it).
    pub fn is_embedded(&self) -> bool {
        matches!(self, MqttFront::Embedded(_))
    }

    /// Starts taking connections and messages; the broker's tasks are `tasks`.
    pub async fn start(&mut self, services: Arc<Services>, tasks: BrokerTasks) -> anyhow::Result<()> {
        match self {
            MqttFront::Embedded(broker) => {
                // No session outlives the process: those recorded as on ended with it.
                let ended = services.presence.end_all_sessions().await?;
                if ended > 0 {
                    tracing::info!(devices = ended, "device sessions of the last run recorded as ended");
                }
                broker.start(services, tasks).await;
                Ok(())
            }
            MqttFront::External { broker, .. } => broker.start(services, tasks).await,
        }
    }

    /// The plain listeners that are on, as `mqtt://A and ws://B` (tests and scripts read the
    /// first); for an external broker, its address.
    pub fn describe(&self) -> Option<String> {
        let MqttFront::Embedded(broker) = self else {
            return Some(format!("the external broker mqtt://{}", self.tcp_addr()?));
        };
        join_listeners(&[("mqtt", broker.tcp_addr()), ("ws", broker.ws_addr())])
    }

    /// The embedded broker's TLS listeners that are on, as `mqtts://A and wss://B`.
    pub fn describe_tls(&self) -> Option<String> {
        let MqttFront::Embedded(broker) = self else {
            return None;
        };
        join_listeners(&[("mqtts", broker.mqtts_addr()), ("wss", broker.wss_addr())])
    }
}

/// The embedded broker's addresses that another process holds, each as the broker's binding
/// would tell it. A probe, before the broker binds: it sets SO_REUSEADDR as the broker does, so a
/// port held only by the last run's closed connections is not taken for one in use.
pub(crate) fn addresses_in_use(config: &ServeConfig) -> Vec<String> {
    let listeners = [
        (config.mqtt_addr.0, "MQTT", "--mqtt-addr or GANTRY_MQTT_ADDR"),
        (
            config.mqtt_ws_addr.0,
            "MQTT/WebSocket",
            "--mqtt-ws-addr or GANTRY_MQTT_WS_ADDR",
        ),
        (config.mqtts_addr.0, "MQTT/TLS", "--mqtts-addr or GANTRY_MQTTS_ADDR"),
        (
            config.mqtt_wss_addr.0,
            "MQTT/WSS",
            "--mqtt-wss-addr or GANTRY_MQTT_WSS_ADDR",
        ),
    ];
    listeners
        .into_iter()
        .filter_map(|(addr, what, flags)| {
            let addr = addr.filter(|a| a.port() != 0)?;
            let error = probe(addr).err()?;
            Some(format!(
                "binding {what} on {addr} (move it with {flags}; `off` turns it off): {error}"
            ))
        })
        .collect()
}

fn probe(addr: SocketAddr) -> std::io::Result<()> {
    let socket = match addr {
        SocketAddr::V4(_) => tokio::net::TcpSocket::new_v4()?,
        SocketAddr::V6(_) => tokio::net::TcpSocket::new_v6()?,
    };
    socket.set_reuseaddr(true)?;
    socket.bind(addr)?;
    socket.listen(1).map(drop)
}

/// `scheme://addr` of each listener that is on, joined by "and"; None when all are off.
fn join_listeners(listeners: &[(&str, Option<SocketAddr>)]) -> Option<String> {
    let parts: Vec<String> = listeners
        .iter()
        .filter_map(|(scheme, addr)| addr.map(|a| format!("{scheme}://{a}")))
        .collect();
    (!parts.is_empty()).then(|| parts.join(" and "))
}

/// This node's stable name, kept in the data dir: the external broker keeps the node's session
/// (and the messages it has not acknowledged) under it across restarts, and the webhook leases
/// are taken in it.
pub(crate) fn node_id(data_dir: &Path) -> anyhow::Result<String> {
    let path = data_dir.join("node-id");
    if let Ok(id) = std::fs::read_to_string(&path)
        && !id.trim().is_empty()
    {
        return Ok(id.trim().to_owned());
    }
    let id = uuid::Uuid::new_v4().simple().to_string();
    crate::data_dir::write_private(&path, &id)?;
    Ok(id)
}
