//! `/metrics`: each figure moves when what it counts happens, and the Grafana dashboard in
//! deploy/grafana/ queries only metrics the server serves.

use std::collections::BTreeSet;
use std::time::Duration;

use gantry::device::DeviceClient;
use serde_json::{Value, json};

use crate::helpers::{TestApp, spawn_app, wait_for};

/// The value of the series `series` (name with its labels, as written), if served.
async fn series(app: &TestApp, series: &str) -> Option<f64> {
    let text = app.metrics_text().await;
    text.lines()
        .find_map(|l| l.strip_prefix(series).and_then(|v| v.strip_prefix(' ')))
        .and_then(|v| v.trim().parse().ok())
}

/// Waits until `series` has `value`; whether it came.
async fn reaches(app: &TestApp, name: &str, value: f64) -> bool {
    wait_for(Duration::from_secs(10), async || series(app, name).await == Some(value)).await
}

const DEVICE_TCP: &str = r#"gantry_mqtt_connected_clients{kind="device",transport="tcp"}"#;
const TEMPORARY_WS: &str = r#"gantry_mqtt_connected_clients{kind="temporary",transport="ws"}"#;

#[tokio::test]
async fn connected_clients_by_kind_and_transport() {
    let app = spawn_app().await;
    let world = app.world().await;
    let device = world.device["id"].as_str().unwrap();
    assert_eq!(series(&app, DEVICE_TCP).await, Some(0.0));
    let client = DeviceClient::connect(
        app.mqtt,
        "gantry",
        device,
        world.device["accessToken"].as_str().unwrap(),
    )
    .await
    .unwrap();
    assert!(reaches(&app, DEVICE_TCP, 1.0).await, "{}", app.metrics_text().await);

    // A route's temporary identity over WebSocket.
    let route: Value = app
        .post(
            format!("/api/v1/devices/{device}/routes"),
            &app.admin,
            json!({"sourceType": "WEB"}),
        )
        .await
        .result();
    let role = &route["temporaryRole"];
    let web = DeviceClient::connect_ws(
        app.mqtt_ws,
        "gantry",
        role["clientId"].as_str().unwrap(),
        role["username"].as_str().unwrap(),
        role["password"].as_str().unwrap(),
    )
    .await
    .unwrap();
    assert!(reaches(&app, TEMPORARY_WS, 1.0).await, "{}", app.metrics_text().await);
    assert_eq!(series(&app, DEVICE_TCP).await, Some(1.0));

    client.disconnect().await;
    assert!(reaches(&app, DEVICE_TCP, 0.0).await, "{}", app.metrics_text().await);
    web.disconnect().await;
    assert!(reaches(&app, TEMPORARY_WS, 0.0).await, "{}", app.metrics_text().await);
    app.stop().await;
}

#[tokio::test]
async fn controls_requests_ingest_store_process_and_build() {
    let app = spawn_app().await;
    let world = app.world().await;
    let device = world.device["id"].as_str().unwrap();
    let mut client = DeviceClient::connect(
        app.mqtt,
        "gantry",
        device,
        world.device["accessToken"].as_str().unwrap(),
    )
    .await
    .unwrap();
    client.subscribe_inbox().await.unwrap();

    // A control pending, then completed by the device's ack.
    assert_eq!(series(&app, "gantry_controls_pending").await, Some(0.0));
    app.put(
        format!("/api/v1/devices/{device}/shadows"),
        &app.admin,
        json!({"type": "m", "needack": true, "payload": {"attrs": [{"code": "setpoint", "value": 1.5, "channel": "m"}]}}),
    )
    .await
    .result_done();
    assert_eq!(series(&app, "gantry_controls_pending").await, Some(1.0));
    assert_eq!(series(&app, "gantry_controls_awaiting_ack_total").await, Some(1.0));
    assert_eq!(series(&app, "gantry_controls_completed_total").await, Some(0.0));
    let control = client
        .next_message(Duration::from_secs(5))
        .await
        .unwrap()
        .expect("the control arrives");
    client.ack(&control.json()).await.unwrap();
    assert!(reaches(&app, "gantry_controls_completed_total", 1.0).await);
    assert_eq!(series(&app, "gantry_controls_pending").await, Some(0.0));
    assert_eq!(series(&app, "gantry_controls_exception_total").await, Some(0.0));

    // A request: its route's histogram counts it.
    let count = r#"gantry_http_request_duration_seconds_count{method="GET",route="/api/v1/devices/{deviceId}"}"#;
    let before = series(&app, count).await.unwrap_or(0.0);
    app.get(format!("/api/v1/devices/{device}"), &app.admin).await.result();
    assert_eq!(series(&app, count).await, Some(before + 1.0));

    // An event: the commit histogram counts its batch.
    let commits = series(&app, "gantry_ingest_commit_seconds_count").await.unwrap();
    client
        .publish_attrs(&[("temp", json!(20.5))], None, true)
        .await
        .unwrap();
    assert!(series(&app, "gantry_ingest_commit_seconds_count").await.unwrap() > commits);
    assert_eq!(series(&app, "gantry_ingest_backlog").await, Some(0.0));

    // The store, the process and the build.
    let text = app.metrics_text().await;
    assert_eq!(series(&app, "gantry_store_up").await, Some(1.0));
    let sqlite = !app.database_url().starts_with("postgres");
    let pool = match sqlite {
        true => r#"gantry_store_pool_connections{backend="sqlite",pool="read",state="max"}"#,
        false => r#"gantry_store_pool_connections{backend="postgres",pool="main",state="max"}"#,
    };
    assert!(series(&app, pool).await.unwrap() >= 1.0, "{text}");
    if sqlite {
        assert!(
            series(&app, r#"gantry_store_wal_bytes{file="main"}"#).await.is_some(),
            "{text}"
        );
        assert!(series(&app, "gantry_store_staged_events").await.is_some(), "{text}");
    }
    assert!(
        series(&app, "process_resident_memory_bytes").await.unwrap() > 1e6,
        "{text}"
    );
    assert!(series(&app, "process_open_fds").await.unwrap() > 3.0, "{text}");
    assert!(series(&app, "process_cpu_seconds_total").await.unwrap() > 0.0, "{text}");
    let build = text
        .lines()
        .find(|l| l.starts_with("gantry_build_info{"))
        .expect("gantry_build_info");
    assert!(
        build.starts_with(&format!(
            "gantry_build_info{{version=\"{}\",commit=\"",
            env!("CARGO_PKG_VERSION")
        )),
        "{build}"
    );
    assert!(build.ends_with("} 1") && !build.contains("commit=\"\""), "{build}");
    client.disconnect().await;
    app.stop().await;
}

/// The metric names a PromQL expression uses: words starting `gantry_` or `process_`, a
/// histogram's `_bucket`/`_sum`/`_count` series named by their family.
fn metric_names(expr: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    for word in expr.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_')) {
        if word.starts_with("gantry_") || word.starts_with("process_") {
            let family = ["_bucket", "_sum", "_count"]
                .iter()
                .find_map(|suffix| word.strip_suffix(suffix))
                .unwrap_or(word);
            names.insert(family.to_owned());
        }
    }
    names
}

/// Every `expr` in the dashboard, at any depth.
fn exprs(value: &Value, into: &mut Vec<String>) {
    match value {
        Value::Object(map) => {
            for (key, v) in map {
                match (key.as_str(), v) {
                    ("expr", Value::String(expr)) => into.push(expr.clone()),
                    _ => exprs(v, into),
                }
            }
        }
        Value::Array(items) => items.iter().for_each(|v| exprs(v, into)),
        _ => {}
    }
}

#[tokio::test]
async fn the_dashboard_queries_only_served_metrics() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../deploy/grafana/gantry.json");
    let dashboard: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).expect("valid JSON");
    let mut all = Vec::new();
    exprs(&dashboard, &mut all);
    let queried: BTreeSet<String> = all.iter().flat_map(|e| metric_names(e)).collect();
    assert!(queried.len() >= 15, "the dashboard queries {queried:?}");

    let app = spawn_app().await;
    // A request, so that the per-route HTTP series exist.
    app.get("/api/v1/deviceModels", &app.admin).await.result();
    let text = app.metrics_text().await;
    let served: BTreeSet<&str> = text
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .filter_map(|l| l.split_whitespace().next())
        .collect();
    let missing: Vec<&String> = queried.iter().filter(|n| !served.contains(n.as_str())).collect();
    assert!(
        missing.is_empty(),
        "queried by the dashboard, not served: {missing:?}\n{text}"
    );
    app.stop().await;
}
