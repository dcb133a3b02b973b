//! The one error type of the domain; the API maps it to a status and a `returnCode` in one place.

pub type Result<T, E = Error> = std::result::Result<T, E>;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{field}: {reason}")]
    Invalid { field: String, reason: String },
    #[error("missing or unknown bearer token")]
    Unauthorized,
    #[error("{0}")]
    Forbidden(String),
    #[error("{kind} {id} not found")]
    NotFound { kind: &'static str, id: String },
    #[error("{0}")]
    Duplicate(String),
    #[error("{0}")]
    Conflict(String),
    #[error("too many requests: {0}")]
    Busy(String),
    /// A bound on what one tenant may hold (webhooks per project, stream subscribers...):
    /// `limit` names it as its setting does.
    #[error("{what}: the limit of {max} is reached (--{limit})")]
    LimitReached {
        what: &'static str,
        limit: &'static str,
        max: u64,
    },
    #[error("the service is shutting down")]
    Unavailable,
    #[error("store failure")]
    Store(#[source] Box<dyn std::error::Error + Send + Sync>),
    /// The store cannot be reached or cannot write now (connection lost, server restarting,
    /// disk full): a client may retry, and nothing was changed.
    #[error("store unavailable")]
    StoreUnavailable(#[source] Box<dyn std::error::Error + Send + Sync>),
}

impl Error {
    pub fn invalid(field: impl Into<String>, reason: impl Into<String>) -> Self {
        Error::Invalid {
            field: field.into(),
            reason: reason.into(),
        }
    }

    pub fn not_found(kind: &'static str, id: impl std::fmt::Display) -> Self {
        Error::NotFound {
            kind,
            id: id.to_string(),
        }
    }

    pub fn forbidden(what: impl Into<String>) -> Self {
        Error::Forbidden(what.into())
    }

    pub fn store(source: impl std::error::Error + Send + Sync + 'static) -> Self {
        Error::Store(Box::new(source))
    }

    /// The same error for a second waiter (the ingest writer answers each submission of a
    /// failed batch): the kind is kept, the source becomes its text.
    pub fn duplicate_for_waiter(&self) -> Self {
        let text = |e: &dyn std::fmt::Display| Box::new(std::io::Error::other(e.to_string()));
        match self {
            Error::StoreUnavailable(source) => Error::StoreUnavailable(text(source)),
            _ => Error::Store(text(self)),
        }
    }
}
