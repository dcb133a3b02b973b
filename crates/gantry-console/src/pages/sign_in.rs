//! Sign-in and sign-out: a user account's username and password, or a token (`Credential` in
//! `session.rs` is what a session keeps). Before a session exists, the form's CSRF token is paired
//! with a short-lived cookie of its own.

use axum::Form;
use axum::extract::State;
use axum::http::header::{LOCATION, SET_COOKIE};
use axum::http::{HeaderMap, StatusCode, request::Parts};
use axum::response::{IntoResponse, Response};
use gantry_core::Error;
use gantry_core::principal::Principal;
use maud::{Markup, html};
use serde::Deserialize;

use crate::form::{self, Problem};
use crate::session::{self, COOKIE, Credential, SIGN_IN_COOKIE, Signed};
use crate::{ClientIp, Console, layout};

/// `GET /console/sign-in`.
pub async fn form(parts: Parts) -> Response {
    let csrf = session::random_token();
    let cookie = session::set_cookie(SIGN_IN_COOKIE, &csrf, session::is_https(&parts));
    ([(SET_COOKIE, cookie)], render(&csrf, None, None)).into_response()
}

fn render(csrf: &str, problem: Option<&Problem>, notice: Option<&str>) -> Markup {
    layout::bare(
        "Sign in",
        html! {
            h1 { "Sign in" }
            @if let Some(notice) = notice { p.notice role="status" { (notice) } }
            form.card method="post" action="/console/session" {
                input type="hidden" name="csrf" value=(csrf);
                (form::general(problem))
                (form::input("Username", "username", "text", "", problem))
                (form::input("Password", "password", "password", "", problem))
                p.hint { "Or, instead of a user account:" }
                (form::input("Token", "token", "password", "", problem))
                p.hint { "The system administrator's token, a tenant administrator's token, or a project's application token." }
                button.primary type="submit" { "Sign in" }
            }
        },
    )
}

/// The sign-in form as posted: a user account's `username` and `password`, or a `token`.
#[derive(Deserialize)]
pub struct SignIn {
    #[serde(default)]
    csrf: String,
    token: Option<String>,
    username: Option<String>,
    password: Option<String>,
}

/// What the form asks to sign in with.
enum Asked {
    User { username: String, password: String },
    Token(String),
}

impl SignIn {
    fn asked(self) -> Result<Asked, Problem> {
        let filled = |v: Option<String>| v.filter(|v| !v.trim().is_empty());
        if let Some(username) = filled(self.username) {
            return match self.password.filter(|p| !p.is_empty()) {
                Some(password) => Ok(Asked::User { username, password }),
                None => Err(Problem::of(&Error::invalid("password", "is required"))),
            };
        }
        match filled(self.token) {
            Some(token) => Ok(Asked::Token(token.trim().to_owned())),
            None => Err(Problem::of(&Error::invalid("username", "or a token is required"))),
        }
    }
}

/// Signs a user in through the users service (its back-off, the address ban and the audit log
/// apply as to `POST /api/v1/auth/login`); the session's token is then the console session's
/// credential, so locking the user ends it.
async fn user_session(
    console: &Console,
    username: &str,
    password: &str,
    ip: Option<std::net::IpAddr>,
) -> Result<Credential, Error> {
    match console.services.users.login(username, password, ip).await {
        Ok(signed_in) => Ok(Credential::Token(signed_in.token)),
        Err(Error::Unauthorized) => Err(Error::invalid("password", "the username or the password is wrong")),
        Err(e) => Err(e),
    }
}

/// `POST /console/session`: opens a session for a valid credential.
pub async fn create(State(console): State<Console>, parts: Parts, Form(sign_in): Form<SignIn>) -> Response {
    let https = session::is_https(&parts);
    let expected = session::cookie(&parts.headers, SIGN_IN_COOKIE).unwrap_or_default();
    if expected.is_empty() || sign_in.csrf != expected {
        let notice = "The sign-in form had expired; please sign in again.";
        return fresh(StatusCode::FORBIDDEN, https, None, Some(notice));
    }
    let asked = match sign_in.asked() {
        Ok(asked) => asked,
        Err(problem) => return fresh(StatusCode::BAD_REQUEST, https, Some(&problem), None),
    };
    let ip = parts.extensions.get::<ClientIp>().map(|c| c.0);
    let credential = match asked {
        Asked::Token(token) => Credential::Token(token),
        Asked::User { username, password } => match user_session(&console, &username, &password, ip).await {
            Ok(credential) => match credential.principal(&console.services).await {
                Ok(who) => return opened(&console, credential, &who, https),
                Err(e) => return refused(&e, https),
            },
            Err(e) => return refused(&e, https),
        },
    };
    let guard = &console.services.login_guard;
    let attempt = match ip {
        Some(ip) => match guard.attempt(ip).await {
            Some(a) => Some(a),
            None => {
                let problem = Problem::of(&Error::Busy("too many failed sign-ins from this address".into()));
                return fresh(StatusCode::TOO_MANY_REQUESTS, https, Some(&problem), None);
            }
        },
        None => None,
    };
    let refusal = match credential.principal(&console.services).await {
        Ok(Principal::Device { .. }) => Error::invalid("token", "a device token cannot sign in to the console"),
        Ok(who) => {
            if let Some(a) = attempt {
                a.succeeded();
            }
            return opened(&console, credential, &who, https);
        }
        Err(Error::Unauthorized) => Error::invalid("token", "is not a valid token"),
        Err(e) => e,
    };
    if let (Some(a), Error::Invalid { .. }) = (attempt, &refusal) {
        a.failed();
    }
    refused(&refusal, https)
}

/// The form again, saying why the sign-in was refused.
fn refused(refusal: &Error, https: bool) -> Response {
    fresh(
        crate::error::status_of(refusal),
        https,
        Some(&Problem::of(refusal)),
        None,
    )
}

/// The form again with a new CSRF pair, and what was wrong.
fn fresh(status: StatusCode, https: bool, problem: Option<&Problem>, notice: Option<&str>) -> Response {
    let csrf = session::random_token();
    let cookie = session::set_cookie(SIGN_IN_COOKIE, &csrf, https);
    (status, [(SET_COOKIE, cookie)], render(&csrf, problem, notice)).into_response()
}

fn opened(console: &Console, credential: Credential, who: &Principal, https: bool) -> Response {
    let id = console.sessions.open(credential);
    let home = match who {
        Principal::Application { project, .. } => format!("/console/projects/{project}"),
        _ => "/console/projects".to_owned(),
    };
    let mut headers = HeaderMap::new();
    headers.append(
        SET_COOKIE,
        session::set_cookie(COOKIE, &id, https).parse().expect("cookie"),
    );
    headers.append(
        SET_COOKIE,
        session::set_cookie(SIGN_IN_COOKIE, "", https).parse().expect("cookie"),
    );
    headers.insert(LOCATION, home.parse().expect("location"));
    (StatusCode::SEE_OTHER, headers).into_response()
}

#[derive(Deserialize)]
pub struct SignOut {}

/// `POST /console/session/end`: closes the session and clears its cookie.
pub async fn end(State(console): State<Console>, parts: Parts, posted: session::Posted<SignOut>) -> Response {
    let Signed { session, who, .. } = posted.signed;
    // A user's session token ends with the console session: nothing holds it any more.
    if let (Principal::User { .. }, Some(Credential::Token(token))) = (&who, console.sessions.credential(&session))
        && let Err(e) = console.services.users.logout(&who, &token).await
    {
        tracing::warn!(error = %e, "the user's session did not end at sign-out");
    }
    closed(&console, &session, session::is_https(&parts), "You are signed out.")
}

/// Closes the console session `id`, clears its cookie and shows the sign-in form with `notice`:
/// after a sign-out, and after a change that ended the user's sessions (its own password).
pub fn closed(console: &Console, id: &str, https: bool, notice: &str) -> Response {
    console.sessions.close(id);
    let csrf = session::random_token();
    let mut headers = HeaderMap::new();
    headers.append(
        SET_COOKIE,
        session::set_cookie(COOKIE, "", https).parse().expect("cookie"),
    );
    headers.append(
        SET_COOKIE,
        session::set_cookie(SIGN_IN_COOKIE, &csrf, https)
            .parse()
            .expect("cookie"),
    );
    (headers, render(&csrf, None, Some(notice))).into_response()
}
