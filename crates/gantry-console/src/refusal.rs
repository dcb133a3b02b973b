//! What a core error means to a person: its HTTP status (as the REST API gives it) and words
//! to show; internal causes are logged, not shown.

use axum::http::StatusCode;
use gantry_core::Error;

/// The HTTP status of a core error, as the REST API maps it.
pub fn status_of(e: &Error) -> StatusCode {
    match e {
        Error::Invalid { .. } => StatusCode::BAD_REQUEST,
        Error::Unauthorized => StatusCode::UNAUTHORIZED,
        Error::Forbidden(_) => StatusCode::FORBIDDEN,
        Error::NotFound { .. } => StatusCode::NOT_FOUND,
        Error::Duplicate(_) | Error::Conflict(_) => StatusCode::CONFLICT,
        Error::VersionMismatch { .. } => StatusCode::PRECONDITION_FAILED,
        Error::Busy(_) | Error::LimitReached { .. } => StatusCode::TOO_MANY_REQUESTS,
        _ => StatusCode::SERVICE_UNAVAILABLE,
    }
}

/// Words for a core error that a person can act on; internal causes are logged, not shown.
pub fn words(e: &Error) -> String {
    match e {
        Error::Store(_) | Error::StoreUnavailable(_) | Error::Serialization(_) => {
            tracing::error!(error = ?e, "console request failed");
            "The store could not answer; try again.".to_owned()
        }
        Error::Forbidden(why) => format!("Not allowed: {why}."),
        Error::VersionMismatch { current } => format!(
            "Someone changed this since the page was loaded (it is at version {current} now): \
             look at the values again and send the form again."
        ),
        other => other.to_string(),
    }
}
