//! Gantry's domain: identifiers, enums, records, validation, the store traits and the services
//! that HTTP and MQTT both call, so that every rule lives in one place.

pub mod auth;
pub mod cache;
pub mod catalog;
pub mod control;
pub mod enums;
pub mod error;
pub mod guard;
pub mod histogram;
pub mod ids;
pub mod ingest;
pub mod names;
pub mod paging;
pub mod records;
pub mod routes;
pub mod store;
pub mod telemetry;
pub mod text;
pub mod time;

pub use error::{Error, Result};

use std::sync::Arc;

/// Every service the front ends call, built once over one store.
pub struct Services {
    pub auth: auth::AuthService,
    pub catalog: Arc<catalog::CatalogService>,
    pub telemetry: telemetry::TelemetryService,
    pub control: Arc<control::ControlService>,
    pub routes: routes::RouteService,
    /// Failed logins per address, for HTTP and MQTT alike.
    pub login_guard: Arc<guard::LoginGuard>,
}

/// Addresses that projects advertise to their applications.
#[derive(Debug, Clone)]
pub struct PublicAddrs {
    /// `restfulApiAddr` of every project.
    pub rest: String,
    /// `mqApiAddr` of every project.
    pub mq: String,
}

impl Services {
    /// Wires the services over `store`; events go through `ingest`, messages to devices
    /// through `downlink`.
    pub fn new(
        store: Arc<dyn store::Store>,
        addrs: PublicAddrs,
        ingest: ingest::Ingest,
        downlink: Arc<dyn control::Downlink>,
        ack_timeout: std::time::Duration,
        route_config: routes::RouteConfig,
        login_guard: guard::LoginGuardConfig,
    ) -> Self {
        let tokens = Arc::new(auth::TokenCache::new(std::time::Duration::from_secs(5)));
        let catalog = Arc::new(catalog::CatalogService::new(
            store.clone(),
            addrs,
            downlink.clone(),
            tokens.clone(),
        ));
        let control = Arc::new(control::ControlService::new(
            store.clone(),
            catalog.clone(),
            downlink.clone(),
            ack_timeout,
        ));
        Self {
            auth: auth::AuthService::new(store.clone(), tokens),
            telemetry: telemetry::TelemetryService::new(store.clone(), catalog.clone(), control.clone(), ingest),
            routes: routes::RouteService::new(store, catalog.clone(), control.clone(), downlink, route_config),
            catalog,
            control,
            login_guard: Arc::new(guard::LoginGuard::new(login_guard)),
        }
    }
}
