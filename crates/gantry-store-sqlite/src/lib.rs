//! The embedded engine: one SQLite database file with its lock file, pragmas, pools and
//! checkpointer (`file`, `database`), the event path of the staging engine (`staging`), which
//! keeps a file of its own beside it, and the event logs' file (`logs`).
//!
//! Invariants: one connection writes each file (`Database::writer` the main file, the stager the
//! staging file, `Database::log_writer` the event-log file), so writes queue in order in this
//! process instead of meeting SQLite's lock, whose busy handler polls with sleeps between tries;
//! SQLite's write transactions then run one at a time per file, and the shared SQL needs no row
//! locks (`DIALECT`). One store at a time opens the files (`file::Lock`).
//!
//! Its schemas are its own migrations: `migrations/` for the main file, `migrations/staging/`
//! and `migrations/logs/` for the files beside it.

mod database;
pub(crate) mod file;
mod logs;
mod staging;

use std::sync::Arc;
use std::time::Duration;

use database::{Database, WRITER_PRAGMAS, pool_options};
pub use file::sqlite_url;
use gantry_store::SqlStore;
use gantry_store::engine::{Connected, Dialect};
pub use gantry_store::task::Chores;
use staging::StagingEvents;

/// The main file's schema (migrations/); the staging and event-log files have their own.
static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("./migrations");

/// Text already compares by code point; no row locks (one writer).
const DIALECT: Dialect = Dialect {
    name: "sqlite",
    collate: "",
    lock_in_use: "",
    lock_to_delete: "",
    event_logs: logs::EVENT_LOGS,
    log_outbox: logs::LOG_OUTBOX,
    audit_logs: logs::AUDIT_LOGS,
};

/// How often the checkpointer copies committed WAL pages back into the database files. Done by a
/// reader connection, the copying and its fsync stay out of the writers' commits, and a writer's
/// own checkpoint is left with the few pages committed since.
const CHECKPOINT_EVERY: Duration = Duration::from_millis(250);

/// `connect_in` with chores of its own: for a store that a tool or a test opens alone.
pub async fn connect(url: &str) -> Result<SqlStore, sqlx::Error> {
    connect_in(url, Chores::alone()).await
}

/// The store on the database at `url`: opens it (creating its file and directory when missing),
/// brings the files' schemas up to date and starts the checkpointer and the event engine as
/// `chores`, which `SqlStore::close` ends before the files close.
pub async fn connect_in(url: &str, chores: Chores) -> Result<SqlStore, sqlx::Error> {
    Ok(SqlStore::from_engine(engine(url, chores).await?))
}

/// The engine at `url`, connected, for `SqlStore::from_engine`.
async fn engine(url: &str, chores: Chores) -> Result<Connected, sqlx::Error> {
    sqlx::any::install_default_drivers();
    let events = Arc::new(open(url, chores).await?);
    let database = events.database();
    Ok(Connected {
        pool: database.pool.clone(),
        writer: database.writer.clone(),
        log_writer: database.log_writer.clone(),
        dialect: &DIALECT,
        api_writes: database.api_writes.clone(),
        events,
    })
}

/// The database at `url` with the staging engine on it, its chores run as `chores`.
pub(crate) async fn open(url: &str, chores: Chores) -> Result<StagingEvents, sqlx::Error> {
    file::create_database_file(url)?;
    let lock = file::Lock::take(url, file::LOCK_WAIT).await?;
    let staging = staging::staging_file(url)?;
    staging::migrate(&staging).await?;
    let event_logs = logs::logs_file(url)?;
    logs::migrate(&event_logs).await?;
    let attach = staging.attach.to_string();
    // The readers see every file; the main file's writer and the stager leave the event-log file
    // alone.
    // The main file's migrations run on a connection of their own, before any pool whose
    // connections expect the schema they leave.
    let migrating = pool_options(1, vec![attach.clone(), event_logs.attach.to_string()])
        .connect(url)
        .await?;
    MIGRATOR.run(&migrating).await?;
    migrating.close().await;
    let reading = vec![
        attach.clone(),
        event_logs.attach.to_string(),
        database::READER_PRAGMAS.to_owned(),
    ];
    let pool = pool_options(gantry_store::engine::POOL_SIZE, reading)
        .connect(url)
        .await?;
    let writers = |extra: &[&str]| {
        let mut statements = vec![attach.clone(), WRITER_PRAGMAS.to_owned()];
        statements.extend(extra.iter().map(|s| s.to_string()));
        pool_options(1, statements)
    };
    let writer = writers(&[staging::WRITER_PRAGMAS]).connect(url).await?;
    let stager = writers(&[staging::WRITER_PRAGMAS, staging::STAGER_PRAGMAS])
        .connect(url)
        .await?;
    // The event-log writer reads the staging file's alarm keeps to fold them (staging/keeps.rs),
    // through a temporary table of its own; it writes nothing there.
    let log_writer = pool_options(
        1,
        vec![
            attach.clone(),
            event_logs.attach.to_string(),
            logs::WRITER_PRAGMAS.to_owned(),
            staging::folding_table(),
        ],
    )
    .connect(url)
    .await?;
    let database = Database {
        pool: pool.clone(),
        writer: writer.clone(),
        log_writer,
        logs_wal: event_logs.wal.clone(),
        lock,
        chores,
        api_writes: Default::default(),
    };
    // The checkpointer: passive, it never waits for readers or the writers, it copies what it
    // can, in every file.
    database.chores.every(
        CHECKPOINT_EVERY,
        pool.clone(),
        "WAL checkpoint failed",
        |pool| async move { sqlx::query("PRAGMA wal_checkpoint(PASSIVE)").execute(&pool).await },
    );
    StagingEvents::start(database, stager, staging).await
}

#[cfg(test)]
mod tests;
