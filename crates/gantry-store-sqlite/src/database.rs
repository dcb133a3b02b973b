//! The embedded database's connections: the pragmas every connection runs, the pools, and what
//! the store holds of them for as long as it is open.

use std::sync::Arc;

use sqlx::any::AnyPoolOptions;
use sqlx::{AnyPool, Executor};

use super::file::Lock;

/// busy_timeout comes first so that switching to WAL waits for other connections instead of
/// failing. Statement journals (multi-row statements inside a transaction) stay in memory, not
/// temp files. Every commit waits for the disk (FULL) unless a connection says otherwise.
const PRAGMAS: &str = "PRAGMA busy_timeout=10000; PRAGMA journal_mode=WAL; PRAGMA synchronous=FULL; \
                       PRAGMA foreign_keys=ON; PRAGMA temp_store=MEMORY;";

/// The writers' own: a larger page cache than SQLite's default (every miss is a read before the
/// write), and a checkpoint of their own only past more WAL pages than the default, since the
/// checkpointer task does most copying.
pub(crate) const WRITER_PRAGMAS: &str = "PRAGMA cache_size=-65536; PRAGMA wal_autocheckpoint=4000;";

/// The readers' own: the three files read through a memory map, so that every reader shares the
/// operating system's cached pages instead of copying each page it misses into a page cache of
/// its own (SQLite's default page cache per connection holds less than a fleet's devices and
/// shadows).
/// The maps only address the files: memory is what the kernel caches anyway.
pub(crate) const READER_PRAGMAS: &str =
    "PRAGMA mmap_size=1073741824; PRAGMA staging.mmap_size=1073741824; PRAGMA logs.mmap_size=1073741824;";

/// A pool of `size` connections to the database, each running `PRAGMAS` and then `statements`
/// (attaching a further file, a connection's own pragmas) when it opens.
///
/// Connections are not pinged before each use, as PostgreSQL's are: a SQLite connection is a
/// file and a thread of this process, which no server restart or network drops, and a ping would
/// be a round trip to that thread before every transaction.
pub(crate) fn pool_options(size: u32, statements: Vec<String>) -> AnyPoolOptions {
    let statements: Arc<[String]> = statements.into();
    gantry_store::engine::pool_options(size)
        .test_before_acquire(false)
        .after_connect(move |conn, _| {
            let statements = statements.clone();
            Box::pin(async move {
                conn.execute(PRAGMAS).await?;
                for statement in statements.iter() {
                    conn.execute(statement.as_str()).await?;
                }
                Ok(())
            })
        })
}

/// The database as the store holds it: its pools, its lock file, and its chores (the
/// checkpointer, the mover and the flusher), which end when it closes or is dropped.
#[derive(Debug)]
pub(crate) struct Database {
    /// Reads.
    pub(crate) pool: AnyPool,
    /// One connection, the main file's one writer in this process.
    pub(crate) writer: AnyPool,
    /// One connection, the event-log file's one writer (logs.rs).
    pub(crate) log_writer: AnyPool,
    /// The event-log file's write-ahead log.
    pub(crate) logs_wal: std::path::PathBuf,
    pub(crate) lock: Lock,
    pub(crate) chores: gantry_store::task::Chores,
    /// When the API's writes last asked for `writer` (`ApiWrites`): the mover's moves are short
    /// while they come.
    pub(crate) api_writes: Arc<gantry_store::engine::ApiWrites>,
}

impl Database {
    /// The main file's write-ahead log (an in-memory database has none: an empty path).
    pub(crate) fn wal_file(&self) -> std::path::PathBuf {
        let url = &self.pool.connect_options().database_url;
        let Ok(Some(file)) = super::file::database_file(url.as_str()) else {
            return std::path::PathBuf::new();
        };
        super::file::wal_of(&file)
    }

    /// Closes the pools, waiting for connections in use, and lets the files go. The chores
    /// have ended before (`StagingEvents::close`).
    pub(crate) async fn close(&self) {
        self.writer.close().await;
        self.log_writer.close().await;
        self.pool.close().await;
        self.lock.release();
    }
}
