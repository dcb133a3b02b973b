//! Command line, environment and config file: every `serve` flag has a `GANTRY_*` variable and
//! a key in the `--config` TOML file; a flag wins over its variable, which wins over the file,
//! which wins over the built-in default.

use std::ffi::OsString;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use anyhow::Context;
use clap::{Args, CommandFactory, FromArgMatches, Parser, Subcommand};

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
    /// Manage a running Gantry over its REST API: tenants, projects, models, devices, events.
    Admin(Box<crate::admin::AdminArgs>),
    /// Print the shell completion script of `gantry` (bash, zsh or fish) to stdout.
    Completions(crate::admin::CompletionsArgs),
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
    /// A TOML file setting any of these flags by their long names (`http-addr = "0.0.0.0:8080"`);
    /// flags and variables win over it.
    #[arg(long, env = "GANTRY_CONFIG")]
    pub config: Option<PathBuf>,
    /// Where the embedded database and generated secrets live.
    #[arg(long, env = "GANTRY_DATA_DIR", default_value = "./gantry-data")]
    pub data_dir: PathBuf,
    /// How log lines are written: `text`, or `json` (one object per line).
    #[arg(long, env = "GANTRY_LOG_FORMAT", value_enum, default_value = "text")]
    pub log_format: crate::logging::LogFormat,
    /// `sqlite://...` or `postgres://...`; default: SQLite in the data dir.
    #[arg(long, env = "GANTRY_DATABASE_URL")]
    pub database_url: Option<String>,
    /// REST API over HTTP; `off` turns it off.
    #[arg(long, env = "GANTRY_HTTP_ADDR", default_value = "0.0.0.0:8080")]
    pub http_addr: Listen,
    /// Embedded MQTT broker, MQTT over TCP; `off` turns it off.
    #[arg(long, env = "GANTRY_MQTT_ADDR", default_value = "0.0.0.0:1883")]
    pub mqtt_addr: Listen,
    /// Embedded MQTT broker, MQTT over WebSocket (for WEB routes); `off` turns it off.
    #[arg(long, env = "GANTRY_MQTT_WS_ADDR", default_value = "0.0.0.0:8083")]
    pub mqtt_ws_addr: Listen,
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
    /// With an external broker: seconds without a message from a device after which its next
    /// message counts as a connect (its waiting controls and desired values are sent then).
    #[arg(long, env = "GANTRY_PRESENCE_SILENCE", default_value_t = 60)]
    pub presence_silence: u64,
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
    /// Seconds a client may leave the server's writes waiting (it stopped reading: a push stream
    /// it no longer follows, say) before its connection is closed.
    #[arg(long, env = "GANTRY_HTTP_WRITE_TIMEOUT", default_value_t = 30)]
    pub http_write_timeout: u64,
    /// Webhooks one project may hold.
    #[arg(long, env = "GANTRY_WEBHOOKS_PER_PROJECT", default_value_t = 20)]
    pub webhooks_per_project: u64,
    /// User accounts one tenant may hold.
    #[arg(long, env = "GANTRY_USERS_PER_TENANT", default_value_t = gantry_core::users::DEFAULT_USERS_PER_TENANT)]
    pub users_per_tenant: u64,
    /// Alarm rules one device model may hold.
    #[arg(long, env = "GANTRY_ALARM_RULES_PER_MODEL", default_value_t = gantry_core::alarms::DEFAULT_ALARM_RULES_PER_MODEL)]
    pub alarm_rules_per_model: u64,
    /// Controls (`ttlSeconds`) one device may have waiting for its connect.
    #[arg(long, env = "GANTRY_WAITING_CONTROLS_PER_DEVICE", default_value_t = gantry_core::control::DEFAULT_WAITING_CONTROLS_PER_DEVICE)]
    pub waiting_controls_per_device: u64,
    /// Push streams open at once on one project.
    #[arg(long, env = "GANTRY_STREAM_SUBSCRIBERS_PER_PROJECT", default_value_t = 1000)]
    pub stream_subscribers_per_project: usize,
    /// Push streams open at once with one token (one tenant's administrator, one application,
    /// one device).
    #[arg(long, env = "GANTRY_STREAM_SUBSCRIBERS_PER_TOKEN", default_value_t = 100)]
    pub stream_subscribers_per_token: usize,
    /// Megabytes the push streams' replay buffers may hold in all; past it the oldest feeds are
    /// dropped (their streams end, and a reconnect is told `reset`).
    #[arg(long, env = "GANTRY_STREAM_REPLAY_MEMORY_MB", default_value_t = 256)]
    pub stream_replay_memory_mb: u64,
    /// Failed logins (HTTP 401, refused MQTT CONNECT) from one address within 60 s that start a ban.
    #[arg(long, env = "GANTRY_LOGIN_FAILURES", default_value_t = 10)]
    pub login_failures: u32,
    /// Seconds a banned address is refused without its credentials being checked; 0 turns bans off.
    #[arg(long, env = "GANTRY_LOGIN_BAN", default_value_t = 60)]
    pub login_ban: u64,
    /// Seconds a user's sign-in session lasts after its last use.
    #[arg(long, env = "GANTRY_SESSION_TTL", default_value_t = 12 * 3600)]
    pub session_ttl: u64,
    /// Seconds after its sign-in that a session ends however much it is used.
    #[arg(long, env = "GANTRY_SESSION_MAX_AGE", default_value_t = 7 * 86_400)]
    pub session_max_age: u64,
    /// Days the audit log keeps a record (checked hourly); 0 keeps every record.
    #[arg(long, env = "GANTRY_AUDIT_RETENTION_DAYS", default_value_t = 90)]
    pub audit_retention_days: u32,
    /// Webhook URLs may name loopback, private, link-local and metadata addresses (and names
    /// that resolve to them); refused otherwise.
    #[arg(long, env = "GANTRY_WEBHOOK_ALLOW_PRIVATE", num_args = 0..=1, default_missing_value = "true",
          default_value_t = false, value_parser = clap::builder::BoolishValueParser::new())]
    pub webhook_allow_private: bool,
    /// First wait, in milliseconds, before a failed webhook delivery is retried (it doubles
    /// with each try). For tests; not documented.
    #[arg(long, env = "GANTRY_WEBHOOK_RETRY_BASE_MS", default_value_t = 5000, hide = true)]
    pub webhook_retry_base_ms: u64,
    /// A map tile URL template (`https://tiles.example/{z}/{x}/{y}.png`) for the console's
    /// overview map; unset, the map is a plain SVG plot that needs no network. The console's
    /// Content-Security-Policy lets images in from the template's origin.
    #[arg(long, env = "GANTRY_CONSOLE_MAP_TILES")]
    pub console_map_tiles: Option<String>,
    /// Bootstrap token of the system administrator (environment only); generated when unset.
    #[arg(skip = std::env::var("GANTRY_ADMIN_TOKEN").ok().filter(|t| !t.is_empty()))]
    pub admin_token: Option<String>,
}

impl ServeConfig {
    /// A configuration for tests and embedding: everything on 127.0.0.1 port 0, data in `data_dir`.
    pub fn local(data_dir: PathBuf) -> Self {
        let any: SocketAddr = "127.0.0.1:0".parse().expect("literal address");
        Self {
            config: None,
            data_dir,
            log_format: crate::logging::LogFormat::Text,
            database_url: None,
            http_addr: Listen(Some(any)),
            mqtt_addr: Listen(Some(any)),
            mqtt_ws_addr: Listen(Some(any)),
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
            presence_silence: 60,
            route_ttl: 3600,
            rate_limit: 5000,
            event_retention_days: None,
            mqtt_max_packet_size: 256 * 1024,
            mqtt_connect_timeout: 10,
            mqtt_max_connections: None,
            mqtt_max_attributes: gantry_core::telemetry::MAX_ATTRIBUTES,
            mqtt_publish_rate: 100,
            http_header_timeout: 30,
            http_write_timeout: 30,
            webhooks_per_project: 20,
            users_per_tenant: gantry_core::users::DEFAULT_USERS_PER_TENANT,
            alarm_rules_per_model: gantry_core::alarms::DEFAULT_ALARM_RULES_PER_MODEL,
            waiting_controls_per_device: gantry_core::control::DEFAULT_WAITING_CONTROLS_PER_DEVICE,
            stream_subscribers_per_project: 1000,
            stream_subscribers_per_token: 100,
            stream_replay_memory_mb: 256,
            login_failures: 10,
            login_ban: 60,
            session_ttl: 12 * 3600,
            session_max_age: 7 * 86_400,
            audit_retention_days: 90,
            webhook_allow_private: false,
            webhook_retry_base_ms: 5000,
            console_map_tiles: None,
            admin_token: None,
        }
    }

    /// `restfulApiAddr`: --public-url, else `http://<host>:<port>` of the bound HTTP address, or
    /// `https://...` of the HTTPS one when plain HTTP is off (an unspecified host shows as
    /// `localhost`).
    pub fn public_url(&self, rest: Endpoint) -> String {
        self.public_url
            .clone()
            .unwrap_or_else(|| format!("{}://{}:{}", rest.scheme, host_of(rest.addr), rest.addr.port()))
    }

    /// Refuses a configuration that leaves the REST API, or the embedded broker, with no
    /// listener at all: such a server could not be reached. With an external broker
    /// (--mqtt-broker-url) devices connect there, so the MQTT listeners may all be off.
    pub fn check_listeners(&self) -> anyhow::Result<()> {
        if self.http_addr.0.is_none() && self.https_addr.0.is_none() {
            anyhow::bail!(
                "the REST API has no listener: --http-addr (GANTRY_HTTP_ADDR) and --https-addr \
                 (GANTRY_HTTPS_ADDR) are both `off`; give one of them an address"
            );
        }
        let mqtt = [self.mqtt_addr, self.mqtts_addr, self.mqtt_ws_addr, self.mqtt_wss_addr];
        if self.mqtt_broker_url.is_none() && mqtt.iter().all(|l| l.0.is_none()) {
            anyhow::bail!(
                "devices have no MQTT listener: --mqtt-addr (GANTRY_MQTT_ADDR), --mqtts-addr \
                 (GANTRY_MQTTS_ADDR), --mqtt-ws-addr (GANTRY_MQTT_WS_ADDR) and --mqtt-wss-addr \
                 (GANTRY_MQTT_WSS_ADDR) are all `off`; give one of them an address"
            );
        }
        Ok(())
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

    /// `mqApiAddr`: `<scheme>://<public mqtt host>:<port>` of the listener devices use (see
    /// `Application::build`: plain MQTT, else MQTT/TLS, else a WebSocket one).
    pub fn mq_api_addr(&self, mq: Endpoint) -> String {
        format!("{}://{}:{}", mq.scheme, self.mqtt_host(mq.addr), mq.addr.port())
    }
}

/// A bound listener as clients are told of it: `scheme://addr`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Endpoint {
    pub scheme: &'static str,
    pub addr: SocketAddr,
}

impl Endpoint {
    /// The first listener that is on, in the order given.
    pub fn first(candidates: &[(&'static str, Option<SocketAddr>)]) -> Option<Endpoint> {
        candidates
            .iter()
            .find_map(|&(scheme, addr)| addr.map(|addr| Endpoint { scheme, addr }))
    }
}

/// The command line of this process, with `serve`'s --config file applied.
pub fn parse() -> Cli {
    parse_from(std::env::args_os()).unwrap_or_else(|e| match e.downcast::<clap::Error>() {
        Ok(clap) => clap.exit(),
        Err(e) => {
            eprintln!("gantry: {e:#}");
            std::process::exit(2)
        }
    })
}

/// Parses `args`; for `serve` with --config (or GANTRY_CONFIG), the file's values become the
/// flags' defaults, so that the command line and the environment still win over them.
pub fn parse_from(args: impl IntoIterator<Item = impl Into<OsString>>) -> anyhow::Result<Cli> {
    let args: Vec<OsString> = args.into_iter().map(Into::into).collect();
    let matches = Cli::command().try_get_matches_from(&args)?;
    let file = match matches.subcommand() {
        Some(("serve", serve)) => serve.get_one::<PathBuf>("config").cloned(),
        _ => None,
    };
    let Some(file) = file else {
        return Ok(Cli::from_arg_matches(&matches)?);
    };
    let mut command = Cli::command();
    let serve = command
        .find_subcommand_mut("serve")
        .expect("the serve subcommand exists");
    *serve = with_file_defaults(std::mem::take(serve), &file)?;
    Ok(Cli::from_arg_matches(&command.try_get_matches_from(&args)?)?)
}

/// `serve` with the values of the TOML file `path` as its flags' defaults. Each key must be a
/// flag's long name, each value a string, number or boolean the flag accepts.
fn with_file_defaults(mut serve: clap::Command, path: &Path) -> anyhow::Result<clap::Command> {
    let text = std::fs::read_to_string(path).with_context(|| format!("reading the config file {}", path.display()))?;
    let table: toml::Table = text
        .parse()
        .with_context(|| format!("the config file {} is not valid TOML", path.display()))?;
    for (key, value) in table {
        let known = serve
            .get_arguments()
            .find(|a| a.get_long() == Some(key.as_str()) && key != "config")
            .map(|a| a.get_id().clone());
        let Some(id) = known else {
            anyhow::bail!(
                "{}: unknown key `{key}` (keys are the long names of `gantry serve` flags, such as http-addr)",
                path.display()
            );
        };
        let value = match value {
            toml::Value::String(s) => s,
            toml::Value::Integer(i) => i.to_string(),
            toml::Value::Float(f) => f.to_string(),
            toml::Value::Boolean(b) => b.to_string(),
            other => anyhow::bail!(
                "{}: `{key}` must be a string, number or boolean, not {}",
                path.display(),
                other.type_str()
            ),
        };
        // Checked here, by the flag alone, so that a bad value names the file and the key
        // rather than a flag nobody typed.
        let arg = serve.get_arguments().find(|a| a.get_id() == &id).expect("found above");
        let reset = clap::builder::Resettable::<clap::Id>::Reset;
        let alone = arg.clone().env(None).requires(reset).default_value(None);
        if let Err(e) = clap::Command::new("gantry")
            .no_binary_name(true)
            .arg(alone)
            .try_get_matches_from([format!("--{key}={value}")])
        {
            let text = e.to_string();
            let first = text.lines().next().unwrap_or_default();
            anyhow::bail!("{}: `{key}`: {}", path.display(), first.trim_start_matches("error: "));
        }
        serve = serve.mut_arg(id, |a| a.default_value(value));
    }
    Ok(serve)
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
    fn a_server_without_a_rest_or_mqtt_listener_is_refused() {
        let mut config = ServeConfig::local(PathBuf::from("/nonexistent"));
        config.http_addr = Listen(None);
        config.mqtt_addr = Listen(None);
        config.mqtt_ws_addr = Listen(None);
        config.check_listeners().expect("HTTPS, MQTT/TLS and WSS remain");
        config.https_addr = Listen(None);
        let text = config.check_listeners().unwrap_err().to_string();
        assert!(
            text.contains("--http-addr") && text.contains("GANTRY_HTTPS_ADDR"),
            "{text}"
        );
        config.https_addr = Listen(Some("127.0.0.1:0".parse().unwrap()));
        config.mqtts_addr = Listen(None);
        config.mqtt_wss_addr = Listen(None);
        let text = config.check_listeners().unwrap_err().to_string();
        assert!(
            text.contains("--mqtt-addr") && text.contains("GANTRY_MQTT_WSS_ADDR"),
            "{text}"
        );
        config.mqtt_broker_url = Some("mqtt://broker:1883".to_owned());
        config
            .check_listeners()
            .expect("devices connect to the external broker");
    }

    fn serve_config(args: &[&str]) -> anyhow::Result<ServeConfig> {
        let args = ["gantry", "serve"].iter().chain(args);
        match parse_from(args)?.command {
            Command::Serve(config) => Ok(*config),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_config_file_sets_defaults_that_flags_override() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("gantry.toml");
        std::fs::write(
            &file,
            "http-addr = \"127.0.0.1:9080\"\nmqtt-addr = \"127.0.0.1:9883\"\nhttps-addr = \"off\"\n\
             login-ban = 5\nroute-tls = true\ntopic-prefix = \"site7\"\n",
        )
        .unwrap();
        let path = file.to_str().unwrap();
        let config = serve_config(&["--config", path, "--mqtt-addr", "127.0.0.1:1999"]).unwrap();
        assert_eq!(config.http_addr, "127.0.0.1:9080".parse().unwrap());
        assert_eq!(config.mqtt_addr, "127.0.0.1:1999".parse().unwrap(), "the flag wins");
        assert_eq!(config.https_addr, Listen(None));
        assert_eq!((config.login_ban, config.route_tls), (5, Some(true)));
        assert_eq!(config.topic_prefix, "site7");
        assert_eq!(
            config.login_failures, 10,
            "the built-in default where the file is silent"
        );
        let plain = serve_config(&[]).unwrap();
        assert_eq!(plain.http_addr, "0.0.0.0:8080".parse().unwrap(), "no file, no change");
    }

    #[test]
    fn a_config_file_with_an_unknown_key_or_a_bad_value_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("gantry.toml");
        let path = file.to_str().unwrap();
        for (text, expected) in [
            ("htp-addr = \"127.0.0.1:0\"", "unknown key `htp-addr`"),
            ("config = \"other.toml\"", "unknown key `config`"),
            ("login-ban = \"soon\"", "`login-ban`"),
            ("login-ban = [1]", "`login-ban` must be a string, number or boolean"),
            ("http-addr = ", "not valid TOML"),
        ] {
            std::fs::write(&file, text).unwrap();
            let error = format!("{:#}", serve_config(&["--config", path]).unwrap_err());
            assert!(error.contains(expected) && error.contains(path), "{text}: {error}");
        }
        let missing = format!(
            "{:#}",
            serve_config(&["--config", "/nonexistent/gantry.toml"]).unwrap_err()
        );
        assert!(missing.contains("/nonexistent/gantry.toml"), "{missing}");
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
