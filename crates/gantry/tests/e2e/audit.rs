//! The audit log: who changed what, from where, never a secret, and only for the tenant's
//! administrators.

use reqwest::Method;
use serde_json::{Value, json};

use crate::events::event;
use crate::helpers::{TestApp, spawn_app, spawn_app_with, unique};
use crate::users::{PASSWORD, create_user, sign_in};

async fn audit(app: &TestApp, token: &str, query: &str) -> Vec<Value> {
    let page = app
        .get(format!("/api/v1/auditLogs?pageSize=1000{query}"), token)
        .await
        .result();
    page["results"].as_array().unwrap().clone()
}

#[tokio::test]
async fn a_control_sent_by_a_user_names_the_user() {
    let app = spawn_app().await;
    let world = app.world().await;
    let operator = create_user(&app, &app.admin, "OPERATOR", &[&world.project]).await;
    let token = sign_in(&app, &operator, PASSWORD).await;
    let device = world.device["id"].as_str().unwrap();
    let control = json!({"payload": {"attrs": [{"code": "label", "value": "stop"}]}});
    app.put(format!("/api/v1/devices/{device}/shadows"), &token, control)
        .await
        .result_done();
    let records = audit(&app, &app.admin, &format!("&resourceId={device}&action=control")).await;
    assert_eq!(records.len(), 1, "{records:?}");
    let record = &records[0];
    assert_eq!(record["principalType"], "USER");
    assert_eq!(record["principalId"], operator["id"]);
    assert_eq!(record["principalName"], operator["username"]);
    assert_eq!(
        (record["resourceType"].as_str(), record["outcome"].as_str()),
        (Some("device"), Some("SUCCESS"))
    );
    assert_eq!(record["clientAddress"], "127.0.0.1");

    // A control that waits for its device commits its record with its log as well, a refused
    // one is recorded by the audit layer: one record each, newest first.
    let shadows = format!("/api/v1/devices/{device}/shadows");
    let later = json!({"ttlSeconds": 60, "payload": {"attrs": [{"code": "label", "value": "later"}]}});
    app.put(&shadows, &token, later).await.result_done();
    let unknown = json!({"payload": {"attrs": [{"code": "no-such-attribute", "value": 1}]}});
    app.put(&shadows, &token, unknown).await.error(400);
    let controls = audit(&app, &app.admin, &format!("&resourceId={device}&action=control")).await;
    let outcomes: Vec<(&str, i64)> = controls
        .iter()
        .map(|r| (r["outcome"].as_str().unwrap(), r["status"].as_i64().unwrap()))
        .collect();
    assert_eq!(outcomes, [("FAILURE", 400), ("SUCCESS", 200), ("SUCCESS", 200)]);

    // An update names the fields it set; a create names what it made; a refusal is recorded.
    app.put(
        format!("/api/v1/devices/{device}"),
        &token,
        json!({"comments": "serviced", "status": "Locked"}),
    )
    .await
    .result();
    let update = &audit(&app, &app.admin, &format!("&resourceId={device}&action=update")).await[0];
    assert_eq!(update["changedFields"], json!(["comments", "status"]));
    app.put(
        format!("/api/v1/devices/{device}"),
        &app.admin,
        json!({"status": "Active"}),
    )
    .await
    .result();
    let route = app
        .post(
            format!("/api/v1/devices/{device}/routes"),
            &app.admin,
            json!({"sourceType": "APP"}),
        )
        .await
        .result();
    let created = audit(&app, &app.admin, "&resourceType=route&action=create").await;
    assert_eq!(created[0]["resourceId"], route["id"]);
    assert_eq!(created[0]["principalType"], "TENANT_TOKEN");
    app.post("/api/v1/deviceModels", &token, crate::helpers::model_body(&unique("m")))
        .await
        .error(403);
    let refused = audit(&app, &app.admin, "&resourceType=deviceModel").await;
    assert_eq!(
        (refused[0]["outcome"].as_str(), refused[0]["status"].as_i64()),
        (Some("FAILURE"), Some(403))
    );

    // Telemetry is not recorded; the listing is newest first and filtered by time.
    let app_token = world.project["applicationAccessToken"].as_str().unwrap();
    app.post(
        "/api/v1/deviceEvents",
        app_token,
        event(&world.device, "count", json!(1), "Integer", 1_714_492_800_000),
    )
    .await
    .result();
    assert!(audit(&app, &app.admin, "&resourceType=deviceEvent").await.is_empty());
    let all = audit(&app, &app.admin, "").await;
    let times: Vec<i64> = all.iter().map(|r| r["time"].as_i64().unwrap()).collect();
    assert!(times.windows(2).all(|w| w[0] >= w[1]), "{times:?}");
    assert!(
        audit(&app, &app.admin, "&endDate=2020-01-01T00:00:00.000%2B0000")
            .await
            .is_empty()
    );
    app.get("/api/v1/auditLogs?startDate=yesterday", &app.admin)
        .await
        .error(400);
    app.stop().await;
}

#[tokio::test]
async fn sign_ins_are_recorded_with_the_address_and_no_secret_ever() {
    let app = spawn_app_with(|c| c.webhook_allow_private = true).await;
    let world = app.world().await;
    let mut secrets = vec![
        app.admin.clone(),
        PASSWORD.to_owned(),
        world.device["accessToken"].as_str().unwrap().to_owned(),
        world.project["applicationAccessToken"].as_str().unwrap().to_owned(),
    ];
    let user = create_user(&app, &app.admin, "ADMIN", &[]).await;
    let failed = app
        .call(
            Method::POST,
            "/api/v1/auth/login",
            None,
            Some(json!({"username": user["username"], "password": "a-wrong-guess-1"})),
        )
        .await;
    assert_eq!(failed.status, 401);
    secrets.push("a-wrong-guess-1".to_owned());
    let token = sign_in(&app, &user, PASSWORD).await;
    secrets.push(token.clone());
    let (d, p) = (
        world.device["id"].as_str().unwrap(),
        world.project["id"].as_str().unwrap(),
    );
    let rotated = app
        .post(format!("/api/v1/devices/{d}/accessToken/rotate"), &token, json!({}))
        .await
        .result();
    secrets.push(rotated["accessToken"].as_str().unwrap().to_owned());
    let project = app
        .post(
            format!("/api/v1/projects/{p}/applicationAccessToken/rotate"),
            &token,
            json!({}),
        )
        .await
        .result();
    secrets.push(project["applicationAccessToken"].as_str().unwrap().to_owned());
    let hook =
        json!({"url": "http://127.0.0.1:9/h", "types": ["telemetry"], "secret": "webhook-secret-0123456789abcdef"});
    app.post(format!("/api/v1/projects/{p}/webhooks"), &token, hook)
        .await
        .result();
    secrets.push("webhook-secret-0123456789abcdef".to_owned());
    let generated = app
        .post(
            "/api/v1/users",
            &token,
            json!({"username": unique("g"), "role": "VIEWER"}),
        )
        .await
        .result();
    secrets.push(generated["password"].as_str().unwrap().to_owned());
    let change = json!({"currentPassword": PASSWORD, "newPassword": "brand-new-pass-7"});
    app.post("/api/v1/auth/password", &token, change).await.result_done();
    secrets.push("brand-new-pass-7".to_owned());
    let route = app
        .post(
            format!("/api/v1/devices/{d}/routes"),
            &app.admin,
            json!({"sourceType": "APP"}),
        )
        .await
        .result();
    secrets.push(route["temporaryRole"]["password"].as_str().unwrap().to_owned());

    let records = audit(&app, &app.admin, "").await;
    let logins: Vec<&Value> = records.iter().filter(|r| r["action"] == "login").collect();
    assert_eq!(logins.len(), 2, "{logins:?}");
    let failure = logins
        .iter()
        .find(|r| r["outcome"] == "FAILURE")
        .expect("the failed sign-in");
    assert_eq!(
        (failure["clientAddress"].as_str(), failure["principalName"].as_str()),
        (Some("127.0.0.1"), user["username"].as_str())
    );
    assert!(
        records
            .iter()
            .any(|r| r["action"] == "changePassword" && r["principalId"] == user["id"])
    );
    let text = serde_json::to_string(&records).unwrap();
    for secret in &secrets {
        assert!(
            !text.contains(secret.as_str()),
            "the audit log holds a secret: {secret}"
        );
    }
    app.stop().await;
}

#[tokio::test]
async fn the_audit_log_is_for_the_tenants_administrators_only() {
    let app = spawn_app().await;
    let world = app.world().await;
    let tenant = app
        .post("/api/v1/tenants", &app.admin, json!({"name": unique("acme")}))
        .await
        .result();
    let other_admin = tenant["adminToken"].as_str().unwrap();
    app.create_project(other_admin).await;
    let theirs = audit(&app, other_admin, "").await;
    assert!(!theirs.is_empty());
    assert!(theirs.iter().all(|r| r["tenantId"] == tenant["id"]), "{theirs:?}");
    let device = world.device["id"].as_str().unwrap();
    assert!(
        audit(&app, other_admin, &format!("&resourceId={device}"))
            .await
            .is_empty()
    );
    assert!(!audit(&app, &app.admin, "&resourceType=device").await.is_empty());
    let app_token = world.project["applicationAccessToken"].as_str().unwrap();
    app.get("/api/v1/auditLogs", app_token).await.error(403);
    app.get("/api/v1/auditLogs", world.device["accessToken"].as_str().unwrap())
        .await
        .error(403);
    let admin_user = create_user(&app, &app.admin, "ADMIN", &[]).await;
    let session = sign_in(&app, &admin_user, PASSWORD).await;
    assert!(!audit(&app, &session, "&resourceType=device").await.is_empty());
    app.stop().await;
}
