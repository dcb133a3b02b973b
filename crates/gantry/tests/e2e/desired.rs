//! Desired state and controls that wait for their device, over real MQTT and HTTP: values set
//! while a device is offline reach it at its connect, and again after a reconnect while not
//! acknowledged; acks, refusals and reports settle them; controls sent with a time to live wait,
//! expire or are cancelled; all of it survives a restart.

use std::time::Duration;

use gantry::device::DeviceClient;
use reqwest::Method;
use serde_json::{Value, json};

use crate::helpers::{Reply, TestApp, World, spawn_app, spawn_app_with, unique, wait_for};

const PREFIX: &str = "gantry";
const WAIT: Duration = Duration::from_secs(5);

async fn connect(app: &TestApp, world: &World) -> DeviceClient {
    let mut device = DeviceClient::connect(
        app.mqtt,
        PREFIX,
        world.device["id"].as_str().unwrap(),
        world.device["accessToken"].as_str().unwrap(),
    )
    .await
    .expect("the device logs in");
    device.subscribe_inbox().await.expect("its inbox");
    device
}

fn desired_path(world: &World) -> String {
    format!("/api/v1/devices/{}/desired", world.device["id"].as_str().unwrap())
}

/// PATCH of the desired state, with an If-Match when given; the reply and its ETag.
async fn patch(
    app: &TestApp,
    world: &World,
    token: &str,
    attributes: Value,
    if_match: Option<&str>,
) -> (Reply, String) {
    let mut request = app
        .client
        .request(Method::PATCH, format!("{}{}", app.base, desired_path(world)))
        .bearer_auth(token)
        .json(&json!({"attributes": attributes}));
    if let Some(tag) = if_match {
        request = request.header("If-Match", tag);
    }
    let response = request.send().await.expect("PATCH");
    let etag = response
        .headers()
        .get("etag")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_owned();
    let status = response.status();
    let body = response.json().await.unwrap_or(Value::Null);
    (Reply { status, body }, etag)
}

async fn desired(app: &TestApp, world: &World) -> Value {
    app.get(desired_path(world), &app.admin).await.result()
}

/// The next message in the device's inbox.
async fn next(device: &mut DeviceClient) -> Value {
    device
        .next_message(WAIT)
        .await
        .unwrap()
        .expect("a message arrives")
        .json()
}

/// The next `c` message of document `version`, past repeats of older ones: a connect's delta and
/// a change's may both carry the same version when they meet (the guide says a device may get a
/// version twice; it is idempotent).
async fn next_of_version(device: &mut DeviceClient, version: u64) -> Value {
    loop {
        let message = next(device).await;
        let seen = message["meta"]["version"].as_u64().expect("a version");
        assert!(seen <= version, "version {seen} before {version}: {message}");
        if seen == version {
            return message;
        }
    }
}

async fn publish(device: &mut DeviceClient, message: Value) {
    let topic = device.upstream_topic();
    device
        .publish_raw(&topic, serde_json::to_vec(&message).unwrap())
        .await
        .unwrap();
}

fn ack_of(sent: &Value, refused: Value) -> Value {
    json!({"meta": {"id": unique("ack"), "type": "ack", "correlationId": sent["meta"]["id"]},
           "payload": {"attrs": [], "refused": refused}})
}

fn status_of(state: &Value, code: &str) -> String {
    state["attributes"][code]["status"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

#[tokio::test]
async fn desired_values_reach_the_device_at_each_connect_until_acknowledged() {
    let app = spawn_app().await;
    let world = app.world().await;
    let (reply, etag) = patch(
        &app,
        &world,
        &app.admin,
        json!({"label": "north", "setpoint": 2.5}),
        None,
    )
    .await;
    let state = reply.result();
    assert_eq!((state["version"].clone(), etag.as_str()), (json!(1), "\"1\""));
    assert_eq!(status_of(&state, "label"), "pending");
    assert_eq!(state["attributes"]["label"]["updatedBy"], "system");

    let mut device = connect(&app, &world).await;
    let delta = next(&mut device).await;
    assert_eq!(
        (
            delta["meta"]["type"].clone(),
            delta["meta"]["needack"].clone(),
            delta["meta"]["version"].clone()
        ),
        (json!("c"), json!(true), json!(1))
    );
    let codes: Vec<&str> = delta["payload"]["attrs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a["code"].as_str().unwrap())
        .collect();
    assert_eq!(codes, vec!["label", "setpoint"]);
    assert!(
        device.next_message(Duration::from_millis(500)).await.unwrap().is_none(),
        "one message"
    );
    assert!(
        wait_for(WAIT, async || status_of(&desired(&app, &world).await, "label")
            == "delivered")
        .await
    );

    // unacknowledged: a reconnect gets it again
    device.disconnect().await;
    let mut device = connect(&app, &world).await;
    let again = next(&mut device).await;
    assert_eq!(again["meta"]["version"], 1);
    assert_ne!(again["meta"]["id"], delta["meta"]["id"]);

    publish(
        &mut device,
        ack_of(
            &again,
            json!([{"code": "setpoint", "reason": "above the crane's rating"}]),
        ),
    )
    .await;
    let settled = async || {
        let state = desired(&app, &world).await;
        status_of(&state, "label") == "applied" && status_of(&state, "setpoint") == "rejected"
    };
    assert!(wait_for(WAIT, settled).await, "{}", desired(&app, &world).await);
    let state = desired(&app, &world).await;
    assert_eq!(state["attributes"]["setpoint"]["reason"], "above the crane's rating");
    assert!(state["attributes"]["label"]["appliedTime"].as_i64().is_some());

    // the sent messages and the ack are event logs
    let logs = app
        .get(
            format!(
                "/api/v1/projects/{}/eventLogs?sortBy=createdTime&sortOrder=ASC",
                world.project["id"].as_str().unwrap()
            ),
            &app.admin,
        )
        .await
        .result();
    let kinds: Vec<(String, String)> = logs["results"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| {
            (
                l["classification"].as_str().unwrap().to_owned(),
                l["status"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    assert_eq!(kinds[1], ("DeviceControll".into(), "completed".into()), "{kinds:?}");
    assert_eq!(kinds[2].0, "Response");

    // the rejected one goes again at the next connect, the applied one not
    device.disconnect().await;
    let mut device = connect(&app, &world).await;
    let third = next(&mut device).await;
    assert_eq!(
        third["payload"]["attrs"],
        json!([{"code": "setpoint", "value": 2.5, "channel": "m"}])
    );
    app.stop().await;
}

#[tokio::test]
async fn an_older_answer_never_settles_a_newer_value_and_a_report_applies_rw() {
    let app = spawn_app().await;
    let world = app.world().await;
    let mut device = connect(&app, &world).await;
    wait_for(WAIT, async || {
        app.get(
            format!("/api/v1/devices/{}/connection", world.device["id"].as_str().unwrap()),
            &app.admin,
        )
        .await
        .result()["connected"]
            == true
    })
    .await;
    patch(&app, &world, &app.admin, json!({"label": "a"}), None)
        .await
        .0
        .result();
    let first = next(&mut device).await;
    assert_eq!(first["meta"]["version"], 1);
    patch(&app, &world, &app.admin, json!({"label": "b"}), None)
        .await
        .0
        .result();
    next_of_version(&mut device, 2).await;

    // the ack of version 1 and a report of its value leave version 2 unsettled
    publish(&mut device, ack_of(&first, json!([]))).await;
    device
        .publish_attrs(&[("label", json!("a"))], None, false)
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let state = desired(&app, &world).await;
    assert_eq!(status_of(&state, "label"), "delivered", "{state}");

    // a report of the desired value applies an RW attribute
    device
        .publish_attrs(&[("label", json!("b"))], None, false)
        .await
        .unwrap();
    assert!(
        wait_for(WAIT, async || status_of(&desired(&app, &world).await, "label")
            == "applied")
        .await
    );
    app.stop().await;
}

#[tokio::test]
async fn desired_state_rules_roles_and_isolation() {
    let app = spawn_app().await;
    let world = app.world().await;
    let (reply, _) = patch(&app, &world, &app.admin, json!({"label": "x"}), Some("\"0\"")).await;
    assert_eq!(reply.result()["version"], 1);
    // a stale If-Match: 412 naming the current version, nothing changed
    let (reply, etag) = patch(&app, &world, &app.admin, json!({"label": "y"}), Some("\"0\"")).await;
    assert!(reply.error(412).contains("version 1"));
    assert_eq!(etag, "\"1\"");
    assert_eq!(desired(&app, &world).await["attributes"]["label"]["value"], "x");

    for (body, field) in [
        (json!({"temp": 1.0}), "attributes.temp"),
        (json!({"nosuch": 1}), "attributes.nosuch"),
        (json!({"setpoint": "high"}), "attributes.setpoint"),
        (json!({}), "attributes"),
    ] {
        let (reply, _) = patch(&app, &world, &app.admin, body.clone(), None).await;
        let message = reply.error(400);
        assert!(message.contains(field), "{body}: {message}");
    }
    let (reply, _) = patch(&app, &world, &app.admin, json!({"label": "x"}), Some("seven")).await;
    assert!(reply.error(400).contains("If-Match"));

    // the project's application may set; the device reads its own but cannot set
    let application = world.project["applicationAccessToken"].as_str().unwrap();
    patch(&app, &world, application, json!({"on": true}), None)
        .await
        .0
        .result();
    let device_token = world.device["accessToken"].as_str().unwrap();
    assert_eq!(app.get(desired_path(&world), device_token).await.result()["version"], 2);
    patch(&app, &world, device_token, json!({"on": false}), None)
        .await
        .0
        .error(403);

    // another project's application: 403; another tenant's administrator: 404
    let other = app.world().await;
    let foreign = other.project["applicationAccessToken"].as_str().unwrap();
    app.get(desired_path(&world), foreign).await.error(403);
    patch(&app, &world, foreign, json!({"on": false}), None)
        .await
        .0
        .error(403);
    let other_device = other.device["accessToken"].as_str().unwrap();
    app.get(desired_path(&world), other_device).await.error(403);
    let stranger = app
        .post("/api/v1/tenants", &app.admin, json!({"name": unique("other")}))
        .await
        .result()["adminToken"]
        .as_str()
        .unwrap()
        .to_owned();
    app.get(desired_path(&world), &stranger).await.error(404);
    patch(&app, &world, &stranger, json!({"on": false}), None)
        .await
        .0
        .error(404);
    let pending = format!(
        "/api/v1/devices/{}/pendingControls",
        world.device["id"].as_str().unwrap()
    );
    app.get(&pending, &stranger).await.error(404);
    app.get(&pending, foreign).await.error(403);

    // a Locked device: 409
    app.put(
        format!("/api/v1/devices/{}", world.device["id"].as_str().unwrap()),
        &app.admin,
        json!({"status": "Locked"}),
    )
    .await
    .result();
    patch(&app, &world, &app.admin, json!({"on": false}), None)
        .await
        .0
        .error(409);
    app.stop().await;
}

async fn send_waiting(app: &TestApp, world: &World, label: &str, ttl: i64) -> String {
    let response = app
        .client
        .put(format!(
            "{}/api/v1/devices/{}/shadows",
            app.base,
            world.device["id"].as_str().unwrap()
        ))
        .bearer_auth(&app.admin)
        .json(&json!({"needack": true, "ttlSeconds": ttl, "contextId": label,
                      "payload": {"attrs": [{"code": "label", "value": label}]}}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    response.headers()["x-gantry-event-log-id"].to_str().unwrap().to_owned()
}

async fn log_of(app: &TestApp, world: &World, context: &str) -> Value {
    app.get(
        format!(
            "/api/v1/projects/{}/eventLogs?contextId={context}",
            world.project["id"].as_str().unwrap()
        ),
        &app.admin,
    )
    .await
    .result()["results"][0]
        .clone()
}

#[tokio::test]
async fn controls_wait_for_their_device_expire_and_are_cancelled() {
    let app = spawn_app_with(|c| c.ack_timeout = 2).await;
    let world = app.world().await;
    for bad in [json!(-1), json!(604_801), json!("60")] {
        let reply = app
            .put(
                format!("/api/v1/devices/{}/shadows", world.device["id"].as_str().unwrap()),
                &app.admin,
                json!({"ttlSeconds": bad, "payload": {"attrs": [{"code": "label", "value": "x"}]}}),
            )
            .await;
        assert!(reply.error(400).contains("ttlSeconds"), "{bad}");
    }
    let first = send_waiting(&app, &world, "first", 600).await;
    send_waiting(&app, &world, "brief", 1).await;
    let cancelled = send_waiting(&app, &world, "cancelled", 600).await;
    send_waiting(&app, &world, "second", 600).await;
    patch(&app, &world, &app.admin, json!({"setpoint": 7.5}), None)
        .await
        .0
        .result();

    let log = log_of(&app, &world, "first").await;
    assert_eq!(log["status"], "processing");
    assert!(
        log["expiresTime"].as_i64().is_some() && log["deliveredTime"].is_null(),
        "{log}"
    );
    let pending_path = format!(
        "/api/v1/devices/{}/pendingControls",
        world.device["id"].as_str().unwrap()
    );
    let pending = app.get(&pending_path, &app.admin).await.result();
    assert_eq!(pending["totalResults"], 4);
    assert_eq!(pending["results"][0]["id"], first.as_str());

    app.delete(format!("/api/v1/eventLogs/{cancelled}"), &app.admin)
        .await
        .result();
    let log = log_of(&app, &world, "cancelled").await;
    assert_eq!(
        (log["status"].clone(), log["reason"].clone()),
        (json!("exception"), json!("cancelled"))
    );
    app.delete(format!("/api/v1/eventLogs/{cancelled}"), &app.admin)
        .await
        .error(409);
    app.delete("/api/v1/eventLogs/no-such-log", &app.admin).await.error(404);

    // past the ack timeout while waiting: not an ack timeout; past its ttl: expired
    let expired = async || log_of(&app, &world, "brief").await["reason"] == "expired";
    assert!(wait_for(Duration::from_secs(8), expired).await);
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(log_of(&app, &world, "first").await["status"], "processing");

    // at connect: the waiting controls in send order, then the desired delta
    let mut device = connect(&app, &world).await;
    let got: Vec<Value> = vec![
        next(&mut device).await,
        next(&mut device).await,
        next(&mut device).await,
    ];
    let labels: Vec<Value> = got.iter().map(|m| m["payload"]["attrs"][0]["value"].clone()).collect();
    assert_eq!(labels, vec![json!("first"), json!("second"), json!(7.5)]);
    assert_eq!(got[2]["meta"]["type"], "c");
    let log = log_of(&app, &world, "first").await;
    assert!(log["deliveredTime"].as_i64().is_some(), "{log}");
    app.delete(format!("/api/v1/eventLogs/{first}"), &app.admin)
        .await
        .error(409);
    assert_eq!(app.get(&pending_path, &app.admin).await.result()["totalResults"], 0);
    device.ack(&got[0]).await.unwrap();
    assert!(
        wait_for(WAIT, async || log_of(&app, &world, "first").await["status"]
            == "completed")
        .await
    );
    // the other, not acknowledged, ends at the ack timeout counted from its delivery
    assert!(
        wait_for(WAIT, async || log_of(&app, &world, "second").await["status"]
            == "exception")
        .await
    );
    app.stop().await;
}

#[tokio::test]
async fn waiting_controls_and_desired_values_survive_a_restart() {
    let app = spawn_app().await;
    let world = app.world().await;
    let admin = app.admin.clone();
    send_waiting(&app, &world, "kept", 600).await;
    patch(&app, &world, &admin, json!({"on": true}), None).await.0.result();
    let again = app.restarted().await;
    assert_eq!(desired(&again, &world).await["attributes"]["on"]["status"], "pending");
    let mut device = connect(&again, &world).await;
    assert_eq!(next(&mut device).await["payload"]["attrs"][0]["value"], "kept");
    assert_eq!(next(&mut device).await["payload"]["attrs"][0]["value"], true);
    again.stop().await;
}

#[tokio::test]
#[ignore = "needs GANTRY_TEST_MQTT_BROKER_URL and GANTRY_E2E_POSTGRES_URL (two nodes, one database)"]
async fn two_nodes_with_an_external_broker_deliver_each_waiting_control_once() {
    use std::net::ToSocketAddrs;
    let url = crate::helpers::required_var("GANTRY_TEST_MQTT_BROKER_URL", "mqtt://127.0.0.1:1883");
    crate::helpers::required_var("GANTRY_E2E_POSTGRES_URL", "postgres://postgres@127.0.0.1:5432/postgres");
    let prefix = unique("gantry-desired");
    let (node_url, node_prefix) = (url.clone(), prefix.clone());
    let first = spawn_app_with(move |c| {
        c.mqtt_broker_url = Some(node_url);
        c.topic_prefix = node_prefix;
    })
    .await;
    let dir = tempfile::tempdir().unwrap();
    let mut config = gantry::config::ServeConfig::local(dir.path().to_path_buf());
    config.database_url = Some(first.database_url());
    config.admin_token = Some(first.admin.clone());
    config.mqtt_broker_url = Some(url);
    config.topic_prefix = prefix.clone();
    let second = crate::helpers::spawn_with(config, dir, first.admin.clone()).await;
    let world = first.world().await;
    let mut sent = Vec::new();
    for i in 0..6 {
        let app = if i % 2 == 0 { &first } else { &second };
        sent.push(send_waiting(app, &world, &format!("w{i}"), 600).await);
    }

    let addr = first.mqtt.to_socket_addrs().unwrap().next().unwrap();
    let mut device = DeviceClient::connect(
        addr,
        &prefix,
        world.device["id"].as_str().unwrap(),
        world.device["accessToken"].as_str().unwrap(),
    )
    .await
    .unwrap();
    device.subscribe_inbox().await.unwrap();
    // its messages reach both nodes (a shared subscription): each counts a connect
    for i in 0..10 {
        device.publish_attrs(&[("count", json!(i))], None, false).await.unwrap();
    }
    let mut labels = Vec::new();
    while let Some(received) = device.next_message(Duration::from_secs(3)).await.unwrap() {
        labels.push(
            received.json()["payload"]["attrs"][0]["value"]
                .as_str()
                .unwrap()
                .to_owned(),
        );
    }
    let wanted: Vec<String> = (0..6).map(|i| format!("w{i}")).collect();
    assert_eq!(labels, wanted, "each waiting control once, in send order");
    for id in sent {
        first
            .delete(format!("/api/v1/eventLogs/{id}"), &first.admin)
            .await
            .error(409);
    }
}

/// Mosquitto tells no client's connect: a device it carries counts as connected while its
/// messages come, so a change of its desired values, and a control that could wait, reach it
/// at once rather than at its next counted connect.
#[tokio::test]
#[ignore = "needs GANTRY_TEST_MQTT_BROKER_URL (an external broker without client events)"]
async fn through_a_broker_without_client_events_a_change_reaches_a_device_heard_from() {
    let url = crate::external::broker_url();
    let prefix = unique("gantry-heard");
    let app = crate::external::node(&url, &prefix).await;
    let world = app.world().await;
    let mut device = crate::external::device_on_broker(&app, &prefix, &world).await;
    device.publish_attrs(&[("count", json!(1))], None, false).await.unwrap();
    let counted = async || {
        let device = world.device["id"].as_str().unwrap();
        let logs = app
            .get(format!("/api/v1/devices/{device}/shadows"), &app.admin)
            .await
            .result();
        logs.to_string().contains("count")
    };
    assert!(wait_for(Duration::from_secs(10), counted).await, "the message is taken");

    let (reply, _) = patch(&app, &world, &app.admin, json!({"label": "east"}), None).await;
    assert_eq!(reply.status, 200, "{}", reply.body);
    let delta = device
        .next_message(Duration::from_secs(10))
        .await
        .unwrap()
        .expect("the delta comes at once, not at the next connect")
        .json();
    assert_eq!(delta["meta"]["type"], "c");
    assert_eq!(delta["payload"]["attrs"][0]["value"], "east");

    let id = send_waiting(&app, &world, "now", 600).await;
    let control = device
        .next_message(Duration::from_secs(10))
        .await
        .unwrap()
        .expect("a control that could wait is sent at once")
        .json();
    assert_eq!(control["payload"]["attrs"][0]["value"], "now");
    app.delete(format!("/api/v1/eventLogs/{id}"), &app.admin)
        .await
        .error(409);
    app.stop().await;
}

/// kill -9 of the real process: what was accepted before it waits in the store, and the
/// restarted process sends it at the device's connect.
#[tokio::test]
async fn waiting_controls_and_desired_values_survive_sigkill() {
    let seed = spawn_app().await;
    let world = seed.world().await;
    let admin = seed.admin.clone();
    let db = seed.database_url();
    let _seed_dir = seed.stop_keep_data().await;
    let data_dir = tempfile::tempdir().unwrap();

    let server = crate::crash::start_with(data_dir.path(), Some(&db), &admin, [0; 3], &[]).await;
    let app = TestApp::remote(&server.base, &admin);
    let first = send_waiting(&app, &world, "before-the-kill", 600).await;
    patch(&app, &world, &admin, json!({"label": "kept"}), None)
        .await
        .0
        .result();
    let mut child = server.child;
    child.start_kill().unwrap();
    child.wait().await.unwrap();

    let again = crate::crash::start_with(data_dir.path(), Some(&db), &admin, [0; 3], &[]).await;
    let app = TestApp::remote(&again.base, &admin);
    let pending = format!(
        "/api/v1/devices/{}/pendingControls",
        world.device["id"].as_str().unwrap()
    );
    assert_eq!(
        app.get(&pending, &admin).await.result()["results"][0]["id"],
        first.as_str()
    );
    let mut device = DeviceClient::connect(
        again.mqtt,
        PREFIX,
        world.device["id"].as_str().unwrap(),
        world.device["accessToken"].as_str().unwrap(),
    )
    .await
    .unwrap();
    device.subscribe_inbox().await.unwrap();
    let control = next(&mut device).await;
    assert_eq!(control["payload"]["attrs"][0]["value"], "before-the-kill");
    let delta = next(&mut device).await;
    assert_eq!(
        (delta["meta"]["type"].clone(), delta["meta"]["version"].clone()),
        (json!("c"), json!(1))
    );
    device.ack(&delta).await.unwrap();
    assert!(
        wait_for(WAIT, async || status_of(&desired(&app, &world).await, "label")
            == "applied")
        .await
    );
}
