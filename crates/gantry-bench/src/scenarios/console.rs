//! The operator console: each page's latency at one connection (on loopback, the server's time
//! plus a round trip) with the project holding many devices, each with a position for the
//! overview's map, and the bytes of a first load (the sign-in page and the assets it pulls in).

use std::sync::Arc;

use anyhow::{Context, bail};
use bytes::Bytes;
use futures::{StreamExt, TryStreamExt};
use hyper::header::{CONTENT_TYPE, COOKIE, HeaderValue, SET_COOKIE};
use hyper::{Method, StatusCode};
use serde_json::json;

use super::{Ctx, Measurement, measure};
use crate::http::Conn;
use crate::load::RequestFn;

pub const SCENARIO: &str = "console";

/// Tops the project up to `devices`, signs in to the console with the administrator's token and
/// measures each page.
pub async fn run(
    ctx: &Ctx<'_>,
    project: &str,
    model: &str,
    devices: usize,
    tag: &str,
) -> anyhow::Result<Vec<Measurement>> {
    let sample = top_up(ctx, project, model, devices, tag).await?;
    let placed = place(ctx, project, model).await?;
    // The devices were just created: PostgreSQL's autovacuum would analyze them within a minute,
    // and until then its plans for the project's devices assume a handful of rows.
    if let Some(database) = ctx.database
        && let Some(took) = database.catch_up().await?
    {
        eprintln!(
            "[console] VACUUM (ANALYZE) after creating the devices: {:.1} s",
            took.as_secs_f64()
        );
    }
    let (cookie, first_load) = sign_in(ctx).await?;
    eprintln!("[console] a first load is {first_load} bytes");
    let pages = [
        ("projects", "/console/projects".to_owned()),
        ("overview", format!("/console/projects/{project}")),
        ("devices, first page", format!("/console/projects/{project}/devices")),
        (
            "devices, page 200 by name",
            format!("/console/projects/{project}/devices?page=200"),
        ),
        (
            "devices, name filter",
            format!("/console/projects/{project}/devices?name={tag}-console-0777"),
        ),
        ("device", format!("/console/devices/{sample}")),
        ("models", "/console/models".to_owned()),
        ("model", format!("/console/models/{model}")),
        ("event logs", format!("/console/projects/{project}/logs")),
        ("alarms", format!("/console/projects/{project}/alarms")),
    ];
    let mut out = Vec::new();
    for (i, (variant, path)) in pages.into_iter().enumerate() {
        let mut m = page(ctx, &cookie, variant, path).await?;
        m.note = Some(match i {
            0 => format!("{devices} devices in the project; a first load is {first_load} bytes"),
            1 => format!("{devices} devices in the project, {placed} with a position ({SITES})"),
            _ => format!("{devices} devices in the project"),
        });
        out.push(m);
    }
    out.push(model_with_rules(ctx, &cookie, model, devices).await?);
    Ok(out)
}

/// One page's latency at one connection with the session's cookie.
async fn page(ctx: &Ctx<'_>, cookie: &HeaderValue, variant: &str, path: String) -> anyhow::Result<Measurement> {
    let target = ctx.target.clone();
    let cookie = cookie.clone();
    let make: RequestFn = Arc::new(move |_, _| {
        let mut request = target.request(Method::GET, &path, None);
        request.headers_mut().insert(COOKIE, cookie.clone());
        request
    });
    Ok(measure(ctx, SCENARIO, variant, 1, make).await?.0)
}

/// The model's page with three alarm rules on it, one of which reads a metadata key: their
/// status reads every device of the model once. The rules are deleted after.
async fn model_with_rules(
    ctx: &Ctx<'_>,
    cookie: &HeaderValue,
    model: &str,
    devices: usize,
) -> anyhow::Result<Measurement> {
    let rules = [
        json!({"name": "hot", "attributeCode": "temp", "severity": "MAJOR", "condition": {"op": ">", "value": 40}}),
        json!({"name": "band", "attributeCode": "temp", "severity": "MINOR",
               "condition": {"op": "between", "low": 10, "high": 20}}),
        json!({"name": "over its limit", "attributeCode": "temp", "severity": "CRITICAL",
               "condition": {"op": ">", "valueFrom": "maxTemp"}}),
    ];
    let mut created = Vec::new();
    for rule in &rules {
        let made = ctx
            .api
            .post(&format!("/api/v1/deviceModels/{model}/alarmRules"), rule)
            .await?;
        created.push(made["id"].as_str().context("a created rule has an id")?.to_owned());
    }
    let measured = page(ctx, cookie, "model, 3 alarm rules", format!("/console/models/{model}")).await;
    for id in &created {
        ctx.api
            .call(Method::DELETE, &format!("/api/v1/alarmRules/{id}"), None)
            .await?;
    }
    let mut m = measured?;
    m.note = Some(format!(
        "{devices} devices in the project; one rule reads a metadata key"
    ));
    Ok(m)
}

/// Creates devices until the project holds `devices`; returns one of them.
async fn top_up(ctx: &Ctx<'_>, project: &str, model: &str, devices: usize, tag: &str) -> anyhow::Result<String> {
    let listed = ctx
        .api
        .get(&format!("/api/v1/projects/{project}/devices?pageSize=1"))
        .await?;
    let held = listed["totalResults"].as_u64().unwrap_or(0) as usize;
    let names: Vec<String> = (held..devices).map(|i| format!("bench-{tag}-console-{i:04}")).collect();
    eprintln!("[console] creating {} devices", names.len());
    let created: Vec<String> = futures::stream::iter(names)
        .map(|name| {
            let body = json!({"deviceName": name, "projectId": project, "modelId": model});
            async move {
                Ok::<_, anyhow::Error>(
                    ctx.api.post("/api/v1/devices", &body).await?["id"]
                        .as_str()
                        .unwrap_or_default()
                        .to_owned(),
                )
            }
        })
        .buffer_unordered(16)
        .try_collect()
        .await
        .context("creating the console's devices")?;
    match created.first() {
        Some(id) => Ok(id.clone()),
        None => Ok(listed["results"][0]["id"]
            .as_str()
            .context("the project has no device")?
            .to_owned()),
    }
}

/// How the positions of `place` lie, for the overview's note.
const SITES: &str = "in sites of 50 devices within about 50 m, the sites about 1 km apart";

/// Gives the model a position attribute (a String on channel `g`) and each device of the
/// project a position (`SITES`), 16 requests at a time; returns how many devices it placed.
async fn place(ctx: &Ctx<'_>, project: &str, model: &str) -> anyhow::Result<usize> {
    let path = format!("/api/v1/deviceModels/{model}");
    let mut attributes = ctx.api.get(&path).await?["attributesMap"].clone();
    if attributes.get("pos").is_none() {
        attributes["pos"] = json!({"name": "Position", "dataType": "String", "readable": "R", "channel": "g"});
        ctx.api
            .call(Method::PUT, &path, Some(&json!({"attributesMap": attributes})))
            .await
            .context("adding the position attribute")?;
    }
    let mut ids = Vec::new();
    for page in 1.. {
        let listed = ctx
            .api
            .get(&format!(
                "/api/v1/projects/{project}/devices?pageSize=1000&pageNo={page}"
            ))
            .await?;
        let results = listed["results"].as_array().cloned().unwrap_or_default();
        ids.extend(results.iter().filter_map(|d| d["id"].as_str().map(str::to_owned)));
        if results.len() < 1000 {
            break;
        }
    }
    eprintln!("[console] placing {} devices", ids.len());
    let now = gantry_core::time::format_timestamp(gantry_core::time::now_ms());
    futures::stream::iter(ids.iter().enumerate())
        .map(|(i, id)| {
            let (site, within) = (i / 50, i % 50);
            let lat = 31.15 + (site / 20) as f64 * 0.01 + (within / 7) as f64 * 0.00006;
            let lng = 121.40 + (site % 20) as f64 * 0.01 + (within % 7) as f64 * 0.00007;
            let body = json!({"deviceId": id, "attributeCode": "pos", "attributeData": format!("{lat:.5},{lng:.5}"),
                              "attributeDataType": "String", "deviceTime": now});
            async move { ctx.api.post("/api/v1/deviceEvents", &body).await }
        })
        .buffer_unordered(16)
        .try_collect::<Vec<_>>()
        .await
        .context("placing the console's devices")?;
    Ok(ids.len())
}

/// Signs in as a browser would; returns the session cookie and the bytes of a first load.
async fn sign_in(ctx: &Ctx<'_>) -> anyhow::Result<(HeaderValue, usize)> {
    let mut conn = Conn::connect(ctx.target.addr).await?;
    let (_, headers, page) = conn
        .send_full(ctx.target.request(Method::GET, "/console/sign-in", None))
        .await?;
    let pre = cookie_of(&headers, "gantry_console_sign_in")?;
    let page = String::from_utf8_lossy(&page).into_owned();
    let mut first_load = page.len();
    for asset in page.split('"').filter(|s| s.starts_with("/console/assets/")) {
        let (status, body) = conn.send(ctx.target.request(Method::GET, asset, None)).await?;
        if status != StatusCode::OK {
            bail!("{asset} answered {status}");
        }
        first_load += body.len();
    }
    let csrf = page
        .split(r#"name="csrf" value=""#)
        .nth(1)
        .and_then(|rest| rest.split('"').next())
        .context("the sign-in form has no CSRF token")?;
    let token = ctx.target.bearer_str().trim_start_matches("Bearer ");
    let form = serde_urlencoded::to_string([("csrf", csrf), ("token", token)])?;
    let mut request = ctx
        .target
        .request(Method::POST, "/console/session", Some(Bytes::from(form)));
    request.headers_mut().insert(
        CONTENT_TYPE,
        HeaderValue::from_static("application/x-www-form-urlencoded"),
    );
    request.headers_mut().insert(COOKIE, HeaderValue::from_str(&pre)?);
    let (status, headers, _) = conn.send_full(request).await?;
    if status != StatusCode::SEE_OTHER {
        bail!("signing in to the console answered {status}");
    }
    Ok((
        HeaderValue::from_str(&cookie_of(&headers, "gantry_console")?)?,
        first_load,
    ))
}

/// `name=value` of the `Set-Cookie` header that sets `name`.
fn cookie_of(headers: &hyper::HeaderMap, name: &str) -> anyhow::Result<String> {
    headers
        .get_all(SET_COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .filter_map(|v| v.split(';').next())
        .find(|pair| pair.split_once('=').is_some_and(|(k, _)| k == name))
        .map(str::to_owned)
        .with_context(|| format!("no {name} cookie was set"))
}
