//! The real binary as a process: acknowledged events survive SIGKILL, and SIGTERM drains the
//! ingest queue and exits 0.

use std::net::SocketAddr;
use std::path::Path;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

use crate::events::event;
use crate::helpers::{TestApp, spawn_app};

pub(crate) struct Server {
    pub(crate) child: Child,
    pub(crate) base: String,
    /// The MQTT/TCP address, from the start-up line.
    pub(crate) mqtt: SocketAddr,
}

/// Ports a server should bind: HTTP, MQTT/TCP, MQTT/WebSocket (0: any free one).
type Ports = [u16; 3];

async fn start(data_dir: &Path, database_url: Option<&str>, admin: &str) -> Server {
    start_on(data_dir, database_url, admin, [0; 3]).await
}

async fn start_on(data_dir: &Path, database_url: Option<&str>, admin: &str, ports: Ports) -> Server {
    start_with(data_dir, database_url, admin, ports, &[]).await
}

/// `start_on` with more environment variables.
pub(crate) async fn start_with(
    data_dir: &Path,
    database_url: Option<&str>,
    admin: &str,
    ports: Ports,
    env: &[(&str, &str)],
) -> Server {
    let mut command = Command::new(env!("CARGO_BIN_EXE_gantry"));
    let [http, mqtt, ws] = ports;
    command
        .arg("serve")
        .env("GANTRY_DATA_DIR", data_dir)
        .env("GANTRY_HTTP_ADDR", format!("127.0.0.1:{http}"))
        .env("GANTRY_MQTT_ADDR", format!("127.0.0.1:{mqtt}"))
        .env("GANTRY_MQTT_WS_ADDR", format!("127.0.0.1:{ws}"))
        .env("GANTRY_MQTTS_ADDR", "127.0.0.1:0")
        .env("GANTRY_MQTT_WSS_ADDR", "127.0.0.1:0")
        .env("GANTRY_HTTPS_ADDR", "127.0.0.1:0")
        .env("GANTRY_ADMIN_TOKEN", admin)
        // Devices here publish back to back; the per-connection rate limit is tested on its own.
        .env("GANTRY_MQTT_PUBLISH_RATE", "0")
        .env("GANTRY_ACK_TIMEOUT", "2")
        .env("RUST_LOG", "warn")
        .envs(env.iter().copied())
        .stdout(Stdio::piped())
        .kill_on_drop(true);
    match database_url {
        Some(url) => command.env("GANTRY_DATABASE_URL", url),
        None => command.env_remove("GANTRY_DATABASE_URL"),
    };
    let mut child = command.spawn().expect("gantry starts");
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let mut base = None;
    let mqtt = loop {
        let line = lines
            .next_line()
            .await
            .unwrap()
            .expect("gantry printed its addresses before exiting");
        if let Some(addr) = line.strip_prefix("gantry listening on ") {
            base = Some(addr.trim().to_owned());
        }
        if let Some(addrs) = line.strip_prefix("gantry mqtt on mqtt://") {
            let tcp = addrs.split_whitespace().next().unwrap_or_default();
            break tcp.parse::<SocketAddr>().expect("the MQTT address");
        }
    };
    // keep draining stdout so the child never blocks on a full pipe
    tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
    Server {
        child,
        base: base.expect("the HTTP address is printed first"),
        mqtt,
    }
}

/// Posts `count` events with increasing device times, 16 at a time, recording the ids of the
/// acknowledged ones; `midway` runs once half of them are acknowledged.
async fn post_while(
    app: &TestApp,
    device: &Value,
    count: i64,
    midway: impl FnOnce() + Send + 'static,
) -> Vec<(String, i64)> {
    let acked = Arc::new(Mutex::new(Vec::new()));
    let midway = Arc::new(Mutex::new(Some(midway)));
    let semaphore = Arc::new(tokio::sync::Semaphore::new(16));
    let mut tasks = Vec::new();
    for i in 0..count {
        let (client, base, admin, body) = (
            app.client.clone(),
            app.base.clone(),
            app.admin.clone(),
            event(device, "count", json!(i), "Integer", 1_714_492_800_000 + i),
        );
        let (acked, midway, permit) = (
            acked.clone(),
            midway.clone(),
            semaphore.clone().acquire_owned().await.unwrap(),
        );
        tasks.push(tokio::spawn(async move {
            let _permit = permit;
            let Ok(reply) = client
                .post(format!("{base}/api/v1/deviceEvents"))
                .bearer_auth(admin)
                .json(&body)
                .send()
                .await
            else {
                return;
            };
            if reply.status() != 200 {
                return;
            }
            let Ok(body) = reply.json::<Value>().await else { return };
            let mut acked = acked.lock().unwrap();
            acked.push((body["result"]["meta"]["id"].as_str().unwrap().to_owned(), i));
            if acked.len() as i64 >= count / 2
                && let Some(f) = midway.lock().unwrap().take()
            {
                f();
            }
        }));
    }
    for task in tasks {
        let _ = task.await;
    }
    Arc::try_unwrap(acked).unwrap().into_inner().unwrap()
}

async fn assert_all_present(app: &TestApp, device: &Value, acked: &[(String, i64)]) {
    assert!(!acked.is_empty());
    for (id, _) in acked {
        app.get(&format!("/api/v1/deviceEvents/{id}"), &app.admin)
            .await
            .result();
    }
    let newest = acked.iter().map(|(_, i)| *i).max().unwrap();
    let shadow = app
        .get(
            &format!("/api/v1/devices/{}/shadows", device["id"].as_str().unwrap()),
            &app.admin,
        )
        .await
        .result();
    assert!(
        shadow["attributeMap"]["count"]["value"].as_i64().unwrap() >= newest,
        "the shadow holds at least the newest acknowledged value"
    );
}

/// Posts events to a real process and sends it `signal` midway; then restarts it on the same
/// database (SQLite file or PostgreSQL database) and checks every acknowledged event.
async fn with_process(signal: &'static str) {
    // An in-process app creates the database and the world; the process then takes it over.
    let seed = spawn_app().await;
    let world = seed.world().await;
    let admin = seed.admin.clone();
    let data_dir = tempfile::tempdir().unwrap();
    let db = seed.database_url();
    let _seed_dir = seed.stop_keep_data().await;

    let server = start(data_dir.path(), Some(&db), &admin).await;
    let client_app = TestApp::remote(&server.base, &admin);
    let pid = server.child.id().unwrap();
    let mut child = server.child;
    let acked = post_while(&client_app, &world.device, 400, move || {
        let _ = std::process::Command::new("kill")
            .arg(format!("-{signal}"))
            .arg(pid.to_string())
            .status();
    })
    .await;
    let status = child.wait().await.unwrap();
    if signal == "TERM" {
        assert_eq!(status.code(), Some(0), "SIGTERM ends in a clean exit");
    }

    let again = start(data_dir.path(), Some(&db), &admin).await;
    let reader = TestApp::remote(&again.base, &admin);
    assert_all_present(&reader, &world.device, &acked).await;
}

#[tokio::test]
async fn acknowledged_events_survive_sigkill() {
    with_process("KILL").await;
}

#[tokio::test]
async fn sigterm_drains_and_exits_cleanly() {
    with_process("TERM").await;
}

/// kill -9 while events that keep an alarm open are posted: after the restart the alarm counts
/// every acknowledged event. On SQLite a count is committed with the events it counts, so the
/// count is exactly the events stored; on PostgreSQL the alarm's write follows its events'
/// commit, so an event stored just before the kill, never acknowledged, may be left uncounted.
#[tokio::test]
async fn an_alarms_count_survives_sigkill() {
    let seed = spawn_app().await;
    let world = seed.world().await;
    let admin = seed.admin.clone();
    seed.post(
        format!(
            "/api/v1/deviceModels/{}/alarmRules",
            world.model["id"].as_str().unwrap()
        ),
        &admin,
        json!({"name": "counting", "attributeCode": "count", "severity": "MAJOR",
               "condition": {"op": ">=", "value": 0}}),
    )
    .await
    .result();
    let data_dir = tempfile::tempdir().unwrap();
    let db = seed.database_url();
    let _seed_dir = seed.stop_keep_data().await;

    let server = start(data_dir.path(), Some(&db), &admin).await;
    let client_app = TestApp::remote(&server.base, &admin);
    let pid = server.child.id().unwrap();
    let mut child = server.child;
    let acked = post_while(&client_app, &world.device, 200, move || {
        let _ = std::process::Command::new("kill")
            .arg("-KILL")
            .arg(pid.to_string())
            .status();
    })
    .await;
    child.wait().await.unwrap();

    let again = start(data_dir.path(), Some(&db), &admin).await;
    let reader = TestApp::remote(&again.base, &admin);
    assert_all_present(&reader, &world.device, &acked).await;
    let (device, project) = (
        world.device["id"].as_str().unwrap(),
        world.project["id"].as_str().unwrap(),
    );
    let stored = reader
        .get(format!("/api/v1/devices/{device}/events?pageSize=1"), &admin)
        .await
        .result();
    let alarms = reader
        .get(format!("/api/v1/projects/{project}/alarms?deviceId={device}"), &admin)
        .await
        .result();
    let alarms = alarms["results"].as_array().unwrap();
    assert_eq!(alarms.len(), 1, "{alarms:?}");
    let (count, stored) = (
        alarms[0]["count"].as_u64().unwrap(),
        stored["totalResults"].as_u64().unwrap(),
    );
    assert!(
        count >= acked.len() as u64,
        "{count} counted, {} acknowledged",
        acked.len()
    );
    if db.starts_with("postgres") {
        assert!(count <= stored, "{count} counted, {stored} stored");
    } else {
        assert_eq!(count, stored, "the count is committed with its events");
    }
}

/// A service manager restarts a crashed Gantry at once on the same ports: the connections the
/// killed process held (now in TIME_WAIT on its listeners' ports) must not stop the bind.
#[tokio::test]
async fn a_killed_server_restarts_at_once_on_its_ports() {
    let seed = spawn_app().await;
    let world = seed.world().await;
    let admin = seed.admin.clone();
    let db = seed.database_url();
    let _seed_dir = seed.stop_keep_data().await;
    let data_dir = tempfile::tempdir().unwrap();
    let (id, token) = (
        world.device["id"].as_str().unwrap(),
        world.device["accessToken"].as_str().unwrap(),
    );

    let server = start(data_dir.path(), Some(&db), &admin).await;
    let http_port: u16 = server.base.rsplit(':').next().unwrap().parse().unwrap();
    let mut device = gantry::device::DeviceClient::connect(server.mqtt, "gantry", id, token)
        .await
        .expect("the device logs in");
    device.subscribe_inbox().await.unwrap();
    let mut child = server.child;
    child.start_kill().unwrap();
    child.wait().await.unwrap();
    assert!(
        device.closed_within(Duration::from_secs(10)).await,
        "the device saw the server go"
    );

    // the WebSocket port is not reused: nothing was connected there.
    let again = start_on(data_dir.path(), Some(&db), &admin, [http_port, server.mqtt.port(), 0]).await;
    assert_eq!(again.mqtt, server.mqtt);
    gantry::device::DeviceClient::connect(again.mqtt, "gantry", id, token)
        .await
        .expect("the device logs in again at once")
        .disconnect()
        .await;
    TestApp::remote(&again.base, &admin)
        .get(format!("/api/v1/devices/{id}"), &admin)
        .await
        .result();
}

/// kill -9 under concurrent MQTT QoS 1 and REST load, and a restart at once on the same ports:
/// every PUBACKed and every 200-acknowledged event is stored, each device's shadow holds its
/// newest stored event, and a control pending at the kill still ends (in exception, unacked).
#[tokio::test]
async fn sigkill_under_mqtt_and_rest_load_loses_nothing_acknowledged() {
    use gantry::device::DeviceClient;

    let seed = spawn_app().await;
    let project = seed.create_project(&seed.admin).await;
    let model = seed.create_model(&seed.admin).await;
    let mut devices = Vec::new();
    for _ in 0..4 {
        devices.push(seed.create_device(&seed.admin, &project, &model).await);
    }
    let rest_device = seed.create_device(&seed.admin, &project, &model).await;
    let admin = seed.admin.clone();
    let db = seed.database_url();
    let _seed_dir = seed.stop_keep_data().await;
    let data_dir = tempfile::tempdir().unwrap();

    let server = start(data_dir.path(), Some(&db), &admin).await;
    let http_port: u16 = server.base.rsplit(':').next().unwrap().parse().unwrap();
    let client_app = TestApp::remote(&server.base, &admin);
    // A control left pending: its ack never comes.
    let mut target = DeviceClient::connect(
        server.mqtt,
        "gantry",
        devices[0]["id"].as_str().unwrap(),
        devices[0]["accessToken"].as_str().unwrap(),
    )
    .await
    .unwrap();
    target.subscribe_inbox().await.unwrap();
    client_app
        .put(
            format!("/api/v1/devices/{}/shadows", devices[0]["id"].as_str().unwrap()),
            &admin,
            json!({"needack": true, "contextId": "pending-at-kill", "payload": {"attrs": [{"code": "label", "value": "x"}]}}),
        )
        .await
        .result_done();

    // Publishers: each records the meta.id of every PUBACKed message, device times increasing.
    let acked = Arc::new(Mutex::new(Vec::<(usize, String, i64)>::new()));
    let mut publishers = Vec::new();
    for (n, device) in devices.iter().enumerate() {
        let (id, token, mqtt, acked) = (
            device["id"].as_str().unwrap().to_owned(),
            device["accessToken"].as_str().unwrap().to_owned(),
            server.mqtt,
            acked.clone(),
        );
        publishers.push(tokio::spawn(async move {
            let Ok(mut client) = DeviceClient::connect(mqtt, "gantry", &id, &token).await else {
                return;
            };
            for i in 0..100_000i64 {
                match client
                    .publish_attrs(&[("count", json!(i))], Some(1_714_492_800 + i), false)
                    .await
                {
                    Ok(meta_id) => acked.lock().unwrap().push((n, meta_id, i)),
                    Err(_) => return,
                }
            }
        }));
    }
    let pid = server.child.id().unwrap();
    let rest_acked = post_while(&client_app, &rest_device, 600, move || {
        let _ = std::process::Command::new("kill")
            .arg("-KILL")
            .arg(pid.to_string())
            .status();
    })
    .await;
    let mut child = server.child;
    child.wait().await.unwrap();
    for publisher in publishers {
        let _ = publisher.await;
    }
    let acked = Arc::try_unwrap(acked).unwrap().into_inner().unwrap();
    assert!(
        acked.len() > 20,
        "some MQTT messages were acknowledged before the kill ({})",
        acked.len()
    );

    let again = start_on(data_dir.path(), Some(&db), &admin, [http_port, server.mqtt.port(), 0]).await;
    let reader = TestApp::remote(&again.base, &admin);
    assert_all_present(&reader, &rest_device, &rest_acked).await;
    for (n, device) in devices.iter().enumerate() {
        let id = device["id"].as_str().unwrap();
        let mut stored = std::collections::HashSet::new();
        let mut newest = None::<(i64, Value)>;
        for page in 1.. {
            let listing = reader
                .get(
                    format!("/api/v1/devices/{id}/events?pageSize=1000&pageNo={page}"),
                    &admin,
                )
                .await
                .result();
            let results = listing["results"].as_array().unwrap().clone();
            for event in &results {
                stored.insert(event["correlationId"].as_str().unwrap_or_default().to_owned());
                let time = event["deviceTimestamp"].as_i64().unwrap();
                if newest.as_ref().is_none_or(|(t, _)| time > *t) {
                    newest = Some((time, event["attributeData"].clone()));
                }
            }
            if results.len() < 1000 {
                break;
            }
        }
        for (_, meta_id, _) in acked.iter().filter(|(d, _, _)| *d == n) {
            assert!(
                stored.contains(meta_id),
                "PUBACKed message {meta_id} of device {n} is stored"
            );
        }
        if let Some((_, value)) = newest {
            let shadow = reader
                .get(format!("/api/v1/devices/{id}/shadows"), &admin)
                .await
                .result();
            assert_eq!(
                shadow["attributeMap"]["count"]["value"], value,
                "device {n}: the shadow holds the newest stored event"
            );
        }
    }
    // The control pending at the kill ends in exception after the ack timeout (2 s).
    let project_id = project["id"].as_str().unwrap();
    assert!(
        crate::helpers::wait_for(Duration::from_secs(15), async || {
            reader
                .get(
                    format!("/api/v1/projects/{project_id}/eventLogs?contextId=pending-at-kill"),
                    &admin,
                )
                .await
                .result()["results"][0]["status"]
                == "exception"
        })
        .await,
        "the pending control ends"
    );
}
