//! Routes: temporary MQTT identities for WEB and APP callers, and device-to-device grants.

use std::time::Duration;

use gantry::device::DeviceClient;
use serde_json::{Value, json};

use crate::helpers::{TestApp, World, spawn_app, spawn_app_with};

const PREFIX: &str = "gantry";

async fn route(app: &TestApp, world: &World, body: Value) -> crate::helpers::Reply {
    app.post(
        format!("/api/v1/devices/{}/routes", world.device["id"].as_str().unwrap()),
        &app.admin,
        body,
    )
    .await
}

async fn target_of(app: &TestApp, world: &World) -> DeviceClient {
    let mut device = DeviceClient::connect(
        app.mqtt,
        PREFIX,
        world.device["id"].as_str().unwrap(),
        world.device["accessToken"].as_str().unwrap(),
    )
    .await
    .unwrap();
    device.subscribe_inbox().await.unwrap();
    device
}

async fn identity_of(app: &TestApp, route: &Value) -> anyhow::Result<DeviceClient> {
    let role = &route["temporaryRole"];
    DeviceClient::connect_as(
        app.mqtt,
        PREFIX,
        role["clientId"].as_str().unwrap(),
        role["username"].as_str().unwrap(),
        role["password"].as_str().unwrap(),
    )
    .await
}

#[tokio::test]
async fn web_and_app_routes_carry_a_temporary_identity() {
    let app = spawn_app().await;
    let world = app.world().await;
    let did = world.device["id"].as_str().unwrap();
    let before = chrono::Utc::now().timestamp_millis();
    let web = route(&app, &world, json!({"sourceType": "WEB", "needResp": true}))
        .await
        .result();
    assert!(web["id"].as_str().unwrap().starts_with("routePolicy:"));
    uuid::Uuid::parse_str(web["id"].as_str().unwrap().trim_start_matches("routePolicy:")).unwrap();
    assert_eq!(web["protocol"], "MQTT");
    let role = &web["temporaryRole"];
    assert_eq!(
        (role["host"].clone(), role["port"].clone(), role["sslEnable"].clone()),
        (json!("127.0.0.1"), json!(app.mqtt_ws.port()), json!(false))
    );
    assert!(role["password"].as_str().unwrap().len() >= 32);
    let client = role["clientId"].as_str().unwrap();
    assert_eq!(
        web["route"],
        json!({"forwardTopic": format!("{PREFIX}/out/json/{did}"), "ackTopic": format!("{PREFIX}/out/json/{client}")})
    );
    let expires = web["expiredTime"].as_i64().unwrap();
    assert!(
        (before + 3_590_000..=before + 3_610_000).contains(&expires),
        "the default TTL is an hour"
    );

    let app_route = route(&app, &world, json!({"sourceType": "APP"})).await.result();
    assert_eq!(
        app_route["temporaryRole"]["port"],
        app.mqtt.port(),
        "APP callers use MQTT over TCP"
    );
    assert_ne!(app_route["temporaryRole"]["clientId"], role["clientId"]);
}

#[tokio::test]
async fn a_route_identity_talks_to_its_device_only() {
    let app = spawn_app().await;
    let world = app.world().await;
    let other = app.world().await;
    let web = route(&app, &world, json!({"sourceType": "APP", "needResp": true}))
        .await
        .result();
    let mut target = target_of(&app, &world).await;
    let mut caller = identity_of(&app, &web).await.expect("the temporary identity logs in");
    assert!(
        caller
            .subscribe(web["route"]["ackTopic"].as_str().unwrap())
            .await
            .unwrap(),
        "its ack topic"
    );
    assert!(!caller.subscribe("#").await.unwrap());
    assert!(
        !caller
            .subscribe(web["route"]["forwardTopic"].as_str().unwrap())
            .await
            .unwrap(),
        "not the device's inbox"
    );

    let message = json!({"meta": {"id": "cmd-1", "type": "m", "needack": true}, "payload": {"attrs": [{"code": "label", "value": "hello"}]}});
    caller
        .publish_raw(
            web["route"]["forwardTopic"].as_str().unwrap(),
            serde_json::to_vec(&message).unwrap(),
        )
        .await
        .unwrap();
    let got = target
        .next_message(Duration::from_secs(5))
        .await
        .unwrap()
        .expect("delivered to the device")
        .json();
    assert_eq!(got, message);
    let logs = app
        .get(
            format!(
                "/api/v1/projects/{}/eventLogs?eventId=cmd-1",
                world.project["id"].as_str().unwrap()
            ),
            &app.admin,
        )
        .await
        .result();
    assert_eq!(
        (
            logs["results"][0]["status"].clone(),
            logs["results"][0]["classification"].clone()
        ),
        (json!("processing"), json!("DeviceControll"))
    );

    target.ack(&got).await.unwrap();
    let ack = caller
        .next_message(Duration::from_secs(5))
        .await
        .unwrap()
        .expect("the ack is forwarded to the ack topic");
    assert_eq!(ack.topic, web["route"]["ackTopic"].as_str().unwrap());
    assert_eq!(ack.json()["meta"]["correlationId"], "cmd-1");
    let logs = app
        .get(
            format!(
                "/api/v1/projects/{}/eventLogs?eventId=cmd-1",
                world.project["id"].as_str().unwrap()
            ),
            &app.admin,
        )
        .await
        .result();
    assert_eq!(logs["results"][0]["status"], "completed");

    // anywhere else is refused
    let mut victim = target_of(&app, &other).await;
    let _ = caller
        .publish_raw(
            &format!("{PREFIX}/out/json/{}", other.device["id"].as_str().unwrap()),
            serde_json::to_vec(&message).unwrap(),
        )
        .await;
    let _ = caller
        .publish_raw(
            &format!("{PREFIX}/in/json/{}", world.device["id"].as_str().unwrap()),
            serde_json::to_vec(&message).unwrap(),
        )
        .await;
    assert!(victim.next_message(Duration::from_millis(500)).await.unwrap().is_none());
    assert_eq!(
        app.get(
            format!("/api/v1/devices/{}/events", world.device["id"].as_str().unwrap()),
            &app.admin
        )
        .await
        .result()["totalResults"],
        0
    );
    // a wrong password is refused
    let role = &web["temporaryRole"];
    assert!(
        DeviceClient::connect_as(
            app.mqtt,
            PREFIX,
            role["clientId"].as_str().unwrap(),
            role["username"].as_str().unwrap(),
            "guess"
        )
        .await
        .is_err()
    );
}

#[tokio::test]
async fn routes_expire_and_refresh() {
    let app = spawn_app_with(|c| c.route_ttl = 2).await;
    let world = app.world().await;
    let live = route(&app, &world, json!({"sourceType": "APP"})).await.result();
    let refreshed = app
        .post(
            format!("/api/v1/routes/{}/refresh", live["id"].as_str().unwrap()),
            &app.admin,
            json!({}),
        )
        .await
        .result();
    assert_eq!(
        refreshed["expiredTime"].as_i64().unwrap(),
        live["expiredTime"].as_i64().unwrap() + 2_000
    );
    assert!(
        refreshed["temporaryRole"].get("password").is_none(),
        "the password is shown only once"
    );
    assert!(refreshed["updatedTime"].is_i64());

    let short = route(&app, &world, json!({"sourceType": "APP"})).await.result();
    identity_of(&app, &short)
        .await
        .expect("valid before expiry")
        .disconnect()
        .await;
    tokio::time::sleep(Duration::from_millis(2_200)).await;
    assert!(
        identity_of(&app, &short).await.is_err(),
        "an expired identity cannot connect"
    );
    app.post(
        format!("/api/v1/routes/{}/refresh", short["id"].as_str().unwrap()),
        &app.admin,
        json!({}),
    )
    .await
    .error(409);
    identity_of(&app, &live).await.expect("the refreshed route still works");
    app.post("/api/v1/routes/routePolicy:nope/refresh", &app.admin, json!({}))
        .await
        .error(404);
}

#[tokio::test]
async fn device_routes_need_the_source_key() {
    let app = spawn_app().await;
    let world = app.world().await;
    let source = app.create_device(&app.admin, &world.project, &world.model).await;
    let sid = source["id"].as_str().unwrap();
    route(&app, &world, json!({"sourceType": "DEVICE"})).await.error(400);
    route(&app, &world, json!({"sourceType": "DEVICE", "sourceDeviceId": sid}))
        .await
        .error(400);
    route(
        &app,
        &world,
        json!({"sourceType": "DEVICE", "sourceDeviceId": sid, "sourceDeviceKey": "wrong"}),
    )
    .await
    .error(403);
    route(
        &app,
        &world,
        json!({"sourceType": "DEVICE", "sourceDeviceId": uuid::Uuid::new_v4(), "sourceDeviceKey": "x"}),
    )
    .await
    .error(404);

    let mut source_client = DeviceClient::connect(app.mqtt, PREFIX, sid, source["accessToken"].as_str().unwrap())
        .await
        .unwrap();
    source_client.subscribe_inbox().await.unwrap();
    let mut target = target_of(&app, &world).await;
    let message = json!({"meta": {"id": "d2d-1", "type": "m", "needack": true}, "payload": {"attrs": [{"code": "label", "value": "hi"}]}});
    // before the route: refused
    let _ = source_client
        .publish_raw(
            &format!("{PREFIX}/out/json/{}", world.device["id"].as_str().unwrap()),
            serde_json::to_vec(&message).unwrap(),
        )
        .await;
    assert!(target.next_message(Duration::from_millis(500)).await.unwrap().is_none());

    let granted = route(&app, &world, json!({"sourceType": "DEVICE", "sourceDeviceId": sid, "sourceDeviceKey": source["accessToken"], "needResp": true})).await.result();
    assert!(granted.get("temporaryRole").is_none());
    assert_eq!(granted["route"]["ackTopic"], format!("{PREFIX}/out/json/{sid}"));
    source_client
        .publish_raw(
            granted["route"]["forwardTopic"].as_str().unwrap(),
            serde_json::to_vec(&message).unwrap(),
        )
        .await
        .unwrap();
    let got = target
        .next_message(Duration::from_secs(5))
        .await
        .unwrap()
        .expect("delivered along the route")
        .json();
    assert_eq!(got["meta"]["id"], "d2d-1");
    target.ack(&got).await.unwrap();
    let ack = source_client
        .next_message(Duration::from_secs(5))
        .await
        .unwrap()
        .expect("the ack comes back to the source's inbox");
    assert_eq!(ack.json()["meta"]["correlationId"], "d2d-1");
}

#[tokio::test]
async fn route_rules() {
    let app = spawn_app().await;
    let world = app.world().await;
    route(&app, &world, json!({})).await.error(400);
    route(&app, &world, json!({"sourceType": "FAX"})).await.error(400);
    let did = world.device["id"].as_str().unwrap();
    let device_token = world.device["accessToken"].as_str().unwrap();
    app.post(
        format!("/api/v1/devices/{did}/routes"),
        device_token,
        json!({"sourceType": "APP"}),
    )
    .await
    .error(403);
    let app_token = world.project["applicationAccessToken"].as_str().unwrap();
    app.post(
        format!("/api/v1/devices/{did}/routes"),
        app_token,
        json!({"sourceType": "APP"}),
    )
    .await
    .result();
    let other = app.world().await;
    let other_token = other.project["applicationAccessToken"].as_str().unwrap();
    app.post(
        format!("/api/v1/devices/{did}/routes"),
        other_token,
        json!({"sourceType": "APP"}),
    )
    .await
    .error(403);
    app.post(
        format!("/api/v1/devices/{}/routes", uuid::Uuid::new_v4()),
        &app.admin,
        json!({"sourceType": "APP"}),
    )
    .await
    .error(404);
    app.put(
        format!("/api/v1/devices/{did}"),
        &app.admin,
        json!({"status": "Locked"}),
    )
    .await
    .result();
    route(&app, &world, json!({"sourceType": "APP"})).await.error(409);
}

#[tokio::test]
async fn a_web_route_works_over_websocket() {
    let app = spawn_app().await;
    let world = app.world().await;
    let web = route(&app, &world, json!({"sourceType": "WEB", "needResp": true}))
        .await
        .result();
    let role = &web["temporaryRole"];
    assert_eq!(role["port"], app.mqtt_ws.port());
    let mut target = target_of(&app, &world).await;
    let mut page = DeviceClient::connect_ws(
        app.mqtt_ws,
        PREFIX,
        role["clientId"].as_str().unwrap(),
        role["username"].as_str().unwrap(),
        role["password"].as_str().unwrap(),
    )
    .await
    .expect("the web identity logs in over WebSocket");
    assert!(
        page.subscribe(web["route"]["ackTopic"].as_str().unwrap())
            .await
            .unwrap()
    );
    let message = json!({"meta": {"id": "ws-1", "type": "m", "needack": true}, "payload": {"attrs": [{"code": "label", "value": "from the browser"}]}});
    page.publish_raw(
        web["route"]["forwardTopic"].as_str().unwrap(),
        serde_json::to_vec(&message).unwrap(),
    )
    .await
    .unwrap();
    let got = target
        .next_message(Duration::from_secs(5))
        .await
        .unwrap()
        .expect("delivered")
        .json();
    target.ack(&got).await.unwrap();
    assert_eq!(
        page.next_message(Duration::from_secs(5))
            .await
            .unwrap()
            .expect("ack over WebSocket")
            .json()["meta"]["correlationId"],
        "ws-1"
    );
}

fn route_path(route: &Value) -> String {
    format!("/api/v1/routes/{}", route["id"].as_str().unwrap())
}

#[tokio::test]
async fn live_routes_are_listed_newest_first() {
    let app = spawn_app_with(|c| c.route_ttl = 1).await;
    let world = app.world().await;
    let list = format!("/api/v1/devices/{}/routes", world.device["id"].as_str().unwrap());
    let expired = route(&app, &world, json!({"sourceType": "APP"})).await.result();
    tokio::time::sleep(Duration::from_millis(1_100)).await;
    let source = app.create_device(&app.admin, &world.project, &world.model).await;
    let mut made = Vec::new();
    for body in [
        json!({"sourceType": "APP"}),
        json!({"sourceType": "WEB", "needResp": true}),
        json!({"sourceType": "DEVICE", "sourceDeviceId": source["id"], "sourceDeviceKey": source["accessToken"]}),
        json!({"sourceType": "APP"}),
    ] {
        made.push(route(&app, &world, body).await.result());
        // distinct creation times: routes made within one millisecond are ordered by id
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    app.delete(route_path(&made[3]), &app.admin).await.result_done();

    let page = app.get(&list, &app.admin).await.result();
    let ids: Vec<&Value> = page["results"].as_array().unwrap().iter().map(|r| &r["id"]).collect();
    assert_eq!(ids, vec![&made[2]["id"], &made[1]["id"], &made[0]["id"]], "{page}");
    assert!(!ids.contains(&&expired["id"]), "expired routes are not listed");
    assert_eq!(
        (page["totalResults"].clone(), page["numResults"].clone()),
        (json!(3), json!(3))
    );
    let web = &page["results"][1];
    assert_eq!(web["temporaryRole"]["clientId"], made[1]["temporaryRole"]["clientId"]);
    assert_eq!(web["route"], made[1]["route"]);
    assert!(
        page["results"]
            .as_array()
            .unwrap()
            .iter()
            .all(|r| r["temporaryRole"].get("password").is_none()),
        "passwords are never listed: {page}"
    );
    let second = app
        .get(format!("{list}?pageSize=2&pageNo=2"), &app.admin)
        .await
        .result();
    assert_eq!(
        (
            second["results"][0]["id"].clone(),
            second["pageNo"].clone(),
            second["totalResults"].clone()
        ),
        (made[0]["id"].clone(), json!(2), json!(3))
    );
    let message = app.get(format!("{list}?pageSize=0"), &app.admin).await.error(400);
    assert!(message.contains("pageSize"), "{message}");
    let message = app.get(format!("{list}?pageNo=0"), &app.admin).await.error(400);
    assert!(message.contains("pageNo"), "{message}");

    // who may list: administrators and the project's application; others as for other device management
    let app_token = world.project["applicationAccessToken"].as_str().unwrap();
    assert_eq!(app.get(&list, app_token).await.result()["totalResults"], 3);
    app.get(&list, world.device["accessToken"].as_str().unwrap())
        .await
        .error(403);
    let other = app.world().await;
    app.get(&list, other.project["applicationAccessToken"].as_str().unwrap())
        .await
        .error(403);
    let tenant = app
        .post(
            "/api/v1/tenants",
            &app.admin,
            json!({"name": crate::helpers::unique("acme")}),
        )
        .await
        .result();
    app.get(&list, tenant["adminToken"].as_str().unwrap()).await.error(404);
    app.get(format!("/api/v1/devices/{}/routes", uuid::Uuid::new_v4()), &app.admin)
        .await
        .error(404);
}

#[tokio::test]
async fn a_revoked_route_disconnects_its_identity() {
    let app = spawn_app().await;
    let world = app.world().await;
    let live = route(&app, &world, json!({"sourceType": "APP"})).await.result();
    let mut caller = identity_of(&app, &live).await.expect("the identity logs in");

    // only who manages the device may revoke
    app.delete(route_path(&live), world.device["accessToken"].as_str().unwrap())
        .await
        .error(403);
    let other = app.world().await;
    app.delete(
        route_path(&live),
        other.project["applicationAccessToken"].as_str().unwrap(),
    )
    .await
    .error(403);
    let tenant = app
        .post(
            "/api/v1/tenants",
            &app.admin,
            json!({"name": crate::helpers::unique("acme")}),
        )
        .await
        .result();
    app.delete(route_path(&live), tenant["adminToken"].as_str().unwrap())
        .await
        .error(404);
    assert!(!caller.closed_within(Duration::from_millis(300)).await);

    app.delete(
        route_path(&live),
        world.project["applicationAccessToken"].as_str().unwrap(),
    )
    .await
    .result_done();
    assert!(
        caller.closed_within(Duration::from_secs(2)).await,
        "the identity is disconnected at once"
    );
    assert!(identity_of(&app, &live).await.is_err(), "and can no longer connect");
    app.post(format!("{}/refresh", route_path(&live)), &app.admin, json!({}))
        .await
        .error(404);
    app.delete(route_path(&live), &app.admin).await.error(404);
    app.delete("/api/v1/routes/routePolicy:nope", &app.admin)
        .await
        .error(404);

    // a revoked DEVICE route no longer carries its source's messages
    let source = app.create_device(&app.admin, &world.project, &world.model).await;
    let sid = source["id"].as_str().unwrap();
    let granted = route(
        &app,
        &world,
        json!({"sourceType": "DEVICE", "sourceDeviceId": sid, "sourceDeviceKey": source["accessToken"]}),
    )
    .await
    .result();
    let mut source_client = DeviceClient::connect(app.mqtt, PREFIX, sid, source["accessToken"].as_str().unwrap())
        .await
        .unwrap();
    let mut target = target_of(&app, &world).await;
    let forward = granted["route"]["forwardTopic"].as_str().unwrap();
    let message =
        |id: &str| serde_json::to_vec(&json!({"meta": {"id": id, "type": "m"}, "payload": {"attrs": []}})).unwrap();
    source_client.publish_raw(forward, message("before")).await.unwrap();
    let got = target
        .next_message(Duration::from_secs(5))
        .await
        .unwrap()
        .expect("delivered");
    assert_eq!(got.json()["meta"]["id"], "before");
    app.delete(route_path(&granted), &app.admin).await.result_done();
    let _ = source_client.publish_raw(forward, message("after")).await;
    assert!(
        target.next_message(Duration::from_millis(500)).await.unwrap().is_none(),
        "not delivered once revoked"
    );
}

#[tokio::test]
async fn an_identity_is_disconnected_when_its_route_expires() {
    let app = spawn_app_with(|c| c.route_ttl = 2).await;
    let world = app.world().await;
    let short = route(&app, &world, json!({"sourceType": "APP"})).await.result();
    let long = route(&app, &world, json!({"sourceType": "WEB"})).await.result();
    let mut short_caller = identity_of(&app, &short).await.unwrap();
    let mut long_caller = identity_of(&app, &long).await.unwrap();
    app.post(format!("{}/refresh", route_path(&long)), &app.admin, json!({}))
        .await
        .result();
    let expires = short["expiredTime"].as_i64().unwrap();

    assert!(short_caller.closed_within(Duration::from_secs(4)).await);
    let closed_at = chrono::Utc::now().timestamp_millis();
    assert!(
        (expires..expires + 1_000).contains(&closed_at),
        "closed within a second of its expiry ({expires}), at {closed_at}"
    );
    assert!(
        !long_caller.closed_within(Duration::from_millis(1_000)).await,
        "a refreshed route's identity stays until its new expiry"
    );
    assert!(long_caller.closed_within(Duration::from_secs(3)).await);
}

#[tokio::test]
async fn locking_or_deleting_the_target_ends_its_route_identities() {
    let app = spawn_app().await;
    let world = app.world().await;
    let did = world.device["id"].as_str().unwrap();
    let live = route(&app, &world, json!({"sourceType": "APP"})).await.result();
    let mut caller = identity_of(&app, &live).await.unwrap();

    app.put(
        format!("/api/v1/devices/{did}"),
        &app.admin,
        json!({"status": "Locked"}),
    )
    .await
    .result();
    assert!(
        caller.closed_within(Duration::from_secs(2)).await,
        "disconnected when Locked"
    );
    assert!(identity_of(&app, &live).await.is_err(), "no login while Locked");
    app.post(format!("{}/refresh", route_path(&live)), &app.admin, json!({}))
        .await
        .error(409);

    app.put(
        format!("/api/v1/devices/{did}"),
        &app.admin,
        json!({"status": "Active"}),
    )
    .await
    .result();
    let mut caller = identity_of(&app, &live).await.expect("back once Active");
    app.delete(format!("/api/v1/devices/{did}"), &app.admin)
        .await
        .result_done();
    assert!(
        caller.closed_within(Duration::from_secs(2)).await,
        "disconnected when deleted"
    );
    assert!(identity_of(&app, &live).await.is_err(), "no login once deleted");
    app.post(format!("{}/refresh", route_path(&live)), &app.admin, json!({}))
        .await
        .error(404);
}
