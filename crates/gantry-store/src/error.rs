//! Failed statements as the domain's errors: what a client may retry, what names a duplicate.

use gantry_core::Error;

/// A failed statement as the domain's error: a store that cannot be reached or cannot write now
/// (connection lost, the server restarting or refusing connections, a full disk, an I/O error)
/// is `StoreUnavailable`, which clients may retry; anything else is a store failure.
pub fn db_error(error: sqlx::Error) -> Error {
    if is_unavailable(&error) {
        Error::StoreUnavailable(Box::new(error))
    } else {
        Error::store(error)
    }
}

/// A failed flush of SQLite's WAL to disk: the commit is not durable, and the disk may be full.
pub fn io_unavailable(error: std::io::Error) -> Error {
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
pub fn write_error<'a>(kind: &'static str, name: &'a str) -> impl FnOnce(sqlx::Error) -> Error + 'a {
    move |error| match &error {
        sqlx::Error::Database(db) if db.is_unique_violation() => {
            Error::Duplicate(format!("a {kind} named `{name}` already exists"))
        }
        _ => db_error(error),
    }
}
