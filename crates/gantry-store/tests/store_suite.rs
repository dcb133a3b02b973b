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
use gantry_core::records::{Device, DeviceModel, JsonMap, ModelAction, ModelAttribute, Project, RecordMeta, Tenant};
use gantry_core::series::{Aggregates, Bucket, Interval, SeriesQuery};
use gantry_core::store::{
    ConnectionStore, DeviceStore, EventLogStore, EventStore, ModelStore, ProjectStore, RouteStore, Store, TenantStore,
    WebhookStore,
};
use gantry_store::{SqlStore, sqlite_url};
use serde_json::json;
use sqlx::{Connection, Executor, Row};

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
    deletes_and_listings_during_moves,
    range_totals_match_the_events_in_range,
    webhooks_are_managed_per_tenant,
    a_webhook_lease_has_one_holder,
    webhook_events_wait_in_order_until_a_delivery_holds_them,
    deep_pages_list_in_order,
    series_match_the_raw_events,
    series_hold_while_rollups_fold,
    device_sessions_start_end_and_survive_a_restart;
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
    let store = SqlStore::connect(&sqlite_url(&dir.path().join("data")))
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
    let store = SqlStore::connect(&with_database(&server, &database))
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

// ---- the suite -------------------------------------------------------------------------------

async fn placeholders_bind_by_number(store: SqlStore) {
    // Placeholders out of order and reused: the store's SQL relies on `$k` meaning the same on both engines.
    let row = sqlx::query("SELECT $2 AS b, $1 AS a, $1 || '!' AS again")
        .bind("x")
        .bind(7_i64)
        .fetch_one(store.pool())
        .await
        .unwrap();
    assert_eq!(row.get::<i64, _>("b"), 7);
    assert_eq!(row.get::<String, _>("a"), "x");
    assert_eq!(row.get::<String, _>("again"), "x!");
}

async fn tenants_and_administrator_tokens(store: SqlStore) {
    store.ensure_default_tenant(5).await.unwrap();
    store.ensure_default_tenant(6).await.unwrap();
    let default = TenantId::default_tenant();
    assert!(!store.has_system_token().await.unwrap());

    store.set_system_token(&default, "system-1").await.unwrap();
    assert!(store.has_system_token().await.unwrap());
    let system = Principal::Admin {
        tenant: default.clone(),
        system: true,
    };
    assert_eq!(
        store.principal_for_token("system-1").await.unwrap(),
        Some(system.clone())
    );

    store.set_system_token(&default, "system-2").await.unwrap();
    assert_eq!(store.principal_for_token("system-1").await.unwrap(), None);
    assert_eq!(store.principal_for_token("system-2").await.unwrap(), Some(system));

    let acme = TenantId::generate();
    let tenant = Tenant {
        id: acme.clone(),
        name: "acme".to_owned(),
        record: RecordMeta::created(acme.clone(), "system", 7),
    };
    store.insert_tenant(&tenant, "acme-admin").await.unwrap();
    assert_eq!(
        store.principal_for_token("acme-admin").await.unwrap(),
        Some(Principal::Admin {
            tenant: acme.clone(),
            system: false
        })
    );

    let again = TenantId::generate();
    let clash = Tenant {
        id: again.clone(),
        name: "acme".to_owned(),
        record: RecordMeta::created(again, "system", 8),
    };
    assert_duplicate(
        store.insert_tenant(&clash, "clash-admin").await,
        "a tenant named `acme` already exists",
    );
    assert_eq!(
        store.principal_for_token("clash-admin").await.unwrap(),
        None,
        "the failed insert left a token"
    );
    let default_named = Tenant {
        id: TenantId::generate(),
        name: "default".to_owned(),
        ..tenant
    };
    assert_duplicate(
        store.insert_tenant(&default_named, "x").await,
        "a tenant named `default` already exists",
    );

    assert_eq!(store.principal_for_token("no-such-token").await.unwrap(), None);
}

async fn tenants_are_listed_oldest_first(store: SqlStore) {
    store.ensure_default_tenant(1).await.unwrap();
    let mut ids = vec![TenantId::default_tenant()];
    for (i, name) in ["zeta", "alpha", "mid"].into_iter().enumerate() {
        let id = TenantId::generate();
        let tenant = Tenant {
            id: id.clone(),
            name: name.to_owned(),
            record: RecordMeta::created(id.clone(), "system", 10 + i as i64),
        };
        store.insert_tenant(&tenant, &format!("admin-{name}")).await.unwrap();
        ids.push(id);
    }
    let every = store.list_tenants(None, all()).await.unwrap();
    assert_eq!(every.total, 4);
    let listed: Vec<_> = every.items.iter().map(|t| (t.id.clone(), t.name.as_str())).collect();
    let expected: Vec<_> = ids.iter().cloned().zip(["default", "zeta", "alpha", "mid"]).collect();
    assert_eq!(listed, expected);
    assert_eq!(
        every.items[1].record.tenant_id, ids[1],
        "a tenant's records are its own"
    );
    assert_eq!(every.items[1].record.created_time, 10);

    let second = store.list_tenants(None, page(2, 3)).await.unwrap();
    assert_eq!((second.total, second.items.len()), (4, 1));
    assert_eq!(second.items[0].name, "mid");
    let own = store.list_tenants(Some(&ids[2]), all()).await.unwrap();
    assert_eq!((own.total, own.items[0].name.as_str()), (1, "alpha"));
    assert_eq!(
        store
            .list_tenants(Some(&TenantId::generate()), all())
            .await
            .unwrap()
            .total,
        0
    );
}

async fn rotated_tokens_end_after_their_grace(store: SqlStore) {
    let tenant = new_tenant(&store, "t").await;
    let model = new_model(&store, &tenant, "m", DeviceType::Light, true).await;
    let project = project_record(&tenant, "p", 10);
    store.insert_project(&project, "app-1").await.unwrap();
    let mut device = device_record(&tenant, "d", &project, &model, 20);
    store.insert_device(&device, "dev-1").await.unwrap();
    let owner = |hash: &'static str, now: i64| {
        let store = store.clone();
        async move { store.token_owner(hash, now).await.unwrap() }
    };
    let device_principal = owner("dev-1", 0).await.unwrap().principal;

    // replaced with a grace period: both work until it ends at 1,000, then only the new one
    device.access_token = "clear-2".to_owned();
    device.record.touch("admin", 100);
    store.rotate_device_token(&device, "dev-2", 1_000).await.unwrap();
    assert_eq!(
        owner("dev-1", 999).await,
        Some(TokenOwner {
            principal: device_principal.clone(),
            expires: Some(1_000)
        })
    );
    assert_eq!(owner("dev-1", 1_000).await, None);
    assert_eq!(owner("dev-2", 5_000).await.unwrap().expires, None);
    let stored = store.get_device(&tenant, &device.id).await.unwrap().unwrap();
    assert_eq!(
        (stored.access_token.as_str(), stored.record.updated_time),
        ("clear-2", Some(100))
    );
    // replaced at once: the current token and the one still in its grace period both end
    device.record.touch("admin", 200);
    store.rotate_device_token(&device, "dev-3", 200).await.unwrap();
    assert_eq!((owner("dev-1", 201).await, owner("dev-2", 201).await), (None, None));
    assert!(owner("dev-3", 201).await.is_some());

    let mut rotated = project.clone();
    rotated.application_access_token = "clear-app-2".to_owned();
    rotated.record.touch("admin", 300);
    store.rotate_application_token(&rotated, "app-2", 800).await.unwrap();
    assert_eq!(owner("app-1", 799).await.unwrap().expires, Some(800));
    assert_eq!(owner("app-1", 800).await, None);
    let stored = store.get_project(&tenant, &project.id).await.unwrap().unwrap();
    assert_eq!(stored.application_access_token, "clear-app-2");
    let gone = project_record(&tenant, "gone", 10);
    assert!(matches!(
        store.rotate_application_token(&gone, "app-x", 0).await,
        Err(Error::NotFound { .. })
    ));
    assert_eq!(owner("app-x", 0).await, None, "a failed rotation stores no token");

    let acme = TenantId::generate();
    let record = Tenant {
        id: acme.clone(),
        name: "acme".to_owned(),
        record: RecordMeta::created(acme.clone(), "system", 7),
    };
    store.insert_tenant(&record, "acme-1").await.unwrap();
    assert_eq!(store.get_tenant(&acme).await.unwrap().unwrap().name, "acme");
    store
        .rotate_admin_token(&acme, false, "acme-2", 500, 400)
        .await
        .unwrap();
    assert!(owner("acme-1", 499).await.is_some());
    assert_eq!(owner("acme-1", 500).await, None);
    assert!(owner("acme-2", 500).await.is_some());
    assert!(store.get_tenant(&TenantId::generate()).await.unwrap().is_none());
}

async fn routes_are_listed_and_revoked(store: SqlStore) {
    use gantry_core::enums::SourceType;
    use gantry_core::route::StoredRoute;
    let tenant = new_tenant(&store, "t").await;
    let other = new_tenant(&store, "o").await;
    let model = new_model(&store, &tenant, "m", DeviceType::Light, true).await;
    let project = new_project(&store, &tenant, "p").await;
    let device = device_record(&tenant, "d", &project, &model, 20);
    store.insert_device(&device, "dev-1").await.unwrap();
    let route = |n: i64, expires: i64| StoredRoute {
        id: format!("routePolicy:{n}"),
        tenant_id: tenant.clone(),
        project_id: project.id.clone(),
        device_id: device.id.clone(),
        source_type: SourceType::App,
        source_device_id: None,
        need_resp: false,
        client_id: Some(format!("route-{n}")),
        username: Some(format!("route-{n}")),
        password_hash: Some("hash".to_owned()),
        expired_time: expires,
        created_by: "admin".to_owned(),
        created_time: n,
        updated_by: None,
        updated_time: None,
    };
    for (n, expires) in [(1, 5_000), (2, 50), (3, 5_000), (4, 5_000)] {
        store.insert_route(&route(n, expires)).await.unwrap();
    }
    store.revoke_route(&tenant, "routePolicy:3", "admin", 60).await.unwrap();
    let page = PageRequest::parse(None, None, 20).unwrap();
    let listed = store.list_device_routes(&tenant, &device.id, 100, page).await.unwrap();
    let ids: Vec<&str> = listed.items.iter().map(|r| r.id.as_str()).collect();
    assert_eq!((ids, listed.total), (vec!["routePolicy:4", "routePolicy:1"], 2));
    let foreign = store.list_device_routes(&other, &device.id, 100, page).await.unwrap();
    assert_eq!(foreign.total, 0);

    assert!(store.get_route(&tenant, "routePolicy:3").await.unwrap().is_none());
    assert!(store.route_by_client("route-3").await.unwrap().is_none());
    assert!(store.route_by_client("route-4").await.unwrap().is_some());
    assert!(matches!(
        store.revoke_route(&tenant, "routePolicy:3", "admin", 70).await,
        Err(Error::NotFound { .. })
    ));
    assert!(matches!(
        store.revoke_route(&other, "routePolicy:4", "admin", 70).await,
        Err(Error::NotFound { .. })
    ));
}

async fn project_and_device_tokens(store: SqlStore) {
    let tenant = new_tenant(&store, "t").await;
    let model = new_model(&store, &tenant, "m", DeviceType::Light, true).await;
    let p1 = project_record(&tenant, "p1", 10);
    store.insert_project(&p1, "app-1").await.unwrap();
    let p2 = new_project(&store, &tenant, "p2").await;
    assert_eq!(
        store.principal_for_token("app-1").await.unwrap(),
        Some(Principal::Application {
            tenant: tenant.clone(),
            project: p1.id.clone()
        })
    );

    let mut device = device_record(&tenant, "d", &p1, &model, 20);
    store.insert_device(&device, "dev-1").await.unwrap();
    let principal = |project: &ProjectId, locked| Principal::Device {
        tenant: tenant.clone(),
        project: project.clone(),
        device: device.id.clone(),
        locked,
    };
    assert_eq!(
        store.principal_for_token("dev-1").await.unwrap(),
        Some(principal(&p1.id, false))
    );

    device.status = DeviceStatus::Locked;
    device.record.touch("admin", 30);
    store.update_device(&device).await.unwrap();
    assert_eq!(
        store.principal_for_token("dev-1").await.unwrap(),
        Some(principal(&p1.id, true))
    );

    // A device that moves takes its token along.
    device.project_id = p2.id.clone();
    device.status = DeviceStatus::Active;
    store.update_device(&device).await.unwrap();
    assert_eq!(
        store.principal_for_token("dev-1").await.unwrap(),
        Some(principal(&p2.id, false))
    );

    // A failed create leaves no token behind.
    let twin = device_record(&tenant, "d", &p1, &model, 40);
    assert_duplicate(
        store.insert_device(&twin, "dev-2").await,
        "a device named `d` already exists",
    );
    assert_eq!(store.principal_for_token("dev-2").await.unwrap(), None);
    let twin = project_record(&tenant, "p1", 40);
    assert_duplicate(
        store.insert_project(&twin, "app-2").await,
        "a project named `p1` already exists",
    );
    assert_eq!(store.principal_for_token("app-2").await.unwrap(), None);

    store.delete_device(&tenant, &device.id, "admin", 50).await.unwrap();
    assert_eq!(store.principal_for_token("dev-1").await.unwrap(), None);
    store.delete_project(&tenant, &p1.id, "admin", 50).await.unwrap();
    assert_eq!(store.principal_for_token("app-1").await.unwrap(), None);
    // The other project's token is untouched.
    let p2_token = format!("app-hash-{}", p2.id);
    assert!(matches!(
        store.principal_for_token(&p2_token).await.unwrap(),
        Some(Principal::Application { .. })
    ));
}

async fn tenants_are_isolated(store: SqlStore) {
    let a = new_tenant(&store, "a").await;
    let b = new_tenant(&store, "b").await;
    let model = new_model(&store, &a, "shared-name", DeviceType::Camera, false).await;
    let project = new_project(&store, &a, "shared-name").await;
    let device = new_device(&store, &a, "shared-name", &project, &model).await;

    assert_eq!(store.get_model(&b, &model.id).await.unwrap(), None);
    assert_eq!(store.get_project(&b, &project.id).await.unwrap(), None);
    assert_eq!(store.get_device(&b, &device.id).await.unwrap(), None);
    assert_eq!(store.list_models(&b, all()).await.unwrap().total, 0);
    assert_eq!(
        store
            .list_projects(&b, &ProjectQuery::default(), all())
            .await
            .unwrap()
            .total,
        0
    );
    assert_eq!(
        store
            .list_devices(&b, &DeviceQuery::default(), all())
            .await
            .unwrap()
            .total,
        0
    );
    let by_project = DeviceQuery {
        project: Some(project.id.clone()),
        ..DeviceQuery::default()
    };
    assert_eq!(store.list_devices(&b, &by_project, all()).await.unwrap().total, 0);
    assert!(store.project_models(&b, &project.id).await.unwrap().is_empty());

    let in_b = |record: &RecordMeta| RecordMeta {
        tenant_id: b.clone(),
        ..record.clone()
    };
    assert_not_found(
        store
            .update_model(&DeviceModel {
                record: in_b(&model.record),
                ..model.clone()
            })
            .await,
    );
    assert_not_found(
        store
            .update_project(&Project {
                record: in_b(&project.record),
                ..project.clone()
            })
            .await,
    );
    assert_not_found(
        store
            .update_device(&Device {
                record: in_b(&device.record),
                ..device.clone()
            })
            .await,
    );
    assert_not_found(store.delete_device(&b, &device.id, "admin", 9).await);
    assert_not_found(store.delete_project(&b, &project.id, "admin", 9).await);
    assert_not_found(store.delete_model(&b, &model.id, "admin", 9).await);

    // Still there for its own tenant, untouched.
    assert_eq!(store.get_model(&a, &model.id).await.unwrap(), Some(model.clone()));
    assert_eq!(store.get_device(&a, &device.id).await.unwrap(), Some(device.clone()));
    assert_eq!(
        store
            .list_devices(&a, &DeviceQuery::default(), all())
            .await
            .unwrap()
            .total,
        1
    );

    // Names are unique per tenant only.
    let model_b = new_model(&store, &b, "shared-name", DeviceType::Camera, false).await;
    let project_b = new_project(&store, &b, "shared-name").await;
    new_device(&store, &b, "shared-name", &project_b, &model_b).await;
    assert_eq!(
        store
            .list_devices(&b, &DeviceQuery::default(), all())
            .await
            .unwrap()
            .total,
        1
    );
}

async fn names_are_unique_per_tenant(store: SqlStore) {
    let t = new_tenant(&store, "t").await;
    let m1 = new_model(&store, &t, "m1", DeviceType::Light, true).await;
    let mut m2 = new_model(&store, &t, "m2", DeviceType::Light, true).await;
    assert_duplicate(
        store
            .insert_model(&model_record(&t, "m1", DeviceType::Root, false, 5))
            .await,
        "a device model named `m1` already exists",
    );
    m2.name = "m1".to_owned();
    assert_duplicate(
        store.update_model(&m2).await,
        "a device model named `m1` already exists",
    );

    let p1 = new_project(&store, &t, "p1").await;
    let mut p2 = new_project(&store, &t, "p2").await;
    p2.name = "p1".to_owned();
    assert_duplicate(store.update_project(&p2).await, "a project named `p1` already exists");

    let d1 = new_device(&store, &t, "d1", &p1, &m1).await;
    let mut d2 = new_device(&store, &t, "d2", &p1, &m1).await;
    d2.device_name = "d1".to_owned();
    assert_duplicate(store.update_device(&d2).await, "a device named `d1` already exists");
    // Renaming a record to its own name is no clash.
    d2.device_name = "d2".to_owned();
    store.update_device(&d2).await.unwrap();

    // Soft-deleted records free their names and are gone from reads.
    store.delete_device(&t, &d1.id, "admin", 10).await.unwrap();
    assert_eq!(store.get_device(&t, &d1.id).await.unwrap(), None);
    assert_not_found(store.delete_device(&t, &d1.id, "admin", 11).await);
    assert_not_found(store.update_device(&d1).await);
    let d1_again = new_device(&store, &t, "d1", &p1, &m1).await;
    assert_eq!(
        store.get_device(&t, &d1_again.id).await.unwrap().unwrap().device_name,
        "d1"
    );

    store.delete_device(&t, &d1_again.id, "admin", 12).await.unwrap();
    store.delete_device(&t, &d2.id, "admin", 12).await.unwrap();
    store.delete_model(&t, &m1.id, "admin", 13).await.unwrap();
    assert_eq!(store.get_model(&t, &m1.id).await.unwrap(), None);
    assert_not_found(store.update_model(&m1).await);
    store.update_model(&m2).await.unwrap();
    assert_eq!(store.get_model(&t, &m2.id).await.unwrap().unwrap().name, "m1");

    store.delete_project(&t, &p1.id, "admin", 14).await.unwrap();
    assert_eq!(store.get_project(&t, &p1.id).await.unwrap(), None);
    assert_not_found(store.update_project(&p1).await);
    store.update_project(&p2).await.unwrap();
    assert_eq!(store.get_project(&t, &p2.id).await.unwrap().unwrap().name, "p1");
    new_project(&store, &t, "p2").await;
}

async fn concurrent_creates_of_one_name(store: SqlStore) {
    let t = new_tenant(&store, "t").await;
    let model = new_model(&store, &t, "m", DeviceType::Light, false).await;
    let project = new_project(&store, &t, "p").await;

    let tasks: Vec<_> = (0..8)
        .map(|i| {
            let store = store.clone();
            let device = device_record(&t, "racer", &project, &model, 100 + i);
            tokio::spawn(async move { store.insert_device(&device, &format!("racer-{i}")).await })
        })
        .collect();
    let mut created = 0;
    for task in tasks {
        match task.await.unwrap() {
            Ok(()) => created += 1,
            Err(error) => assert_duplicate(Err(error), "a device named `racer` already exists"),
        }
    }
    assert_eq!(created, 1);
    let racers = DeviceQuery {
        device_name: Some("racer".to_owned()),
        ..DeviceQuery::default()
    };
    assert_eq!(store.list_devices(&t, &racers, all()).await.unwrap().total, 1);

    let tasks: Vec<_> = (0..8)
        .map(|i| {
            let store = store.clone();
            let model = model_record(&t, "racing model", DeviceType::Root, false, 100 + i);
            tokio::spawn(async move { store.insert_model(&model).await })
        })
        .collect();
    let mut created = 0;
    for task in tasks {
        match task.await.unwrap() {
            Ok(()) => created += 1,
            Err(error) => assert_duplicate(Err(error), "a device model named `racing model` already exists"),
        }
    }
    assert_eq!(created, 1);
    assert_eq!(store.list_models(&t, all()).await.unwrap().total, 2);
}

async fn concurrent_writes_all_succeed(store: SqlStore) {
    // Deletes read before they write; under concurrent writers that must wait, not fail as busy.
    let t = new_tenant(&store, "t").await;
    let model = new_model(&store, &t, "m", DeviceType::Light, false).await;
    let home = new_project(&store, &t, "home").await;
    let mut doomed_projects = Vec::new();
    let mut doomed_models = Vec::new();
    for i in 0..8 {
        doomed_projects.push(new_project(&store, &t, &format!("doomed-{i}")).await.id);
        doomed_models.push(
            new_model(&store, &t, &format!("doomed-{i}"), DeviceType::Root, false)
                .await
                .id,
        );
    }
    let mut tasks = Vec::new();
    for i in 0..8_i64 {
        let (store, t) = (store.clone(), t.clone());
        let device = device_record(&t, &format!("device-{i}"), &home, &model, 100 + i);
        let project = doomed_projects[i as usize].clone();
        let doomed_model = doomed_models[i as usize].clone();
        tasks.push(tokio::spawn(async move {
            store.insert_device(&device, &format!("token-{i}")).await?;
            store.delete_project(&t, &project, "admin", 200 + i).await?;
            store.delete_model(&t, &doomed_model, "admin", 200 + i).await
        }));
    }
    for task in tasks {
        task.await.unwrap().unwrap();
    }
    assert_eq!(
        store
            .list_devices(&t, &DeviceQuery::default(), all())
            .await
            .unwrap()
            .total,
        8
    );
    assert_eq!(
        store
            .list_projects(&t, &ProjectQuery::default(), all())
            .await
            .unwrap()
            .total,
        1
    );
    assert_eq!(store.list_models(&t, all()).await.unwrap().total, 1);
}

async fn pages_are_stable(store: SqlStore) {
    let t = new_tenant(&store, "t").await;
    // Creation times repeat, so the id must break ties.
    // Inserted against id order, so that only the id can put equal times in id order.
    let mut models: Vec<_> = (0..25)
        .map(|i| model_record(&t, &format!("model-{i:02}"), DeviceType::Root, false, 1_000 - (i / 3)))
        .collect();
    for model in models.iter().rev() {
        store.insert_model(model).await.unwrap();
    }
    let deleted = model_record(&t, "deleted", DeviceType::Root, false, 0);
    store.insert_model(&deleted).await.unwrap();
    store.delete_model(&t, &deleted.id, "admin", 1).await.unwrap();
    models.sort_by(|a, b| (a.record.created_time, &a.id).cmp(&(b.record.created_time, &b.id)));
    let expected: Vec<ModelId> = models.iter().map(|m| m.id.clone()).collect();

    let mut seen = Vec::new();
    for (page_no, size) in [(1, 10), (2, 10), (3, 5), (4, 0)] {
        let listed = store.list_models(&t, page(page_no, 10)).await.unwrap();
        assert_eq!(listed.total, 25);
        assert_eq!(listed.request, page(page_no, 10));
        assert_eq!(listed.items.len(), size, "page {page_no}");
        seen.extend(listed.items.into_iter().map(|m| m.id));
    }
    assert_eq!(seen, expected);

    let mut projects: Vec<_> = (0..7)
        .map(|i| project_record(&t, &format!("project-{i}"), 50 + (i % 2)))
        .collect();
    for project in projects.iter().rev() {
        store
            .insert_project(project, &format!("app-{}", project.id))
            .await
            .unwrap();
    }
    projects.sort_by(|a, b| (a.record.created_time, &a.id).cmp(&(b.record.created_time, &b.id)));
    let mut seen = Vec::new();
    for page_no in 1..=3 {
        let listed = store
            .list_projects(&t, &ProjectQuery::default(), page(page_no, 3))
            .await
            .unwrap();
        assert_eq!(listed.total, 7);
        seen.extend(listed.items.into_iter().map(|p| p.id));
    }
    assert_eq!(seen, projects.iter().map(|p| p.id.clone()).collect::<Vec<_>>());

    // Devices sorted by a field with many ties, in both directions.
    let model = &models[0];
    let project = &projects[0];
    let devices: Vec<_> = (0..11)
        .map(|i| {
            let mut device = device_record(&t, &format!("device-{i}"), project, model, 100);
            if i % 3 == 0 {
                device.status = DeviceStatus::Locked;
            }
            device
        })
        .collect();
    for device in devices.iter().rev() {
        insert(&store, device).await;
    }
    for order in [SortOrder::Asc, SortOrder::Desc] {
        let mut expected: Vec<_> = devices.iter().map(|d| (d.status.as_str(), d.id.clone())).collect();
        expected.sort();
        if order == SortOrder::Desc {
            expected.reverse();
        }
        let query = DeviceQuery {
            sort_by: DeviceSort::Status,
            sort_order: order,
            ..DeviceQuery::default()
        };
        let mut seen = Vec::new();
        for page_no in 1..=3 {
            let listed = store.list_devices(&t, &query, page(page_no, 4)).await.unwrap();
            assert_eq!(listed.total, 11);
            seen.extend(listed.items.into_iter().map(|d| (d.status.as_str(), d.id)));
        }
        assert_eq!(seen, expected, "{order:?}");
    }
}

async fn project_listing_filters(store: SqlStore) {
    let t = new_tenant(&store, "t").await;
    let mut made = Vec::new();
    for (i, status) in [
        ProjectStatus::Development,
        ProjectStatus::Product,
        ProjectStatus::Product,
        ProjectStatus::Closed,
    ]
    .into_iter()
    .enumerate()
    {
        let mut project = project_record(&t, &format!("p{i}"), 10 + i as i64);
        project.status = status;
        store.insert_project(&project, &format!("app-{i}")).await.unwrap();
        made.push(project);
    }
    let listed = |query: ProjectQuery| {
        let store = store.clone();
        let t = t.clone();
        async move {
            let page = store.list_projects(&t, &query, all()).await.unwrap();
            assert_eq!(page.total, page.items.len() as u64);
            page.items.into_iter().map(|p| p.name).collect::<Vec<_>>()
        }
    };
    assert_eq!(listed(ProjectQuery::default()).await, ["p0", "p1", "p2", "p3"]);
    assert_eq!(
        listed(ProjectQuery {
            status: Some(ProjectStatus::Product),
            only: None
        })
        .await,
        ["p1", "p2"]
    );
    assert_eq!(
        listed(ProjectQuery {
            status: None,
            only: Some(made[2].id.clone())
        })
        .await,
        ["p2"]
    );
    assert_eq!(
        listed(ProjectQuery {
            status: Some(ProjectStatus::Closed),
            only: Some(made[2].id.clone())
        })
        .await,
        Vec::<String>::new()
    );
    let page = store
        .list_projects(&t, &ProjectQuery::default(), page(1, 1))
        .await
        .unwrap();
    assert_eq!((page.total, page.items.len()), (4, 1));
}

async fn device_filters(store: SqlStore) {
    let t = new_tenant(&store, "t").await;
    let light = new_model(&store, &t, "light", DeviceType::Light, true).await;
    let camera = new_model(&store, &t, "camera", DeviceType::Camera, false).await;
    let p1 = new_project(&store, &t, "p1").await;
    let p2 = new_project(&store, &t, "p2").await;
    let specs = [
        ("Lamp-1", &p1, &light, DeviceStatus::Active, false),
        ("lamp_2", &p1, &light, DeviceStatus::Locked, true),
        ("lampa2", &p2, &light, DeviceStatus::Active, false),
        ("cam%1", &p2, &camera, DeviceStatus::Active, true),
        ("cam-01", &p1, &camera, DeviceStatus::Locked, false),
    ];
    for (name, project, model, status, is_virtual) in specs {
        let mut device = device_record(&t, name, project, model, 100);
        device.status = status;
        device.is_virtual = is_virtual;
        device.virtual_ = is_virtual;
        insert(&store, &device).await;
    }
    let gone = new_device(&store, &t, "lamp-gone", &p1, &light).await;
    store.delete_device(&t, &gone.id, "admin", 200).await.unwrap();
    let elsewhere = new_tenant(&store, "elsewhere").await;
    let other_model = new_model(&store, &elsewhere, "light", DeviceType::Light, true).await;
    let other_project = new_project(&store, &elsewhere, "p1").await;
    new_device(&store, &elsewhere, "lamp-other", &other_project, &other_model).await;

    let q = DeviceQuery::default;
    assert_eq!(
        device_names(&store, &t, q()).await,
        names(&["Lamp-1", "lamp_2", "lampa2", "cam%1", "cam-01"])
    );
    assert_eq!(
        device_names(
            &store,
            &t,
            DeviceQuery {
                project: Some(p1.id.clone()),
                ..q()
            }
        )
        .await,
        names(&["Lamp-1", "lamp_2", "cam-01"])
    );
    assert_eq!(
        device_names(
            &store,
            &t,
            DeviceQuery {
                model: Some(camera.id.clone()),
                ..q()
            }
        )
        .await,
        names(&["cam%1", "cam-01"])
    );
    let named = |text: &str| DeviceQuery {
        device_name: Some(text.to_owned()),
        ..q()
    };
    assert_eq!(
        device_names(&store, &t, named("LAMP")).await,
        names(&["Lamp-1", "lamp_2", "lampa2"])
    );
    assert_eq!(
        device_names(&store, &t, named("p_2")).await,
        names(&["lamp_2"]),
        "_ is literal"
    );
    assert_eq!(
        device_names(&store, &t, named("m%1")).await,
        names(&["cam%1"]),
        "% is literal"
    );
    assert_eq!(device_names(&store, &t, named("mp-")).await, names(&["Lamp-1"]));
    assert_eq!(device_names(&store, &t, named("nothing")).await, names(&[]));
    assert_eq!(
        device_names(
            &store,
            &t,
            DeviceQuery {
                device_type: Some(DeviceType::Camera),
                ..q()
            }
        )
        .await,
        names(&["cam%1", "cam-01"])
    );
    assert_eq!(
        device_names(
            &store,
            &t,
            DeviceQuery {
                device_type: Some(DeviceType::Helmet),
                ..q()
            }
        )
        .await,
        names(&[])
    );
    assert_eq!(
        device_names(
            &store,
            &t,
            DeviceQuery {
                is_virtual: Some(true),
                ..q()
            }
        )
        .await,
        names(&["lamp_2", "cam%1"])
    );
    assert_eq!(
        device_names(
            &store,
            &t,
            DeviceQuery {
                is_virtual: Some(false),
                ..q()
            }
        )
        .await,
        names(&["Lamp-1", "lampa2", "cam-01"])
    );
    assert_eq!(
        device_names(
            &store,
            &t,
            DeviceQuery {
                status: Some(DeviceStatus::Locked),
                ..q()
            }
        )
        .await,
        names(&["lamp_2", "cam-01"])
    );
    let combined = DeviceQuery {
        project: Some(p1.id.clone()),
        status: Some(DeviceStatus::Locked),
        device_type: Some(DeviceType::Light),
        ..q()
    };
    assert_eq!(device_names(&store, &t, combined.clone()).await, names(&["lamp_2"]));
    // The total counts the filtered rows, not the page.
    let first = store
        .list_devices(
            &t,
            &DeviceQuery {
                device_name: Some("lamp".to_owned()),
                ..q()
            },
            page(1, 1),
        )
        .await
        .unwrap();
    assert_eq!((first.total, first.items.len()), (3, 1));
    let beyond = store.list_devices(&t, &combined, page(2, 1)).await.unwrap();
    assert_eq!((beyond.total, beyond.items.len()), (1, 0));
}

async fn device_sorts(store: SqlStore) {
    let t = new_tenant(&store, "t").await;
    let model = new_model(&store, &t, "m", DeviceType::Light, false).await;
    let project = new_project(&store, &t, "p").await;
    let mut made = BTreeMap::new();
    for (name, created, status) in [
        ("bravo", 100, DeviceStatus::Active),
        ("alpha", 200, DeviceStatus::Locked),
        ("delta", 300, DeviceStatus::Active),
        ("charlie", 400, DeviceStatus::Locked),
        ("Echo", 500, DeviceStatus::Active),
    ] {
        let mut device = device_record(&t, name, &project, &model, created);
        device.status = status;
        insert(&store, &device).await;
        made.insert(name, device);
    }
    // Updated last of all; the others sort by their creation time.
    let mut bravo = made["bravo"].clone();
    bravo.record.touch("admin", 1_000);
    store.update_device(&bravo).await.unwrap();

    let sorted = |sort_by, sort_order| {
        let store = store.clone();
        let t = t.clone();
        async move {
            let query = DeviceQuery {
                sort_by,
                sort_order,
                ..DeviceQuery::default()
            };
            let page = store.list_devices(&t, &query, all()).await.unwrap();
            page.items.into_iter().map(|d| d.device_name).collect::<Vec<_>>()
        }
    };
    use DeviceSort::*;
    use SortOrder::*;
    assert_eq!(
        sorted(UpdatedTime, Desc).await,
        ["bravo", "Echo", "charlie", "delta", "alpha"]
    );
    assert_eq!(
        sorted(UpdatedTime, Asc).await,
        ["alpha", "delta", "charlie", "Echo", "bravo"]
    );
    let default = store.list_devices(&t, &DeviceQuery::default(), all()).await.unwrap();
    assert_eq!(default.items[0].device_name, "bravo", "updatedTime DESC is the default");
    assert_eq!(
        sorted(CreatedTime, Asc).await,
        ["bravo", "alpha", "delta", "charlie", "Echo"]
    );
    assert_eq!(
        sorted(CreatedTime, Desc).await,
        ["Echo", "charlie", "delta", "alpha", "bravo"]
    );
    // By code point on both engines: upper case before lower case.
    assert_eq!(
        sorted(DeviceName, Asc).await,
        ["Echo", "alpha", "bravo", "charlie", "delta"]
    );
    assert_eq!(
        sorted(DeviceName, Desc).await,
        ["delta", "charlie", "bravo", "alpha", "Echo"]
    );

    let mut by_status: Vec<_> = made
        .values()
        .map(|d| (d.status.as_str(), d.id.clone(), d.device_name.clone()))
        .collect();
    by_status.sort();
    let expected: Vec<_> = by_status.into_iter().map(|(_, _, name)| name).collect();
    assert_eq!(sorted(Status, Asc).await, expected);
    let reversed: Vec<_> = expected.into_iter().rev().collect();
    assert_eq!(sorted(Status, Desc).await, reversed);
}

async fn project_models_are_distinct(store: SqlStore) {
    let t = new_tenant(&store, "t").await;
    let zeta = new_model(&store, &t, "zeta", DeviceType::Light, true).await;
    let alpha = new_model(&store, &t, "alpha", DeviceType::Camera, false).await;
    let beta = new_model(&store, &t, "beta", DeviceType::Helmet, false).await;
    let unused = new_model(&store, &t, "unused", DeviceType::Root, false).await;
    let p = new_project(&store, &t, "p").await;
    let other = new_project(&store, &t, "other").await;
    for i in 0..3 {
        new_device(&store, &t, &format!("z{i}"), &p, &zeta).await;
    }
    for i in 0..2 {
        new_device(&store, &t, &format!("a{i}"), &p, &alpha).await;
    }
    let gone = new_device(&store, &t, "b0", &p, &beta).await;
    store.delete_device(&t, &gone.id, "admin", 5).await.unwrap();
    new_device(&store, &t, "u0", &other, &unused).await;
    new_device(&store, &t, "a-other", &other, &alpha).await;

    assert_eq!(
        store.project_models(&t, &p.id).await.unwrap(),
        vec![alpha.clone(), zeta]
    );
    assert_eq!(store.project_models(&t, &other.id).await.unwrap(), vec![alpha, unused]);
    let empty = new_project(&store, &t, "empty").await;
    assert!(store.project_models(&t, &empty.id).await.unwrap().is_empty());
}

async fn deletes_conflict_while_in_use(store: SqlStore) {
    let t = new_tenant(&store, "t").await;
    let model = new_model(&store, &t, "m", DeviceType::Light, true).await;
    let project = new_project(&store, &t, "p").await;
    let d1 = new_device(&store, &t, "d1", &project, &model).await;
    let d2 = new_device(&store, &t, "d2", &project, &model).await;

    assert_conflict(
        store.delete_model(&t, &model.id, "admin", 5).await,
        "the device model is used by 2 devices",
    );
    assert_conflict(
        store.delete_project(&t, &project.id, "admin", 5).await,
        "the project has 2 devices",
    );
    store.delete_device(&t, &d1.id, "admin", 6).await.unwrap();
    assert_conflict(
        store.delete_model(&t, &model.id, "admin", 7).await,
        "the device model is used by 1 device",
    );
    assert_conflict(
        store.delete_project(&t, &project.id, "admin", 7).await,
        "the project has 1 device",
    );
    // A refused delete changed nothing.
    assert_eq!(store.get_model(&t, &model.id).await.unwrap(), Some(model.clone()));
    assert_eq!(store.get_project(&t, &project.id).await.unwrap(), Some(project.clone()));

    store.delete_device(&t, &d2.id, "admin", 8).await.unwrap();
    store.delete_model(&t, &model.id, "admin", 9).await.unwrap();
    store.delete_project(&t, &project.id, "admin", 9).await.unwrap();
    assert_eq!(store.get_model(&t, &model.id).await.unwrap(), None);
    assert_eq!(store.get_project(&t, &project.id).await.unwrap(), None);
    assert_eq!(store.list_models(&t, all()).await.unwrap().total, 0);
    assert_eq!(
        store
            .list_projects(&t, &ProjectQuery::default(), all())
            .await
            .unwrap()
            .total,
        0
    );
    assert_eq!(
        store
            .list_devices(&t, &DeviceQuery::default(), all())
            .await
            .unwrap()
            .total,
        0
    );
    assert_not_found(store.delete_model(&t, &model.id, "admin", 10).await);
    assert_not_found(store.delete_project(&t, &project.id, "admin", 10).await);
    assert_not_found(store.delete_model(&t, &ModelId::generate(), "admin", 10).await);
    assert_not_found(store.delete_project(&t, &ProjectId::generate(), "admin", 10).await);
    assert_not_found(store.delete_device(&t, &DeviceId::generate(), "admin", 10).await);
}

fn assert_missing(result: gantry_core::Result<()>, kind: &str, id: &str) {
    match result {
        Err(Error::NotFound { kind: k, id: i }) if k == kind && i == id => {}
        other => panic!("expected NotFound({kind} {id}), got {other:?}"),
    }
}

/// The service looks the model and project up before it inserts a device, but a model or
/// project deleted since (through another node, or behind a cached read) must still stop it.
async fn devices_need_live_parents(store: SqlStore) {
    let t = new_tenant(&store, "t").await;
    let model = new_model(&store, &t, "m", DeviceType::Light, false).await;
    let project = new_project(&store, &t, "p").await;
    let live_model = new_model(&store, &t, "live", DeviceType::Light, false).await;
    let live_project = new_project(&store, &t, "live").await;
    store.delete_model(&t, &model.id, "admin", 5).await.unwrap();
    store.delete_project(&t, &project.id, "admin", 5).await.unwrap();

    let orphan = device_record(&t, "orphan", &live_project, &model, 6);
    assert_missing(
        store.insert_device(&orphan, "orphan-1").await,
        "device model",
        model.id.as_str(),
    );
    let orphan = device_record(&t, "orphan", &project, &live_model, 6);
    assert_missing(
        store.insert_device(&orphan, "orphan-2").await,
        "project",
        project.id.as_str(),
    );
    // Another tenant's model and project are as good as missing.
    let other = new_tenant(&store, "other").await;
    let foreign = device_record(&other, "foreign", &live_project, &live_model, 6);
    assert_missing(
        store.insert_device(&foreign, "foreign-1").await,
        "project",
        live_project.id.as_str(),
    );
    for token in ["orphan-1", "orphan-2", "foreign-1"] {
        assert_eq!(store.principal_for_token(token).await.unwrap(), None);
    }
    for tenant in [&t, &other] {
        let devices = store
            .list_devices(tenant, &DeviceQuery::default(), all())
            .await
            .unwrap();
        assert_eq!(devices.total, 0);
    }

    // Nor can a device move into a deleted project.
    let mut device = new_device(&store, &t, "d", &live_project, &live_model).await;
    device.project_id = project.id.clone();
    device.record.touch("admin", 7);
    assert_missing(store.update_device(&device).await, "project", project.id.as_str());
    let stored = store.get_device(&t, &device.id).await.unwrap().unwrap();
    assert_eq!(stored.project_id, live_project.id);
    assert_eq!(stored.record.updated_time, None);
}

/// The record a device needs that a race test deletes.
#[derive(Debug, Clone, Copy)]
enum Parent {
    Model,
    Project,
}

/// A tenant with a model and a project, one of which a race test deletes.
struct Race {
    parent: Parent,
    tenant: TenantId,
    model: DeviceModel,
    project: Project,
}

impl Race {
    async fn new(store: &SqlStore, parent: Parent, name: &str) -> Race {
        let tenant = new_tenant(store, name).await;
        Race {
            parent,
            model: new_model(store, &tenant, "m", DeviceType::Light, false).await,
            project: new_project(store, &tenant, "p").await,
            tenant,
        }
    }

    fn device(&self) -> Device {
        device_record(&self.tenant, "racer", &self.project, &self.model, 5)
    }

    /// Locks the parent's row so that a delete waits, but not an insert: FOR NO KEY UPDATE
    /// conflicts with a delete's FOR UPDATE and its UPDATE, not with the FOR KEY SHARE of an
    /// insert (or of its foreign key check).
    async fn hold_parent(&self, store: &SqlStore) -> sqlx::Transaction<'static, sqlx::Any> {
        let (table, id) = match self.parent {
            Parent::Model => ("device_models", self.model.id.as_str()),
            Parent::Project => ("projects", self.project.id.as_str()),
        };
        let mut hold = store.pool().begin().await.unwrap();
        sqlx::query(&format!("SELECT id FROM {table} WHERE id = $1 FOR NO KEY UPDATE"))
            .bind(id)
            .execute(&mut *hold)
            .await
            .unwrap();
        hold
    }

    fn delete(&self, store: &SqlStore) -> tokio::task::JoinHandle<gantry_core::Result<()>> {
        let (store, tenant) = (store.clone(), self.tenant.clone());
        let (model, project) = (self.model.id.clone(), self.project.id.clone());
        match self.parent {
            Parent::Model => tokio::spawn(async move { store.delete_model(&tenant, &model, "admin", 9).await }),
            Parent::Project => tokio::spawn(async move { store.delete_project(&tenant, &project, "admin", 9).await }),
        }
    }

    fn assert_refused(&self, deleted: gantry_core::Result<()>) {
        let message = match self.parent {
            Parent::Model => "the device model is used by 1 device",
            Parent::Project => "the project has 1 device",
        };
        assert_conflict(deleted, message);
    }
}

/// Waits until `sessions` sessions of the test's database wait for a lock, or until `done()`.
async fn until_waiting(store: &SqlStore, sessions: i64, done: impl Fn() -> bool) {
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        let waiting: i64 = sqlx::query_scalar(
            "SELECT COUNT(*) FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'",
        )
        .fetch_one(store.pool())
        .await
        .unwrap();
        if waiting == sessions || done() {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out: {waiting} sessions wait for a lock, not {sessions}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
}

/// A device inserted while its model or project is deleted must not end up pointing at a
/// deleted record: the delete either counts the device or the insert sees the delete. A
/// transaction of the test's own stops one writer where the race would bite, in both orders.
async fn device_inserts_and_parent_deletes_serialize(store: SqlStore) {
    for parent in [Parent::Model, Parent::Project] {
        // The delete has begun when the device is inserted.
        let race = Race::new(&store, parent, &format!("{parent:?} deleted first")).await;
        let hold = race.hold_parent(&store).await;
        let delete = race.delete(&store);
        until_waiting(&store, 1, || false).await;
        let device = race.device();
        let inserted = tokio::time::timeout(
            std::time::Duration::from_secs(10),
            store.insert_device(&device, &format!("{parent:?}-1")),
        )
        .await
        .expect("an insert does not wait for a delete that is itself waiting");
        hold.rollback().await.unwrap();
        inserted.unwrap();
        race.assert_refused(delete.await.unwrap());
        assert!(store.get_device(&race.tenant, &device.id).await.unwrap().is_some());

        // The insert has begun when the delete comes.
        let race = Race::new(&store, parent, &format!("{parent:?} inserted first")).await;
        let mut hold = store.pool().begin().await.unwrap();
        // The device's token hash, taken: the insert waits after writing its device row.
        sqlx::query("INSERT INTO tokens (token_hash, kind, tenant_id, created_time) VALUES ($1, 'admin', $2, 0)")
            .bind(format!("{parent:?}-2"))
            .bind(race.tenant.as_str())
            .execute(&mut *hold)
            .await
            .unwrap();
        let device = race.device();
        let insert = {
            let (store, device) = (store.clone(), device.clone());
            tokio::spawn(async move { store.insert_device(&device, &format!("{parent:?}-2")).await })
        };
        until_waiting(&store, 1, || false).await;
        let delete = race.delete(&store);
        until_waiting(&store, 2, || delete.is_finished()).await;
        hold.rollback().await.unwrap();
        insert.await.unwrap().unwrap();
        race.assert_refused(delete.await.unwrap());
        assert!(store.get_device(&race.tenant, &device.id).await.unwrap().is_some());
    }
}

async fn records_round_trip_with_derived_fields(store: SqlStore) {
    let t = new_tenant(&store, "t").await;
    let mut light = new_model(&store, &t, "light", DeviceType::Light, true).await;
    let plain = new_model(&store, &t, "plain", DeviceType::Root, false).await;
    assert_eq!(store.get_model(&t, &light.id).await.unwrap(), Some(light.clone()));
    assert_eq!(store.get_model(&t, &plain.id).await.unwrap(), Some(plain.clone()));

    let mut p1 = new_project(&store, &t, "p1").await;
    let mut bare = project_record(&t, "bare", 3);
    bare.map_info = None;
    bare.address = None;
    store.insert_project(&bare, "bare-app").await.unwrap();
    assert_eq!(store.get_project(&t, &p1.id).await.unwrap(), Some(p1.clone()));
    assert_eq!(store.get_project(&t, &bare.id).await.unwrap(), Some(bare.clone()));

    let mut lamp = new_device(&store, &t, "lamp", &p1, &light).await;
    let dumb = new_device(&store, &t, "dumb", &bare, &plain).await;
    let stored = store.get_device(&t, &lamp.id).await.unwrap().unwrap();
    assert_eq!(stored, lamp);
    assert!(stored.has_actions);
    assert_eq!(stored.device_model_type, DeviceType::Light);
    assert_eq!(
        stored.device_model_url.as_deref(),
        Some("https://img.example/light.png")
    );
    let stored = store.get_device(&t, &dumb.id).await.unwrap().unwrap();
    assert_eq!(stored, dumb);
    assert!(!stored.has_actions);
    assert_eq!((stored.device_model_url, stored.project_name.as_str()), (None, "bare"));

    // The derived fields follow the model and project they come from.
    light.name = "light v2".to_owned();
    light.device_type = DeviceType::Helmet;
    light.image_url = None;
    light.actions_map.clear();
    light.gateway_id = Some("gw-1".to_owned());
    light.metadata = map(json!({"replaced": true}));
    light.record.touch("admin", 2_000);
    store.update_model(&light).await.unwrap();
    assert_eq!(store.get_model(&t, &light.id).await.unwrap(), Some(light.clone()));
    p1.name = "p1 renamed".to_owned();
    p1.status = ProjectStatus::Product;
    p1.map_info = None;
    p1.template_id = Some("tpl".to_owned());
    p1.record.touch("application:x", 2_000);
    store.update_project(&p1).await.unwrap();
    assert_eq!(store.get_project(&t, &p1.id).await.unwrap(), Some(p1.clone()));
    let stored = store.get_device(&t, &lamp.id).await.unwrap().unwrap();
    assert_eq!(
        (
            stored.device_model_name.as_str(),
            stored.device_model_type,
            stored.has_actions,
            stored.device_model_url,
            stored.project_name.as_str()
        ),
        ("light v2", DeviceType::Helmet, false, None, "p1 renamed")
    );

    lamp.device_name = "lamp 2".to_owned();
    lamp.project_id = bare.id.clone();
    lamp.project_name = bare.name.clone();
    lamp.status = DeviceStatus::Locked;
    lamp.comments = Some("moved".to_owned());
    lamp.is_virtual = true;
    lamp.virtual_ = true;
    lamp.metadata = map(json!({"floor": 3}));
    lamp.device_model_name = light.name.clone();
    lamp.device_model_type = light.device_type;
    lamp.has_actions = false;
    lamp.device_model_url = None;
    lamp.record.touch("admin", 3_000);
    store.update_device(&lamp).await.unwrap();
    assert_eq!(store.get_device(&t, &lamp.id).await.unwrap(), Some(lamp.clone()));
    let listed = store.list_devices(&t, &DeviceQuery::default(), all()).await.unwrap();
    assert_eq!(listed.items, vec![lamp, dumb]);
}

// ---- events ----------------------------------------------------------------------------------

/// A listing of every event of `device`, by device time.
fn every_event_of(device: &Device) -> EventQuery {
    EventQuery {
        device: device.id.clone(),
        attribute_code: None,
        time_field: TimeField::Device,
        start: None,
        end: None,
    }
}

fn event_at(device: &Device, id: EventId, code: &str, value: serde_json::Value, device_ts: i64) -> DeviceEvent {
    DeviceEvent {
        id,
        tenant_id: device.record.tenant_id.clone(),
        project_id: device.project_id.clone(),
        model_id: device.model_id.clone(),
        device_id: device.id.clone(),
        attribute_code: code.to_owned(),
        attribute_type: DataType::Float,
        attribute_data: value,
        channel: Channel::M,
        ingress_time_stamp: 5_000,
        device_timestamp: device_ts,
        correlation_id: None,
        context: None,
        created_by: "DEVICE".to_owned(),
        created_time: 5_000,
        deleted: false,
    }
}

/// Appends `events` in batches of `batch`, each followed by a batch of `other`'s events at the
/// same device times.
async fn append_beside(store: &SqlStore, events: &[DeviceEvent], other: &Device, batch: usize) {
    for batch in events.chunks(batch) {
        store.append_events(batch).await.unwrap();
        let theirs: Vec<DeviceEvent> = batch
            .iter()
            .map(|e| event_at(other, EventId::generate(), "temp", json!(0), e.device_timestamp))
            .collect();
        store.append_events(&theirs).await.unwrap();
    }
}

/// Ingest commits its next batches before the last are on disk (`commit_events`, ingest.rs):
/// every batch is read, with its events in the listing and the shadow, once its durable future
/// resolves, whatever the batches after it are doing.
async fn commits_in_flight_are_read_once_durable(store: SqlStore) {
    let tenant = new_tenant(&store, "in-flight").await;
    let project = new_project(&store, &tenant, "p").await;
    let model = new_model(&store, &tenant, "m", DeviceType::Crane, false).await;
    let device = new_device(&store, &tenant, "d", &project, &model).await;
    let batches: Vec<Vec<DeviceEvent>> = (0..8)
        .map(|b| {
            (0..5)
                .map(|i| event_at(&device, EventId::generate(), "temp", json!(b * 5 + i), b * 5 + i))
                .collect()
        })
        .collect();
    let mut durable = Vec::new();
    for batch in &batches {
        durable.push(store.commit_events(batch, &[]).await.unwrap());
    }
    let query = every_event_of(&device);
    for (b, flushed) in durable.into_iter().enumerate() {
        flushed.await.unwrap();
        for event in &batches[b] {
            assert_eq!(
                store.get_event(&tenant, &event.id).await.unwrap().as_ref(),
                Some(event),
                "batch {b}"
            );
        }
        let listed = store.list_events(&query, all()).await.unwrap();
        assert!(listed.total >= (b as u64 + 1) * 5, "batch {b}: {}", listed.total);
    }
    let listed = store.list_events(&query, all()).await.unwrap();
    assert_eq!(listed.total, 40);
    let newest: Vec<i64> = listed.items.iter().map(|e| e.device_timestamp).take(3).collect();
    assert_eq!(newest, vec![39, 38, 37]);
    let shadow = store.shadow(&tenant, &device.id).await.unwrap();
    assert_eq!((shadow[0].0.value.clone(), shadow[0].0.timestamp), (json!(39), 39));
}

async fn events_list_by_window_and_feed_the_shadow(store: SqlStore) {
    let tenant = new_tenant(&store, "events").await;
    let project = new_project(&store, &tenant, "p").await;
    let model = new_model(&store, &tenant, "m", DeviceType::Crane, false).await;
    let device = new_device(&store, &tenant, "d", &project, &model).await;
    // one batch holds an older value after a newer one, and two values of one device time
    let batch: Vec<DeviceEvent> = [(1, 100), (2, 300), (3, 200), (4, 300)]
        .into_iter()
        .map(|(v, ts)| event_at(&device, EventId::generate(), "temp", json!(v), ts))
        .collect();
    store.append_events(&batch).await.unwrap();
    store
        .append_events(&[event_at(&device, EventId::generate(), "temp", json!(5), 250)])
        .await
        .unwrap();
    let shadow = store.shadow(&tenant, &device.id).await.unwrap();
    assert_eq!(shadow.len(), 1);
    assert_eq!(
        (shadow[0].0.value.clone(), shadow[0].0.timestamp),
        (json!(4), 300),
        "newest device time, later arrival on a tie"
    );

    let query = |start, end| EventQuery {
        device: device.id.clone(),
        attribute_code: None,
        time_field: TimeField::Device,
        start,
        end,
    };
    let page = store.list_events(&query(Some(200), Some(300)), all()).await.unwrap();
    assert_eq!(page.total, 4, "both ends inclusive");
    let times: Vec<i64> = page.items.iter().map(|e| e.device_timestamp).collect();
    assert_eq!(times, vec![300, 300, 250, 200]);
    let ties: Vec<&str> = page.items[..2].iter().map(|e| e.id.as_str()).collect();
    assert!(ties[0] > ties[1], "ties newest id first");
    assert_eq!(store.list_events(&query(None, Some(99)), all()).await.unwrap().total, 0);
    let other = new_tenant(&store, "other").await;
    assert!(
        store.shadow(&other, &device.id).await.unwrap().is_empty(),
        "tenant scoped"
    );

    // an unfiltered listing's total is the kept count, per device and per attribute
    let unfiltered = store.list_events(&query(None, None), all()).await.unwrap();
    assert_eq!((unfiltered.total, unfiltered.items.len()), (5, 5));
    let first = &page.items[0];
    assert_eq!(store.get_event(&tenant, &first.id).await.unwrap().as_ref(), Some(first));
    assert!(!store.delete_event(&other, &first.id).await.unwrap(), "tenant scoped");
    assert!(store.delete_event(&tenant, &first.id).await.unwrap());
    assert!(!store.delete_event(&tenant, &first.id).await.unwrap());
    assert_eq!(store.get_event(&tenant, &first.id).await.unwrap(), None);
    assert_eq!(store.list_events(&query(None, None), all()).await.unwrap().total, 4);
    store
        .append_events(&[event_at(&device, EventId::generate(), "other", json!(1), 1)])
        .await
        .unwrap();
    let by_attribute = |code: &str| EventQuery {
        attribute_code: Some(code.to_owned()),
        ..query(None, None)
    };
    assert_eq!(store.list_events(&by_attribute("temp"), all()).await.unwrap().total, 4);
    assert_eq!(store.list_events(&by_attribute("other"), all()).await.unwrap().total, 1);
    assert_eq!(store.list_events(&by_attribute("none"), all()).await.unwrap().total, 0);
    assert_eq!(store.list_events(&query(None, None), all()).await.unwrap().total, 5);
}

async fn retention_deletes_only_old_events(store: SqlStore) {
    let tenant = new_tenant(&store, "retention").await;
    let project = new_project(&store, &tenant, "p").await;
    let model = new_model(&store, &tenant, "m", DeviceType::Crane, false).await;
    let device = new_device(&store, &tenant, "d", &project, &model).await;
    let day = 86_400_000;
    let now = chrono_now();
    let old: Vec<DeviceEvent> = (0..7)
        .map(|i| {
            let id = EventId::lower_bound_at(now - 10 * day + i)
                .as_str()
                .replace("-8000-000000000000", &format!("-8000-{i:012}"));
            event_at(&device, EventId::from_string(id), "temp", json!(i), i)
        })
        .collect();
    store.append_events(&old).await.unwrap();
    store
        .append_events(&[event_at(&device, EventId::generate(), "temp", json!(99), 1)])
        .await
        .unwrap();
    assert_eq!(
        store.delete_events_before(now - day, 5).await.unwrap(),
        5,
        "batches are bounded"
    );
    assert_eq!(store.delete_events_before(now - day, 5).await.unwrap(), 2);
    assert_eq!(store.delete_events_before(now - day, 5).await.unwrap(), 0);
    let left = store.list_events(&every_event_of(&device), all()).await.unwrap();
    assert_eq!(
        left.items.iter().map(|e| e.attribute_data.clone()).collect::<Vec<_>>(),
        vec![json!(99)]
    );
    assert_eq!(left.total, 1, "the kept count follows the deletions");
}

fn chrono_now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
}

/// Several writers (nodes sharing one database) append batches that touch the same shadows and
/// counts in different orders, while walks move staged events back to back (SQLite): all commit,
/// and the counts add up.
async fn concurrent_batches_on_the_same_devices(store: SqlStore) {
    let tenant = new_tenant(&store, "writers").await;
    let project = new_project(&store, &tenant, "p").await;
    let model = new_model(&store, &tenant, "m", DeviceType::Crane, false).await;
    let mut devices = Vec::new();
    for i in 0..6 {
        devices.push(new_device(&store, &tenant, &format!("d{i}"), &project, &model).await);
    }
    let writers: Vec<_> = (0..8)
        .map(|w| {
            let store = store.clone();
            let mut order = devices.clone();
            if w % 2 == 1 {
                order.reverse();
            }
            tokio::spawn(async move {
                for round in 0..10 {
                    let batch: Vec<DeviceEvent> = order
                        .iter()
                        .map(|d| event_at(d, EventId::generate(), "temp", json!(w), round))
                        .collect();
                    store.append_events(&batch).await.unwrap();
                }
            })
        })
        .collect();
    let walking = Walking::start(&store);
    for writer in writers {
        writer.await.expect("no writer failed");
    }
    walking.stop().await;
    store.merge_recent().await.unwrap();
    for device in &devices {
        let query = every_event_of(device);
        assert_eq!(store.list_events(&query, all()).await.unwrap().total, 80);
    }
}

/// The ingest pipeline (ingest.rs) with the writers the store asks for (two on PostgreSQL,
/// one on SQLite): each device's submissions are committed in the order they were queued, so with
/// equal device times each shadow ends at the device's last queued value; closing the pipeline
/// commits everything it accepted before the writers end. The observer of durable batches (the
/// push stream's source) sees every event once, in commit order: with one writer that is the
/// order they were queued in, with several each device's.
async fn ingest_keeps_each_devices_order(store: SqlStore) {
    use gantry_core::ingest::{Ingest, IngestConfig};
    let tenant = new_tenant(&store, "ingest-order").await;
    let project = new_project(&store, &tenant, "p").await;
    let model = new_model(&store, &tenant, "m", DeviceType::Crane, false).await;
    let mut devices = Vec::new();
    for i in 0..24 {
        devices.push(new_device(&store, &tenant, &format!("d{i}"), &project, &model).await);
    }
    let (ingest, writers) = Ingest::start(std::sync::Arc::new(store.clone()), IngestConfig::default());
    let observed = std::sync::Arc::new(std::sync::Mutex::new(Vec::<(DeviceId, i64)>::new()));
    ingest.on_committed({
        let observed = observed.clone();
        std::sync::Arc::new(move |events: &[DeviceEvent]| {
            let mut observed = observed.lock().unwrap();
            observed.extend(
                events
                    .iter()
                    .map(|e| (e.device_id.clone(), e.attribute_data.as_i64().unwrap())),
            );
        })
    });
    let rounds = 20;
    let mut submissions = Vec::new();
    for round in 0..rounds {
        for device in &devices {
            let event = event_at(device, EventId::generate(), "temp", json!(round), 7);
            // The first poll queues the submission (the queues have room; unconstrained: tokio's
            // budget would make sends after the 128th of this poll wait): queued in this order.
            let mut submission = Box::pin(tokio::task::unconstrained(ingest.submit(vec![event])));
            match futures::poll!(submission.as_mut()) {
                std::task::Poll::Ready(result) => result.expect("committed"),
                std::task::Poll::Pending => submissions.push(submission),
            }
        }
    }
    ingest.close();
    for submission in submissions {
        submission.await.expect("committed");
    }
    writers.join().await;
    assert_eq!(
        ingest.stats().committed.load(std::sync::atomic::Ordering::Relaxed),
        (rounds * devices.len()) as u64
    );
    for device in &devices {
        let listed = store.list_events(&every_event_of(device), all()).await.unwrap();
        assert_eq!(listed.total, rounds as u64, "{}", device.device_name);
        let shadow = store.shadow(&tenant, &device.id).await.unwrap();
        assert_eq!(shadow.len(), 1);
        assert_eq!(
            shadow[0].0.value,
            json!(rounds - 1),
            "{}: the last queued value",
            device.device_name
        );
    }
    assert!(
        ingest
            .submit(vec![event_at(&devices[0], EventId::generate(), "temp", json!(0), 8)])
            .await
            .is_err(),
        "closed"
    );
    let observed = observed.lock().unwrap().clone();
    assert_eq!(observed.len(), rounds * devices.len(), "every event observed once");
    for device in &devices {
        let values: Vec<i64> = observed
            .iter()
            .filter(|(d, _)| *d == device.id)
            .map(|(_, v)| *v)
            .collect();
        assert_eq!(values, (0..rounds as i64).collect::<Vec<_>>(), "{}", device.device_name);
    }
    if store.ingest_writers() == 1 {
        let queued: Vec<(DeviceId, i64)> = (0..rounds as i64)
            .flat_map(|round| devices.iter().map(move |d| (d.id.clone(), round)))
            .collect();
        assert_eq!(observed, queued, "one writer: observed in the order queued");
    }
}

/// Walks of the mover back to back (`merge_recent` in a loop, none on PostgreSQL's store) until
/// `stop`.
struct Walking {
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    task: tokio::task::JoinHandle<u64>,
}

impl Walking {
    fn start(store: &SqlStore) -> Self {
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let task = tokio::spawn({
            let (store, stop) = (store.clone(), stop.clone());
            async move {
                let mut moved = 0;
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    moved += store.merge_recent().await.unwrap();
                    tokio::task::yield_now().await;
                }
                moved
            }
        });
        Walking { stop, task }
    }

    /// Stops the walks; how many events they moved.
    async fn stop(self) -> u64 {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        self.task.await.expect("no walk failed")
    }
}

async fn staged_events(store: &SqlStore) -> (i64, i64) {
    let count = |table: &'static str| async move {
        sqlx::query_scalar::<_, i64>(&format!("SELECT COUNT(*) FROM {table}"))
            .fetch_one(store.pool())
            .await
            .unwrap()
    };
    // Moved rows stay in the staging file for a walk, recorded as moved.
    let staged = if store.backend() == "sqlite" {
        count(
            "staging.device_events_recent AS staged WHERE NOT EXISTS (SELECT 1 FROM device_events_recent_moved AS moved \
             WHERE staged.device_id BETWEEN moved.device_lo AND moved.device_hi AND staged.seq <= moved.through)",
        )
        .await
    } else {
        0
    };
    (staged, count("device_events").await)
}

/// On SQLite events are committed into a staging table and moved into the indexed one in the
/// background: every listing, total, lookup and delete reads the same before and after the move.
/// (PostgreSQL writes the indexed table directly; the test holds there too.)
async fn moved_events_read_as_before(store: SqlStore) {
    let tenant = new_tenant(&store, "moves").await;
    let project = new_project(&store, &tenant, "p").await;
    let model = new_model(&store, &tenant, "m", DeviceType::Crane, false).await;
    let device = new_device(&store, &tenant, "d", &project, &model).await;
    let other = new_device(&store, &tenant, "e", &project, &model).await;
    for round in 0..3 {
        let batch: Vec<DeviceEvent> = (0..10)
            .flat_map(|i| {
                let code = if i % 3 == 0 { "load" } else { "temp" };
                let ts = 1_000 + round * 10 + i;
                [
                    event_at(&device, EventId::generate(), code, json!(ts), ts),
                    event_at(&other, EventId::generate(), code, json!(ts), ts),
                ]
            })
            .collect();
        store.append_events(&batch).await.unwrap();
    }
    let query = |code: Option<&str>, start, end| EventQuery {
        device: device.id.clone(),
        attribute_code: code.map(str::to_owned),
        time_field: TimeField::Device,
        start,
        end,
    };
    let queries = [
        query(None, None, None),
        query(Some("load"), None, None),
        query(None, Some(1_005), Some(1_024)),
        query(Some("temp"), Some(1_005), None),
        EventQuery {
            time_field: TimeField::Ingress,
            ..query(None, None, None)
        },
    ];
    let read = || async {
        let mut pages = Vec::new();
        for q in &queries {
            for p in [all(), page(2, 4)] {
                let listed = store.list_events(q, p).await.unwrap();
                pages.push((listed.total, listed.items));
            }
        }
        pages
    };
    let before = read().await;
    assert_eq!(before[0].0, 30);
    assert_eq!(before[0].1.len(), 30);
    assert_eq!(before[1].1.len(), 4, "page 2 of 4");
    assert_eq!(before[2].0, 12, "load: 4 of each 10");
    assert_eq!(before[4].0, 20, "1,005 to 1,024 inclusive");

    let staging = store.backend() == "sqlite";
    assert_eq!(staged_events(&store).await.0 > 0, staging);
    store.merge_recent().await.unwrap();
    assert_eq!(staged_events(&store).await, (0, 60), "all moved, none twice");
    assert_eq!(read().await, before);
    let first = &before[0].1[0];
    assert_eq!(store.get_event(&tenant, &first.id).await.unwrap().as_ref(), Some(first));

    // a merged event and a newly staged one delete alike
    let staged = event_at(&device, EventId::generate(), "temp", json!(1), 2_000);
    store.append_events(std::slice::from_ref(&staged)).await.unwrap();
    assert_eq!(staged_events(&store).await.0, i64::from(staging));
    assert_eq!(
        store.get_event(&tenant, &staged.id).await.unwrap().as_ref(),
        Some(&staged)
    );
    assert!(store.delete_event(&tenant, &first.id).await.unwrap());
    assert!(store.delete_event(&tenant, &staged.id).await.unwrap());
    let after = store.list_events(&queries[0], all()).await.unwrap();
    assert_eq!((after.total, after.items.len()), (29, 29));
    assert_eq!(after.items[..], before[0].1[1..]);
}

/// On SQLite a staged event reaches the shadow table and the kept totals only when it is moved;
/// reads add the staged ones meanwhile. The shadow and the totals read the same before and after a
/// move, a late event never rolls the shadow back, a tie goes to the event that arrived last, and
/// deleting an event (staged or moved) leaves the shadow as it was.
async fn shadows_and_totals_hold_across_moves_and_deletes(store: SqlStore) {
    let tenant = new_tenant(&store, "shadows").await;
    let project = new_project(&store, &tenant, "p").await;
    let model = new_model(&store, &tenant, "m", DeviceType::Crane, false).await;
    let device = new_device(&store, &tenant, "d", &project, &model).await;
    let shadow = || async {
        let attributes = store.shadow(&tenant, &device.id).await.unwrap();
        attributes
            .into_iter()
            .map(|(a, _)| (a.code, (a.value, a.timestamp)))
            .collect::<Vec<_>>()
    };
    let totals = || async {
        let mut totals = Vec::new();
        for code in [None, Some("temp"), Some("load")] {
            let query = EventQuery {
                device: device.id.clone(),
                attribute_code: code.map(str::to_owned),
                time_field: TimeField::Device,
                start: None,
                end: None,
            };
            totals.push(store.list_events(&query, all()).await.unwrap().total);
        }
        totals
    };
    let append = |events: Vec<DeviceEvent>| {
        let store = store.clone();
        async move { store.append_events(&events).await.unwrap() }
    };

    append(vec![
        event_at(&device, EventId::generate(), "temp", json!(1), 100),
        event_at(&device, EventId::generate(), "temp", json!(2), 300),
        event_at(&device, EventId::generate(), "load", json!(5), 200),
    ])
    .await;
    // late for temp; a tie for load, arriving last
    let late = event_at(&device, EventId::generate(), "temp", json!(0), 50);
    let tie = event_at(&device, EventId::generate(), "load", json!(6), 200);
    append(vec![late.clone(), tie.clone()]).await;
    let expected = vec![
        ("load".to_owned(), (json!(6), 200)),
        ("temp".to_owned(), (json!(2), 300)),
    ];
    assert_eq!(shadow().await, expected);
    assert_eq!(totals().await, vec![5, 3, 2]);

    store.merge_recent().await.unwrap();
    assert_eq!(shadow().await, expected, "the same after the move");
    assert_eq!(totals().await, vec![5, 3, 2]);

    // a tie between a moved event and a staged one goes to the staged one, which came later
    append(vec![event_at(&device, EventId::generate(), "temp", json!(3), 300)]).await;
    let expected = vec![
        ("load".to_owned(), (json!(6), 200)),
        ("temp".to_owned(), (json!(3), 300)),
    ];
    assert_eq!(shadow().await, expected);
    assert_eq!(totals().await, vec![6, 4, 2]);

    // deleting the newest events, one staged and one moved, leaves the shadow as it was
    let newest = event_at(&device, EventId::generate(), "load", json!(7), 400);
    append(vec![newest.clone()]).await;
    let expected = vec![
        ("load".to_owned(), (json!(7), 400)),
        ("temp".to_owned(), (json!(3), 300)),
    ];
    assert!(store.delete_event(&tenant, &newest.id).await.unwrap());
    assert!(store.delete_event(&tenant, &tie.id).await.unwrap());
    assert_eq!(shadow().await, expected);
    assert_eq!(totals().await, vec![5, 4, 1]);
    store.merge_recent().await.unwrap();
    assert_eq!(shadow().await, expected);
    assert_eq!(totals().await, vec![5, 4, 1]);
    assert_eq!(staged_events(&store).await.0, 0);
}

/// While moves run back to back, listings never see an event twice or miss one, and every
/// lookup and delete finds its event in whichever table it is.
async fn deletes_and_listings_during_moves(store: SqlStore) {
    let tenant = new_tenant(&store, "racing").await;
    let project = new_project(&store, &tenant, "p").await;
    let model = new_model(&store, &tenant, "m", DeviceType::Crane, false).await;
    let device = new_device(&store, &tenant, "d", &project, &model).await;
    let walking = Walking::start(&store);
    let query = EventQuery {
        device: device.id.clone(),
        attribute_code: None,
        time_field: TimeField::Device,
        start: Some(0),
        end: None,
    };
    let mut ids = Vec::new();
    for round in 0..20 {
        let batch: Vec<DeviceEvent> = (0..10)
            .map(|i| event_at(&device, EventId::generate(), "temp", json!(i), round * 10 + i))
            .collect();
        ids.extend(batch.iter().map(|e| e.id.clone()));
        store.append_events(&batch).await.unwrap();
        for event in &batch {
            let found = store.get_event(&tenant, &event.id).await.unwrap();
            assert_eq!(found.as_ref(), Some(event), "found while moves run");
        }
        let listed = store.list_events(&query, all()).await.unwrap();
        let distinct: BTreeSet<&str> = listed.items.iter().map(|e| e.id.as_str()).collect();
        assert_eq!((listed.total, distinct.len()), (ids.len() as u64, ids.len()));
    }
    for (n, id) in ids.iter().enumerate() {
        assert!(
            store.delete_event(&tenant, id).await.unwrap(),
            "delete {n} found its event"
        );
        if n % 20 == 0 {
            let listed = store.list_events(&query, all()).await.unwrap();
            assert_eq!(listed.items.len(), ids.len() - n - 1);
        }
    }
    let moved = walking.stop().await;
    if store.backend() == "sqlite" {
        assert!(moved > 0, "moves ran meanwhile");
    }
    assert_eq!(staged_events(&store).await, (0, 0));
}

/// A listing with a date range counts its total from per-hour counts and the events of its part
/// hours at each end (SQLite; PostgreSQL counts the range): for ranges of every shape (within an hour, on hour boundaries, open at one
/// end, before 1970, by arrival time, one attribute) the total is the number of events in the
/// range, with events staged and moved (SQLite), after deletes by id and by retention, and the
/// page holds the range's newest events.
async fn range_totals_match_the_events_in_range(store: SqlStore) {
    let tenant = new_tenant(&store, "ranges").await;
    let project = new_project(&store, &tenant, "p").await;
    let model = new_model(&store, &tenant, "m", DeviceType::Crane, false).await;
    let device = new_device(&store, &tenant, "d", &project, &model).await;
    let other = new_device(&store, &tenant, "e", &project, &model).await;
    let hour = 3_600_000_i64;
    let now = chrono_now();
    // A small linear congruential generator: the same events and ranges on every run.
    let mut seed = 0x2545_f491_4f6c_dd1d_u64;
    let mut next = move |below: i64| {
        seed = seed
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        ((seed >> 33) % below as u64) as i64
    };
    // Events over ten hours from -2 h (before 1970), some right on hour boundaries; arrival times
    // over three hours of their own, unrelated to the device's; old ids for some (retention).
    let mut events = Vec::new();
    for i in 0..600 {
        let device_ts = match i % 5 {
            0 => (next(10) - 2) * hour,
            1 => (next(10) - 2) * hour - 1,
            _ => next(10 * hour) - 2 * hour,
        };
        let code = ["temp", "load", "wind"][next(3) as usize];
        let old = i % 7 == 0;
        let id = if old {
            EventId::lower_bound_at(now - 10 * 86_400_000 + i)
                .as_str()
                .replace("-8000-000000000000", &format!("-8000-{i:012}"))
        } else {
            EventId::generate().as_str().to_owned()
        };
        let mut event = event_at(&device, EventId::from_string(id), code, json!(i), device_ts);
        event.ingress_time_stamp = 1_000 * hour + next(3 * hour);
        events.push(event);
    }
    // another device's events in the same hours count for it alone
    append_beside(&store, &events, &other, 50).await;

    let mut ranges: Vec<(Option<i64>, Option<i64>)> = vec![
        (Some(0), Some(hour - 1)),
        (Some(-2 * hour), Some(8 * hour)),
        (Some(-hour), Some(3 * hour)),
        (Some(-hour + 1), Some(3 * hour - 1)),
        (Some(hour / 2), None),
        (None, Some(5 * hour + 17)),
        (Some(7 * hour), Some(6 * hour)),
        (Some(i64::MIN), Some(i64::MAX)),
    ];
    for _ in 0..40 {
        let a = next(12 * hour) - 3 * hour;
        let b = a + next(6 * hour);
        ranges.push((Some(a), Some(b)));
    }
    let check = |events: Vec<DeviceEvent>, when: &'static str| {
        let ranges = ranges.clone();
        let (store, device) = (store.clone(), device.clone());
        async move {
            for (start, end) in ranges {
                for (field, code) in [
                    (TimeField::Device, None),
                    (TimeField::Ingress, None),
                    (TimeField::Device, Some("load")),
                ] {
                    // arrival-time ranges where the arrival times are
                    let shift = if field == TimeField::Ingress { 1_000 * hour } else { 0 };
                    let (start, end) = (
                        start.map(|t| t.saturating_add(shift)),
                        end.map(|t| t.saturating_add(shift)),
                    );
                    let mut expected: Vec<&DeviceEvent> = events
                        .iter()
                        .filter(|e| {
                            let t = match field {
                                TimeField::Device => e.device_timestamp,
                                TimeField::Ingress => e.ingress_time_stamp,
                            };
                            code.is_none_or(|c| e.attribute_code == c)
                                && start.is_none_or(|s| t >= s)
                                && end.is_none_or(|e| t <= e)
                        })
                        .collect();
                    let query = EventQuery {
                        device: device.id.clone(),
                        attribute_code: code.map(str::to_owned),
                        time_field: field,
                        start,
                        end,
                    };
                    let listed = store.list_events(&query, page(1, 5)).await.unwrap();
                    let what = format!("{when}: {field:?} {code:?} {start:?}..={end:?}");
                    assert_eq!(listed.total, expected.len() as u64, "{what}");
                    let time = |e: &DeviceEvent| match field {
                        TimeField::Device => e.device_timestamp,
                        TimeField::Ingress => e.ingress_time_stamp,
                    };
                    expected.sort_by(|a, b| (time(b), b.id.as_str()).cmp(&(time(a), a.id.as_str())));
                    let newest: Vec<&str> = expected.iter().take(5).map(|e| e.id.as_str()).collect();
                    let listed: Vec<&str> = listed.items.iter().map(|e| e.id.as_str()).collect();
                    assert_eq!(listed, newest, "{what}");
                }
            }
        }
    };
    check(events.clone(), "as committed").await;
    store.merge_recent().await.unwrap();
    assert_eq!(staged_events(&store).await.0, 0);
    check(events.clone(), "moved").await;

    // deletes by id (one moved, one staged) and by retention take events off their hours
    let staged = event_at(&device, EventId::generate(), "load", json!(-1), 30 * 60_000);
    store.append_events(std::slice::from_ref(&staged)).await.unwrap();
    events.push(staged.clone());
    for gone in [events[3].id.clone(), staged.id.clone()] {
        assert!(store.delete_event(&tenant, &gone).await.unwrap());
        events.retain(|e| e.id != gone);
    }
    let old = events
        .iter()
        .filter(|e| e.id.as_str() < EventId::lower_bound_at(now - 86_400_000).as_str())
        .count();
    assert_eq!(
        store.delete_events_before(now - 86_400_000, 1_000).await.unwrap(),
        old as u64
    );
    events.retain(|e| e.id.as_str() >= EventId::lower_bound_at(now - 86_400_000).as_str());
    check(events.clone(), "after deletes").await;
    store.merge_recent().await.unwrap();
    check(events.clone(), "after deletes, moved").await;
    let emptied: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM device_event_counts WHERE events <= 0")
        .fetch_one(store.pool())
        .await
        .unwrap();
    assert_eq!(emptied, 0, "hours left without events are removed");

    // The hours kept are the hours of the events stored; PostgreSQL keeps none: it counts ranges.
    let hours: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM device_event_counts WHERE clock <> ''")
        .fetch_one(store.pool())
        .await
        .unwrap();
    if store.backend() == "postgres" {
        assert_eq!(hours, 0, "PostgreSQL keeps no hours");
    } else {
        assert!(hours > 30, "{hours} hours");
    }
}

/// On SQLite a task copies committed WAL pages into the database file in the background: the
/// file grows with the events written, though the writer's own checkpoint (past 10,000 WAL
/// pages) never ran and nothing here asked for one.
#[tokio::test]
async fn sqlite_checkpoints_in_the_background() {
    let dir = tempfile::tempdir().unwrap();
    let store = SqlStore::connect(&sqlite_url(dir.path())).await.unwrap();
    let file = dir.path().join("gantry.db");
    let size = || std::fs::metadata(&file).unwrap().len();
    let tenant = new_tenant(&store, "checkpoints").await;
    let project = new_project(&store, &tenant, "p").await;
    let model = new_model(&store, &tenant, "m", DeviceType::Crane, false).await;
    let device = new_device(&store, &tenant, "d", &project, &model).await;
    tokio::time::sleep(std::time::Duration::from_millis(600)).await;
    let before = size();
    let events: Vec<DeviceEvent> = (0..2000)
        .map(|i| event_at(&device, EventId::generate(), "temp", json!(i), i))
        .collect();
    store.append_events(&events).await.unwrap();
    let mut grown = false;
    for _ in 0..50 {
        if size() > before + 100 * 1024 {
            grown = true;
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    store.close().await;
    assert!(grown, "the database file stayed at {} bytes (was {before})", size());
}

/// A SQLite store in `dir` holding one device, closed: for tests that take its schema back to an
/// earlier version. Returns its URL, the tenant and the device.
async fn closed_store_with_a_device(dir: &std::path::Path) -> (String, TenantId, Device) {
    let url = sqlite_url(dir);
    let store = SqlStore::connect(&url).await.unwrap();
    let tenant = new_tenant(&store, "upgrade").await;
    let project = new_project(&store, &tenant, "p").await;
    let model = new_model(&store, &tenant, "m", DeviceType::Crane, false).await;
    let device = new_device(&store, &tenant, "d", &project, &model).await;
    store.close().await;
    (url, tenant, device)
}

/// Ingest commits into the staging file while another connection holds the main file's write
/// lock (as a move of the mover, or a backup, does): they do not wait for it.
#[tokio::test]
async fn sqlite_ingest_commits_while_the_main_file_is_locked() {
    let dir = tempfile::tempdir().unwrap();
    let (url, tenant, device) = closed_store_with_a_device(dir.path()).await;
    let store = SqlStore::connect(&url).await.unwrap();
    let mut holder = sqlx::SqliteConnection::connect(&url).await.unwrap();
    holder.execute("BEGIN IMMEDIATE").await.unwrap();
    let event = event_at(&device, EventId::generate(), "temp", json!(21.5), 1_000);
    // SQLite's busy timeout is 10 s: an ingest commit that needed the main file's lock would still
    // be waiting at 5.
    tokio::time::timeout(
        std::time::Duration::from_secs(5),
        store.append_events(std::slice::from_ref(&event)),
    )
    .await
    .expect("ingest committed while the main file was locked")
    .unwrap();
    let found = store.get_event(&tenant, &event.id).await.unwrap();
    assert_eq!(found.map(|e| e.attribute_data), Some(json!(21.5)));
    holder.execute("ROLLBACK").await.unwrap();
    store.merge_recent().await.unwrap();
    assert_eq!(staged_events(&store).await, (0, 1));
}

/// Pages beyond 10,000 events (read by their ids first, `DEEP_OFFSET`) continue the pages before
/// them, ties in time ordered by id, with and without a date range and an attribute, staged and
/// moved.
async fn deep_pages_list_in_order(store: SqlStore) {
    let tenant = new_tenant(&store, "t").await;
    let project = new_project(&store, &tenant, "p").await;
    let model = new_model(&store, &tenant, "m", DeviceType::Crane, false).await;
    let device = new_device(&store, &tenant, "d", &project, &model).await;
    let other = new_device(&store, &tenant, "e", &project, &model).await;
    // 10,400 events, three to a millisecond of device time (ties), two attributes; another
    // device's events in the same times.
    let events: Vec<DeviceEvent> = (0..10_400_i64)
        .map(|i| {
            let code = if i % 4 == 0 { "load" } else { "temp" };
            event_at(&device, EventId::generate(), code, json!(i), 1_000_000 + i / 3)
        })
        .collect();
    append_beside(&store, &events, &other, 2_000).await;
    let check = |when: &'static str| {
        let (store, device, events) = (store.clone(), device.clone(), events.clone());
        async move {
            for (code, start, end) in [
                (None, None, None),
                (None, Some(1_000_010), Some(1_003_460)),
                (Some("temp"), None, None),
            ] {
                let mut expected: Vec<&DeviceEvent> = events
                    .iter()
                    .filter(|e| {
                        code.is_none_or(|c| e.attribute_code == c)
                            && start.is_none_or(|s| e.device_timestamp >= s)
                            && end.is_none_or(|t| e.device_timestamp <= t)
                    })
                    .collect();
                expected.sort_by(|a, b| (b.device_timestamp, b.id.as_str()).cmp(&(a.device_timestamp, a.id.as_str())));
                let query = EventQuery {
                    device: device.id.clone(),
                    attribute_code: code.map(str::to_owned),
                    time_field: TimeField::Device,
                    start,
                    end,
                };
                // Offsets 9,800 to 10,400 by pages of 100, then 1,000 from 9,000: across the
                // change of query, up to past the end.
                for (page_no, size) in (99..=105).map(|n| (n, 100)).chain([(10, 1_000), (11, 1_000)]) {
                    let listed = store.list_events(&query, page(page_no, size)).await.unwrap();
                    let what = format!("{when}: {code:?} {start:?}..={end:?} page {page_no} of {size}");
                    assert_eq!(listed.total, expected.len() as u64, "{what}");
                    let from = ((page_no - 1) * size) as usize;
                    let want: Vec<&str> = expected
                        .iter()
                        .skip(from)
                        .take(size as usize)
                        .map(|e| e.id.as_str())
                        .collect();
                    let got: Vec<&str> = listed.items.iter().map(|e| e.id.as_str()).collect();
                    assert_eq!(got, want, "{what}");
                    if let Some(first) = listed.items.first() {
                        let held = events.iter().find(|e| e.id == first.id).unwrap();
                        assert_eq!(first, held, "{what}: the row itself");
                    }
                }
            }
        }
    };
    check("as committed").await;
    store.merge_recent().await.unwrap();
    check("moved").await;
    // The next walk deletes the moved rows from staging: the listing reads device_events alone.
    store.merge_recent().await.unwrap();
    check("moved and deleted from staging").await;
}

fn session(device: &Device, at: i64, transport: &str) -> SessionStart {
    SessionStart {
        device: device.id.clone(),
        at,
        client_address: Some("10.0.0.7:50000".into()),
        protocol: Some("MQTT 5".into()),
        transport: Some(transport.into()),
    }
}

fn end(device: &Device, started_by: i64, at: i64, last_seen: Option<i64>) -> SessionEnd {
    SessionEnd {
        device: device.id.clone(),
        started_by,
        at,
        last_seen,
    }
}

async fn device_sessions_start_end_and_survive_a_restart(store: SqlStore) {
    let tenant = new_tenant(&store, "presence").await;
    let model = new_model(&store, &tenant, "m", DeviceType::Light, false).await;
    let project = new_project(&store, &tenant, "p").await;
    let (a, b) = (
        new_device(&store, &tenant, "a", &project, &model).await,
        new_device(&store, &tenant, "b", &project, &model).await,
    );
    assert_eq!(store.connection(&a.id).await.unwrap(), None);
    let connected = |value| DeviceQuery {
        connected: Some(value),
        ..DeviceQuery::default()
    };

    store
        .session_started(&tenant, &session(&a, 1_000, "tcp"), Default::default())
        .await
        .unwrap();
    let on = store.connection(&a.id).await.unwrap().unwrap();
    assert!(on.connected);
    assert_eq!(
        (on.connected_time, on.disconnected_time, on.last_seen_time),
        (Some(1_000), None, Some(1_000))
    );
    assert_eq!(
        (
            on.client_address.as_deref(),
            on.protocol.as_deref(),
            on.transport.as_deref()
        ),
        (Some("10.0.0.7:50000"), Some("MQTT 5"), Some("tcp"))
    );
    assert_eq!(device_names(&store, &tenant, connected(true)).await, names(&["a"]));
    assert_eq!(device_names(&store, &tenant, connected(false)).await, names(&["b"]));

    // Last seen moves forward only.
    store
        .record_last_seen(&[(a.id.clone(), 1_500), (b.id.clone(), 1_500)])
        .await
        .unwrap();
    store.record_last_seen(&[(a.id.clone(), 1_200)]).await.unwrap();
    assert_eq!(
        store.connection(&a.id).await.unwrap().unwrap().last_seen_time,
        Some(1_500)
    );
    assert_eq!(
        store.connection(&b.id).await.unwrap(),
        None,
        "no row for a device never connected"
    );

    // A newer session takes over; the older one's end, arriving late, changes nothing, nor
    // does the older one's start.
    store
        .session_started(&tenant, &session(&a, 2_000, "ws"), Default::default())
        .await
        .unwrap();
    assert!(
        !store
            .session_ended(&end(&a, 1_000, 2_001, Some(1_900)), Default::default())
            .await
            .unwrap()
    );
    store
        .session_started(&tenant, &session(&a, 1_000, "tcp"), Default::default())
        .await
        .unwrap();
    let taken_over = store.connection(&a.id).await.unwrap().unwrap();
    assert!(taken_over.connected);
    assert_eq!(
        (taken_over.connected_time, taken_over.transport.as_deref()),
        (Some(2_000), Some("ws"))
    );

    assert!(
        store
            .session_ended(&end(&a, 2_000, 3_000, Some(2_900)), Default::default())
            .await
            .unwrap()
    );
    let off = store.connection(&a.id).await.unwrap().unwrap();
    assert!(!off.connected);
    assert_eq!(
        (off.connected_time, off.disconnected_time, off.last_seen_time),
        (Some(2_000), Some(3_000), Some(2_900))
    );
    assert_eq!(device_names(&store, &tenant, connected(true)).await, names(&[]));

    // A session the process did not see end (a crash): ended at its last-seen time at start.
    store
        .session_started(&tenant, &session(&b, 4_000, "tls"), Default::default())
        .await
        .unwrap();
    // A flush of a large fleet, the known device last: devices without a row are skipped.
    let mut fleet: Vec<_> = (0..1_200)
        .map(|_| (gantry_core::ids::DeviceId::generate(), 4_600))
        .collect();
    fleet.push((b.id.clone(), 4_700));
    store.record_last_seen(&fleet).await.unwrap();
    assert_eq!(store.end_all_sessions().await.unwrap(), 1);
    let after = store.connection(&b.id).await.unwrap().unwrap();
    assert!(!after.connected);
    assert_eq!(
        (after.connected_time, after.disconnected_time, after.last_seen_time),
        (Some(4_000), Some(4_700), Some(4_700))
    );
    assert_eq!(store.end_all_sessions().await.unwrap(), 0);
    // The next session keeps the last one's end until its own.
    store
        .session_started(&tenant, &session(&b, 5_000, "tls"), Default::default())
        .await
        .unwrap();
    let back = store.connection(&b.id).await.unwrap().unwrap();
    assert_eq!((back.connected, back.disconnected_time), (true, Some(4_700)));
}

// ---- webhooks ---------------------------------------------------------------------------------

fn webhook_record(project: &Project, types: Vec<gantry_core::stream::StreamType>) -> gantry_core::webhook::Webhook {
    gantry_core::webhook::Webhook {
        id: gantry_core::ids::WebhookId::generate(),
        tenant_id: project.record.tenant_id.clone(),
        project_id: project.id.clone(),
        url: "https://hooks.example.com/in".to_owned(),
        types,
        description: Some("ops".to_owned()),
        enabled: true,
        secret: "0123456789abcdef".to_owned(),
        created_by: "admin".to_owned(),
        created_time: 1_000,
        updated_by: None,
        updated_time: None,
        slot: 0,
    }
}

/// With several nodes on one PostgreSQL database, one node at a time holds a webhook's lease:
/// it renews it, another takes it only once it ended, and a webhook's lease says nothing of
/// another's. SQLite, opened by one process at a time, grants every lease.
async fn a_webhook_lease_has_one_holder(store: SqlStore) {
    use gantry_core::stream::StreamType;
    let tenant = new_tenant(&store, "lease").await;
    let project = new_project(&store, &tenant, "p").await;
    let hook = webhook_record(&project, vec![StreamType::Telemetry]);
    let other = webhook_record(&project, vec![StreamType::Telemetry]);
    store.insert_webhook(&hook, 20).await.unwrap();
    store.insert_webhook(&other, 20).await.unwrap();
    let lease = |owner: &'static str, webhook: &gantry_core::ids::WebhookId, now: i64| {
        let (store, webhook) = (store.clone(), webhook.clone());
        async move { store.lease_webhook(&webhook, owner, now, now + 30_000).await.unwrap() }
    };
    assert!(lease("a", &hook.id, 1_000).await, "a free lease is taken");
    assert!(lease("a", &hook.id, 20_000).await, "its holder renews it");
    let one_process = store.backend() == "sqlite";
    assert_eq!(
        lease("b", &hook.id, 40_000).await,
        one_process,
        "held by a until 50,000"
    );
    assert!(lease("b", &other.id, 40_000).await, "another webhook's lease is free");
    assert!(lease("b", &hook.id, 50_000).await, "taken once it ended");
    assert_eq!(lease("a", &hook.id, 50_001).await, one_process, "now b's");
}

async fn webhooks_are_managed_per_tenant(store: SqlStore) {
    use gantry_core::stream::StreamType;
    let (t1, t2) = (new_tenant(&store, "one").await, new_tenant(&store, "two").await);
    let p1 = new_project(&store, &t1, "p").await;
    let p2 = new_project(&store, &t2, "p").await;
    let mut hook = webhook_record(&p1, vec![StreamType::Telemetry, StreamType::EventLog]);
    store.insert_webhook(&hook, 20).await.unwrap();
    let mut other = webhook_record(&p2, vec![StreamType::Connection]);
    other.created_time = 2_000;
    store.insert_webhook(&other, 20).await.unwrap();
    assert_eq!(store.get_webhook(&t1, &hook.id).await.unwrap(), Some(hook.clone()));
    assert_eq!(
        store.get_webhook(&t2, &hook.id).await.unwrap(),
        None,
        "another tenant's"
    );
    let listed = store.list_webhooks(&t1, &p1.id, all()).await.unwrap();
    assert_eq!((listed.total, listed.items), (1, vec![hook.clone()]));
    assert_eq!(store.list_webhooks(&t2, &p1.id, all()).await.unwrap().total, 0);

    hook.url = "https://hooks.example.com/other".to_owned();
    hook.types = vec![StreamType::Shadow];
    hook.enabled = false;
    hook.secret = "fedcba9876543210".to_owned();
    hook.description = None;
    hook.updated_by = Some("admin".to_owned());
    hook.updated_time = Some(3_000);
    store.update_webhook(&hook).await.unwrap();
    assert_eq!(store.get_webhook(&t1, &hook.id).await.unwrap(), Some(hook.clone()));
    let mut stranger = hook.clone();
    stranger.tenant_id = t2.clone();
    assert_not_found(store.update_webhook(&stranger).await);
    let enabled: Vec<_> = store
        .enabled_webhooks()
        .await
        .unwrap()
        .into_iter()
        .map(|w| w.id)
        .collect();
    assert!(
        enabled.contains(&other.id) && !enabled.contains(&hook.id),
        "{enabled:?}"
    );

    assert_not_found(store.delete_webhook(&t2, &hook.id).await);
    store.delete_webhook(&t1, &hook.id).await.unwrap();
    assert_eq!(store.get_webhook(&t1, &hook.id).await.unwrap(), None);
    assert_not_found(store.delete_webhook(&t1, &hook.id).await);
}

/// Telemetry (committed with its events, where the engine keeps it) and event logs and
/// connection changes (with their writes) wait for the webhook in commit order, and leave the
/// outbox when a delivery holds them; deleting the webhook drops what waits and its deliveries.
async fn webhook_events_wait_in_order_until_a_delivery_holds_them(store: SqlStore) {
    use gantry_core::enums::{Classification, DeliveryStatus, EventLogStatus};
    use gantry_core::ids::DeliveryId;
    use gantry_core::stream::StreamType;
    use gantry_core::webhook::{Audience, Delivery, WebhookEvent};
    let tenant = new_tenant(&store, "hooks").await;
    let project = new_project(&store, &tenant, "p").await;
    let model = new_model(&store, &tenant, "m", DeviceType::Crane, false).await;
    let device = new_device(&store, &tenant, "d", &project, &model).await;
    let hook = webhook_record(&project, StreamType::ALL.to_vec());
    let quiet = webhook_record(&project, vec![StreamType::Telemetry]);
    store.insert_webhook(&hook, 20).await.unwrap();
    store.insert_webhook(&quiet, 20).await.unwrap();
    // As the store keeps them: each with its slot.
    let hook = store.get_webhook(&tenant, &hook.id).await.unwrap().unwrap();
    let quiet = store.get_webhook(&tenant, &quiet.id).await.unwrap().unwrap();
    assert_ne!(hook.slot, quiet.slot);

    let events: Vec<DeviceEvent> = (0..3)
        .map(|i| event_at(&device, EventId::generate(), "temp", json!(i), i))
        .collect();
    let outbox: Vec<WebhookEvent> = events
        .iter()
        .map(|e| WebhookEvent {
            id: WebhookEvent::new_id(),
            project_id: project.id.clone(),
            // One row for both webhooks that want telemetry.
            pending: Audience::default().with(hook.slot).with(quiet.slot),
            device_id: device.id.clone(),
            kind: StreamType::Telemetry,
            time: 10,
            data: serde_json::to_string(e).unwrap(),
        })
        .collect();
    store.commit_events(&events, &outbox).await.unwrap().await.unwrap();
    let log = gantry_core::event_log::EventLog {
        id: "log-1".to_owned(),
        tenant_id: tenant.clone(),
        project_id: project.id.clone(),
        status: EventLogStatus::Processing,
        classification: Classification::DeviceControll,
        device_id: device.id.clone(),
        device_name: device.device_name.clone(),
        event_data: json!({"meta": {"id": "c-1"}}),
        context_id: None,
        responses: Vec::new(),
        event_id: "c-1".to_owned(),
        created_by: "admin".to_owned(),
        created_time: 20,
        updated_by: None,
        updated_time: None,
        deleted: false,
        reply_to: None,
    };
    store
        .insert_event_log(&log, Some(i64::MAX), Audience::default().with(hook.slot))
        .await
        .unwrap();
    store
        .session_started(
            &tenant,
            &session(&device, 1_000, "tcp"),
            Audience::default().with(hook.slot),
        )
        .await
        .unwrap();
    // Written without webhooks: nothing waits.
    store
        .record_ack(
            &tenant,
            &device.id,
            "c-1",
            &json!({"ok": true}),
            30,
            Audience::default(),
        )
        .await
        .unwrap();

    let waiting = store.waiting_events(&hook, 100).await.unwrap();
    let telemetry: Vec<&str> = waiting
        .iter()
        .filter(|(_, e)| e.kind == StreamType::Telemetry)
        .map(|(_, e)| e.id.as_str())
        .collect();
    assert_eq!(telemetry, outbox.iter().map(|e| e.id.as_str()).collect::<Vec<_>>());
    let kinds: BTreeSet<&str> = waiting.iter().map(|(_, e)| e.kind.as_str()).collect();
    assert_eq!(kinds, BTreeSet::from(["telemetry", "eventLog", "connection"]));
    assert_eq!(waiting.len(), 5);
    let logged = waiting.iter().find(|(_, e)| e.kind == StreamType::EventLog).unwrap();
    let data: serde_json::Value = serde_json::from_str(&logged.1.data).unwrap();
    assert_eq!(
        (data["id"].clone(), data["status"].clone()),
        (json!("log-1"), json!("processing"))
    );
    let connection = waiting.iter().find(|(_, e)| e.kind == StreamType::Connection).unwrap();
    let data: serde_json::Value = serde_json::from_str(&connection.1.data).unwrap();
    assert_eq!(
        (data["connected"].clone(), data["connectedTime"].clone()),
        (json!(true), json!(1_000))
    );
    let telemetry_of = |waiting: &[(gantry_core::webhook::OutboxKey, WebhookEvent)]| -> Vec<String> {
        waiting.iter().map(|(_, e)| e.id.clone()).collect()
    };
    let quiet_waits = store.waiting_events(&quiet, 100).await.unwrap();
    assert_eq!(telemetry_of(&quiet_waits), telemetry, "the same rows wait for both");
    // Another project's webhook reads none of them.
    let elsewhere = new_project(&store, &tenant, "elsewhere").await;
    let stranger_hook = webhook_record(&elsewhere, StreamType::ALL.to_vec());
    store.insert_webhook(&stranger_hook, 20).await.unwrap();
    let stranger_hook = store.get_webhook(&tenant, &stranger_hook.id).await.unwrap().unwrap();
    assert_eq!(stranger_hook.slot, hook.slot, "slots are per project");
    assert!(store.waiting_events(&stranger_hook, 100).await.unwrap().is_empty());

    // A delivery of the first two: the rest still wait, in order.
    let delivery = |id: DeliveryId, created: i64, count: u32| Delivery {
        id,
        webhook_id: hook.id.clone(),
        tenant_id: tenant.clone(),
        status: DeliveryStatus::Pending,
        event_count: count,
        attempts: 0,
        last_http_status: None,
        last_error: None,
        created_time: created,
        first_attempt_time: None,
        last_attempt_time: None,
        next_attempt_time: Some(created),
        finished_time: None,
        body: "{}".to_owned(),
    };
    let first = delivery(DeliveryId::generate(), 100, 2);
    let keys: Vec<_> = waiting.iter().take(2).map(|(k, _)| *k).collect();
    store.insert_delivery(&first, &keys).await.unwrap();
    let rest = store.waiting_events(&hook, 100).await.unwrap();
    assert_eq!(
        rest.iter().map(|(_, e)| e.id.clone()).collect::<Vec<_>>(),
        waiting[2..].iter().map(|(_, e)| e.id.clone()).collect::<Vec<_>>()
    );
    assert_eq!(store.pending_delivery(&hook.id).await.unwrap(), Some(first.clone()));
    assert!(store.count_pending_deliveries().await.unwrap() >= 1);

    let mut done = first.clone();
    done.status = DeliveryStatus::Delivered;
    done.attempts = 3;
    done.last_http_status = Some(204);
    done.last_error = None;
    done.first_attempt_time = Some(100);
    done.last_attempt_time = Some(400);
    done.next_attempt_time = None;
    done.finished_time = Some(401);
    store.update_delivery(&done).await.unwrap();
    assert_eq!(store.pending_delivery(&hook.id).await.unwrap(), None);
    let second = delivery(DeliveryId::generate(), 500, 3);
    let keys: Vec<_> = rest.iter().map(|(k, _)| *k).collect();
    store.insert_delivery(&second, &keys).await.unwrap();
    // Another node taking the same events stores nothing.
    let again = delivery(DeliveryId::generate(), 600, 3);
    assert!(matches!(
        store.insert_delivery(&again, &keys).await,
        Err(Error::Conflict(_))
    ));
    assert!(store.waiting_events(&hook, 100).await.unwrap().is_empty());
    // Taken by one webhook, an event still waits for the other, until it takes it too.
    let still = store.waiting_events(&quiet, 100).await.unwrap();
    assert_eq!(telemetry_of(&still), telemetry_of(&quiet_waits));
    let quiet_delivery = Delivery {
        webhook_id: quiet.id.clone(),
        ..delivery(DeliveryId::generate(), 700, 3)
    };
    let keys: Vec<_> = still.iter().map(|(k, _)| *k).collect();
    store.insert_delivery(&quiet_delivery, &keys).await.unwrap();
    assert!(store.waiting_events(&quiet, 100).await.unwrap().is_empty());
    let listed = store.list_deliveries(&tenant, &hook.id, all()).await.unwrap();
    assert_eq!((listed.total, listed.items), (2, vec![second.clone(), done]));
    let stranger = new_tenant(&store, "stranger").await;
    assert_eq!(
        store.list_deliveries(&stranger, &hook.id, all()).await.unwrap().total,
        0
    );

    // Deleting the webhook drops its deliveries and whatever still waits for it.
    let late = [event_at(&device, EventId::generate(), "temp", json!(9), 9)];
    store.commit_events(&late, &outbox[..1]).await.unwrap().await.unwrap();
    assert_eq!(store.waiting_events(&hook, 100).await.unwrap().len(), 1);
    store.delete_webhook(&tenant, &hook.id).await.unwrap();
    assert!(store.waiting_events(&hook, 100).await.unwrap().is_empty());
    assert_eq!(
        store.waiting_events(&quiet, 100).await.unwrap().len(),
        1,
        "what waits for the other webhook stays"
    );
    assert_eq!(store.list_deliveries(&tenant, &hook.id, all()).await.unwrap().total, 0);
    assert_eq!(store.pending_delivery(&hook.id).await.unwrap(), None);
}

// ---- series ----------------------------------------------------------------------------------

/// The buckets of `query` computed from `events` (the raw events a store holds), as a series
/// must answer them: first and last by the clock's time, then by id.
fn series_from_raw(events: &[DeviceEvent], query: &SeriesQuery) -> Vec<Bucket> {
    let time = |e: &DeviceEvent| match query.clock {
        TimeField::Device => e.device_timestamp,
        TimeField::Ingress => e.ingress_time_stamp,
    };
    let mut buckets: BTreeMap<i64, Vec<&DeviceEvent>> = BTreeMap::new();
    for e in events {
        let t = time(e);
        if e.device_id == query.device
            && e.attribute_code == query.attribute_code
            && (query.start..=query.end).contains(&t)
        {
            buckets.entry(query.bucket_of(t)).or_default().push(e);
        }
    }
    buckets
        .into_iter()
        .map(|(start, mut held)| {
            held.sort_by(|a, b| (time(a), a.id.as_str()).cmp(&(time(b), b.id.as_str())));
            let numbers: Vec<f64> = held
                .iter()
                .filter(|e| matches!(e.attribute_type, DataType::Integer | DataType::Float))
                .map(|e| e.attribute_data.as_f64().unwrap())
                .collect();
            let fold = |pick: fn(f64, f64) -> f64| numbers.iter().copied().reduce(pick);
            Bucket {
                start,
                events: held.len() as u64,
                numbers: numbers.len() as u64,
                sum: (!numbers.is_empty()).then(|| numbers.iter().sum()),
                min: fold(f64::min),
                max: fold(f64::max),
                first: query.first_last.then(|| held[0].attribute_data.clone()),
                last: query.first_last.then(|| held[held.len() - 1].attribute_data.clone()),
            }
        })
        .collect()
}

/// Asserts that every query's series equals the one computed from `events`, exactly but for sums
/// (and so averages), whose last bits depend on the order of addition; returns how many points
/// were compared.
async fn assert_series_match(store: &SqlStore, queries: &[SeriesQuery], events: &[DeviceEvent], when: &str) -> usize {
    let mut points = 0;
    for query in queries {
        let what = format!(
            "{when}: {:?} {} {}..={} {} {:+}",
            query.clock,
            query.attribute_code,
            query.start,
            query.end,
            query.interval.as_str(),
            query.offset_ms
        );
        let expected = series_from_raw(events, query);
        let got = store.series(query).await.unwrap();
        let starts = |b: &[Bucket]| b.iter().map(|b| b.start).collect::<Vec<_>>();
        assert_eq!(starts(&got), starts(&expected), "{what}");
        for (got, expected) in got.iter().zip(&expected) {
            let what = format!("{what}, bucket {}", got.start);
            let close = |a: Option<f64>, b: Option<f64>| match (a, b) {
                (Some(a), Some(b)) => (a - b).abs() <= 1e-9 * b.abs().max(1.0),
                (a, b) => a == b,
            };
            assert!(
                close(got.sum, expected.sum),
                "{what}: sum {:?} {:?}",
                got.sum,
                expected.sum
            );
            assert!(close(got.avg(), expected.avg()), "{what}: avg");
            let exact = |b: &Bucket| (b.events, b.numbers, b.min, b.max, b.first.clone(), b.last.clone());
            assert_eq!(exact(got), exact(expected), "{what}");
            points += 1;
        }
    }
    points
}

/// Every aggregate of the series a store answers equals the one computed from the raw events:
/// exactly, but for sums (and so averages), whose last bits depend on the order of addition.
/// Events come late (older device times after newer ones), some on minute and hour edges and
/// before 1970, others are deleted by id and by retention, and windows start and end off the
/// edges, in zones of whole hours and of half hours, by device and by arrival time. On SQLite
/// the series are read with events staged, moved, and both.
async fn series_match_the_raw_events(store: SqlStore) {
    let tenant = new_tenant(&store, "series").await;
    let project = new_project(&store, &tenant, "p").await;
    let model = new_model(&store, &tenant, "m", DeviceType::Crane, false).await;
    let device = new_device(&store, &tenant, "d", &project, &model).await;
    let other = new_device(&store, &tenant, "e", &project, &model).await;
    let (minute, hour, day) = (60_000_i64, 3_600_000_i64, 86_400_000_i64);
    let now = chrono_now();
    let mut seed = 0x9e37_79b9_7f4a_7c15_u64;
    let mut next = move |below: i64| {
        seed = seed
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        ((seed >> 33) % below as u64) as i64
    };
    // Over three days from a day before 1970; arrival times over a day of their own.
    let mut events = Vec::new();
    for i in 0..2_400 {
        let device_ts = match i % 6 {
            0 => (next(72) - 24) * hour,
            1 => (next(72 * 60) - 24 * 60) * minute - 1,
            2 if i > 0 => events.last().map_or(0, |e: &DeviceEvent| e.device_timestamp),
            _ => next(3 * day) - day,
        };
        let (code, data_type, value) = match next(4) {
            0 => (
                "temp",
                DataType::Float,
                json!((next(2_000_000) - 1_000_000) as f64 / 997.0),
            ),
            1 => ("temp", DataType::Float, json!(next(100) as f64 / 10.0)),
            2 => ("load", DataType::Integer, json!(next(1_000) - 500)),
            _ if i % 2 == 0 => ("temp", DataType::String, json!(format!("s{i}"))),
            _ => ("state", DataType::Boolean, json!(i % 3 == 0)),
        };
        let id = if i % 9 == 0 {
            EventId::lower_bound_at(now - 10 * day + i)
                .as_str()
                .replace("-8000-000000000000", &format!("-8000-{i:012}"))
        } else {
            EventId::generate().as_str().to_owned()
        };
        let mut event = event_at(&device, EventId::from_string(id), code, value, device_ts);
        event.attribute_type = data_type;
        event.ingress_time_stamp = 1_000 * day + next(day);
        events.push(event);
    }
    let (first_part, late_part) = events.split_at(1_700);
    let (first_part, late_part) = (first_part.to_vec(), late_part.to_vec());

    let all_aggregates = Aggregates::parse("avg,min,max,sum,count,first,last").unwrap();
    let mut queries = Vec::new();
    let intervals = [
        Interval::Minute,
        Interval::FiveMinutes,
        Interval::FifteenMinutes,
        Interval::Hour,
        Interval::SixHours,
        Interval::Day,
    ];
    let offsets = [0, 2 * hour, -hour, 5 * hour + 30 * minute, -(9 * hour + 45 * minute)];
    let span = (-day - 1, 2 * day + 7);
    for interval in intervals {
        for offset in offsets {
            // the whole span, one aligned to hours, one off every edge
            for window in [span, (-2 * hour, 20 * hour - 1), (-hour - 12_345, 30 * hour + 777)] {
                queries.push((TimeField::Device, "temp", window, interval, offset));
            }
        }
    }
    for _ in 0..120 {
        let start = next(3 * day + 2 * hour) - day - hour;
        let length = [next(minute), next(hour), next(7 * hour), next(3 * day)][next(4) as usize];
        let interval = intervals[next(6) as usize];
        let offset = offsets[next(5) as usize];
        let code = ["temp", "load", "state"][next(3) as usize];
        let clock = if next(5) == 0 {
            TimeField::Ingress
        } else {
            TimeField::Device
        };
        let shift = if clock == TimeField::Ingress {
            1_000 * day + day
        } else {
            0
        };
        queries.push((clock, code, (start + shift, start + shift + length), interval, offset));
    }
    let queries: Vec<SeriesQuery> = queries
        .into_iter()
        .enumerate()
        .filter_map(|(i, (clock, code, window, interval, offset))| {
            let aggregates = if i % 4 == 3 {
                Aggregates::default()
            } else {
                all_aggregates.clone()
            };
            SeriesQuery::new(
                device.id.clone(),
                code.to_owned(),
                clock,
                window,
                interval,
                offset,
                &aggregates,
            )
            .ok()
        })
        .collect();
    assert!(queries.len() > 200, "{} queries within the bucket limit", queries.len());

    let check = |events: Vec<DeviceEvent>, when: &'static str| {
        let (store, queries) = (store.clone(), queries.clone());
        async move {
            let points = assert_series_match(&store, &queries, &events, when).await;
            assert!(points > 2_000, "{when}: {points} points compared");
        }
    };

    append_beside(&store, &first_part, &other, 50).await;
    let mut held = first_part.clone();
    check(held.clone(), "as committed").await;
    // Deletes before the move (SQLite) or the fold (PostgreSQL).
    for _ in 0..20 {
        let id = held[next(held.len() as i64) as usize].id.clone();
        assert!(store.delete_event(&tenant, &id).await.unwrap());
        held.retain(|e| e.id != id);
    }
    check(held.clone(), "deleted as committed").await;
    store.merge_recent().await.unwrap();
    check(held.clone(), "moved").await;

    // Deletes by id take away some buckets' first, last, least and greatest; retention the events
    // stored long ago.
    let mut gone = Vec::new();
    for _ in 0..150 {
        gone.push(held[next(held.len() as i64) as usize].id.clone());
    }
    for id in &gone {
        let existed = held.iter().any(|e| &e.id == id);
        assert_eq!(store.delete_event(&tenant, id).await.unwrap(), existed);
        held.retain(|e| &e.id != id);
    }
    let cutoff = EventId::lower_bound_at(now - 5 * day);
    let old = held.iter().filter(|e| e.id.as_str() < cutoff.as_str()).count();
    assert!(old > 100, "{old} old events");
    let mut deleted = 0;
    while let n @ 1.. = store.delete_events_before(now - 5 * day, 70).await.unwrap() {
        deleted += n;
    }
    assert_eq!(deleted, old as u64);
    held.retain(|e| e.id.as_str() >= cutoff.as_str());
    check(held.clone(), "after deletes").await;

    // Late events land in minutes and hours kept already; some are deleted while staged.
    append_beside(&store, &late_part, &other, 40).await;
    held.extend(late_part.iter().cloned());
    check(held.clone(), "late events").await;
    for e in late_part.iter().step_by(17) {
        assert!(store.delete_event(&tenant, &e.id).await.unwrap());
        held.retain(|h| h.id != e.id);
    }
    store.merge_recent().await.unwrap();
    check(held.clone(), "late events, moved").await;
}

/// Series read the same while the rollups are folded (PostgreSQL's folds, SQLite's moves) beside
/// arriving batches, some of them late (arrived before the events folded already, with old device
/// times): after each round of concurrent appends and folds, every series equals the raw events.
async fn series_hold_while_rollups_fold(store: SqlStore) {
    let tenant = new_tenant(&store, "folds").await;
    let project = new_project(&store, &tenant, "p").await;
    let model = new_model(&store, &tenant, "m", DeviceType::Crane, false).await;
    let device = new_device(&store, &tenant, "d", &project, &model).await;
    let (minute, hour) = (60_000_i64, 3_600_000_i64);
    // Arriving ahead of the clock, where no background fold reaches: only `merge_recent` folds
    // them.
    let base = (chrono_now() + 24 * hour) / hour * hour;
    let mut seed = 0x2545_f491_4f6c_dd1d_u64;
    let mut next = move |below: i64| {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        (seed % below as u64) as i64
    };
    let aggregates = Aggregates::parse("avg,min,max,sum,count,first,last").unwrap();
    let queries: Vec<SeriesQuery> = [Interval::Minute, Interval::Hour, Interval::SixHours, Interval::Day]
        .into_iter()
        .flat_map(|interval| [0, 5 * hour + 30 * minute].map(move |offset| (interval, offset)))
        .map(|(interval, offset)| {
            let window = (base - 3 * hour - 1, base + 5 * hour + 12_345);
            SeriesQuery::new(
                device.id.clone(),
                "temp".to_owned(),
                TimeField::Device,
                window,
                interval,
                offset,
                &aggregates,
            )
            .unwrap()
        })
        .collect();
    let mut held = Vec::new();
    for round in 0..12 {
        let now = base + round * 25 * minute;
        // The two writers' times interleave and move on a minute every four events, so that
        // folds keep moving the mark past minutes a writer is still writing into; every tenth
        // event arrived long ago (late) with an old device time.
        let batch: Vec<DeviceEvent> = (0..200)
            .map(|i| {
                let (part, n) = (i / 100, i % 100);
                let ts = if i % 10 == 0 {
                    now - next(2 * hour)
                } else {
                    now + (n * 2 + part) * 7_500 + next(7_500)
                };
                let mut e = event_at(
                    &device,
                    EventId::generate(),
                    "temp",
                    json!(next(10_000) as f64 / 8.0),
                    ts,
                );
                if i % 10 != 0 {
                    e.ingress_time_stamp = ts;
                }
                e
            })
            .collect();
        // Two writers of small batches, and folds one after the other until they are done.
        let appending: Vec<_> = batch
            .chunks(100)
            .map(|part| {
                let (store, part) = (store.clone(), part.to_vec());
                tokio::spawn(async move {
                    for chunk in part.chunks(4) {
                        store.append_events(chunk).await.unwrap();
                    }
                })
            })
            .collect();
        let done = Arc::new(AtomicBool::new(false));
        let folding = {
            let (store, done) = (store.clone(), done.clone());
            tokio::spawn(async move {
                while !done.load(Ordering::Relaxed) {
                    store.merge_recent().await.unwrap();
                }
            })
        };
        for task in appending {
            task.await.unwrap();
        }
        done.store(true, Ordering::Relaxed);
        folding.await.unwrap();
        held.extend(batch);
        let points = assert_series_match(&store, &queries, &held, &format!("round {round}")).await;
        assert!(points >= 8, "round {round}: {points} points compared");
    }
    // Deletes recompute folded hours and unfolded minutes alike.
    for _ in 0..30 {
        let id = held[next(held.len() as i64) as usize].id.clone();
        assert!(store.delete_event(&tenant, &id).await.unwrap());
        held.retain(|e| e.id != id);
    }
    assert_series_match(&store, &queries, &held, "deleted").await;
    store.merge_recent().await.unwrap();
    let points = assert_series_match(&store, &queries, &held, "folded").await;
    assert!(points > 100, "folded: {points} points compared");
}
