//! The staging file: where it is (`gantry.db` → `gantry-staging.db`), its schema (the migrations
//! in `migrations/staging`, run on the file itself before any connection attaches it), and the
//! statements that attach it to every connection as the schema `staging`. The staging table is in
//! a file of its own so that ingest commits take only that file's lock: SQLite locks each file
//! apart, so they go on while a move or any other write holds the main file.

use std::path::PathBuf;
use std::sync::Arc;

use sqlx::ConnectOptions;
use sqlx::migrate::Migrator;
use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqliteSynchronous};

use crate::sqlite::file::{create_private_file, database_file};

static MIGRATOR: Migrator = sqlx::migrate!("./migrations/staging");

/// The staging file's page size, in bytes, for a new file (an existing one keeps its own: SQLite
/// sets the page size only before a file's first table, and not at all in WAL mode). Smaller
/// pages carry an ingest commit's few rows in fewer WAL bytes; but a walk's deletes of moved rows
/// free more of them, on the stager's connection, where ingest commits wait. Measured:
/// docs/PERFORMANCE.md, "The store's tuned constants".
const PAGE_SIZE: u32 = 2048;

/// The writers' pragmas for the staging file: a page cache of its own (a few walks of staged
/// rows).
pub(crate) const WRITER_PRAGMAS: &str = "PRAGMA staging.cache_size=-16384;";

/// The stager's, after the writers': its commits to the staging file do not wait for the disk;
/// the flusher (sqlite/flush.rs) puts them on disk, apart, before they are acknowledged.
pub(crate) const STAGER_PRAGMAS: &str = "PRAGMA staging.synchronous=NORMAL;";

/// SQLite's staging file, beside the database file.
#[derive(Debug)]
pub(crate) struct StagingFile {
    /// The file.
    path: PathBuf,
    /// The statements that attach it, with the main file's journal and durability.
    pub(crate) attach: Arc<str>,
    /// Its WAL file, which the flusher flushes.
    pub(crate) wal: PathBuf,
}

impl StagingFile {
    /// The staging file of the database at `url`. An in-memory database has none, and cannot
    /// stage events.
    pub(crate) fn beside(url: &str) -> Result<StagingFile, sqlx::Error> {
        let Some(file) = database_file(url)? else {
            return Err(sqlx::Error::Configuration(
                "the embedded store needs a database file (an in-memory SQLite database cannot stage events)".into(),
            ));
        };
        let stem = file.file_stem().unwrap_or_default().to_string_lossy();
        let name = match file.extension() {
            Some(extension) => format!("{stem}-staging.{}", extension.to_string_lossy()),
            None => format!("{stem}-staging"),
        };
        let path = file.with_file_name(&name);
        let mut wal = path.clone().into_os_string();
        wal.push("-wal");
        let quoted = path.to_string_lossy().replace('\'', "''");
        Ok(StagingFile {
            attach: format!(
                "ATTACH DATABASE '{quoted}' AS staging; PRAGMA staging.journal_mode=WAL; PRAGMA staging.synchronous=FULL;"
            )
            .into(),
            wal: wal.into(),
            path,
        })
    }

    /// Whether the file is there (a store that only ever ran the clustered engine has none).
    pub(crate) fn exists(&self) -> bool {
        self.path.exists()
    }

    /// Removes the file, its WAL file and its shared-memory file, once no connection has them.
    pub(crate) fn remove(&self) -> std::io::Result<()> {
        for suffix in ["", "-wal", "-shm"] {
            let mut path = self.path.clone().into_os_string();
            path.push(suffix);
            match std::fs::remove_file(&path) {
                Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(e),
                _ => {}
            }
        }
        Ok(())
    }

    /// Creates the file when missing (readable by its owner alone, with `PAGE_SIZE` pages) and
    /// brings its schema up to date, on a connection of its own.
    pub(crate) async fn migrate(&self) -> Result<(), sqlx::Error> {
        create_private_file(&self.path)?;
        let mut conn = SqliteConnectOptions::new()
            .filename(&self.path)
            .page_size(PAGE_SIZE)
            .journal_mode(SqliteJournalMode::Wal)
            .synchronous(SqliteSynchronous::Full)
            .connect()
            .await?;
        MIGRATOR.run_direct(&mut conn).await?;
        sqlx::Connection::close(conn).await
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;

    #[test]
    fn the_staging_file_sits_beside_the_database_file() {
        let file = StagingFile::beside("sqlite:///tmp/it's/gantry.db?mode=rwc").unwrap();
        assert!(
            file.attach
                .starts_with("ATTACH DATABASE '/tmp/it''s/gantry-staging.db' AS staging;"),
            "{}",
            file.attach
        );
        assert_eq!(file.wal, Path::new("/tmp/it's/gantry-staging.db-wal"));
        let file = StagingFile::beside("sqlite:///tmp/data/store?mode=rwc").unwrap();
        assert!(file.attach.contains("'/tmp/data/store-staging'"));
        assert_eq!(file.wal, Path::new("/tmp/data/store-staging-wal"));
        assert!(StagingFile::beside("sqlite::memory:").is_err());
    }
}
