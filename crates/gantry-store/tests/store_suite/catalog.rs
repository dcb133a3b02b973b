//! Models, projects and devices: `ModelStore`, `ProjectStore`, `DeviceStore`.

use super::*;

pub(crate) async fn names_are_unique_per_tenant(store: SqlStore) {
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

pub(crate) async fn concurrent_creates_of_one_name(store: SqlStore) {
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

pub(crate) async fn concurrent_writes_all_succeed(store: SqlStore) {
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

pub(crate) async fn pages_are_stable(store: SqlStore) {
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

pub(crate) async fn project_listing_filters(store: SqlStore) {
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
            only: Some(vec![made[2].id.clone()])
        })
        .await,
        ["p2"]
    );
    assert_eq!(
        listed(ProjectQuery {
            status: Some(ProjectStatus::Closed),
            only: Some(vec![made[2].id.clone()])
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

pub(crate) async fn device_filters(store: SqlStore) {
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

pub(crate) async fn device_sorts(store: SqlStore) {
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

pub(crate) async fn project_models_are_distinct(store: SqlStore) {
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

pub(crate) async fn deletes_conflict_while_in_use(store: SqlStore) {
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

pub(crate) fn assert_missing(result: gantry_core::Result<()>, kind: &str, id: &str) {
    match result {
        Err(Error::NotFound { kind: k, id: i }) if k == kind && i == id => {}
        other => panic!("expected NotFound({kind} {id}), got {other:?}"),
    }
}

/// The service looks the model and project up before it inserts a device, but a model or
/// project deleted since (through another node, or behind a cached read) must still stop it.
pub(crate) async fn devices_need_live_parents(store: SqlStore) {
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
pub(crate) enum Parent {
    Model,
    Project,
}

/// A tenant with a model and a project, one of which a race test deletes.
pub(crate) struct Race {
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
pub(crate) async fn until_waiting(store: &SqlStore, sessions: i64, done: impl Fn() -> bool) {
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
pub(crate) async fn device_inserts_and_parent_deletes_serialize(store: SqlStore) {
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

pub(crate) async fn records_round_trip_with_derived_fields(store: SqlStore) {
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

/// A model's live devices are counted, and only the metadata that is not empty is read, of that
/// tenant and model alone.
pub(crate) async fn a_models_device_metadata_is_read_alone(store: SqlStore) {
    let (t, other) = (new_tenant(&store, "t").await, new_tenant(&store, "o").await);
    let crane = new_model(&store, &t, "crane", DeviceType::Crane, false).await;
    let light = new_model(&store, &t, "light", DeviceType::Light, false).await;
    let p = new_project(&store, &t, "p").await;
    let mut bare = device_record(&t, "bare", &p, &crane, 1_000);
    bare.metadata = JsonMap::new();
    insert(&store, &bare).await;
    let rated = new_device(&store, &t, "rated", &p, &crane).await;
    let gone = new_device(&store, &t, "gone", &p, &crane).await;
    store.delete_device(&t, &gone.id, "admin", 2_000).await.unwrap();
    new_device(&store, &t, "lamp", &p, &light).await;
    let (devices, metadata) = store.model_device_metadata(&t, &crane.id).await.unwrap();
    assert_eq!(devices, 2, "the deleted device is not counted");
    assert_eq!(metadata, vec![rated.metadata.clone()], "the empty map is not read");
    assert_eq!(
        store.model_device_metadata(&other, &crane.id).await.unwrap(),
        (0, Vec::new()),
        "another tenant's"
    );
}
