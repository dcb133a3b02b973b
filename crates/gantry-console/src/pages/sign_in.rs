//! Sign-in and sign-out. The form takes a token today; a username and password join it with the
//! users issue (`Credential` in `session.rs` is the seam). Before a session exists, the form's CSRF
//! token is paired with a short-lived cookie of its own.

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
                (form::input("Token", "token", "password", "", problem))
                p.hint { "The system administrator's token, a tenant administrator's token, or a project's application token." }
                button.primary type="submit" { "Sign in" }
            }
        },
    )
}

/// The sign-in form as posted. `username` and `password` are read so that the form of the
/// users issue posts to the same place.
#[derive(Deserialize)]
pub struct SignIn {
    #[serde(default)]
    csrf: String,
    token: Option<String>,
    username: Option<String>,
    #[allow(dead_code)]
    password: Option<String>,
}

impl SignIn {
    fn credential(self) -> Result<Credential, Problem> {
        if self.username.as_deref().is_some_and(|u| !u.is_empty()) {
            return Err(Problem::of(&Error::invalid(
                "username",
                "this server has no user accounts yet: sign in with a token",
            )));
        }
        match self.token.map(|t| t.trim().to_owned()).filter(|t| !t.is_empty()) {
            Some(token) => Ok(Credential::Token(token)),
            None => Err(Problem::of(&Error::invalid("token", "is required"))),
        }
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
    let credential = match sign_in.credential() {
        Ok(c) => c,
        Err(problem) => return fresh(StatusCode::BAD_REQUEST, https, Some(&problem), None),
    };
    let ip = parts.extensions.get::<ClientIp>().map(|c| c.0);
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
    fresh(
        crate::error::status_of(&refusal),
        https,
        Some(&Problem::of(&refusal)),
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
    let Signed { session, .. } = posted.signed;
    console.sessions.close(&session);
    let https = session::is_https(&parts);
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
    (headers, render(&csrf, None, Some("You are signed out."))).into_response()
}
