//! The one mapping from errors to HTTP: a status and a stable non-zero `returnCode`.

use axum::Json;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use gantry_core::Error;
use serde::Serialize;
use utoipa::ToSchema;

/// The body of every error response.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ErrorBody {
    /// Non-zero; stable per kind of error (see the README's table).
    pub return_code: i32,
    /// What was wrong, naming the field.
    pub message: String,
}

/// The `returnCode` of each kind of error.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(i32)]
pub enum ReturnCode {
    Invalid = 40000,
    MalformedBody = 40001,
    Unauthorized = 40100,
    Forbidden = 40300,
    NotFound = 40400,
    MethodNotAllowed = 40500,
    Duplicate = 40900,
    Conflict = 40901,
    PreconditionFailed = 41200,
    TooLarge = 41300,
    Busy = 42900,
    Banned = 42901,
    LimitReached = 42902,
    UnsupportedMediaType = 41500,
    Internal = 50000,
    Serialization = 50001,
    Unavailable = 50300,
    StoreUnavailable = 50301,
    Downlink = 50302,
    AuditNotWritten = 50303,
}

/// The response header of `PUT /shadows` (its answer, or its 503 when the publish failed) that
/// names the control's event log.
pub const EVENT_LOG_HEADER: &str = "x-gantry-event-log-id";

/// An error on its way to the client.
#[derive(Debug)]
pub enum ApiError {
    Core(Error),
    /// The body is not JSON of the expected shape.
    MalformedBody(String),
    TooLarge,
    /// A body that does not say it is JSON.
    NotJson,
    /// The caller's address failed too many logins lately.
    Banned,
    NoRoute,
    MethodNotAllowed,
    /// A change was made, but its audit record could not be written (`audit.rs`).
    AuditNotWritten(Error),
}

impl From<Error> for ApiError {
    fn from(e: Error) -> Self {
        ApiError::Core(e)
    }
}

impl ApiError {
    fn parts(&self) -> (StatusCode, ReturnCode, String) {
        match self {
            ApiError::Core(e) => core_parts(e),
            ApiError::AuditNotWritten(source) => {
                tracing::error!(error = %source, cause = ?source, "a change was made but its audit record was not written");
                (
                    StatusCode::SERVICE_UNAVAILABLE,
                    ReturnCode::AuditNotWritten,
                    "the change was made, but its audit record could not be written; read the resource \
                     before sending the change again"
                        .to_owned(),
                )
            }
            ApiError::MalformedBody(why) => (StatusCode::BAD_REQUEST, ReturnCode::MalformedBody, why.clone()),
            ApiError::TooLarge => (
                StatusCode::PAYLOAD_TOO_LARGE,
                ReturnCode::TooLarge,
                "the request body exceeds the size limit".to_owned(),
            ),
            ApiError::Banned => (
                StatusCode::TOO_MANY_REQUESTS,
                ReturnCode::Banned,
                "too many failed logins from this address; retry later".to_owned(),
            ),
            ApiError::NotJson => (
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                ReturnCode::UnsupportedMediaType,
                "Content-Type: the body must be sent as application/json".to_owned(),
            ),
            ApiError::NoRoute => (
                StatusCode::NOT_FOUND,
                ReturnCode::NotFound,
                "no such endpoint".to_owned(),
            ),
            ApiError::MethodNotAllowed => (
                StatusCode::METHOD_NOT_ALLOWED,
                ReturnCode::MethodNotAllowed,
                "method not allowed on this endpoint".to_owned(),
            ),
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let (status, code, message) = self.parts();
        let mut response = (
            status,
            Json(ErrorBody {
                return_code: code as i32,
                message,
            }),
        )
            .into_response();
        if matches!(self, ApiError::Banned) {
            response.extensions_mut().insert(crate::request_log::RefusedBanned);
        }
        // A version conflict tells the version the document is at, as its GET does.
        if let ApiError::Core(Error::VersionMismatch { current }) = &self
            && let Ok(value) = axum::http::HeaderValue::from_str(&format!("\"{current}\""))
        {
            response.headers_mut().insert(axum::http::header::ETAG, value);
        }
        // A control whose log was stored names it, as its success does.
        if let ApiError::Core(Error::Downlink {
            event_log: Some(id), ..
        }) = &self
            && let Ok(value) = axum::http::HeaderValue::from_str(id)
        {
            response.headers_mut().insert(EVENT_LOG_HEADER, value);
        }
        response
    }
}

pub type ApiResult<T> = Result<T, ApiError>;

pub async fn no_route() -> ApiError {
    ApiError::NoRoute
}

pub async fn method_not_allowed() -> ApiError {
    ApiError::MethodNotAllowed
}

/// The status, code and message of a core error.
fn core_parts(e: &Error) -> (StatusCode, ReturnCode, String) {
    match e {
        Error::Invalid { .. } => (StatusCode::BAD_REQUEST, ReturnCode::Invalid, e.to_string()),
        Error::Unauthorized => (StatusCode::UNAUTHORIZED, ReturnCode::Unauthorized, e.to_string()),
        Error::Forbidden(_) => (StatusCode::FORBIDDEN, ReturnCode::Forbidden, e.to_string()),
        Error::NotFound { .. } => (StatusCode::NOT_FOUND, ReturnCode::NotFound, e.to_string()),
        Error::Duplicate(_) => (StatusCode::CONFLICT, ReturnCode::Duplicate, e.to_string()),
        Error::Conflict(_) => (StatusCode::CONFLICT, ReturnCode::Conflict, e.to_string()),
        Error::VersionMismatch { .. } => (
            StatusCode::PRECONDITION_FAILED,
            ReturnCode::PreconditionFailed,
            e.to_string(),
        ),
        Error::Busy(_) => (StatusCode::TOO_MANY_REQUESTS, ReturnCode::Busy, e.to_string()),
        Error::Banned => ApiError::Banned.parts(),
        Error::LimitReached { .. } => (StatusCode::TOO_MANY_REQUESTS, ReturnCode::LimitReached, e.to_string()),
        Error::Unavailable => (StatusCode::SERVICE_UNAVAILABLE, ReturnCode::Unavailable, e.to_string()),
        Error::StoreUnavailable(source) => {
            tracing::warn!(error = %source, "store unavailable");
            (
                StatusCode::SERVICE_UNAVAILABLE,
                ReturnCode::StoreUnavailable,
                "store unavailable; nothing was changed, retry later".to_owned(),
            )
        }
        Error::Downlink { event_log, source } => {
            tracing::warn!(event_log, error = %source, cause = ?source, "message to the device not published");
            let message = match event_log {
                Some(id) => format!(
                    "the message could not be published to the device; its event log {id} was stored \
                     and ends in exception if it awaits an ack that does not come"
                ),
                None => "the message could not be published to the device; retry later".to_owned(),
            };
            (StatusCode::SERVICE_UNAVAILABLE, ReturnCode::Downlink, message)
        }
        Error::Serialization(source) => {
            tracing::error!(error = %source, cause = ?source, "JSON could not be made");
            (
                StatusCode::INTERNAL_SERVER_ERROR,
                ReturnCode::Serialization,
                "internal error: a JSON document could not be made".to_owned(),
            )
        }
        Error::Store(source) => {
            tracing::error!(error = %source, cause = ?source, "store failure");
            (
                StatusCode::INTERNAL_SERVER_ERROR,
                ReturnCode::Internal,
                "internal error".to_owned(),
            )
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each failure that is not the store's has its own status and code; a stored control's
    /// names its event log in the body and the header.
    #[test]
    fn failures_are_named_by_what_failed() {
        let cases = [
            (
                Error::downlink(std::io::Error::other("broker gone")).for_stored_control("log-7"),
                StatusCode::SERVICE_UNAVAILABLE,
                50302,
                Some("log-7"),
            ),
            (
                Error::downlink(std::io::Error::other("broker gone")),
                StatusCode::SERVICE_UNAVAILABLE,
                50302,
                None,
            ),
            (
                Error::serialization(serde_json::from_str::<u8>("x").unwrap_err()),
                StatusCode::INTERNAL_SERVER_ERROR,
                50001,
                None,
            ),
        ];
        let audit = ApiError::AuditNotWritten(Error::Unavailable);
        let (status, code, message) = audit.parts();
        assert_eq!((status, code as i32), (StatusCode::SERVICE_UNAVAILABLE, 50303));
        assert!(message.contains("the change was made"), "{message}");
        for (error, status, code, log) in cases {
            let api = ApiError::from(error);
            let (got_status, got_code, message) = api.parts();
            assert_eq!((got_status, got_code as i32), (status, code), "{message}");
            let response = api.into_response();
            let header = response.headers().get(EVENT_LOG_HEADER);
            assert_eq!(header.and_then(|h| h.to_str().ok()), log);
            if let Some(log) = log {
                assert!(message.contains(log), "{message}");
            }
        }
    }
}
