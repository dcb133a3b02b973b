//! The project overview's events per minute: events posted over REST and MQTT show as the
//! hour's count on the project's overview, not on another tenant's, and survive a restart
//! (the counts are flushed at shutdown).

use std::time::Duration;

use gantry::device::DeviceClient;
use reqwest::StatusCode;
use serde_json::json;

use crate::console::Console;
use crate::events::event;
use crate::helpers::{TestApp, spawn_app, spawn_with, unique, wait_for};

/// The number in the element with `id` on `page`, if it is there.
fn count_in(page: &str, id: &str) -> Option<u64> {
    let start = page.find(&format!(r#"id="{id}">"#))? + id.len() + 6;
    page[start..].split('<').next()?.trim().parse().ok()
}

/// The overview at `path` once it shows `expected` events in the last hour (the counts follow
/// each commit within moments); the page as last read.
async fn overview_showing(console: &Console, path: &str, expected: u64) -> String {
    let mut page = String::new();
    wait_for(Duration::from_secs(5), async || {
        let (status, body) = console.get(path).await;
        assert_eq!(status, StatusCode::OK, "{body}");
        page = body;
        count_in(&page, "events-hour") == Some(expected)
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

    let page = overview_showing(&console, &path, 5).await;
    assert_eq!(count_in(&page, "events-hour"), Some(5), "{page}");
    let now_and_before = count_in(&page, "events-current").unwrap() + count_in(&page, "events-last-minute").unwrap();
    assert_eq!(now_and_before, 5, "all in this minute or the one before");
    assert!(page.contains(r#"class="chart rate""#), "{page}");
    assert!(!page.contains(r#"id="events-empty""#));

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

    // The counts are written at shutdown at the latest: a restarted server shows them.
    let (admin, database_url) = (app.admin.clone(), app.database_url());
    let again = restart(app, admin, database_url).await;
    let console = Console::sign_in(&again, &again.admin).await.expect("signed in");
    let (_, page) = console.get(&path).await;
    assert_eq!(count_in(&page, "events-hour"), Some(5), "{page}");
    again.stop().await;
}

async fn restart(app: TestApp, admin: String, database_url: String) -> TestApp {
    let dir = app.stop_keep_data().await.unwrap();
    let mut config = gantry::config::ServeConfig::local(dir.path().to_path_buf());
    config.admin_token = Some(admin.clone());
    config.database_url = Some(database_url);
    spawn_with(config, dir, admin).await
}
