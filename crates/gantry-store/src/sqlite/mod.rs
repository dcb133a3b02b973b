//! The embedded engine: one SQLite database file with its lock file, pragmas, pools and
//! checkpointer (`file`, `database`), the flusher that puts unsynced commits on disk (`flush`),
//! and two event paths (`SqliteEngine`): the staging engine (`staging`), which keeps a file of its
//! own beside the database, and the clustered engine (`clustered`).
//!
//! Invariants: one connection (`Database::writer`) writes the main file, so writes queue in order
//! in this process instead of meeting SQLite's lock, whose busy handler polls with sleeps of up to
//! 100 ms; SQLite's write transactions then run one at a time, and the shared SQL needs no row
//! locks (`DIALECT`). One store at a time opens the files (`file::Lock`).

mod clustered;
mod database;
pub(crate) mod file;
mod flush;
mod staging;
mod task;

use std::sync::Arc;
use std::time::Duration;

use crate::engine::{Connected, Dialect, EventEngine};
use clustered::ClusteredEvents;
use database::{Database, WRITER_PRAGMAS, pool_options};
pub use file::sqlite_url;
use staging::{StagingEvents, StagingFile};

/// Text already compares by code point; no row locks (one writer).
const DIALECT: Dialect = Dialect {
    name: "sqlite",
    collate: "",
    lock_in_use: "",
    lock_to_delete: "",
};

/// How often the checkpointer copies committed WAL pages back into the database files. Done by a
/// reader connection, the copying and its fsync stay out of the writers' commits, and a writer's
/// own checkpoint is left with the few pages committed since.
const CHECKPOINT_EVERY: Duration = Duration::from_millis(250);

/// SQLite's event engine. Temporary: both are kept until a measurement decides between them
/// (issue 26; docs/PERFORMANCE.md, "The clustered engine"), and `GANTRY_SQLITE_ENGINE` picks one
/// meanwhile.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SqliteEngine {
    /// Ingest commits to a staging file; a mover puts the events into device_events.
    Staging,
    /// Ingest commits into a table clustered by device (migration 0019).
    Clustered,
}

impl SqliteEngine {
    /// `GANTRY_SQLITE_ENGINE`: `staging` (also when unset or empty) or `clustered`.
    pub fn from_env() -> Result<Self, sqlx::Error> {
        match std::env::var("GANTRY_SQLITE_ENGINE").unwrap_or_default().as_str() {
            "" | "staging" => Ok(SqliteEngine::Staging),
            "clustered" => Ok(SqliteEngine::Clustered),
            other => Err(sqlx::Error::Configuration(
                format!("GANTRY_SQLITE_ENGINE must be staging or clustered, not `{other}`").into(),
            )),
        }
    }
}

/// Opens the database at `url` (creating its file and directory when missing), brings its schema
/// up to date and starts the checkpointer and the event engine `engine`.
pub(crate) async fn connect(url: &str, engine: SqliteEngine) -> Result<Connected, sqlx::Error> {
    let connected = match engine {
        SqliteEngine::Staging => {
            let events = Arc::new(open(url).await?);
            if let Err(e) = refuse_clustered_events(&events.database().pool).await {
                events.close().await;
                return Err(e);
            }
            connected(events.database(), events.clone())
        }
        SqliteEngine::Clustered => {
            let events = Arc::new(open_clustered(url).await?);
            connected(events.database(), events.clone())
        }
    };
    tracing::info!(engine = connected.events.name(), "SQLite event engine");
    Ok(connected)
}

fn connected(database: &Database, events: Arc<dyn EventEngine>) -> Connected {
    Connected {
        pool: database.pool.clone(),
        writer: database.writer.clone(),
        dialect: &DIALECT,
        api_writes: database.api_writes.clone(),
        events,
    }
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
    checkpoint_in_the_background(&database);
    StagingEvents::start(database, stager, staging).await
}

/// The database at `url` with the clustered engine on it, holding the events a staging engine
/// left (`adopt_staging_events`).
pub(crate) async fn open_clustered(url: &str) -> Result<ClusteredEvents, sqlx::Error> {
    if StagingFile::beside(url).is_ok_and(|staging| staging.exists()) {
        // Its staged events into device_events, then the file away.
        let staging = open(url).await?;
        let settled = staging.settle().await;
        staging.close().await;
        settled.map_err(|e| sqlx::Error::Protocol(format!("settling the staging engine's events: {e}")))?;
        StagingFile::beside(url)?.remove()?;
    }
    file::create_database_file(url)?;
    let lock = file::Lock::take(url, file::LOCK_WAIT).await?;
    let pool = pool_options(crate::engine::POOL_SIZE, Vec::new()).connect(url).await?;
    crate::engine::migrator(DIALECT.name).run(&pool).await?;
    let writer = pool_options(1, vec![WRITER_PRAGMAS.to_owned()]).connect(url).await?;
    adopt_staging_events(&writer).await?;
    let database = Database {
        pool,
        writer,
        lock,
        alive: Arc::new(()),
        api_writes: Default::default(),
    };
    checkpoint_in_the_background(&database);
    Ok(ClusteredEvents::start(database))
}

/// The checkpointer: passive, it never waits for readers or the writers, it copies what it can,
/// in every file of the database.
fn checkpoint_in_the_background(database: &Database) {
    tokio::spawn(task::every(
        CHECKPOINT_EVERY,
        database.pool.clone(),
        Arc::downgrade(&database.alive),
        "WAL checkpoint failed",
        |pool| async move { sqlx::query("PRAGMA wal_checkpoint(PASSIVE)").execute(&pool).await },
    ));
}

/// A store whose events the clustered engine holds does not open on the staging engine, whose
/// reads would not see them.
async fn refuse_clustered_events(pool: &sqlx::AnyPool) -> Result<(), sqlx::Error> {
    let clustered: i64 = sqlx::query_scalar("SELECT EXISTS (SELECT 1 FROM device_events_clustered)")
        .fetch_one(pool)
        .await?;
    if clustered == 1 {
        return Err(sqlx::Error::Configuration(
            "this database's events are in the clustered engine's table: open it with GANTRY_SQLITE_ENGINE=clustered"
                .into(),
        ));
    }
    Ok(())
}

/// Moves the events of device_events (where the staging engine settles them) into the clustered
/// table, in one transaction; the shadows and kept counts hold them already. The staging
/// engine's move records go too: a staging file started afresh numbers its rows from 1 again.
async fn adopt_staging_events(writer: &sqlx::AnyPool) -> Result<(), sqlx::Error> {
    let waiting: i64 = sqlx::query_scalar("SELECT EXISTS (SELECT 1 FROM device_events)")
        .fetch_one(writer)
        .await?;
    if waiting == 0 {
        return Ok(());
    }
    let mut tx = writer.begin().await?;
    sqlx::query(
        "INSERT INTO event_devices (device_id) SELECT DISTINCT device_id FROM device_events WHERE true \
         ON CONFLICT (device_id) DO NOTHING",
    )
    .execute(&mut *tx)
    .await?;
    let adopted = sqlx::query(
        "INSERT INTO device_events_clustered (device_key, device_ts, id, tenant_id, project_id, model_id, \
         attribute_code, attribute_type, attribute_data, channel, ingress_ts, correlation_id, context, created_by, \
         created_time) SELECT k.device_key, e.device_ts, e.id, e.tenant_id, e.project_id, e.model_id, \
         e.attribute_code, e.attribute_type, e.attribute_data, e.channel, e.ingress_ts, e.correlation_id, e.context, \
         e.created_by, e.created_time FROM device_events AS e JOIN event_devices AS k ON k.device_id = e.device_id \
         ORDER BY k.device_key, e.device_ts, e.id",
    )
    .execute(&mut *tx)
    .await?
    .rows_affected();
    sqlx::query("DELETE FROM device_events").execute(&mut *tx).await?;
    sqlx::query("DELETE FROM device_events_recent_moved")
        .execute(&mut *tx)
        .await?;
    tx.commit().await?;
    tracing::info!(adopted, "the staging engine's events moved into the clustered table");
    Ok(())
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
