//! REST ingest with alarm rules: the same posts as `ingest-rest`, first with no rule on the
//! devices' model, then with `RULES` rules on the attribute every post carries, in the same run.
//! Two of the rules hold for a share of the values (so alarms are raised, counted and cleared
//! all along), one never does. Rules are evaluated before each post is answered, so an alarm is
//! stored before the answer (and the PUBACK, over MQTT) of the event that completes its
//! condition; the target is at least 0.9 of the rate without rules.

use serde_json::json;

use super::{Ctx, Measurement, measure};
use crate::scenarios::ingest_rest::posts;
use crate::seed::DeviceRef;

pub const SCENARIO: &str = "alarms";
/// Rules on the model.
pub const RULES: usize = 3;
/// The measurement with no rule.
pub const ALONE: &str = "POST /deviceEvents, no alarm rule";

/// The measurement with `RULES` rules.
pub fn with_variant() -> String {
    format!("POST /deviceEvents, {RULES} alarm rules")
}

/// The rules: the posted values cycle through 0.0 to 49.9.
fn rules() -> [serde_json::Value; RULES] {
    [
        json!({"name": "hot", "attributeCode": "temp", "severity": "MAJOR", "condition": {"op": ">", "value": 40},
               "escalations": [{"severity": "CRITICAL", "condition": {"op": ">", "value": 45}}]}),
        json!({"name": "band", "attributeCode": "temp", "severity": "MINOR",
               "condition": {"op": "between", "low": 10, "high": 20}, "clearCondition": {"op": ">", "value": 25}}),
        json!({"name": "frozen", "attributeCode": "temp", "severity": "WARNING", "condition": {"op": "<", "value": -1}}),
    ]
}

pub async fn run(ctx: &Ctx<'_>, model_id: &str, devices: &[DeviceRef]) -> anyhow::Result<Vec<Measurement>> {
    anyhow::ensure!(!devices.is_empty(), "no devices to post events for");
    let (alone, _) = measure(ctx, SCENARIO, ALONE, ctx.connections, posts(ctx, devices)?).await?;
    let mut created = Vec::with_capacity(RULES);
    for rule in rules() {
        let made = ctx
            .api
            .post(&format!("/api/v1/deviceModels/{model_id}/alarmRules"), &rule)
            .await?;
        created.push(made["result"]["id"].as_str().unwrap_or_default().to_owned());
    }
    let variant = with_variant();
    let measured = measure(ctx, SCENARIO, &variant, ctx.connections, posts(ctx, devices)?).await;
    for id in &created {
        let _ = ctx
            .api
            .call(hyper::Method::DELETE, &format!("/api/v1/alarmRules/{id}"), None)
            .await;
    }
    let (mut with, _) = measured?;
    let ratio = with.requests_per_second / alone.requests_per_second.max(f64::EPSILON);
    with.note = Some(format!(
        "{ratio:.2} x the rate with no rule (same run; target >= 0.90); each alarm is stored before its event is answered"
    ));
    eprintln!("  {SCENARIO}: with {RULES} rules {ratio:.2} x the rate with none");
    Ok(vec![alone, with])
}
