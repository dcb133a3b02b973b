//! `gantry admin events export`: a device's events as CSV or JSON lines, read and written one page
//! at a time, so an export of millions of events holds one page in memory.

use std::io::Write;
use std::path::PathBuf;

use anyhow::{Context, bail};
use chrono::{DateTime, FixedOffset, NaiveDate, Utc};
use clap::{Args, ValueEnum};
use serde_json::Value;

use super::client::{Client, MAX_PAGE_SIZE, segment};
use super::import::progress_bar;

#[derive(Debug, Args)]
pub struct ExportArgs {
    /// The device id
    #[arg(long)]
    pub device: String,
    /// Inclusive start: 2024-05-01T08:00:00.000+0800, RFC 3339 (2024-05-01T00:00:00Z) or a
    /// date (midnight UTC) [default: all time]
    #[arg(long, value_parser = parse_time)]
    pub start: Option<DateTime<FixedOffset>>,
    /// Inclusive end, same forms [default: now, so events arriving meanwhile do not shift pages]
    #[arg(long, value_parser = parse_time)]
    pub end: Option<DateTime<FixedOffset>>,
    /// Which time --start and --end apply to
    #[arg(long, value_enum, default_value_t = FilterBy::DeviceTimestamp)]
    pub filter_by: FilterBy,
    #[arg(long, value_enum, default_value_t = Format::Csv)]
    pub format: Format,
    /// Write here instead of stdout
    #[arg(long, short)]
    pub output: Option<PathBuf>,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum Format {
    /// A header row, then one row per event; attributeData as JSON unless it is a string
    Csv,
    /// One event per line, as the API returns it
    Jsonl,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum FilterBy {
    #[value(name = "deviceTimestamp")]
    DeviceTimestamp,
    #[value(name = "ingressTimeStamp")]
    IngressTimeStamp,
}

/// The CSV columns: the fields of a DeviceEvent.
const COLUMNS: &[&str] = &[
    "id",
    "deviceId",
    "projectId",
    "modelId",
    "attributeCode",
    "attributeType",
    "attributeData",
    "channel",
    "deviceTimestamp",
    "ingressTimeStamp",
    "correlationId",
    "context",
    "createdBy",
    "createdTime",
];

/// The API's time format, `yyyy-MM-dd'T'HH:mm:ss.SSSZ`.
const API_TIME: &str = "%Y-%m-%dT%H:%M:%S%.3f%z";

pub async fn run(client: &Client, args: ExportArgs) -> anyhow::Result<()> {
    let end = args.end.unwrap_or_else(|| Utc::now().fixed_offset());
    if let Some(start) = args.start
        && start > end
    {
        bail!("--start {start} is after --end {end}");
    }
    let mut query = vec![
        ("endDate", end.format(API_TIME).to_string()),
        (
            "filterBy",
            match args.filter_by {
                FilterBy::DeviceTimestamp => "deviceTimestamp",
                FilterBy::IngressTimeStamp => "ingressTimeStamp",
            }
            .to_owned(),
        ),
    ];
    if let Some(start) = args.start {
        query.push(("startDate", start.format(API_TIME).to_string()));
    }
    let path = format!("/devices/{}/events", segment(&args.device));
    let sink: Box<dyn Write> = match &args.output {
        Some(file) => Box::new(std::fs::File::create(file).with_context(|| format!("creating {}", file.display()))?),
        None => Box::new(std::io::stdout().lock()),
    };
    let mut writer = Writer::new(args.format, std::io::BufWriter::new(sink))?;

    let mut progress = None;
    let mut written = 0u64;
    for page_no in 1.. {
        let page = client.page(&path, &query, page_no, MAX_PAGE_SIZE).await?;
        let bar = progress.get_or_insert_with(|| progress_bar(page.total));
        let count = page.results.len() as u64;
        for event in &page.results {
            writer.event(event)?;
        }
        written += count;
        bar.inc(count);
        if count < MAX_PAGE_SIZE || written >= page.total {
            break;
        }
    }
    if let Some(bar) = progress {
        bar.finish_and_clear();
    }
    writer.finish()?;
    if let Some(file) = &args.output {
        eprintln!("wrote {written} events to {}", file.display());
    }
    Ok(())
}

enum Writer {
    Csv(Box<csv::Writer<std::io::BufWriter<Box<dyn Write>>>>),
    Jsonl(std::io::BufWriter<Box<dyn Write>>),
}

impl Writer {
    fn new(format: Format, sink: std::io::BufWriter<Box<dyn Write>>) -> anyhow::Result<Self> {
        Ok(match format {
            Format::Csv => {
                let mut writer = csv::Writer::from_writer(sink);
                writer.write_record(COLUMNS)?;
                Writer::Csv(Box::new(writer))
            }
            Format::Jsonl => Writer::Jsonl(sink),
        })
    }

    fn event(&mut self, event: &Value) -> anyhow::Result<()> {
        match self {
            Writer::Csv(writer) => writer.write_record(COLUMNS.iter().map(|c| csv_field(&event[*c])))?,
            Writer::Jsonl(writer) => {
                serde_json::to_writer(&mut *writer, event)?;
                writer.write_all(b"\n")?;
            }
        }
        Ok(())
    }

    fn finish(self) -> anyhow::Result<()> {
        match self {
            Writer::Csv(mut writer) => writer.flush()?,
            Writer::Jsonl(mut writer) => writer.flush()?,
        }
        Ok(())
    }
}

/// A value as a CSV field: strings as they are, nothing for null, anything else as JSON.
fn csv_field(value: &Value) -> String {
    match value {
        Value::Null => String::new(),
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// The API's format, RFC 3339, or a date (midnight UTC).
fn parse_time(s: &str) -> Result<DateTime<FixedOffset>, String> {
    DateTime::parse_from_str(s, API_TIME)
        .or_else(|_| DateTime::parse_from_rfc3339(s))
        .or_else(|_| {
            NaiveDate::parse_from_str(s, "%Y-%m-%d")
                .map(|d| d.and_hms_opt(0, 0, 0).unwrap_or_default().and_utc().fixed_offset())
        })
        .map_err(|_| {
            format!("`{s}` is not a time: write 2024-05-01T08:00:00.000+0800, 2024-05-01T00:00:00Z or 2024-05-01")
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_are_read_in_three_forms_and_sent_in_the_api_format() {
        let api = parse_time("2024-05-01T08:00:00.000+0800").unwrap();
        let rfc = parse_time("2024-05-01T00:00:00Z").unwrap();
        let day = parse_time("2024-05-01").unwrap();
        assert_eq!(api, rfc);
        assert_eq!(rfc, day);
        assert_eq!(api.format(API_TIME).to_string(), "2024-05-01T08:00:00.000+0800");
        assert!(parse_time("yesterday").unwrap_err().contains("yesterday"));
    }

    #[test]
    fn csv_fields_keep_strings_bare_and_other_values_as_json() {
        assert_eq!(csv_field(&serde_json::json!("on")), "on");
        assert_eq!(csv_field(&serde_json::json!(21.5)), "21.5");
        assert_eq!(csv_field(&serde_json::json!({"a": [1]})), r#"{"a":[1]}"#);
        assert_eq!(csv_field(&Value::Null), "");
    }
}
