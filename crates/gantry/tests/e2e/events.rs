//! Device events and shadows over HTTP.

use serde_json::{Value, json};

use crate::helpers::{TestApp, World, spawn_app};

/// Epoch milliseconds of 2024-05-01T00:00:00.000+0800.
const BASE_MS: i64 = 1_714_492_800_000;

/// Formats epoch milliseconds as yyyy-MM-dd'T'HH:mm:ss.SSS+0800.
pub fn at_plus8(ms: i64) -> String {
    let t = chrono::DateTime::from_timestamp_millis(ms)
        .unwrap()
        .with_timezone(&chrono::FixedOffset::east_opt(8 * 3600).unwrap());
    t.format("%Y-%m-%dT%H:%M:%S%.3f%z").to_string()
}

pub fn event(device: &Value, code: &str, value: Value, data_type: &str, device_ms: i64) -> Value {
    json!({"deviceId": device["id"], "attributeName": code, "attributeCode": code, "attributeData": value,
           "attributeDataType": data_type, "deviceTime": at_plus8(device_ms), "source": "source_rest",
           "context": {"site": "north"}})
}

async fn events_of(app: &TestApp, world: &World, query: &str) -> Value {
    app.get(
        &format!("/api/v1/devices/{}/events{query}", world.device["id"].as_str().unwrap()),
        &app.admin,
    )
    .await
    .result()
}

#[tokio::test]
async fn create_read_delete() {
    let app = spawn_app().await;
    let world = app.world().await;
    let message = app
        .post(
            "/api/v1/deviceEvents",
            &app.admin,
            event(&world.device, "temp", json!(21.5), "Float", BASE_MS + 123),
        )
        .await
        .result();
    let id = message["meta"]["id"].as_str().unwrap().to_owned();
    assert_eq!(message["meta"]["ts"], BASE_MS / 1000);
    assert_eq!(message["meta"]["type"], "m");
    assert_eq!(message["meta"]["deviceid"], world.device["id"]);
    assert_eq!(
        message["payload"]["attrs"],
        json!([{"code": "temp", "value": 21.5, "channel": "m"}])
    );
    assert_eq!(
        app.get(&format!("/api/v1/deviceEvents/{id}"), &app.admin)
            .await
            .result(),
        message
    );

    let listed = events_of(&app, &world, "").await;
    let row = &listed["results"][0];
    assert_eq!(row["id"], id.as_str());
    for (field, want) in [
        ("tenantId", world.device["tenantId"].clone()),
        ("projectId", world.project["id"].clone()),
        ("modelId", world.model["id"].clone()),
        ("deviceId", world.device["id"].clone()),
        ("attributeCode", json!("temp")),
        ("attributeType", json!("Float")),
        ("attributeData", json!(21.5)),
        ("channel", json!("m")),
        ("deviceTimestamp", json!(BASE_MS + 123)),
        ("context", json!({"site": "north"})),
        ("createdBy", json!("system")),
        ("deleted", json!(false)),
    ] {
        assert_eq!(row[field], want, "{field}");
    }
    assert!(row["ingressTimeStamp"].as_i64().unwrap() > BASE_MS + 1_000_000);

    assert_eq!(
        app.delete(&format!("/api/v1/deviceEvents/{id}"), &app.admin).await.body,
        json!({"returnCode": 0})
    );
    app.get(&format!("/api/v1/deviceEvents/{id}"), &app.admin)
        .await
        .error(404);
    app.delete(&format!("/api/v1/deviceEvents/{id}"), &app.admin)
        .await
        .error(404);
    assert_eq!(events_of(&app, &world, "").await["totalResults"], 0);
}

#[tokio::test]
async fn listing_windows_paging_and_order() {
    let app = spawn_app().await;
    let world = app.world().await;
    for i in 0..30 {
        app.post(
            "/api/v1/deviceEvents",
            &app.admin,
            event(&world.device, "count", json!(i), "Integer", BASE_MS + i * 60_000),
        )
        .await
        .result();
    }
    // three events at the same device time: paging must still be stable
    for i in 0..3 {
        app.post(
            "/api/v1/deviceEvents",
            &app.admin,
            event(&world.device, "count", json!(100 + i), "Integer", BASE_MS),
        )
        .await
        .result();
    }
    let all = events_of(&app, &world, "").await;
    assert_eq!(
        (
            all["totalResults"].as_i64(),
            all["pageSize"].as_i64(),
            all["numResults"].as_i64()
        ),
        (Some(33), Some(100), Some(33))
    );
    let times: Vec<i64> = all["results"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["deviceTimestamp"].as_i64().unwrap())
        .collect();
    assert!(times.windows(2).all(|w| w[0] >= w[1]), "newest first: {times:?}");

    let mut paged_ids = Vec::new();
    for page in 1..=5 {
        let res = events_of(&app, &world, &format!("?pageSize=7&pageNo={page}")).await;
        assert_eq!(res["totalResults"], 33);
        paged_ids.extend(res["results"].as_array().unwrap().iter().map(|r| r["id"].clone()));
    }
    let all_ids: Vec<Value> = all["results"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["id"].clone())
        .collect();
    assert_eq!(paged_ids, all_ids, "pages neither overlap nor skip");

    let start = at_plus8(BASE_MS + 10 * 60_000).replace('+', "%2B");
    let end = at_plus8(BASE_MS + 19 * 60_000).replace('+', "%2B");
    let window = events_of(&app, &world, &format!("?startDate={start}&endDate={end}")).await;
    assert_eq!(window["totalResults"], 10, "both ends are inclusive");
    let mut values: Vec<i64> = window["results"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["attributeData"].as_i64().unwrap())
        .collect();
    values.sort();
    assert_eq!(values, (10..20).collect::<Vec<_>>());
    let utc_start = "2024-04-30T16:10:00.000%2B0000";
    assert_eq!(
        events_of(&app, &world, &format!("?startDate={utc_start}&endDate={end}")).await["totalResults"],
        10
    );
    assert_eq!(
        events_of(&app, &world, &format!("?startDate={start}")).await["totalResults"],
        20
    );
    assert_eq!(
        events_of(&app, &world, &format!("?endDate={end}")).await["totalResults"],
        23
    );
    let by_ingress = events_of(
        &app,
        &world,
        &format!("?startDate={start}&endDate={end}&filterBy=ingressTimeStamp"),
    )
    .await;
    assert_eq!(by_ingress["totalResults"], 0, "every event arrived now, none in 2024");
    let recent = at_plus8(chrono::Utc::now().timestamp_millis() - 600_000).replace('+', "%2B");
    assert_eq!(
        events_of(&app, &world, &format!("?startDate={recent}&filterBy=ingressTimeStamp")).await["totalResults"],
        33
    );
}

#[tokio::test]
async fn attribute_listing() {
    let app = spawn_app().await;
    let world = app.world().await;
    for i in 0..5 {
        app.post(
            "/api/v1/deviceEvents",
            &app.admin,
            event(&world.device, "temp", json!(20.0 + i as f64), "Float", BASE_MS + i),
        )
        .await
        .result();
    }
    for i in 0..3 {
        app.post(
            "/api/v1/deviceEvents",
            &app.admin,
            event(&world.device, "label", json!(format!("l{i}")), "String", BASE_MS + i),
        )
        .await
        .result();
    }
    let did = world.device["id"].as_str().unwrap();
    let labels = app
        .get(
            &format!("/api/v1/devices/{did}/attributeCode?attributeCode=label"),
            &app.admin,
        )
        .await
        .result();
    assert_eq!(
        (labels["pageSize"].as_i64(), labels["totalResults"].as_i64()),
        (Some(20), Some(3))
    );
    let values: Vec<&str> = labels["results"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["attributeData"].as_str().unwrap())
        .collect();
    assert_eq!(values, vec!["l2", "l1", "l0"]);
    let end = at_plus8(BASE_MS + 1).replace('+', "%2B");
    let early = app
        .get(
            &format!("/api/v1/devices/{did}/attributeCode?attributeCode=temp&endDate={end}"),
            &app.admin,
        )
        .await
        .result();
    assert_eq!(early["totalResults"], 2);
    assert!(
        app.get(&format!("/api/v1/devices/{did}/attributeCode"), &app.admin)
            .await
            .error(400)
            .contains("attributeCode")
    );
}

#[tokio::test]
async fn bad_listing_parameters_are_400() {
    let app = spawn_app().await;
    let world = app.world().await;
    let did = world.device["id"].as_str().unwrap();
    for (query, field) in [
        ("?startDate=yesterday", "startDate"),
        ("?startDate=2024-05-01", "startDate"),
        ("?endDate=2024-13-01T00:00:00.000%2B0800", "endDate"),
        ("?startDate=2024-05-01T00:00:00.000%2B08:00", "startDate"),
        ("?filterBy=whenever", "filterBy"),
        ("?pageNo=0", "pageNo"),
        (
            "?startDate=2024-05-02T00:00:00.000%2B0800&endDate=2024-05-01T00:00:00.000%2B0800",
            "endDate",
        ),
    ] {
        let message = app
            .get(&format!("/api/v1/devices/{did}/events{query}"), &app.admin)
            .await
            .error(400);
        assert!(message.contains(field), "{query}: {message}");
    }
    app.get(&format!("/api/v1/devices/{}/events", uuid::Uuid::new_v4()), &app.admin)
        .await
        .error(404);
}

#[tokio::test]
async fn invalid_events_are_refused_and_not_stored() {
    let app = spawn_app().await;
    let world = app.world().await;
    let d = &world.device;
    let cases = [
        (event(d, "nosuch", json!(1), "Integer", BASE_MS), "attributeCode"),
        (event(d, "1bad", json!(1), "Integer", BASE_MS), "attributeCode"),
        (event(d, "count", json!("seven"), "Integer", BASE_MS), "attributeData"),
        (event(d, "count", json!(7.5), "Integer", BASE_MS), "attributeData"),
        (event(d, "count", json!(7), "Float", BASE_MS), "attributeDataType"),
        (event(d, "on", json!("yes"), "Boolean", BASE_MS), "attributeData"),
        (event(d, "label", json!(5), "String", BASE_MS), "attributeData"),
        (event(d, "count", json!(7), "Double", BASE_MS), "attributeDataType"),
        (
            {
                let mut e = event(d, "count", json!(7), "Integer", BASE_MS);
                e["deviceTime"] = json!("2024-05-01 00:00");
                e
            },
            "deviceTime",
        ),
        (
            {
                let mut e = event(d, "count", json!(7), "Integer", BASE_MS);
                e["ingressTime"] = json!("soon");
                e
            },
            "ingressTime",
        ),
        (
            {
                let mut e = event(d, "count", json!(7), "Integer", BASE_MS);
                e["channel"] = json!("x");
                e
            },
            "channel",
        ),
        (
            {
                let mut e = event(d, "count", json!(7), "Integer", BASE_MS);
                e.as_object_mut().unwrap().remove("attributeData");
                e
            },
            "attributeData",
        ),
    ];
    for (body, field) in cases {
        let message = app
            .post("/api/v1/deviceEvents", &app.admin, body.clone())
            .await
            .error(400);
        assert!(message.contains(field), "{body}: {message}");
    }
    let ghost = json!({"id": uuid::Uuid::new_v4()});
    app.post(
        "/api/v1/deviceEvents",
        &app.admin,
        event(&ghost, "count", json!(1), "Integer", BASE_MS),
    )
    .await
    .error(404);
    assert_eq!(events_of(&app, &world, "").await["totalResults"], 0);
    let shadow = app
        .get(
            &format!("/api/v1/devices/{}/shadows", d["id"].as_str().unwrap()),
            &app.admin,
        )
        .await
        .result();
    assert_eq!(shadow["attributeMap"], json!({}));
}

#[tokio::test]
async fn tokens_and_locked_devices() {
    let app = spawn_app().await;
    let world = app.world().await;
    let other = app.world().await;
    let token = world.device["accessToken"].as_str().unwrap();
    let mine = app
        .post(
            "/api/v1/deviceEvents",
            token,
            event(&world.device, "count", json!(1), "Integer", BASE_MS),
        )
        .await
        .result();
    let listed = events_of(&app, &world, "").await;
    assert_eq!(listed["results"][0]["createdBy"], "DEVICE");
    app.get(
        &format!("/api/v1/deviceEvents/{}", mine["meta"]["id"].as_str().unwrap()),
        token,
    )
    .await
    .result();
    app.delete(
        &format!("/api/v1/deviceEvents/{}", mine["meta"]["id"].as_str().unwrap()),
        token,
    )
    .await
    .error(403);
    app.post(
        "/api/v1/deviceEvents",
        token,
        event(&other.device, "count", json!(1), "Integer", BASE_MS),
    )
    .await
    .error(403);
    app.get(
        &format!("/api/v1/devices/{}/shadows", other.device["id"].as_str().unwrap()),
        token,
    )
    .await
    .error(403);
    app.get(
        &format!("/api/v1/devices/{}/shadows", world.device["id"].as_str().unwrap()),
        token,
    )
    .await
    .result();
    let app_token = world.project["applicationAccessToken"].as_str().unwrap();
    app.post(
        "/api/v1/deviceEvents",
        app_token,
        event(&world.device, "count", json!(2), "Integer", BASE_MS),
    )
    .await
    .result();
    app.post(
        "/api/v1/deviceEvents",
        app_token,
        event(&other.device, "count", json!(2), "Integer", BASE_MS),
    )
    .await
    .error(403);

    app.put(
        &format!("/api/v1/devices/{}", world.device["id"].as_str().unwrap()),
        &app.admin,
        json!({"status": "Locked"}),
    )
    .await
    .result();
    app.post(
        "/api/v1/deviceEvents",
        token,
        event(&world.device, "count", json!(3), "Integer", BASE_MS),
    )
    .await
    .error(403);
    app.post(
        "/api/v1/deviceEvents",
        &app.admin,
        event(&world.device, "count", json!(3), "Integer", BASE_MS),
    )
    .await
    .error(409);
    app.get(
        &format!("/api/v1/devices/{}", world.device["id"].as_str().unwrap()),
        token,
    )
    .await
    .result();
    assert_eq!(events_of(&app, &world, "").await["totalResults"], 2);

    // another tenant sees none of it
    let tenant = app
        .post(
            "/api/v1/tenants",
            &app.admin,
            json!({"name": crate::helpers::unique("t")}),
        )
        .await
        .result();
    let stranger = tenant["adminToken"].as_str().unwrap();
    app.get(
        &format!("/api/v1/deviceEvents/{}", mine["meta"]["id"].as_str().unwrap()),
        stranger,
    )
    .await
    .error(404);
    app.get(
        &format!("/api/v1/devices/{}/events", world.device["id"].as_str().unwrap()),
        stranger,
    )
    .await
    .error(404);
}

#[tokio::test]
async fn shadow_keeps_the_newest_device_time() {
    let app = spawn_app().await;
    let world = app.world().await;
    let did = world.device["id"].as_str().unwrap();
    let empty = app
        .get(&format!("/api/v1/devices/{did}/shadows"), &app.admin)
        .await
        .result();
    assert_eq!(empty["id"], did);
    assert_eq!(empty["attributeMap"], json!({}));
    assert_eq!(
        (empty["metadata"].clone(), empty["metadataMap"].clone()),
        (json!({}), json!({}))
    );
    for (value, offset) in [(10.0, 0), (30.0, 5_000), (20.0, 2_000)] {
        app.post(
            "/api/v1/deviceEvents",
            &app.admin,
            event(&world.device, "temp", json!(value), "Float", BASE_MS + offset),
        )
        .await
        .result();
    }
    app.post(
        "/api/v1/deviceEvents",
        &app.admin,
        event(&world.device, "on", json!(true), "Boolean", BASE_MS),
    )
    .await
    .result();
    let shadow = app
        .get(&format!("/api/v1/devices/{did}/shadows"), &app.admin)
        .await
        .result();
    assert_eq!(
        shadow["attributeMap"]["temp"],
        json!({"code": "temp", "value": 30.0, "timestamp": BASE_MS + 5_000})
    );
    assert_eq!(
        shadow["attributeMap"]["on"],
        json!({"code": "on", "value": true, "timestamp": BASE_MS})
    );
    assert_eq!(shadow["tenantId"], world.device["tenantId"]);
    assert_eq!(
        events_of(&app, &world, "").await["totalResults"],
        4,
        "the late event is stored all the same"
    );

    // a burst of concurrent events: the shadow ends at the newest device time whatever the arrival order
    let posts = (0..40).rev().map(|i| {
        app.post(
            "/api/v1/deviceEvents",
            &app.admin,
            event(&world.device, "count", json!(i), "Integer", BASE_MS + i),
        )
    });
    for reply in futures::future::join_all(posts).await {
        reply.result();
    }
    let shadow = app
        .get(&format!("/api/v1/devices/{did}/shadows"), &app.admin)
        .await
        .result();
    assert_eq!(shadow["attributeMap"]["count"]["value"], 39);
}
