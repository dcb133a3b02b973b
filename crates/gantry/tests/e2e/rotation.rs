//! Credential rotation: device, application and administrator tokens, with and without a
//! grace period, over HTTP and MQTT.

use std::time::Duration;

use gantry::device::DeviceClient;
use serde_json::{Value, json};

use crate::helpers::{TestApp, spawn_app, unique};

const PREFIX: &str = "gantry";

fn id(record: &Value) -> &str {
    record["id"].as_str().unwrap()
}

async fn rotate_device(app: &TestApp, device: &Value, token: &str, body: Value) -> crate::helpers::Reply {
    app.post(
        format!("/api/v1/devices/{}/accessToken/rotate", id(device)),
        token,
        body,
    )
    .await
}

async fn login(app: &TestApp, device: &Value, token: &str) -> anyhow::Result<DeviceClient> {
    DeviceClient::connect(app.mqtt, PREFIX, id(device), token).await
}

/// A device message the broker acknowledges once it is stored.
async fn publish(client: &mut DeviceClient) -> anyhow::Result<()> {
    let topic = client.upstream_topic();
    let message = json!({"meta": {"type": "m"}, "payload": {"attrs": [{"code": "temp", "value": 21.5}]}});
    client.publish_raw(&topic, serde_json::to_vec(&message)?).await
}

#[tokio::test]
async fn a_rotated_device_token_stops_at_once_over_http_and_mqtt() {
    let app = spawn_app().await;
    let world = app.world().await;
    let old = world.device["accessToken"].as_str().unwrap().to_owned();
    let mut session = login(&app, &world.device, &old).await.expect("the old token logs in");
    app.get(format!("/api/v1/devices/{}", id(&world.device)), &old)
        .await
        .result();

    let rotated = app
        .call(
            reqwest::Method::POST,
            &format!("/api/v1/devices/{}/accessToken/rotate", id(&world.device)),
            Some(&app.admin),
            None,
        )
        .await
        .result();
    let new = rotated["accessToken"].as_str().unwrap().to_owned();
    assert_eq!(rotated["id"], world.device["id"]);
    assert_ne!(new, old);
    assert!(new.len() >= 32);
    assert!(rotated["updatedTime"].is_i64());

    assert!(
        session.closed_within(Duration::from_secs(2)).await,
        "the session logged in with the old token is closed"
    );
    app.get(format!("/api/v1/devices/{}", id(&world.device)), &old)
        .await
        .error(401);
    assert!(
        login(&app, &world.device, &old).await.is_err(),
        "the old token no longer logs in"
    );

    let read = app
        .get(format!("/api/v1/devices/{}", id(&world.device)), &new)
        .await
        .result();
    assert_eq!(read["accessToken"], new, "device reads show the new token");
    let mut fresh = login(&app, &world.device, &new).await.expect("the new token logs in");
    publish(&mut fresh).await.expect("and its messages are acknowledged");
}

#[tokio::test]
async fn a_grace_period_keeps_the_old_device_token_until_it_ends() {
    let app = spawn_app().await;
    let world = app.world().await;
    // stays on its old token; reconnects with the new one; logs in with the old one during the grace period
    let (stays, moves, late) = (
        world.device.clone(),
        app.create_device(&app.admin, &world.project, &world.model).await,
        app.create_device(&app.admin, &world.project, &world.model).await,
    );
    let old = |d: &Value| d["accessToken"].as_str().unwrap().to_owned();
    let mut stays_session = login(&app, &stays, &old(&stays)).await.unwrap();
    let moves_session = login(&app, &moves, &old(&moves)).await.unwrap();
    let app_token = world.project["applicationAccessToken"].as_str().unwrap();
    let mut new = Vec::new();
    for device in [&stays, &moves, &late] {
        let rotated = rotate_device(&app, device, app_token, json!({"graceSeconds": 2}))
            .await
            .result();
        new.push(rotated["accessToken"].as_str().unwrap().to_owned());
    }

    // during the grace period both tokens work
    app.get(format!("/api/v1/devices/{}", id(&stays)), &old(&stays))
        .await
        .result();
    app.get(format!("/api/v1/devices/{}", id(&stays)), &new[0])
        .await
        .result();
    assert!(!stays_session.closed_within(Duration::from_millis(500)).await);
    publish(&mut stays_session).await.expect("the old session still works");
    moves_session.disconnect().await;
    let mut moved = login(&app, &moves, &new[1]).await.expect("the new token logs in");
    let mut late_session = login(&app, &late, &old(&late))
        .await
        .expect("the old token still logs in during the grace period");

    // when it ends, the sessions on the old token are closed, the one on the new token is not
    assert!(stays_session.closed_within(Duration::from_secs(4)).await);
    assert!(late_session.closed_within(Duration::from_secs(1)).await);
    assert!(!moved.closed_within(Duration::from_millis(800)).await);
    publish(&mut moved).await.expect("the session on the new token goes on");
    app.get(format!("/api/v1/devices/{}", id(&stays)), &old(&stays))
        .await
        .error(401);
    assert!(login(&app, &stays, &old(&stays)).await.is_err());
    login(&app, &stays, &new[0]).await.expect("the new token logs in");
}

#[tokio::test]
async fn application_tokens_rotate_with_and_without_grace() {
    let app = spawn_app().await;
    let world = app.world().await;
    let path = format!("/api/v1/projects/{}/applicationAccessToken/rotate", id(&world.project));
    let first = world.project["applicationAccessToken"].as_str().unwrap().to_owned();

    // the application rotates its own token
    let rotated = app.post(&path, &first, json!({})).await.result();
    let second = rotated["applicationAccessToken"].as_str().unwrap().to_owned();
    assert_eq!(rotated["id"], world.project["id"]);
    assert_ne!(second, first);
    app.get(format!("/api/v1/projects/{}", id(&world.project)), &first)
        .await
        .error(401);
    let read = app
        .get(format!("/api/v1/projects/{}", id(&world.project)), &second)
        .await
        .result();
    assert_eq!(read["applicationAccessToken"], second);

    let rotated = app.post(&path, &app.admin, json!({"graceSeconds": 1})).await.result();
    let third = rotated["applicationAccessToken"].as_str().unwrap().to_owned();
    let devices = format!("/api/v1/projects/{}/devices", id(&world.project));
    app.get(&devices, &second).await.result();
    app.get(&devices, &third).await.result();
    tokio::time::sleep(Duration::from_millis(1_200)).await;
    app.get(&devices, &second).await.error(401);
    app.get(&devices, &third).await.result();
}

#[tokio::test]
async fn administrator_tokens_rotate() {
    let app = spawn_app().await;
    let tenant = app
        .post("/api/v1/tenants", &app.admin, json!({"name": unique("acme")}))
        .await
        .result();
    let path = format!("/api/v1/tenants/{}/adminToken/rotate", id(&tenant));
    let first = tenant["adminToken"].as_str().unwrap().to_owned();

    // a tenant administrator rotates its own token
    let rotated = app.post(&path, &first, json!({})).await.result();
    assert_eq!(
        (rotated["id"].clone(), rotated["name"].clone()),
        (tenant["id"].clone(), tenant["name"].clone())
    );
    let second = rotated["adminToken"].as_str().unwrap().to_owned();
    assert_ne!(second, first);
    app.get("/api/v1/projects", &first).await.error(401);
    app.get("/api/v1/projects", &second).await.result();

    // the system administrator rotates any tenant's, here with a grace period
    let rotated = app.post(&path, &app.admin, json!({"graceSeconds": 1})).await.result();
    let third = rotated["adminToken"].as_str().unwrap().to_owned();
    app.get("/api/v1/projects", &second).await.result();
    tokio::time::sleep(Duration::from_millis(1_200)).await;
    app.get("/api/v1/projects", &second).await.error(401);
    let project = app.create_project(&third).await;

    // nobody else: another tenant's administrator (404), application and device tokens (403)
    let other = app
        .post("/api/v1/tenants", &app.admin, json!({"name": unique("other")}))
        .await
        .result();
    app.post(&path, other["adminToken"].as_str().unwrap(), json!({}))
        .await
        .error(404);
    let model = app.create_model(&third).await;
    let device = app.create_device(&third, &project, &model).await;
    app.post(&path, project["applicationAccessToken"].as_str().unwrap(), json!({}))
        .await
        .error(403);
    app.post(&path, device["accessToken"].as_str().unwrap(), json!({}))
        .await
        .error(403);
    app.post(
        "/api/v1/tenants/no-such-tenant/adminToken/rotate",
        &app.admin,
        json!({}),
    )
    .await
    .error(404);
    app.get("/api/v1/projects", &third).await.result();

    // the default tenant's administrator is the system administrator
    let rotated = app
        .post(
            "/api/v1/tenants/00000000-0000-0000-0000-000000000000/adminToken/rotate",
            &app.admin,
            json!({}),
        )
        .await
        .result();
    let system = rotated["adminToken"].as_str().unwrap();
    app.get("/api/v1/projects", &app.admin).await.error(401);
    app.post("/api/v1/tenants", system, json!({"name": unique("after")}))
        .await
        .result();
}

#[tokio::test]
async fn rotation_is_scoped_and_checks_grace_seconds() {
    let app = spawn_app().await;
    let world = app.world().await;
    let other_project = app.world().await;
    let device_token = world.device["accessToken"].as_str().unwrap().to_owned();
    let project_path = format!("/api/v1/projects/{}/applicationAccessToken/rotate", id(&world.project));
    let tenant = app
        .post("/api/v1/tenants", &app.admin, json!({"name": unique("acme")}))
        .await
        .result();
    let stranger = tenant["adminToken"].as_str().unwrap();

    // a device token rotates nothing, not even its own
    rotate_device(&app, &world.device, &device_token, json!({}))
        .await
        .error(403);
    app.post(&project_path, &device_token, json!({})).await.error(403);
    // another project's application: 403; another tenant's administrator: 404
    let foreign_app = other_project.project["applicationAccessToken"].as_str().unwrap();
    rotate_device(&app, &world.device, foreign_app, json!({}))
        .await
        .error(403);
    app.post(&project_path, foreign_app, json!({})).await.error(403);
    rotate_device(&app, &world.device, stranger, json!({})).await.error(404);
    app.post(&project_path, stranger, json!({})).await.error(404);
    rotate_device(&app, &json!({"id": "no-such-device"}), &app.admin, json!({}))
        .await
        .error(404);

    for bad in [json!(-1), json!(86_401), json!(1.5), json!("10")] {
        let message = rotate_device(&app, &world.device, &app.admin, json!({"graceSeconds": bad}))
            .await
            .error(400);
        assert!(message.contains("graceSeconds"), "{bad}: {message}");
        let message = app
            .post(&project_path, &app.admin, json!({"graceSeconds": bad}))
            .await
            .error(400);
        assert!(message.contains("graceSeconds"), "{bad}: {message}");
    }
    // Not an object, also an array serde would read as every field left out.
    for body in [json!([]), json!([null]), json!(5)] {
        rotate_device(&app, &world.device, &app.admin, body.clone())
            .await
            .error(400);
        app.post(&project_path, &app.admin, body).await.error(400);
    }
    // nothing changed: the tokens still work
    app.get(format!("/api/v1/devices/{}", id(&world.device)), &device_token)
        .await
        .result();
    app.get(
        format!("/api/v1/projects/{}", id(&world.project)),
        world.project["applicationAccessToken"].as_str().unwrap(),
    )
    .await
    .result();
    rotate_device(&app, &world.device, &app.admin, json!({"graceSeconds": 86_400}))
        .await
        .result();
}
