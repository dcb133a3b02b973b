//! The console's alarm pages and the device's desired state over plain HTTP: what the pages
//! show, what their forms do, and what they refuse (no CSRF token, a role that may not act,
//! another tenant's alarm), each checked against the REST API.

use reqwest::StatusCode;
use serde_json::{Value, json};

use crate::console::Console;
use crate::helpers::{TestApp, World, spawn_app, unique, wait_for};

fn id(record: &Value) -> &str {
    record["id"].as_str().unwrap()
}

/// A user of `role` made through the API; its username and password.
pub async fn user(app: &TestApp, role: &str) -> (String, String) {
    let username = unique("user");
    let password = format!("pw-{}", unique("secret"));
    app.post(
        "/api/v1/users",
        &app.admin,
        json!({"username": username, "password": password, "role": role}),
    )
    .await
    .result();
    (username, password)
}

/// A rule `temp > 50` (MAJOR) on the world's model, and the alarm a reading of 60 raises.
pub async fn raise_alarm(app: &TestApp, world: &World) -> Value {
    app.post(
        format!("/api/v1/deviceModels/{}/alarmRules", id(&world.model)),
        &app.admin,
        json!({"name": "Too hot", "attributeCode": "temp", "severity": "MAJOR", "condition": {"op": ">", "value": 50}}),
    )
    .await
    .result();
    app.post(
        "/api/v1/deviceEvents",
        &app.admin,
        json!({"deviceId": world.device["id"], "attributeCode": "temp", "attributeData": 60.5}),
    )
    .await
    .result();
    let path = format!("/api/v1/projects/{}/alarms", id(&world.project));
    let mut alarm = Value::Null;
    let raised = wait_for(std::time::Duration::from_secs(10), async || {
        alarm = app.get(&path, &app.admin).await.result()["results"][0].clone();
        !alarm.is_null()
    })
    .await;
    assert!(raised, "the reading raised an alarm");
    alarm
}

async fn alarm_status(app: &TestApp, alarm: &Value) -> Value {
    app.get(format!("/api/v1/alarms/{}", id(alarm)), &app.admin)
        .await
        .result()["status"]
        .clone()
}

#[tokio::test]
async fn alarms_are_listed_filtered_and_acted_on_from_the_console() {
    let app = spawn_app().await;
    let world = app.world().await;
    let alarm = raise_alarm(&app, &world).await;
    let (project, alarm_id) = (id(&world.project), id(&alarm));
    let console = Console::sign_in(&app, &app.admin).await.expect("signed in");
    let listing = format!("/console/projects/{project}/alarms");
    let row = format!(r#"id="alarm-{alarm_id}""#);

    let (status, page) = console.get(&listing).await;
    assert_eq!(status, StatusCode::OK);
    assert!(
        page.contains(&row) && page.contains("Too hot") && page.contains(">ACTIVE</span>"),
        "{page}"
    );
    assert!(
        page.contains(">Acknowledge</button>"),
        "an ACTIVE alarm is acknowledged from its row"
    );
    for (query, shown) in [
        ("?severity=MAJOR", true),
        ("?severity=CRITICAL", false),
        ("?status=CLEARED", false),
        ("?status=any&severity=MAJOR", true),
    ] {
        let (_, page) = console.get(&format!("{listing}{query}")).await;
        assert_eq!(page.contains(&row), shown, "{query}");
    }
    let (status, page) = console.get(&format!("{listing}?severity=BAD")).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{page}");
    let (_, page) = console.get(&format!("/console/projects/{project}")).await;
    assert!(
        page.contains(r#"id="alarms-major">1<"#),
        "the overview counts it: {page}"
    );
    let (_, page) = console.get(&format!("/console/devices/{}", id(&world.device))).await;
    assert!(page.contains(&row), "the device page lists it");

    // Acknowledged from the listing, the browser goes back to the listing it came from.
    let ack = format!("/console/alarms/{alarm_id}/acknowledge");
    let (status, to) = console
        .post_sent_to(&listing, &ack, &[("back", "severity=MAJOR")])
        .await;
    assert_eq!(
        (status, to.as_str()),
        (StatusCode::SEE_OTHER, &*format!("{listing}?severity=MAJOR"))
    );
    assert_eq!(alarm_status(&app, &alarm).await, "ACKNOWLEDGED");
    let (status, page) = console.post(&listing, &ack, &[]).await;
    assert_eq!(status, StatusCode::CONFLICT);
    assert!(page.contains("acknowledged already"), "{page}");

    // A comment must have words; it shows in the history.
    let alarm_page = format!("/console/alarms/{alarm_id}");
    let comments = format!("{alarm_page}/comments");
    let (status, page) = console.post(&alarm_page, &comments, &[("text", "  ")]).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert!(page.contains(r#"id="f-text-error""#), "{page}");
    let (status, _) = console
        .post_sent_to(&alarm_page, &comments, &[("text", "crew on the way")])
        .await;
    assert_eq!(status, StatusCode::SEE_OTHER);
    let (status, _) = console
        .post_sent_to(&alarm_page, &format!("{alarm_page}/clear"), &[])
        .await;
    assert_eq!(status, StatusCode::SEE_OTHER);
    assert_eq!(alarm_status(&app, &alarm).await, "CLEARED");
    let (_, page) = console.get(&format!("/console/projects/{project}")).await;
    assert!(
        page.contains(r#"id="alarms-major">0<"#) && page.contains(r#"id="alarms-critical">0<"#),
        "a cleared alarm is not counted: {page}"
    );
    let (_, page) = console.get(&alarm_page).await;
    for shown in ["RAISED", "ACKNOWLEDGED", "COMMENTED", "crew on the way", "CLEARED"] {
        assert!(page.contains(shown), "the history shows {shown}: {page}");
    }
    assert!(!page.contains(">Clear</button>"), "a cleared alarm offers no Clear");
    let (_, page) = console.get(&listing).await;
    assert!(!page.contains(&row), "a cleared alarm is not open");
    app.stop().await;
}

#[tokio::test]
async fn alarm_forms_need_the_csrf_token_and_a_role_that_may_act() {
    let app = spawn_app().await;
    let world = app.world().await;
    let alarm = raise_alarm(&app, &world).await;
    let (project, alarm_id) = (id(&world.project), id(&alarm));
    let alarm_page = format!("/console/alarms/{alarm_id}");
    let ack = format!("{alarm_page}/acknowledge");

    let admin = Console::sign_in(&app, &app.admin).await.expect("signed in");
    for form in [vec![], vec![("csrf", "forged")]] {
        let (status, _) = admin.post_raw(&ack, &form).await;
        assert_eq!(status, StatusCode::FORBIDDEN);
    }
    assert_eq!(
        alarm_status(&app, &alarm).await,
        "ACTIVE",
        "a refused form changed nothing"
    );

    // A VIEWER reads the alarm and its listing, is offered no form, and is refused anyway.
    let (name, password) = user(&app, "VIEWER").await;
    let viewer = Console::sign_in_user(&app, &name, &password).await;
    let (status, page) = viewer.get(&format!("/console/projects/{project}/alarms")).await;
    assert_eq!(status, StatusCode::OK);
    assert!(
        page.contains("Too hot") && !page.contains(">Acknowledge</button>"),
        "{page}"
    );
    let (status, page) = viewer.get(&alarm_page).await;
    assert_eq!(status, StatusCode::OK);
    assert!(
        !page.contains("Add comment") && !page.contains(">Clear</button>"),
        "{page}"
    );
    for path in [ack.clone(), format!("{alarm_page}/clear")] {
        let (status, _) = viewer.post(&alarm_page, &path, &[]).await;
        assert_eq!(status, StatusCode::FORBIDDEN, "{path}");
    }
    let (status, _) = viewer
        .post(&alarm_page, &format!("{alarm_page}/comments"), &[("text", "seen")])
        .await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    assert_eq!(alarm_status(&app, &alarm).await, "ACTIVE");

    // The project's application and an OPERATOR act on alarms.
    let app_token = world.project["applicationAccessToken"].as_str().unwrap();
    let application = Console::sign_in(&app, app_token).await.expect("signed in");
    let (status, _) = application
        .post_sent_to(
            &alarm_page,
            &format!("{alarm_page}/comments"),
            &[("text", "from the app")],
        )
        .await;
    assert_eq!(status, StatusCode::SEE_OTHER);
    let (name, password) = user(&app, "OPERATOR").await;
    let operator = Console::sign_in_user(&app, &name, &password).await;
    let (status, _) = operator.post_sent_to(&alarm_page, &ack, &[]).await;
    assert_eq!(status, StatusCode::SEE_OTHER);
    assert_eq!(alarm_status(&app, &alarm).await, "ACKNOWLEDGED");
    app.stop().await;
}

#[tokio::test]
async fn another_tenants_or_projects_alarm_is_refused() {
    let app = spawn_app().await;
    let world = app.world().await;
    let alarm = raise_alarm(&app, &world).await;
    let (project, alarm_id) = (id(&world.project), id(&alarm));
    let tenant = app
        .post("/api/v1/tenants", &app.admin, json!({"name": unique("tenant")}))
        .await
        .result();
    let stranger = Console::sign_in(&app, tenant["adminToken"].as_str().unwrap())
        .await
        .expect("signed in");
    for path in [
        format!("/console/alarms/{alarm_id}"),
        format!("/console/alarms/{alarm_id}/live"),
        format!("/console/projects/{project}/alarms"),
        format!("/console/projects/{project}/alarms/live"),
    ] {
        let (status, _) = stranger.get(&path).await;
        assert_eq!(status, StatusCode::NOT_FOUND, "{path}");
    }
    for action in ["acknowledge", "clear"] {
        let (status, _) = stranger
            .post(
                "/console/projects",
                &format!("/console/alarms/{alarm_id}/{action}"),
                &[],
            )
            .await;
        assert_eq!(status, StatusCode::NOT_FOUND, "{action}");
    }
    // Another project's application of the same tenant: refused, as over the API.
    let other = app.world().await;
    let other_app = Console::sign_in(&app, other.project["applicationAccessToken"].as_str().unwrap())
        .await
        .expect("signed in");
    let (status, _) = other_app.get(&format!("/console/alarms/{alarm_id}")).await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    let (status, _) = other_app
        .post(
            &format!("/console/projects/{}", id(&other.project)),
            &format!("/console/alarms/{alarm_id}/acknowledge"),
            &[],
        )
        .await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    assert_eq!(alarm_status(&app, &alarm).await, "ACTIVE");
    app.stop().await;
}

#[tokio::test]
async fn desired_values_are_set_from_the_device_page_at_the_version_it_shows() {
    let app = spawn_app().await;
    let world = app.world().await;
    let device = id(&world.device);
    let page_path = format!("/console/devices/{device}");
    let form = format!("{page_path}/desired");
    let console = Console::sign_in(&app, &app.admin).await.expect("signed in");
    let (_, page) = console.get(&page_path).await;
    assert!(
        page.contains("Desired state") && page.contains("No desired values."),
        "{page}"
    );
    assert!(
        page.contains(r#"name="attributes.setpoint""#) && !page.contains(r#"name="attributes.temp""#),
        "the form offers the writable attributes alone"
    );
    let desired = async || {
        app.get(format!("/api/v1/devices/{device}/desired"), &app.admin)
            .await
            .result()
    };

    let (status, page) = console
        .post(&page_path, &form, &[("version", "0"), ("attributes.setpoint", "warm")])
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert!(page.contains(r#"id="f-attributes.setpoint-error""#), "{page}");
    let (status, page) = console
        .post(&page_path, &form, &[("version", "0"), ("attributes.setpoint", "21.5")])
        .await;
    assert_eq!(status, StatusCode::OK, "{page}");
    assert!(
        page.contains(r#"id="desired-setpoint""#) && page.contains("pending"),
        "{page}"
    );
    assert_eq!(desired().await["attributes"]["setpoint"]["value"], json!(21.5));

    // A form made at an older version changes nothing: someone set a value since.
    let (status, page) = console
        .post(&page_path, &form, &[("version", "0"), ("attributes.setpoint", "30")])
        .await;
    assert_eq!(status, StatusCode::CONFLICT);
    assert!(page.contains("Someone changed this"), "{page}");
    assert_eq!(desired().await["attributes"]["setpoint"]["value"], json!(21.5));

    // No CSRF token, or a VIEWER: refused, nothing changes.
    let (status, _) = console
        .post_raw(&form, &[("version", "1"), ("remove", "setpoint")])
        .await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    let (name, password) = user(&app, "VIEWER").await;
    let viewer = Console::sign_in_user(&app, &name, &password).await;
    let (_, page) = viewer.get(&page_path).await;
    assert!(page.contains("21.5") && !page.contains("Set desired") && !page.contains(">Remove</button>"));
    let (status, _) = viewer
        .post(&page_path, &form, &[("version", "1"), ("remove", "setpoint")])
        .await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    assert!(desired().await["attributes"].get("setpoint").is_some());

    let (status, page) = console
        .post(&page_path, &form, &[("version", "1"), ("remove", "setpoint")])
        .await;
    assert_eq!(status, StatusCode::OK, "{page}");
    assert!(desired().await["attributes"].get("setpoint").is_none(), "removed");
    app.stop().await;
}
