//! REST ingest with webhooks whose receivers are down: the same posts as `ingest-rest` with no
//! webhook on the project and with `WEBHOOKS` of them (each wanting telemetry and shadow, each
//! receiver a closed port on this machine), in the same run, in the order A B B A
//! (`alternated`). An event is written to the outbox once whatever the number of webhooks, so
//! the rate with them should stay near the rate without (the target: at least 0.8 of it).

use anyhow::Context;
use serde_json::json;

use super::{Ctx, Measurement, alternated};
use crate::scenarios::ingest_rest::posted;
use crate::seed::DeviceRef;

pub const SCENARIO: &str = "webhooks";
/// Webhooks on the project: the default bound of one project.
pub const WEBHOOKS: usize = 20;
/// The measurement with no webhook.
pub const ALONE: &str = "POST /deviceEvents, no webhook";

/// The measurement with `WEBHOOKS` webhooks down.
pub fn with_variant() -> String {
    format!("POST /deviceEvents, {WEBHOOKS} webhooks down")
}

pub async fn run(ctx: &Ctx<'_>, project_id: &str, devices: &[DeviceRef]) -> anyhow::Result<Vec<Measurement>> {
    anyhow::ensure!(!devices.is_empty(), "no devices to post events for");
    let variant = with_variant();
    let first = posted(ctx, SCENARIO, ALONE, devices).await?;
    let created = create_webhooks(ctx, project_id).await?;
    let measured = async {
        let second = posted(ctx, SCENARIO, &variant, devices).await?;
        let third = posted(ctx, SCENARIO, &variant, devices).await?;
        anyhow::Ok((second, third))
    }
    .await;
    // Deleted whatever came of the measurements: what is measured after runs with none.
    for id in &created {
        ctx.api
            .call(hyper::Method::DELETE, &format!("/api/v1/webhooks/{id}"), None)
            .await?;
    }
    let (second, third) = measured?;
    let fourth = posted(ctx, SCENARIO, ALONE, devices).await?;
    Ok(alternated::sides(
        [first, second, third, fourth],
        &format!("with {WEBHOOKS} webhooks down"),
        "the rate with no webhook",
        0.8,
        "",
    ))
}

/// `WEBHOOKS` webhooks on the project, each wanting telemetry and shadow, each receiver a port
/// bound and let go: nothing listens there, every delivery attempt is refused.
async fn create_webhooks(ctx: &Ctx<'_>, project_id: &str) -> anyhow::Result<Vec<String>> {
    let down = std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
    let mut created = Vec::with_capacity(WEBHOOKS);
    for i in 0..WEBHOOKS {
        let hook = ctx
            .api
            .post(
                &format!("/api/v1/projects/{project_id}/webhooks"),
                &json!({"url": format!("http://127.0.0.1:{down}/hook-{i}"), "types": ["telemetry", "shadow"]}),
            )
            .await?;
        let id = hook["id"].as_str().context("a created webhook has an id")?;
        created.push(id.to_owned());
    }
    Ok(created)
}
