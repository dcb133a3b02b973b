//! `spawn_app()` and a small client that speaks the envelope.

use std::path::PathBuf;
use std::time::Duration;

use gantry::Application;
use gantry::config::ServeConfig;
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};
use tokio::sync::oneshot;

pub struct TestApp {
    /// The REST API's base URL: plain HTTP, or HTTPS when plain HTTP is off (`client` then
    /// trusts the generated CA).
    pub base: String,
    /// The embedded broker's MQTT/TCP address (`UNBOUND` when off).
    pub mqtt: std::net::SocketAddr,
    /// The embedded broker's MQTT/WebSocket address (`UNBOUND` when off).
    pub mqtt_ws: std::net::SocketAddr,
    /// The TLS listeners, when on: MQTT over TLS, MQTT over WSS, HTTPS.
    pub mqtts: Option<std::net::SocketAddr>,
    pub mqtt_wss: Option<std::net::SocketAddr>,
    pub https: Option<std::net::SocketAddr>,
    /// The generated CA's certificate, when the server made its own.
    pub tls_ca: Option<PathBuf>,
    pub admin: String,
    pub client: reqwest::Client,
    pub data_dir: PathBuf,
    /// The store's URL (SQLite in the data dir, or the fresh PostgreSQL database).
    database_url: String,
    dir: Option<tempfile::TempDir>,
    stop: Option<oneshot::Sender<()>>,
    server: Option<tokio::task::JoinHandle<anyhow::Result<()>>>,
}

/// A response: status and parsed JSON body (Null when the body is not JSON).
#[derive(Debug)]
pub struct Reply {
    pub status: StatusCode,
    pub body: Value,
}

impl Reply {
    /// The `result` of a successful response; panics with the body otherwise.
    pub fn result(self) -> Value {
        assert_eq!(self.status, StatusCode::OK, "{}", self.body);
        assert_eq!(self.body["returnCode"], 0, "{}", self.body);
        self.body["result"].clone()
    }

    /// Asserts a success that carries only `returnCode` 0.
    pub fn result_done(self) {
        assert_eq!(self.status, StatusCode::OK, "{}", self.body);
        assert_eq!(self.body, json!({"returnCode": 0}));
    }

    /// Asserts an error response of `status`, non-zero returnCode and a message; returns the message.
    pub fn error(self, status: u16) -> String {
        assert_eq!(self.status.as_u16(), status, "{}", self.body);
        let code = self.body["returnCode"].as_i64().unwrap_or(0);
        assert_ne!(code, 0, "{}", self.body);
        let message = self.body["message"].as_str().unwrap_or_default().to_owned();
        assert!(!message.is_empty(), "{}", self.body);
        message
    }
}

/// Stands for a listener that is off or unknown: nothing can connect to port 0.
pub const UNBOUND: std::net::SocketAddr =
    std::net::SocketAddr::new(std::net::IpAddr::V4(std::net::Ipv4Addr::LOCALHOST), 0);
/// The value of `name`, for a test marked `#[ignore = "needs <name> ..."]`: `cargo test` reports
/// such a test as ignored, and `-- --include-ignored` runs it; then a missing variable fails it
/// with this message rather than letting it pass untested.
pub fn required_var(name: &str, example: &str) -> String {
    std::env::var(name)
        .ok()
        .filter(|v| !v.is_empty())
        .unwrap_or_else(|| panic!("{name} is not set: this test needs it (say {name}={example})"))
}

/// Says on the terminal that a test skipped its checks (what it needs is missing at run time).
/// Written to stderr directly: the test harness captures `eprintln!` of a passing test.
pub fn say_skipped(test: &str, reason: &str) {
    use std::io::Write;
    let _ = writeln!(std::io::stderr(), "SKIPPED {test}: {reason}");
}

pub async fn spawn_app() -> TestApp {
    spawn_app_with(|_| {}).await
}

/// `spawn_app` with the configuration adjusted by `adjust` (say, a short ack timeout).
pub async fn spawn_app_with(adjust: impl FnOnce(&mut ServeConfig)) -> TestApp {
    let dir = tempfile::tempdir().expect("temp dir");
    let admin = format!("test-admin-{}", uuid::Uuid::new_v4().simple());
    let mut config = ServeConfig::local(dir.path().to_path_buf());
    config.admin_token = Some(admin.clone());
    config.database_url = fresh_postgres_database().await;
    adjust(&mut config);
    spawn_with(config, dir, admin).await
}

pub async fn spawn_with(config: ServeConfig, dir: tempfile::TempDir, admin: String) -> TestApp {
    let data_dir = config.data_dir.clone();
    let database_url = config
        .database_url
        .clone()
        .unwrap_or_else(|| gantry::store::sqlite_url(&data_dir));
    let app = Application::build(config).await.expect("application builds");
    let mqtt = app.mqtt_addr().unwrap_or(UNBOUND);
    let mqtt_ws = app.mqtt_ws_addr().unwrap_or(UNBOUND);
    let (mqtts, mqtt_wss, https) = (app.mqtts_addr(), app.mqtt_wss_addr(), app.https_addr());
    let tls_ca = app.tls_ca().map(|p| p.to_path_buf());
    let (base, client) = match (app.http_addr(), https) {
        (Some(http), _) => (format!("http://{http}"), reqwest::Client::new()),
        (None, Some(https)) => {
            let ca = tls_ca.as_ref().expect("HTTPS alone is tested with the generated CA");
            (format!("https://localhost:{}", https.port()), https_client(ca))
        }
        (None, None) => unreachable!("a server without a REST listener does not build"),
    };
    let (stop, stopped) = oneshot::channel::<()>();
    let server = tokio::spawn(app.run_until(async {
        let _ = stopped.await;
    }));
    TestApp {
        base,
        mqtt,
        mqtt_ws,
        mqtts,
        mqtt_wss,
        https,
        tls_ca,
        admin,
        client,
        data_dir,
        database_url,
        dir: Some(dir),
        stop: Some(stop),
        server: Some(server),
    }
}

/// An HTTP client that trusts the certificates in `ca` alone.
pub fn https_client(ca: &std::path::Path) -> reqwest::Client {
    use rustls::pki_types::{CertificateDer, pem::PemObject};
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_file_iter(ca).expect("a PEM file") {
        roots.add(cert.expect("a certificate")).expect("a usable certificate");
    }
    let tls = rustls::ClientConfig::builder_with_provider(gantry::tls::provider())
        .with_safe_default_protocol_versions()
        .expect("TLS versions")
        .with_root_certificates(roots)
        .with_no_client_auth();
    reqwest::Client::builder()
        .use_preconfigured_tls(tls)
        .build()
        .expect("an HTTPS client")
}

/// A fresh database on the server named by `GANTRY_E2E_POSTGRES_URL`, or None for SQLite.
async fn fresh_postgres_database() -> Option<String> {
    let server = std::env::var("GANTRY_E2E_POSTGRES_URL")
        .ok()
        .filter(|u| !u.is_empty())?;
    use sqlx::Connection;
    let name = format!("gantry_e2e_{}", uuid::Uuid::new_v4().simple());
    let mut conn = sqlx::PgConnection::connect(&server)
        .await
        .expect("connecting to PostgreSQL");
    sqlx::query(&format!("CREATE DATABASE {name}"))
        .execute(&mut conn)
        .await
        .expect("creating a test database");
    let (base, _) = server.rsplit_once('/').expect("a database URL ends in /<database>");
    Some(format!("{base}/{name}"))
}

impl TestApp {
    pub async fn call(&self, method: Method, path: &str, token: Option<&str>, body: Option<Value>) -> Reply {
        let mut request = self.client.request(method, format!("{}{path}", self.base));
        if let Some(token) = token {
            request = request.bearer_auth(token);
        }
        if let Some(body) = body {
            request = request.json(&body);
        }
        let response = request.send().await.expect("request sent");
        let status = response.status();
        let text = response.text().await.expect("body read");
        Reply {
            status,
            body: serde_json::from_str(&text).unwrap_or(Value::Null),
        }
    }

    pub async fn get(&self, path: impl AsRef<str>, token: &str) -> Reply {
        self.call(Method::GET, path.as_ref(), Some(token), None).await
    }
    pub async fn post(&self, path: impl AsRef<str>, token: &str, body: Value) -> Reply {
        self.call(Method::POST, path.as_ref(), Some(token), Some(body)).await
    }
    pub async fn put(&self, path: impl AsRef<str>, token: &str, body: Value) -> Reply {
        self.call(Method::PUT, path.as_ref(), Some(token), Some(body)).await
    }
    pub async fn delete(&self, path: impl AsRef<str>, token: &str) -> Reply {
        self.call(Method::DELETE, path.as_ref(), Some(token), None).await
    }

    pub async fn create_project(&self, token: &str) -> Value {
        self.post(
            "/api/v1/projects",
            token,
            json!({"name": unique("project"), "status": "development"}),
        )
        .await
        .result()
    }
    pub async fn create_model(&self, token: &str) -> Value {
        self.post("/api/v1/deviceModels", token, model_body(&unique("model")))
            .await
            .result()
    }
    pub async fn create_device(&self, token: &str, project: &Value, model: &Value) -> Value {
        self.post(
            "/api/v1/devices",
            token,
            json!({"deviceName": unique("device"), "projectId": project["id"], "modelId": model["id"]}),
        )
        .await
        .result()
    }

    /// A project, a model and a device of the administrator's tenant.
    pub async fn world(&self) -> World {
        let project = self.create_project(&self.admin).await;
        let model = self.create_model(&self.admin).await;
        let device = self.create_device(&self.admin, &project, &model).await;
        World { project, model, device }
    }

    /// A client of a server running elsewhere (a child process).
    pub fn remote(base: &str, admin: &str) -> TestApp {
        TestApp {
            base: base.to_owned(),
            mqtt: UNBOUND,
            mqtt_ws: UNBOUND,
            mqtts: None,
            mqtt_wss: None,
            https: None,
            tls_ca: None,
            admin: admin.to_owned(),
            client: reqwest::Client::new(),
            data_dir: PathBuf::new(),
            database_url: String::new(),
            dir: None,
            stop: None,
            server: None,
        }
    }

    /// The Prometheus text at `/metrics`.
    pub async fn metrics_text(&self) -> String {
        let reply = self
            .client
            .get(format!("{}/metrics", self.base))
            .send()
            .await
            .expect("metrics");
        reply.text().await.expect("metrics text")
    }

    /// The value of the unlabelled metric `name`; panics when it is missing.
    pub async fn metric(&self, name: &str) -> u64 {
        let text = self.metrics_text().await;
        text.lines()
            .find_map(|l| l.strip_prefix(name).and_then(|v| v.trim().parse().ok()))
            .unwrap_or_else(|| panic!("{name} in {text}"))
    }

    pub fn database_url(&self) -> String {
        self.database_url.clone()
    }

    /// Stops the server as SIGTERM would and waits for it to finish.
    pub async fn stop(self) {
        self.stop_keep_data().await;
    }

    /// Stops the server as SIGTERM would and starts it again on the same data dir and database,
    /// with the same administrator token.
    pub async fn restarted(self) -> TestApp {
        let (admin, database_url) = (self.admin.clone(), self.database_url());
        let dir = self.stop_keep_data().await.expect("the server's data dir");
        let mut config = ServeConfig::local(dir.path().to_path_buf());
        config.admin_token = Some(admin.clone());
        config.database_url = Some(database_url);
        spawn_with(config, dir, admin).await
    }

    /// Stops the server and hands over its data dir, which lives on while the caller holds it.
    pub async fn stop_keep_data(mut self) -> Option<tempfile::TempDir> {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(server) = self.server.take() {
            server.await.expect("server task").expect("server ran cleanly");
        }
        self.dir.take()
    }
}

pub struct World {
    pub project: Value,
    pub model: Value,
    pub device: Value,
}

/// Checks every 100 ms until `check` holds or `timeout` has passed; whether it held. For what
/// the service does in the background (ingest through a broker, ack timeouts, a device's acks).
pub async fn wait_for(timeout: Duration, mut check: impl AsyncFnMut() -> bool) -> bool {
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        if check().await {
            return true;
        }
        if tokio::time::Instant::now() >= deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

pub fn unique(prefix: &str) -> String {
    format!("{prefix}-{}", &uuid::Uuid::new_v4().simple().to_string()[..10])
}

pub fn model_body(name: &str) -> Value {
    json!({
        "name": name,
        "description": "tower crane telemetry",
        "deviceType": "TowerCrane",
        "imageUrl": "http://img.example/crane.png",
        "attributesMap": {
            "temp": {"name": "Temperature", "code": "temp", "dataType": "Float", "readable": "R", "channel": "m"},
            "count": {"name": "Count", "code": "count", "dataType": "Integer", "readable": "R", "channel": "m"},
            "label": {"name": "Label", "code": "label", "dataType": "String", "readable": "RW", "channel": "m"},
            "on": {"name": "Power", "code": "on", "dataType": "Boolean", "readable": "RW", "channel": "m"},
            "setpoint": {"name": "Setpoint", "code": "setpoint", "dataType": "Float", "readable": "W", "channel": "m"}
        },
        "actionsMap": {
            "reboot": {"name": "Reboot", "code": "reboot",
                       "paramsMap": {"delay": {"name": "Delay", "code": "delay", "required": true, "type": "Integer"}}}
        },
        "metadata": {"vendor": "acme"}
    })
}
