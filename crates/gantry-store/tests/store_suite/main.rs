//! The store test suite, written once and run per backend: SQLite always; PostgreSQL with
//! `-- --include-ignored` and GANTRY_TEST_POSTGRES_URL naming a server (each test then gets a
//! database of its own). Without them `cargo test` reports the PostgreSQL tests as ignored.

use std::collections::{BTreeMap, BTreeSet};
use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use gantry_core::Error;
use gantry_core::connection::{SessionEnd, SessionStart};
use gantry_core::enums::{Channel, DataType, DeviceStatus, DeviceType, ProjectStatus, Readable, SortOrder};
use gantry_core::event::DeviceEvent;
use gantry_core::ids::{DeviceId, EventId, ModelId, ProjectId, TenantId};
use gantry_core::paging::PageRequest;
use gantry_core::principal::{Principal, TokenOwner};
use gantry_core::query::{DeviceQuery, DeviceSort, EventQuery, ProjectQuery, TimeField};
use gantry_core::records::{
    Device, DeviceCounts, DeviceModel, JsonMap, ModelAction, ModelAttribute, Project, RecordMeta, Tenant,
};
use gantry_core::series::{Aggregates, Bucket, Interval, SeriesQuery};
use gantry_core::store::{
    ConnectionStore, DeviceStore, EventLogStore, EventStore, ModelStore, ProjectStore, RouteStore, Store, TenantStore,
    WebhookStore,
};
use gantry_store::SqlStore;
use gantry_store_sqlite::sqlite_url;
use serde_json::json;
use sqlx::{Connection, Executor, Row};

mod alarms;
mod catalog;
mod connections;
mod desired;
mod event_rate;
mod events;
mod routes;
mod series;
mod tenants;
mod users;
mod webhooks;

use alarms::*;
use catalog::*;
use connections::*;
use desired::*;
use event_rate::*;
use events::*;
use routes::*;
use series::*;
use tenants::*;
use users::*;
use webhooks::*;

macro_rules! store_suite {
    ($($test:ident),+ $(,)?; postgres only: $($postgres_test:ident),* $(,)?) => {
        mod sqlite {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
                async fn $test() {
                    crate::on_sqlite(crate::$test).await;
                }
            )+
        }
        mod postgres {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
                #[ignore = "needs GANTRY_TEST_POSTGRES_URL (a PostgreSQL server)"]
                async fn $test() {
                    crate::on_postgres(crate::$test).await;
                }
            )+
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
                #[ignore = "needs GANTRY_TEST_POSTGRES_URL (a PostgreSQL server)"]
                async fn $postgres_test() {
                    crate::on_postgres(crate::$postgres_test).await;
                }
            )*
        }
    };
}

store_suite!(
    placeholders_bind_by_number,
    tenants_and_administrator_tokens,
    tenants_are_listed_oldest_first,
    project_and_device_tokens,
    rotated_tokens_end_after_their_grace,
    routes_are_listed_and_revoked,
    tenants_are_isolated,
    names_are_unique_per_tenant,
    concurrent_creates_of_one_name,
    concurrent_writes_all_succeed,
    pages_are_stable,
    project_listing_filters,
    device_filters,
    device_sorts,
    a_models_device_metadata_is_read_alone,
    project_models_are_distinct,
    deletes_conflict_while_in_use,
    devices_need_live_parents,
    records_round_trip_with_derived_fields,
    events_list_by_window_and_feed_the_shadow,
    commits_in_flight_are_read_once_durable,
    retention_deletes_only_old_events,
    concurrent_batches_on_the_same_devices,
    ingest_keeps_each_devices_order,
    moved_events_read_as_before,
    shadows_and_totals_hold_across_moves_and_deletes,
    positions_are_the_newest_of_each_devices_position_attributes,
    deletes_and_listings_during_moves,
    range_totals_match_the_events_in_range,
    webhooks_are_managed_per_tenant,
    a_webhook_lease_has_one_holder,
    webhook_events_wait_in_order_until_a_delivery_holds_them,
    deep_pages_list_in_order,
    series_match_the_raw_events,
    series_hold_while_rollups_fold,
    device_sessions_start_end_and_survive_a_restart,
    a_projects_connections_are_read_at_once,
    desired_states_are_written_by_one_writer_per_revision,
    waiting_controls_are_claimed_once_in_send_order,
    a_control_commits_its_audit_record_with_its_log,
    an_ack_commits_with_its_reply,
    alarm_rules_are_kept_per_tenant,
    concurrent_readings_raise_one_alarm,
    the_store_holds_one_open_alarm_per_key,
    alarm_plans_write_only_over_their_snapshot,
    alarms_are_listed_changed_and_isolated,
    open_alarms_per_device_and_alarm_periods,
    users_are_unique_scoped_and_filtered,
    sessions_live_until_they_end,
    audit_records_list_newest_first_per_tenant,
    event_minutes_add_up_per_project_and_are_deleted_once_old,
    counted_events_read_per_minute_across_nodes;
    // SQLite runs one write transaction at a time, so these interleavings cannot happen there.
    postgres only:
    device_inserts_and_parent_deletes_serialize,
);

// ---- harness ---------------------------------------------------------------------------------

/// What the services hold: the store as a trait object.
const _: fn(SqlStore) -> std::sync::Arc<dyn Store> = |store| std::sync::Arc::new(store);

async fn on_sqlite<F, Fut>(test: F)
where
    F: FnOnce(SqlStore) -> Fut,
    Fut: Future<Output = ()> + Send + 'static,
{
    let dir = tempfile::tempdir().unwrap();
    // A directory that does not exist yet: connecting creates it and the database file.
    let store = gantry_store_sqlite::connect(&sqlite_url(&dir.path().join("data")))
        .await
        .expect("open the SQLite store");
    assert_eq!(store.backend(), "sqlite");
    let outcome = tokio::spawn(test(store.clone())).await;
    store.close().await;
    if let Err(failure) = outcome {
        std::panic::resume_unwind(failure.into_panic());
    }
}

async fn on_postgres<F, Fut>(test: F)
where
    F: FnOnce(SqlStore) -> Fut,
    Fut: Future<Output = ()> + Send + 'static,
{
    // Ignored unless asked for: asked for without a server is a failure, not a pass.
    let server = std::env::var("GANTRY_TEST_POSTGRES_URL")
        .ok()
        .filter(|v| !v.is_empty())
        .expect("GANTRY_TEST_POSTGRES_URL is not set (say postgres://postgres@127.0.0.1:5432/postgres)");
    sqlx::any::install_default_drivers();
    let database = format!("gantry_test_{}", uuid::Uuid::new_v4().simple());
    let mut admin = sqlx::AnyConnection::connect(&server)
        .await
        .expect("connect to GANTRY_TEST_POSTGRES_URL");
    // A locale-aware collation, as production databases tend to have, so that an order depending
    // on it fails here too; servers without ICU (before PostgreSQL 15) get their default.
    let icu = format!("CREATE DATABASE {database} TEMPLATE template0 LOCALE_PROVIDER icu ICU_LOCALE 'en-US'");
    if admin.execute(icu.as_str()).await.is_err() {
        admin
            .execute(format!("CREATE DATABASE {database}").as_str())
            .await
            .unwrap();
    }
    let store = gantry_store_postgres::connect(&with_database(&server, &database))
        .await
        .expect("open the PostgreSQL store");
    assert_eq!(store.backend(), "postgres");
    // Run in a task so that a failing test still drops its database.
    let outcome = tokio::spawn(test(store.clone())).await;
    store.close().await;
    admin
        .execute(format!("DROP DATABASE {database} WITH (FORCE)").as_str())
        .await
        .unwrap();
    if let Err(failure) = outcome {
        std::panic::resume_unwind(failure.into_panic());
    }
}

/// `server` with its database name replaced by `database`.
fn with_database(server: &str, database: &str) -> String {
    let (base, query) = server.split_once('?').map_or((server, None), |(b, q)| (b, Some(q)));
    let authority_start = base.find("://").map_or(0, |i| i + 3);
    let path_start = base[authority_start..]
        .find('/')
        .map_or(base.len(), |i| authority_start + i);
    let query = query.map(|q| format!("?{q}")).unwrap_or_default();
    format!("{}/{database}{query}", &base[..path_start])
}

// ---- fixtures --------------------------------------------------------------------------------

fn page(page_no: u32, page_size: u32) -> PageRequest {
    PageRequest { page_no, page_size }
}

fn all() -> PageRequest {
    page(1, 1000)
}

fn map(value: serde_json::Value) -> JsonMap {
    value.as_object().expect("a JSON object").clone()
}

async fn new_tenant(store: &SqlStore, name: &str) -> TenantId {
    let id = TenantId::generate();
    let tenant = Tenant {
        id: id.clone(),
        name: name.to_owned(),
        record: RecordMeta::created(id.clone(), "system", 1),
    };
    store.insert_tenant(&tenant, &format!("admin-of-{id}")).await.unwrap();
    id
}

fn model_record(tenant: &TenantId, name: &str, device_type: DeviceType, with_actions: bool, at: i64) -> DeviceModel {
    let attribute = ModelAttribute {
        name: Some("Temperature".to_owned()),
        code: "temp".to_owned(),
        data_type: DataType::Float,
        description: None,
        readable: Readable::Rw,
        channel: Channel::M,
    };
    let action = ModelAction {
        name: None,
        code: "reboot".to_owned(),
        description: Some("restarts".to_owned()),
        params_map: None,
    };
    DeviceModel {
        id: ModelId::generate(),
        name: name.to_owned(),
        description: Some(format!("the {name} model")),
        device_type,
        image_url: with_actions.then(|| format!("https://img.example/{name}.png")),
        attributes_map: BTreeMap::from([("temp".to_owned(), attribute)]),
        actions_map: if with_actions {
            BTreeMap::from([("reboot".to_owned(), action)])
        } else {
            BTreeMap::new()
        },
        metadata: map(json!({"vendor": "acme", "nested": {"a": [1, 2.5, null]}})),
        gateway_id: None,
        record: RecordMeta::created(tenant.clone(), "admin", at),
    }
}

async fn new_model(
    store: &SqlStore,
    tenant: &TenantId,
    name: &str,
    device_type: DeviceType,
    with_actions: bool,
) -> DeviceModel {
    let model = model_record(tenant, name, device_type, with_actions, 1_000);
    store.insert_model(&model).await.unwrap();
    model
}

fn project_record(tenant: &TenantId, name: &str, at: i64) -> Project {
    Project {
        id: ProjectId::generate(),
        name: name.to_owned(),
        description: None,
        image_url: None,
        status: ProjectStatus::Development,
        address: Some("1 Quay St".to_owned()),
        map_info: Some(map(json!({"lat": 51.5, "lng": -0.12}))),
        application_access_token: format!("app-token-{name}"),
        restful_api_addr: "http://localhost:8080".to_owned(),
        mq_api_addr: "mqtt://localhost:1883".to_owned(),
        template_id: None,
        metadata: JsonMap::new(),
        record: RecordMeta::created(tenant.clone(), "admin", at),
    }
}

async fn new_project(store: &SqlStore, tenant: &TenantId, name: &str) -> Project {
    let project = project_record(tenant, name, 1_000);
    store
        .insert_project(&project, &format!("app-hash-{}", project.id))
        .await
        .unwrap();
    project
}

/// A device with the derived fields its model and project give it.
fn device_record(tenant: &TenantId, name: &str, project: &Project, model: &DeviceModel, at: i64) -> Device {
    Device {
        id: DeviceId::generate(),
        device_name: name.to_owned(),
        project_id: project.id.clone(),
        model_id: model.id.clone(),
        status: DeviceStatus::Active,
        access_token: format!("device-token-{name}"),
        is_virtual: false,
        virtual_: false,
        comments: None,
        metadata: map(json!({"serial": name})),
        device_model_type: model.device_type,
        device_model_name: model.name.clone(),
        project_name: project.name.clone(),
        has_actions: !model.actions_map.is_empty(),
        device_model_url: model.image_url.clone(),
        record: RecordMeta::created(tenant.clone(), "admin", at),
    }
}

async fn insert(store: &SqlStore, device: &Device) {
    store
        .insert_device(device, &format!("device-hash-{}", device.id))
        .await
        .unwrap();
}

async fn new_device(store: &SqlStore, tenant: &TenantId, name: &str, project: &Project, model: &DeviceModel) -> Device {
    let device = device_record(tenant, name, project, model, 1_000);
    insert(store, &device).await;
    device
}

async fn device_names(store: &SqlStore, tenant: &TenantId, query: DeviceQuery) -> BTreeSet<String> {
    let page = store.list_devices(tenant, &query, all()).await.unwrap();
    assert_eq!(page.total, page.items.len() as u64, "total of {query:?}");
    page.items.into_iter().map(|d| d.device_name).collect()
}

fn names(list: &[&str]) -> BTreeSet<String> {
    list.iter().map(|s| (*s).to_owned()).collect()
}

fn assert_duplicate(result: gantry_core::Result<()>, message: &str) {
    match result {
        Err(Error::Duplicate(m)) => assert_eq!(m, message),
        other => panic!("expected Duplicate({message}), got {other:?}"),
    }
}

fn assert_not_found(result: gantry_core::Result<()>) {
    assert!(
        matches!(result, Err(Error::NotFound { .. })),
        "expected NotFound, got {result:?}"
    );
}

fn assert_conflict(result: gantry_core::Result<()>, message: &str) {
    match result {
        Err(Error::Conflict(m)) => assert_eq!(m, message),
        other => panic!("expected Conflict({message}), got {other:?}"),
    }
}
