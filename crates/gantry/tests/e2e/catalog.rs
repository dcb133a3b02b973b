//! Device models, projects and devices over HTTP: fields, rules, paging, filters, deletion.

use serde_json::{Value, json};

use crate::helpers::{model_body, spawn_app, unique};

fn ids(page: &Value) -> Vec<String> {
    page["results"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["id"].as_str().unwrap().to_owned())
        .collect()
}

#[tokio::test]
async fn model_lifecycle() {
    let app = spawn_app().await;
    let name = unique("crane");
    let model = app
        .post("/api/v1/deviceModels", &app.admin, model_body(&name))
        .await
        .result();
    assert_eq!(model["name"], name.as_str());
    assert_eq!(model["deviceType"], "TowerCrane");
    assert_eq!(model["deleted"], false);
    assert_eq!(model["createdBy"], "system");
    assert!(model["createdTime"].as_i64().unwrap() > 1_600_000_000_000);
    assert!(
        model.get("updatedTime").is_none(),
        "updatedTime appears only after an update"
    );
    assert_eq!(model["actionsMap"]["reboot"]["paramsMap"]["delay"]["required"], true);
    assert_eq!(model["attributesMap"]["setpoint"]["readable"], "W");
    let id = model["id"].as_str().unwrap();
    assert_eq!(
        app.get(&format!("/api/v1/deviceModels/{id}"), &app.admin)
            .await
            .result(),
        model
    );

    let mut body = model_body(&format!("{name}-v2"));
    body["attributesMap"].as_object_mut().unwrap().remove("temp");
    let updated = app
        .put(&format!("/api/v1/deviceModels/{id}"), &app.admin, body.clone())
        .await
        .result();
    assert_eq!(updated["name"], format!("{name}-v2"));
    assert!(updated["attributesMap"].get("temp").is_none());
    assert_eq!(updated["updatedBy"], "system");
    assert!(updated["updatedTime"].as_i64().unwrap() >= model["createdTime"].as_i64().unwrap());
    assert_eq!(
        app.get(&format!("/api/v1/deviceModels/{id}"), &app.admin)
            .await
            .result(),
        updated
    );

    // a partial update keeps the rest
    let renamed = app
        .put(
            &format!("/api/v1/deviceModels/{id}"),
            &app.admin,
            json!({"description": "new"}),
        )
        .await
        .result();
    assert_eq!(renamed["description"], "new");
    assert_eq!(renamed["attributesMap"], updated["attributesMap"]);
    // ... but may not leave the model with neither attributes nor actions
    let emptied = app
        .put(
            &format!("/api/v1/deviceModels/{id}"),
            &app.admin,
            json!({"attributesMap": {}, "actionsMap": {}}),
        )
        .await;
    assert!(emptied.error(400).contains("attributesMap"));
}

#[tokio::test]
async fn model_rules() {
    let app = spawn_app().await;
    let name = unique("model");
    app.post("/api/v1/deviceModels", &app.admin, model_body(&name))
        .await
        .result();
    app.post("/api/v1/deviceModels", &app.admin, model_body(&name))
        .await
        .error(409);

    let mut both_empty = model_body(&unique("m"));
    both_empty["attributesMap"] = json!({});
    both_empty["actionsMap"] = json!({});
    app.post("/api/v1/deviceModels", &app.admin, both_empty)
        .await
        .error(400);
    app.post(
        "/api/v1/deviceModels",
        &app.admin,
        json!({"name": unique("m"), "deviceType": "ROOT"}),
    )
    .await
    .error(400);
    app.post(
        "/api/v1/deviceModels",
        &app.admin,
        json!({"deviceType": "ROOT", "actionsMap": {"a": {}}}),
    )
    .await
    .error(400);

    let cases = [
        (
            "/attributesMap/temp/dataType",
            json!("Double"),
            "attributesMap.temp.dataType",
        ),
        (
            "/attributesMap/temp/readable",
            json!("X"),
            "attributesMap.temp.readable",
        ),
        ("/attributesMap/temp/channel", json!("z"), "attributesMap.temp.channel"),
        ("/deviceType", json!("Toaster"), "deviceType"),
        ("/attributesMap/temp/code", json!("other"), "attributesMap.temp.code"),
        ("/name", json!(5), "name"),
    ];
    for (pointer, value, field) in cases {
        let mut body = model_body(&unique("m"));
        *body.pointer_mut(pointer).unwrap() = value;
        let message = app.post("/api/v1/deviceModels", &app.admin, body).await.error(400);
        assert!(message.contains(field), "{pointer}: {message}");
    }
    let mut bad_code = model_body(&unique("m"));
    bad_code["attributesMap"] = json!({"1bad": {"code": "1bad", "dataType": "Float"}});
    assert!(
        app.post("/api/v1/deviceModels", &app.admin, bad_code)
            .await
            .error(400)
            .contains("1bad")
    );

    // nothing of the rejected bodies was stored
    let all = app.get("/api/v1/deviceModels?pageSize=1000", &app.admin).await.result();
    assert_eq!(all["totalResults"], 1);
}

#[tokio::test]
async fn model_listing_pages_without_overlap() {
    let app = spawn_app().await;
    for _ in 0..5 {
        app.create_model(&app.admin).await;
    }
    let first = app.get("/api/v1/deviceModels", &app.admin).await.result();
    assert_eq!(
        (
            first["pageNo"].as_i64(),
            first["pageSize"].as_i64(),
            first["totalResults"].as_i64()
        ),
        (Some(1), Some(20), Some(5))
    );
    assert_eq!(first["numResults"], 5);
    let mut seen = Vec::new();
    for page in 1..=3 {
        let res = app
            .get(&format!("/api/v1/deviceModels?pageSize=2&pageNo={page}"), &app.admin)
            .await
            .result();
        assert_eq!(res["totalResults"], 5);
        seen.extend(ids(&res));
    }
    assert_eq!(
        seen,
        ids(&first),
        "pages follow the full listing's order, without overlap or gaps"
    );
}

#[tokio::test]
async fn projects() {
    let app = spawn_app().await;
    let name = unique("site");
    let project = app
        .post(
            "/api/v1/projects",
            &app.admin,
            json!({"name": name, "description": "d", "imageUrl": "http://i", "status": "product", "address": "Site 9",
                   "mapInfo": {"lat": 31.2, "lng": 121.5, "zoom": 12}, "metadata": {"a": 1}, "templateId": "t-1"}),
        )
        .await
        .result();
    assert_eq!(project["status"], "product");
    assert_eq!(project["mapInfo"], json!({"lat": 31.2, "lng": 121.5, "zoom": 12}));
    assert_eq!(project["templateId"], "t-1");
    assert!(project["applicationAccessToken"].as_str().unwrap().len() >= 32);
    assert_eq!(project["restfulApiAddr"], app.base.as_str());
    assert!(project["mqApiAddr"].as_str().unwrap().starts_with("mqtt://127.0.0.1:"));
    app.post("/api/v1/projects", &app.admin, json!({"name": name}))
        .await
        .error(409);
    assert!(
        app.post(
            "/api/v1/projects",
            &app.admin,
            json!({"name": unique("p"), "status": "paused"})
        )
        .await
        .error(400)
        .contains("status")
    );

    let id = project["id"].as_str().unwrap();
    let closed = app
        .put(
            &format!("/api/v1/projects/{id}"),
            &app.admin,
            json!({"status": "closed"}),
        )
        .await
        .result();
    assert_eq!(closed["status"], "closed");
    assert_eq!(closed["address"], "Site 9", "absent fields keep their values");
    assert!(closed["updatedTime"].is_i64());
    let dev = app.create_project(&app.admin).await;
    let listing = app.get("/api/v1/projects?status=closed", &app.admin).await.result();
    assert_eq!(ids(&listing), vec![id.to_owned()]);
    let every = app.get("/api/v1/projects", &app.admin).await.result();
    assert_eq!(ids(&every), vec![id.to_owned(), dev["id"].as_str().unwrap().to_owned()]);
    app.get("/api/v1/projects?status=paused", &app.admin).await.error(400);
}

#[tokio::test]
async fn project_models_are_the_distinct_models_of_its_devices() {
    let app = spawn_app().await;
    let world = app.world().await;
    let other_model = app.create_model(&app.admin).await;
    app.create_model(&app.admin).await; // unused
    app.create_device(&app.admin, &world.project, &world.model).await;
    app.create_device(&app.admin, &world.project, &other_model).await;
    let pid = world.project["id"].as_str().unwrap();
    let models = app
        .get(&format!("/api/v1/projects/{pid}/models"), &app.admin)
        .await
        .result();
    let mut got: Vec<_> = models.as_array().unwrap().iter().map(|m| m["id"].clone()).collect();
    got.sort_by_key(|v| v.to_string());
    let mut want = vec![world.model["id"].clone(), other_model["id"].clone()];
    want.sort_by_key(|v| v.to_string());
    assert_eq!(got, want);
}

#[tokio::test]
async fn devices() {
    let app = spawn_app().await;
    let world = app.world().await;
    let d = &world.device;
    assert_eq!(d["status"], "Active");
    assert_eq!(
        (d["isVirtual"].clone(), d["virtual"].clone()),
        (json!(false), json!(false))
    );
    assert_eq!(d["deviceModelType"], "TowerCrane");
    assert_eq!(d["deviceModelName"], world.model["name"]);
    assert_eq!(d["projectName"], world.project["name"]);
    assert_eq!(d["deviceModelUrl"], world.model["imageUrl"]);
    assert_eq!(d["hasActions"], true);
    assert!(d["accessToken"].as_str().unwrap().len() >= 32);
    let id = d["id"].as_str().unwrap();
    assert_eq!(app.get(&format!("/api/v1/devices/{id}"), &app.admin).await.result(), *d);

    let base = json!({"projectId": world.project["id"], "modelId": world.model["id"]});
    let with = |extra: Value| {
        let mut b = base.clone();
        b.as_object_mut().unwrap().extend(extra.as_object().unwrap().clone());
        b
    };
    app.post(
        "/api/v1/devices",
        &app.admin,
        with(json!({"deviceName": d["deviceName"]})),
    )
    .await
    .error(409);
    app.post(
        "/api/v1/devices",
        &app.admin,
        with(json!({"deviceName": unique("d"), "status": "Broken"})),
    )
    .await
    .error(400);
    app.post(
        "/api/v1/devices",
        &app.admin,
        with(json!({"deviceName": unique("d"), "modelId": uuid::Uuid::new_v4()})),
    )
    .await
    .error(404);
    app.post(
        "/api/v1/devices",
        &app.admin,
        with(json!({"deviceName": unique("d"), "projectId": uuid::Uuid::new_v4()})),
    )
    .await
    .error(404);
    app.post("/api/v1/devices", &app.admin, json!({"deviceName": unique("d")}))
        .await
        .error(400);

    let locked = app
        .put(
            &format!("/api/v1/devices/{id}"),
            &app.admin,
            json!({"status": "Locked", "comments": "service", "virtual": true}),
        )
        .await
        .result();
    assert_eq!(locked["status"], "Locked");
    assert_eq!(locked["comments"], "service");
    assert_eq!(
        (locked["isVirtual"].clone(), locked["virtual"].clone()),
        (json!(true), json!(true))
    );
    assert_eq!(locked["deviceName"], d["deviceName"]);
    assert!(locked["updatedTime"].is_i64());
    app.put(
        &format!("/api/v1/devices/{id}"),
        &app.admin,
        json!({"modelId": uuid::Uuid::new_v4()}),
    )
    .await
    .error(400);
    let renamed = app
        .put(format!("/api/v1/devices/{id}"), &app.admin, json!({"isVirtual": false}))
        .await
        .result();
    assert_eq!(
        renamed["virtual"], false,
        "isVirtual is accepted as the request name too"
    );
    app.put(
        &format!("/api/v1/devices/{}", uuid::Uuid::new_v4()),
        &app.admin,
        json!({"status": "Locked"}),
    )
    .await
    .error(404);
}

#[tokio::test]
async fn project_device_listing_filters_and_sorts() {
    let app = spawn_app().await;
    let world = app.world().await;
    let pid = world.project["id"].as_str().unwrap();
    let camera = app
        .post("/api/v1/deviceModels", &app.admin, {
            let mut b = model_body(&unique("cam"));
            b["deviceType"] = json!("Camera");
            b
        })
        .await
        .result();
    let mk = |name: &str, model: &Value, extra: Value| {
        let mut b = json!({"deviceName": name, "projectId": pid, "modelId": model["id"]});
        b.as_object_mut().unwrap().extend(extra.as_object().unwrap().clone());
        b
    };
    app.post(
        "/api/v1/devices",
        &app.admin,
        mk("b-locked", &world.model, json!({"status": "Locked", "virtual": true})),
    )
    .await
    .result();
    app.post("/api/v1/devices", &app.admin, mk("a-camera", &camera, json!({})))
        .await
        .result();
    let other = app.create_project(&app.admin).await;
    app.create_device(&app.admin, &other, &world.model).await;

    let q = |query: &str| app.get(format!("/api/v1/projects/{pid}/devices{query}"), &app.admin);
    let every = q("").await.result();
    assert_eq!(
        (every["totalResults"].as_i64(), every["pageSize"].as_i64()),
        (Some(3), Some(20))
    );
    let names = |v: &Value| {
        v["results"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r["deviceName"].as_str().unwrap().to_owned())
            .collect::<Vec<_>>()
    };
    assert_eq!(names(&q("?status=Locked").await.result()), vec!["b-locked"]);
    assert_eq!(names(&q("?isVirtual=true").await.result()), vec!["b-locked"]);
    assert_eq!(q("?isVirtual=false").await.result()["totalResults"], 2);
    assert_eq!(names(&q("?deviceType=Camera").await.result()), vec!["a-camera"]);
    assert_eq!(q("?deviceType=Crane").await.result()["totalResults"], 0);
    assert_eq!(
        names(&q("?deviceName=CAM").await.result()),
        vec!["a-camera"],
        "name filter is a case-insensitive substring"
    );
    assert_eq!(
        q("?deviceName=%25").await.result()["totalResults"],
        0,
        "% is matched literally"
    );
    assert_eq!(
        names(
            &q(&format!("?modelId={}", camera["id"].as_str().unwrap()))
                .await
                .result()
        ),
        vec!["a-camera"]
    );
    let asc = names(&q("?sortBy=deviceName&sortOrder=ASC").await.result());
    let mut sorted = asc.clone();
    sorted.sort();
    assert_eq!(asc, sorted);
    let desc = names(&q("?sortBy=deviceName&sortOrder=DESC").await.result());
    sorted.reverse();
    assert_eq!(desc, sorted);
    let newest_first = names(&q("").await.result());
    assert_eq!(newest_first[0], "a-camera", "default order is updatedTime DESC");
    for bad in [
        "?pageNo=0",
        "?pageSize=-5",
        "?pageSize=abc",
        "?pageSize=1001",
        "?sortOrder=SIDEWAYS",
        "?sortBy=password",
        "?status=Broken",
        "?isVirtual=maybe",
        "?deviceType=Toaster",
    ] {
        let message = q(bad).await.error(400);
        let param = bad[1..].split('=').next().unwrap();
        assert!(message.contains(param), "{bad}: {message}");
    }

    let model_devices = app
        .get(
            &format!("/api/v1/deviceModels/{}/devices", camera["id"].as_str().unwrap()),
            &app.admin,
        )
        .await
        .result();
    assert_eq!(names(&model_devices), vec!["a-camera"]);
}

#[tokio::test]
async fn deletion_is_soft_and_guarded() {
    let app = spawn_app().await;
    let world = app.world().await;
    let (pid, mid, did) = (
        world.project["id"].as_str().unwrap(),
        world.model["id"].as_str().unwrap(),
        world.device["id"].as_str().unwrap(),
    );
    app.delete(&format!("/api/v1/deviceModels/{mid}"), &app.admin)
        .await
        .error(409);
    app.delete(&format!("/api/v1/projects/{pid}"), &app.admin)
        .await
        .error(409);

    let token = world.device["accessToken"].as_str().unwrap();
    app.get(&format!("/api/v1/devices/{did}"), token).await.result();
    let done = app.delete(&format!("/api/v1/devices/{did}"), &app.admin).await;
    assert_eq!(done.body, json!({"returnCode": 0}));
    app.get(&format!("/api/v1/devices/{did}"), &app.admin).await.error(404);
    app.get(&format!("/api/v1/devices/{did}"), token).await.error(401);
    app.delete(&format!("/api/v1/devices/{did}"), &app.admin)
        .await
        .error(404);
    assert_eq!(
        app.get(&format!("/api/v1/projects/{pid}/devices"), &app.admin)
            .await
            .result()["totalResults"],
        0
    );
    // the name is free again
    app.post(
        "/api/v1/devices",
        &app.admin,
        json!({"deviceName": world.device["deviceName"], "projectId": pid, "modelId": mid}),
    )
    .await
    .result();
    let again = app
        .get(&format!("/api/v1/projects/{pid}/devices"), &app.admin)
        .await
        .result();
    let again_id = again["results"][0]["id"].as_str().unwrap().to_owned();
    app.delete(&format!("/api/v1/devices/{again_id}"), &app.admin)
        .await
        .result();

    app.delete(&format!("/api/v1/deviceModels/{mid}"), &app.admin)
        .await
        .result();
    app.get(&format!("/api/v1/deviceModels/{mid}"), &app.admin)
        .await
        .error(404);
    let app_token = world.project["applicationAccessToken"].as_str().unwrap();
    app.delete(&format!("/api/v1/projects/{pid}"), &app.admin)
        .await
        .result();
    app.get(&format!("/api/v1/projects/{pid}"), &app.admin).await.error(404);
    app.get("/api/v1/deviceModels", app_token).await.error(401);
}

#[tokio::test]
async fn concurrent_creates_of_one_name_give_one_success() {
    let app = spawn_app().await;
    let world = app.world().await;
    let name = unique("race");
    let body = json!({"deviceName": name, "projectId": world.project["id"], "modelId": world.model["id"]});
    let replies =
        futures::future::join_all((0..8).map(|_| app.post("/api/v1/devices", &app.admin, body.clone()))).await;
    let statuses: Vec<u16> = replies.iter().map(|r| r.status.as_u16()).collect();
    assert_eq!(statuses.iter().filter(|s| **s == 200).count(), 1, "{statuses:?}");
    assert_eq!(statuses.iter().filter(|s| **s == 409).count(), 7, "{statuses:?}");
}
