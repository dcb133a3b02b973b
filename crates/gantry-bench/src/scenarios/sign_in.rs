//! Sign-in: `POST /auth/login` throughput (each one an Argon2id check), and what a request
//! costs with a user's session token against one with an application token, in the same run:
//! `GET /devices/{id}` at many connections with each.

use std::sync::Arc;

use anyhow::Context;
use bytes::Bytes;
use hyper::Method;
use serde_json::json;

use super::{Ctx, Measurement, measure};
use crate::http::bearer;
use crate::load::RequestFn;

pub const SCENARIO: &str = "sign-in";
pub const LOGIN_VARIANT: &str = "POST /auth/login";
pub const SESSION_VARIANT: &str = "GET /devices/{id}, session token";
pub const APPLICATION_VARIANT: &str = "GET /devices/{id}, application token";
/// Sign-ins are measured at this many connections at most: each costs the server an Argon2id
/// check, tens of milliseconds of one core, so more would measure the queue.
const LOGIN_CONNECTIONS: usize = 8;
const PASSWORD: &str = "bench-password-1";

/// Creates an OPERATOR user of `project`, then measures its sign-in and its reads of `device`
/// beside the project's application token's.
pub async fn run(ctx: &Ctx<'_>, project: &str, device: &str, tag: &str) -> anyhow::Result<Vec<Measurement>> {
    let username = format!("bench-{tag}");
    ctx.api
        .post(
            "/api/v1/users",
            &json!({"username": username, "password": PASSWORD, "role": "OPERATOR", "projectIds": [project]}),
        )
        .await
        .context("creating the bench user")?;
    let app_token = ctx.api.get(&format!("/api/v1/projects/{project}")).await?["applicationAccessToken"]
        .as_str()
        .context("the project's applicationAccessToken")?
        .to_owned();
    let login = Bytes::from(json!({"username": username, "password": PASSWORD}).to_string());
    let session = ctx
        .api
        .post(
            "/api/v1/auth/login",
            &json!({"username": username, "password": PASSWORD}),
        )
        .await?;
    let session_token = session["token"].as_str().context("the session token")?.to_owned();

    let mut out = Vec::new();
    let target = ctx.target.clone();
    let make: RequestFn = Arc::new(move |_, _| target.request(Method::POST, "/api/v1/auth/login", Some(login.clone())));
    let connections = LOGIN_CONNECTIONS.min(ctx.connections);
    out.push(measure(ctx, SCENARIO, LOGIN_VARIANT, connections, make).await?.0);

    let path = format!("/api/v1/devices/{device}");
    // Alternated twice, so that a drift of the machine falls on both.
    for (variant, token) in [
        (SESSION_VARIANT, &session_token),
        (APPLICATION_VARIANT, &app_token),
        (SESSION_VARIANT, &session_token),
        (APPLICATION_VARIANT, &app_token),
    ] {
        let (target, header, path) = (ctx.target.clone(), bearer(token)?, path.clone());
        let make: RequestFn = Arc::new(move |_, _| target.request_as(&header, Method::GET, &path, None));
        out.push(measure(ctx, SCENARIO, variant, ctx.connections, make).await?.0);
    }
    Ok(out)
}
