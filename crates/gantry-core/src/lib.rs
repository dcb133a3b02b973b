//! Gantry's domain: identifiers, enums, records, validation, the store traits and the services
//! that HTTP and MQTT both call, so that every rule lives in one place.

pub mod auth;
pub mod catalog;
pub mod enums;
pub mod error;
pub mod ids;
pub mod ingest;
pub mod names;
pub mod paging;
pub mod records;
pub mod store;
pub mod telemetry;
pub mod time;

pub use error::{Error, Result};

use std::sync::Arc;

/// Every service the front ends call, built once over one store.
pub struct Services {
    pub auth: auth::AuthService,
    pub catalog: Arc<catalog::CatalogService>,
    pub telemetry: telemetry::TelemetryService,
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
    /// Wires the services over `store`; events go through `ingest`.
    pub fn new(store: Arc<dyn store::Store>, addrs: PublicAddrs, ingest: ingest::Ingest) -> Self {
        let catalog = Arc::new(catalog::CatalogService::new(store.clone(), addrs));
        Self {
            auth: auth::AuthService::new(store.clone()),
            telemetry: telemetry::TelemetryService::new(store, catalog.clone(), ingest),
            catalog,
        }
    }
}
