//! What one tenant may hold, past the bounds tested with their own resource (webhooks, streams):
//! users per tenant, alarm rules per model and controls waiting per device. Past a bound the
//! answer is 429 with `returnCode` 42902 naming the flag that moves it, nothing is written, and
//! another tenant, model or device keeps its own room.

use serde_json::{Value, json};

use crate::helpers::{TestApp, spawn_app_with, unique};

/// A refusal of a bound: 429, 42902, the flag named.
fn assert_bound(reply: crate::helpers::Reply, flag: &str) {
    assert_eq!(reply.body["returnCode"], 42902, "{}", reply.body);
    let message = reply.error(429);
    assert!(message.contains(flag), "{message}");
}

async fn create_user(app: &TestApp, name: &str) -> crate::helpers::Reply {
    app.post(
        "/api/v1/users",
        &app.admin,
        json!({"username": name, "password": "a long password 1", "role": "VIEWER"}),
    )
    .await
}

#[tokio::test]
async fn users_per_tenant_are_bounded() {
    let app = spawn_app_with(|c| c.users_per_tenant = 2).await;
    for _ in 0..2 {
        create_user(&app, &unique("user")).await.result();
    }
    let refused = unique("user");
    assert_bound(create_user(&app, &refused).await, "users-per-tenant");
    let listed = app.get("/api/v1/users?pageSize=100", &app.admin).await.result();
    assert_eq!(listed["totalResults"], 2, "nothing written: {listed}");
    // Another tenant has room of its own.
    let tenant = app
        .post("/api/v1/tenants", &app.admin, json!({"name": unique("tenant")}))
        .await
        .result();
    let other = app
        .post(
            "/api/v1/users",
            &app.admin,
            json!({"username": unique("user"), "password": "a long password 1", "role": "VIEWER",
                   "tenantId": tenant["id"]}),
        )
        .await;
    other.result();
}

fn rule_body(name: &str) -> Value {
    json!({"name": name, "attributeCode": "temp", "severity": "MAJOR", "condition": {"op": ">", "value": 50}})
}

#[tokio::test]
async fn alarm_rules_per_model_are_bounded() {
    let app = spawn_app_with(|c| c.alarm_rules_per_model = 1).await;
    let (model, other) = (app.create_model(&app.admin).await, app.create_model(&app.admin).await);
    let path = |m: &Value| format!("/api/v1/deviceModels/{}/alarmRules", m["id"].as_str().unwrap());
    app.post(path(&model), &app.admin, rule_body("hot")).await.result();
    assert_bound(
        app.post(path(&model), &app.admin, rule_body("hotter")).await,
        "alarm-rules-per-model",
    );
    let rules = app.get(path(&model), &app.admin).await.result();
    assert_eq!(rules.as_array().unwrap().len(), 1, "nothing written: {rules}");
    app.post(path(&other), &app.admin, rule_body("hot")).await.result();
}

#[tokio::test]
async fn waiting_controls_per_device_are_bounded() {
    let app = spawn_app_with(|c| c.waiting_controls_per_device = 2).await;
    let world = app.world().await;
    let other = app.create_device(&app.admin, &world.project, &world.model).await;
    let send = |device: &Value| {
        app.put(
            format!("/api/v1/devices/{}/shadows", device["id"].as_str().unwrap()),
            &app.admin,
            json!({"needack": true, "ttlSeconds": 600, "payload": {"attrs": [{"code": "label", "value": "x"}]}}),
        )
    };
    for _ in 0..2 {
        send(&world.device).await.result();
    }
    assert_bound(send(&world.device).await, "waiting-controls-per-device");
    let waiting = app
        .get(
            format!(
                "/api/v1/devices/{}/pendingControls",
                world.device["id"].as_str().unwrap()
            ),
            &app.admin,
        )
        .await
        .result();
    assert_eq!(waiting["totalResults"], 2, "nothing written: {waiting}");
    send(&other).await.result();
}
