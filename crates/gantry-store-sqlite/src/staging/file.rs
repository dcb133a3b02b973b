//! The staging file: where it is (`gantry.db` → `gantry-staging.db`), its schema (the migrations
//! in `migrations/staging`, run on the file itself before any connection attaches it), and the
//! statements that attach it to every connection as the schema `staging`. The staging table is in
//! a file of its own so that ingest commits take only that file's lock: SQLite locks each file
//! apart, so they go on while a move or any other write holds the main file.

use sqlx::migrate::Migrator;

use crate::file::FileBeside;

static MIGRATOR: Migrator = sqlx::migrate!("./migrations/staging");

/// The staging file's page size, in bytes, for a new file (an existing one keeps its own: SQLite
/// sets the page size only before a file's first table, and not at all in WAL mode). Smaller
/// pages carry an ingest commit's few rows in fewer WAL bytes; but a round's deletes of moved rows
/// free more of them, on the stager's connection, where ingest commits wait.
const PAGE_SIZE: u32 = 2048;

/// The writers' pragmas for the staging file: a page cache of its own (a few rounds of staged
/// rows).
pub(crate) const WRITER_PRAGMAS: &str = "PRAGMA staging.cache_size=-16384;";

/// The stager's, after the writers': its commits to the staging file do not wait for the disk;
/// the flusher (flush.rs) puts them on disk, apart, before they are acknowledged.
pub(crate) const STAGER_PRAGMAS: &str = "PRAGMA staging.synchronous=NORMAL;";

/// SQLite's staging file, beside the database file.
pub(crate) type StagingFile = FileBeside;

/// The staging file of the database at `url`.
pub(crate) fn staging_file(url: &str) -> Result<StagingFile, sqlx::Error> {
    FileBeside::new(url, "staging")
}

/// Creates the staging file when missing (with `PAGE_SIZE` pages) and brings its schema up to
/// date.
pub(crate) async fn migrate(file: &StagingFile) -> Result<(), sqlx::Error> {
    file.migrate(&MIGRATOR, Some(PAGE_SIZE)).await
}
