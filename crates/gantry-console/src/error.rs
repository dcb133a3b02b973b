//! What a console request that fails answers: the way to the sign-in form, or a page that says
//! in words what went wrong. The status is the one the REST API gives the same error.

use axum::http::StatusCode;
use axum::http::header::LOCATION;
use axum::response::{IntoResponse, Response};
use gantry_core::Error;
use maud::html;

use crate::layout;

#[derive(Debug)]
pub enum PageError {
    /// No session, or its credential stopped working.
    SignIn,
    /// A form without the session's CSRF token.
    Csrf,
    /// A body that is not a form of the expected fields.
    BadForm(String),
    /// What a core service refused.
    Core(Error),
}

impl From<Error> for PageError {
    fn from(e: Error) -> Self {
        PageError::Core(e)
    }
}

pub type PageResult<T> = Result<T, PageError>;

/// The HTTP status of a core error, as the REST API maps it.
pub fn status_of(e: &Error) -> StatusCode {
    match e {
        Error::Invalid { .. } => StatusCode::BAD_REQUEST,
        Error::Unauthorized => StatusCode::UNAUTHORIZED,
        Error::Forbidden(_) => StatusCode::FORBIDDEN,
        Error::NotFound { .. } => StatusCode::NOT_FOUND,
        Error::Duplicate(_) | Error::Conflict(_) => StatusCode::CONFLICT,
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
        other => other.to_string(),
    }
}

impl IntoResponse for PageError {
    fn into_response(self) -> Response {
        let (status, title, text) = match self {
            PageError::SignIn => {
                return (
                    StatusCode::SEE_OTHER,
                    [(LOCATION, "/console/sign-in"), (axum::http::HeaderName::from_static("hx-redirect"), "/console/sign-in")],
                )
                    .into_response();
            }
            PageError::Csrf => (
                StatusCode::FORBIDDEN,
                "Form expired",
                "This form does not belong to your session. Reload the page and send it again.".to_owned(),
            ),
            PageError::BadForm(why) => (StatusCode::BAD_REQUEST, "Bad form", why),
            PageError::Core(e) => (status_of(&e), "Refused", words(&e)),
        };
        let body = layout::bare(title, html! { h1 { (title) } p.error role="alert" { (text) } p { a href="/console/" { "Back to the console" } } });
        (status, body).into_response()
    }
}

/// Any path under /console that is no page.
pub async fn not_found() -> Response {
    let body = layout::bare("Not found", html! { h1 { "Not found" } p { "There is no such page." } p { a href="/console/" { "Back to the console" } } });
    (StatusCode::NOT_FOUND, body).into_response()
}
