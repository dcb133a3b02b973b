//! Alarm rules, alarms, their history and the rules' state: `AlarmStore`.

use gantry_core::alarm::{
    Alarm, AlarmHistoryEntry, AlarmQuery, AlarmSort, MessageKey, Raiser, Subject, Trigger, fold, step,
};
use gantry_core::alarm_rule::{AlarmRule, AlarmRuleFields, ConditionSpec};
use gantry_core::enums::{AlarmStatus, AlarmTransition, Severity};
use gantry_core::ids::AlarmRuleId;
use gantry_core::store::{AlarmPlan, AlarmStore};
use gantry_core::webhook::Audience;

use super::*;

fn rule_on(model: &DeviceModel, over: f64) -> AlarmRule {
    let fields = AlarmRuleFields {
        name: Some("hot".into()),
        attribute_code: Some("temp".into()),
        severity: Some("MAJOR".into()),
        condition: Some(ConditionSpec {
            op: Some(">".into()),
            value: Some(json!(over)),
            ..ConditionSpec::default()
        }),
        ..AlarmRuleFields::default()
    };
    AlarmRule::parse(
        AlarmRuleId::generate(),
        model,
        fields,
        RecordMeta::created(model.record.tenant_id.clone(), "admin", 1_000),
    )
    .unwrap()
}

/// Evaluates one reading of `raiser` on `device` through the store, as ingest does.
async fn feed(
    store: &SqlStore,
    raiser: Raiser<'_>,
    device: &Device,
    value: serde_json::Value,
    second: i64,
    message: &str,
) {
    let subject = Subject::of(device);
    let trigger = Trigger::Reading {
        value,
        device_time: second * 1000,
        arrival: second * 1000,
        message: Some(MessageKey::of_text(message)),
    };
    let run = |state: &_, open: Option<&Alarm>| step(raiser, &subject, state, open, &trigger);
    store
        .apply_alarm_step(
            &device.record.tenant_id,
            &device.id,
            &raiser.key(),
            &run,
            Audience::default(),
        )
        .await
        .unwrap();
}

fn query(project: &Project) -> AlarmQuery {
    AlarmQuery {
        project: project.id.clone(),
        device: None,
        statuses: Vec::new(),
        severities: Vec::new(),
        start: None,
        end: None,
        sort_by: AlarmSort::UpdatedTime,
        sort_order: SortOrder::Desc,
    }
}

pub(crate) async fn alarm_rules_are_kept_per_tenant(store: SqlStore) {
    let (t1, t2) = (new_tenant(&store, "one").await, new_tenant(&store, "two").await);
    let model = new_model(&store, &t1, "m", DeviceType::Crane, false).await;
    let mut rule = rule_on(&model, 20.0);
    store.insert_alarm_rule(&rule).await.unwrap();
    assert_eq!(store.get_alarm_rule(&t1, &rule.id).await.unwrap(), Some(rule.clone()));
    assert_eq!(
        store.get_alarm_rule(&t2, &rule.id).await.unwrap(),
        None,
        "another tenant's"
    );
    rule.enabled = false;
    rule.no_data_seconds = Some(60);
    rule.record.updated_by = Some("admin".into());
    rule.record.updated_time = Some(2_000);
    store.update_alarm_rule(&rule).await.unwrap();
    assert_eq!(
        store.model_alarm_rules(&t1, &model.id).await.unwrap(),
        vec![rule.clone()]
    );
    assert!(store.model_alarm_rules(&t2, &model.id).await.unwrap().is_empty());
    assert!(store.no_data_rules().await.unwrap().is_empty(), "disabled");
    assert_not_found(store.delete_alarm_rule(&t2, &rule.id, "admin", 3_000).await);
    store.delete_alarm_rule(&t1, &rule.id, "admin", 3_000).await.unwrap();
    assert_eq!(store.get_alarm_rule(&t1, &rule.id).await.unwrap(), None);
    assert_not_found(store.update_alarm_rule(&rule).await);
}

/// Many writers evaluating one device's readings at once raise one alarm, which counts every
/// reading; a message evaluated twice counts once.
pub(crate) async fn concurrent_readings_raise_one_alarm(store: SqlStore) {
    let tenant = new_tenant(&store, "t").await;
    let model = new_model(&store, &tenant, "m", DeviceType::Crane, false).await;
    let project = new_project(&store, &tenant, "p").await;
    let device = new_device(&store, &tenant, "d", &project, &model).await;
    let rule = rule_on(&model, 20.0);
    store.insert_alarm_rule(&rule).await.unwrap();
    let mut tasks = tokio::task::JoinSet::new();
    for i in 0..24 {
        let (store, rule, device) = (store.clone(), rule.clone(), device.clone());
        tasks.spawn(async move {
            let message = format!("m{}", i % 12);
            feed(
                &store,
                Raiser::Rule(&rule),
                &device,
                json!(30.0 + i as f64),
                100,
                &message,
            )
            .await;
        });
    }
    while let Some(done) = tasks.join_next().await {
        done.unwrap();
    }
    let page = store.list_alarms(&tenant, &query(&project), all()).await.unwrap();
    assert_eq!(page.items.len(), 1, "one alarm: {:?}", page.items);
    let alarm = &page.items[0];
    assert_eq!(
        (alarm.count, alarm.status),
        (12, AlarmStatus::Active),
        "12 distinct messages"
    );
    let history = store.alarm_history(&tenant, &alarm.id).await.unwrap();
    assert_eq!(
        history.iter().map(|h| h.kind).collect::<Vec<_>>(),
        [AlarmTransition::Raised]
    );
}

/// The unique index holds even for a writer that did not see the open alarm: its raise counts
/// on the open one. Once that one is cleared, a new one may open.
pub(crate) async fn the_store_holds_one_open_alarm_per_key(store: SqlStore) {
    let tenant = new_tenant(&store, "t").await;
    let model = new_model(&store, &tenant, "m", DeviceType::Crane, false).await;
    let project = new_project(&store, &tenant, "p").await;
    let device = new_device(&store, &tenant, "d", &project, &model).await;
    let subject = Subject::of(&device);
    let trigger = Trigger::Reading {
        value: json!(true),
        device_time: 5_000,
        arrival: 5_000,
        message: None,
    };
    // Blind to the open alarm: each call raises anew.
    let blind = |state: &_, _: Option<&Alarm>| step(Raiser::Device("jam"), &subject, state, None, &trigger);
    let mut ids = Vec::new();
    for _ in 0..3 {
        let written = store
            .apply_alarm_step(&tenant, &device.id, "attribute:jam", &blind, Audience::default())
            .await
            .unwrap();
        ids.extend(written.into_iter().map(|w| (w.alarm.id, w.new, w.alarm.count)));
    }
    let first = ids[0].0.clone();
    assert_eq!(
        ids,
        [(first.clone(), true, 1), (first.clone(), false, 2), (first, false, 3)]
    );
    let open = store.list_alarms(&tenant, &query(&project), all()).await.unwrap();
    assert_eq!(open.items.len(), 1);
    let mut q = query(&project);
    q.statuses = vec![AlarmStatus::Active];
    let alarm = &open.items[0];
    let cleared = |a: &Alarm| -> gantry_core::Result<(Alarm, AlarmHistoryEntry)> {
        let mut a = a.clone();
        a.status = AlarmStatus::Cleared;
        a.cleared_by = Some("admin".into());
        a.cleared_time = Some(9_000);
        let entry = AlarmHistoryEntry::of(&a, AlarmTransition::Cleared, "admin", 9_000, None);
        Ok((a, entry))
    };
    store
        .change_alarm(&tenant, &alarm.id, &cleared, &Default::default())
        .await
        .unwrap();
    feed(&store, Raiser::Device("jam"), &device, json!(true), 10, "again").await;
    let all_alarms = store.list_alarms(&tenant, &query(&project), all()).await.unwrap();
    assert_eq!(all_alarms.items.len(), 2, "a new alarm after the clear");
    assert_eq!(store.list_alarms(&tenant, &q, all()).await.unwrap().items.len(), 1);
}

pub(crate) async fn alarms_are_listed_changed_and_isolated(store: SqlStore) {
    let (tenant, other) = (new_tenant(&store, "t").await, new_tenant(&store, "o").await);
    let model = new_model(&store, &tenant, "m", DeviceType::Crane, false).await;
    let project = new_project(&store, &tenant, "p").await;
    let d1 = new_device(&store, &tenant, "d1", &project, &model).await;
    let d2 = new_device(&store, &tenant, "d2", &project, &model).await;
    let rule = rule_on(&model, 20.0);
    store.insert_alarm_rule(&rule).await.unwrap();
    feed(&store, Raiser::Rule(&rule), &d1, json!(25.0), 100, "a").await;
    feed(&store, Raiser::Device("jam"), &d2, json!("stuck"), 200, "b").await;
    let all_alarms = store.list_alarms(&tenant, &query(&project), all()).await.unwrap();
    assert_eq!(all_alarms.total, 2);
    assert_eq!(all_alarms.items[0].device_id, d2.id, "newest updatedTime first");
    let mut q = query(&project);
    q.device = Some(d1.id.clone());
    assert_eq!(store.list_alarms(&tenant, &q, all()).await.unwrap().total, 1);
    let mut q = query(&project);
    q.start = Some(150_000);
    assert_eq!(
        store.list_alarms(&tenant, &q, all()).await.unwrap().items[0].device_id,
        d2.id
    );
    q.end = Some(199_999);
    assert_eq!(store.list_alarms(&tenant, &q, all()).await.unwrap().total, 0);
    let mut q = query(&project);
    q.severities = vec![Severity::Critical, Severity::Minor];
    assert_eq!(store.list_alarms(&tenant, &q, all()).await.unwrap().total, 0);
    assert_eq!(
        store.list_alarms(&other, &query(&project), all()).await.unwrap().total,
        0
    );
    let alarm = all_alarms.items[1].clone();
    assert_eq!(store.get_alarm(&other, &alarm.id).await.unwrap(), None);
    assert!(store.alarm_history(&other, &alarm.id).await.unwrap().is_empty());
    let noop = |_: &Alarm| -> gantry_core::Result<(Alarm, AlarmHistoryEntry)> { unreachable!() };
    assert!(matches!(
        store.change_alarm(&other, &alarm.id, &noop, &Default::default()).await,
        Err(Error::NotFound { .. })
    ));
    let open: u64 = store
        .count_open_alarms(None)
        .await
        .unwrap()
        .iter()
        .map(|(_, n)| n)
        .sum();
    assert!(open >= 2);
    let project_open = |tenant: TenantId| {
        let (store, project) = (store.clone(), project.id.clone());
        async move {
            let counts = store.count_open_alarms(Some((&tenant, &project))).await.unwrap();
            counts.iter().map(|(_, n)| n).sum::<u64>()
        }
    };
    assert_eq!(project_open(tenant.clone()).await, 2);
    assert_eq!(
        project_open(other.clone()).await,
        0,
        "another tenant's count of the project"
    );
    // Deleting the rule clears its alarm and forgets its state.
    let cleared = store
        .clear_rule_alarms(&tenant, &rule.id, "rule deleted", 5_000, &Default::default())
        .await
        .unwrap();
    assert_eq!(cleared.len(), 1);
    assert_eq!(cleared[0].cleared_by.as_deref(), Some("rule deleted"));
    let history = store.alarm_history(&tenant, &alarm.id).await.unwrap();
    let kinds: Vec<_> = history.iter().map(|h| h.kind).collect();
    assert_eq!(kinds, [AlarmTransition::Raised, AlarmTransition::Cleared]);
    assert_eq!(project_open(tenant.clone()).await, 1, "a cleared alarm is not open");
}

/// Open alarms are counted per listed device in one read, of the tenant and project alone; a
/// device's alarm periods on an attribute are those overlapping the window asked for.
pub(crate) async fn open_alarms_per_device_and_alarm_periods(store: SqlStore) {
    let (tenant, other) = (new_tenant(&store, "t").await, new_tenant(&store, "o").await);
    let model = new_model(&store, &tenant, "m", DeviceType::Crane, false).await;
    let project = new_project(&store, &tenant, "p").await;
    let elsewhere = new_project(&store, &tenant, "q").await;
    let d1 = new_device(&store, &tenant, "d1", &project, &model).await;
    let d2 = new_device(&store, &tenant, "d2", &project, &model).await;
    let quiet = new_device(&store, &tenant, "d3", &project, &model).await;
    let (hot, hotter) = (rule_on(&model, 20.0), rule_on(&model, 30.0));
    for rule in [&hot, &hotter] {
        store.insert_alarm_rule(rule).await.unwrap();
    }
    feed(&store, Raiser::Rule(&hot), &d1, json!(35.0), 100, "a").await;
    feed(&store, Raiser::Rule(&hotter), &d1, json!(35.0), 100, "a").await;
    feed(&store, Raiser::Device("jam"), &d1, json!("stuck"), 110, "b").await;
    feed(&store, Raiser::Rule(&hot), &d2, json!(25.0), 120, "c").await;
    let listed = [d1.id.clone(), d2.id.clone(), quiet.id.clone()];
    let counts = |tenant: TenantId, project: ProjectId, devices: Vec<DeviceId>| {
        let store = store.clone();
        async move {
            let mut counts = store
                .count_open_device_alarms(&tenant, &project, &devices)
                .await
                .unwrap();
            counts.sort();
            counts
        }
    };
    assert_eq!(
        counts(tenant.clone(), project.id.clone(), listed.to_vec()).await,
        vec![(d1.id.clone(), 3), (d2.id.clone(), 1)],
        "a device without open alarms is not listed"
    );
    assert_eq!(
        counts(tenant.clone(), project.id.clone(), vec![d2.id.clone()]).await,
        vec![(d2.id.clone(), 1)]
    );
    assert!(counts(tenant.clone(), project.id.clone(), Vec::new()).await.is_empty());
    assert!(
        counts(other.clone(), project.id.clone(), listed.to_vec())
            .await
            .is_empty()
    );
    assert!(
        counts(tenant.clone(), elsewhere.id.clone(), listed.to_vec())
            .await
            .is_empty()
    );
    store
        .clear_rule_alarms(&tenant, &hot.id, "rule deleted", 200_000, &Default::default())
        .await
        .unwrap();
    assert_eq!(
        counts(tenant.clone(), project.id.clone(), listed.to_vec()).await,
        vec![(d1.id.clone(), 2)],
        "cleared alarms are not open"
    );

    // d1's `temp` alarms: `hot` raised at 100 s and cleared at 200 s, `hotter` open since 100 s.
    let periods = |window: (i64, i64)| {
        let (store, tenant, device) = (store.clone(), tenant.clone(), d1.id.clone());
        async move {
            let found = store
                .device_alarm_periods(&tenant, &device, "temp", window, 10)
                .await
                .unwrap();
            found.into_iter().map(|a| a.rule_id).collect::<Vec<_>>()
        }
    };
    let both = vec![Some(hot.id.clone()), Some(hotter.id.clone())];
    let mut found = periods((0, 1_000_000)).await;
    found.sort();
    let mut want = both.clone();
    want.sort();
    assert_eq!(found, want);
    assert!(periods((0, 99_999)).await.is_empty(), "raised after the window");
    assert_eq!(
        periods((200_001, 300_000)).await,
        vec![Some(hotter.id.clone())],
        "cleared before the window"
    );
    assert_eq!(periods((200_000, 300_000)).await.len(), 2, "cleared at its start");
    assert_eq!(
        store
            .device_alarm_periods(&tenant, &d1.id, "jam", (0, 1_000_000), 10)
            .await
            .unwrap()
            .len(),
        1,
        "the device's own alarm on its attribute"
    );
    assert!(
        store
            .device_alarm_periods(&other, &d1.id, "temp", (0, 1_000_000), 10)
            .await
            .unwrap()
            .is_empty(),
        "another tenant's"
    );
    assert_eq!(
        store
            .device_alarm_periods(&tenant, &d1.id, "temp", (0, 1_000_000), 1)
            .await
            .unwrap()
            .len(),
        1,
        "at most the limit"
    );
}

/// A reading's plan for `raiser` on `device`, computed from a snapshot as evaluation does.
async fn plan(
    store: &SqlStore,
    raiser: Raiser<'_>,
    device: &Device,
    value: serde_json::Value,
    second: i64,
) -> AlarmPlan {
    let key = raiser.key();
    let snapshot = store
        .alarm_snapshot(&device.id, std::slice::from_ref(&key))
        .await
        .unwrap();
    let (state, open) = &snapshot[0];
    let trigger = Trigger::Reading {
        value,
        device_time: second * 1000,
        arrival: second * 1000,
        message: Some(MessageKey::of_text(&format!("m{second}"))),
    };
    let transition = fold(raiser, &Subject::of(device), state, open.as_ref(), &[trigger]).expect("a change");
    AlarmPlan {
        tenant: device.record.tenant_id.clone(),
        device: device.id.clone(),
        steps: vec![(key, transition)],
        webhooks: Audience::default(),
    }
}

/// Plans are written over the snapshot they were computed from, each wholly or not at all: one
/// whose state moved, or whose open alarm an operator changed, writes nothing.
pub(crate) async fn alarm_plans_write_only_over_their_snapshot(store: SqlStore) {
    let tenant = new_tenant(&store, "t").await;
    let model = new_model(&store, &tenant, "m", DeviceType::Crane, false).await;
    let project = new_project(&store, &tenant, "p").await;
    let d1 = new_device(&store, &tenant, "d1", &project, &model).await;
    let d2 = new_device(&store, &tenant, "d2", &project, &model).await;
    let rule = rule_on(&model, 20.0);
    store.insert_alarm_rule(&rule).await.unwrap();
    let raise = plan(&store, Raiser::Rule(&rule), &d1, json!(25.0), 100).await;
    let stale = plan(&store, Raiser::Rule(&rule), &d1, json!(26.0), 101).await;
    let other = plan(&store, Raiser::Device("jam"), &d2, json!(true), 100).await;
    let written = store.commit_alarm_plans(vec![raise, other]).await.unwrap();
    assert!(
        written
            .iter()
            .all(|w| w.as_ref().is_some_and(|w| w.len() == 1 && w[0].new))
    );
    let answered = store.commit_alarm_plans(vec![stale]).await.unwrap();
    assert_eq!(answered, vec![None], "computed before the raise");
    let open = store.list_alarms(&tenant, &query(&project), all()).await.unwrap();
    assert_eq!(open.total, 2);
    let alarm = open.items.iter().find(|a| a.device_id == d1.id).unwrap().clone();
    assert_eq!(alarm.count, 1, "the stale plan counted nothing");
    // An operator acknowledges between a plan's snapshot and its write: the plan is out of date.
    let keep = plan(&store, Raiser::Rule(&rule), &d1, json!(27.0), 102).await;
    let acknowledge = |a: &Alarm| -> gantry_core::Result<(Alarm, AlarmHistoryEntry)> {
        let mut a = a.clone();
        a.status = AlarmStatus::Acknowledged;
        a.acknowledged_by = Some("admin".into());
        let entry = AlarmHistoryEntry::of(&a, AlarmTransition::Acknowledged, "admin", 9_000, None);
        Ok((a, entry))
    };
    store
        .change_alarm(&tenant, &alarm.id, &acknowledge, &Default::default())
        .await
        .unwrap();
    assert_eq!(store.commit_alarm_plans(vec![keep]).await.unwrap(), vec![None]);
    let keep = plan(&store, Raiser::Rule(&rule), &d1, json!(28.0), 103).await;
    let written = store.commit_alarm_plans(vec![keep]).await.unwrap();
    let kept = &written[0].as_ref().expect("a fresh plan is written")[0].alarm;
    assert_eq!((kept.count, kept.status), (2, AlarmStatus::Acknowledged));
    let stored = store.get_alarm(&tenant, &alarm.id).await.unwrap().unwrap();
    assert_eq!(
        (stored.count, stored.value, stored.status),
        (2, json!(28.0), AlarmStatus::Acknowledged)
    );
    // Plans that only count are written together: two devices' at once...
    let d1_keep = plan(&store, Raiser::Rule(&rule), &d1, json!(29.0), 104).await;
    let d2_keep = plan(&store, Raiser::Device("jam"), &d2, json!(true), 104).await;
    let written = store.commit_alarm_plans(vec![d1_keep, d2_keep]).await.unwrap();
    assert!(written.iter().all(Option::is_some));
    let counts = |listed: gantry_core::paging::Page<Alarm>| {
        let mut counts: Vec<_> = listed.items.iter().map(|a| (a.device_id.clone(), a.count)).collect();
        counts.sort();
        counts
    };
    let listed = store.list_alarms(&tenant, &query(&project), all()).await.unwrap();
    assert_eq!(counts(listed), vec![(d1.id.clone(), 3), (d2.id.clone(), 2)]);
    // ...and when one of them is out of date, the other is still written, the stale one not.
    let stale = plan(&store, Raiser::Rule(&rule), &d1, json!(30.0), 105).await;
    let fresh = plan(&store, Raiser::Device("jam"), &d2, json!(true), 105).await;
    let moving = plan(&store, Raiser::Rule(&rule), &d1, json!(31.0), 106).await;
    store.commit_alarm_plans(vec![moving]).await.unwrap();
    let written = store.commit_alarm_plans(vec![stale, fresh]).await.unwrap();
    assert_eq!(written[0], None, "computed before the plan written meanwhile");
    assert!(written[1].is_some());
    let listed = store.list_alarms(&tenant, &query(&project), all()).await.unwrap();
    assert_eq!(counts(listed), vec![(d1.id.clone(), 4), (d2.id.clone(), 3)]);
}
