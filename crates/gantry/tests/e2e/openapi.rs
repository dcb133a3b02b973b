//! The served OpenAPI document agrees with the server: a valid document (unique operationIds),
//! enums spelled as the server reads and writes them, every answered status declared.

use std::collections::HashSet;

use gantry_core::enums::{
    Channel, Classification, DataType, DeviceStatus, DeviceType, EventLogStatus, EventSource, MessageType,
    ProjectStatus, Readable, SortOrder, SourceType,
};
use serde::Serialize;
use serde_json::{Value, json};

use crate::helpers::{TestApp, spawn_app};

const METHODS: [&str; 5] = ["get", "put", "post", "delete", "patch"];

async fn document(app: &TestApp) -> Value {
    app.client
        .get(format!("{}/api-docs/openapi.json", app.base))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap()
}

fn operations(doc: &Value) -> Vec<(String, String, Value)> {
    let mut out = Vec::new();
    for (path, item) in doc["paths"].as_object().unwrap() {
        for method in METHODS {
            if let Some(op) = item.get(method) {
                out.push((method.to_owned(), path.clone(), op.clone()));
            }
        }
    }
    out
}

fn serde_spellings<T: Serialize>(all: &[T]) -> Vec<Value> {
    all.iter().map(|v| serde_json::to_value(v).unwrap()).collect()
}

#[tokio::test]
async fn operation_ids_are_unique_and_present() {
    let app = spawn_app().await;
    let doc = document(&app).await;
    let ops = operations(&doc);
    assert!(ops.len() >= 37, "{} operations", ops.len());
    let mut seen = HashSet::new();
    for (method, path, op) in &ops {
        let id = op["operationId"]
            .as_str()
            .unwrap_or_else(|| panic!("{method} {path} has no operationId"));
        assert!(seen.insert(id.to_owned()), "operationId {id} repeats ({method} {path})");
    }
}

#[tokio::test]
async fn enums_list_what_serde_reads_and_writes() {
    let app = spawn_app().await;
    let doc = document(&app).await;
    let schemas = &doc["components"]["schemas"];
    let expected: [(&str, Vec<Value>); 12] = [
        ("DeviceType", serde_spellings(DeviceType::ALL)),
        ("DataType", serde_spellings(DataType::ALL)),
        ("Readable", serde_spellings(Readable::ALL)),
        ("Channel", serde_spellings(Channel::ALL)),
        ("DeviceStatus", serde_spellings(DeviceStatus::ALL)),
        ("ProjectStatus", serde_spellings(ProjectStatus::ALL)),
        ("SortOrder", serde_spellings(SortOrder::ALL)),
        ("EventSource", serde_spellings(EventSource::ALL)),
        ("MessageType", serde_spellings(MessageType::ALL)),
        ("EventLogStatus", serde_spellings(EventLogStatus::ALL)),
        ("Classification", serde_spellings(Classification::ALL)),
        ("SourceType", serde_spellings(SourceType::ALL)),
    ];
    for (name, values) in expected {
        assert_eq!(schemas[name]["enum"], Value::Array(values), "enum {name}");
    }
    assert_eq!(schemas["Channel"]["enum"], json!(["m", "w", "g"]));
    assert_eq!(schemas["Readable"]["enum"], json!(["R", "RW", "W"]));

    // A value the document offers is one the server takes: a model of the document's first
    // device type, with an attribute of its spelling of RW.
    let device_type = schemas["DeviceType"]["enum"][0].clone();
    let model = app
        .post(
            "/api/v1/deviceModels",
            &app.admin,
            json!({"name": "doc model", "deviceType": device_type,
                   "attributesMap": {"t": {"dataType": "Float", "readable": schemas["Readable"]["enum"][1]}}}),
        )
        .await
        .result();
    assert_eq!(model["deviceType"], device_type);
    assert_eq!(model["attributesMap"]["t"]["readable"], "RW");
}

#[tokio::test]
async fn values_of_any_json_type_are_not_declared_objects() {
    let app = spawn_app().await;
    let doc = document(&app).await;
    let schemas = &doc["components"]["schemas"];
    for (schema, field) in [
        ("DeviceEvent", "attributeData"),
        ("EventInput", "attributeData"),
        ("ShadowAttribute", "value"),
        ("PayloadAttribute", "value"),
        ("SeriesPoint", "first"),
        ("SeriesPoint", "last"),
    ] {
        let declared = &schemas[schema]["properties"][field];
        assert!(declared.is_object(), "{schema}.{field} missing");
        assert!(declared.get("type").is_none(), "{schema}.{field} is typed: {declared}");
    }
}

#[tokio::test]
async fn every_answered_status_is_declared() {
    let app = spawn_app().await;
    let doc = document(&app).await;
    let public = ["/healthz", "/metrics", "/api/v1/auth/login"];
    for (method, path, op) in operations(&doc) {
        let responses = &op["responses"];
        let declared = |status: &str| responses.get(status).is_some();
        let error_body = |status: &str| {
            responses[status]["content"]["application/json"]["schema"]["$ref"] == "#/components/schemas/ErrorBody"
        };
        if public.contains(&path.as_str()) {
            assert_eq!(op["security"], json!([]), "{path} needs no token");
            continue;
        }
        for status in ["401", "403", "503"] {
            assert!(error_body(status), "{method} {path} lacks {status} with ErrorBody");
        }
        if op.get("requestBody").is_some() {
            for status in ["400", "413", "415"] {
                assert!(error_body(status), "{method} {path} lacks {status}");
            }
        }
        if path.contains('{') {
            assert!(
                declared("404") || path.starts_with("/mqtt"),
                "{method} {path} lacks 404"
            );
        }
        for param in op["parameters"].as_array().into_iter().flatten() {
            match param["name"].as_str().unwrap() {
                "pageSize" => assert_eq!(
                    (&param["schema"]["minimum"], &param["schema"]["maximum"]),
                    (&json!(1), &json!(1000)),
                    "{method} {path} pageSize"
                ),
                "pageNo" => assert_eq!(param["schema"]["minimum"], json!(1), "{method} {path} pageNo"),
                _ => {}
            }
        }
    }
    for path in [
        "/mqtt/auth",
        "/mqtt/acl",
        "/api/v1/devices/{deviceId}/accessToken/rotate",
        "/api/v1/projects/{projectId}/applicationAccessToken/rotate",
        "/api/v1/tenants/{tenantId}/adminToken/rotate",
    ] {
        assert!(doc["paths"][path]["post"].is_object(), "POST {path} undocumented");
    }
    assert!(doc["paths"]["/api/v1/devices/{deviceId}/routes"]["get"].is_object());
    assert!(doc["paths"]["/api/v1/routes/{routeId}"]["delete"].is_object());
    let name = &doc["components"]["schemas"]["ProjectInput"]["properties"]["name"];
    assert_eq!((&name["minLength"], &name["maxLength"]), (&json!(1), &json!(128)));
}

#[tokio::test]
async fn broker_hooks_answer_in_the_documented_shape() {
    let app = spawn_app().await;
    let url = format!("{}/mqtt/auth", app.base);
    let body = json!({"clientid": "nobody", "username": "nobody", "password": "x"});
    let no_token = app.client.post(&url).json(&body).send().await.unwrap();
    assert_eq!(no_token.status(), 401);
    let error: Value = no_token.json().await.unwrap();
    assert_eq!(error["returnCode"], 40100);

    let not_json = app
        .client
        .post(&url)
        .bearer_auth(&app.admin)
        .body("clientid=x")
        .send()
        .await
        .unwrap();
    assert_eq!(not_json.status(), 415);
    let wrong_shape = app
        .client
        .post(&url)
        .bearer_auth(&app.admin)
        .json(&json!({"clientid": 7}))
        .send()
        .await
        .unwrap();
    assert_eq!(wrong_shape.status(), 400);
    let error: Value = wrong_shape.json().await.unwrap();
    assert!(error["message"].as_str().unwrap().contains("clientid"), "{error}");

    let denied: Value = app
        .client
        .post(&url)
        .bearer_auth(&app.admin)
        .json(&body)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(denied, json!({"result": "deny"}));
}

/// A create body declares the fields the server requires (create and update share a type, where
/// update takes any subset): a client generated from the document cannot leave them out, and
/// each of them is refused with 400 naming it when it is left out.
#[tokio::test]
async fn create_bodies_declare_their_required_fields() {
    let app = spawn_app().await;
    let doc = document(&app).await;
    let body_of = |path: &str, method: &str| {
        let schema = &doc["paths"][path][method]["requestBody"]["content"]["application/json"]["schema"];
        let name = schema["$ref"].as_str().unwrap().rsplit('/').next().unwrap().to_owned();
        doc["components"]["schemas"][&name].clone()
    };
    for (path, required) in [
        ("/api/v1/deviceModels", vec!["name"]),
        ("/api/v1/projects", vec!["name"]),
        ("/api/v1/devices", vec!["deviceName", "projectId", "modelId"]),
        ("/api/v1/projects/{projectId}/webhooks", vec!["url", "types"]),
    ] {
        let schema = body_of(path, "post");
        let declared: Vec<&str> = schema["required"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_str().unwrap())
            .collect();
        for field in &required {
            assert!(
                declared.contains(field),
                "POST {path}: {field} not required in {declared:?}"
            );
            let property = &schema["properties"][field];
            assert!(
                !property.to_string().contains("\"null\""),
                "POST {path}: {field} may be null: {property}"
            );
        }
    }
    // Updates still take any subset.
    let update = body_of("/api/v1/projects/{projectId}", "put");
    assert!(update["required"].as_array().is_none_or(|r| r.is_empty()), "{update}");
    // And the server refuses a create without them, naming the field.
    let message = app
        .post("/api/v1/projects", &app.admin, json!({"description": "x"}))
        .await
        .error(400);
    assert!(message.starts_with("name"), "{message}");
}
