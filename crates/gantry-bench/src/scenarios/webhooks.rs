//! REST ingest with webhooks whose receivers are down: the same posts as `ingest-rest`, first
//! with no webhook on the project, then with `WEBHOOKS` of them (each wanting telemetry and
//! shadow, each receiver a closed port on this machine), in the same run. An event is written
//! to the outbox once whatever the number of webhooks, so the second rate should stay near the
//! first (the target: at least 0.8 of it).

use serde_json::json;

use super::{Ctx, Measurement, measure};
use crate::scenarios::ingest_rest::posts;
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
    crate::server::wait_until_idle(ctx.pid, crate::server::SETTLE).await;
    let (alone, _) = measure(
        ctx,
        SCENARIO,
        "POST /deviceEvents, no webhook",
        ctx.connections,
        posts(ctx, devices)?,
    )
    .await?;
    // A port bound, then let go: nothing listens there, every delivery attempt is refused.
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
        created.push(hook["result"]["id"].as_str().unwrap_or_default().to_owned());
    }
    let variant = with_variant();
    crate::server::wait_until_idle(ctx.pid, crate::server::SETTLE).await;
    let measured = measure(ctx, SCENARIO, &variant, ctx.connections, posts(ctx, devices)?).await;
    for id in &created {
        let _ = ctx
            .api
            .call(hyper::Method::DELETE, &format!("/api/v1/webhooks/{id}"), None)
            .await;
    }
    let (mut with, _) = measured?;
    let ratio = with.requests_per_second / alone.requests_per_second.max(f64::EPSILON);
    with.note = Some(format!(
        "{ratio:.2} x the rate with no webhook (same run; target >= 0.80)"
    ));
    eprintln!("  {SCENARIO}: with {WEBHOOKS} webhooks down {ratio:.2} x the rate with none");
    Ok(vec![alone, with])
}
