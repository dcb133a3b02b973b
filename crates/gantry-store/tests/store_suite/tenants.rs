//! Tenants, their administrators' tokens, project and device tokens, rotation: `TenantStore` and
//! the token lookups every store serves.

use super::*;

pub(crate) async fn placeholders_bind_by_number(store: SqlStore) {
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

pub(crate) async fn tenants_and_administrator_tokens(store: SqlStore) {
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

pub(crate) async fn tenants_are_listed_oldest_first(store: SqlStore) {
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

pub(crate) async fn rotated_tokens_end_after_their_grace(store: SqlStore) {
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

pub(crate) async fn project_and_device_tokens(store: SqlStore) {
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

pub(crate) async fn tenants_are_isolated(store: SqlStore) {
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
