//! Command line and environment: every flag has a `GANTRY_*` variable; flags win.

use std::net::SocketAddr;
use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

#[derive(Debug, Parser)]
#[command(name = "gantry", version, about = "IoT device management for construction fleets")]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the HTTP API, the MQTT broker and the background work in one process.
    Serve(Box<ServeConfig>),
    /// Simulate a device: connect over MQTT, publish attribute values, answer controls with acks.
    Device(DeviceConfig),
    /// Ask a running server's /healthz: exit 0 when it answers 200, 1 otherwise.
    Healthcheck(crate::healthcheck::HealthcheckConfig),
}

#[derive(Debug, Clone, Args)]
pub struct DeviceConfig {
    /// The broker, `host:port`.
    #[arg(long, default_value = "127.0.0.1:1883")]
    pub broker: String,
    /// The device id (client id and username).
    #[arg(long)]
    pub id: String,
    /// The device's accessToken (the MQTT password).
    #[arg(long)]
    pub token: String,
    /// The topic prefix the server uses.
    #[arg(long, default_value = "gantry")]
    pub topic_prefix: String,
    /// Attributes to publish, `code:Type` with Type one of Integer, Float, String, Boolean.
    #[arg(long = "attr", value_name = "CODE:TYPE")]
    pub attrs: Vec<String>,
    /// Seconds between two publishes.
    #[arg(long, default_value_t = 1.0)]
    pub interval: f64,
    /// Stop after this many publishes (default: run until Ctrl-C).
    #[arg(long)]
    pub count: Option<u64>,
}

#[derive(Debug, Clone, Args)]
pub struct ServeConfig {
    /// Where the embedded database and generated secrets live.
    #[arg(long, env = "GANTRY_DATA_DIR", default_value = "./gantry-data")]
    pub data_dir: PathBuf,
    /// `sqlite://...` or `postgres://...`; default: SQLite in the data dir.
    #[arg(long, env = "GANTRY_DATABASE_URL")]
    pub database_url: Option<String>,
    /// REST API address.
    #[arg(long, env = "GANTRY_HTTP_ADDR", default_value = "0.0.0.0:8080")]
    pub http_addr: SocketAddr,
    /// Embedded MQTT broker, MQTT over TCP.
    #[arg(long, env = "GANTRY_MQTT_ADDR", default_value = "0.0.0.0:1883")]
    pub mqtt_addr: SocketAddr,
    /// Embedded MQTT broker, MQTT over WebSocket (for WEB routes).
    #[arg(long, env = "GANTRY_MQTT_WS_ADDR", default_value = "0.0.0.0:8083")]
    pub mqtt_ws_addr: SocketAddr,
    /// Embedded MQTT broker, MQTT over TLS; `off` turns it off.
    #[arg(long, env = "GANTRY_MQTTS_ADDR", default_value = "0.0.0.0:8883")]
    pub mqtts_addr: Listen,
    /// Embedded MQTT broker, MQTT over secure WebSocket; `off` turns it off.
    #[arg(long, env = "GANTRY_MQTT_WSS_ADDR", default_value = "0.0.0.0:8084")]
    pub mqtt_wss_addr: Listen,
    /// REST API over HTTPS; `off` turns it off.
    #[arg(long, env = "GANTRY_HTTPS_ADDR", default_value = "0.0.0.0:8443")]
    pub https_addr: Listen,
    /// The server certificate (PEM, chain allowed) of every TLS listener; default: one signed by
    /// a private CA generated into `<data-dir>/tls/`.
    #[arg(long, env = "GANTRY_TLS_CERT", requires = "tls_key")]
    pub tls_cert: Option<PathBuf>,
    /// The private key (PEM) of --tls-cert.
    #[arg(long, env = "GANTRY_TLS_KEY", requires = "tls_cert")]
    pub tls_key: Option<PathBuf>,
    /// CA (PEM) of device certificates: a device presenting a certificate it signed, with the
    /// device id as subject CN, logs in over MQTT/TLS without a password.
    #[arg(long, env = "GANTRY_MQTT_CLIENT_CA")]
    pub mqtt_client_ca: Option<PathBuf>,
    /// Routes hand out the TLS ports with `sslEnable` true; default: on with --tls-cert, off
    /// with the generated certificate (browsers do not trust a private CA).
    #[arg(long, env = "GANTRY_ROUTE_TLS", num_args = 0..=1, default_missing_value = "true",
          value_parser = clap::builder::BoolishValueParser::new())]
    pub route_tls: Option<bool>,
    /// Use this external broker instead of the embedded one (scale-out).
    #[arg(long, env = "GANTRY_MQTT_BROKER_URL")]
    pub mqtt_broker_url: Option<String>,
    /// What projects show as `restfulApiAddr`; default derived from --http-addr.
    #[arg(long, env = "GANTRY_PUBLIC_URL")]
    pub public_url: Option<String>,
    /// Host in `mqApiAddr` and in temporary MQTT identities; default derived from --mqtt-addr.
    #[arg(long, env = "GANTRY_PUBLIC_MQTT_HOST")]
    pub public_mqtt_host: Option<String>,
    /// The first level of every MQTT topic.
    #[arg(long, env = "GANTRY_TOPIC_PREFIX", default_value = "gantry")]
    pub topic_prefix: String,
    /// Seconds a control message with needack waits for its ack before it ends in `exception`.
    #[arg(long, env = "GANTRY_ACK_TIMEOUT", default_value_t = 30)]
    pub ack_timeout: u64,
    /// Lifetime in seconds of a route and its temporary identity.
    #[arg(long, env = "GANTRY_ROUTE_TTL", default_value_t = 3600)]
    pub route_ttl: u64,
    /// Delete events that arrived more than this many days ago (checked hourly); default: keep all.
    #[arg(long, env = "GANTRY_EVENT_RETENTION_DAYS")]
    pub event_retention_days: Option<u32>,
    /// Requests per second allowed per bearer token (bursts of twice that); 0 turns the limit off.
    #[arg(long, env = "GANTRY_RATE_LIMIT", default_value_t = 5000)]
    pub rate_limit: u32,
    /// Largest MQTT packet the broker takes, in bytes; a larger CONNECT is refused, a larger
    /// publish closes the connection.
    #[arg(long, env = "GANTRY_MQTT_MAX_PACKET_SIZE", default_value_t = 256 * 1024)]
    pub mqtt_max_packet_size: u32,
    /// Seconds a new MQTT connection has to send its CONNECT before it is closed.
    #[arg(long, env = "GANTRY_MQTT_CONNECT_TIMEOUT", default_value_t = 10)]
    pub mqtt_connect_timeout: u64,
    /// Most entries (`payload.attrs`) an upstream MQTT message may carry; a larger one is refused whole.
    #[arg(long, env = "GANTRY_MQTT_MAX_ATTRIBUTES", default_value_t = gantry_core::telemetry::MAX_ATTRIBUTES)]
    pub mqtt_max_attributes: usize,
    /// Publishes per second one MQTT connection may make (bursts of as many); beyond, its
    /// connection is closed without a PUBACK for the publish over the limit. 0 turns it off.
    #[arg(long, env = "GANTRY_MQTT_PUBLISH_RATE", default_value_t = 100)]
    pub mqtt_publish_rate: u32,
    /// Most MQTT connections held at once, per listener; default: the open-file limit less a
    /// reserve for the store and HTTP.
    #[arg(long, env = "GANTRY_MQTT_MAX_CONNECTIONS")]
    pub mqtt_max_connections: Option<usize>,
    /// Seconds an HTTP client has to send a request's headers, and the next request's on a
    /// kept-alive connection, before the connection is closed.
    #[arg(long, env = "GANTRY_HTTP_HEADER_TIMEOUT", default_value_t = 30)]
    pub http_header_timeout: u64,
    /// Failed logins (HTTP 401, refused MQTT CONNECT) from one address within 60 s that start a ban.
    #[arg(long, env = "GANTRY_LOGIN_FAILURES", default_value_t = 10)]
    pub login_failures: u32,
    /// Seconds a banned address is refused without its credentials being checked; 0 turns bans off.
    #[arg(long, env = "GANTRY_LOGIN_BAN", default_value_t = 60)]
    pub login_ban: u64,
    /// Bootstrap token of the system administrator (environment only); generated when unset.
    #[arg(skip = std::env::var("GANTRY_ADMIN_TOKEN").ok().filter(|t| !t.is_empty()))]
    pub admin_token: Option<String>,
}

impl ServeConfig {
    /// A configuration for tests and embedding: everything on 127.0.0.1 port 0, data in `data_dir`.
    pub fn local(data_dir: PathBuf) -> Self {
        let any: SocketAddr = "127.0.0.1:0".parse().expect("literal address");
        Self {
            data_dir,
            database_url: None,
            http_addr: any,
            mqtt_addr: any,
            mqtt_ws_addr: any,
            mqtts_addr: Listen(Some(any)),
            mqtt_wss_addr: Listen(Some(any)),
            https_addr: Listen(Some(any)),
            tls_cert: None,
            tls_key: None,
            mqtt_client_ca: None,
            route_tls: None,
            mqtt_broker_url: None,
            public_url: None,
            public_mqtt_host: None,
            topic_prefix: "gantry".to_owned(),
            ack_timeout: 30,
            route_ttl: 3600,
            rate_limit: 5000,
            event_retention_days: None,
            mqtt_max_packet_size: 256 * 1024,
            mqtt_connect_timeout: 10,
            mqtt_max_connections: None,
            mqtt_max_attributes: gantry_core::telemetry::MAX_ATTRIBUTES,
            mqtt_publish_rate: 100,
            http_header_timeout: 30,
            login_failures: 10,
            login_ban: 60,
            admin_token: None,
        }
    }

    /// `restfulApiAddr`: --public-url, else `http://<host>:<port>` of the bound HTTP address
    /// (an unspecified host shows as `localhost`).
    pub fn public_url(&self, bound: SocketAddr) -> String {
        self.public_url
            .clone()
            .unwrap_or_else(|| format!("http://{}:{}", host_of(bound), bound.port()))
    }

    /// The MQTT host clients are told to use: --public-mqtt-host, else the bound address.
    pub fn mqtt_host(&self, bound: SocketAddr) -> String {
        self.public_mqtt_host.clone().unwrap_or_else(|| host_of(bound))
    }

    /// Whether routes hand out the TLS ports (see --route-tls).
    pub fn route_tls(&self) -> bool {
        self.route_tls.unwrap_or(self.tls_cert.is_some())
    }

    /// The names a generated server certificate is for: `localhost`, `127.0.0.1`, and the hosts
    /// of --public-mqtt-host and --public-url.
    pub fn tls_names(&self) -> Vec<String> {
        let mut names = vec!["localhost".to_owned(), "127.0.0.1".to_owned()];
        let url_host = self.public_url.as_deref().and_then(url_host);
        for host in [self.public_mqtt_host.as_deref(), url_host] {
            if let Some(host) = host.map(|h| h.trim_matches(['[', ']'])).filter(|h| !h.is_empty())
                && !names.iter().any(|n| n.eq_ignore_ascii_case(host))
            {
                names.push(host.to_owned());
            }
        }
        names
    }

    /// `mqApiAddr`: `mqtt://<public mqtt host>:<port of the bound MQTT listener>`.
    pub fn mq_api_addr(&self, bound: SocketAddr) -> String {
        format!("mqtt://{}:{}", self.mqtt_host(bound), bound.port())
    }
}

/// A listener's address, or `off`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Listen(pub Option<SocketAddr>);

impl std::str::FromStr for Listen {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        if s.eq_ignore_ascii_case("off") {
            return Ok(Listen(None));
        }
        s.parse()
            .map(|addr| Listen(Some(addr)))
            .map_err(|_| format!("`{s}` is neither host:port (say 0.0.0.0:8883) nor `off`"))
    }
}

/// The host of a URL such as `https://gantry.example.com:8443/api`.
fn url_host(url: &str) -> Option<&str> {
    let rest = url.split_once("://").map_or(url, |(_, rest)| rest);
    let authority = rest.split(['/', '?', '#']).next()?;
    let authority = authority.rsplit_once('@').map_or(authority, |(_, host)| host);
    if let Some(v6) = authority.strip_prefix('[') {
        return v6.split_once(']').map(|(host, _)| host);
    }
    Some(authority.split_once(':').map_or(authority, |(host, _)| host))
}

fn host_of(addr: SocketAddr) -> String {
    if addr.ip().is_unspecified() {
        "localhost".to_owned()
    } else {
        addr.ip().to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_listener_is_an_address_or_off() {
        assert_eq!("off".parse::<Listen>().unwrap(), Listen(None));
        assert_eq!(
            "127.0.0.1:8883".parse::<Listen>().unwrap(),
            Listen(Some("127.0.0.1:8883".parse().unwrap()))
        );
        assert!("8883".parse::<Listen>().unwrap_err().contains("`8883`"));
    }

    #[test]
    fn the_certificate_names_the_public_hosts() {
        let mut config = ServeConfig::local(PathBuf::from("/nonexistent"));
        assert_eq!(config.tls_names(), ["localhost", "127.0.0.1"]);
        config.public_mqtt_host = Some("mqtt.example.com".to_owned());
        config.public_url = Some("https://api.example.com:8443/base".to_owned());
        assert_eq!(
            config.tls_names(),
            ["localhost", "127.0.0.1", "mqtt.example.com", "api.example.com"]
        );
        config.public_url = Some("http://[2001:db8::1]:8080".to_owned());
        config.public_mqtt_host = Some("localhost".to_owned());
        assert_eq!(config.tls_names(), ["localhost", "127.0.0.1", "2001:db8::1"]);
    }

    #[test]
    fn routes_use_tls_by_default_only_with_an_operator_certificate() {
        let mut config = ServeConfig::local(PathBuf::from("/nonexistent"));
        assert!(!config.route_tls());
        config.tls_cert = Some(PathBuf::from("cert.pem"));
        assert!(config.route_tls());
        config.route_tls = Some(false);
        assert!(!config.route_tls());
    }
}
