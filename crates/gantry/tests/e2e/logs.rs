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

#[tokio::test]
async fn no_secret_reaches_the_log_at_any_level() {
    let data_dir = tempfile::tempdir().unwrap();
    let admin = format!("admin-{}", uuid::Uuid::new_v4().simple());
    let mut child = Command::new(env!("CARGO_BIN_EXE_gantry"))
        .arg("serve")
        .env("GANTRY_DATA_DIR", data_dir.path())
        .env_remove("GANTRY_DATABASE_URL")
        .env("GANTRY_HTTP_ADDR", "127.0.0.1:0")
        .env("GANTRY_MQTT_ADDR", "127.0.0.1:0")
        .env("GANTRY_MQTT_WS_ADDR", "127.0.0.1:0")
        .env("GANTRY_MQTTS_ADDR", "127.0.0.1:0")
        .env("GANTRY_MQTT_WSS_ADDR", "127.0.0.1:0")
        .env("GANTRY_HTTPS_ADDR", "127.0.0.1:0")
        .env("GANTRY_ADMIN_TOKEN", &admin)
        .env("RUST_LOG", "trace")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("gantry starts");
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
    let (base, mqtt) = (base.unwrap(), mqtt.unwrap());
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
    let key = std::fs::read_to_string(data_dir.path().join("tls/server.key")).unwrap();
    let key_line = key.lines().nth(1).unwrap().to_owned();
    secrets.push(key_line);

    let _ = child.start_kill();
    let _ = child.wait().await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    let log = log.lock().unwrap().join("\n");
    if let Ok(path) = std::env::var("GANTRY_TEST_DUMP_LOG") {
        std::fs::write(path, &log).unwrap();
    }
    assert!(log.len() > 10_000, "the trace log was captured ({} bytes)", log.len());
    for secret in &secrets {
        assert!(!log.contains(secret.as_str()), "a secret reached the log: {secret}");
    }
}
