//! The event-log file: SQLite keeps the event logs and their webhook outbox in a file of their own
//! (`gantry.db` → `gantry-logs.db`, the migrations in `migrations/logs`), attached as `logs` to the
//! readers and to one writer connection of its own. A control writes its log at the PUT and at
//! the device's ack; in the main file those writes would queue behind the mover's transactions
//! on the main file's one writer, right when a burst of telemetry is being moved. Here they wait
//! for nothing but each other (docs/PERFORMANCE.md, "Controls after an ingest burst").
//!
//! Invariants: only the log writer writes this file, each event log with its outbox rows in one
//! transaction on it (a commit across two attached WAL files is not atomic); its commits are
//! synced (FULL), as the main file's; nothing in the main file refers to an event log.

use sqlx::AnyPool;
use sqlx::migrate::Migrator;

use super::file::{FileBeside, main_has_table};

static MIGRATOR: Migrator = sqlx::migrate!("./migrations/logs");

/// The event logs, by their schema-qualified name (`Dialect::event_logs`).
pub(crate) const EVENT_LOGS: &str = "logs.event_logs";

/// Their webhook outbox (`Dialect::log_outbox`), read through `EventEngine::waiting_apart`.
pub(crate) const LOG_OUTBOX: &str = "logs.webhook_outbox";

/// The columns the event-log file's table shares with the main file's old one.
const COLUMNS: &str = "id, tenant_id, project_id, status, classification, device_id, device_name, event_data, \
                       context_id, responses, event_id, ack_deadline, created_by, created_time, updated_by, \
                       updated_time, deleted, reply_to";

/// SQLite's event-log file, beside the database file.
pub(crate) fn logs_file(url: &str) -> Result<FileBeside, sqlx::Error> {
    FileBeside::new(url, "logs")
}

/// Creates the event-log file when missing and brings its schema up to date.
pub(crate) async fn migrate(file: &FileBeside) -> Result<(), sqlx::Error> {
    file.migrate(&MIGRATOR, None).await
}

/// Opening a store whose event logs are still in the main file (migrations 0003 and 0004, before
/// the event-log file): they are copied into the event-log file on `log_writer`, and then the
/// main file's table is dropped on `writer`. Copying skips ids already copied, so an upgrade cut
/// short between the two transactions copies nothing twice when it runs again. A new database's
/// migrations create the main file's table too: it is dropped here, empty. Webhook events of
/// event logs already in the main file's outbox are delivered from there.
pub(crate) async fn adopt_main_event_logs(
    reader: &AnyPool,
    writer: &AnyPool,
    log_writer: &AnyPool,
) -> Result<(), sqlx::Error> {
    if !main_has_table(reader, "event_logs").await? {
        return Ok(());
    }
    let copied = sqlx::query(&format!(
        "INSERT OR IGNORE INTO {EVENT_LOGS} ({COLUMNS}) SELECT {COLUMNS} FROM main.event_logs"
    ))
    .execute(log_writer)
    .await?
    .rows_affected();
    sqlx::query("DROP TABLE main.event_logs").execute(writer).await?;
    if copied > 0 {
        tracing::info!(copied, "event logs moved into the event-log file");
    }
    Ok(())
}
