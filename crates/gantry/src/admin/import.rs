//! `gantry admin devices import`: creates the devices of a CSV file in one project, a bounded
//! number of requests at a time, and writes the new ids and access tokens to an owner-only CSV.
//! Names already in the project are skipped, so a rerun after a partial import finishes it.

use std::collections::{HashMap, HashSet};
use std::fs::File;
use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};

use anyhow::{Context, bail};
use clap::Args;
use futures::StreamExt;
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use serde_json::{Value, json};

use super::catalog::{model_id, project_id};
use super::client::{Client, segment};
use super::output::Output;

#[derive(Debug, Args)]
pub struct ImportArgs {
    /// The CSV file: a header row with `deviceName` (required) and optionally `comments`,
    /// `virtual` (true/false), `status` (Active/Locked), `metadata` (a JSON object)
    pub file: PathBuf,
    /// Project id or name
    #[arg(long)]
    pub project: String,
    /// Model id or name of every device
    #[arg(long)]
    pub model: String,
    /// Where to write `deviceName,id,accessToken` of the created devices (mode 0600)
    #[arg(long, short)]
    pub output: PathBuf,
    /// Overwrite --output if it exists
    #[arg(long)]
    pub force: bool,
    /// Requests in flight at once
    #[arg(long, default_value_t = 16, value_parser = clap::value_parser!(u16).range(1..=256))]
    pub concurrency: u16,
}

/// One device to create: its line in the file and the request body.
struct Row {
    line: u64,
    name: String,
    body: Value,
}

/// A row the import did not create, and why.
#[derive(serde::Serialize)]
struct Failure {
    line: u64,
    #[serde(rename = "deviceName")]
    name: String,
    reason: String,
}

pub async fn run(client: &Client, out: Output, args: ImportArgs) -> anyhow::Result<()> {
    let (rows, mut failed) = read_rows(&args.file)?;
    let project = project_id(client, &args.project).await?;
    let model = model_id(client, &args.model).await?;
    // Opened before the first device is created: a refusal to overwrite changes nothing.
    let mut tokens = open_tokens_file(&args.output, args.force)?;
    tokens.write_record(["deviceName", "id", "accessToken"])?;
    tokens.flush()?;

    let path = format!("/projects/{}/devices", segment(&project));
    let existing: HashSet<String> = client
        .all(&path, &[], None)
        .await?
        .into_iter()
        .filter_map(|d| d["deviceName"].as_str().map(str::to_owned))
        .collect();
    let (skip, create): (Vec<Row>, Vec<Row>) = rows.into_iter().partition(|row| existing.contains(&row.name));

    let progress = progress_bar(create.len() as u64);
    let (mut created, mut attempted) = (0u64, 0usize);
    let to_create = create.len();
    // Ctrl-C stops new creates; those in flight finish and their tokens are written.
    let interrupted = AtomicBool::new(false);
    let stop = async {
        match tokio::signal::ctrl_c().await {
            Ok(()) => interrupted.store(true, Ordering::Relaxed),
            Err(_) => std::future::pending().await,
        }
    };
    let mut results = futures::stream::iter(create)
        .take_until(Box::pin(stop))
        .map(|mut row| {
            row.body["projectId"] = json!(project);
            row.body["modelId"] = json!(model);
            async move {
                let result = client.post("/devices", &row.body).await;
                (row, result)
            }
        })
        .buffer_unordered(usize::from(args.concurrency));
    while let Some((row, result)) = results.next().await {
        attempted += 1;
        match result {
            Ok(device) => {
                let id = device["id"].as_str().unwrap_or_default();
                let token = device["accessToken"].as_str().unwrap_or_default();
                // Handed to the OS at once: the token of a created device must outlive a kill.
                tokens.write_record([row.name.as_str(), id, token])?;
                tokens.flush()?;
                created += 1;
            }
            Err(error) => failed.push(Failure {
                line: row.line,
                name: row.name,
                reason: format!("{:#}", anyhow::Error::from(error)),
            }),
        }
        progress.inc(1);
    }
    progress.finish_and_clear();
    tokens
        .into_inner()
        .map_err(|e| anyhow::Error::new(e.into_error()))
        .and_then(|file| Ok(file.sync_all()?))
        .with_context(|| format!("writing {}", args.output.display()))?;
    failed.sort_by_key(|f| f.line);

    let skipped = skip.len();
    let not_attempted = to_create - attempted;
    if out.json {
        let summary = json!({"created": created, "skipped": skipped, "failed": failed,
                             "notAttempted": not_attempted, "output": args.output});
        println!("{}", serde_json::to_string_pretty(&summary)?);
    } else {
        println!(
            "created {created}, skipped {skipped} (already in the project), failed {}",
            failed.len()
        );
        for failure in &failed {
            println!("  line {} ({}): {}", failure.line, failure.name, failure.reason);
        }
        if not_attempted > 0 {
            println!("interrupted: {not_attempted} not attempted; run the import again to create them");
        }
        println!(
            "ids and access tokens of the created devices: {}",
            args.output.display()
        );
    }
    if interrupted.load(Ordering::Relaxed) {
        bail!("interrupted");
    }
    if !failed.is_empty() {
        bail!("{} of the file's devices were not created", failed.len());
    }
    Ok(())
}

/// The rows of the file; a row that cannot become a device is a failure with its reason, and a
/// name that appears twice is created once.
fn read_rows(path: &Path) -> anyhow::Result<(Vec<Row>, Vec<Failure>)> {
    let mut reader = csv::ReaderBuilder::new()
        .trim(csv::Trim::All)
        .from_path(path)
        .with_context(|| format!("reading {}", path.display()))?;
    let headers = reader
        .headers()
        .with_context(|| format!("reading {}", path.display()))?
        .clone();
    let column = |name: &str| headers.iter().position(|h| h.eq_ignore_ascii_case(name));
    let Some(name_column) = column("deviceName") else {
        bail!("{}: the header row has no `deviceName` column", path.display());
    };
    let known = ["deviceName", "comments", "virtual", "status", "metadata"];
    if let Some(unknown) = headers
        .iter()
        .find(|h| !known.iter().any(|k| k.eq_ignore_ascii_case(h)))
    {
        bail!(
            "{}: unknown column `{unknown}` (known: {})",
            path.display(),
            known.join(", ")
        );
    }
    let (comments, is_virtual, status, metadata) = (
        column("comments"),
        column("virtual"),
        column("status"),
        column("metadata"),
    );
    let mut rows = Vec::new();
    let mut failed = Vec::new();
    let mut seen: HashMap<String, u64> = HashMap::new();
    for record in reader.records() {
        let record = record.with_context(|| format!("reading {}", path.display()))?;
        let line = record.position().map_or(0, |p| p.line());
        let field = |i: Option<usize>| i.and_then(|i| record.get(i)).filter(|v| !v.is_empty());
        let name = record.get(name_column).unwrap_or_default().to_owned();
        let fail = |reason: String| Failure {
            line,
            name: name.clone(),
            reason,
        };
        if name.is_empty() {
            failed.push(fail("deviceName is empty".to_owned()));
            continue;
        }
        if let Some(first) = seen.insert(name.clone(), line) {
            failed.push(fail(format!("the name repeats line {first}")));
            continue;
        }
        let mut body = json!({"deviceName": name});
        if let Some(value) = field(comments) {
            body["comments"] = json!(value);
        }
        if let Some(value) = field(status) {
            body["status"] = json!(value);
        }
        if let Some(value) = field(is_virtual) {
            match value.to_ascii_lowercase().as_str() {
                "true" | "yes" | "1" => body["virtual"] = json!(true),
                "false" | "no" | "0" => body["virtual"] = json!(false),
                _ => {
                    failed.push(fail(format!("virtual: `{value}` is not true or false")));
                    continue;
                }
            }
        }
        if let Some(value) = field(metadata) {
            match serde_json::from_str::<Value>(value) {
                Ok(object @ Value::Object(_)) => body["metadata"] = object,
                _ => {
                    failed.push(fail("metadata: not a JSON object".to_owned()));
                    continue;
                }
            }
        }
        rows.push(Row { line, name, body });
    }
    Ok((rows, failed))
}

/// The owner-only tokens file; an existing one is kept unless `force`.
fn open_tokens_file(path: &Path, force: bool) -> anyhow::Result<csv::Writer<File>> {
    use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
    let mut options = std::fs::OpenOptions::new();
    options.write(true).mode(0o600);
    if force {
        options.create(true).truncate(true);
    } else {
        options.create_new(true);
    }
    let file = options.open(path).map_err(|e| {
        if e.kind() == std::io::ErrorKind::AlreadyExists {
            anyhow::anyhow!(
                "{} exists (it may hold the tokens of an earlier import): choose another --output, or pass --force",
                path.display()
            )
        } else {
            anyhow::Error::new(e).context(format!("creating {}", path.display()))
        }
    })?;
    // An existing file opened with --force keeps its old mode unless it is set here.
    file.set_permissions(std::fs::Permissions::from_mode(0o600))
        .with_context(|| format!("restricting {} to its owner", path.display()))?;
    Ok(csv::Writer::from_writer(file))
}

/// A progress bar on stderr, hidden when stderr is not a terminal.
pub fn progress_bar(len: u64) -> ProgressBar {
    let bar = ProgressBar::with_draw_target(Some(len), ProgressDrawTarget::stderr());
    if !std::io::stderr().is_terminal() {
        bar.set_draw_target(ProgressDrawTarget::hidden());
    }
    bar.set_style(
        ProgressStyle::with_template("{bar:40} {pos}/{len} {per_sec} eta {eta}")
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    bar
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_keep_their_fields_and_bad_rows_say_why() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("devices.csv");
        std::fs::write(
            &path,
            "deviceName,comments,virtual,metadata\n\
             a,first,true,\"{\"\"k\"\": 1}\"\n\
             b,,maybe,\n\
             a,again,,\n\
             ,,,\n\
             c,,,[1]\n",
        )
        .unwrap();
        let (rows, failed) = read_rows(&path).unwrap();
        assert_eq!(rows.len(), 1);
        assert_eq!(
            rows[0].body,
            json!({"deviceName": "a", "comments": "first", "virtual": true, "metadata": {"k": 1}})
        );
        let reasons: Vec<_> = failed.iter().map(|f| (f.line, f.reason.as_str())).collect();
        assert_eq!(
            reasons,
            [
                (3, "virtual: `maybe` is not true or false"),
                (4, "the name repeats line 2"),
                (5, "deviceName is empty"),
                (6, "metadata: not a JSON object"),
            ]
        );
    }

    #[test]
    fn a_file_without_the_name_column_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("devices.csv");
        std::fs::write(&path, "name\nx\n").unwrap();
        let error = read_rows(&path).err().unwrap().to_string();
        assert!(error.contains("deviceName"), "{error}");
    }
}
