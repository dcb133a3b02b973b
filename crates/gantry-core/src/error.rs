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
    /// An `If-Match` that names another version than the document's `current` one.
    #[error("If-Match: the document is at version {current}")]
    VersionMismatch { current: i64 },
    #[error("too many requests: {0}")]
    Busy(String),
    /// The caller's address failed too many logins lately: refused unchecked.
    #[error("too many failed logins from this address")]
    Banned,
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
    /// A message to a device could not be published (the broker refused it, or the external
    /// broker cannot be reached). `event_log` names the control's log when one was stored first.
    #[error("the message could not be published to the device")]
    Downlink {
        event_log: Option<String>,
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// A value could not be made into JSON.
    #[error("JSON could not be made")]
    Serialization(#[source] serde_json::Error),
    /// The store cannot be reached or cannot write now (connection lost, server restarting,
    /// disk full): a client may retry, and nothing was changed.
    #[error("store unavailable")]
    StoreUnavailable(#[source] Box<dyn std::error::Error + Send + Sync>),
}

/// `LimitReached` when `held` has reached `max`, the bound named `what` that `--{limit}` sets.
pub fn within_bound(held: u64, max: u64, what: &'static str, limit: &'static str) -> Result<()> {
    if held >= max {
        return Err(Error::LimitReached { what, limit, max });
    }
    Ok(())
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

    /// A publish to a device that failed.
    pub fn downlink(source: impl std::error::Error + Send + Sync + 'static) -> Self {
        Error::Downlink {
            event_log: None,
            source: Box::new(source),
        }
    }

    /// `self`, which a publish of the control whose event log `id` is stored ended in, as the
    /// downlink failure that names the log (whatever kind the downlink gave it).
    pub fn for_stored_control(self, id: &str) -> Self {
        let source = match self {
            Error::Downlink { source, .. } => source,
            other => Box::new(other),
        };
        Error::Downlink {
            event_log: Some(id.to_owned()),
            source,
        }
    }

    pub fn serialization(source: serde_json::Error) -> Self {
        Error::Serialization(source)
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stored_controls_publish_failure_names_its_log_and_keeps_the_cause() {
        let broker = std::io::Error::other("broker gone");
        for failure in [
            Error::downlink(std::io::Error::other("broker gone")),
            Error::store(broker),
        ] {
            let Error::Downlink { event_log, source } = failure.for_stored_control("log-1") else {
                panic!("a downlink failure");
            };
            assert_eq!(event_log.as_deref(), Some("log-1"));
            assert!(format!("{source:?}").contains("broker gone"), "{source:?}");
        }
    }
}
