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
    Serve(ServeConfig),
    /// Simulate a device: connect over MQTT, publish attribute values, answer controls with acks.
    Device(DeviceConfig),
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
    /// Most MQTT connections held at once, per listener; default: the open-file limit less a
    /// reserve for the store and HTTP.
    #[arg(long, env = "GANTRY_MQTT_MAX_CONNECTIONS")]
    pub mqtt_max_connections: Option<usize>,
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

    /// `mqApiAddr`: `mqtt://<public mqtt host>:<port of the bound MQTT listener>`.
    pub fn mq_api_addr(&self, bound: SocketAddr) -> String {
        format!("mqtt://{}:{}", self.mqtt_host(bound), bound.port())
    }
}

fn host_of(addr: SocketAddr) -> String {
    if addr.ip().is_unspecified() {
        "localhost".to_owned()
    } else {
        addr.ip().to_string()
    }
}
