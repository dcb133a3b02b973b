//! User accounts, roles and sign-in sessions: what a person signed in with each role may do,
//! when a session ends, and how sign-in resists guessing.

use std::time::Instant;

use reqwest::Method;
use serde_json::{Value, json};

use crate::helpers::{TestApp, World, spawn_app, spawn_app_with, unique};

pub const PASSWORD: &str = "correct-horse-9";

/// Creates a user of the administrator's tenant and returns its record.
pub async fn create_user(app: &TestApp, token: &str, role: &str, projects: &[&Value]) -> Value {
    let ids: Vec<&Value> = projects.iter().map(|p| &p["id"]).collect();
    app.post(
        "/api/v1/users",
        token,
        json!({"username": unique("user"), "password": PASSWORD, "role": role, "projectIds": ids}),
    )
    .await
    .result()
}

/// Signs the user in and returns the session's token.
pub async fn sign_in(app: &TestApp, user: &Value, password: &str) -> String {
    let session = app
        .call(
            Method::POST,
            "/api/v1/auth/login",
            None,
            Some(json!({"username": user["username"], "password": password})),
        )
        .await
        .result();
    assert!(session["expiresTime"].as_i64().unwrap() > 0);
    assert_eq!(session["user"]["id"], user["id"]);
    session["token"].as_str().unwrap().to_owned()
}

async fn login_status(app: &TestApp, username: &str, password: &str) -> (u16, i64) {
    let reply = app
        .call(
            Method::POST,
            "/api/v1/auth/login",
            None,
            Some(json!({"username": username, "password": password})),
        )
        .await;
    (reply.status.as_u16(), reply.body["returnCode"].as_i64().unwrap_or(-1))
}

fn id(v: &Value) -> &str {
    v["id"].as_str().unwrap()
}

#[tokio::test]
async fn sign_in_me_and_sign_out() {
    let app = spawn_app().await;
    let world = app.world().await;
    let user = create_user(&app, &app.admin, "OPERATOR", &[&world.project]).await;
    let text = user.to_string();
    assert!(!text.contains(PASSWORD) && !text.contains("argon2"), "{text}");
    assert_eq!(
        (user["role"].as_str(), user["status"].as_str()),
        (Some("OPERATOR"), Some("ACTIVE"))
    );

    let token = sign_in(&app, &user, PASSWORD).await;
    let me = app.get("/api/v1/auth/me", &token).await.result();
    assert_eq!(
        (me["principalType"].as_str(), me["principalId"].as_str()),
        (Some("USER"), user["id"].as_str())
    );
    assert_eq!(me["user"]["username"], user["username"]);
    assert!(me["user"]["lastLoginTime"].as_i64().is_some());
    assert_eq!(me["projectIds"], json!([world.project["id"]]));
    for (token, kind) in [
        (app.admin.clone(), "TENANT_TOKEN"),
        (
            world.project["applicationAccessToken"].as_str().unwrap().to_owned(),
            "APPLICATION_TOKEN",
        ),
        (world.device["accessToken"].as_str().unwrap().to_owned(), "DEVICE"),
    ] {
        let me = app.get("/api/v1/auth/me", &token).await.result();
        assert_eq!(me["principalType"], kind, "{me}");
    }
    app.post("/api/v1/auth/logout", &app.admin, json!({})).await.error(400);
    app.post("/api/v1/auth/logout", &token, json!({})).await.result_done();
    app.get("/api/v1/auth/me", &token).await.error(401);

    // Without a password one is generated, shown in this answer only, and it signs in.
    let created = app
        .post(
            "/api/v1/users",
            &app.admin,
            json!({"username": unique("gen"), "role": "VIEWER"}),
        )
        .await
        .result();
    let generated = created["password"].as_str().expect("a generated password").to_owned();
    let again = app
        .get(format!("/api/v1/users/{}", id(&created)), &app.admin)
        .await
        .result();
    assert!(again.get("password").is_none(), "{again}");
    sign_in(&app, &created, &generated).await;

    // Bad input changes nothing and names the field.
    for (body, field) in [
        (json!({"username": "ab", "role": "VIEWER"}), "username"),
        (json!({"username": unique("u"), "role": "ROOT"}), "role"),
        (
            json!({"username": unique("u"), "role": "VIEWER", "password": "short"}),
            "password",
        ),
        (
            json!({"username": "same-as-pass1", "role": "VIEWER", "password": "same-as-pass1"}),
            "password",
        ),
        (
            json!({"username": unique("u"), "role": "VIEWER", "projectIds": ["nope"]}),
            "projectIds",
        ),
    ] {
        let message = app.post("/api/v1/users", &app.admin, body.clone()).await.error(400);
        assert!(message.contains(field), "{body}: {message}");
    }
    let taken = json!({"username": user["username"].as_str().unwrap().to_uppercase(), "role": "VIEWER"});
    app.post("/api/v1/users", &app.admin, taken).await.error(409);
    app.stop().await;
}

/// One row per operation: the status an ADMIN, an OPERATOR and a VIEWER of the world's project
/// get. `p` stands for the world's project, `q` for another project, `d` for the world's device.
const MATRIX: &[(&str, &str, &str, [u16; 3])] = &[
    ("GET", "/api/v1/projects/{p}", "", [200, 200, 200]),
    ("GET", "/api/v1/projects/{p}/devices", "", [200, 200, 200]),
    ("GET", "/api/v1/devices/{d}", "", [200, 200, 200]),
    ("GET", "/api/v1/devices/{d}/events", "", [200, 200, 200]),
    ("GET", "/api/v1/projects/{p}/eventLogs", "", [200, 200, 200]),
    ("GET", "/api/v1/deviceModels", "", [200, 200, 200]),
    ("GET", "/api/v1/projects/{p}/webhooks", "", [200, 200, 200]),
    ("GET", "/api/v1/projects/{q}", "", [200, 404, 404]),
    ("GET", "/api/v1/devices/{d}/routes", "", [200, 200, 200]),
    (
        "PUT",
        "/api/v1/devices/{d}",
        r#"{"comments": "checked"}"#,
        [200, 200, 403],
    ),
    (
        "POST",
        "/api/v1/devices",
        r#"{"deviceName": "{new}", "projectId": "{p}", "modelId": "{m}"}"#,
        [200, 200, 403],
    ),
    ("POST", "/api/v1/devices/{d}/accessToken/rotate", "", [200, 200, 403]),
    (
        "PUT",
        "/api/v1/devices/{d}/shadows",
        r#"{"payload": {"attrs": [{"code": "label", "value": "x"}]}}"#,
        [200, 200, 403],
    ),
    (
        "POST",
        "/api/v1/devices/{d}/routes",
        r#"{"sourceType": "APP"}"#,
        [200, 200, 403],
    ),
    ("POST", "/api/v1/deviceModels", "{model}", [200, 403, 403]),
    (
        "PUT",
        "/api/v1/projects/{p}",
        r#"{"description": "x"}"#,
        [200, 403, 403],
    ),
    ("POST", "/api/v1/projects", r#"{"name": "{new}"}"#, [200, 403, 403]),
    (
        "POST",
        "/api/v1/projects/{p}/applicationAccessToken/rotate",
        "",
        [200, 403, 403],
    ),
    (
        "POST",
        "/api/v1/projects/{p}/webhooks",
        r#"{"url": "http://127.0.0.1:9/hook", "types": ["telemetry"]}"#,
        [200, 403, 403],
    ),
    ("GET", "/api/v1/users", "", [200, 403, 403]),
    (
        "POST",
        "/api/v1/users",
        r#"{"username": "{new}", "role": "VIEWER"}"#,
        [200, 403, 403],
    ),
    ("GET", "/api/v1/auditLogs", "", [200, 403, 403]),
    ("POST", "/api/v1/tenants", r#"{"name": "{new}"}"#, [403, 403, 403]),
];

fn fill(text: &str, world: &World, other: &Value) -> String {
    text.replace("{p}", id(&world.project))
        .replace("{q}", id(other))
        .replace("{d}", id(&world.device))
        .replace("{m}", id(&world.model))
        .replace("{new}", &unique("n"))
}

#[tokio::test]
async fn each_role_against_every_operation() {
    let app = spawn_app_with(|c| c.webhook_allow_private = true).await;
    let world = app.world().await;
    let other = app.create_project(&app.admin).await;
    let mut sessions = Vec::new();
    for role in ["ADMIN", "OPERATOR", "VIEWER"] {
        let projects: &[&Value] = if role == "ADMIN" { &[] } else { &[&world.project] };
        let user = create_user(&app, &app.admin, role, projects).await;
        sessions.push((role, sign_in(&app, &user, PASSWORD).await));
    }
    for (method, path, body, expected) in MATRIX {
        for ((role, token), want) in sessions.iter().zip(expected) {
            let path = fill(path, &world, &other);
            let body = match *body {
                "" if *method == "GET" => None,
                "" => Some(json!({})),
                "{model}" => Some(crate::helpers::model_body(&unique("model"))),
                text => Some(serde_json::from_str::<Value>(&fill(text, &world, &other)).unwrap()),
            };
            let reply = app.call(method.parse().unwrap(), &path, Some(token), body).await;
            assert_eq!(reply.status.as_u16(), *want, "{role} {method} {path}: {}", reply.body);
        }
    }
    app.stop().await;
}

#[tokio::test]
async fn a_viewer_reads_no_secret() {
    let app = spawn_app().await;
    let world = app.world().await;
    let viewer = create_user(&app, &app.admin, "VIEWER", &[]).await;
    let token = sign_in(&app, &viewer, PASSWORD).await;
    let device_token = world.device["accessToken"].as_str().unwrap();
    let app_token = world.project["applicationAccessToken"].as_str().unwrap();
    let (p, d, m) = (id(&world.project), id(&world.device), id(&world.model));
    for path in [
        format!("/api/v1/devices/{d}"),
        format!("/api/v1/projects/{p}"),
        "/api/v1/projects".to_owned(),
        format!("/api/v1/projects/{p}/devices"),
        format!("/api/v1/deviceModels/{m}/devices"),
    ] {
        let reply = app.get(&path, &token).await;
        assert_eq!(reply.status, 200, "{path}: {}", reply.body);
        let text = reply.body.to_string();
        assert!(
            !text.contains(device_token) && !text.contains(app_token),
            "{path}: {text}"
        );
        assert!(
            !text.contains("accessToken") && !text.contains("applicationAccessToken"),
            "{path}: {text}"
        );
    }
    // An operator sees device tokens (it rotates them) but no application token.
    let operator = create_user(&app, &app.admin, "OPERATOR", &[]).await;
    let op = sign_in(&app, &operator, PASSWORD).await;
    let device = app.get(format!("/api/v1/devices/{d}"), &op).await.result();
    assert_eq!(device["accessToken"], device_token);
    let project = app.get(format!("/api/v1/projects/{p}"), &op).await.result();
    assert!(project.get("applicationAccessToken").is_none(), "{project}");
    app.stop().await;
}

#[tokio::test]
async fn sessions_end_when_the_user_is_locked_deleted_or_changes_password() {
    let app = spawn_app().await;
    let user = create_user(&app, &app.admin, "VIEWER", &[]).await;
    let path = format!("/api/v1/users/{}", id(&user));
    let (first, second) = (
        sign_in(&app, &user, PASSWORD).await,
        sign_in(&app, &user, PASSWORD).await,
    );
    app.get("/api/v1/projects", &first).await.result();
    app.post(format!("{path}/lock"), &app.admin, json!({})).await.result();
    for token in [&first, &second] {
        app.get("/api/v1/projects", token).await.error(401);
    }
    assert_eq!(
        login_status(&app, user["username"].as_str().unwrap(), PASSWORD).await.0,
        401
    );
    app.post(format!("{path}/unlock"), &app.admin, json!({})).await.result();

    // An administrator's new password, and a new role, end the sessions.
    let token = sign_in(&app, &user, PASSWORD).await;
    app.put(&path, &app.admin, json!({"password": "another-pass-1"}))
        .await
        .result();
    app.get("/api/v1/projects", &token).await.error(401);
    let token = sign_in(&app, &user, "another-pass-1").await;
    app.put(&path, &app.admin, json!({"role": "OPERATOR"})).await.result();
    app.get("/api/v1/projects", &token).await.error(401);

    // The user's own change of password ends all its sessions, this one too.
    let (token, other) = (
        sign_in(&app, &user, "another-pass-1").await,
        sign_in(&app, &user, "another-pass-1").await,
    );
    let wrong = json!({"currentPassword": "not-the-one-1", "newPassword": "third-pass-11"});
    app.post("/api/v1/auth/password", &token, wrong).await.error(400);
    let change = json!({"currentPassword": "another-pass-1", "newPassword": "third-pass-11"});
    app.post("/api/v1/auth/password", &token, change).await.result_done();
    for token in [&token, &other] {
        app.get("/api/v1/projects", token).await.error(401);
    }
    let token = sign_in(&app, &user, "third-pass-11").await;
    app.delete(&path, &app.admin).await.result_done();
    app.get("/api/v1/projects", &token).await.error(401);
    app.get(&path, &app.admin).await.error(404);
    app.stop().await;
}

#[tokio::test]
async fn an_operator_of_one_project_sees_only_it() {
    let app = spawn_app().await;
    let world = app.world().await;
    let other = app.create_project(&app.admin).await;
    let hidden = app.create_device(&app.admin, &other, &world.model).await;
    let user = create_user(&app, &app.admin, "OPERATOR", &[&world.project]).await;
    let token = sign_in(&app, &user, PASSWORD).await;
    let projects = app.get("/api/v1/projects", &token).await.result();
    assert_eq!(projects["totalResults"], 1, "{projects}");
    assert_eq!(projects["results"][0]["id"], world.project["id"]);
    let devices = app
        .get(format!("/api/v1/deviceModels/{}/devices", id(&world.model)), &token)
        .await
        .result();
    let ids: Vec<&Value> = devices["results"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| &d["id"])
        .collect();
    assert_eq!(ids, [&world.device["id"]]);
    for path in [
        format!("/api/v1/devices/{}", id(&hidden)),
        format!("/api/v1/projects/{}", id(&other)),
        format!("/api/v1/projects/{}/devices", id(&other)),
    ] {
        app.get(&path, &token).await.error(404);
    }
    app.put(
        format!("/api/v1/devices/{}", id(&hidden)),
        &token,
        json!({"comments": "x"}),
    )
    .await
    .error(404);
    // Moving its device into a project it does not see is refused too.
    let moved = json!({"projectId": other["id"]});
    app.put(format!("/api/v1/devices/{}", id(&world.device)), &token, moved)
        .await
        .error(404);
    let users = app
        .get(
            format!("/api/v1/users?projectId={}&role=OPERATOR", id(&world.project)),
            &app.admin,
        )
        .await
        .result();
    assert_eq!(users["totalResults"], 1, "{users}");
    app.stop().await;
}

#[tokio::test]
async fn a_username_waits_after_five_failures_and_an_address_is_banned() {
    let app = spawn_app_with(|c| c.login_failures = 100).await;
    let user = create_user(&app, &app.admin, "VIEWER", &[]).await;
    let name = user["username"].as_str().unwrap();
    for _ in 0..5 {
        assert_eq!(login_status(&app, name, "wrong-password").await, (401, 40100));
    }
    // Even the right password waits now, and another username does not.
    assert_eq!(login_status(&app, name, PASSWORD).await, (429, 42900));
    assert_eq!(login_status(&app, &name.to_uppercase(), PASSWORD).await, (429, 42900));
    let other = create_user(&app, &app.admin, "VIEWER", &[]).await;
    sign_in(&app, &other, PASSWORD).await;
    app.stop().await;

    let app = spawn_app_with(|c| c.login_failures = 3).await;
    let user = create_user(&app, &app.admin, "VIEWER", &[]).await;
    for n in 0..3 {
        assert_eq!(
            login_status(&app, &unique("nobody"), &format!("guess-{n}-pass"))
                .await
                .0,
            401
        );
    }
    assert_eq!(
        login_status(&app, user["username"].as_str().unwrap(), PASSWORD).await,
        (429, 42901),
        "the address is banned for sign-ins and tokens alike"
    );
    app.get("/api/v1/projects", &app.admin).await.error(429);
    app.stop().await;
}

#[tokio::test]
async fn a_wrong_password_takes_as_long_as_an_unknown_username() {
    let app = spawn_app_with(|c| c.login_ban = 0).await;
    let user = create_user(&app, &app.admin, "VIEWER", &[]).await;
    let name = user["username"].as_str().unwrap().to_owned();
    let time = async |username: &str| {
        let started = Instant::now();
        let (status, _) = login_status(&app, username, "wrong-password-1").await;
        assert_eq!(status, 401);
        started.elapsed()
    };
    // Warm up: the stand-in hash is made at the first unknown username.
    time(&unique("nobody")).await;
    // Pairs measured back to back: what the machine's load does to one falls on both, so the
    // median of their differences is what the username being known adds.
    let (mut pairs, mut all) = (Vec::new(), Vec::new());
    for i in 0..50 {
        // Each goes first half the time, so that what a step leaves behind falls on both.
        let (w, u) = if i % 2 == 0 {
            let w = time(&name).await;
            (w, time(&unique("nobody")).await)
        } else {
            let u = time(&unique("nobody")).await;
            (time(&name).await, u)
        };
        pairs.push(w.as_secs_f64() - u.as_secs_f64());
        all.extend([w.as_secs_f64(), u.as_secs_f64()]);
        if i % 4 == 3 {
            sign_in(&app, &user, PASSWORD).await; // A success clears the username's back-off.
            time(&unique("nobody")).await;
        }
    }
    let median = |v: &mut Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    let (difference, typical) = (median(&mut pairs), median(&mut all));
    assert!(
        difference.abs() <= 0.2 * typical,
        "a wrong password takes {difference:+.4}s more than an unknown username (median pair), of {typical:.4}s"
    );
    app.stop().await;
}

#[tokio::test]
async fn users_of_another_tenant_are_not_found() {
    let app = spawn_app().await;
    let tenant = app
        .post("/api/v1/tenants", &app.admin, json!({"name": unique("acme")}))
        .await
        .result();
    let other_admin = tenant["adminToken"].as_str().unwrap();
    let mine = create_user(&app, &app.admin, "VIEWER", &[]).await;
    let theirs = create_user(&app, other_admin, "ADMIN", &[]).await;
    assert_eq!(theirs["tenantId"], tenant["id"]);
    app.get(format!("/api/v1/users/{}", id(&mine)), other_admin)
        .await
        .error(404);
    app.put(
        format!("/api/v1/users/{}", id(&mine)),
        other_admin,
        json!({"role": "ADMIN"}),
    )
    .await
    .error(404);
    app.post(format!("/api/v1/users/{}/lock", id(&mine)), other_admin, json!({}))
        .await
        .error(404);
    app.delete(format!("/api/v1/users/{}", id(&mine)), other_admin)
        .await
        .error(404);
    let listed = app.get("/api/v1/users", other_admin).await.result();
    assert_eq!(listed["totalResults"], 1, "{listed}");
    // Their ADMIN user administers their tenant only.
    let session = sign_in(&app, &theirs, PASSWORD).await;
    app.get(format!("/api/v1/users/{}", id(&mine)), &session)
        .await
        .error(404);
    let elsewhere =
        json!({"username": unique("x"), "role": "VIEWER", "tenantId": "00000000-0000-0000-0000-000000000000"});
    app.post("/api/v1/users", other_admin, elsewhere).await.error(403);
    // The system administrator manages any tenant's users.
    let made = app
        .post(
            "/api/v1/users",
            &app.admin,
            json!({"username": unique("x"), "role": "VIEWER", "tenantId": tenant["id"]}),
        )
        .await
        .result();
    assert_eq!(made["tenantId"], tenant["id"]);
    app.get(format!("/api/v1/users/{}", id(&made)), other_admin)
        .await
        .result();
    app.stop().await;
}
