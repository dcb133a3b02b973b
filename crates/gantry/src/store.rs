//! Which store engine serves: the one the database URL's scheme names, each from its own crate.

use gantry_store::SqlStore;
pub use gantry_store::task::Chores;
pub use gantry_store_sqlite::sqlite_url;

/// `connect_in` with the engine's chores on a tracker of their own: for tools that open the
/// store alone.
pub async fn connect(database_url: &str) -> anyhow::Result<SqlStore> {
    connect_in(database_url, Chores::alone()).await
}

/// Connects to a `sqlite:` or `postgres:` (`postgresql:`) URL and brings its schema up to date;
/// a SQLite database file (and its directory) is created when missing. The engine's background
/// chores run as `chores`.
pub async fn connect_in(database_url: &str, chores: Chores) -> anyhow::Result<SqlStore> {
    if database_url.starts_with("sqlite:") {
        Ok(gantry_store_sqlite::connect_in(database_url, chores).await?)
    } else if database_url.starts_with("postgres:") || database_url.starts_with("postgresql:") {
        Ok(gantry_store_postgres::connect_in(database_url, chores).await?)
    } else {
        anyhow::bail!("the database URL must start with sqlite: or postgres:")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn other_schemes_are_refused_by_name() {
        let refused = connect("mysql://h/db").await.unwrap_err().to_string();
        assert!(refused.contains("must start with sqlite: or postgres:"), "{refused}");
    }
}
