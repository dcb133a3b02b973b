//! The process's log: text (colour only when stdout is a terminal) or one JSON object per line
//! (`--log-format json`), filtered by `RUST_LOG` (default `info`). The broker's own lines come
//! through the `log` crate: its info lines are chatter about each connection (two per refused
//! CONNECT, which Gantry reports itself in one readable line), so they are written at debug.

use std::io::IsTerminal;

use clap::ValueEnum;
use tracing_log::{AsLog, AsTrace};
use tracing_subscriber::EnvFilter;

/// How log lines are written.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    /// Human-readable lines.
    #[default]
    Text,
    /// One JSON object per line: `timestamp`, `level`, `target`, `message`, the event's fields
    /// at the top level, and the current `span` with its fields.
    Json,
}

/// What is logged when `RUST_LOG` is not set.
const DEFAULT_FILTER: &str = "info,sqlx=warn";

/// Installs the subscriber and the bridge for the `log` crate's records. Call once, first.
pub fn init(format: LogFormat) {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| DEFAULT_FILTER.into());
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::stdout().is_terminal());
    let installed = match format {
        LogFormat::Text => tracing::subscriber::set_global_default(builder.finish()),
        LogFormat::Json => tracing::subscriber::set_global_default(
            builder
                .json()
                .flatten_event(true)
                .with_current_span(true)
                .with_span_list(false)
                .finish(),
        ),
    };
    installed.expect("the log is set up once");
    log::set_max_level(tracing::level_filters::LevelFilter::current().as_log());
    log::set_logger(&BRIDGE).expect("the log crate's logger is set up once");
}

static BRIDGE: Bridge = Bridge;

/// `log` records into tracing events, the broker's info lines at debug.
struct Bridge;

impl Bridge {
    fn level(metadata: &log::Metadata) -> log::Level {
        let broker = metadata.target().starts_with("rmqtt");
        match metadata.level() {
            log::Level::Info if broker => log::Level::Debug,
            level => level,
        }
    }
}

impl log::Log for Bridge {
    fn enabled(&self, metadata: &log::Metadata) -> bool {
        let metadata = log::Metadata::builder()
            .level(Self::level(metadata))
            .target(metadata.target())
            .build();
        tracing::dispatcher::get_default(|dispatch| dispatch.enabled(&metadata.as_trace()))
    }

    fn log(&self, record: &log::Record) {
        let level = Self::level(record.metadata());
        if level.as_trace() > tracing::level_filters::LevelFilter::current() {
            return;
        }
        let record = log::Record::builder()
            .args(*record.args())
            .level(level)
            .target(record.target())
            .module_path(record.module_path())
            .file(record.file())
            .line(record.line())
            .build();
        if self.enabled(record.metadata()) {
            let _ = tracing_log::format_trace(&record);
        }
    }

    fn flush(&self) {}
}
