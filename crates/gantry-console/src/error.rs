//! What a console request that fails answers: the way to the sign-in form, or a page that says
//! in words what went wrong. The status is the one the REST API gives the same error.

use axum::http::StatusCode;
use axum::http::header::LOCATION;
use axum::response::{IntoResponse, Response};
use gantry_core::Error;
use maud::html;

use crate::shell;

pub use crate::refusal::{status_of, words};

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

impl IntoResponse for PageError {
    fn into_response(self) -> Response {
        let (status, title, text) = match self {
            PageError::SignIn => {
                return (
                    StatusCode::SEE_OTHER,
                    [
                        (LOCATION, "/console/sign-in"),
                        (axum::http::HeaderName::from_static("hx-redirect"), "/console/sign-in"),
                    ],
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
        let body = shell::bare(
            title,
            html! { h1 { (title) } p.error role="alert" { (text) } p { a href="/console/" { "Back to the console" } } },
        );
        (status, body).into_response()
    }
}

/// Any path under /console that is no page.
pub async fn not_found() -> Response {
    let body = shell::bare(
        "Not found",
        html! { h1 { "Not found" } p { "There is no such page." } p { a href="/console/" { "Back to the console" } } },
    );
    (StatusCode::NOT_FOUND, body).into_response()
}
