//! The baseline: `GET /healthz` of the same server at the same concurrency, in the same run. It
//! is the most this server can answer on this machine right now (HTTP, routing, middleware and
//! the client's own cost, no store, no auth), so the other figures are read as ratios to it.

use std::sync::Arc;

use hyper::Method;

use super::{Ctx, Measurement, measure};
use crate::load::RequestFn;

pub const SCENARIO: &str = "baseline";

pub async fn run(ctx: &Ctx<'_>, connection_counts: &[usize]) -> anyhow::Result<Vec<Measurement>> {
    let mut out = Vec::new();
    for &connections in connection_counts {
        let target = ctx.target.clone();
        let make: RequestFn = Arc::new(move |_, _| target.request(Method::GET, "/healthz", None));
        let (m, _) = measure(ctx, SCENARIO, "GET /healthz", connections, make).await?;
        out.push(m);
    }
    Ok(out)
}
