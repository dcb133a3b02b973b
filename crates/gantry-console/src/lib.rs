//! Gantry's operator console: server-rendered pages at `/console/` over the core services, with
//! htmx and its SSE extension (vendored under `assets/vendor/`) for the parts that change live.
//!
//! A page is a handler in `pages/` that reads through the core services with the signed-in
//! caller's principal and renders HTML with maud; a form posts back to the console, which calls
//! the same service the REST API calls, so a rule (and a refusal) lives in one place.

mod assets;
mod audit;
mod chart;
mod error;
mod form;
mod layout;
mod live;
mod map;
mod pages;
mod refusal;
mod session;
mod shell;

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::routing::{get, post};
use gantry_core::Services;

pub use live::RELOAD;
pub use session::{Credential, Sessions};

/// How the console is served.
#[derive(Debug, Clone)]
pub struct ConsoleConfig {
    /// A tile URL template (`https://tiles.example/{z}/{x}/{y}.png`) for the overview map; None
    /// draws the positions on a plain SVG plot, which works offline.
    pub map_tiles: Option<String>,
    /// How long a session lives without a request.
    pub idle_timeout: Duration,
}

impl Default for ConsoleConfig {
    fn default() -> Self {
        Self {
            map_tiles: None,
            idle_timeout: Duration::from_secs(8 * 3600),
        }
    }
}

/// Put on the requests of an HTTPS listener (`axum::Extension(Transport::Https)`): the
/// session cookie is then `Secure`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transport {
    Https,
}

/// The client's address, put on each request by the binary: the sign-in form counts failed
/// attempts per address through the login guard, as the API and the broker do.
#[derive(Debug, Clone, Copy)]
pub struct ClientIp(pub std::net::IpAddr);

/// What every console handler gets.
#[derive(Clone)]
pub struct Console {
    pub services: Arc<Services>,
    pub sessions: Arc<Sessions>,
    pub config: Arc<ConsoleConfig>,
}

impl Console {
    pub fn new(services: Arc<Services>, config: ConsoleConfig) -> Self {
        Self {
            services,
            sessions: Arc::new(Sessions::new(config.idle_timeout)),
            config: Arc::new(config),
        }
    }
}

/// The console's routes, all under `/console`, with its security headers on every answer.
pub fn router(console: Console) -> Router {
    let pages = Router::new()
        .route("/", get(pages::home))
        .route("/sign-in", get(pages::sign_in::form))
        .route("/session", post(pages::sign_in::create))
        .route("/session/end", post(pages::sign_in::end))
        .route("/assets/{file}", get(assets::serve))
        .merge(pages::projects::routes())
        .merge(pages::overview::routes())
        .merge(pages::devices::routes())
        .merge(pages::device::routes())
        .merge(pages::device_actions::routes())
        .merge(pages::models::routes())
        .merge(pages::logs::routes())
        .merge(pages::webhooks::routes())
        .merge(pages::alarms::routes())
        .merge(pages::alarm::routes())
        .merge(pages::users::routes())
        .merge(pages::user_edit::routes())
        .merge(pages::account::routes())
        .merge(pages::audit::routes())
        .route("/projects/{id}/live", get(live::project))
        .route("/projects/{id}/alarms/live", get(live::alarms))
        .route("/devices/{id}/live", get(live::device))
        .route("/alarms/{id}/live", get(live::alarm))
        .fallback(error::not_found);
    Router::new()
        .nest("/console", pages)
        .route("/console/", get(pages::home))
        .layer(axum::middleware::from_fn_with_state(
            console.clone(),
            audit::record_changes,
        ))
        .layer(axum::middleware::from_fn_with_state(
            console.clone(),
            layout::security_headers,
        ))
        .with_state(console)
}
