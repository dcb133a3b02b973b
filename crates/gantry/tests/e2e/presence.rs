//! Device presence (`GET /devices/{id}/connection`, the listing's `connected` filter) through
//! real MQTT sessions over TCP and WebSocket, a restart on the same data, and who may read it.

use std::time::Duration;

use gantry::device::DeviceClient;
use serde_json::{Value, json};

use crate::helpers::{TestApp, spawn_app, spawn_with, unique, wait_for};

const PREFIX: &str = "gantry";

/// How long the broker may take to report a connect or disconnect.
const REPORTED: Duration = Duration::from_secs(10);

fn id(record: &Value) -> &str {
    record["id"].as_str().unwrap()
}

async fn connection(app: &TestApp, device: &Value) -> Value {
    app.get(format!("/api/v1/devices/{}/connection", id(device)), &app.admin)
        .await
        .result()
}

/// The ids of the project's devices with `?connected=<value>`.
async fn listed(app: &TestApp, project: &Value, value: bool) -> Vec<String> {
    let page = app
        .get(
            format!(
                "/api/v1/projects/{}/devices?connected={value}&pageSize=100",
                id(project)
            ),
            &app.admin,
        )
        .await
        .result();
    page["results"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| id(d).to_owned())
        .collect()
}

async fn wait_connected(app: &TestApp, device: &Value, connected: bool) -> Value {
    let mut last = Value::Null;
    let reached = wait_for(REPORTED, async || {
        last = connection(app, device).await;
        last["connected"] == connected
    })
    .await;
    assert!(reached, "connected should become {connected}: {last}");
    last
}

#[tokio::test]
async fn presence_follows_sessions_messages_and_a_restart() {
    let app = spawn_app().await;
    let world = app.world().await;
    let device = &world.device;
    let web = app.create_device(&app.admin, &world.project, &world.model).await;

    // Never connected: no times, no address.
    let never = connection(&app, device).await;
    assert_eq!(never, json!({"deviceId": id(device), "connected": false}));

    let mut client = DeviceClient::connect(app.mqtt, PREFIX, id(device), device["accessToken"].as_str().unwrap())
        .await
        .unwrap();
    let on = wait_connected(&app, device, true).await;
    assert_eq!(on["protocol"], "MQTT 3.1.1");
    assert_eq!(on["transport"], "tcp");
    assert!(on["clientAddress"].as_str().unwrap().starts_with("127.0.0.1:"), "{on}");
    let connected_time = on["connectedTime"].as_i64().unwrap();
    assert!(on.get("disconnectedTime").is_none(), "{on}");
    assert!(on["lastSeenTime"].as_i64().unwrap() >= connected_time, "{on}");

    // The listing's filter; a device never connected is among the disconnected.
    assert_eq!(listed(&app, &world.project, true).await, vec![id(device).to_owned()]);
    assert_eq!(listed(&app, &world.project, false).await, vec![id(&web).to_owned()]);
    let message = app
        .get(
            format!("/api/v1/projects/{}/devices?connected=yes", id(&world.project)),
            &app.admin,
        )
        .await
        .error(400);
    assert!(message.contains("connected"), "{message}");

    // A message moves lastSeenTime.
    let before = on["lastSeenTime"].as_i64().unwrap();
    tokio::time::sleep(Duration::from_millis(20)).await;
    client
        .publish_attrs(&[("temp", json!(21.0))], None, false)
        .await
        .unwrap();
    let mut seen = Value::Null;
    let moved = wait_for(REPORTED, async || {
        seen = connection(&app, device).await;
        seen["lastSeenTime"].as_i64().unwrap() > before
    })
    .await;
    assert!(moved, "lastSeenTime should move past {before}: {seen}");
    assert_eq!(seen["connectedTime"], connected_time);

    client.disconnect().await;
    let off = wait_connected(&app, device, false).await;
    assert_eq!(off["connectedTime"], connected_time);
    let disconnected_time = off["disconnectedTime"].as_i64().unwrap();
    assert!(disconnected_time >= seen["lastSeenTime"].as_i64().unwrap(), "{off}");
    assert!(off["lastSeenTime"].as_i64().unwrap() >= seen["lastSeenTime"].as_i64().unwrap());
    assert_eq!(listed(&app, &world.project, true).await, Vec::<String>::new());

    // Over WebSocket; the session is on when Gantry stops.
    let _web_client = DeviceClient::connect_ws(
        app.mqtt_ws,
        PREFIX,
        id(&web),
        id(&web),
        web["accessToken"].as_str().unwrap(),
    )
    .await
    .unwrap();
    let web_on = wait_connected(&app, &web, true).await;
    assert_eq!(web_on["transport"], "ws");
    assert_eq!(listed(&app, &world.project, true).await, vec![id(&web).to_owned()]);

    // A restart on the same data: nobody is connected until they come back; times stay.
    let admin = app.admin.clone();
    let database_url = app.database_url();
    let dir = app.stop_keep_data().await.unwrap();
    let mut config = gantry::config::ServeConfig::local(dir.path().to_path_buf());
    config.admin_token = Some(admin.clone());
    config.database_url = Some(database_url);
    let again = spawn_with(config, dir, admin).await;
    let web_after = connection(&again, &web).await;
    assert_eq!(web_after["connected"], false, "{web_after}");
    assert_eq!(web_after["connectedTime"], web_on["connectedTime"]);
    assert!(web_after["disconnectedTime"].as_i64().unwrap() >= web_on["connectedTime"].as_i64().unwrap());
    assert_eq!(web_after["transport"], "ws");
    let device_after = connection(&again, device).await;
    assert_eq!(device_after["connected"], false);
    assert_eq!(device_after["connectedTime"], connected_time);
    assert_eq!(device_after["disconnectedTime"], disconnected_time);
    assert_eq!(listed(&again, &world.project, true).await, Vec::<String>::new());

    // Back: connected again, the last session's end still shown.
    let _back = DeviceClient::connect(again.mqtt, PREFIX, id(device), device["accessToken"].as_str().unwrap())
        .await
        .unwrap();
    let back = wait_connected(&again, device, true).await;
    assert!(back["connectedTime"].as_i64().unwrap() > connected_time, "{back}");
    assert_eq!(back["disconnectedTime"], disconnected_time);
    assert_eq!(listed(&again, &world.project, true).await, vec![id(device).to_owned()]);
    again.stop().await;
}

#[tokio::test]
async fn presence_is_read_by_the_tenant_the_project_and_the_device_alone() {
    let app = spawn_app().await;
    let world = app.world().await;
    let device = &world.device;
    let sibling = app.create_device(&app.admin, &world.project, &world.model).await;
    let path = format!("/api/v1/devices/{}/connection", id(device));

    let own = app.get(&path, device["accessToken"].as_str().unwrap()).await.result();
    assert_eq!(own["deviceId"], id(device));
    let by_app = app
        .get(&path, world.project["applicationAccessToken"].as_str().unwrap())
        .await
        .result();
    assert_eq!(by_app["deviceId"], id(device));
    app.get(&path, sibling["accessToken"].as_str().unwrap())
        .await
        .error(403);

    let other_project = app.create_project(&app.admin).await;
    app.get(&path, other_project["applicationAccessToken"].as_str().unwrap())
        .await
        .error(403);

    let tenant = app
        .post("/api/v1/tenants", &app.admin, json!({"name": unique("other")}))
        .await
        .result();
    let other_admin = tenant["adminToken"].as_str().unwrap();
    app.get(&path, other_admin).await.error(404);
    app.get(format!("/api/v1/devices/{}/connection", unique("nosuch")), &app.admin)
        .await
        .error(404);
    app.get(&path, "not-a-token").await.error(401);
    // Another tenant's listing filter finds none of this tenant's devices.
    let theirs = app.create_project(other_admin).await;
    let page = app
        .get(
            format!("/api/v1/projects/{}/devices?connected=false", id(&theirs)),
            other_admin,
        )
        .await
        .result();
    assert_eq!(page["totalResults"], 0);
    app.get(
        format!("/api/v1/projects/{}/devices?connected=false", id(&world.project)),
        other_admin,
    )
    .await
    .error(404);
}

#[tokio::test]
async fn presence_is_in_the_openapi_document() {
    let app = spawn_app().await;
    let doc: Value = app
        .client
        .get(format!("{}/api-docs/openapi.json", app.base))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let get = &doc["paths"]["/api/v1/devices/{deviceId}/connection"]["get"];
    assert_eq!(get["operationId"], "getDeviceConnection", "{get}");
    let schema = &doc["components"]["schemas"]["Connection"]["properties"];
    for field in [
        "deviceId",
        "connected",
        "connectedTime",
        "disconnectedTime",
        "lastSeenTime",
        "clientAddress",
        "protocol",
        "transport",
    ] {
        assert!(schema.get(field).is_some(), "{field} in {schema}");
    }
    let params = doc["paths"]["/api/v1/projects/{projectId}/devices"]["get"]["parameters"]
        .as_array()
        .unwrap();
    let connected = params
        .iter()
        .find(|p| p["name"] == "connected")
        .expect("the connected filter");
    assert_eq!(connected["in"], "query");
}
