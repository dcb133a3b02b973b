//! The store of a run: the embedded SQLite in the server's data dir, or a fresh PostgreSQL
//! database created on the given server for this run and dropped after it.

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::Context;
use sqlx::{Connection, Executor, PgConnection};

use crate::store::Store;

/// Which store a run uses.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Backend {
    Sqlite,
    /// The server URL the user gave; each run gets its own database on it.
    Postgres {
        server_url: String,
    },
}

impl Backend {
    pub fn store(&self) -> Store {
        match self {
            Backend::Sqlite => Store::Sqlite,
            Backend::Postgres { .. } => Store::Postgres,
        }
    }
}

/// The database one run uses, and how to get rid of it.
pub struct Database {
    pub backend: Backend,
    /// The URL to give gantry (None: its default, the SQLite file in its data dir) …
    pub server_url: Option<String>,
    /// … and the URL the seeder opens (the same store).
    pub store_url: String,
    /// A PostgreSQL database to drop at the end.
    created: Option<String>,
}

impl Database {
    pub async fn prepare(backend: &Backend, data_dir: &Path) -> anyhow::Result<Database> {
        match backend {
            Backend::Sqlite => Ok(Database {
                backend: backend.clone(),
                server_url: None,
                store_url: gantry::store::sqlite_url(data_dir),
                created: None,
            }),
            Backend::Postgres { server_url } => {
                let name = format!(
                    "gantry_bench_{}_{}",
                    chrono::Utc::now().format("%Y%m%d%H%M%S"),
                    std::process::id()
                );
                let mut admin = PgConnection::connect(server_url)
                    .await
                    .with_context(|| format!("connecting to {server_url}"))?;
                admin
                    .execute(format!("CREATE DATABASE {name}").as_str())
                    .await
                    .with_context(|| format!("creating database {name}"))?;
                let url = with_database(server_url, &name);
                Ok(Database {
                    backend: backend.clone(),
                    server_url: Some(url.clone()),
                    store_url: url,
                    created: Some(name),
                })
            }
        }
    }

    /// After a bulk load, what a running PostgreSQL does on its own within minutes: VACUUM (the
    /// visibility map lets index scans skip the heap) and ANALYZE (statistics for the planner).
    /// Measuring before it would measure autovacuum's catch-up instead of the store.
    /// Returns how long that took, or None when the store needs nothing of the kind.
    pub async fn catch_up(&self) -> anyhow::Result<Option<Duration>> {
        if !matches!(self.backend, Backend::Postgres { .. }) {
            return Ok(None);
        }
        let started = Instant::now();
        let mut conn = PgConnection::connect(&self.store_url).await?;
        conn.execute("VACUUM (ANALYZE)")
            .await
            .context("VACUUM (ANALYZE) after a bulk load")?;
        Ok(Some(started.elapsed()))
    }

    /// Drops the run's PostgreSQL database (nothing to do for SQLite: the temp dir goes).
    pub async fn drop_database(self) -> anyhow::Result<()> {
        let (Backend::Postgres { server_url }, Some(name)) = (&self.backend, &self.created) else {
            return Ok(());
        };
        let mut admin = PgConnection::connect(server_url).await?;
        admin
            .execute(format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)").as_str())
            .await
            .with_context(|| format!("dropping database {name}"))?;
        Ok(())
    }
}

/// The URL of database `name` on the server of `url`: the path is replaced, the query kept.
pub fn with_database(url: &str, name: &str) -> String {
    let (base, query) = match url.split_once('?') {
        Some((base, query)) => (base, Some(query)),
        None => (url, None),
    };
    let authority_from = base.find("://").map(|i| i + 3).unwrap_or(0);
    let server = match base[authority_from..].find('/') {
        Some(slash) => &base[..authority_from + slash],
        None => base,
    };
    match query {
        Some(query) => format!("{server}/{name}?{query}"),
        None => format!("{server}/{name}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn database_urls() {
        assert_eq!(
            with_database("postgres://postgres@127.0.0.1:5432/postgres", "b1"),
            "postgres://postgres@127.0.0.1:5432/b1"
        );
        assert_eq!(with_database("postgres://h:5432", "b1"), "postgres://h:5432/b1");
        assert_eq!(
            with_database("postgresql://u:p@h/db?sslmode=disable", "b1"),
            "postgresql://u:p@h/b1?sslmode=disable"
        );
    }
}
