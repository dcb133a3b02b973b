//! Gantry's domain: identifiers, enums, records, validation, the store traits and the services
//! that HTTP and MQTT both call, so that every rule lives in one place.
//!
//! Three layers, each importing only from those above it in this list:
//! - the domain: plain types and the rules that need nothing but their values (`error`, `ids`,
//!   `enums`, `names`, `time`, `text`, `paging`, `records`, `principal`, `token`, `event`,
//!   `message`, `event_log`, `desired`, `connection`, `stream`, `route`, `query`, `series`, `fields`, `webhook`,
//!   `alarm_rule`, `alarm`);
//! - the ports the services need from outside: the store traits (`store`), the way down to
//!   devices (`downlink`) and the way out to webhook receivers (`outbound`);
//! - the services (`auth`, `catalog`, `control`, `telemetry`, `routes`, `ingest`, `presence`,
//!   `event_rate`, `webhooks`, `delivery`, `desired_state`, `alarms`) and their helpers (`cache`, `guard`, `feed`,
//!   `group_commit`). A service that needs another holds it (`Arc<CatalogService>`) and calls
//!   its public methods.
//!
//! `.ci/import-cycles.sh` checks that no module imports, through others, itself.

// The domain.
pub mod alarm;
pub mod alarm_rule;
pub mod audit;
pub mod connection;
pub mod desired;
pub mod enums;
pub mod error;
pub mod event;
pub mod event_log;
pub mod fields;
pub mod ids;
pub mod message;
pub mod names;
pub mod paging;
pub mod principal;
pub mod query;
pub mod records;
pub mod route;
pub mod series;
pub mod stream;
pub mod text;
pub mod time;
pub mod token;
pub mod user;
pub mod webhook;

// The ports.
pub mod downlink;
pub mod outbound;
pub mod store;

// The services.
pub mod alarms;
pub mod auditing;
pub mod auth;
pub mod cache;
pub mod catalog;
pub mod control;
pub mod delivery;
pub mod desired_state;
pub mod event_rate;
pub mod feed;
pub mod group_commit;
pub mod guard;
pub mod histogram;
pub mod ingest;
pub mod presence;
pub mod publish;
pub mod routes;
pub mod telemetry;
pub mod users;
pub mod webhooks;

pub use catalog::PublicAddrs;
pub use error::{Error, Result};

use std::sync::Arc;

/// Every service the front ends call, built once over one store.
pub struct Services {
    pub auth: auth::AuthService,
    pub catalog: Arc<catalog::CatalogService>,
    pub telemetry: telemetry::TelemetryService,
    pub control: Arc<control::ControlService>,
    /// Desired states, and what a device is sent when it connects.
    pub desired: Arc<desired_state::DesiredStateService>,
    pub routes: routes::RouteService,
    /// The projects' push streams.
    pub feeds: Arc<feed::Feeds>,
    /// Which devices are connected now, and the changes as they happen.
    pub presence: Arc<presence::PresenceService>,
    /// Failed logins per address, for HTTP and MQTT alike.
    pub login_guard: Arc<guard::LoginGuard>,
    /// Projects' webhooks, and which of them an event goes to.
    pub webhooks: Arc<webhooks::WebhookService>,
    /// Alarm rules and alarms.
    pub alarms: Arc<alarms::AlarmService>,
    /// User accounts and their sign-in sessions.
    pub users: Arc<users::UserService>,
    /// The audit log: every change's record.
    pub audit: Arc<auditing::AuditService>,
    /// Each project's events per minute.
    pub event_rate: Arc<event_rate::EventRateService>,
}

impl Services {
    /// Wires the services over `store`; events go through `ingest`, messages to devices
    /// through `downlink`. The push streams' publisher, the alarm plan writer and the group
    /// commits of presence, event logs and desired states run as tasks of `tasks` until
    /// `publisher_stop` is cancelled.
    // The one place every part meets; a struct of them would only rename the arguments.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        store: Arc<dyn store::Store>,
        addrs: PublicAddrs,
        ingest: ingest::Ingest,
        downlink: Arc<dyn downlink::Downlink>,
        ack_timeout: std::time::Duration,
        route_config: routes::RouteConfig,
        login_guard: guard::LoginGuardConfig,
        sessions: user::SessionConfig,
        webhooks: webhooks::WebhookConfig,
        feed_limits: feed::FeedLimits,
        tasks: &tokio_util::task::TaskTracker,
        publisher_stop: tokio_util::sync::CancellationToken,
    ) -> Self {
        let tokens = Arc::new(auth::TokenCache::new(auth::TOKEN_CACHE_TTL));
        let feeds = Arc::new(feed::Feeds::new(feed_limits));
        let event_rate = Arc::new(event_rate::EventRateService::new(store.clone()));
        let publisher = publish::stream_publisher(store.clone(), feeds.clone(), tasks, publisher_stop.clone());
        let counter = event_rate.clone();
        ingest.on_committed(Arc::new(move |events| {
            counter.count(events, time::now_ms());
            publisher(events);
        }));
        let catalog = Arc::new(catalog::CatalogService::new(
            store.clone(),
            addrs,
            downlink.clone(),
            tokens.clone(),
        ));
        let webhooks = Arc::new(webhooks::WebhookService::new(store.clone(), catalog.clone(), webhooks));
        let writers = (tasks, &publisher_stop);
        let parts = (&store, &catalog, &feeds, &webhooks);
        let (control, desired) = commands(parts, downlink.clone(), ack_timeout, writers);
        let presence = Arc::new(presence::PresenceService::new(
            store.clone(),
            catalog.clone(),
            (feeds.clone(), webhooks.clone()),
            writers,
        ));
        let alarms = Arc::new(alarms::AlarmService::new(
            (store.clone(), store.clone()),
            catalog.clone(),
            webhooks.clone(),
            feeds.clone(),
            (tasks, publisher_stop),
        ));
        let (login_guard, audit, users) = people(&store, &tokens, login_guard, sessions);
        Self {
            auth: auth::AuthService::new(store.clone(), tokens, sessions),
            telemetry: telemetry::TelemetryService::new(
                store.clone(),
                catalog.clone(),
                control.clone(),
                desired.clone(),
                ingest,
                webhooks.clone(),
                alarms.clone(),
            ),
            presence,
            feeds,
            routes: routes::RouteService::new(store, catalog.clone(), control.clone(), downlink, route_config),
            catalog,
            control,
            desired,
            login_guard,
            webhooks,
            alarms,
            users,
            audit,
            event_rate,
        }
    }
}

/// The services that send devices what to do: controls (and the controls that wait), and the
/// desired state over them.
fn commands(
    (store, catalog, feeds, webhooks): (
        &Arc<dyn store::Store>,
        &Arc<catalog::CatalogService>,
        &Arc<feed::Feeds>,
        &Arc<webhooks::WebhookService>,
    ),
    downlink: Arc<dyn downlink::Downlink>,
    ack_timeout: std::time::Duration,
    writers: (&tokio_util::task::TaskTracker, &tokio_util::sync::CancellationToken),
) -> (Arc<control::ControlService>, Arc<desired_state::DesiredStateService>) {
    let control = Arc::new(control::ControlService::new(
        store.clone(),
        catalog.clone(),
        downlink,
        ack_timeout,
        (feeds.clone(), webhooks.clone()),
        writers,
    ));
    let desired = Arc::new(desired_state::DesiredStateService::new(
        store.clone(),
        catalog.clone(),
        control.clone(),
        (feeds.clone(), webhooks.clone()),
        writers,
    ));
    (control, desired)
}

/// The services of people: the login guard every sign-in counts against, the audit log, and
/// user accounts with their sessions.
fn people(
    store: &Arc<dyn store::Store>,
    tokens: &Arc<auth::TokenCache>,
    login_guard: guard::LoginGuardConfig,
    sessions: user::SessionConfig,
) -> (
    Arc<guard::LoginGuard>,
    Arc<auditing::AuditService>,
    Arc<users::UserService>,
) {
    let login_guard = Arc::new(guard::LoginGuard::new(login_guard));
    let audit = Arc::new(auditing::AuditService::new(store.clone()));
    let users = Arc::new(users::UserService::new(
        store.clone(),
        tokens.clone(),
        audit.clone(),
        login_guard.clone(),
        sessions,
    ));
    (login_guard, audit, users)
}
