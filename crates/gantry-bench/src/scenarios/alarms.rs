//! REST ingest with alarm rules: the same posts as `ingest-rest` with no rule on the devices'
//! model and with `RULES` rules on the attribute every post carries, in the same run, in the
//! order A B B A (`alternated`).
//! Two of the rules hold for a share of the values (so alarms are raised, counted and cleared
//! all along), one never does. Rules are evaluated before each post is answered, so an alarm is
//! stored before the answer (and the PUBACK, over MQTT) of the event that completes its
//! condition; the target is at least 0.9 of the rate without rules. Each device's values ramp
//! through the bands, so about one post in a hundred is a transition. `run_mqtt` does the same
//! over MQTT at a paced rate (the 25,000 events/s on the embedded default): messages
//! acknowledged per second, each PUBACK after its events are committed and its rules evaluated.

use std::time::Duration;

use anyhow::Context;
use serde_json::json;

use super::{Ctx, Measurement, alternated};
use crate::mqtt_load;
use crate::scenarios::ingest_mqtt::{self, MqttTarget};
use crate::scenarios::ingest_rest::posted;
use crate::seed::DeviceRef;
use crate::server::UsageMeter;

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

/// The MQTT measurement at `rate` offered with `rules` rules.
pub fn mqtt_variant(rate: f64, rules: usize) -> String {
    format!(
        "QoS 1 publish → PUBACK, {} msg/s offered, {rules} alarm rules",
        crate::format::thousands(rate)
    )
}

async fn create_rules(ctx: &Ctx<'_>, model_id: &str) -> anyhow::Result<Vec<String>> {
    let mut created = Vec::with_capacity(RULES);
    for rule in rules() {
        let made = ctx
            .api
            .post(&format!("/api/v1/deviceModels/{model_id}/alarmRules"), &rule)
            .await?;
        let id = made["id"].as_str().context("a created rule has an id")?;
        created.push(id.to_owned());
    }
    Ok(created)
}

/// Deletes the rules, so that what is measured after runs with none.
async fn delete_rules(ctx: &Ctx<'_>, created: &[String]) -> anyhow::Result<()> {
    for id in created {
        ctx.api
            .call(hyper::Method::DELETE, &format!("/api/v1/alarmRules/{id}"), None)
            .await?;
    }
    Ok(())
}

pub async fn run(ctx: &Ctx<'_>, model_id: &str, devices: &[DeviceRef]) -> anyhow::Result<Vec<Measurement>> {
    anyhow::ensure!(!devices.is_empty(), "no devices to post events for");
    // Each measurement starts from an idle server (`posted`), as the MQTT runs do (`publish`).
    let variant = with_variant();
    let first = posted(ctx, SCENARIO, ALONE, devices).await?;
    let created = create_rules(ctx, model_id).await?;
    let measured = async {
        let second = posted(ctx, SCENARIO, &variant, devices).await?;
        let third = posted(ctx, SCENARIO, &variant, devices).await?;
        anyhow::Ok((second, third))
    }
    .await;
    delete_rules(ctx, &created).await?;
    let (second, third) = measured?;
    let fourth = posted(ctx, SCENARIO, ALONE, devices).await?;
    Ok(alternated::sides(
        [first, second, third, fourth],
        &format!("with {RULES} rules"),
        "the rate with no rule",
        0.9,
        "; each alarm is stored before its event is answered",
    ))
}

/// Over MQTT at `rate` offered, in the same run and the order A B B A: with no rule, twice
/// with `RULES` rules, with none again.
pub async fn run_mqtt(
    ctx: &Ctx<'_>,
    target: &MqttTarget,
    model_id: &str,
    devices: &[DeviceRef],
    rate: f64,
) -> anyhow::Result<Vec<Measurement>> {
    anyhow::ensure!(!devices.is_empty(), "no devices to publish for");
    let first = publish(ctx, target, devices, mqtt_variant(rate, 0), rate).await?;
    let created = create_rules(ctx, model_id).await?;
    let measured = async {
        let second = publish(ctx, target, devices, mqtt_variant(rate, RULES), rate).await?;
        let third = publish(ctx, target, devices, mqtt_variant(rate, RULES), rate).await?;
        anyhow::Ok((second, third))
    }
    .await;
    delete_rules(ctx, &created).await?;
    let (second, third) = measured?;
    let fourth = publish(ctx, target, devices, mqtt_variant(rate, 0), rate).await?;
    Ok(alternated::sides(
        [first, second, third, fourth],
        &format!("over MQTT with {RULES} rules"),
        "the acknowledged rate with no rule",
        0.9,
        "; each PUBACK after its rules",
    ))
}

/// One paced MQTT run of the devices: messages acknowledged per second.
async fn publish(
    ctx: &Ctx<'_>,
    target: &MqttTarget,
    devices: &[DeviceRef],
    variant: String,
    rate: f64,
) -> anyhow::Result<Measurement> {
    // Each run starts from an idle server: what the one before left to do is not counted here.
    crate::server::wait_until_idle(ctx.pid, Duration::from_secs(120)).await;
    let ids: Vec<String> = devices.iter().map(|d| d.id.clone()).collect();
    let conns = ingest_mqtt::connect_devices(target, devices).await?;
    let meter = UsageMeter::start(ctx.pid, ctx.local_postgres);
    let outcome = mqtt_load::drive(conns, ingest_mqtt::payloads(ids), ingest_mqtt::pace(ctx, rate)).await?;
    let usage = meter.finish().await;
    let m = Measurement::of_acked(SCENARIO, variant, &outcome, usage);
    m.log();
    Ok(m)
}
