//! What the server writes about credentials: nothing. The binary runs at `RUST_LOG=trace`, every
//! credential path is exercised, and its whole output is searched for each secret.

use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use gantry::device::DeviceClient;
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncRead, BufReader};
use tokio::process::Command;

use crate::helpers::{TestApp, unique};

/// Collects every line `stream` writes.
fn collect(stream: impl AsyncRead + Unpin + Send + 'static, into: Arc<Mutex<Vec<String>>>) {
    tokio::spawn(async move {
        let mut lines = BufReader::new(stream).lines();
        while let Ok(Some(line)) = lines.next_line().await {
            into.lock().unwrap().push(line);
        }
    });
}

/// The `gantry` binary serving on port 0 with a fresh data dir, and every line it writes.
struct Served {
    child: tokio::process::Child,
    base: String,
    mqtt: std::net::SocketAddr,
    admin: String,
    data_dir: tempfile::TempDir,
    log: Arc<Mutex<Vec<String>>>,
}

/// Starts `gantry serve` with `args`, `RUST_LOG` set to `filter` (unset when None).
async fn serve(args: &[&str], filter: Option<&str>) -> Served {
    let data_dir = tempfile::tempdir().unwrap();
    let admin = format!("admin-{}", uuid::Uuid::new_v4().simple());
    let mut command = Command::new(env!("CARGO_BIN_EXE_gantry"));
    command
        .arg("serve")
        .args(args)
        .env("GANTRY_DATA_DIR", data_dir.path())
        .env_remove("GANTRY_DATABASE_URL")
        .env_remove("GANTRY_LOG_FORMAT")
        .env("GANTRY_HTTP_ADDR", "127.0.0.1:0")
        .env("GANTRY_MQTT_ADDR", "127.0.0.1:0")
        .env("GANTRY_MQTT_WS_ADDR", "127.0.0.1:0")
        .env("GANTRY_MQTTS_ADDR", "127.0.0.1:0")
        .env("GANTRY_MQTT_WSS_ADDR", "127.0.0.1:0")
        .env("GANTRY_HTTPS_ADDR", "127.0.0.1:0")
        .env("GANTRY_ADMIN_TOKEN", &admin)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    match filter {
        Some(filter) => command.env("RUST_LOG", filter),
        None => command.env_remove("RUST_LOG"),
    };
    let mut child = command.spawn().expect("gantry starts");
    let log = Arc::new(Mutex::new(Vec::new()));
    collect(child.stderr.take().unwrap(), log.clone());
    let mut stdout = BufReader::new(child.stdout.take().unwrap()).lines();
    let (mut base, mut mqtt) = (None, None);
    while mqtt.is_none() {
        let line = stdout.next_line().await.unwrap().expect("the start-up lines");
        log.lock().unwrap().push(line.clone());
        if let Some(addr) = line.strip_prefix("gantry listening on ") {
            base = Some(addr.trim().to_owned());
        }
        if let Some(addrs) = line.strip_prefix("gantry mqtt on mqtt://") {
            mqtt = addrs
                .split_whitespace()
                .next()
                .map(|a| a.parse::<std::net::SocketAddr>().unwrap());
        }
    }
    collect(stdout.into_inner(), log.clone());
    Served {
        child,
        base: base.unwrap(),
        mqtt: mqtt.unwrap(),
        admin,
        data_dir,
        log,
    }
}

impl Served {
    /// Stops the server and returns everything it wrote.
    async fn stop(mut self) -> Vec<String> {
        let _ = self.child.start_kill();
        let _ = self.child.wait().await;
        tokio::time::sleep(Duration::from_millis(200)).await;
        self.log.lock().unwrap().clone()
    }

    /// Waits until a line holding `needle` was written; whether it came.
    async fn wait_for_line(&self, needle: &str) -> bool {
        crate::helpers::wait_for(Duration::from_secs(10), async || {
            self.log.lock().unwrap().iter().any(|l| l.contains(needle))
        })
        .await
    }
}

#[tokio::test]
async fn no_secret_reaches_the_log_at_any_level() {
    let served = serve(&[], Some("trace")).await;
    let (base, mqtt, admin) = (served.base.clone(), served.mqtt, served.admin.clone());
    let data_dir = served.data_dir.path().to_path_buf();
    let app = TestApp::remote(&base, &admin);

    let mut secrets = vec![admin.clone()];
    let tenant = app
        .post("/api/v1/tenants", &admin, json!({"name": unique("t")}))
        .await
        .result();
    secrets.push(tenant["adminToken"].as_str().unwrap().to_owned());
    let world = app.world().await;
    let project = world.project["id"].as_str().unwrap();
    let device = world.device["id"].as_str().unwrap();
    let token = world.device["accessToken"].as_str().unwrap().to_owned();
    secrets.push(token.clone());
    secrets.push(world.project["applicationAccessToken"].as_str().unwrap().to_owned());

    // Logins that work and logins that fail, over both fronts.
    app.get("/api/v1/projects", "not-a-token-but-secret-looking")
        .await
        .error(401);
    secrets.push("not-a-token-but-secret-looking".to_owned());
    let mut client = DeviceClient::connect(mqtt, "gantry", device, &token).await.unwrap();
    client.publish_attrs(&[("temp", json!(1.5))], None, true).await.unwrap();
    client.disconnect().await;
    assert!(
        DeviceClient::connect(mqtt, "gantry", device, "wrong-password-secret")
            .await
            .is_err()
    );
    secrets.push("wrong-password-secret".to_owned());

    // A route's temporary identity.
    let route: Value = app
        .post(
            format!("/api/v1/devices/{device}/routes"),
            &admin,
            json!({"sourceType": "APP"}),
        )
        .await
        .result();
    let role = &route["temporaryRole"];
    let password = role["password"].as_str().unwrap().to_owned();
    DeviceClient::connect_as(
        mqtt,
        "gantry",
        role["clientId"].as_str().unwrap(),
        role["username"].as_str().unwrap(),
        &password,
    )
    .await
    .unwrap()
    .disconnect()
    .await;
    secrets.push(password);

    // Rotations: the new secrets, and the old ones.
    let rotated = app
        .post(
            format!("/api/v1/devices/{device}/accessToken/rotate"),
            &admin,
            json!({}),
        )
        .await
        .result();
    secrets.push(rotated["accessToken"].as_str().unwrap().to_owned());
    let rotated = app
        .post(
            format!("/api/v1/projects/{project}/applicationAccessToken/rotate"),
            &admin,
            json!({"graceSeconds": 5}),
        )
        .await
        .result();
    secrets.push(rotated["applicationAccessToken"].as_str().unwrap().to_owned());
    let tenant_id = tenant["id"].as_str().unwrap();
    let rotated = app
        .post(
            format!("/api/v1/tenants/{tenant_id}/adminToken/rotate"),
            &admin,
            json!({}),
        )
        .await
        .result();
    secrets.push(rotated["adminToken"].as_str().unwrap().to_owned());

    // The generated TLS key, whole and its body's first line.
    let key = std::fs::read_to_string(data_dir.join("tls/server.key")).unwrap();
    let key_line = key.lines().nth(1).unwrap().to_owned();
    secrets.push(key_line);

    // A query string is not logged (it could carry what a caller did not mean to log).
    let query_secret = format!("query-secret-{}", uuid::Uuid::new_v4().simple());
    // Answered 200 or 400 (an unknown parameter): logged either way.
    let _ = app
        .get(format!("/api/v1/projects?projectName={query_secret}"), &admin)
        .await;
    secrets.push(query_secret);
    assert!(
        served.wait_for_line("device disconnected").await,
        "the disconnect line was written"
    );

    let log = served.stop().await;
    // The lines that name callers and devices were written, and searched below.
    for line in [
        "route=\"/api/v1/projects\" ",
        "device connected",
        "route identity connected",
        "MQTT login refused",
    ] {
        assert!(log.iter().any(|l| l.contains(line)), "a line with {line} was written");
    }
    let log = log.join("\n");
    if let Ok(path) = std::env::var("GANTRY_TEST_DUMP_LOG") {
        std::fs::write(path, &log).unwrap();
    }
    assert!(log.len() > 10_000, "the trace log was captured ({} bytes)", log.len());
    for secret in &secrets {
        assert!(!log.contains(secret.as_str()), "a secret reached the log: {secret}");
    }
}

/// The JSON objects among `lines`; every line but the start-up lines must be one.
fn json_lines(lines: &[String]) -> Vec<Value> {
    lines
        .iter()
        .filter(|l| !l.starts_with("gantry "))
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not a JSON line ({e}): {l}")))
        .collect()
}

#[tokio::test]
async fn json_logs_have_a_line_per_request_and_per_connection() {
    let served = serve(&["--log-format", "json"], None).await;
    let app = TestApp::remote(&served.base, &served.admin);
    let world = app.world().await;
    let device = world.device["id"].as_str().unwrap();
    let token = world.device["accessToken"].as_str().unwrap();

    // A request with an id of the caller's, which comes back and is logged.
    let reply = app
        .client
        .get(format!("{}/api/v1/devices/{device}?pageSize=7", served.base))
        .bearer_auth(token)
        .header("x-request-id", "trace-me-42")
        .send()
        .await
        .unwrap();
    assert_eq!(reply.status(), 200);
    assert_eq!(reply.headers()["x-request-id"], "trace-me-42");
    // One with a token nobody has, and one with an id that is not plain (replaced by Gantry's).
    let refused = app
        .client
        .get(format!("{}/api/v1/devices/{device}", served.base))
        .bearer_auth("a-wrong-token-secret")
        .header("x-request-id", "forged\tline")
        .send()
        .await
        .unwrap();
    assert_eq!(refused.status(), 401);
    let generated = refused.headers()["x-request-id"].to_str().unwrap().to_owned();
    assert_ne!(generated, "forged\tline");

    // An external broker's login check: its caller is the system administrator.
    let verdict: Value = app
        .client
        .post(format!("{}/mqtt/auth", served.base))
        .bearer_auth(&served.admin)
        .json(&json!({"clientid": device, "username": device, "password": token}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(verdict["result"], "allow");

    // A device over MQTT/TCP, in and out; a refused login.
    let client = DeviceClient::connect(served.mqtt, "gantry", device, token)
        .await
        .unwrap();
    assert!(served.wait_for_line("device connected").await);
    client.disconnect().await;
    assert!(served.wait_for_line("device disconnected").await);
    assert!(
        DeviceClient::connect(served.mqtt, "gantry", device, "a-wrong-password-secret")
            .await
            .is_err()
    );
    assert!(served.wait_for_line("MQTT login refused").await);

    let lines = served.stop().await;
    let log = lines.join("\n");
    for secret in [
        token,
        "a-wrong-token-secret",
        "a-wrong-password-secret",
        app.admin.as_str(),
    ] {
        assert!(!log.contains(secret), "a secret reached the log: {secret}");
    }
    assert!(!log.contains("pageSize"), "no query string is logged");
    let objects = json_lines(&lines);
    let find = |pred: &dyn Fn(&Value) -> bool| objects.iter().find(|o| pred(o)).cloned();

    let line = find(&|o| o["message"] == "request" && o["request_id"] == "trace-me-42").expect("the request's line");
    assert_eq!(line["level"], "INFO");
    assert_eq!(line["method"], "GET");
    assert_eq!(line["route"], "/api/v1/devices/{deviceId}");
    assert_eq!(line["status"], 200);
    assert!(line["latency_ms"].as_f64().unwrap() >= 0.0, "{line}");
    assert_eq!(line["principal"], "device");
    assert_eq!(line["principal_id"], device);

    let line = find(&|o| o["message"] == "request" && o["request_id"] == generated.as_str()).expect("the 401's line");
    assert_eq!(
        (line["status"].clone(), line["principal"].clone()),
        (json!(401), json!("none"))
    );

    let line = find(&|o| o["message"] == "request" && o["route"] == "/mqtt/auth").expect("the /mqtt/auth line");
    assert_eq!(
        (line["status"].clone(), line["principal"].clone()),
        (json!(200), json!("system_admin"))
    );

    let line = find(&|o| o["message"] == "device connected").expect("the connect line");
    assert_eq!(line["device"], device);
    assert_eq!(line["protocol"], "MQTT 3.1.1");
    assert_eq!(line["transport"], "tcp");
    assert!(line["address"].as_str().unwrap().starts_with("127.0.0.1:"), "{line}");
    let line = find(&|o| o["message"] == "device disconnected").expect("the disconnect line");
    assert_eq!(line["device"], device);
    assert_eq!(line["transport"], "tcp");
    assert_eq!(line["reason"], "the client sent DISCONNECT");
    let line = find(&|o| o["message"] == "MQTT login refused").expect("the refusal line");
    assert_eq!(line["reason"], "unknown client or wrong password");

    // The broker's own chatter stays below info; no line carries a Debug value.
    let broker: Vec<&Value> = objects
        .iter()
        .filter(|o| o["target"].as_str().unwrap_or_default().starts_with("rmqtt"))
        .collect();
    assert!(broker.is_empty(), "the broker's lines at the default level: {broker:?}");
    assert!(!log.contains("Some("), "a Debug value in the log: {log}");
}
