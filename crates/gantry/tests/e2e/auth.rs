//! Bearer tokens: who may do what, and tenant isolation.

use reqwest::Method;
use serde_json::json;

use crate::helpers::{model_body, spawn_app, unique};

#[tokio::test]
async fn missing_or_unknown_tokens_are_401() {
    let app = spawn_app().await;
    app.call(Method::GET, "/api/v1/deviceModels", None, None)
        .await
        .error(401);
    app.get("/api/v1/deviceModels", "not-a-token").await.error(401);
    let reply = app
        .client
        .get(format!("{}/api/v1/projects", app.base))
        .header("Authorization", format!("Basic {}", app.admin))
        .send()
        .await
        .unwrap();
    assert_eq!(reply.status(), 401);
}

#[tokio::test]
async fn tenants_are_isolated() {
    let app = spawn_app().await;
    let world = app.world().await;
    let tenant = app
        .post("/api/v1/tenants", &app.admin, json!({"name": unique("acme")}))
        .await
        .result();
    assert!(tenant["id"].is_string() && tenant["createdTime"].is_i64());
    let other = tenant["adminToken"].as_str().unwrap().to_owned();
    app.post("/api/v1/tenants", &app.admin, json!({"name": tenant["name"]}))
        .await
        .error(409);
    // only the system administrator creates tenants
    app.post("/api/v1/tenants", &other, json!({"name": unique("t")}))
        .await
        .error(403);

    // the other tenant sees none of the default tenant's records, and they are reported as missing
    for path in [
        format!("/api/v1/projects/{}", world.project["id"].as_str().unwrap()),
        format!("/api/v1/deviceModels/{}", world.model["id"].as_str().unwrap()),
        format!("/api/v1/devices/{}", world.device["id"].as_str().unwrap()),
        format!("/api/v1/projects/{}/devices", world.project["id"].as_str().unwrap()),
    ] {
        app.get(&path, &other).await.error(404);
    }
    app.put(
        &format!("/api/v1/devices/{}", world.device["id"].as_str().unwrap()),
        &other,
        json!({"status": "Locked"}),
    )
    .await
    .error(404);
    assert_eq!(
        app.get("/api/v1/deviceModels", &other).await.result()["totalResults"],
        0
    );
    assert_eq!(app.get("/api/v1/projects", &other).await.result()["totalResults"], 0);
    // a device of tenant B cannot use tenant A's project
    let model_b = app.create_model(&other).await;
    app.post(
        "/api/v1/devices",
        &other,
        json!({"deviceName": unique("d"), "projectId": world.project["id"], "modelId": model_b["id"]}),
    )
    .await
    .error(404);
    // names are unique per tenant, not globally
    app.post(
        "/api/v1/deviceModels",
        &other,
        model_body(world.model["name"].as_str().unwrap()),
    )
    .await
    .result();
}

#[tokio::test]
async fn application_token_is_scoped_to_its_project() {
    let app = spawn_app().await;
    let world = app.world().await;
    let other = app.world().await;
    let token = world.project["applicationAccessToken"].as_str().unwrap();
    let pid = world.project["id"].as_str().unwrap();

    app.get(&format!("/api/v1/projects/{pid}"), token).await.result();
    let listing = app.get("/api/v1/projects", token).await.result();
    assert_eq!(listing["totalResults"], 1, "an application lists only its project");
    app.get(&format!("/api/v1/projects/{pid}/devices"), token)
        .await
        .result();
    app.get(&format!("/api/v1/projects/{pid}/models"), token).await.result();
    app.get(
        &format!("/api/v1/devices/{}", world.device["id"].as_str().unwrap()),
        token,
    )
    .await
    .result();
    app.put(
        &format!("/api/v1/devices/{}", world.device["id"].as_str().unwrap()),
        token,
        json!({"comments": "by app"}),
    )
    .await
    .result();
    let created = app.create_device(token, &world.project, &world.model).await;
    assert_eq!(created["createdBy"], format!("application:{pid}"));
    // models: read yes, write no
    app.get(
        &format!("/api/v1/deviceModels/{}", world.model["id"].as_str().unwrap()),
        token,
    )
    .await
    .result();
    app.get("/api/v1/deviceModels", token).await.result();
    app.post("/api/v1/deviceModels", token, model_body(&unique("m")))
        .await
        .error(403);
    app.put(
        &format!("/api/v1/projects/{pid}"),
        token,
        json!({"description": "mine"}),
    )
    .await
    .result();
    app.post("/api/v1/projects", token, json!({"name": unique("p")}))
        .await
        .error(403);
    app.delete(&format!("/api/v1/projects/{pid}"), token).await.error(403);
    // another project of the same tenant: 403
    let opid = other.project["id"].as_str().unwrap();
    app.get(&format!("/api/v1/projects/{opid}"), token).await.error(403);
    app.get(&format!("/api/v1/projects/{opid}/devices"), token)
        .await
        .error(403);
    app.get(
        &format!("/api/v1/devices/{}", other.device["id"].as_str().unwrap()),
        token,
    )
    .await
    .error(403);
    app.post(
        "/api/v1/devices",
        token,
        json!({"deviceName": unique("d"), "projectId": opid, "modelId": world.model["id"]}),
    )
    .await
    .error(403);
    app.put(
        &format!("/api/v1/devices/{}", world.device["id"].as_str().unwrap()),
        token,
        json!({"projectId": opid}),
    )
    .await
    .error(403);
    let model_devices = app
        .get(
            &format!("/api/v1/deviceModels/{}/devices", world.model["id"].as_str().unwrap()),
            token,
        )
        .await
        .result();
    assert_eq!(
        model_devices["totalResults"], 2,
        "an application sees its own project's devices of a model"
    );
    app.post("/api/v1/tenants", token, json!({"name": unique("t")}))
        .await
        .error(403);
}

#[tokio::test]
async fn device_token_is_scoped_to_its_device() {
    let app = spawn_app().await;
    let world = app.world().await;
    let sibling = app.create_device(&app.admin, &world.project, &world.model).await;
    let token = world.device["accessToken"].as_str().unwrap();
    let did = world.device["id"].as_str().unwrap();
    let me = app.get(&format!("/api/v1/devices/{did}"), token).await.result();
    assert_eq!(me["id"], did);
    app.get(&format!("/api/v1/devices/{}", sibling["id"].as_str().unwrap()), token)
        .await
        .error(403);
    app.put(&format!("/api/v1/devices/{did}"), token, json!({"status": "Active"}))
        .await
        .error(403);
    app.get("/api/v1/projects", token).await.error(403);
    app.get(
        &format!("/api/v1/projects/{}", world.project["id"].as_str().unwrap()),
        token,
    )
    .await
    .error(403);
    app.get("/api/v1/deviceModels", token).await.error(403);
    app.post(
        "/api/v1/devices",
        token,
        json!({"deviceName": unique("d"), "projectId": world.project["id"], "modelId": world.model["id"]}),
    )
    .await
    .error(403);
}

/// Failed logins from one address (HTTP 401s or refused MQTT CONNECTs, counted together) ban
/// it for `--login-ban` seconds: HTTP 429 (42901) and a refused CONNECT even with the right
/// credentials. Successful logins never count; the ban ends by itself.
#[tokio::test]
async fn failed_logins_ban_the_address_for_a_while() {
    use gantry::device::DeviceClient;
    use std::time::Duration;

    let app = crate::helpers::spawn_app_with(|c| {
        c.login_failures = 3;
        c.login_ban = 2;
    })
    .await;
    let world = app.world().await;
    let (id, token) = (
        world.device["id"].as_str().unwrap(),
        world.device["accessToken"].as_str().unwrap(),
    );
    for _ in 0..20 {
        app.get("/api/v1/projects", &app.admin).await.result();
    }
    DeviceClient::connect(app.mqtt, "gantry", id, token)
        .await
        .expect("successes never count")
        .disconnect()
        .await;

    // Three failed HTTP logins.
    for _ in 0..3 {
        app.get("/api/v1/projects", "wrong-token").await.error(401);
    }
    let reply = app.get("/api/v1/projects", &app.admin).await;
    assert_eq!(
        (reply.status.as_u16(), reply.body["returnCode"].clone()),
        (429, json!(42901)),
        "{:?}",
        reply.body
    );
    assert!(
        DeviceClient::connect(app.mqtt, "gantry", id, token).await.is_err(),
        "MQTT from the banned address too"
    );
    assert_eq!(app.metric("gantry_login_bans_total").await, 1);
    assert!(app.metric("gantry_login_refused_banned_total").await >= 2);

    tokio::time::sleep(Duration::from_millis(2200)).await;
    app.get("/api/v1/projects", &app.admin).await.result();

    // Three refused CONNECTs ban HTTP as well.
    for _ in 0..3 {
        assert!(DeviceClient::connect(app.mqtt, "gantry", id, "wrong").await.is_err());
    }
    app.get("/api/v1/projects", &app.admin).await.error(429);
    tokio::time::sleep(Duration::from_millis(2200)).await;
    DeviceClient::connect(app.mqtt, "gantry", id, token)
        .await
        .expect("released")
        .disconnect()
        .await;
    assert_eq!(app.metric("gantry_login_bans_total").await, 2);
}
