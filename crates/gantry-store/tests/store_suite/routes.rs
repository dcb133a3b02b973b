//! Routes: `RouteStore`.

use super::*;

pub(crate) async fn routes_are_listed_and_revoked(store: SqlStore) {
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
