//! A user's role and projects changed on its console page, and one's own password changed on
//! the account page, over plain HTTP: what the API reads after, the sessions that end, what is
//! refused to whom.

use reqwest::StatusCode;
use serde_json::{Value, json};

use crate::console::Console;
use crate::console_alarms::user;
use crate::helpers::{TestApp, spawn_app, unique};

async fn api_user(app: &TestApp, username: &str) -> Value {
    let page = app
        .get(format!("/api/v1/users?username={username}"), &app.admin)
        .await
        .result();
    page["results"][0].clone()
}

#[tokio::test]
async fn administrators_change_a_users_role_and_projects_and_its_sessions_end() {
    let app = spawn_app().await;
    let world = app.world().await;
    let project = world.project["id"].as_str().unwrap();
    let (name, password) = user(&app, "OPERATOR").await;
    let id = api_user(&app, &name).await["id"].as_str().unwrap().to_owned();
    let path = format!("/console/users/{id}");
    let operator = Console::sign_in_user(&app, &name, &password).await;
    let admin = Console::sign_in(&app, &app.admin).await.expect("signed in");

    let (status, page) = admin.get(&path).await;
    assert_eq!(status, StatusCode::OK);
    assert!(
        page.contains(r#"<option value="OPERATOR" selected>OPERATOR</option>"#),
        "the form shows the user's role: {page}"
    );
    let project_box = format!("project.{project}");
    let (status, page) = admin
        .post(&path, &path, &[("role", "VIEWER"), (&project_box, "true")])
        .await;
    assert_eq!(status, StatusCode::OK, "{page}");
    assert!(page.contains("Its sessions have ended"), "{page}");
    let changed = api_user(&app, &name).await;
    assert_eq!(
        (&changed["role"], &changed["projectIds"]),
        (&json!("VIEWER"), &json!([project]))
    );
    let (status, _) = operator.get("/console/projects").await;
    assert_eq!(status, StatusCode::SEE_OTHER, "the user's console session has ended");

    let (status, page) = admin.post(&path, &path, &[("role", "KING")]).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert!(page.contains(r#"id="f-role-error""#), "{page}");
    assert_eq!(api_user(&app, &name).await["role"], "VIEWER");

    // Not an administrator: refused; another tenant's administrator: not found.
    let (other, other_password) = user(&app, "OPERATOR").await;
    let other = Console::sign_in_user(&app, &other, &other_password).await;
    assert_eq!(other.get(&path).await.0, StatusCode::FORBIDDEN);
    let (status, _) = other.post("/console/projects", &path, &[("role", "ADMIN")]).await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    let tenant = app
        .post("/api/v1/tenants", &app.admin, json!({"name": unique("tenant")}))
        .await
        .result();
    let stranger = Console::sign_in(&app, tenant["adminToken"].as_str().unwrap())
        .await
        .expect("signed in");
    assert_eq!(stranger.get(&path).await.0, StatusCode::NOT_FOUND);
    let (status, _) = stranger.post("/console/users", &path, &[("role", "ADMIN")]).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert_eq!(api_user(&app, &name).await["role"], "VIEWER", "nothing changed");
    app.stop().await;
}

#[tokio::test]
async fn a_user_changes_its_own_password_and_signs_in_again() {
    let app = spawn_app().await;
    let (name, password) = user(&app, "VIEWER").await;
    let console = Console::sign_in_user(&app, &name, &password).await;
    let (status, page) = console.get("/console/projects").await;
    assert_eq!(status, StatusCode::OK);
    assert!(
        page.contains(r#"href="/console/account""#),
        "the header links to the account: {page}"
    );
    let (status, page) = console.get("/console/account").await;
    assert_eq!(status, StatusCode::OK);
    assert!(page.contains(&name) && page.contains("VIEWER"), "{page}");

    let new = "a new long passphrase";
    let cases = [
        (
            [
                ("currentPassword", "wrong"),
                ("newPassword", new),
                ("confirmPassword", new),
            ],
            "currentPassword",
        ),
        (
            [
                ("currentPassword", password.as_str()),
                ("newPassword", new),
                ("confirmPassword", "another"),
            ],
            "confirmPassword",
        ),
        (
            [
                ("currentPassword", password.as_str()),
                ("newPassword", "x"),
                ("confirmPassword", "x"),
            ],
            "newPassword",
        ),
    ];
    for (form, field) in cases {
        let (status, page) = console
            .post("/console/account", "/console/account/password", &form)
            .await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{field}");
        assert!(page.contains(&format!(r#"id="f-{field}-error""#)), "{field}: {page}");
    }
    let (status, page) = console
        .post(
            "/console/account",
            "/console/account/password",
            &[
                ("currentPassword", &password),
                ("newPassword", new),
                ("confirmPassword", new),
            ],
        )
        .await;
    assert_eq!(status, StatusCode::OK);
    assert!(
        page.contains("<h1>Sign in</h1>") && page.contains("sign in with the new password"),
        "{page}"
    );
    assert_eq!(
        console.get("/console/projects").await.0,
        StatusCode::SEE_OTHER,
        "the session has ended"
    );
    let login = json!({"username": name, "password": password});
    let old = app
        .call(reqwest::Method::POST, "/api/v1/auth/login", None, Some(login))
        .await;
    assert_eq!(
        old.status,
        StatusCode::UNAUTHORIZED,
        "the old password no longer signs in"
    );
    Console::sign_in_user(&app, &name, new).await;

    let records = app
        .get("/api/v1/auditLogs?action=changePassword&pageSize=10", &app.admin)
        .await
        .result();
    let names: Vec<&str> = records["results"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["outcome"] == "SUCCESS")
        .filter_map(|r| r["principalName"].as_str())
        .collect();
    assert_eq!(names, [name.as_str()], "the change is in the audit log");

    // A token's session has no password to change.
    let admin = Console::sign_in(&app, &app.admin).await.expect("signed in");
    let (status, page) = admin.get("/console/account").await;
    assert_eq!(status, StatusCode::OK);
    assert!(!page.contains("Change password"), "{page}");
    let (status, _) = admin
        .post(
            "/console/projects",
            "/console/account/password",
            &[("currentPassword", "x"), ("newPassword", new), ("confirmPassword", new)],
        )
        .await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    app.stop().await;
}
