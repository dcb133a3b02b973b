//! Console sessions: a random id in an HttpOnly, SameSite=Strict cookie (Secure over HTTPS)
//! names a session kept on the server, which holds the credential it was opened with and a CSRF
//! token that every form carries back. The credential never leaves the server.
//!
//! Sessions live in this process's memory: a restart, or another node behind a balancer, asks
//! the operator to sign in again.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use axum::extract::{FromRequest, FromRequestParts, Request};
use axum::http::request::Parts;
use axum::http::{HeaderMap, header};
use gantry_core::principal::Principal;
use gantry_core::{Error, Services};
use rand::RngCore;
use serde::de::DeserializeOwned;

use crate::error::PageError;
use crate::{Console, Transport};

/// The session cookie.
pub const COOKIE: &str = "gantry_console";
/// The cookie that carries the sign-in form's CSRF token before a session exists.
pub const SIGN_IN_COOKIE: &str = "gantry_console_sign_in";
/// Sessions kept at most; the least recently used give way.
const MAX_SESSIONS: usize = 10_000;

/// What a session was opened with, checked again on every request so that a rotated token or a
/// removed account ends the session.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Credential {
    /// A bearer token: the system administrator's, a tenant administrator's or a project's
    /// application token, or the session token a user account's sign-in gave (which ends when
    /// the user is locked, deleted or changes password).
    Token(String),
}

impl Credential {
    /// The principal the credential stands for now.
    pub async fn principal(&self, services: &Services) -> gantry_core::Result<Principal> {
        match self {
            Credential::Token(token) => services.auth.authenticate(token).await,
        }
    }
}

struct Session {
    credential: Credential,
    csrf: String,
    last_used: Instant,
}

/// The sessions of this process.
pub struct Sessions {
    map: Mutex<HashMap<String, Session>>,
    idle: Duration,
}

impl Sessions {
    pub fn new(idle: Duration) -> Self {
        Self {
            map: Mutex::new(HashMap::new()),
            idle,
        }
    }

    /// Opens a session; returns its id.
    pub fn open(&self, credential: Credential) -> String {
        let id = random_token();
        let mut map = self.map.lock().expect("sessions lock");
        if map.len() >= MAX_SESSIONS {
            let idle = self.idle;
            map.retain(|_, s| s.last_used.elapsed() < idle);
            if map.len() >= MAX_SESSIONS
                && let Some(oldest) = map.iter().min_by_key(|(_, s)| s.last_used).map(|(k, _)| k.clone())
            {
                map.remove(&oldest);
            }
        }
        let session = Session {
            credential,
            csrf: random_token(),
            last_used: Instant::now(),
        };
        map.insert(id.clone(), session);
        id
    }

    /// The credential and CSRF token of a live session, marking it used.
    fn touch(&self, id: &str) -> Option<(Credential, String)> {
        let mut map = self.map.lock().expect("sessions lock");
        let session = map.get_mut(id)?;
        if session.last_used.elapsed() >= self.idle {
            map.remove(id);
            return None;
        }
        session.last_used = Instant::now();
        Some((session.credential.clone(), session.csrf.clone()))
    }

    pub fn close(&self, id: &str) {
        self.map.lock().expect("sessions lock").remove(id);
    }

    /// The credential of an open session, without marking it used (a live stream checks it
    /// and ends when the session is closed).
    pub fn credential(&self, id: &str) -> Option<Credential> {
        self.map
            .lock()
            .expect("sessions lock")
            .get(id)
            .map(|s| s.credential.clone())
    }
}

/// 32 random bytes, hex.
pub fn random_token() -> String {
    let mut bytes = [0u8; 32];
    rand::rng().fill_bytes(&mut bytes);
    hex::encode(bytes)
}

/// A cookie's value from the request's `Cookie` headers.
pub fn cookie<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(k, _)| *k == name)
        .map(|(_, v)| v)
}

/// A `Set-Cookie` value: HttpOnly and SameSite=Strict always, Secure over HTTPS; an empty
/// value removes the cookie.
pub fn set_cookie(name: &str, value: &str, https: bool) -> String {
    let secure = if https { "; Secure" } else { "" };
    let age = if value.is_empty() { "; Max-Age=0" } else { "" };
    format!("{name}={value}; Path=/console; HttpOnly; SameSite=Strict{secure}{age}")
}

/// Whether the request came over an HTTPS listener.
pub fn is_https(parts: &Parts) -> bool {
    parts.extensions.get::<Transport>() == Some(&Transport::Https)
}

/// The signed-in caller of a request: the session's id, its CSRF token and the principal its
/// credential stands for now. Without one, a page answers with the way to the sign-in form.
#[derive(Debug, Clone)]
pub struct Signed {
    pub session: String,
    pub csrf: String,
    pub who: Principal,
}

impl FromRequestParts<Console> for Signed {
    type Rejection = PageError;

    async fn from_request_parts(parts: &mut Parts, console: &Console) -> Result<Self, PageError> {
        let id = cookie(&parts.headers, COOKIE).ok_or(PageError::SignIn)?;
        let (credential, csrf) = console.sessions.touch(id).ok_or(PageError::SignIn)?;
        match credential.principal(&console.services).await {
            Ok(who) => Ok(Signed {
                session: id.to_owned(),
                csrf,
                who,
            }),
            Err(Error::Unauthorized) => {
                console.sessions.close(id);
                Err(PageError::SignIn)
            }
            Err(e) => Err(e.into()),
        }
    }
}

/// A form posted by the signed-in caller, its CSRF token checked: the one way a console handler
/// gets a form, so no POST goes without the check.
pub struct Posted<T> {
    pub signed: Signed,
    pub form: T,
}

impl<T: DeserializeOwned + Send> FromRequest<Console> for Posted<T> {
    type Rejection = PageError;

    async fn from_request(request: Request, console: &Console) -> Result<Self, PageError> {
        let (mut parts, body) = request.into_parts();
        let signed = Signed::from_request_parts(&mut parts, console).await?;
        let bytes = axum::body::to_bytes(body, 1 << 20)
            .await
            .map_err(|_| PageError::BadForm("the form is over 1 MiB".into()))?;
        let pairs: Vec<(String, String)> =
            serde_urlencoded::from_bytes(&bytes).map_err(|e| PageError::BadForm(e.to_string()))?;
        let sent = pairs.iter().find(|(k, _)| k == "csrf").map(|(_, v)| v.as_str());
        if sent != Some(signed.csrf.as_str()) {
            return Err(PageError::Csrf);
        }
        if let Some(caller) = parts.extensions.get::<crate::audit::FormCaller>() {
            caller.set(&signed.who, crate::audit::field_names(&pairs));
        }
        let form = serde_urlencoded::from_bytes(&bytes).map_err(|e| PageError::BadForm(e.to_string()))?;
        Ok(Posted { signed, form })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cookies_are_found_among_others() {
        let mut headers = HeaderMap::new();
        headers.insert(header::COOKIE, "a=1; gantry_console=abc; b=2".parse().unwrap());
        assert_eq!(cookie(&headers, COOKIE), Some("abc"));
        assert_eq!(cookie(&headers, "c"), None);
    }

    #[test]
    fn cookie_attributes() {
        let plain = set_cookie(COOKIE, "x", false);
        assert!(plain.contains("HttpOnly") && plain.contains("SameSite=Strict") && !plain.contains("Secure"));
        assert!(set_cookie(COOKIE, "x", true).contains("; Secure"));
        assert!(set_cookie(COOKIE, "", true).contains("Max-Age=0"));
    }

    #[test]
    fn idle_sessions_end() {
        let sessions = Sessions::new(Duration::from_millis(0));
        let id = sessions.open(Credential::Token("t".into()));
        assert!(sessions.touch(&id).is_none());
        let sessions = Sessions::new(Duration::from_secs(60));
        let id = sessions.open(Credential::Token("t".into()));
        assert!(sessions.touch(&id).is_some());
        sessions.close(&id);
        assert!(sessions.credential(&id).is_none());
    }
}
