//! The one-record commands of `gantry admin`: tenants, projects, models and devices.

use std::path::Path;

use anyhow::{Context, bail};
use serde_json::{Value, json};

use super::client::{Client, segment};
use super::output::{DEVICE_COLUMNS, MODEL_COLUMNS, Output, PROJECT_COLUMNS, TENANT_COLUMNS};
use super::{DeviceCommand, DeviceListArgs, ModelCommand, ProjectCommand, TenantCommand};

pub async fn tenants(client: &Client, out: Output, command: TenantCommand) -> anyhow::Result<()> {
    match command {
        TenantCommand::Create { name } => {
            let tenant = client.post("/tenants", &json!({"name": name})).await?;
            out.record(&tenant);
        }
        TenantCommand::List { limit } => out.list(&client.all("/tenants", &[], limit).await?, TENANT_COLUMNS),
    }
    Ok(())
}

pub async fn projects(client: &Client, out: Output, command: ProjectCommand) -> anyhow::Result<()> {
    match command {
        ProjectCommand::Create {
            name,
            description,
            status,
        } => {
            let mut body = json!({"name": name});
            insert(&mut body, "description", description);
            insert(&mut body, "status", status);
            out.record(&client.post("/projects", &body).await?);
        }
        ProjectCommand::List { status, limit } => {
            let query: Vec<_> = status.map(|s| ("status", s)).into_iter().collect();
            out.list(&client.all("/projects", &query, limit).await?, PROJECT_COLUMNS);
        }
        ProjectCommand::Get { project } => {
            let id = project_id(client, &project).await?;
            out.record(&client.get(&format!("/projects/{}", segment(&id)), &[]).await?);
        }
        ProjectCommand::RotateToken { project, grace } => {
            let id = project_id(client, &project).await?;
            let path = format!("/projects/{}/applicationAccessToken/rotate", segment(&id));
            out.record(&client.post(&path, &json!({"graceSeconds": grace})).await?);
        }
    }
    Ok(())
}

pub async fn models(client: &Client, out: Output, command: ModelCommand) -> anyhow::Result<()> {
    match command {
        ModelCommand::Apply { file } => {
            let body = read_model(&file)?;
            let Some(name) = body.get("name").and_then(Value::as_str) else {
                bail!("{}: the model has no `name` (a string)", file.display());
            };
            let existing = find_by_name(client, "/deviceModels", "name", name).await?;
            let (model, verb) = match existing {
                Some(id) => (
                    client.put(&format!("/deviceModels/{}", segment(&id)), &body).await?,
                    "updated",
                ),
                None => (client.post("/deviceModels", &body).await?, "created"),
            };
            out.done(
                &format!(
                    "{verb} model {} ({})",
                    model["name"].as_str().unwrap_or(name),
                    str_of(&model["id"])
                ),
                &model,
            );
        }
        ModelCommand::List { limit } => {
            out.list(&client.all("/deviceModels", &[], limit).await?, MODEL_COLUMNS);
        }
        ModelCommand::Get { model } => {
            let id = model_id(client, &model).await?;
            out.record(&client.get(&format!("/deviceModels/{}", segment(&id)), &[]).await?);
        }
    }
    Ok(())
}

pub async fn devices(client: &Client, out: Output, command: DeviceCommand) -> anyhow::Result<()> {
    match command {
        DeviceCommand::Create {
            name,
            project,
            model,
            comments,
            r#virtual,
            locked,
        } => {
            let mut body = json!({
                "deviceName": name,
                "projectId": project_id(client, &project).await?,
                "modelId": model_id(client, &model).await?,
                "virtual": r#virtual,
                "status": if locked { "Locked" } else { "Active" },
            });
            insert(&mut body, "comments", comments);
            out.record(&client.post("/devices", &body).await?);
        }
        DeviceCommand::Get { id } => out.record(&client.get(&device_path(&id), &[]).await?),
        DeviceCommand::List(args) => list_devices(client, out, args).await?,
        DeviceCommand::Lock { id } => set_status(client, out, &id, "Locked").await?,
        DeviceCommand::Unlock { id } => set_status(client, out, &id, "Active").await?,
        DeviceCommand::RotateToken { id, grace } => {
            let path = format!("{}/accessToken/rotate", device_path(&id));
            out.record(&client.post(&path, &json!({"graceSeconds": grace})).await?);
        }
        DeviceCommand::Delete { id } => {
            client.delete(&device_path(&id)).await?;
            out.done(&format!("deleted device {id}"), &json!({"id": id, "deleted": true}));
        }
        DeviceCommand::Import(_) => unreachable!("run() hands imports to import::run"),
    }
    Ok(())
}

async fn list_devices(client: &Client, out: Output, args: DeviceListArgs) -> anyhow::Result<()> {
    let model = match &args.model {
        Some(model) => Some(model_id(client, model).await?),
        None => None,
    };
    let Some(project) = &args.project else {
        let model = model.expect("clap requires --project or --model");
        let path = format!("/deviceModels/{}/devices", segment(&model));
        out.list(&client.all(&path, &[], args.limit).await?, DEVICE_COLUMNS);
        return Ok(());
    };
    let project = project_id(client, project).await?;
    let query: Vec<(&str, String)> = [
        ("modelId", model),
        ("deviceName", args.name),
        ("deviceType", args.device_type),
        ("status", args.status),
        ("isVirtual", args.r#virtual.map(|v| v.to_string())),
        ("sortBy", args.sort_by),
        ("sortOrder", args.sort_order),
    ]
    .into_iter()
    .filter_map(|(name, value)| value.map(|v| (name, v)))
    .collect();
    let path = format!("/projects/{}/devices", segment(&project));
    out.list(&client.all(&path, &query, args.limit).await?, DEVICE_COLUMNS);
    Ok(())
}

async fn set_status(client: &Client, out: Output, id: &str, status: &str) -> anyhow::Result<()> {
    let device = client.put(&device_path(id), &json!({"status": status})).await?;
    let verb = if status == "Locked" { "locked" } else { "unlocked" };
    out.done(
        &format!("{verb} device {} ({id})", str_of(&device["deviceName"])),
        &device,
    );
    Ok(())
}

fn device_path(id: &str) -> String {
    format!("/devices/{}", segment(id))
}

/// A project given by id or by name.
pub async fn project_id(client: &Client, project: &str) -> anyhow::Result<String> {
    resolve(client, "/projects", "project", project).await
}

/// A model given by id or by name.
pub async fn model_id(client: &Client, model: &str) -> anyhow::Result<String> {
    resolve(client, "/deviceModels", "model", model).await
}

/// An id stays an id (the server says whether it exists); anything else is looked up by name.
async fn resolve(client: &Client, listing: &str, kind: &str, given: &str) -> anyhow::Result<String> {
    if uuid::Uuid::parse_str(given).is_ok() {
        return Ok(given.to_owned());
    }
    find_by_name(client, listing, "name", given)
        .await?
        .with_context(|| format!("no {kind} named `{given}` (nor is it an id)"))
}

/// The id of the record of `listing` whose `field` is exactly `name`.
async fn find_by_name(client: &Client, listing: &str, field: &str, name: &str) -> anyhow::Result<Option<String>> {
    let records = client.all(listing, &[], None).await?;
    Ok(records
        .iter()
        .find(|r| r[field].as_str() == Some(name))
        .and_then(|r| r["id"].as_str())
        .map(str::to_owned))
}

fn read_model(path: &Path) -> anyhow::Result<Value> {
    let text = std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let json = path.extension().is_some_and(|e| e.eq_ignore_ascii_case("json"));
    let value: Value = if json {
        serde_json::from_str(&text).with_context(|| format!("{} is not valid JSON", path.display()))?
    } else {
        serde_norway::from_str(&text).with_context(|| format!("{} is not valid YAML", path.display()))?
    };
    if !value.is_object() {
        bail!(
            "{}: a model file holds one object (name, deviceType, attributesMap, ...)",
            path.display()
        );
    }
    Ok(value)
}

fn insert(body: &mut Value, field: &str, value: Option<String>) {
    if let Some(value) = value {
        body[field] = Value::String(value);
    }
}

fn str_of(value: &Value) -> &str {
    value.as_str().unwrap_or("?")
}
