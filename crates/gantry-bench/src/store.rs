//! The stores a run measures, and what differs between them as data: the MQTT ingest rate the
//! issue asks of each, whether the targets it sets for the embedded default are a store's own,
//! and how a store is seeded. Everything else treats the stores alike.

use std::fmt;

use serde::Serialize;

use crate::scenarios::ingest_mqtt::EMBEDDED_FLOOR;

/// Which store a run measured.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Store {
    /// The embedded default, on its staging event engine.
    Sqlite,
    /// The embedded default on its clustered event engine (`GANTRY_SQLITE_ENGINE=clustered`),
    /// measured beside the staging engine until the comparison of issue 26 has decided.
    #[serde(rename = "sqlite-clustered")]
    SqliteClustered,
    Postgres,
    /// A Gantry started by someone else (`--url`), whatever its store.
    Remote,
}

/// What the issue and the bench ask of one store.
#[derive(Debug)]
pub struct Profile {
    /// As the report and the file names spell it.
    pub name: &'static str,
    /// As a sentence names it.
    pub title: &'static str,
    /// The events/s of MQTT ingest the issue asks of this store, when it names the store. A run
    /// offered more also measures ingest-mqtt at this rate, where the store's MQTT targets are
    /// checked.
    pub own_mqtt_floor: Option<f64>,
    /// The targets are the embedded default's; on a store where they are not its own,
    /// they are shown for reference (only the targets set for every store count).
    pub embedded_targets_are_own: bool,
    /// Seeding writers: SQLite writes one transaction at a time, PostgreSQL takes two (of
    /// different devices).
    pub seed_writers: usize,
}

const SQLITE: Profile = Profile {
    name: "sqlite",
    title: "SQLite",
    own_mqtt_floor: None,
    embedded_targets_are_own: true,
    seed_writers: 1,
};

const SQLITE_CLUSTERED: Profile = Profile {
    name: "sqlite-clustered",
    title: "SQLite (clustered engine)",
    ..SQLITE
};

const POSTGRES: Profile = Profile {
    name: "postgres",
    title: "PostgreSQL",
    own_mqtt_floor: Some(crate::scenarios::ingest_mqtt::POSTGRES_FLOOR),
    embedded_targets_are_own: false,
    seed_writers: 2,
};

const REMOTE: Profile = Profile {
    name: "remote",
    title: "the remote Gantry",
    own_mqtt_floor: None,
    embedded_targets_are_own: true,
    seed_writers: 1,
};

impl Store {
    pub fn profile(self) -> &'static Profile {
        match self {
            Store::Sqlite => &SQLITE,
            Store::SqliteClustered => &SQLITE_CLUSTERED,
            Store::Postgres => &POSTGRES,
            Store::Remote => &REMOTE,
        }
    }

    pub fn name(self) -> &'static str {
        self.profile().name
    }

    /// The MQTT ingest rate this store's targets are checked at.
    pub fn mqtt_floor(self) -> f64 {
        self.profile().own_mqtt_floor.unwrap_or(EMBEDDED_FLOOR)
    }
}

impl fmt::Display for Store {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}
