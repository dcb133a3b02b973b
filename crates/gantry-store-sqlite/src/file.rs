//! The embedded database's files: where they are, created readable by their owner alone, and the
//! lock file that lets one store at a time open them.

use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use sqlx::ConnectOptions;
use sqlx::migrate::Migrator;
use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqliteSynchronous};

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

/// The database file a URL names, or None for an in-memory database.
pub(crate) fn database_file(url: &str) -> Result<Option<PathBuf>, sqlx::Error> {
    let options = SqliteConnectOptions::from_str(url)?;
    let file = options.get_filename();
    let in_memory = url.contains("mode=memory") || file.to_string_lossy().starts_with("file:");
    if in_memory || file.as_os_str().is_empty() {
        return Ok(None);
    }
    Ok(Some(file.to_owned()))
}

/// SQLite itself creates only the file, and only with `mode=rwc`; a data directory may be new too.
pub(crate) fn create_database_file(url: &str) -> Result<(), sqlx::Error> {
    let Some(file) = database_file(url)?.filter(|_| !url.contains("mode=ro")) else {
        return Ok(());
    };
    if let Some(dir) = file.parent().filter(|dir| !dir.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir)?;
    }
    create_private_file(&file)?;
    Ok(())
}

/// Creates a database file readable by its owner alone (it holds every device's and
/// application's token), whatever the umask; SQLite gives its WAL and SHM files the same mode.
pub(crate) fn create_private_file(path: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .mode(0o600)
        .open(path)?;
    Ok(())
}

/// A file the engine keeps beside the database file (`gantry.db` → `gantry-<suffix>.db`), with
/// a schema of its own (a directory of migrations, run on the file itself before any connection
/// attaches it), attached to connections as the schema `<suffix>`. SQLite locks each file apart:
/// a connection that writes this file alone never waits for the main file's writer.
#[derive(Debug)]
pub(crate) struct FileBeside {
    /// The file.
    path: PathBuf,
    /// The statements that attach it, with the main file's journal and durability.
    pub(crate) attach: Arc<str>,
    /// Its write-ahead log.
    pub(crate) wal: PathBuf,
}

impl FileBeside {
    /// The file `suffix` beside the database at `url`. An in-memory database has none.
    pub(crate) fn new(url: &str, suffix: &str) -> Result<FileBeside, sqlx::Error> {
        let Some(file) = database_file(url)? else {
            return Err(sqlx::Error::Configuration(
                format!("the embedded store needs a database file (an in-memory SQLite database has no {suffix} file)")
                    .into(),
            ));
        };
        let stem = file.file_stem().unwrap_or_default().to_string_lossy();
        let name = match file.extension() {
            Some(extension) => format!("{stem}-{suffix}.{}", extension.to_string_lossy()),
            None => format!("{stem}-{suffix}"),
        };
        let path = file.with_file_name(&name);
        let wal = wal_of(&path);
        let quoted = path.to_string_lossy().replace('\'', "''");
        Ok(FileBeside {
            attach: format!(
                "ATTACH DATABASE '{quoted}' AS {suffix}; PRAGMA {suffix}.journal_mode=WAL; PRAGMA {suffix}.synchronous=FULL;"
            )
            .into(),
            wal,
            path,
        })
    }

    /// Creates the file when missing (readable by its owner alone; a new file gets `page_size`
    /// pages where given) and brings its schema up to date with `migrator`, on a connection of
    /// its own.
    pub(crate) async fn migrate(&self, migrator: &Migrator, page_size: Option<u32>) -> Result<(), sqlx::Error> {
        create_private_file(&self.path)?;
        let mut options = SqliteConnectOptions::new()
            .filename(&self.path)
            .journal_mode(SqliteJournalMode::Wal)
            .synchronous(SqliteSynchronous::Full);
        if let Some(page_size) = page_size {
            options = options.page_size(page_size);
        }
        let mut conn = options.connect().await?;
        migrator.run_direct(&mut conn).await?;
        sqlx::Connection::close(conn).await
    }
}

/// The write-ahead log of the database file `file` (WAL mode keeps it beside, `-wal` appended).
pub(crate) fn wal_of(file: &Path) -> PathBuf {
    let mut wal = file.as_os_str().to_owned();
    wal.push("-wal");
    wal.into()
}

/// How long opening a SQLite store waits for another store on the same file to close: a server
/// restarted in the same process may still be dropping the last one.
pub(crate) const LOCK_WAIT: Duration = Duration::from_secs(10);

/// The lock on `<database file>.lock`, held for as long as the store is open, so that one store
/// at a time, in one process, has the files: an engine may keep state in memory beside them (the
/// staging engine's index of staged events) that a second store would not see. SQLite's own
/// locks make each transaction safe, not that. The lock is the system's (flock), so it goes with
/// the process however that ends.
#[derive(Debug, Default)]
pub(crate) struct Lock(std::sync::Mutex<Option<std::fs::File>>);

impl Lock {
    /// Locks the database's lock file (created when missing), waiting up to `wait` for another
    /// store to let it go. Holds nothing for an in-memory or read-only database.
    pub(crate) async fn take(url: &str, wait: Duration) -> Result<Lock, sqlx::Error> {
        let Some(file) = database_file(url)?.filter(|_| !url.contains("mode=ro")) else {
            return Ok(Lock::default());
        };
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
                Ok(()) => return Ok(Lock(std::sync::Mutex::new(Some(lock)))),
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

    /// Lets the files go (also done when the lock is dropped).
    pub(crate) fn release(&self) {
        self.0.lock().expect("the lock's mutex is never poisoned").take();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_file_beside_sits_beside_the_database_file() {
        let file = FileBeside::new("sqlite:///tmp/it's/gantry.db?mode=rwc", "staging").unwrap();
        assert!(
            file.attach
                .starts_with("ATTACH DATABASE '/tmp/it''s/gantry-staging.db' AS staging;"),
            "{}",
            file.attach
        );
        assert_eq!(file.wal, Path::new("/tmp/it's/gantry-staging.db-wal"));
        let file = FileBeside::new("sqlite:///tmp/data/store?mode=rwc", "logs").unwrap();
        assert!(
            file.attach.contains("'/tmp/data/store-logs' AS logs;"),
            "{}",
            file.attach
        );
        assert_eq!(file.wal, Path::new("/tmp/data/store-logs-wal"));
        assert!(FileBeside::new("sqlite::memory:", "staging").is_err());
    }

    #[test]
    fn sqlite_urls_survive_odd_directory_names() {
        let url = sqlite_url(Path::new("/tmp/a dir?#%/data"));
        assert_eq!(url, "sqlite:///tmp/a dir%3F%23%25/data/gantry.db?mode=rwc");
        let options = SqliteConnectOptions::from_str(&url).unwrap();
        assert_eq!(options.get_filename(), Path::new("/tmp/a dir?#%/data/gantry.db"));
    }
}
