//! The error model: shape, statuses and codes for bad requests.

use reqwest::Method;
use reqwest::header::CONTENT_TYPE;
use serde_json::json;

use crate::helpers::spawn_app;

#[tokio::test]
async fn malformed_bodies_are_400_and_change_nothing() {
    let app = spawn_app().await;
    let send_raw = |body: &'static str| {
        app.client
            .post(format!("{}/api/v1/projects", app.base))
            .bearer_auth(&app.admin)
            .header(CONTENT_TYPE, "application/json")
            .body(body)
            .send()
    };
    for raw in ["{not json", "[\"a\", \"list\"]", "", "{\"name\": \"x\"} trailing"] {
        let reply = send_raw(raw).await.unwrap();
        assert_eq!(reply.status(), 400, "{raw}");
        let body: serde_json::Value = reply.json().await.unwrap();
        assert_eq!(body["returnCode"], 40001, "{raw}: {body}");
        assert!(body["message"].as_str().unwrap().len() > 5);
    }
    let message = app
        .post(
            "/api/v1/deviceModels",
            &app.admin,
            json!({"name": 5, "attributesMap": "nope"}),
        )
        .await
        .error(400);
    assert!(
        message.contains("name") || message.contains("attributesMap"),
        "{message}"
    );
    let message = app
        .post("/api/v1/projects", &app.admin, json!({"name": "p", "mapInfo": [1, 2]}))
        .await
        .error(400);
    assert!(message.contains("mapInfo"), "{message}");
    assert_eq!(
        app.get("/api/v1/projects", &app.admin).await.result()["totalResults"],
        0
    );
}

#[tokio::test]
async fn oversized_bodies_are_413() {
    let app = spawn_app().await;
    let big = json!({"name": "big", "description": "x".repeat(1024 * 1024 + 10)});
    let reply = app.post("/api/v1/projects", &app.admin, big).await;
    assert_eq!(reply.body["returnCode"], 41300);
    reply.error(413);
    // just under the limit is fine
    let fits = json!({"name": "fits", "description": "x".repeat(900 * 1024)});
    app.post("/api/v1/projects", &app.admin, fits).await.result();
}

#[tokio::test]
async fn unknown_ids_and_routes_are_404_json() {
    let app = spawn_app().await;
    let reply = app
        .get(&format!("/api/v1/deviceModels/{}", uuid::Uuid::new_v4()), &app.admin)
        .await;
    assert_eq!(reply.body["returnCode"], 40400);
    reply.error(404);
    app.get("/api/v1/devices/not-even-a-uuid", &app.admin).await.error(404);
    app.get("/api/v1/nothing-here", &app.admin).await.error(404);
}

#[tokio::test]
async fn error_codes_are_stable_per_kind() {
    let app = spawn_app().await;
    let name = crate::helpers::unique("p");
    app.post("/api/v1/projects", &app.admin, json!({"name": name}))
        .await
        .result();
    let dup = app.post("/api/v1/projects", &app.admin, json!({"name": name})).await;
    assert_eq!(dup.body["returnCode"], 40900);
    let invalid = app.post("/api/v1/projects", &app.admin, json!({"name": "  "})).await;
    assert_eq!(invalid.body["returnCode"], 40000);
    assert!(invalid.error(400).starts_with("name"));
    let unauthorized = app.get("/api/v1/projects", "nope").await;
    assert_eq!(unauthorized.body["returnCode"], 40100);
}

#[tokio::test]
async fn a_token_over_its_rate_limit_gets_429() {
    let app = crate::helpers::spawn_app_with(|c| c.rate_limit = 5).await;
    let world = app.world().await; // 3 requests of the burst of 10
    let replies = futures::future::join_all((0..12).map(|_| app.get("/api/v1/projects", &app.admin))).await;
    let limited: Vec<_> = replies.into_iter().filter(|r| r.status == 429).collect();
    assert!(!limited.is_empty(), "a burst over the limit is refused");
    assert!(
        limited
            .iter()
            .all(|r| r.body["returnCode"] == 42900 && r.body["message"].as_str().unwrap().contains("rate limit"))
    );
    // another token has its own budget
    let token = world.project["applicationAccessToken"].as_str().unwrap();
    app.get(
        format!("/api/v1/projects/{}", world.project["id"].as_str().unwrap()),
        token,
    )
    .await
    .result();
    // and the budget refills
    tokio::time::sleep(std::time::Duration::from_millis(400)).await;
    app.get("/api/v1/projects", &app.admin).await.result();
}

/// PostgreSQL's text refuses the NUL character, so text holding one is refused on both engines
/// as bad input, naming where it was: never a store failure, never stored.
#[tokio::test]
async fn nul_characters_are_refused_as_bad_input() {
    let app = spawn_app().await;
    let world = app.world().await;
    let device = world.device["id"].as_str().unwrap();
    for (path, body, field) in [
        (
            "/api/v1/deviceEvents",
            json!({"deviceId": device, "attributeCode": "label", "attributeData": "a\u{0}b"}),
            "attributeData",
        ),
        (
            "/api/v1/deviceEvents",
            json!({"deviceId": device, "attributeCode": "label", "attributeData": "x", "correlationId": "\u{0}"}),
            "correlationId",
        ),
        ("/api/v1/projects", json!({"name": "p\u{0}"}), "name"),
        (
            "/api/v1/devices",
            json!({"deviceName": "d", "projectId": world.project["id"], "modelId": world.model["id"], "metadata": {"k": "\u{0}"}}),
            "metadata.k",
        ),
    ] {
        let message = app.post(path, &app.admin, body).await.error(400);
        assert!(message.starts_with(field), "{path}: {message}");
        assert!(message.contains("NUL"), "{message}");
    }
    let events = app
        .get(format!("/api/v1/devices/{device}/events"), &app.admin)
        .await
        .result();
    assert_eq!(events["totalResults"], 0);

    // In a query string and in a path.
    let project = world.project["id"].as_str().unwrap();
    let message = app
        .get(format!("/api/v1/projects/{project}/devices?deviceName=%00"), &app.admin)
        .await
        .error(400);
    assert!(message.starts_with("deviceName"), "{message}");
    let message = app.get("/api/v1/devices/a%00b", &app.admin).await.error(400);
    assert!(message.starts_with("path"), "{message}");
    // A path that is not UTF-8 once decoded gets the same JSON error shape.
    let reply = app.get("/api/v1/devices/%FF", &app.admin).await;
    assert_eq!(reply.body["returnCode"], 40000, "{:?}", reply);
    reply.error(400);
}

/// A name filter longer than any name (128 characters) is a 400 naming it, on every store, also
/// one made of LIKE wildcards; one of exactly 128 characters is a search that finds nothing.
#[tokio::test]
async fn a_name_filter_longer_than_a_name_is_400() {
    let app = spawn_app().await;
    let world = app.world().await;
    let project = world.project["id"].as_str().unwrap();
    for filter in ["a".repeat(49_999), "_".repeat(25_001), "%".repeat(129)] {
        let message = app
            .get(
                format!(
                    "/api/v1/projects/{project}/devices?deviceName={}",
                    filter.replace('%', "%25")
                ),
                &app.admin,
            )
            .await
            .error(400);
        assert!(message.starts_with("deviceName"), "{message}");
    }
    let longest = app
        .get(
            format!("/api/v1/projects/{project}/devices?deviceName={}", "_".repeat(128)),
            &app.admin,
        )
        .await
        .result();
    assert_eq!(longest["totalResults"], 0);
}

/// A body must say it is JSON: without `Content-Type: application/json` it is 415 and changes
/// nothing.
#[tokio::test]
async fn a_body_that_is_not_declared_json_is_415() {
    let app = spawn_app().await;
    let name = crate::helpers::unique("p");
    for content_type in [None, Some("text/plain"), Some("application/x-www-form-urlencoded")] {
        let mut request = app
            .client
            .post(format!("{}/api/v1/projects", app.base))
            .bearer_auth(&app.admin)
            .body(json!({"name": name}).to_string());
        if let Some(content_type) = content_type {
            request = request.header(CONTENT_TYPE, content_type);
        }
        let reply = request.send().await.unwrap();
        assert_eq!(reply.status(), 415, "{content_type:?}");
        let body: serde_json::Value = reply.json().await.unwrap();
        assert_eq!(body["returnCode"], 41500, "{body}");
        assert!(body["message"].as_str().unwrap().contains("application/json"), "{body}");
    }
    let reply = app
        .client
        .post(format!("{}/api/v1/projects", app.base))
        .bearer_auth(&app.admin)
        .header(CONTENT_TYPE, "application/json; charset=utf-8")
        .body(json!({"name": name}).to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(reply.status(), 200, "one project named {name}, made once");
}

/// Sends `requests` (raw bytes) on one connection and reads until the server closes it.
async fn raw_exchange(app: &crate::helpers::TestApp, requests: &[Vec<u8>]) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let addr = app.base.strip_prefix("http://").unwrap();
    let mut socket = tokio::net::TcpStream::connect(addr).await.unwrap();
    for request in requests {
        socket.write_all(request).await.unwrap();
    }
    let mut answer = Vec::new();
    tokio::time::timeout(std::time::Duration::from_secs(10), socket.read_to_end(&mut answer))
        .await
        .expect("the server answers and closes")
        .unwrap();
    String::from_utf8(answer).unwrap()
}

/// The error answer (the last answer) in `raw`: its head and its body as JSON.
fn last_answer(raw: &str) -> (String, serde_json::Value) {
    let start = raw
        .rfind("HTTP/1.1 4")
        .unwrap_or_else(|| panic!("an error answer: {raw:?}"));
    let (head, body) = raw[start..]
        .split_once("\r\n\r\n")
        .unwrap_or_else(|| panic!("an answer: {raw:?}"));
    let body = serde_json::from_str(body).unwrap_or_else(|_| panic!("a JSON body: {raw}"));
    (head.to_ascii_lowercase(), body)
}

/// Requests hyper refuses before any service (a URI over its fixed limit, a malformed request
/// line) still get the API's JSON error shape, on a fresh connection and on a kept-alive one.
#[tokio::test]
async fn requests_refused_before_routing_get_json_errors() {
    let app = spawn_app().await;
    let long = format!(
        "GET /api/v1/projects?q={} HTTP/1.1\r\nHost: x\r\n\r\n",
        "a".repeat(100_000)
    )
    .into_bytes();

    let raw = raw_exchange(&app, std::slice::from_ref(&long)).await;
    let (head, body) = last_answer(&raw);
    assert!(head.starts_with("http/1.1 414"), "{head}");
    assert!(head.contains("content-type: application/json"), "{head}");
    assert_eq!(body["returnCode"], 41400, "{body}");
    assert!(body["message"].as_str().unwrap().contains("URI"), "{body}");

    let health = b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n".to_vec();
    let raw = raw_exchange(&app, &[health, long]).await;
    assert!(raw.starts_with("HTTP/1.1 200"), "{raw}");
    let (head, body) = last_answer(&raw);
    assert!(
        head.starts_with("http/1.1 414"),
        "after a kept-alive request too: {head}"
    );
    assert_eq!(body["returnCode"], 41400, "{body}");

    let raw = raw_exchange(&app, &[b"GET /healthz HTTP/1.1\r\nBad Header\r\n\r\n".to_vec()]).await;
    let (head, body) = last_answer(&raw);
    assert!(head.starts_with("http/1.1 400"), "{head}");
    assert_eq!(body["returnCode"], 40002, "{body}");
    app.stop().await;
}

/// A field the body does not have (a misspelling) is 400 naming it, and nothing is stored; the
/// body of a GET, PUT back unchanged, is accepted: its output-only fields are ignored.
#[tokio::test]
async fn unknown_body_fields_are_named_and_a_gets_body_goes_back() {
    let app = spawn_app().await;
    let world = app.world().await;
    let (did, pid) = (&world.device["id"], &world.project["id"]);
    let mid = &world.model["id"];
    let events = format!("/api/v1/devices/{}/events", did.as_str().unwrap());
    let devices = format!("/api/v1/projects/{}/devices", pid.as_str().unwrap());
    let project = format!("/api/v1/projects/{}", pid.as_str().unwrap());
    // (method, path, body, the field named, a listing the refusal leaves as it was)
    let refused = [
        (
            Method::POST,
            "/api/v1/deviceEvents".to_owned(),
            json!({"deviceId": did, "attributeCode": "temp", "attributeData": 20.5,
                   "devicetime": "2024-03-01T12:00:00.000+0800"}),
            "devicetime",
            events.clone(),
        ),
        (
            Method::POST,
            "/api/v1/devices".to_owned(),
            json!({"deviceName": "twin", "projectId": pid, "modelId": mid, "virtal": true}),
            "virtal",
            devices.clone(),
        ),
        (
            Method::PUT,
            project.clone(),
            json!({"name": "renamed", "descripton": "typo"}),
            "descripton",
            project.clone(),
        ),
    ];
    for (method, path, body, field, listing) in refused {
        let before = app.get(&listing, &app.admin).await.result();
        let reply = app.call(method, &path, Some(&app.admin), Some(body)).await;
        assert_eq!(reply.body["returnCode"], 40000, "{path}: {}", reply.body);
        let message = reply.error(400);
        assert!(message.starts_with(&format!("{field}: ")), "{path}: {message}");
        assert_eq!(
            app.get(&listing, &app.admin).await.result(),
            before,
            "{path}: nothing stored"
        );
    }
    for path in [
        format!("/api/v1/devices/{}", did.as_str().unwrap()),
        project,
        format!("/api/v1/deviceModels/{}", mid.as_str().unwrap()),
    ] {
        let got = app.get(&path, &app.admin).await.result();
        let put = app.put(&path, &app.admin, got.clone()).await.result();
        assert_eq!(put["id"], got["id"], "{path}");
    }
}
