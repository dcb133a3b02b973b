//! The embedded engine: one SQLite database file with its lock file, pragmas, pools and
//! checkpointer (`file`, `database`), and the event path of the staging engine (`staging`), which
//! keeps a file of its own beside it.
//!
//! Invariants: one connection (`Database::writer`) writes the main file, so writes queue in order
//! in this process instead of meeting SQLite's lock, whose busy handler polls with sleeps of up to
//! 100 ms; SQLite's write transactions then run one at a time, and the shared SQL needs no row
//! locks (`DIALECT`). One store at a time opens the files (`file::Lock`).

mod database;
pub(crate) mod file;
mod staging;

use std::sync::Arc;
use std::time::Duration;

use crate::engine::{Connected, Dialect};
use database::{Database, WRITER_PRAGMAS, pool_options};
pub use file::sqlite_url;
use staging::{StagingEvents, StagingFile};

/// Text already compares by code point; no row locks (one writer).
const DIALECT: Dialect = Dialect {
    name: "sqlite",
    collate: "",
    lock_in_use: "",
    lock_to_delete: "",
    one_process: true,
};

/// How often the checkpointer copies committed WAL pages back into the database files. Done by a
/// reader connection, the copying and its fsync stay out of the writers' commits, and a writer's
/// own checkpoint is left with the few pages committed since.
const CHECKPOINT_EVERY: Duration = Duration::from_millis(250);

/// Opens the database at `url` (creating its file and directory when missing), brings both files'
/// schemas up to date and starts the checkpointer and the event engine.
pub(crate) async fn connect(url: &str) -> Result<Connected, sqlx::Error> {
    let events = Arc::new(open(url).await?);
    let database = events.database();
    Ok(Connected {
        pool: database.pool.clone(),
        writer: database.writer.clone(),
        dialect: &DIALECT,
        api_writes: database.api_writes.clone(),
        events,
    })
}

/// The database at `url` with the staging engine on it.
pub(crate) async fn open(url: &str) -> Result<StagingEvents, sqlx::Error> {
    file::create_database_file(url)?;
    let lock = file::Lock::take(url, file::LOCK_WAIT).await?;
    let staging = StagingFile::beside(url)?;
    staging.migrate().await?;
    let attach = staging.attach.to_string();
    let pool = pool_options(crate::engine::POOL_SIZE, vec![attach.clone()])
        .connect(url)
        .await?;
    crate::engine::migrator(DIALECT.name).run(&pool).await?;
    let writers = |extra: &[&str]| {
        let mut statements = vec![attach.clone(), WRITER_PRAGMAS.to_owned()];
        statements.extend(extra.iter().map(|s| s.to_string()));
        pool_options(1, statements)
    };
    let writer = writers(&[staging::WRITER_PRAGMAS]).connect(url).await?;
    let stager = writers(&[staging::WRITER_PRAGMAS, staging::STAGER_PRAGMAS])
        .connect(url)
        .await?;
    let database = Database {
        pool: pool.clone(),
        writer: writer.clone(),
        lock,
        alive: Arc::new(()),
        api_writes: Default::default(),
    };
    // The checkpointer: passive, it never waits for readers or the writers, it copies what it
    // can, in both files.
    tokio::spawn(crate::task::every(
        CHECKPOINT_EVERY,
        pool.clone(),
        Arc::downgrade(&database.alive),
        "WAL checkpoint failed",
        |pool| async move { sqlx::query("PRAGMA wal_checkpoint(PASSIVE)").execute(&pool).await },
    ));
    StagingEvents::start(database, stager, staging).await
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::SqlStore;

    /// A second store on the same file waits for the first to close, and gives up with an error
    /// that names the file when it does not. The first is not dropped: `close` lets the file go.
    #[tokio::test]
    async fn one_store_at_a_time_has_a_database_file() {
        let dir = tempfile::tempdir().unwrap();
        let url = sqlite_url(dir.path());
        let first = SqlStore::connect(&url).await.unwrap();
        let refused = file::Lock::take(&url, Duration::ZERO).await.unwrap_err().to_string();
        assert!(refused.contains("gantry.db is open in another Gantry"), "{refused}");
        let second = tokio::spawn({
            let url = url.clone();
            async move { SqlStore::connect(&url).await }
        });
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert!(!second.is_finished(), "the second store waits for the first");
        first.close().await;
        let second = tokio::time::timeout(Duration::from_secs(5), second)
            .await
            .expect("the second store opens once the first is gone")
            .unwrap();
        assert!(second.is_ok());
    }
}
