//! The event-log file: SQLite keeps the event logs and their webhook outbox in a file of their own
//! (`gantry.db` → `gantry-logs.db`, the migrations in `migrations/logs`), attached as `logs` to the
//! readers and to one writer connection of its own. A control writes its log at the PUT and at
//! the device's ack; in the main file those writes would queue behind the mover's transactions
//! on the main file's one writer, right when a burst of telemetry is being moved. Here they wait
//! for nothing but each other. Alarms, their history and the rules' states are here too, for
//! the same reason: evaluation writes them on the ingest path (`shared/alarms.rs`). So is the
//! audit log, whose record of a control commits in its event log's transaction.
//!
//! Invariants: only the log writer writes this file, each event log with its outbox rows in one
//! transaction on it (a commit across two attached WAL files is not atomic); its commits are
//! synced (FULL), as the main file's; nothing in the main file refers to an event log.

use sqlx::migrate::Migrator;

use super::file::FileBeside;

static MIGRATOR: Migrator = sqlx::migrate!("./migrations/logs");

/// The event-log writer's own, as the main file's writer has them (`WRITER_PRAGMAS`): a larger
/// page cache for the file it writes, and its own checkpoints only past more WAL pages than the
/// default, since the checkpointer task does most copying (alarm counts write this file at the
/// rate of telemetry).
pub(crate) const WRITER_PRAGMAS: &str = "PRAGMA logs.cache_size=-65536; PRAGMA wal_autocheckpoint=4000;";

/// The event logs, by their schema-qualified name (`Dialect::event_logs`).
pub(crate) const EVENT_LOGS: &str = "logs.event_logs";

/// The audit log (`Dialect::audit_logs`): a control's record commits with its event log.
pub(crate) const AUDIT_LOGS: &str = "logs.audit_logs";

/// Their webhook outbox (`Dialect::log_outbox`), read through `EventEngine::engine_outbox_waiting`.
pub(crate) const LOG_OUTBOX: &str = "logs.webhook_outbox";

/// SQLite's event-log file, beside the database file.
pub(crate) fn logs_file(url: &str) -> Result<FileBeside, sqlx::Error> {
    FileBeside::new(url, "logs")
}

/// Creates the event-log file when missing and brings its schema up to date.
pub(crate) async fn migrate(file: &FileBeside) -> Result<(), sqlx::Error> {
    file.migrate(&MIGRATOR, None).await
}
