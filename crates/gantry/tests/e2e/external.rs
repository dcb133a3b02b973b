//! Scale-out mode against a real external broker (Mosquitto here): devices connect to the
//! broker, Gantry nodes are its clients. The tests that need a broker are ignored unless run with
//! `-- --include-ignored` and GANTRY_TEST_MQTT_BROKER_URL naming a broker that lets anyone
//! connect (e.g. mqtt://127.0.0.1:1883); each test uses a topic prefix of its own.

use std::net::ToSocketAddrs;
use std::time::Duration;

use gantry::device::DeviceClient;
use serde_json::{Value, json};

use crate::helpers::{TestApp, World, required_var, spawn_app_with, spawn_with, unique, wait_for};

pub(crate) fn broker_url() -> String {
    required_var("GANTRY_TEST_MQTT_BROKER_URL", "mqtt://127.0.0.1:1883")
}

pub(crate) async fn node(url: &str, prefix: &str) -> TestApp {
    let (url, prefix) = (url.to_owned(), prefix.to_owned());
    spawn_app_with(move |c| {
        c.mqtt_broker_url = Some(url);
        c.topic_prefix = prefix;
    })
    .await
}

pub(crate) async fn device_on_broker(app: &TestApp, prefix: &str, world: &World) -> DeviceClient {
    let addr = app.mqtt.to_socket_addrs().unwrap().next().unwrap();
    let mut device = DeviceClient::connect(
        addr,
        prefix,
        world.device["id"].as_str().unwrap(),
        world.device["accessToken"].as_str().unwrap(),
    )
    .await
    .expect("the device connects to the external broker");
    device.subscribe_inbox().await.unwrap();
    device
}

/// How long a message may take through the external broker.
const THROUGH_THE_BROKER: Duration = Duration::from_secs(10);

async fn total(app: &TestApp, path: &str) -> i64 {
    app.get(path, &app.admin).await.result()["totalResults"]
        .as_i64()
        .unwrap()
}

#[tokio::test]
#[ignore = "needs GANTRY_TEST_MQTT_BROKER_URL (an external broker)"]
async fn telemetry_and_controls_through_an_external_broker() {
    let url = broker_url();
    let prefix = unique("gantry-ext");
    let app = node(&url, &prefix).await;
    let world = app.world().await;
    assert!(
        world.project["mqApiAddr"]
            .as_str()
            .unwrap()
            .ends_with(&format!(":{}", app.mqtt.port()))
    );
    let mut device = device_on_broker(&app, &prefix, &world).await;
    let did = world.device["id"].as_str().unwrap().to_owned();
    let events = format!("/api/v1/devices/{did}/events");

    let id = device
        .publish_attrs(
            &[("temp", json!(20.5)), ("nosuch", json!(1))],
            Some(1_714_492_800),
            true,
        )
        .await
        .unwrap();
    assert!(
        wait_for(THROUGH_THE_BROKER, async || total(&app, &events).await == 1).await,
        "the event arrives through the broker"
    );
    let ack = device
        .next_message(Duration::from_secs(5))
        .await
        .unwrap()
        .expect("the service's ack")
        .json();
    assert_eq!(ack["meta"]["correlationId"], id.as_str());
    assert_eq!(ack["payload"]["refused"][0]["code"], "nosuch");
    let shadow = app
        .get(format!("/api/v1/devices/{did}/shadows"), &app.admin)
        .await
        .result();
    assert_eq!(shadow["attributeMap"]["temp"]["value"], 20.5);
    // Mosquitto publishes no client events: presence knows of no session (README, Presence).
    let presence = app
        .get(format!("/api/v1/devices/{did}/connection"), &app.admin)
        .await
        .result();
    assert_eq!(presence, json!({"deviceId": did, "connected": false}));

    app.put(
        format!("/api/v1/devices/{did}/shadows"),
        &app.admin,
        json!({"needack": true, "payload": {"attrs": [{"code": "label", "value": "x"}]}}),
    )
    .await
    .result_done();
    let control = device
        .next_message(Duration::from_secs(5))
        .await
        .unwrap()
        .expect("the control arrives")
        .json();
    assert_eq!(control["payload"]["attrs"][0]["code"], "label");
    device.ack(&control).await.unwrap();
    let logs = format!(
        "/api/v1/projects/{}/eventLogs?eventId={}",
        world.project["id"].as_str().unwrap(),
        control["meta"]["id"].as_str().unwrap()
    );
    let completed = wait_for(THROUGH_THE_BROKER, async || {
        app.get(&logs, &app.admin).await.result()["results"][0]["status"] == "completed"
    })
    .await;
    assert!(completed, "the ack completes the control");
}

#[tokio::test]
#[ignore = "needs GANTRY_TEST_MQTT_BROKER_URL and GANTRY_E2E_POSTGRES_URL (two nodes, one database)"]
async fn nodes_share_the_upstream_traffic() {
    let url = broker_url();
    required_var("GANTRY_E2E_POSTGRES_URL", "postgres://postgres@127.0.0.1:5432/postgres");
    let prefix = unique("gantry-ext");
    let first = node(&url, &prefix).await;
    let dir = tempfile::tempdir().unwrap();
    let mut config = gantry::config::ServeConfig::local(dir.path().to_path_buf());
    config.database_url = Some(first.database_url());
    config.admin_token = Some(first.admin.clone());
    config.mqtt_broker_url = Some(url.clone());
    config.topic_prefix = prefix.clone();
    let second = spawn_with(config, dir, first.admin.clone()).await;
    let world = first.world().await;
    let mut device = device_on_broker(&first, &prefix, &world).await;
    for i in 0..40 {
        device
            .publish_attrs(&[("count", json!(i))], Some(1_714_492_800 + i), false)
            .await
            .unwrap();
    }
    let events = format!(
        "/api/v1/devices/{}/events?pageSize=1000",
        world.device["id"].as_str().unwrap()
    );
    assert!(wait_for(THROUGH_THE_BROKER, async || total(&first, &events).await == 40).await);
    let per_node = |app: &TestApp| {
        let metrics_url = format!("{}/metrics", app.base);
        let client = app.client.clone();
        async move {
            let text = client.get(metrics_url).send().await.unwrap().text().await.unwrap();
            text.lines()
                .find_map(|l| l.strip_prefix("gantry_mqtt_events_stored_total "))
                .unwrap()
                .parse::<i64>()
                .unwrap()
        }
    };
    let (a, b) = (per_node(&first).await, per_node(&second).await);
    assert_eq!(a + b, 40, "each message stored once");
    assert!(a > 0 && b > 0, "both nodes took a share: {a} and {b}");
    let values: Vec<Value> = first.get(&events, &first.admin).await.result()["results"]
        .as_array()
        .unwrap()
        .to_vec();
    let mut counts: Vec<i64> = values.iter().map(|v| v["attributeData"].as_i64().unwrap()).collect();
    counts.sort();
    assert_eq!(counts, (0..40).collect::<Vec<_>>());
}

#[tokio::test]
async fn an_external_broker_asks_gantry_who_may_do_what() {
    // These endpoints need no broker: they answer EMQX's HTTP authenticator and authorizer.
    let app = crate::helpers::spawn_app().await;
    let world = app.world().await;
    let other = app.world().await;
    let (did, token) = (
        world.device["id"].as_str().unwrap(),
        world.device["accessToken"].as_str().unwrap(),
    );
    let ask = |path: &'static str, body: Value, bearer: String| {
        let request = app
            .client
            .post(format!("{}{path}", app.base))
            .bearer_auth(bearer)
            .json(&body);
        async move {
            let reply = request.send().await.unwrap();
            (
                reply.status().as_u16(),
                reply.json::<Value>().await.unwrap_or(Value::Null)["result"].clone(),
            )
        }
    };
    let admin = app.admin.clone();
    assert_eq!(
        ask(
            "/mqtt/auth",
            json!({"clientid": did, "username": did, "password": token}),
            admin.clone()
        )
        .await,
        (200, json!("allow"))
    );
    assert_eq!(
        ask(
            "/mqtt/auth",
            json!({"clientid": did, "username": did, "password": "guess"}),
            admin.clone()
        )
        .await,
        (200, json!("deny"))
    );
    assert_eq!(
        ask(
            "/mqtt/auth",
            json!({"clientid": did, "username": did, "password": token}),
            token.to_owned()
        )
        .await
        .0,
        403,
        "only the system administrator asks"
    );
    let acl = |topic: String, action: &str| json!({"clientid": did, "username": did, "topic": topic, "action": action});
    assert_eq!(
        ask(
            "/mqtt/acl",
            acl(format!("gantry/in/json/{did}"), "publish"),
            admin.clone()
        )
        .await
        .1,
        "allow"
    );
    assert_eq!(
        ask(
            "/mqtt/acl",
            acl(format!("gantry/out/json/{did}"), "subscribe"),
            admin.clone()
        )
        .await
        .1,
        "allow"
    );
    let theirs = other.device["id"].as_str().unwrap();
    assert_eq!(
        ask(
            "/mqtt/acl",
            acl(format!("gantry/in/json/{theirs}"), "publish"),
            admin.clone()
        )
        .await
        .1,
        "deny"
    );
    assert_eq!(
        ask("/mqtt/acl", acl("#".to_owned(), "subscribe"), admin.clone())
            .await
            .1,
        "deny"
    );
    let route = app
        .post(
            format!("/api/v1/devices/{did}/routes"),
            &app.admin,
            json!({"sourceType": "APP"}),
        )
        .await
        .result();
    let role = &route["temporaryRole"];
    let login = json!({"clientid": role["clientId"], "username": role["username"], "password": role["password"]});
    assert_eq!(ask("/mqtt/auth", login, admin.clone()).await.1, "allow");
    let as_route = |topic: &str, action: &str| json!({"clientid": role["clientId"], "topic": topic, "action": action});
    assert_eq!(
        ask(
            "/mqtt/acl",
            as_route(route["route"]["forwardTopic"].as_str().unwrap(), "publish"),
            admin.clone()
        )
        .await
        .1,
        "allow"
    );
    assert_eq!(
        ask(
            "/mqtt/acl",
            as_route(route["route"]["ackTopic"].as_str().unwrap(), "subscribe"),
            admin.clone()
        )
        .await
        .1,
        "allow"
    );
    assert_eq!(
        ask(
            "/mqtt/acl",
            as_route(&format!("gantry/out/json/{theirs}"), "publish"),
            admin
        )
        .await
        .1,
        "deny"
    );
}
