//! The console's pages for tenant administrators over plain HTTP: users (list, create, lock,
//! unlock, delete) and the audit log, who is refused them, another tenant's records; and that a
//! change made through the console is in the audit log, with who made it.

use reqwest::StatusCode;
use serde_json::{Value, json};

use crate::console::Console;
use crate::console_alarms::{raise_alarm, user};
use crate::helpers::{TestApp, spawn_app, unique};

async fn api_user(app: &TestApp, username: &str) -> Option<Value> {
    let page = app
        .get(format!("/api/v1/users?username={username}"), &app.admin)
        .await
        .result();
    page["results"].as_array().unwrap().first().cloned()
}

#[tokio::test]
async fn administrators_manage_users_from_the_console() {
    let app = spawn_app().await;
    let world = app.world().await;
    let console = Console::sign_in(&app, &app.admin).await.expect("signed in");
    let (status, page) = console.get("/console/users").await;
    assert_eq!(status, StatusCode::OK);
    assert!(
        page.contains("New user") && page.contains(r#"href="/console/audit""#),
        "{page}"
    );

    // Without a password one is generated and shown once; the projects ticked are the user's.
    let name = unique("operator");
    let project_box = format!("project.{}", world.project["id"].as_str().unwrap());
    let (status, page) = console
        .post(
            "/console/users",
            "/console/users",
            &[("username", &name), ("role", "OPERATOR"), (&project_box, "true")],
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{page}");
    assert!(page.contains(r#"id="new-password""#), "{page}");
    let created = api_user(&app, &name).await.expect("the user exists");
    assert_eq!(
        (created["role"].clone(), created["projectIds"].clone()),
        (json!("OPERATOR"), json!([world.project["id"]]))
    );
    let (status, page) = console
        .post(
            "/console/users",
            "/console/users",
            &[("username", &name), ("role", "VIEWER")],
        )
        .await;
    assert_eq!(status, StatusCode::CONFLICT, "a username is taken once");
    assert!(page.contains(r#"role="alert""#), "{page}");
    let (status, page) = console
        .post(
            "/console/users",
            "/console/users",
            &[("username", "x"), ("role", "VIEWER")],
        )
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert!(page.contains(r#"id="f-username-error""#), "{page}");

    let path = format!("/console/users/{}", created["id"].as_str().unwrap());
    for (action, status) in [("lock", "LOCKED"), ("unlock", "ACTIVE")] {
        let (answer, to) = console
            .post_sent_to("/console/users", &format!("{path}/{action}"), &[])
            .await;
        assert_eq!((answer, to.as_str()), (StatusCode::SEE_OTHER, "/console/users"));
        assert_eq!(api_user(&app, &name).await.unwrap()["status"], status);
    }
    let (status, _) = console.post_raw(&format!("{path}/delete"), &[("csrf", "forged")]).await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    assert!(api_user(&app, &name).await.is_some(), "a forged form deletes nothing");
    let (status, _) = console
        .post_sent_to("/console/users", &format!("{path}/delete"), &[])
        .await;
    assert_eq!(status, StatusCode::SEE_OTHER);
    assert!(api_user(&app, &name).await.is_none(), "deleted");
    app.stop().await;
}

#[tokio::test]
async fn users_and_the_audit_log_are_for_administrators_of_the_tenant() {
    let app = spawn_app().await;
    let world = app.world().await;
    let (victim, _) = user(&app, "VIEWER").await;
    let victim_id = api_user(&app, &victim).await.unwrap()["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let lock = format!("/console/users/{victim_id}/lock");

    let (operator, password) = user(&app, "OPERATOR").await;
    let operator = Console::sign_in_user(&app, &operator, &password).await;
    let app_token = world.project["applicationAccessToken"].as_str().unwrap();
    let application = Console::sign_in(&app, app_token).await.expect("signed in");
    let from = format!("/console/projects/{}", world.project["id"].as_str().unwrap());
    for console in [&operator, &application] {
        let (_, page) = console.get(&from).await;
        assert!(!page.contains(r#"href="/console/users""#), "not offered: {page}");
        for path in ["/console/users", "/console/audit"] {
            assert_eq!(console.get(path).await.0, StatusCode::FORBIDDEN, "{path}");
        }
        let (status, _) = console.post(&from, &lock, &[]).await;
        assert_eq!(status, StatusCode::FORBIDDEN);
        let (status, _) = console
            .post(
                &from,
                "/console/users",
                &[("username", &unique("u")), ("role", "ADMIN")],
            )
            .await;
        assert_eq!(status, StatusCode::FORBIDDEN);
    }
    assert_eq!(api_user(&app, &victim).await.unwrap()["status"], "ACTIVE");

    // Another tenant's administrator finds neither the user nor the records.
    let tenant = app
        .post("/api/v1/tenants", &app.admin, json!({"name": unique("tenant")}))
        .await
        .result();
    let stranger = Console::sign_in(&app, tenant["adminToken"].as_str().unwrap())
        .await
        .expect("signed in");
    let (_, page) = stranger.get("/console/users").await;
    assert!(!page.contains(&victim));
    let (status, _) = stranger.post("/console/users", &lock, &[]).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let (status, page) = stranger.get("/console/audit").await;
    assert_eq!(status, StatusCode::OK);
    let project = world.project["id"].as_str().unwrap();
    assert!(page.contains(r#"<table class="list audit">"#), "{page}");
    assert!(!page.contains(project), "another tenant's records are not shown");
    assert_eq!(api_user(&app, &victim).await.unwrap()["status"], "ACTIVE");
    app.stop().await;
}

#[tokio::test]
async fn a_change_made_in_the_console_is_in_the_audit_log() {
    let app = spawn_app().await;
    let world = app.world().await;
    let alarm = raise_alarm(&app, &world).await;
    let alarm_id = alarm["id"].as_str().unwrap();
    let (name, password) = user(&app, "OPERATOR").await;
    let operator = Console::sign_in_user(&app, &name, &password).await;
    let alarm_page = format!("/console/alarms/{alarm_id}");
    let (status, _) = operator
        .post_sent_to(
            &alarm_page,
            &format!("{alarm_page}/comments"),
            &[("text", "checked the sensor")],
        )
        .await;
    assert_eq!(status, StatusCode::SEE_OTHER);
    let (status, _) = operator
        .post_sent_to(&alarm_page, &format!("{alarm_page}/clear"), &[])
        .await;
    assert_eq!(status, StatusCode::SEE_OTHER);
    let (status, _) = operator.post(&alarm_page, &format!("{alarm_page}/clear"), &[]).await;
    assert_eq!(status, StatusCode::CONFLICT, "cleared already");

    let records = app
        .get(
            format!("/api/v1/auditLogs?resourceId={alarm_id}&pageSize=10"),
            &app.admin,
        )
        .await
        .result();
    let records = records["results"].as_array().unwrap();
    let seen: Vec<(String, String, String)> = records
        .iter()
        .map(|r| {
            let text = |k: &str| r[k].as_str().unwrap_or_default().to_owned();
            (text("action"), text("outcome"), text("principalName"))
        })
        .collect();
    for (action, outcome) in [("comments", "SUCCESS"), ("clear", "SUCCESS"), ("clear", "FAILURE")] {
        assert!(
            seen.contains(&(action.to_owned(), outcome.to_owned(), name.clone())),
            "{action} {outcome} by {name} in {seen:?}"
        );
    }
    let comment = records.iter().find(|r| r["action"] == "comments").unwrap();
    assert_eq!(comment["resourceType"], "alarm");
    assert_eq!(comment["changedFields"], json!(["text"]), "field names, never values");
    assert!(comment["clientAddress"].as_str().is_some_and(|a| !a.is_empty()));
    assert!(!records.iter().any(|r| r.to_string().contains("checked the sensor")));

    // The administrator reads it on the audit page too.
    let admin = Console::sign_in(&app, &app.admin).await.expect("signed in");
    let (status, page) = admin
        .get(&format!("/console/audit?resourceType=alarm&resourceId={alarm_id}"))
        .await;
    assert_eq!(status, StatusCode::OK);
    assert!(page.contains("comments") && page.contains(&name), "{page}");
    let (status, _) = admin.get("/console/audit?startDate=yesterday").await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    app.stop().await;
}
