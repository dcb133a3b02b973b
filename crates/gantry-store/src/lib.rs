//! Gantry's store over SQL: one body of SQL run through sqlx's `Any` driver, so the same code and
//! migrations serve SQLite (embedded, the default) and PostgreSQL (scale-out).

mod devices;
mod event_logs;
mod events;
mod figures;
mod flush;
mod merge;
mod models;
mod projects;
mod routes;
mod row;
mod soft_delete;
mod sql;
mod staged;
mod tenants;

use std::borrow::Cow;
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::sync::{Arc, Weak};
use std::time::Duration;

use gantry_core::Error;
use sqlx::AnyPool;
use sqlx::any::AnyPoolOptions;
use sqlx::migrate::Migrator;
use sqlx::sqlite::SqliteConnectOptions;
use sqlx::{Any, Executor, Transaction};

use crate::flush::Flusher;
use crate::staged::Staged;

pub use crate::figures::{PoolFigures, StoreFigures};

static MIGRATOR: Migrator = sqlx::migrate!("./migrations");

/// The migrations of `backend`: all of them but those whose description names the other engine
/// (`0007_sqlite_…`, `0008_postgres_…`), for the few statements one engine cannot run. The
/// numbering stays one sequence. (Built like `migrate!` builds its own, from `Migrator::DEFAULT`.)
fn migrator(backend: Backend) -> Migrator {
    let other = match backend {
        Backend::Sqlite => "postgres ",
        Backend::Postgres => "sqlite ",
    };
    let migrations: Vec<_> = MIGRATOR
        .iter()
        .filter(|migration| !migration.description.starts_with(other))
        .cloned()
        .collect();
    Migrator {
        migrations: Cow::Owned(migrations),
        ..Migrator::DEFAULT
    }
}

/// Connections for reads and the API's writes. On PostgreSQL the pool also holds one for each
/// ingest writer (`events::POSTGRES_INGEST_WRITERS`), so that ingest under load leaves these.
const POOL_SIZE: u32 = 8;

/// busy_timeout comes first so that switching to WAL waits for other connections instead of failing.
/// Statement journals (multi-row statements inside a transaction) stay in memory, not temp files.
const SQLITE_PRAGMAS: &str = "PRAGMA busy_timeout=10000; PRAGMA journal_mode=WAL; PRAGMA synchronous=FULL; \
                              PRAGMA foreign_keys=ON; PRAGMA temp_store=MEMORY;";

/// The writers' own (the main file's writer and the stager): a 64 MiB page cache (the default 2
/// MiB holds little of an index once the store grows, and every miss is a read before the write),
/// and a checkpoint of its own only past 4,000 WAL pages (16 MiB) instead of 1,000: the
/// checkpointer task does most copying.
/// Measured with gantry-bench ingest-mqtt (1,000 devices, 10,000 msg/s offered): 4,500 → 7,500
/// events/s, written bytes per event 50 → 14 KiB. With 10,000 pages ingest-rest ran 5,500/s
/// instead of 5,200 on a small store, but its p99 grew to 90 ms on a store of 10,000,000 events;
/// with 1,000 pages 4,000/s.
/// The staging file gets a 16 MiB cache of its own on both (a few walks of staged rows).
const SQLITE_WRITER_PRAGMAS: &str =
    "PRAGMA cache_size=-65536; PRAGMA staging.cache_size=-16384; PRAGMA wal_autocheckpoint=4000;";

/// The stager's, after the writers': its commits to the staging file do not wait for the disk;
/// the flusher (flush.rs) puts them on disk, apart.
const SQLITE_STAGER_UNSYNCED: &str = "PRAGMA staging.synchronous=NORMAL;";

/// How often the checkpointer copies committed WAL pages back into the SQLite database file.
/// Done by a reader connection, the copying and its fsync stay out of the writer's commits (a
/// commit that ran a 10,000-page checkpoint itself took tens of milliseconds longer); the writer's
/// own checkpoint is left with the few pages committed since, and the WAL file can start over.
const CHECKPOINT_EVERY: Duration = Duration::from_millis(250);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Backend {
    Sqlite,
    Postgres,
}

impl Backend {
    fn of_url(url: &str) -> Result<Self, sqlx::Error> {
        if url.starts_with("sqlite:") {
            Ok(Backend::Sqlite)
        } else if url.starts_with("postgres:") || url.starts_with("postgresql:") {
            Ok(Backend::Postgres)
        } else {
            Err(sqlx::Error::Configuration(
                "the database URL must start with sqlite: or postgres:".into(),
            ))
        }
    }
}

/// The store: every trait of `gantry_core::store` over a pool for reads and one for writes.
#[derive(Debug, Clone)]
pub struct SqlStore {
    pool: AnyPool,
    /// Every write but ingest's goes through this pool. On SQLite it holds one connection, so
    /// writers queue in this process (in order) instead of meeting SQLite's lock, whose busy
    /// handler polls with sleeps of up to 100 ms: behind a busy ingest writer a control's log
    /// update could wait for seconds. On PostgreSQL it is the read pool.
    writer: AnyPool,
    /// Ingest's writes. On SQLite one connection, the only one that writes the staging file
    /// (attached as `staging`, `staging_file`) but for the API's deletes of staged events: SQLite
    /// locks each file apart, so ingest commits go on while a move or any other write holds the
    /// main file. Its commits do not wait for the disk; the flusher puts them there. On
    /// PostgreSQL the read pool.
    stager: AnyPool,
    backend: Backend,
    /// SQLite: which events the staging table holds, by device and by id (staged.rs).
    staged: Arc<Staged>,
    /// SQLite: the staging file's side of the walks, and the flusher that puts the stager's
    /// commits on disk (flush.rs).
    stage: Option<merge::Stage>,
    /// Dropped with the last clone of the store, which ends the checkpointer.
    _alive: Arc<()>,
    /// SQLite: the lock on the database's lock file (`lock_file`), released by `close` or with
    /// the last clone.
    locked: Arc<std::sync::Mutex<Option<std::fs::File>>>,
}

impl SqlStore {
    /// Connects to a `sqlite:` or `postgres:` URL and brings the schema up to date. A SQLite
    /// database file (and its directory) is created when missing.
    pub async fn connect(database_url: &str) -> Result<SqlStore, sqlx::Error> {
        sqlx::any::install_default_drivers();
        let backend = Backend::of_url(database_url)?;
        let locked = match backend {
            Backend::Sqlite => {
                create_sqlite_file(database_url)?;
                lock_file(database_url, LOCK_WAIT).await?
            }
            Backend::Postgres => None,
        };
        let staging = match backend {
            Backend::Sqlite => {
                let staging = staging_file(database_url)?;
                create_private_file(&staging.path)?;
                Some(staging)
            }
            Backend::Postgres => None,
        };
        let options = |size, extra| pool_options(size, extra, staging.as_ref().map(|file| file.attach.clone()));
        let size = match backend {
            Backend::Sqlite => POOL_SIZE,
            Backend::Postgres => POOL_SIZE + events::POSTGRES_INGEST_WRITERS as u32,
        };
        let pool = options(size, &[]).connect(database_url).await?;
        migrator(backend).run(&pool).await?;
        let (writer, stager) = match backend {
            Backend::Sqlite => (
                options(1, &[SQLITE_WRITER_PRAGMAS]).connect(database_url).await?,
                options(1, &[SQLITE_WRITER_PRAGMAS, SQLITE_STAGER_UNSYNCED])
                    .connect(database_url)
                    .await?,
            ),
            Backend::Postgres => (pool.clone(), pool.clone()),
        };
        let alive = Arc::new(());
        let staged = Arc::new(Staged::default());
        let stage = staging.map(|file| merge::Stage {
            stager: stager.clone(),
            staged: staged.clone(),
            flusher: Arc::new(Flusher::start(file.wal, staged.clone())),
        });
        if let Some(stage) = &stage {
            merge::adopt_main_staging(&pool, &writer, &stager, &stage.flusher).await?;
            staged.add(merge::load_staged(&pool).await?);
            // The checkpointer: passive, it never waits for readers or the writers, it copies what
            // it can, in both files.
            tokio::spawn(every(
                CHECKPOINT_EVERY,
                pool.clone(),
                Arc::downgrade(&alive),
                "WAL checkpoint failed",
                |pool| async move { sqlx::query("PRAGMA wal_checkpoint(PASSIVE)").execute(&pool).await },
            ));
            let (reader, stage) = (pool.clone(), stage.clone());
            tokio::spawn(every(
                merge::MERGE_EVERY,
                writer.clone(),
                Arc::downgrade(&alive),
                "moving staged events failed; retrying at the next walk",
                move |writer| {
                    let (reader, stage) = (reader.clone(), stage.clone());
                    async move { merge::merge_recent(&reader, &writer, &stage, Some(merge::PACE)).await }
                },
            ));
        }
        Ok(SqlStore {
            pool,
            writer,
            stager,
            backend,
            staged,
            stage,
            _alive: alive,
            locked: Arc::new(std::sync::Mutex::new(locked)),
        })
    }

    /// `sqlite` or `postgres`.
    pub fn backend(&self) -> &'static str {
        match self.backend {
            Backend::Sqlite => "sqlite",
            Backend::Postgres => "postgres",
        }
    }

    fn is_sqlite(&self) -> bool {
        self.backend == Backend::Sqlite
    }

    pub fn pool(&self) -> &AnyPool {
        &self.pool
    }

    /// Closes the pools, waiting for connections in use to be returned, and lets the database
    /// file go (another store may open it now).
    pub async fn close(&self) {
        self.stager.close().await;
        self.writer.close().await;
        self.pool.close().await;
        self.locked.lock().expect("the lock's mutex is never poisoned").take();
    }

    /// Moves every event staged in device_events_recent into device_events now, as the background
    /// mover does every 3 seconds on SQLite; returns how many moved (PostgreSQL stages none). For bulk
    /// loads and tests: reads see the events either way. (The moved rows leave the staging file
    /// at a later walk, see merge.rs.)
    pub async fn merge_recent(&self) -> gantry_core::Result<u64> {
        let Some(stage) = &self.stage else {
            return Ok(0);
        };
        merge::merge_recent(&self.pool, &self.writer, stage, None).await
    }

    /// Where a statement that writes outside `begin_write` runs.
    fn writes(&self) -> &AnyPool {
        &self.writer
    }

    /// A transaction that writes, on the writer. On SQLite it is deferred: `BEGIN IMMEDIATE`
    /// would take the write lock of every attached file, the staging file's too, and hold ingest
    /// commits. Each file's lock is taken by the transaction's first write to it; only this
    /// connection writes the main file and its transactions that write the staging file write it
    /// before they read it, so no upgrade from a read can fail with SQLITE_BUSY_SNAPSHOT. (Another
    /// process writing the main file meanwhile, the sqlite3 shell say, could make one fail.)
    async fn begin_write(&self) -> gantry_core::Result<Transaction<'static, Any>> {
        self.writer.begin().await.map_err(crate::db_error)
    }

    /// Ingest's transaction: on SQLite on the stager, which writes the staging file alone.
    async fn begin_ingest(&self) -> gantry_core::Result<Transaction<'static, Any>> {
        self.stager.begin().await.map_err(crate::db_error)
    }

    /// Text comparison by code point on both engines (PostgreSQL would otherwise follow the
    /// database's locale), so name orders do not depend on the backend.
    fn collate(&self) -> &'static str {
        match self.backend {
            Backend::Sqlite => "",
            Backend::Postgres => " COLLATE \"C\"",
        }
    }
}

/// A task of the store: `step` on `pool` every `period` until the store is dropped or the pool
/// closed. A failure is logged as `failed` and the step runs again at the next tick.
async fn every<F, Fut, T, E>(period: Duration, pool: AnyPool, alive: Weak<()>, failed: &'static str, step: F)
where
    F: Fn(AnyPool) -> Fut,
    Fut: Future<Output = Result<T, E>>,
    E: std::fmt::Display,
{
    let mut tick = tokio::time::interval(period);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        if alive.strong_count() == 0 || pool.is_closed() {
            return;
        }
        if let Err(e) = step(pool.clone()).await {
            if pool.is_closed() {
                return;
            }
            tracing::warn!(error = %e, "{failed}");
        }
    }
}

/// A pool of `size` connections; SQLite connections get the pragmas, and `extra` after them,
/// and attach the staging file (`staging`, the statements of `staging_file`).
///
/// SQLite's connections are not pinged before each use, PostgreSQL's are: a SQLite connection is
/// a file and a thread of this process, which no server restart or network drops, and the ping
/// was a round trip to that thread before every transaction (in each ingest commit's sequence of
/// statements, which the commits of a store make one after another).
///
/// A request waits at most `ACQUIRE_TIMEOUT` for a connection: while PostgreSQL is unreachable it
/// then answers 503 (store unavailable) instead of holding the client for sqlx's default 30 s.
fn pool_options(size: u32, extra: &'static [&'static str], staging: Option<Arc<str>>) -> AnyPoolOptions {
    const ACQUIRE_TIMEOUT: Duration = Duration::from_secs(5);
    AnyPoolOptions::new()
        .max_connections(size)
        .acquire_timeout(ACQUIRE_TIMEOUT)
        .test_before_acquire(staging.is_none())
        .after_connect(move |conn, _| {
            let staging = staging.clone();
            Box::pin(async move {
                if conn.backend_name() == "SQLite" {
                    conn.execute(SQLITE_PRAGMAS).await?;
                    if let Some(staging) = staging {
                        conn.execute(&*staging).await?;
                    }
                    for statements in extra {
                        conn.execute(*statements).await?;
                    }
                }
                Ok(())
            })
        })
}

/// The staging file's page size, in bytes. Its WAL takes whole pages: an ingest commit of 15
/// events (about 4.5 KiB of rows) appends to one or two leaves and writes besides the table's
/// parent page, its AUTOINCREMENT counter, the file's header and the free-list page it took a page
/// from, about 6 pages of 4 KiB, SQLite's default. Smaller pages carry the same rows in fewer
/// bytes, but a walk's deletes of moved rows free more of them, on the stager's connection, where
/// ingest commits wait. Measured with gantry-bench ingest-mqtt at 25,000 messages/s (1,000
/// devices), 20 s each, back to back, 4,096 / 2,048 / 1,024: the server wrote 4.74 / 4.10 / 3.89
/// KiB per event in all, the deletes took 242 / 272 / 327 ms of each 3 s walk (over 10 minutes
/// 1,024 rose to 500 to 540, 2,048 to 300 to 420, 4,096 to 240 to 300), the ingest commits' time
/// unchanged. 10 minutes at 2,048 (with `merge::ROWS_PER_MOVE` at 4,000): 4.68 against 5.56 KiB
/// per event before both.
const STAGING_PAGE_SIZE: u32 = 2048;

/// SQLite's staging file (`staging_file`).
struct StagingFile {
    /// The file.
    path: PathBuf,
    /// The statements that attach it.
    attach: Arc<str>,
    /// Its WAL file, which the flusher flushes.
    wal: PathBuf,
}

/// SQLite: the statements that attach the staging file beside the database file
/// (`gantry.db` → `gantry-staging.db`) as the schema `staging` (every statement that names the
/// staging table or its pragmas spells it so), with the main file's journal and durability, and create
/// its one table when it is new. The staging table is in a file of its own so that ingest
/// commits take only that file's lock (see `stager`).
///
/// A new staging file gets pages of `STAGING_PAGE_SIZE` (an existing one keeps its own: SQLite
/// sets the page size only before a file's first table, and not at all in WAL mode).
fn staging_file(url: &str) -> Result<StagingFile, sqlx::Error> {
    let options = SqliteConnectOptions::from_str(url)?;
    let file = options.get_filename();
    if url.contains("mode=memory") || file.as_os_str().is_empty() || file.to_string_lossy().starts_with("file:") {
        return Err(sqlx::Error::Configuration(
            "the embedded store needs a database file (an in-memory SQLite database cannot stage events)".into(),
        ));
    }
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
            "ATTACH DATABASE '{quoted}' AS staging; PRAGMA staging.page_size={STAGING_PAGE_SIZE}; \
             PRAGMA staging.journal_mode=WAL; PRAGMA staging.synchronous=FULL; {}",
            merge::STAGING_TABLE,
        )
        .into(),
        wal: wal.into(),
        path,
    })
}

/// The URL of the embedded database in `data_dir`.
pub fn sqlite_url(data_dir: &Path) -> String {
    let path = data_dir
        .join("gantry.db")
        .to_string_lossy()
        .replace('%', "%25")
        .replace('?', "%3F")
        .replace('#', "%23");
    format!("sqlite://{path}?mode=rwc")
}

/// How long opening a SQLite store waits for another store on the same file to close: a server
/// restarted in the same process may still be dropping the last one.
const LOCK_WAIT: Duration = Duration::from_secs(10);

/// SQLite: locks `<database file>.lock` (created when missing) for as long as the store is open,
/// waiting up to `wait` for another store to let it go,
/// so that one store at a time, in one process, has the file. Two would each keep their own index
/// of staged events, and one's walk would delete rows the other staged before they were moved.
/// SQLite's own locks do not cover that: they make each transaction safe, not the two walks. The
/// lock is the system's (flock), so it goes with the process however that ends. None for an
/// in-memory or read-only database.
async fn lock_file(url: &str, wait: Duration) -> Result<Option<std::fs::File>, sqlx::Error> {
    let options = SqliteConnectOptions::from_str(url)?;
    let file = options.get_filename();
    if url.contains("mode=memory") || url.contains("mode=ro") || file.as_os_str().is_empty() {
        return Ok(None);
    }
    let mut path = file.as_os_str().to_owned();
    path.push(".lock");
    let lock = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)?;
    let started = std::time::Instant::now();
    let mut warned = false;
    loop {
        match lock.try_lock() {
            Ok(()) => return Ok(Some(lock)),
            Err(std::fs::TryLockError::WouldBlock) if started.elapsed() < wait => {
                if !warned {
                    warned = true;
                    tracing::warn!(lock = %Path::new(&path).display(), "the database is open in another store; waiting for it");
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            Err(std::fs::TryLockError::WouldBlock) => {
                return Err(sqlx::Error::Configuration(
                    format!(
                        "{} is open in another Gantry (or another store in this process): {} is locked",
                        file.display(),
                        Path::new(&path).display()
                    )
                    .into(),
                ));
            }
            Err(std::fs::TryLockError::Error(e)) => return Err(e.into()),
        }
    }
}

/// SQLite itself creates only the file, and only with `mode=rwc`; a data directory may be new too.
fn create_sqlite_file(url: &str) -> Result<(), sqlx::Error> {
    let options = SqliteConnectOptions::from_str(url)?;
    let file = options.get_filename();
    let in_memory = url.contains("mode=memory") || file.to_string_lossy().starts_with("file:sqlx-in-memory");
    if in_memory || url.contains("mode=ro") || file.as_os_str().is_empty() {
        return Ok(());
    }
    if let Some(dir) = file.parent().filter(|dir| !dir.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir)?;
    }
    create_private_file(file)?;
    Ok(())
}

/// Creates a database file readable by its owner alone (it holds every device's and
/// application's token), whatever the umask; SQLite gives its WAL and SHM files the same mode.
fn create_private_file(path: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .mode(0o600)
        .open(path)?;
    Ok(())
}

/// A failed statement as the domain's error: a store that cannot be reached or cannot write now
/// (connection lost, the server restarting or refusing connections, a full disk, an I/O error)
/// is `StoreUnavailable`, which clients may retry; anything else is a store failure.
pub(crate) fn db_error(error: sqlx::Error) -> Error {
    if is_unavailable(&error) {
        Error::StoreUnavailable(Box::new(error))
    } else {
        Error::store(error)
    }
}

/// A failed flush of SQLite's WAL to disk: the commit is not durable, and the disk may be full.
pub(crate) fn io_unavailable(error: std::io::Error) -> Error {
    Error::StoreUnavailable(Box::new(error))
}

fn is_unavailable(error: &sqlx::Error) -> bool {
    match error {
        sqlx::Error::Io(_) | sqlx::Error::PoolTimedOut | sqlx::Error::PoolClosed | sqlx::Error::WorkerCrashed => true,
        sqlx::Error::Database(db) => {
            let code = db.code().unwrap_or_default();
            if db.try_downcast_ref::<sqlx::postgres::PgDatabaseError>().is_some() {
                // Class 08: connection exception; 57P0x: shutting down or starting; 53: resources
                // (disk full, out of memory, too many connections).
                code.starts_with("08") || code.starts_with("57P0") || code.starts_with("53")
            } else {
                // SQLite's primary result codes BUSY, LOCKED, IOERR, FULL and CANTOPEN.
                code.parse::<i32>()
                    .is_ok_and(|c| matches!(c & 0xff, 5 | 6 | 10 | 13 | 14))
            }
        }
        _ => false,
    }
}

/// The failure of a write that creates or renames a record: a unique violation means a record of
/// that kind and name already exists; anything else is a store failure.
fn write_error<'a>(kind: &'static str, name: &'a str) -> impl FnOnce(sqlx::Error) -> Error + 'a {
    move |error| match &error {
        sqlx::Error::Database(db) if db.is_unique_violation() => {
            Error::Duplicate(format!("a {kind} named `{name}` already exists"))
        }
        _ => db_error(error),
    }
}

/// "1 device", "3 devices".
fn device_count(count: i64) -> String {
    if count == 1 {
        "1 device".to_owned()
    } else {
        format!("{count} devices")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sqlite_urls_survive_odd_directory_names() {
        let url = sqlite_url(Path::new("/tmp/a dir?#%/data"));
        assert_eq!(url, "sqlite:///tmp/a dir%3F%23%25/data/gantry.db?mode=rwc");
        let options = SqliteConnectOptions::from_str(&url).unwrap();
        assert_eq!(options.get_filename(), Path::new("/tmp/a dir?#%/data/gantry.db"));
    }

    /// A second store on the same file waits for the first to close, and gives up with an error
    /// that names the file when it does not. The first is not dropped: `close` lets the file go.
    #[tokio::test]
    async fn one_store_at_a_time_has_a_database_file() {
        let dir = tempfile::tempdir().unwrap();
        let url = sqlite_url(dir.path());
        let first = SqlStore::connect(&url).await.unwrap();
        let refused = lock_file(&url, Duration::ZERO).await.unwrap_err().to_string();
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

    #[test]
    fn the_staging_file_sits_beside_the_database_file() {
        let file = staging_file("sqlite:///tmp/it's/gantry.db?mode=rwc").unwrap();
        assert!(
            file.attach
                .starts_with("ATTACH DATABASE '/tmp/it''s/gantry-staging.db' AS staging;"),
            "{}",
            file.attach
        );
        assert_eq!(file.wal, Path::new("/tmp/it's/gantry-staging.db-wal"));
        let file = staging_file("sqlite:///tmp/data/store?mode=rwc").unwrap();
        assert!(file.attach.contains("'/tmp/data/store-staging'"));
        assert_eq!(file.wal, Path::new("/tmp/data/store-staging-wal"));
        assert!(staging_file("sqlite::memory:").is_err());
    }

    #[test]
    fn each_engine_skips_the_others_migrations() {
        let descriptions =
            |backend| -> Vec<String> { migrator(backend).iter().map(|m| m.description.to_string()).collect() };
        let sqlite = descriptions(Backend::Sqlite);
        let postgres = descriptions(Backend::Postgres);
        assert!(sqlite.contains(&"sqlite staging by device".to_owned()));
        assert!(!sqlite.iter().any(|d| d.starts_with("postgres ")));
        assert!(postgres.contains(&"postgres no staging".to_owned()));
        assert!(!postgres.iter().any(|d| d.starts_with("sqlite ")));
        assert!(sqlite.contains(&"sqlite staging in arrival order".to_owned()));
        assert!(sqlite.contains(&"sqlite moved by number".to_owned()));
        assert!(sqlite.contains(&"sqlite walk syncs".to_owned()));
        assert!(postgres.contains(&"postgres counts fillfactor".to_owned()));
        assert!(postgres.contains(&"postgres no event hours".to_owned()));
        assert!(sqlite.contains(&"event hours".to_owned()) && postgres.contains(&"event hours".to_owned()));
        assert_eq!(sqlite.len() + postgres.len(), MIGRATOR.iter().count() * 2 - 7);
    }

    #[test]
    fn backends_come_from_the_scheme() {
        assert_eq!(Backend::of_url("sqlite://x.db").unwrap(), Backend::Sqlite);
        assert_eq!(Backend::of_url("postgres://h/db").unwrap(), Backend::Postgres);
        assert_eq!(Backend::of_url("postgresql://h/db").unwrap(), Backend::Postgres);
        assert!(Backend::of_url("mysql://h/db").is_err());
    }
}
