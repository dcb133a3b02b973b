//! A model's alarm rules on the console's model page over plain HTTP: listed with their status,
//! created from the form (refusals next to the input they name), enabled, disabled and deleted,
//! each checked against the REST API; refused to roles that may not manage models and not found
//! for another tenant.

use reqwest::StatusCode;
use serde_json::{Value, json};

use crate::console::Console;
use crate::console_alarms::user;
use crate::helpers::{TestApp, spawn_app, unique};

async fn rules(app: &TestApp, model: &str) -> Vec<Value> {
    app.get(format!("/api/v1/deviceModels/{model}/alarmRules"), &app.admin)
        .await
        .result()
        .as_array()
        .unwrap()
        .clone()
}

/// The form of a rule `temp > 50` named `name`, with `extra` fields.
fn rule_form<'a>(name: &'a str, extra: &[(&'a str, &'a str)]) -> Vec<(&'a str, &'a str)> {
    let mut form = vec![
        ("name", name),
        ("attributeCode", "temp"),
        ("severity", "MAJOR"),
        ("condition.op", ">"),
        ("condition.value", "50"),
        ("enabled", "true"),
    ];
    for (k, v) in extra {
        form.retain(|(key, _)| key != k);
        form.push((*k, *v));
    }
    form
}

#[tokio::test]
async fn administrators_manage_a_models_alarm_rules_from_its_page() {
    let app = spawn_app().await;
    let world = app.world().await;
    let model = world.model["id"].as_str().unwrap();
    let page_path = format!("/console/models/{model}");
    let create = format!("{page_path}/alarmRules");
    let console = Console::sign_in(&app, &app.admin).await.expect("signed in");

    let (status, page) = console.get(&page_path).await;
    assert_eq!(status, StatusCode::OK);
    assert!(
        page.contains("No alarm rules.") && page.contains(">Add alarm rule</button>"),
        "{page}"
    );
    assert!(
        page.contains(r#"<option value="temp">Temperature (temp, Float)</option>"#),
        "the attribute is a choice of the model's attributes: {page}"
    );

    // Refusals are shown next to the input they name, with what was typed kept.
    let cases: [(&[(&str, &str)], &str); 4] = [
        (&[("condition.value", "hot")], "condition.value"),
        (&[("name", "")], "name"),
        (&[("condition.op", "between"), ("condition.value", "")], "condition.low"),
        (&[("forSeconds", "soon")], "forSeconds"),
    ];
    for (extra, field) in cases {
        let (status, page) = console.post(&page_path, &create, &rule_form("Too hot", extra)).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{field}");
        assert!(page.contains(&format!(r#"id="f-{field}-error""#)), "{field}: {page}");
    }
    let (_, page) = console
        .post(
            &page_path,
            &create,
            &rule_form("Kept name", &[("condition.value", "hot")]),
        )
        .await;
    assert!(page.contains(r#"value="Kept name""#), "the draft is kept: {page}");
    assert!(rules(&app, model).await.is_empty(), "nothing was created");

    // A valid rule, and one that reads a metadata key the world's device lacks.
    let clear = [
        ("clearCondition.op", "<"),
        ("clearCondition.value", "45.5"),
        ("clearForSeconds", "30"),
        ("forSeconds", "10"),
        ("description", "the motor overheats"),
    ];
    let (status, to) = console
        .post_sent_to(&page_path, &create, &rule_form("Too hot", &clear))
        .await;
    assert_eq!(status, StatusCode::SEE_OTHER);
    assert!(to.starts_with(&format!("{page_path}#rule-")), "{to}");
    let from_key = [("condition.value", ""), ("condition.valueFrom", "maxTemp")];
    let (status, _) = console
        .post_sent_to(&page_path, &create, &rule_form("Over its limit", &from_key))
        .await;
    assert_eq!(status, StatusCode::SEE_OTHER);
    let stored = rules(&app, model).await;
    assert_eq!(stored.len(), 2);
    let hot = &stored[0];
    assert_eq!(
        (
            &hot["condition"],
            &hot["clearCondition"],
            &hot["forSeconds"],
            &hot["clearForSeconds"]
        ),
        (
            &json!({"op": ">", "value": 50}),
            &json!({"op": "<", "value": 45.5}),
            &json!(10),
            &json!(30)
        ),
        "{hot}"
    );
    assert_eq!(stored[1]["status"], json!({"devices": 1, "devicesNotEvaluated": 1}));

    let (_, page) = console.get(&page_path).await;
    for shown in [
        "Too hot",
        "&gt; 50 for 10 s",
        "&lt; 45.5 for 30 s",
        "the motor overheats",
        "&gt; metadata maxTemp",
        "0 of 1 devices evaluated",
        "1 not evaluated",
    ] {
        assert!(page.contains(shown), "the page shows {shown}: {page}");
    }

    // Disable, enable and delete, as the API's PUT and DELETE do.
    let rule_path = format!("/console/alarmRules/{}", hot["id"].as_str().unwrap());
    for enabled in ["false", "true"] {
        let (status, to) = console
            .post_sent_to(&page_path, &rule_path, &[("enabled", enabled)])
            .await;
        assert_eq!(
            (status, to),
            (StatusCode::SEE_OTHER, format!("{page_path}#alarm-rules"))
        );
        assert_eq!(rules(&app, model).await[0]["enabled"].to_string(), enabled);
    }
    let (status, _) = console
        .post_sent_to(&page_path, &format!("{rule_path}/delete"), &[])
        .await;
    assert_eq!(status, StatusCode::SEE_OTHER);
    let left = rules(&app, model).await;
    assert_eq!(left.len(), 1);
    assert_eq!(left[0]["name"], "Over its limit");

    // The changes are in the audit log as the API's would be.
    let records = app
        .get("/api/v1/auditLogs?resourceType=alarmRule&pageSize=20", &app.admin)
        .await
        .result();
    let actions: Vec<&str> = records["results"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|r| r["action"].as_str())
        .collect();
    assert!(
        actions.contains(&"update") && actions.contains(&"delete"),
        "{actions:?}"
    );
    app.stop().await;
}

#[tokio::test]
async fn alarm_rules_are_managed_by_administrators_of_the_tenant_only() {
    let app = spawn_app().await;
    let world = app.world().await;
    let model = world.model["id"].as_str().unwrap();
    let page_path = format!("/console/models/{model}");
    let create = format!("{page_path}/alarmRules");
    let rule = app
        .post(
            format!("/api/v1/deviceModels/{model}/alarmRules"),
            &app.admin,
            json!({"name": "Too hot", "attributeCode": "temp", "severity": "MAJOR", "condition": {"op": ">", "value": 50}}),
        )
        .await
        .result();
    let rule_path = format!("/console/alarmRules/{}", rule["id"].as_str().unwrap());

    for role in ["VIEWER", "OPERATOR"] {
        let (name, password) = user(&app, role).await;
        let console = Console::sign_in_user(&app, &name, &password).await;
        let (status, page) = console.get(&page_path).await;
        assert_eq!(status, StatusCode::OK);
        assert!(page.contains("Too hot"), "{role} reads the rules: {page}");
        assert!(
            !page.contains("Add alarm rule") && !page.contains(">Disable</button>"),
            "{role} is offered no form: {page}"
        );
        let (status, _) = console.post(&page_path, &create, &rule_form("Mine", &[])).await;
        assert_eq!(status, StatusCode::FORBIDDEN, "{role} creates");
        let (status, _) = console.post(&page_path, &rule_path, &[("enabled", "false")]).await;
        assert_eq!(status, StatusCode::FORBIDDEN, "{role} disables");
        let (status, _) = console.post(&page_path, &format!("{rule_path}/delete"), &[]).await;
        assert_eq!(status, StatusCode::FORBIDDEN, "{role} deletes");
    }

    let tenant = app
        .post("/api/v1/tenants", &app.admin, json!({"name": unique("tenant")}))
        .await
        .result();
    let stranger = Console::sign_in(&app, tenant["adminToken"].as_str().unwrap())
        .await
        .expect("signed in");
    assert_eq!(stranger.get(&page_path).await.0, StatusCode::NOT_FOUND);
    let from = "/console/models";
    let (status, _) = stranger.post(from, &create, &rule_form("Mine", &[])).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let (status, _) = stranger.post(from, &rule_path, &[("enabled", "false")]).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let (status, _) = stranger.post(from, &format!("{rule_path}/delete"), &[]).await;
    assert_eq!(status, StatusCode::NOT_FOUND);

    let left = rules(&app, model).await;
    assert_eq!(
        (left.len(), &left[0]["enabled"], left[0]["name"].as_str()),
        (1, &json!(true), Some("Too hot")),
        "nothing was changed"
    );
    app.stop().await;
}
