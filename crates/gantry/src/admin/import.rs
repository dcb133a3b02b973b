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
    let to_create = create.len();
    let ids = (project.as_str(), model.as_str());
    let done = create_all(
        client,
        create,
        ids,
        usize::from(args.concurrency),
        &mut tokens,
        &mut failed,
    )
    .await?;
    tokens
        .into_inner()
        .map_err(|e| anyhow::Error::new(e.into_error()))
        .and_then(|file| Ok(file.sync_all()?))
        .with_context(|| format!("writing {}", args.output.display()))?;
    failed.sort_by_key(|f| f.line);
    let summary = Summary {
        created: done.created,
        skipped: skip.len(),
        not_attempted: to_create - done.attempted,
        failed,
        output: args.output,
    };
    summary.print(out)?;
    if done.interrupted {
        bail!("interrupted");
    }
    if !summary.failed.is_empty() {
        bail!("{} of the file's devices were not created", summary.failed.len());
    }
    Ok(())
}

/// What `create_all` did.
struct Created {
    created: u64,
    attempted: usize,
    interrupted: bool,
}

/// Creates `rows` in the project and model `ids`, `concurrency` at a time, writing each created
/// device's token to `tokens` at once and each refusal to `failed`. Ctrl-C stops new creates;
/// those in flight finish and their tokens are written.
async fn create_all(
    client: &Client,
    rows: Vec<Row>,
    (project, model): (&str, &str),
    concurrency: usize,
    tokens: &mut csv::Writer<File>,
    failed: &mut Vec<Failure>,
) -> anyhow::Result<Created> {
    let progress = progress_bar(rows.len() as u64);
    let (mut created, mut attempted) = (0u64, 0usize);
    let interrupted = AtomicBool::new(false);
    let stop = async {
        match tokio::signal::ctrl_c().await {
            Ok(()) => interrupted.store(true, Ordering::Relaxed),
            Err(_) => std::future::pending().await,
        }
    };
    let mut results = futures::stream::iter(rows)
        .take_until(Box::pin(stop))
        .map(|mut row| {
            row.body["projectId"] = json!(project);
            row.body["modelId"] = json!(model);
            async move {
                let result = client.post("/devices", &row.body).await;
                (row, result)
            }
        })
        .buffer_unordered(concurrency);
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
    Ok(Created {
        created,
        attempted,
        interrupted: interrupted.load(Ordering::Relaxed),
    })
}

/// What an import says at its end.
struct Summary {
    created: u64,
    skipped: usize,
    not_attempted: usize,
    failed: Vec<Failure>,
    output: PathBuf,
}

impl Summary {
    fn print(&self, out: Output) -> anyhow::Result<()> {
        if out.json {
            let summary = json!({"created": self.created, "skipped": self.skipped, "failed": self.failed,
                                 "notAttempted": self.not_attempted, "output": self.output});
            println!("{}", serde_json::to_string_pretty(&summary)?);
            return Ok(());
        }
        println!(
            "created {}, skipped {} (already in the project), failed {}",
            self.created,
            self.skipped,
            self.failed.len()
        );
        for failure in &self.failed {
            println!("  line {} ({}): {}", failure.line, failure.name, failure.reason);
        }
        if self.not_attempted > 0 {
            println!(
                "interrupted: {} not attempted; run the import again to create them",
                self.not_attempted
            );
        }
        println!(
            "ids and access tokens of the created devices: {}",
            self.output.display()
        );
        Ok(())
    }
}

/// The columns a file may have, and where its header row puts them.
struct Columns {
    name: usize,
    comments: Option<usize>,
    is_virtual: Option<usize>,
    status: Option<usize>,
    metadata: Option<usize>,
}

impl Columns {
    const KNOWN: [&str; 5] = ["deviceName", "comments", "virtual", "status", "metadata"];

    fn of(headers: &csv::StringRecord, path: &Path) -> anyhow::Result<Columns> {
        let column = |name: &str| headers.iter().position(|h| h.eq_ignore_ascii_case(name));
        let Some(name) = column("deviceName") else {
            bail!("{}: the header row has no `deviceName` column", path.display());
        };
        if let Some(unknown) = headers
            .iter()
            .find(|h| !Self::KNOWN.iter().any(|k| k.eq_ignore_ascii_case(h)))
        {
            bail!(
                "{}: unknown column `{unknown}` (known: {})",
                path.display(),
                Self::KNOWN.join(", ")
            );
        }
        Ok(Columns {
            name,
            comments: column("comments"),
            is_virtual: column("virtual"),
            status: column("status"),
            metadata: column("metadata"),
        })
    }

    /// The request body of a record named `name`, or why it cannot become a device.
    fn body(&self, record: &csv::StringRecord, name: &str) -> Result<Value, String> {
        let field = |i: Option<usize>| i.and_then(|i| record.get(i)).filter(|v| !v.is_empty());
        let mut body = json!({"deviceName": name});
        if let Some(value) = field(self.comments) {
            body["comments"] = json!(value);
        }
        if let Some(value) = field(self.status) {
            body["status"] = json!(value);
        }
        if let Some(value) = field(self.is_virtual) {
            body["virtual"] = match value.to_ascii_lowercase().as_str() {
                "true" | "yes" | "1" => json!(true),
                "false" | "no" | "0" => json!(false),
                _ => return Err(format!("virtual: `{value}` is not true or false")),
            };
        }
        if let Some(value) = field(self.metadata) {
            match serde_json::from_str::<Value>(value) {
                Ok(object @ Value::Object(_)) => body["metadata"] = object,
                _ => return Err("metadata: not a JSON object".to_owned()),
            }
        }
        Ok(body)
    }
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
    let columns = Columns::of(&headers, path)?;
    let mut rows = Vec::new();
    let mut failed = Vec::new();
    let mut seen: HashMap<String, u64> = HashMap::new();
    for record in reader.records() {
        let record = record.with_context(|| format!("reading {}", path.display()))?;
        let line = record.position().map_or(0, |p| p.line());
        let name = record.get(columns.name).unwrap_or_default().to_owned();
        let refused = if name.is_empty() {
            Err("deviceName is empty".to_owned())
        } else if let Some(first) = seen.insert(name.clone(), line) {
            Err(format!("the name repeats line {first}"))
        } else {
            columns.body(&record, &name)
        };
        match refused {
            Ok(body) => rows.push(Row { line, name, body }),
            Err(reason) => failed.push(Failure { line, name, reason }),
        }
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
