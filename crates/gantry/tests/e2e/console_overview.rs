//! The project overview's events per minute: events posted over REST and MQTT show as the
//! hour's count on the project's overview, not on another tenant's, and survive a restart
//! (the counts are flushed at shutdown); the device online is counted there. Its map: every device that reports a position is
//! counted, one pin drawn per pixel.

use std::time::Duration;

use gantry::device::DeviceClient;
use reqwest::StatusCode;
use serde_json::json;

use crate::console::Console;
use crate::events::event;
use crate::helpers::{TestApp, model_body, spawn_app, unique, wait_for};
use crate::users::{PASSWORD, create_user};

/// The number in the element with `id` on `page`, if it is there.
fn count_in(page: &str, id: &str) -> Option<u64> {
    let start = page.find(&format!(r#"id="{id}">"#))? + id.len() + 6;
    page[start..].split('<').next()?.trim().parse().ok()
}

/// The overview at `path` once the count with `id` shows `expected` (the counts follow each
/// commit within moments); the page as last read.
async fn overview_showing(console: &Console, path: &str, id: &str, expected: u64) -> String {
    let mut page = String::new();
    wait_for(Duration::from_secs(5), async || {
        let (status, body) = console.get(path).await;
        assert_eq!(status, StatusCode::OK, "{body}");
        page = body;
        count_in(&page, id) == Some(expected)
    })
    .await;
    page
}

#[tokio::test]
async fn the_overview_counts_a_projects_events_and_no_other_tenants() {
    let app = spawn_app().await;
    let world = app.world().await;
    let project = world.project["id"].as_str().unwrap();
    let path = format!("/console/projects/{project}");
    let console = Console::sign_in(&app, &app.admin).await.expect("signed in");
    let (status, page) = console.get(&path).await;
    assert_eq!(status, StatusCode::OK);
    assert!(page.contains(r#"id="events-empty""#), "no events yet: {page}");
    assert!(!page.contains(r#"class="chart rate""#), "no chart without events");

    for value in [1.0, 2.0, 3.0] {
        app.post(
            "/api/v1/deviceEvents",
            &app.admin,
            event(&world.device, "temp", json!(value), "Float", 1_714_492_800_000),
        )
        .await
        .result();
    }
    let mut device = DeviceClient::connect(
        app.mqtt,
        "gantry",
        world.device["id"].as_str().unwrap(),
        world.device["accessToken"].as_str().unwrap(),
    )
    .await
    .expect("the device logs in");
    device
        .publish_attrs(&[("temp", json!(4.0)), ("count", json!(7))], None, false)
        .await
        .expect("stored");

    let page = overview_showing(&console, &path, "events-hour", 5).await;
    assert_eq!(count_in(&page, "events-hour"), Some(5), "{page}");
    let now_and_before = count_in(&page, "events-current").unwrap() + count_in(&page, "events-last-minute").unwrap();
    assert_eq!(now_and_before, 5, "all in this minute or the one before");
    assert!(page.contains(r#"class="chart rate""#), "{page}");
    assert!(!page.contains(r#"id="events-empty""#));
    // The device logged in over MQTT is the project's one device online once its session is
    // recorded (written beside the events, not with them); none is locked.
    let page = overview_showing(&console, &path, "count-online", 1).await;
    assert_eq!(count_in(&page, "count-online"), Some(1), "{page}");
    assert_eq!(count_in(&page, "count-locked"), Some(0), "{page}");

    // Another tenant: the project is not found, and its own project's overview counts nothing.
    let tenant = app
        .post("/api/v1/tenants", &app.admin, json!({"name": unique("tenant")}))
        .await
        .result();
    let token = tenant["adminToken"].as_str().unwrap();
    let stranger = Console::sign_in(&app, token).await.expect("signed in");
    assert_eq!(stranger.get(&path).await.0, StatusCode::NOT_FOUND);
    let theirs = app.create_project(token).await;
    let (status, page) = stranger
        .get(&format!("/console/projects/{}", theirs["id"].as_str().unwrap()))
        .await;
    assert_eq!(status, StatusCode::OK);
    assert!(page.contains(r#"id="events-empty""#), "{page}");
    assert_eq!(count_in(&page, "events-hour"), None);
    assert_eq!(count_in(&page, "count-online"), Some(0), "{page}");

    // The counts are written at shutdown at the latest: a restarted server shows them.
    let again = app.restarted().await;
    let console = Console::sign_in(&again, &again.admin).await.expect("signed in");
    let (_, page) = console.get(&path).await;
    assert_eq!(count_in(&page, "events-hour"), Some(5), "{page}");
    again.stop().await;
}

/// Creates a device of `model` in `project` for each of `names`, 16 at a time, in their order.
async fn devices(
    app: &TestApp,
    project: &serde_json::Value,
    model: &serde_json::Value,
    names: Vec<String>,
) -> Vec<serde_json::Value> {
    use futures::StreamExt;
    futures::stream::iter(names)
        .map(|name| async move {
            let body = json!({"deviceName": name, "projectId": project["id"], "modelId": model["id"]});
            app.post("/api/v1/devices", &app.admin, body).await.result()
        })
        .buffered(16)
        .collect()
        .await
}

/// Posts each (device, attribute, text, device time) as a String event, 16 at a time.
async fn report(app: &TestApp, positions: Vec<(&serde_json::Value, &str, String, i64)>) {
    use futures::StreamExt;
    futures::stream::iter(positions)
        .for_each_concurrent(16, |(device, code, text, at)| async move {
            let body = event(device, code, json!(text), "String", at);
            app.post("/api/v1/deviceEvents", &app.admin, body).await.result();
        })
        .await;
}

#[tokio::test]
async fn the_map_counts_every_device_that_reports_a_position() {
    let app = spawn_app().await;
    let project = app.create_project(&app.admin).await;
    let mut body = model_body(&unique("tracked"));
    for code in ["gps", "pos"] {
        body["attributesMap"][code] =
            json!({"name": code, "code": code, "dataType": "String", "readable": "R", "channel": "g"});
    }
    let model = app.post("/api/v1/deviceModels", &app.admin, body).await.result();
    // A grid of 12 by 10 devices about a kilometre apart, one device twice (two position
    // attributes), one on a pixel already taken, one silent and one whose text is no position.
    let names: Vec<String> = (0..124).map(|i| format!("{}-{i:03}", unique("pin"))).collect();
    let fleet = devices(&app, &project, &model, names).await;
    let mut positions: Vec<(&serde_json::Value, &str, String, i64)> = (0..120)
        .map(|i| {
            let (lat, lng) = (31.0 + f64::from(i / 10) * 0.01, 121.0 + f64::from(i % 10) * 0.01);
            (
                &fleet[i as usize],
                "pos",
                format!("{lat:.2},{lng:.2}"),
                1_714_492_800_000,
            )
        })
        .collect();
    positions.extend([
        (&fleet[120], "pos", "31.005,121.005".to_owned(), 1_714_492_800_000),
        (&fleet[120], "gps", "31.055,121.055".to_owned(), 1_714_492_801_000),
        (&fleet[121], "pos", "31.00,121.00".to_owned(), 1_714_492_800_000),
        (&fleet[123], "pos", "nowhere".to_owned(), 1_714_492_800_000),
    ]);
    report(&app, positions).await;

    let path = format!("/console/projects/{}", project["id"].as_str().unwrap());
    let console = Console::sign_in(&app, &app.admin).await.expect("signed in");
    let (status, page) = console.get(&path).await;
    assert_eq!(status, StatusCode::OK, "{page}");
    assert!(
        page.contains("122 devices report a position. 121 pins are drawn"),
        "every device with a position is counted, the one on a taken pixel not drawn: {page}"
    );
    assert_eq!(page.matches("<circle").count(), 121, "{page}");
    let twice = fleet[120]["deviceName"].as_str().unwrap();
    assert!(
        page.contains(&format!("{twice} 31.055,121.055")),
        "the newer of its two: {page}"
    );
    for quiet in [&fleet[122], &fleet[123]] {
        let id = quiet["id"].as_str().unwrap();
        assert!(!page.contains(&format!("/console/devices/{id}")), "{page}");
    }

    // A viewer of the project sees the same map; one of another project, none.
    let other = app.create_project(&app.admin).await;
    for (projects, expected) in [(&project, StatusCode::OK), (&other, StatusCode::NOT_FOUND)] {
        let user = create_user(&app, &app.admin, "VIEWER", &[projects]).await;
        let viewer = Console::sign_in_user(&app, user["username"].as_str().unwrap(), PASSWORD).await;
        let (status, page) = viewer.get(&path).await;
        assert_eq!(status, expected, "{page}");
        if status == StatusCode::OK {
            assert!(page.contains("122 devices report a position."), "{page}");
        }
    }
    app.stop().await;
}
