//! The project push stream (`GET /projects/{id}/stream`, Server-Sent Events) over real HTTP,
//! fed by real MQTT devices: what it sends, resuming with `Last-Event-ID`, `reset`, filters,
//! who may open it, and its end when its token stops standing for its caller.

use std::time::Duration;

use gantry::device::DeviceClient;
use serde_json::{Value, json};

use crate::helpers::{TestApp, spawn_app, spawn_app_with, unique};

const PREFIX: &str = "gantry";

/// How long an event may take to reach the stream.
const ARRIVES: Duration = Duration::from_secs(10);

fn id(record: &Value) -> &str {
    record["id"].as_str().unwrap()
}

#[derive(Debug)]
pub(crate) struct SseEvent {
    pub(crate) id: Option<String>,
    pub(crate) event: String,
    pub(crate) data: Value,
}

/// A stream being read: the response and what was read of it.
pub(crate) struct Sse {
    response: reqwest::Response,
    text: String,
}

impl Sse {
    pub(crate) async fn open(
        app: &TestApp,
        query: &str,
        token: &str,
        last_id: Option<&str>,
    ) -> Result<Sse, reqwest::Response> {
        let project_path = query;
        let mut request = app.client.get(format!("{}{project_path}", app.base)).bearer_auth(token);
        if let Some(last) = last_id {
            request = request.header("Last-Event-ID", last);
        }
        let response = request.send().await.unwrap();
        if response.status() != 200 {
            return Err(response);
        }
        assert_eq!(
            response.headers()["content-type"].to_str().unwrap(),
            "text/event-stream"
        );
        Ok(Sse {
            response,
            text: String::new(),
        })
    }

    /// The next event (comments skipped); None when the server ended the stream.
    pub(crate) async fn next(&mut self) -> Option<SseEvent> {
        loop {
            if let Some(end) = self.text.find("\n\n") {
                let block: String = self.text.drain(..end + 2).collect();
                let (mut id, mut event, mut data) = (None, String::new(), String::new());
                for line in block.lines() {
                    if let Some(v) = line.strip_prefix("id:") {
                        id = Some(v.trim().to_owned());
                    } else if let Some(v) = line.strip_prefix("event:") {
                        event = v.trim().to_owned();
                    } else if let Some(v) = line.strip_prefix("data:") {
                        data.push_str(v.trim_start());
                    }
                }
                if event.is_empty() && data.is_empty() {
                    continue; // a comment
                }
                return Some(SseEvent {
                    id,
                    event,
                    data: serde_json::from_str(&data).unwrap_or(Value::String(data)),
                });
            }
            let chunk = tokio::time::timeout(ARRIVES, self.response.chunk())
                .await
                .expect("an event in time")
                .ok()??;
            self.text.push_str(std::str::from_utf8(&chunk).unwrap());
        }
    }

    pub(crate) async fn expect(&mut self, event: &str) -> SseEvent {
        let got = self.next().await.expect("the stream is open");
        assert_eq!(got.event, event, "{got:?}");
        got
    }
}

pub(crate) fn stream_path(project: &Value, query: &str) -> String {
    format!("/api/v1/projects/{}/stream{query}", id(project))
}

#[tokio::test]
async fn the_stream_pushes_telemetry_shadows_logs_and_connections_and_resumes() {
    let app = spawn_app().await;
    let world = app.world().await;
    let (device, project) = (&world.device, &world.project);
    let app_token = project["applicationAccessToken"].as_str().unwrap();
    let mut stream = Sse::open(&app, &stream_path(project, ""), app_token, None)
        .await
        .unwrap();

    let mut client = DeviceClient::connect(app.mqtt, PREFIX, id(device), device["accessToken"].as_str().unwrap())
        .await
        .unwrap();
    let connected = stream.expect("connection").await;
    assert_eq!(connected.data["deviceId"], id(device));
    assert_eq!(connected.data["connected"], true);
    assert_eq!(connected.data["transport"], "tcp");

    client
        .publish_attrs(&[("temp", json!(21.5))], Some(1_714_492_800), true)
        .await
        .unwrap();
    let telemetry = stream.expect("telemetry").await;
    assert_eq!(telemetry.data["deviceId"], id(device));
    assert_eq!(telemetry.data["attributeCode"], "temp");
    assert_eq!(telemetry.data["attributeData"], 21.5);
    assert_eq!(telemetry.data["deviceTimestamp"], 1_714_492_800_000_i64);
    // What was pushed is committed: it lists.
    let listed = app
        .get(format!("/api/v1/devices/{}/events", id(device)), &app.admin)
        .await
        .result();
    assert_eq!(listed["results"][0]["id"], telemetry.data["id"]);
    // The shadow attribute it changed.
    let shadow = stream.expect("shadow").await;
    assert_eq!(shadow.data["deviceId"], id(device));
    assert_eq!(shadow.data["attributeMap"]["temp"]["value"], 21.5);
    assert_eq!(shadow.data["attributeMap"]["temp"]["timestamp"], 1_714_492_800_000_i64);
    // An older value (by device time) changes no shadow attribute: telemetry alone.
    client
        .publish_attrs(&[("temp", json!(3.0))], Some(1_600_000_000), true)
        .await
        .unwrap();
    assert_eq!(stream.expect("telemetry").await.data["attributeData"], 3.0);

    // A control waiting for its ack, and the ack: event logs.
    client.subscribe_inbox().await.unwrap();
    app.put(
        format!("/api/v1/devices/{}/shadows", id(device)),
        &app.admin,
        json!({"needack": true, "payload": {"attrs": [{"code": "label", "value": "x"}]}}),
    )
    .await
    .result_done();
    let control = stream.expect("eventLog").await;
    assert_eq!(control.data["classification"], "DeviceControll");
    assert_eq!(control.data["status"], "processing");
    let sent = loop {
        let message = client.next_message(ARRIVES).await.unwrap().expect("the control").json();
        if message["meta"]["type"] != "ack" {
            break message;
        }
    };
    client.ack(&sent).await.unwrap();
    let completed = stream.expect("eventLog").await;
    assert_eq!(
        (&completed.data["eventId"], &completed.data["status"]),
        (&control.data["eventId"], &json!("completed"))
    );
    assert_eq!(stream.expect("eventLog").await.data["classification"], "Response");

    client.disconnect().await;
    let disconnected = stream.expect("connection").await;
    assert_eq!(disconnected.data["connected"], false);

    let ids: Vec<u64> = [&connected, &telemetry, &shadow, &disconnected]
        .iter()
        .map(|e| e.id.as_deref().unwrap().parse().unwrap())
        .collect();
    assert!(ids.windows(2).all(|w| w[0] < w[1]), "{ids:?}");
    drop(stream);

    // Resuming after the first: what came after it, in order.
    let first = ids[0].to_string();
    let mut resumed = Sse::open(&app, &stream_path(project, ""), app_token, Some(&first))
        .await
        .unwrap();
    assert_eq!(resumed.expect("telemetry").await.id.unwrap(), ids[1].to_string());
    assert_eq!(resumed.expect("shadow").await.id.unwrap(), ids[2].to_string());
    for kind in ["telemetry", "eventLog", "eventLog", "eventLog"] {
        resumed.expect(kind).await;
    }
    assert_eq!(resumed.expect("connection").await.id.unwrap(), ids[3].to_string());

    // Filtered by type.
    let mut only_telemetry = Sse::open(&app, &stream_path(project, "?types=telemetry"), app_token, Some(&first))
        .await
        .unwrap();
    // A cursor the server no longer (or never) held: reset first.
    let mut stale = Sse::open(&app, &stream_path(project, ""), &app.admin, Some("12"))
        .await
        .unwrap();
    stale.expect("reset").await;

    // Filtered by device: another device's connection, not the first one's replayed events.
    let other = app.create_device(&app.admin, project, &world.model).await;
    let mut of_other = Sse::open(
        &app,
        &stream_path(project, &format!("?deviceId={}", id(&other))),
        &app.admin,
        Some(&first),
    )
    .await
    .unwrap();
    let _other_client = DeviceClient::connect(app.mqtt, PREFIX, id(&other), other["accessToken"].as_str().unwrap())
        .await
        .unwrap();
    let event = of_other.expect("connection").await;
    assert_eq!(event.data["deviceId"], id(&other));
    // The type filter skipped the connections, up to the other device's.
    assert_eq!(only_telemetry.expect("telemetry").await.id.unwrap(), ids[1].to_string());
    // The live events reach every open stream.
    assert_eq!(resumed.expect("connection").await.data["deviceId"], id(&other));
    assert_eq!(stale.expect("connection").await.data["deviceId"], id(&other));
}

#[tokio::test]
async fn the_stream_is_opened_by_the_project_or_the_device_alone_and_ends_with_its_token() {
    let app = spawn_app().await;
    let world = app.world().await;
    let (device, project) = (&world.device, &world.project);
    let device_token = device["accessToken"].as_str().unwrap();
    let sibling = app.create_device(&app.admin, project, &world.model).await;
    let refused = async |query: &str, token: &str, status: u16| -> String {
        let response = Sse::open(&app, &stream_path(project, query), token, None)
            .await
            .err()
            .unwrap_or_else(|| panic!("{query} should be refused"));
        assert_eq!(response.status().as_u16(), status, "{query}");
        let body: Value = response.json().await.unwrap();
        assert_ne!(body["returnCode"], 0);
        body["message"].as_str().unwrap().to_owned()
    };

    // A device: only its own events, with deviceId.
    refused("", device_token, 403).await;
    refused(&format!("?deviceId={}", id(&sibling)), device_token, 403).await;
    let mut own = Sse::open(
        &app,
        &stream_path(project, &format!("?deviceId={}", id(device))),
        device_token,
        None,
    )
    .await
    .unwrap();
    // Other projects and tenants.
    let other_project = app.create_project(&app.admin).await;
    refused("", other_project["applicationAccessToken"].as_str().unwrap(), 403).await;
    let tenant = app
        .post("/api/v1/tenants", &app.admin, json!({"name": unique("other")}))
        .await
        .result();
    refused("", tenant["adminToken"].as_str().unwrap(), 404).await;
    refused("", "not-a-token", 401).await;
    let message = refused("?types=telemetry,alarms", &app.admin, 400).await;
    assert!(message.contains("types"), "{message}");
    let elsewhere = app.create_device(&app.admin, &other_project, &world.model).await;
    let message = refused(&format!("?deviceId={}", id(&elsewhere)), &app.admin, 400).await;
    assert!(message.contains("deviceId"), "{message}");

    // Rotating the application token ends its streams.
    let app_token = project["applicationAccessToken"].as_str().unwrap();
    let mut by_app = Sse::open(&app, &stream_path(project, ""), app_token, None)
        .await
        .unwrap();
    app.post(
        format!("/api/v1/projects/{}/applicationAccessToken/rotate", id(project)),
        &app.admin,
        json!({}),
    )
    .await
    .result();
    assert!(by_app.next().await.is_none(), "the stream ends");

    // Locking the device ends its own stream.
    app.put(
        format!("/api/v1/devices/{}", id(device)),
        &app.admin,
        json!({"status": "Locked"}),
    )
    .await
    .result();
    assert!(own.next().await.is_none(), "the stream ends");

    // A stop of Gantry ends the streams.
    let mut by_admin = Sse::open(&app, &stream_path(project, ""), &app.admin, None)
        .await
        .unwrap();
    app.stop().await;
    assert!(by_admin.next().await.is_none(), "the stream ends");
}

/// Devices publishing at once: every committed event reaches the stream once, each device's in
/// the order it published them, under ids that only increase.
#[tokio::test]
async fn concurrent_devices_stream_every_event_once_in_order() {
    const DEVICES: usize = 4;
    const MESSAGES: usize = 50;
    let app = spawn_app().await;
    let world = app.world().await;
    let project = &world.project;
    let mut stream = Sse::open(&app, &stream_path(project, "?types=telemetry"), &app.admin, None)
        .await
        .unwrap();
    let mut devices = vec![world.device.clone()];
    for _ in 1..DEVICES {
        devices.push(app.create_device(&app.admin, project, &world.model).await);
    }
    let publishers: Vec<_> = devices
        .iter()
        .map(|device| {
            let (mqtt, device_id, token) = (
                app.mqtt,
                id(device).to_owned(),
                device["accessToken"].as_str().unwrap().to_owned(),
            );
            tokio::spawn(async move {
                let mut client = DeviceClient::connect(mqtt, PREFIX, &device_id, &token).await.unwrap();
                for n in 0..MESSAGES {
                    client
                        .publish_attrs(&[("temp", json!(n))], Some(1_714_492_800 + n as i64), true)
                        .await
                        .unwrap();
                }
                client.disconnect().await;
            })
        })
        .collect();
    for publisher in publishers {
        publisher.await.unwrap();
    }
    let mut seen: std::collections::HashMap<String, Vec<i64>> = Default::default();
    let mut last_id = 0_u64;
    for _ in 0..DEVICES * MESSAGES {
        let event = stream.expect("telemetry").await;
        let cursor: u64 = event.id.unwrap().parse().unwrap();
        assert!(cursor > last_id, "ids increase: {cursor} after {last_id}");
        last_id = cursor;
        seen.entry(event.data["deviceId"].as_str().unwrap().to_owned())
            .or_default()
            .push(event.data["attributeData"].as_i64().unwrap());
    }
    assert_eq!(seen.len(), DEVICES);
    for (device, values) in seen {
        assert_eq!(values, (0..MESSAGES as i64).collect::<Vec<_>>(), "{device}");
    }
}

/// A control whose ack never comes is pushed again when it ends in `exception`.
#[tokio::test]
async fn a_control_that_times_out_is_pushed_as_exception() {
    let app = spawn_app_with(|c| c.ack_timeout = 1).await;
    let world = app.world().await;
    let (device, project) = (&world.device, &world.project);
    let mut stream = Sse::open(&app, &stream_path(project, "?types=eventLog"), &app.admin, None)
        .await
        .unwrap();
    app.put(
        format!("/api/v1/devices/{}/shadows", id(device)),
        &app.admin,
        json!({"needack": true, "payload": {"attrs": [{"code": "label", "value": "x"}]}}),
    )
    .await
    .result_done();
    let sent = stream.expect("eventLog").await;
    assert_eq!(sent.data["status"], "processing");
    let ended = stream.expect("eventLog").await;
    assert_eq!(
        (&ended.data["eventId"], &ended.data["status"]),
        (&sent.data["eventId"], &json!("exception"))
    );
}

/// An idle stream gets a heartbeat comment within the 15 s the API promises.
#[tokio::test]
async fn an_idle_stream_gets_heartbeats() {
    let app = spawn_app().await;
    let world = app.world().await;
    let mut stream = Sse::open(&app, &stream_path(&world.project, ""), &app.admin, None)
        .await
        .unwrap();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(17);
    loop {
        let chunk = tokio::time::timeout_at(deadline, stream.response.chunk())
            .await
            .expect("a heartbeat within 15 s")
            .unwrap()
            .expect("the stream stays open");
        stream.text.push_str(std::str::from_utf8(&chunk).unwrap());
        if stream
            .text
            .lines()
            .any(|line| line.starts_with(':') && line.contains("heartbeat"))
        {
            break;
        }
    }
    assert!(
        stream.text.lines().all(|line| line.is_empty() || line.starts_with(':')),
        "only comments: {}",
        stream.text
    );
}

/// A stream client that stops reading is disconnected once the server's writes have waited
/// `--http-write-timeout` for it: it holds neither its connection nor what was queued for it
/// (it reconnects with `Last-Event-ID`). The server goes on answering others meanwhile.
#[tokio::test]
async fn a_stream_client_that_stops_reading_is_closed() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let app = spawn_app_with(|c| c.http_write_timeout = 1).await;
    let world = app.world().await;
    let project = &world.project;
    let token = project["applicationAccessToken"].as_str().unwrap();
    let addr: std::net::SocketAddr = app.base.trim_start_matches("http://").parse().unwrap();
    // A small receive buffer, so the server's writes wait for this reader soon.
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.set_recv_buffer_size(4096).unwrap();
    let mut stalled = socket.connect(addr).await.unwrap();
    stalled
        .write_all(
            format!(
                "GET {} HTTP/1.1\r\nHost: gantry\r\nAuthorization: Bearer {token}\r\n\r\n",
                stream_path(project, "?types=telemetry")
            )
            .as_bytes(),
        )
        .await
        .unwrap();
    // Large events until far more is queued for the reader than the socket buffers hold.
    let label = "x".repeat(4096);
    let now = chrono_now_ms();
    for i in 0..2000 {
        let event = crate::events::event(&world.device, "label", json!(label), "String", now + i);
        app.post("/api/v1/deviceEvents", token, event).await.result();
    }
    // The server gave up on it: reading what was sent ends in the connection's end.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let drained = tokio::time::timeout(Duration::from_secs(20), async {
        let mut buf = vec![0u8; 1 << 16];
        let mut total = 0usize;
        loop {
            match stalled.read(&mut buf).await {
                Ok(0) | Err(_) => return total,
                Ok(n) => total += n,
            }
        }
    })
    .await;
    let total = drained.expect("the server closed the stalled stream");
    assert!(
        total < 40 * 50 * 4096,
        "it was closed before everything was sent ({total} bytes read)"
    );
    // A fresh stream opens as usual.
    let mut fresh = Sse::open(&app, &stream_path(project, "?types=telemetry"), token, None)
        .await
        .unwrap();
    let event = crate::events::event(&world.device, "temp", json!(1.5), "Float", now + 5000);
    app.post("/api/v1/deviceEvents", token, event).await.result();
    assert_eq!(fresh.expect("telemetry").await.data["attributeCode"], "temp");
}

/// Streams are bounded per project and per token: past the bound the answer is 429 with its own
/// `returnCode` (42902) naming the limit, and a stream that ends gives its place back.
#[tokio::test]
async fn streams_are_bounded_per_token_and_per_project() {
    let app = spawn_app_with(|c| {
        c.stream_subscribers_per_token = 2;
        c.stream_subscribers_per_project = 3;
    })
    .await;
    let world = app.world().await;
    let project = &world.project;
    let token = project["applicationAccessToken"].as_str().unwrap();
    let path = stream_path(project, "");
    let first = Sse::open(&app, &path, token, None).await.unwrap();
    let _second = Sse::open(&app, &path, token, None).await.unwrap();
    let refused = Sse::open(&app, &path, token, None)
        .await
        .err()
        .expect("a third stream of one token");
    assert_eq!(refused.status(), 429);
    let body: Value = refused.json().await.unwrap();
    assert_eq!(body["returnCode"], 42902, "{body}");
    assert!(
        body["message"]
            .as_str()
            .unwrap()
            .contains("stream-subscribers-per-token"),
        "{body}"
    );
    // The administrator's token is another holder; the project's bound still counts all.
    let _third = Sse::open(&app, &path, &app.admin, None).await.unwrap();
    let refused = Sse::open(&app, &path, &app.admin, None)
        .await
        .err()
        .expect("a fourth on the project");
    let body: Value = refused.json().await.unwrap();
    assert!(
        body["message"]
            .as_str()
            .unwrap()
            .contains("stream-subscribers-per-project"),
        "{body}"
    );
    // Another project's streams are not counted against this one's.
    let other = app.create_project(&app.admin).await;
    let _elsewhere = Sse::open(&app, &stream_path(&other, ""), &app.admin, None)
        .await
        .unwrap();
    drop(first);
    let reopened = crate::helpers::wait_for(Duration::from_secs(5), async || {
        Sse::open(&app, &path, token, None).await.is_ok()
    })
    .await;
    assert!(reopened, "a closed stream gives its place back");
}

fn chrono_now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
}

/// `/metrics` says what the feeds hold: a followed project has a feed, and its buffer holds the
/// events sent on it.
#[tokio::test]
async fn metrics_show_what_the_feeds_hold() {
    let app = spawn_app().await;
    let world = app.world().await;
    let project = &world.project;
    let token = project["applicationAccessToken"].as_str().unwrap();
    assert_eq!(app.metric("gantry_stream_feeds").await, 0);
    let mut stream = Sse::open(&app, &stream_path(project, "?types=telemetry"), token, None)
        .await
        .unwrap();
    let event = crate::events::event(&world.device, "temp", json!(2.5), "Float", chrono_now_ms());
    app.post("/api/v1/deviceEvents", token, event).await.result();
    stream.expect("telemetry").await;
    assert_eq!(app.metric("gantry_stream_feeds").await, 1);
    assert!(app.metric("gantry_stream_replay_bytes").await > 0);
}
