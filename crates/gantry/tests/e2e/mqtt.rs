//! Devices over MQTT against the embedded broker: login, ACL, telemetry, controls, acks and
//! event logs. The device is a real MQTT client (rumqttc) on a real socket.

use std::time::Duration;

use gantry::device::DeviceClient;
use serde_json::{Value, json};

use crate::helpers::{TestApp, World, spawn_app, spawn_app_with, wait_for};

const PREFIX: &str = "gantry";

async fn device_of(app: &TestApp, world: &World) -> DeviceClient {
    let mut device = DeviceClient::connect(
        app.mqtt,
        PREFIX,
        world.device["id"].as_str().unwrap(),
        world.device["accessToken"].as_str().unwrap(),
    )
    .await
    .expect("the device logs in");
    device
        .subscribe_inbox()
        .await
        .expect("a device may subscribe to its inbox");
    device
}

async fn events_of(app: &TestApp, device: &Value) -> Value {
    app.get(
        format!("/api/v1/devices/{}/events", device["id"].as_str().unwrap()),
        &app.admin,
    )
    .await
    .result()
}

async fn shadow_of(app: &TestApp, device: &Value) -> Value {
    app.get(
        format!("/api/v1/devices/{}/shadows", device["id"].as_str().unwrap()),
        &app.admin,
    )
    .await
    .result()
}

async fn logs_of(app: &TestApp, world: &World, query: &str) -> Value {
    app.get(
        format!(
            "/api/v1/projects/{}/eventLogs{query}",
            world.project["id"].as_str().unwrap()
        ),
        &app.admin,
    )
    .await
    .result()
}

async fn control(app: &TestApp, world: &World, body: Value) -> crate::helpers::Reply {
    app.put(
        format!("/api/v1/devices/{}/shadows", world.device["id"].as_str().unwrap()),
        &app.admin,
        body,
    )
    .await
}

#[tokio::test]
async fn logins_are_checked_against_the_store() {
    let app = spawn_app().await;
    let world = app.world().await;
    let (id, token) = (
        world.device["id"].as_str().unwrap(),
        world.device["accessToken"].as_str().unwrap(),
    );
    DeviceClient::connect(app.mqtt, PREFIX, id, token)
        .await
        .expect("right token")
        .disconnect()
        .await;
    assert!(
        DeviceClient::connect(app.mqtt, PREFIX, id, "wrong-token")
            .await
            .is_err(),
        "wrong password"
    );
    let other = app.world().await;
    let other_token = other.device["accessToken"].as_str().unwrap();
    assert!(
        DeviceClient::connect(app.mqtt, PREFIX, id, other_token).await.is_err(),
        "another device's token"
    );
    assert!(
        DeviceClient::connect_as(app.mqtt, PREFIX, id, "someone", token)
            .await
            .is_err(),
        "username must be the device id"
    );
    assert!(
        DeviceClient::connect(app.mqtt, PREFIX, &uuid::Uuid::new_v4().to_string(), token)
            .await
            .is_err(),
        "unknown device"
    );
    let app_token = world.project["applicationAccessToken"].as_str().unwrap();
    assert!(
        DeviceClient::connect(app.mqtt, PREFIX, id, app_token).await.is_err(),
        "an application token is no device login"
    );
    app.put(format!("/api/v1/devices/{id}"), &app.admin, json!({"status": "Locked"}))
        .await
        .result();
    assert!(
        DeviceClient::connect(app.mqtt, PREFIX, id, token).await.is_err(),
        "a Locked device is refused"
    );
    let metrics = app.metrics_text().await;
    assert!(metrics.contains("gantry_mqtt_logins_refused_total 6"), "{metrics}");
}

/// MQTT 5 goes through the broker as 3.1.1 does (its own handshake, then the same session):
/// a wrong token is refused at the CONNACK, a QoS 1 publish is acknowledged once stored.
#[tokio::test]
async fn an_mqtt5_device_logs_in_and_publishes() {
    use rumqttc::v5::mqttbytes::QoS;
    use rumqttc::v5::mqttbytes::v5::Packet;
    use rumqttc::v5::{AsyncClient, Event, EventLoop, MqttOptions};

    let app = spawn_app().await;
    let world = app.world().await;
    let (id, token) = (
        world.device["id"].as_str().unwrap(),
        world.device["accessToken"].as_str().unwrap(),
    );
    let login = |password: &str| -> (AsyncClient, EventLoop) {
        let mut options = MqttOptions::new(id, app.mqtt.ip().to_string(), app.mqtt.port());
        options.set_credentials(id, password);
        AsyncClient::new(options, 10)
    };

    let (_refused, mut events) = login("wrong-token");
    let answer = tokio::time::timeout(Duration::from_secs(10), events.poll())
        .await
        .expect("the broker answers the CONNECT");
    assert!(answer.is_err(), "a wrong token is refused: {answer:?}");

    let (client, mut events) = login(token);
    let message = json!({
        "meta": {"id": "mqtt5-1", "type": "m", "deviceid": id,
                 "version": gantry_core::message::MESSAGE_VERSION, "ts": 1_714_492_800},
        "payload": {"attrs": [{"code": "temp", "value": 7.5, "channel": "m"}]}
    });
    client
        .publish(
            format!("{PREFIX}/in/json/{id}"),
            QoS::AtLeastOnce,
            false,
            message.to_string(),
        )
        .await
        .unwrap();
    tokio::time::timeout(Duration::from_secs(10), async {
        loop {
            if let Event::Incoming(Packet::PubAck(_)) = events.poll().await.expect("the session stays up") {
                return;
            }
        }
    })
    .await
    .expect("a PUBACK");
    let stored = events_of(&app, &world.device).await;
    assert_eq!(stored["totalResults"], 1, "{stored}");
    assert_eq!(stored["results"][0]["correlationId"], "mqtt5-1");
    assert_eq!(stored["results"][0]["deviceTimestamp"], 1_714_492_800_000_i64);
    // Its presence names the protocol.
    let mut presence = Value::Null;
    let recorded = wait_for(Duration::from_secs(10), async || {
        presence = app
            .get(format!("/api/v1/devices/{id}/connection"), &app.admin)
            .await
            .result();
        presence["connected"] == true
    })
    .await;
    assert!(recorded, "{presence}");
    assert_eq!(presence["protocol"], "MQTT 5");
}

#[tokio::test]
async fn a_device_is_kept_to_its_own_topics() {
    let app = spawn_app().await;
    let world = app.world().await;
    let other = app.world().await;
    let mut device = device_of(&app, &world).await;
    assert!(!device.subscribe("#").await.unwrap(), "subscribing to # is refused");
    assert!(!device.subscribe(&format!("{PREFIX}/out/json/+")).await.unwrap());
    assert!(
        !device
            .subscribe(&format!("{PREFIX}/out/json/{}", other.device["id"].as_str().unwrap()))
            .await
            .unwrap()
    );

    // publishing as another device stores nothing for either
    let forged = json!({"meta": {"id": "x", "type": "m"}, "payload": {"attrs": [{"code": "count", "value": 1}]}});
    let _ = device
        .publish_raw(
            &format!("{PREFIX}/in/json/{}", other.device["id"].as_str().unwrap()),
            serde_json::to_vec(&forged).unwrap(),
        )
        .await;
    let _ = device
        .publish_raw(
            &format!("{PREFIX}/out/json/{}", other.device["id"].as_str().unwrap()),
            serde_json::to_vec(&forged).unwrap(),
        )
        .await;
    // the other device's inbox got nothing from it
    let mut victim = device_of(&app, &other).await;
    let _ = device
        .publish_raw(
            &format!("{PREFIX}/out/json/{}", other.device["id"].as_str().unwrap()),
            b"{}".to_vec(),
        )
        .await;
    assert!(victim.next_message(Duration::from_millis(500)).await.unwrap().is_none());
    assert_eq!(events_of(&app, &other.device).await["totalResults"], 0);
    assert_eq!(events_of(&app, &world.device).await["totalResults"], 0);
}

#[tokio::test]
async fn telemetry_is_stored_before_the_puback_and_shadowed() {
    let app = spawn_app().await;
    let world = app.world().await;
    let mut device = device_of(&app, &world).await;
    let ts = 1_714_492_800;
    let id = device
        .publish_attrs(
            &[("temp", json!(21.5)), ("count", json!(3)), ("on", json!(true))],
            Some(ts),
            false,
        )
        .await
        .unwrap();
    // the PUBACK came: the events are already readable
    let events = events_of(&app, &world.device).await;
    assert_eq!(events["totalResults"], 3);
    for row in events["results"].as_array().unwrap() {
        assert_eq!(row["createdBy"], "DEVICE");
        assert_eq!(row["deviceTimestamp"], ts * 1000);
        assert_eq!(row["correlationId"], id.as_str());
        assert_eq!(row["projectId"], world.project["id"]);
    }
    let newer = device
        .publish_attrs(&[("temp", json!(22.0))], Some(ts + 10), false)
        .await;
    newer.unwrap();
    device
        .publish_attrs(&[("temp", json!(5.0))], Some(ts + 5), false)
        .await
        .unwrap();
    let shadow = shadow_of(&app, &world.device).await;
    assert_eq!(
        shadow["attributeMap"]["temp"],
        json!({"code": "temp", "value": 22.0, "timestamp": (ts + 10) * 1000})
    );
    assert_eq!(shadow["attributeMap"]["on"]["value"], true);
    // without meta.ts the arrival time is the device time
    device
        .publish_attrs(&[("label", json!("now"))], None, false)
        .await
        .unwrap();
    let label = app
        .get(
            format!(
                "/api/v1/devices/{}/attributeCode?attributeCode=label",
                world.device["id"].as_str().unwrap()
            ),
            &app.admin,
        )
        .await
        .result();
    assert!(label["results"][0]["deviceTimestamp"].as_i64().unwrap() > 1_700_000_000_000);
}

#[tokio::test]
async fn bad_telemetry_is_refused_counted_and_acked() {
    let app = spawn_app().await;
    let world = app.world().await;
    let mut device = device_of(&app, &world).await;
    let id = device
        .publish_attrs(
            &[
                ("count", json!(1)),
                ("nosuch", json!(2)),
                ("temp", json!("hot")),
                ("count", json!(2.5)),
            ],
            Some(1_714_492_800),
            true,
        )
        .await
        .unwrap();
    let ack = device
        .next_message(Duration::from_secs(5))
        .await
        .unwrap()
        .expect("an ack on the inbox")
        .json();
    assert_eq!(ack["meta"]["type"], "ack");
    assert_eq!(ack["meta"]["correlationId"], id.as_str());
    let refused: Vec<&str> = ack["payload"]["refused"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["code"].as_str().unwrap())
        .collect();
    assert_eq!(refused, vec!["nosuch", "temp", "count"]);
    assert_eq!(
        events_of(&app, &world.device).await["totalResults"],
        1,
        "only the valid entry is stored"
    );

    let topic = device.upstream_topic();
    device.publish_raw(&topic, b"not json at all".to_vec()).await.unwrap();
    device
        .publish_raw(
            &topic,
            br#"{"meta": {"type": "m"}, "payload": {"attrs": "nope"}}"#.to_vec(),
        )
        .await
        .unwrap();
    assert_eq!(events_of(&app, &world.device).await["totalResults"], 1);
    let metrics = app.metrics_text().await;
    assert!(metrics.contains("gantry_mqtt_entries_refused_total 5"), "{metrics}");
    assert!(metrics.contains("gantry_mqtt_events_stored_total 1"), "{metrics}");
}

#[tokio::test]
async fn controls_reach_the_device_and_acks_complete_them() {
    let app = spawn_app().await;
    let world = app.world().await;
    let mut device = device_of(&app, &world).await;
    let reply = control(
        &app,
        &world,
        json!({"type": "m", "needack": true, "contextId": "ctx-1",
        "payload": {"attrs": [{"code": "setpoint", "value": 42.5, "channel": "m"}],
                    "actions": [{"code": "reboot", "params": {"delay": 5}}]}}),
    )
    .await;
    assert_eq!(reply.body, json!({"returnCode": 0}));
    let received = device
        .next_message(Duration::from_secs(5))
        .await
        .unwrap()
        .expect("the control arrives");
    assert_eq!(received.topic, device.inbox_topic());
    let message = received.json();
    let meta = &message["meta"];
    uuid::Uuid::parse_str(meta["id"].as_str().unwrap()).unwrap();
    assert_eq!(
        (meta["type"].clone(), meta["deviceid"].clone(), meta["needack"].clone()),
        (json!("m"), world.device["id"].clone(), json!(true))
    );
    assert!(meta["ts"].as_i64().unwrap() > 1_700_000_000);
    assert_eq!(
        message["payload"]["attrs"],
        json!([{"code": "setpoint", "value": 42.5, "channel": "m"}])
    );
    assert_eq!(
        message["payload"]["actions"],
        json!([{"code": "reboot", "params": {"delay": 5}}])
    );

    let pending = logs_of(&app, &world, "").await;
    assert_eq!(pending["totalResults"], 1);
    let log = &pending["results"][0];
    assert_eq!(
        (log["status"].clone(), log["classification"].clone()),
        (json!("processing"), json!("DeviceControll"))
    );
    assert_eq!(
        (log["contextId"].clone(), log["deviceName"].clone()),
        (json!("ctx-1"), world.device["deviceName"].clone())
    );
    assert_eq!(log["eventData"], message);
    assert_eq!(log["eventId"], meta["id"]);

    device.ack(&message).await.unwrap();
    let done = logs_of(&app, &world, &format!("?eventId={}", meta["id"].as_str().unwrap())).await;
    assert_eq!(done["totalResults"], 1);
    assert_eq!(done["results"][0]["status"], "completed");
    assert_eq!(done["results"][0]["responses"][0]["meta"]["correlationId"], meta["id"]);
    let all = logs_of(&app, &world, "?sortBy=createdTime&sortOrder=ASC").await;
    let kinds: Vec<&str> = all["results"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l["classification"].as_str().unwrap())
        .collect();
    assert_eq!(kinds, vec!["DeviceControll", "Response"]);
    assert_eq!(
        all["results"][1]["contextId"], "ctx-1",
        "the response carries its control's context"
    );

    // without needack the control is completed at once
    control(&app, &world, json!({"type": "c", "payload": {"actions": [{"code": "reboot", "params": {"delay": 1}}]}, "contextId": "ctx-2"})).await.result_done();
    let quick = logs_of(&app, &world, "?contextId=ctx-2").await;
    assert_eq!(quick["results"][0]["status"], "completed");
    assert_eq!(
        device
            .next_message(Duration::from_secs(5))
            .await
            .unwrap()
            .unwrap()
            .json()["meta"]["type"],
        "c"
    );
}

#[tokio::test]
async fn a_missing_ack_ends_in_exception() {
    let app = spawn_app_with(|c| c.ack_timeout = 1).await;
    let world = app.world().await;
    let mut device = device_of(&app, &world).await;
    control(
        &app,
        &world,
        json!({"needack": true, "payload": {"attrs": [{"code": "label", "value": "x"}]}}),
    )
    .await
    .result_done();
    let message = device
        .next_message(Duration::from_secs(5))
        .await
        .unwrap()
        .unwrap()
        .json();
    let mut status = json!(null);
    wait_for(Duration::from_secs(5), async || {
        status = logs_of(&app, &world, "").await["results"][0]["status"].clone();
        status == "exception"
    })
    .await;
    assert_eq!(status, "exception");
    // a late ack is kept as a response but does not undo the exception
    device.ack(&message).await.unwrap();
    let log = logs_of(
        &app,
        &world,
        &format!("?eventId={}", message["meta"]["id"].as_str().unwrap()),
    )
    .await;
    assert_eq!(log["results"][0]["status"], "exception");
    assert_eq!(log["results"][0]["responses"].as_array().unwrap().len(), 1);
}

#[tokio::test]
async fn pending_acks_survive_a_restart() {
    let app = spawn_app().await;
    let world = app.world().await;
    let admin = app.admin.clone();
    control(
        &app,
        &world,
        json!({"needack": true, "payload": {"attrs": [{"code": "label", "value": "x"}]}}),
    )
    .await
    .result_done();
    let control_id = logs_of(&app, &world, "").await["results"][0]["eventId"].clone();
    let database_url = app.database_url();
    let dir = app.stop_keep_data().await.unwrap();

    let mut config = gantry::config::ServeConfig::local(dir.path().to_path_buf());
    config.admin_token = Some(admin.clone());
    config.database_url = Some(database_url);
    let again = crate::helpers::spawn_with(config, dir, admin).await;
    let mut device = device_of(&again, &world).await;
    device.ack(&json!({"meta": {"id": control_id}})).await.unwrap();
    let log = logs_of(&again, &world, &format!("?eventId={}", control_id.as_str().unwrap())).await;
    assert_eq!(log["results"][0]["status"], "completed");
}

#[tokio::test]
async fn control_rules() {
    let app = spawn_app().await;
    let world = app.world().await;
    for (body, field) in [
        (
            json!({"payload": {"attrs": [{"code": "temp", "value": 1.0}]}}),
            "payload.attrs[0].code",
        ),
        (
            json!({"payload": {"attrs": [{"code": "nosuch", "value": 1.0}]}}),
            "payload.attrs[0].code",
        ),
        (
            json!({"payload": {"attrs": [{"code": "setpoint", "value": "high"}]}}),
            "payload.attrs[0].value",
        ),
        (
            json!({"payload": {"actions": [{"code": "jump"}]}}),
            "payload.actions[0].code",
        ),
        (
            json!({"payload": {"actions": [{"code": "reboot", "params": {}}]}}),
            "payload.actions[0].params.delay",
        ),
        (
            json!({"payload": {"actions": [{"code": "reboot", "params": {"delay": "soon"}}]}}),
            "payload.actions[0].params.delay",
        ),
        (json!({"payload": {"attrs": [], "actions": []}}), "payload"),
        (json!({}), "payload"),
        (
            json!({"type": "ack", "payload": {"attrs": [{"code": "label", "value": "x"}]}}),
            "correlationId",
        ),
        (
            json!({"type": "log", "payload": {"attrs": [{"code": "label", "value": "x"}]}}),
            "type",
        ),
        (
            json!({"type": "z", "payload": {"attrs": [{"code": "label", "value": "x"}]}}),
            "type",
        ),
    ] {
        let message = control(&app, &world, body.clone()).await.error(400);
        assert!(message.starts_with(field), "{body}: {message}");
    }
    assert_eq!(
        logs_of(&app, &world, "").await["totalResults"],
        0,
        "refused controls leave no log"
    );
    let ok = json!({"type": "ack", "correlationId": "req-1", "payload": {"attrs": [{"code": "label", "value": "x"}]}});
    control(&app, &world, ok.clone()).await.result_done();
    let token = world.device["accessToken"].as_str().unwrap();
    app.put(
        format!("/api/v1/devices/{}/shadows", world.device["id"].as_str().unwrap()),
        token,
        ok.clone(),
    )
    .await
    .error(403);
    let app_token = world.project["applicationAccessToken"].as_str().unwrap();
    app.put(
        format!("/api/v1/devices/{}/shadows", world.device["id"].as_str().unwrap()),
        app_token,
        ok.clone(),
    )
    .await
    .result_done();
    app.put(
        format!("/api/v1/devices/{}", world.device["id"].as_str().unwrap()),
        &app.admin,
        json!({"status": "Locked"}),
    )
    .await
    .result();
    control(&app, &world, ok).await.error(409);
}

#[tokio::test]
async fn event_log_listing_filters() {
    let app = spawn_app().await;
    let world = app.world().await;
    let second = app.create_device(&app.admin, &world.project, &world.model).await;
    for (device, context) in [(&world.device, "a"), (&world.device, "b"), (&second, "a")] {
        app.put(
            format!("/api/v1/devices/{}/shadows", device["id"].as_str().unwrap()),
            &app.admin,
            json!({"contextId": context, "payload": {"attrs": [{"code": "label", "value": context}]}}),
        )
        .await
        .result_done();
    }
    assert_eq!(logs_of(&app, &world, "").await["totalResults"], 3);
    assert_eq!(logs_of(&app, &world, "?contextId=a").await["totalResults"], 2);
    let mine = logs_of(&app, &world, &format!("?deviceId={}", second["id"].as_str().unwrap())).await;
    assert_eq!(mine["totalResults"], 1);
    assert_eq!(mine["results"][0]["deviceName"], second["deviceName"]);
    let asc = logs_of(&app, &world, "?sortBy=createdTime&sortOrder=ASC").await;
    let contexts: Vec<&str> = asc["results"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l["contextId"].as_str().unwrap())
        .collect();
    assert_eq!(contexts, vec!["a", "b", "a"]);
    let page = logs_of(&app, &world, "?pageSize=2&pageNo=2").await;
    assert_eq!(
        (page["numResults"].as_i64(), page["totalResults"].as_i64()),
        (Some(1), Some(3))
    );
    for bad in ["?sortBy=name", "?sortOrder=UP", "?pageNo=0"] {
        app.get(
            format!(
                "/api/v1/projects/{}/eventLogs{bad}",
                world.project["id"].as_str().unwrap()
            ),
            &app.admin,
        )
        .await
        .error(400);
    }
    let other = app.world().await;
    let token = other.project["applicationAccessToken"].as_str().unwrap();
    app.get(
        format!("/api/v1/projects/{}/eventLogs", world.project["id"].as_str().unwrap()),
        token,
    )
    .await
    .error(403);
}

#[tokio::test]
async fn locking_a_connected_device_disconnects_it() {
    let app = spawn_app().await;
    let world = app.world().await;
    let mut device = device_of(&app, &world).await;
    app.put(
        format!("/api/v1/devices/{}", world.device["id"].as_str().unwrap()),
        &app.admin,
        json!({"status": "Locked"}),
    )
    .await
    .result();
    assert!(
        device.closed_within(Duration::from_secs(5)).await,
        "the broker closes a Locked device's connection"
    );
}

#[tokio::test]
async fn the_simulator_publishes_and_acks_controls() {
    let app = spawn_app().await;
    let world = app.world().await;
    let (id, token) = (
        world.device["id"].as_str().unwrap(),
        world.device["accessToken"].as_str().unwrap(),
    );
    let broker = app.mqtt.to_string();
    let args = [
        "device",
        "--broker",
        &broker,
        "--id",
        id,
        "--token",
        token,
        "--attr",
        "temp:Float",
        "--attr",
        "count:Integer",
    ];
    let mut simulator = tokio::process::Command::new(env!("CARGO_BIN_EXE_gantry"))
        .args(args)
        .args(["--interval", "0.2", "--count", "15"])
        .stdout(std::process::Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let stored = wait_for(Duration::from_secs(5), async || {
        events_of(&app, &world.device).await["totalResults"].as_i64().unwrap() > 0
    })
    .await;
    assert!(stored, "the simulator's values arrive");
    control(
        &app,
        &world,
        json!({"needack": true, "payload": {"attrs": [{"code": "label", "value": "hi"}]}}),
    )
    .await
    .result_done();
    let mut status = json!(null);
    wait_for(Duration::from_secs(5), async || {
        status = logs_of(&app, &world, "?sortBy=createdTime&sortOrder=ASC").await["results"][0]["status"].clone();
        status == "completed"
    })
    .await;
    assert_eq!(status, "completed", "the simulator acks controls");
    assert!(simulator.wait().await.unwrap().success());
    assert_eq!(
        events_of(&app, &world.device).await["totalResults"],
        30,
        "15 publishes of 2 attributes"
    );
}

/// Each connection's buffers start small (vendor/rmqtt-net): packets far larger than that still
/// cross whole, both ways, and the connection goes on working after them.
#[tokio::test]
async fn large_packets_cross_the_broker_both_ways() {
    let app = spawn_app().await;
    let world = app.world().await;
    let mut device = device_of(&app, &world).await;
    // The device client (rumqttc) takes packets up to 10 KiB.
    let long = "x".repeat(9_000);
    device
        .publish_attrs(&[("label", json!(long))], Some(1_714_492_800), false)
        .await
        .unwrap();
    device
        .publish_attrs(&[("temp", json!(1.5))], Some(1_714_492_801), false)
        .await
        .unwrap();
    let shadow = shadow_of(&app, &world.device).await;
    assert_eq!(shadow["attributeMap"]["label"]["value"], json!(long));
    assert_eq!(shadow["attributeMap"]["temp"]["value"], 1.5);

    let setting = "y".repeat(9_000);
    let reply = control(
        &app,
        &world,
        json!({"type": "m", "needack": false,
               "payload": {"attrs": [{"code": "label", "value": setting, "channel": "m"}]}}),
    )
    .await;
    assert_eq!(reply.body, json!({"returnCode": 0}));
    let received = device
        .next_message(Duration::from_secs(5))
        .await
        .unwrap()
        .expect("the control arrives");
    assert_eq!(received.json()["payload"]["attrs"][0]["value"], json!(setting));
    device
        .publish_attrs(&[("temp", json!(2.5))], Some(1_714_492_802), false)
        .await
        .unwrap();
    assert_eq!(events_of(&app, &world.device).await["totalResults"], 3);
}

/// A Last Will is a publish made on the device's behalf when it drops. One aimed at another
/// device's inbox (of its tenant or another) or asking to be retained refuses the CONNECT, over
/// MQTT 3.1.1 and 5; one on the device's own upstream topic is ingested when the device drops.
#[tokio::test]
async fn last_wills_pass_the_publish_acl() {
    use rumqttc::{LastWill, MqttOptions, QoS};

    let app = spawn_app().await;
    let world = app.world().await;
    let neighbour = app.world().await;
    let tenant = app
        .post(
            "/api/v1/tenants",
            &app.admin,
            json!({"name": crate::helpers::unique("tenant")}),
        )
        .await
        .result();
    let foreign_admin = tenant["adminToken"].as_str().unwrap();
    let foreign_project = app.create_project(foreign_admin).await;
    let foreign_model = app.create_model(foreign_admin).await;
    let foreign = World {
        device: app.create_device(foreign_admin, &foreign_project, &foreign_model).await,
        project: foreign_project,
        model: foreign_model,
    };
    let mut victims = [device_of(&app, &neighbour).await, device_of(&app, &foreign).await];
    let (id, token) = (
        world.device["id"].as_str().unwrap(),
        world.device["accessToken"].as_str().unwrap(),
    );
    let forged = json!({"meta": {"id": "forged", "type": "c"}, "payload": {"actions": [{"code": "reboot", "params": {"delay": 0}}]}});
    let with_will = |topic: String, retain: bool| {
        let mut options = MqttOptions::new(id, app.mqtt.ip().to_string(), app.mqtt.port());
        options.set_last_will(LastWill::new(topic, forged.to_string(), QoS::AtLeastOnce, retain));
        DeviceClient::connect_with(options, PREFIX, id, token)
    };
    for victim in [&neighbour, &foreign] {
        let inbox = format!("{PREFIX}/out/json/{}", victim.device["id"].as_str().unwrap());
        let refused = with_will(inbox, false)
            .await
            .err()
            .expect("a will to another inbox is refused");
        assert!(refused.to_string().contains("NotAuthorized"), "{refused}");
    }
    let retained = with_will(format!("{PREFIX}/in/json/{id}"), true).await;
    assert!(retained.is_err(), "a will to be retained is refused");

    // MQTT 5: the CONNACK says 0x87 (not authorized).
    {
        use rumqttc::v5::mqttbytes::v5::{ConnectReturnCode, LastWill};
        use rumqttc::v5::{AsyncClient, ConnectionError, MqttOptions};
        let mut options = MqttOptions::new(id, app.mqtt.ip().to_string(), app.mqtt.port());
        options.set_credentials(id, token);
        let inbox = format!("{PREFIX}/out/json/{}", foreign.device["id"].as_str().unwrap());
        options.set_last_will(LastWill::new(
            inbox,
            forged.to_string(),
            rumqttc::v5::mqttbytes::QoS::AtLeastOnce,
            false,
            None,
        ));
        let (_client, mut events) = AsyncClient::new(options, 10);
        let answer = tokio::time::timeout(Duration::from_secs(10), events.poll())
            .await
            .expect("the broker answers the CONNECT");
        assert!(
            matches!(
                answer,
                Err(ConnectionError::ConnectionRefused(ConnectReturnCode::NotAuthorized))
            ),
            "{answer:?}"
        );
    }

    // A will on the device's own upstream topic is a message like any other.
    let mut options = MqttOptions::new(id, app.mqtt.ip().to_string(), app.mqtt.port());
    let will =
        json!({"meta": {"id": "will-1", "type": "log"}, "payload": {"attrs": [{"code": "label", "value": "offline"}]}});
    options.set_last_will(LastWill::new(
        format!("{PREFIX}/in/json/{id}"),
        will.to_string(),
        QoS::AtLeastOnce,
        false,
    ));
    options.set_credentials(id, token);
    let (client, mut connection) = rumqttc::AsyncClient::new(options, 10);
    loop {
        match tokio::time::timeout(Duration::from_secs(10), connection.poll()).await {
            Ok(Ok(rumqttc::Event::Incoming(rumqttc::Packet::ConnAck(_)))) => break,
            Ok(Ok(_)) => {}
            other => panic!("a will on its own upstream topic is allowed: {other:?}"),
        }
    }
    // The socket closes without a DISCONNECT, as when a device loses power.
    drop((client, connection));
    assert!(
        wait_for(Duration::from_secs(10), async || {
            let events = events_of(&app, &world.device).await;
            events["totalResults"] == 1 && events["results"][0]["correlationId"] == "will-1"
        })
        .await,
        "the will is ingested: {}",
        events_of(&app, &world.device).await
    );
    for victim in &mut victims {
        assert!(victim.next_message(Duration::from_millis(300)).await.unwrap().is_none());
    }
}

/// The broker keeps no retained messages: a retained publish along a route reaches the device
/// connected then, and nobody who subscribes later.
#[tokio::test]
async fn nothing_is_retained() {
    use rumqttc::{AsyncClient, Event, MqttOptions, Packet, QoS};

    let app = spawn_app().await;
    let world = app.world().await;
    let did = world.device["id"].as_str().unwrap();
    let route = app
        .post(
            format!("/api/v1/devices/{did}/routes"),
            &app.admin,
            json!({"sourceType": "APP"}),
        )
        .await
        .result();
    let role = &route["temporaryRole"];
    let mut options = MqttOptions::new(
        role["clientId"].as_str().unwrap(),
        app.mqtt.ip().to_string(),
        app.mqtt.port(),
    );
    options.set_credentials(role["username"].as_str().unwrap(), role["password"].as_str().unwrap());
    let (client, mut events) = AsyncClient::new(options, 10);
    let message = json!({"meta": {"id": "kept?", "type": "c"}, "payload": {"actions": [{"code": "reboot", "params": {"delay": 1}}]}});
    client
        .publish(
            format!("{PREFIX}/out/json/{did}"),
            QoS::AtLeastOnce,
            true,
            message.to_string(),
        )
        .await
        .unwrap();
    tokio::time::timeout(Duration::from_secs(10), async {
        loop {
            if let Event::Incoming(Packet::PubAck(_)) = events.poll().await.expect("the route identity stays connected")
            {
                return;
            }
        }
    })
    .await
    .expect("the routed message is acknowledged");
    let mut device = device_of(&app, &world).await;
    assert!(
        device.next_message(Duration::from_millis(500)).await.unwrap().is_none(),
        "nothing retained reaches a later subscriber"
    );
}

/// The README's own examples send no `meta.id`: the message is stored with one the service
/// assigns, and an ack needs only its type and correlationId.
#[tokio::test]
async fn messages_without_a_meta_id_are_taken() {
    let app = spawn_app().await;
    let world = app.world().await;
    let mut device = device_of(&app, &world).await;
    let topic = device.upstream_topic();
    device
        .publish_raw(
            &topic,
            br#"{"meta": {"type": "m"}, "payload": {"attrs": [{"code": "temp", "value": 2.5}]}}"#.to_vec(),
        )
        .await
        .unwrap();
    let events = events_of(&app, &world.device).await;
    assert_eq!(events["totalResults"], 1, "{events}");
    let assigned = events["results"][0]["correlationId"].as_str().unwrap_or_default();
    assert!(!assigned.is_empty(), "an id is assigned: {events}");

    let sent = control(
        &app,
        &world,
        json!({"needack": true, "payload": {"attrs": [{"code": "label", "value": "x"}]}}),
    )
    .await
    .result();
    let control_id = device
        .next_message(Duration::from_secs(5))
        .await
        .unwrap()
        .expect("the control")
        .json()["meta"]["id"]
        .clone();
    device
        .publish_raw(
            &topic,
            json!({"meta": {"type": "ack", "correlationId": control_id}})
                .to_string()
                .into_bytes(),
        )
        .await
        .unwrap();
    assert!(
        wait_for(Duration::from_secs(5), async || {
            logs_of(&app, &world, &format!("?eventId={}", control_id.as_str().unwrap())).await["results"][0]["status"]
                == "completed"
        })
        .await,
        "the ack completes the control: {sent}"
    );
}

/// Text holding a NUL (which PostgreSQL cannot store) is refused as a bad message on both
/// engines: acknowledged, not stored, and the connection stays up (no endless redelivery).
#[tokio::test]
async fn a_message_holding_a_nul_is_refused_not_retried() {
    let app = spawn_app().await;
    let world = app.world().await;
    let mut device = device_of(&app, &world).await;
    let topic = device.upstream_topic();
    for message in [
        json!({"meta": {"id": "a\u{0}", "type": "m", "needack": true}, "payload": {"attrs": [{"code": "label", "value": "x"}]}}),
        json!({"meta": {"id": "b", "type": "m", "needack": true}, "payload": {"attrs": [{"code": "label", "value": "\u{0}"}]}}),
    ] {
        device
            .publish_raw(&topic, message.to_string().into_bytes())
            .await
            .unwrap();
        let ack = device.next_message(Duration::from_secs(5)).await.unwrap();
        assert!(
            ack.is_none(),
            "a message that is not a storable Message gets no ack of its own: {ack:?}"
        );
    }
    device
        .publish_attrs(&[("count", json!(3))], None, false)
        .await
        .expect("the session is still up");
    let events = events_of(&app, &world.device).await;
    assert_eq!(events["totalResults"], 1, "{events}");
    assert_eq!(events["results"][0]["attributeCode"], "count");
}

/// MQTT 5 PUBACKs say what became of a publish: 0x87 for a topic of another client, 0x90 for
/// a topic outside Gantry's tree, 0x99 for a payload that is not a Message, 0x83 when the model
/// refused every entry, 0x00 when something was stored. The device stays connected throughout.
#[tokio::test]
async fn mqtt5_pubacks_carry_reason_codes() {
    use rumqttc::v5::mqttbytes::QoS;
    use rumqttc::v5::mqttbytes::v5::{Packet, PubAckReason};
    use rumqttc::v5::{AsyncClient, Event, MqttOptions};

    let app = spawn_app().await;
    let world = app.world().await;
    let other = app.world().await;
    let id = world.device["id"].as_str().unwrap();
    let mut options = MqttOptions::new(id, app.mqtt.ip().to_string(), app.mqtt.port());
    options.set_credentials(id, world.device["accessToken"].as_str().unwrap());
    let (client, mut events) = AsyncClient::new(options, 10);
    let own = format!("{PREFIX}/in/json/{id}");
    let good = json!({"meta": {"type": "m"}, "payload": {"attrs": [{"code": "count", "value": 1}]}}).to_string();
    let all_refused =
        json!({"meta": {"type": "m"}, "payload": {"attrs": [{"code": "nosuch", "value": 1}]}}).to_string();
    let cases = [
        (
            format!("{PREFIX}/in/json/{}", other.device["id"].as_str().unwrap()),
            good.clone(),
            PubAckReason::NotAuthorized,
        ),
        (
            "elsewhere/topic".to_owned(),
            good.clone(),
            PubAckReason::TopicNameInvalid,
        ),
        (own.clone(), "not json".to_owned(), PubAckReason::PayloadFormatInvalid),
        (own.clone(), all_refused, PubAckReason::ImplementationSpecificError),
        (own.clone(), good, PubAckReason::Success),
    ];
    for (topic, payload, expected) in cases {
        client
            .publish(topic.clone(), QoS::AtLeastOnce, false, payload)
            .await
            .unwrap();
        let reason = tokio::time::timeout(Duration::from_secs(10), async {
            loop {
                if let Event::Incoming(Packet::PubAck(ack)) = events.poll().await.expect("the session stays up") {
                    return ack.reason;
                }
            }
        })
        .await
        .expect("a PUBACK");
        assert_eq!(reason, expected, "{topic}");
    }
    assert_eq!(events_of(&app, &world.device).await["totalResults"], 1);
}

/// Sockets that connect and send nothing, or only part of a CONNECT, are closed at the CONNECT
/// deadline (`--mqtt-connect-timeout`); devices go on logging in while they are held.
#[tokio::test]
async fn silent_sockets_are_closed_at_the_connect_deadline() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    let app = spawn_app_with(|c| c.mqtt_connect_timeout = 1).await;
    let world = app.world().await;
    let mut silent = Vec::new();
    for i in 0..200 {
        let mut socket = tokio::net::TcpStream::connect(app.mqtt).await.unwrap();
        if i % 2 == 1 {
            // A CONNECT's fixed header announcing 32 bytes, and one of them.
            socket.write_all(&[0x10, 0x20, 0x00]).await.unwrap();
        }
        silent.push(socket);
    }
    device_of(&app, &world).await.disconnect().await;
    let started = tokio::time::Instant::now();
    for socket in &mut silent {
        let mut buf = [0u8; 16];
        let read = tokio::time::timeout(Duration::from_secs(5), socket.read(&mut buf))
            .await
            .expect("the server closes a silent socket");
        assert!(matches!(read, Ok(0) | Err(_)), "{read:?}");
    }
    assert!(started.elapsed() < Duration::from_secs(5));
}

/// The broker's limits, each with its documented answer, while another device goes on being
/// served: a message with more entries than `--mqtt-max-attributes` is refused whole (0x99,
/// connection kept); a packet over `--mqtt-max-packet-size` and garbage bytes close their own
/// connection; publishing faster than `--mqtt-publish-rate` closes the connection without a PUBACK
/// for the publish over it, and the device logs in again.
#[tokio::test]
async fn limits_answer_abuse_and_spare_other_devices() {
    use rumqttc::v5::mqttbytes::QoS;
    use rumqttc::v5::mqttbytes::v5::{Packet, PubAckReason};
    use rumqttc::v5::{AsyncClient, Event, MqttOptions};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    let app = spawn_app_with(|c| {
        c.mqtt_max_attributes = 3;
        c.mqtt_max_packet_size = 64 * 1024;
        c.mqtt_publish_rate = 20;
    })
    .await;
    let world = app.world().await;
    let bystander = app.world().await;
    let mut calm = device_of(&app, &bystander).await;

    // Too many entries: refused whole, the connection stays.
    let id = world.device["id"].as_str().unwrap();
    let mut options = MqttOptions::new(id, app.mqtt.ip().to_string(), app.mqtt.port());
    options.set_credentials(id, world.device["accessToken"].as_str().unwrap());
    options.set_max_packet_size(Some(1 << 20));
    let (client, mut events) = AsyncClient::new(options, 10);
    let attrs: Vec<Value> = (0..4).map(|i| json!({"code": "count", "value": i})).collect();
    let publish = async |payload: String| {
        client
            .publish(format!("{PREFIX}/in/json/{id}"), QoS::AtLeastOnce, false, payload)
            .await
            .unwrap();
    };
    publish(json!({"meta": {"type": "m"}, "payload": {"attrs": attrs}}).to_string()).await;
    let reason = tokio::time::timeout(Duration::from_secs(10), async {
        loop {
            if let Event::Incoming(Packet::PubAck(ack)) = events.poll().await.expect("the session stays up") {
                return ack.reason;
            }
        }
    })
    .await
    .unwrap();
    assert_eq!(reason, PubAckReason::PayloadFormatInvalid);
    assert_eq!(events_of(&app, &world.device).await["totalResults"], 0);

    // A packet over the size limit closes that connection.
    publish("x".repeat(100 * 1024)).await;
    let closed = tokio::time::timeout(Duration::from_secs(10), async {
        loop {
            if events.poll().await.is_err() {
                return;
            }
        }
    })
    .await;
    assert!(closed.is_ok(), "an oversized packet closes the connection");

    // Garbage instead of MQTT.
    let mut garbage = tokio::net::TcpStream::connect(app.mqtt).await.unwrap();
    garbage.write_all(&[0xff; 64]).await.unwrap();
    let mut buf = [0u8; 16];
    let read = tokio::time::timeout(Duration::from_secs(10), garbage.read(&mut buf))
        .await
        .unwrap();
    assert!(matches!(read, Ok(0) | Err(_)), "{read:?}");

    // Faster than 20 publishes/s: the bucket holds 20, the next publish closes the connection.
    let mut device = device_of(&app, &world).await;
    let mut acked = 0;
    for i in 0..40 {
        if device.publish_attrs(&[("count", json!(i))], None, false).await.is_err() {
            break;
        }
        acked += 1;
    }
    assert!((20..40).contains(&acked), "{acked} acknowledged before the limit");
    assert_eq!(events_of(&app, &world.device).await["totalResults"], acked);
    device_of(&app, &world)
        .await
        .publish_attrs(&[("count", json!(1))], None, false)
        .await
        .expect("it logs in again");

    // The bystander was served throughout.
    calm.publish_attrs(&[("temp", json!(1.0))], None, false).await.unwrap();
    assert_eq!(events_of(&app, &bystander.device).await["totalResults"], 1);
    let metrics = app.metrics_text().await;
    assert!(metrics.contains("gantry_mqtt_publishes_over_rate_total 1"), "{metrics}");
}

/// An MQTT 5 device publishing faster than `--mqtt-publish-rate` is told why it is closed:
/// DISCONNECT with reason 0x96 (message rate too high), and no PUBACK for the publish over it.
#[tokio::test]
async fn an_mqtt5_device_over_the_publish_rate_is_told_message_rate_too_high() {
    use rumqttc::v5::mqttbytes::QoS;
    use rumqttc::v5::mqttbytes::v5::{DisconnectReasonCode, Packet};
    use rumqttc::v5::{AsyncClient, ConnectionError, Event, MqttOptions, StateError};

    let app = spawn_app_with(|c| c.mqtt_publish_rate = 5).await;
    let world = app.world().await;
    let id = world.device["id"].as_str().unwrap();
    let mut options = MqttOptions::new(id, app.mqtt.ip().to_string(), app.mqtt.port());
    options.set_credentials(id, world.device["accessToken"].as_str().unwrap());
    let (client, mut events) = AsyncClient::new(options, 64);
    for i in 0..20 {
        let payload = json!({"meta": {"type": "m"}, "payload": {"attrs": [{"code": "count", "value": i}]}});
        client
            .publish(
                format!("{PREFIX}/in/json/{id}"),
                QoS::AtLeastOnce,
                false,
                payload.to_string(),
            )
            .await
            .unwrap();
    }
    let (mut acked, mut reason) = (0, None);
    tokio::time::timeout(Duration::from_secs(10), async {
        loop {
            match events.poll().await {
                Ok(Event::Incoming(Packet::PubAck(_))) => acked += 1,
                Ok(_) => {}
                Err(ConnectionError::MqttState(StateError::ServerDisconnect { reason_code, .. })) => {
                    reason = Some(reason_code);
                    return;
                }
                Err(_) => return,
            }
        }
    })
    .await
    .expect("the connection is closed");
    assert_eq!(reason, Some(DisconnectReasonCode::MessageRateTooHigh));
    // PUBACKs read in the batch that ended with the DISCONNECT are not shown as events: the
    // stored count is the exact one, the acknowledged one a lower bound of it.
    let stored = events_of(&app, &world.device).await["totalResults"].as_u64().unwrap();
    assert!(
        acked <= stored && (5..20).contains(&stored),
        "{acked} acknowledged, {stored} stored: the bucket holds 5"
    );
    app.stop().await;
}

/// `PUT /shadows` answers the specification's `{"returnCode": 0}` and names the control's event
/// log in `X-Gantry-Event-Log-Id`, so the caller can follow it.
#[tokio::test]
async fn a_control_answer_names_its_event_log() {
    let app = spawn_app().await;
    let world = app.world().await;
    let response = app
        .client
        .put(format!(
            "{}/api/v1/devices/{}/shadows",
            app.base,
            world.device["id"].as_str().unwrap()
        ))
        .bearer_auth(&app.admin)
        .json(&json!({"type": "m", "needack": true, "payload": {"attrs": [{"code": "setpoint", "value": 1.5}]}}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let named = response.headers()["x-gantry-event-log-id"].to_str().unwrap().to_owned();
    assert_eq!(response.json::<Value>().await.unwrap(), json!({"returnCode": 0}));
    let logs = logs_of(&app, &world, "").await;
    assert_eq!(logs["results"][0]["id"], named.as_str());
}
