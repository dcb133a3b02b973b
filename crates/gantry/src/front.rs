//! What takes work from outside, bound before anything runs: the HTTP and HTTPS listeners,
//! TLS, and the MQTT front (the embedded broker or the external broker's client), with the
//! addresses projects advertise and routes hand out.

use std::net::SocketAddr;
use std::time::Duration;

use anyhow::Context;
use gantry_core::PublicAddrs;
use gantry_core::routes::{RouteConfig, RouteListener};
use tokio::net::TcpListener;

use crate::config::{Endpoint, ServeConfig};
use crate::mqtt::{self, MqttFront};
use crate::tasks::Tasks;
use crate::tls;

/// What takes work from outside: the HTTP and HTTPS listeners, TLS, and the MQTT front (the
/// embedded broker or the external broker's client), all bound before anything runs.
pub(crate) struct Front {
    pub(crate) http: Option<TcpListener>,
    pub(crate) https: Option<tls::HttpsListener>,
    pub(crate) http_addr: Option<SocketAddr>,
    pub(crate) https_addr: Option<SocketAddr>,
    pub(crate) tls: Option<tls::Tls>,
    pub(crate) broker: MqttFront,
    /// This node's name among the nodes on one database: its client id on an external broker
    /// and the owner of the webhook leases it takes.
    pub(crate) node: String,
}

impl Front {
    pub(crate) async fn bind(config: &ServeConfig, tasks: &Tasks) -> anyhow::Result<Front> {
        let (http, https) = bind_listeners(config).await?;
        let http_addr = http.as_ref().map(TcpListener::local_addr).transpose()?;
        let embedded = config.mqtt_broker_url.is_none();
        let tls_wanted = config.https_addr.0.is_some()
            || (embedded && (config.mqtts_addr.0.is_some() || config.mqtt_wss_addr.0.is_some()));
        let tls = match tls_wanted {
            true => Some(tls::Tls::prepare(config, &config.tls_names()).context("preparing TLS")?),
            false => None,
        };
        let https = match (https, &tls) {
            (Some(listener), Some(tls)) => Some(tls::HttpsListener::new(
                listener,
                tls.server_config(&[b"http/1.1"])?,
                tasks,
            )?),
            _ => None,
        };
        let https_addr = https.as_ref().map(axum::serve::Listener::local_addr).transpose()?;
        let broker_tls = match &tls {
            Some(tls) if embedded => Some(gantry_mqtt::BrokerTls {
                mqtts_addr: config.mqtts_addr.0,
                wss_addr: config.mqtt_wss_addr.0,
                mqtts: tls.mqtts_config()?,
                wss: tls.server_config(&[])?,
                client_certs: tls.client_certs(),
            }),
            _ => None,
        };
        let node = crate::mqtt::node_id(&config.data_dir)?;
        let broker = MqttFront::open(config, broker_tls, &node).await?;
        Ok(Front {
            http,
            https,
            http_addr,
            https_addr,
            tls,
            broker,
            node,
        })
    }

    /// The addresses projects advertise (the plain listeners, else their TLS twins; see README,
    /// TLS) and where routes send applications.
    pub(crate) fn addresses(&self, config: &ServeConfig) -> anyhow::Result<(PublicAddrs, RouteConfig)> {
        let broker = &self.broker;
        let rest = Endpoint::first(&[("http", self.http_addr), ("https", self.https_addr)])
            .context("the REST API has no listener")?;
        let mq = Endpoint::first(&[
            ("mqtt", broker.tcp_addr()),
            ("mqtts", broker.mqtts_addr()),
            ("ws", broker.ws_addr()),
            ("wss", broker.wss_addr()),
        ])
        .context("the MQTT broker has no listener")?;
        let addrs = PublicAddrs {
            rest: config.public_url(rest),
            mq: config.mq_api_addr(mq),
        };
        let routes = RouteConfig {
            host: config.mqtt_host(mq.addr),
            app: route_listener(config.route_tls(), broker.tcp_addr(), broker.mqtts_addr()),
            web: route_listener(config.route_tls(), broker.ws_addr(), broker.wss_addr()),
            topic_prefix: config.topic_prefix.clone(),
            ttl: Duration::from_secs(config.route_ttl),
        };
        Ok((addrs, routes))
    }
}

/// Binds the HTTP and HTTPS listeners that are on and checks that the embedded broker's
/// addresses are free, so that an operator learns every address in use from one error.
async fn bind_listeners(config: &ServeConfig) -> anyhow::Result<(Option<TcpListener>, Option<TcpListener>)> {
    let mut in_use = Vec::new();
    let mut bind = async |addr: Option<SocketAddr>, what: &str, flags: &str| {
        let addr = addr?;
        match TcpListener::bind(addr).await {
            Ok(listener) => Some(listener),
            Err(e) => {
                in_use.push(format!(
                    "binding {what} on {addr} (move it with {flags}; `off` turns it off): {e}"
                ));
                None
            }
        }
    };
    let http = bind(config.http_addr.0, "HTTP", "--http-addr or GANTRY_HTTP_ADDR").await;
    let https = bind(config.https_addr.0, "HTTPS", "--https-addr or GANTRY_HTTPS_ADDR").await;
    if config.mqtt_broker_url.is_none() {
        in_use.extend(mqtt::addresses_in_use(config));
    }
    if !in_use.is_empty() {
        anyhow::bail!("{}", in_use.join("; "));
    }
    Ok((http, https))
}

/// Where temporary identities of one kind (APP or WEB) connect: with --route-tls the TLS
/// listener alone (never a downgrade to plain); otherwise the plain one, else the TLS one with
/// `sslEnable` true. None: that kind of route is refused.
fn route_listener(route_tls: bool, plain: Option<SocketAddr>, tls: Option<SocketAddr>) -> Option<RouteListener> {
    let secure = tls.map(|a| RouteListener {
        port: a.port(),
        ssl_enable: true,
    });
    if route_tls {
        return secure;
    }
    plain
        .map(|a| RouteListener {
            port: a.port(),
            ssl_enable: false,
        })
        .or(secure)
}
