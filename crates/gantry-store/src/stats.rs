//! What an operator watches of the store, read when `/metrics` is scraped: the pools' use,
//! SQLite's staged backlog and WAL sizes, and the controls waiting for an ack (shared by every
//! node, so read from the database rather than counted in one process).

use sqlx::AnyPool;

/// One reading of the store's statistics (`SqlStore::stats`), which /metrics shows.
#[derive(Debug, Clone)]
pub struct StoreStats {
    /// `sqlite` or `postgres`.
    pub backend: &'static str,
    /// Each pool's connections.
    pub pools: Vec<PoolStats>,
    /// SQLite: events committed to the staging file that no move has taken yet.
    pub staged_events: Option<usize>,
    /// SQLite: the size of each write-ahead log (`main`, `staging`) in bytes; a missing file is 0.
    pub wal_bytes: Vec<(&'static str, u64)>,
    /// Controls in `processing`: sent, waiting for their ack.
    pub controls_pending: u64,
}

#[derive(Debug, Clone)]
pub struct PoolStats {
    /// `read`, `writer` or `ingest` on SQLite; `main` on PostgreSQL, whose one pool serves all.
    pub name: &'static str,
    /// Connections open, and of those the idle ones.
    pub open: u32,
    pub idle: u32,
    pub max: u32,
}

/// One pool's statistics, under `name`.
pub fn pool(name: &'static str, pool: &AnyPool) -> PoolStats {
    PoolStats {
        name,
        open: pool.size(),
        idle: pool.num_idle() as u32,
        max: pool.options().get_max_connections(),
    }
}

/// A file's size in bytes; a missing file is 0.
pub fn file_size(path: &std::path::Path) -> u64 {
    std::fs::metadata(path).map(|m| m.len()).unwrap_or(0)
}
