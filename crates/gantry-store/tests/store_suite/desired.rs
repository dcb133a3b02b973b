//! Desired states (`DesiredStore`), controls that wait for their device (`EventLogStore`'s
//! claim, finish and listing of waiting controls) and what commits with a control's log and
//! with its ack.

use gantry_core::desired::DesiredState;
use gantry_core::enums::{Classification, EventLogStatus};
use gantry_core::event_log::EventLog;
use gantry_core::store::DesiredStore;

use super::*;

pub(crate) async fn desired_states_are_written_by_one_writer_per_revision(store: SqlStore) {
    let tenant = new_tenant(&store, "desired").await;
    let model = new_model(&store, &tenant, "m", DeviceType::Light, false).await;
    let project = new_project(&store, &tenant, "p").await;
    let device = new_device(&store, &tenant, "d", &project, &model).await;
    assert!(store.desired_state(&tenant, &device.id).await.unwrap().is_none());

    let mut state = DesiredState::empty(tenant.clone(), device.id.clone());
    let changes = BTreeMap::from([("limit".to_owned(), Some(json!(5)))]);
    state.patch(&changes, "admin", 10);
    assert!(
        store
            .save_desired_state(&state, &project.id, 0, 10, Default::default())
            .await
            .unwrap()
    );
    assert!(
        !store
            .save_desired_state(&state, &project.id, 0, 11, Default::default())
            .await
            .unwrap(),
        "inserted once"
    );
    let (read, revision) = store.desired_state(&tenant, &device.id).await.unwrap().unwrap();
    assert_eq!((read.version, revision), (1, 1));
    assert_eq!(read.attributes, state.attributes);

    // of two writers that read revision 1, one writes
    let (mut a, mut b) = (read.clone(), read);
    a.patch(&BTreeMap::from([("limit".to_owned(), Some(json!(6)))]), "a", 20);
    b.patch(&BTreeMap::from([("limit".to_owned(), Some(json!(7)))]), "b", 20);
    let (wrote_a, wrote_b) = tokio::join!(
        store.save_desired_state(&a, &project.id, 1, 20, Default::default()),
        store.save_desired_state(&b, &project.id, 1, 20, Default::default())
    );
    assert!(wrote_a.unwrap() ^ wrote_b.unwrap());

    // another tenant sees none of it
    let other = new_tenant(&store, "other").await;
    assert!(store.desired_state(&other, &device.id).await.unwrap().is_none());
}

fn waiting(tenant: &TenantId, device: &Device, id: &str, created: i64, expires: i64) -> EventLog {
    EventLog {
        id: id.to_owned(),
        tenant_id: tenant.clone(),
        project_id: device.project_id.clone(),
        status: EventLogStatus::Processing,
        classification: Classification::DeviceControll,
        device_id: device.id.clone(),
        device_name: device.device_name.clone(),
        event_data: json!({"meta": {"id": id, "needack": true}}),
        context_id: None,
        responses: Vec::new(),
        event_id: id.to_owned(),
        created_by: "admin".to_owned(),
        created_time: created,
        updated_by: None,
        updated_time: None,
        deleted: false,
        expires_time: Some(expires),
        delivered_time: None,
        reason: None,
        reply_to: None,
    }
}

pub(crate) async fn waiting_controls_are_claimed_once_in_send_order(store: SqlStore) {
    let tenant = new_tenant(&store, "waiting").await;
    let model = new_model(&store, &tenant, "m", DeviceType::Light, false).await;
    let project = new_project(&store, &tenant, "p").await;
    let device = new_device(&store, &tenant, "d", &project, &model).await;
    for (id, created, expires) in [
        ("w-2", 20, 1_000),
        ("w-1", 10, 1_000),
        ("w-old", 5, 50),
        ("w-3", 30, 1_000),
    ] {
        let log = waiting(&tenant, &device, id, created, expires);
        store.insert_event_log(&log, None, Default::default()).await.unwrap();
    }
    let listed = store.list_waiting_controls(&tenant, &device.id, all()).await.unwrap();
    let ids: Vec<&str> = listed.items.iter().map(|l| l.id.as_str()).collect();
    assert_eq!(ids, ["w-old", "w-1", "w-2", "w-3"]);
    let other = new_tenant(&store, "other").await;
    assert_eq!(
        store
            .list_waiting_controls(&other, &device.id, all())
            .await
            .unwrap()
            .total,
        0
    );

    // expiry: past its expires_time, waiting, it ends `expired`; the ack sweep leaves others
    let expired = store.expire_event_logs(100, &Default::default()).await.unwrap();
    assert_eq!(expired.len(), 1);
    assert_eq!(
        (expired[0].id.as_str(), expired[0].reason.as_deref()),
        ("w-old", Some("expired"))
    );

    let cancelled = (EventLogStatus::Exception, Some("cancelled"));
    let done = store
        .finish_waiting_control(&tenant, "w-3", cancelled, 110, Default::default())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(done.reason.as_deref(), Some("cancelled"));
    assert!(
        store
            .finish_waiting_control(&tenant, "w-3", cancelled, 111, Default::default())
            .await
            .unwrap()
            .is_none()
    );

    // two claims at once: each control goes to one of them, in send order
    let (a, b) = tokio::join!(
        store.claim_waiting_controls(&device.id, 200, 5_000),
        store.claim_waiting_controls(&device.id, 200, 5_000)
    );
    let mut claimed: Vec<String> = a.unwrap().into_iter().chain(b.unwrap()).map(|l| l.id).collect();
    assert_eq!(claimed.len(), 2, "{claimed:?}");
    claimed.sort();
    assert_eq!(claimed, ["w-1", "w-2"]);
    let log = store.get_event_log(&tenant, "w-1").await.unwrap().unwrap();
    assert_eq!(
        (log.delivered_time, log.status),
        (Some(200), EventLogStatus::Processing)
    );
    assert!(
        store
            .finish_waiting_control(&tenant, "w-1", cancelled, 210, Default::default())
            .await
            .unwrap()
            .is_none()
    );
    // the ack deadline counts from the delivery
    assert!(
        store
            .expire_event_logs(4_999, &Default::default())
            .await
            .unwrap()
            .is_empty()
    );
    assert_eq!(
        store.expire_event_logs(5_000, &Default::default()).await.unwrap().len(),
        2
    );
}

pub(crate) async fn a_control_commits_its_audit_record_with_its_log(store: SqlStore) {
    use gantry_core::audit::{AuditOutcome, AuditQuery, AuditRecord, PrincipalType};
    use gantry_core::store::{AuditStore, NewEventLog};
    let tenant = new_tenant(&store, "audited").await;
    let model = new_model(&store, &tenant, "m", DeviceType::Light, false).await;
    let project = new_project(&store, &tenant, "p").await;
    let device = new_device(&store, &tenant, "d", &project, &model).await;
    let record = |id: &str| AuditRecord {
        id: id.to_owned(),
        tenant_id: tenant.clone(),
        time: 1_000,
        principal_type: PrincipalType::User,
        principal_id: "u1".into(),
        principal_name: "alice".into(),
        resource_type: "device".into(),
        resource_id: Some(device.id.to_string()),
        action: "control".into(),
        client_address: None,
        outcome: AuditOutcome::Success,
        status: Some(200),
        changed_fields: vec!["payload".into()],
    };
    let new = |log: &str, audit: &str| NewEventLog {
        log: waiting(&tenant, &device, log, 10, 1_000),
        ack_deadline: None,
        webhooks: Default::default(),
        audit: Some(record(audit)),
    };
    store.insert_event_logs(&[new("c-1", "a-1")]).await.unwrap();
    // A record that cannot be written takes its log with it: one transaction.
    assert!(store.insert_event_logs(&[new("c-2", "a-1")]).await.is_err());

    let audit = store.list_audit(&tenant, &AuditQuery::default(), all()).await.unwrap();
    assert_eq!(audit.items, vec![record("a-1")]);
    let logs = store.list_waiting_controls(&tenant, &device.id, all()).await.unwrap();
    let ids: Vec<&str> = logs.items.iter().map(|l| l.id.as_str()).collect();
    assert_eq!(ids, ["c-1"], "the log whose record failed is not stored");

    // A batch of logs commits each one's record.
    store
        .insert_event_logs(&[new("c-3", "a-3"), new("c-4", "a-4")])
        .await
        .unwrap();
    let audit = store.list_audit(&tenant, &AuditQuery::default(), all()).await.unwrap();
    let mut ids: Vec<&str> = audit.items.iter().map(|r| r.id.as_str()).collect();
    ids.sort();
    assert_eq!(ids, ["a-1", "a-3", "a-4"]);
}

pub(crate) async fn an_ack_commits_with_its_reply(store: SqlStore) {
    use gantry_core::query::{EventLogQuery, EventLogSort};
    use gantry_core::store::AckRecord;
    let tenant = new_tenant(&store, "acked").await;
    let model = new_model(&store, &tenant, "m", DeviceType::Light, false).await;
    let project = new_project(&store, &tenant, "p").await;
    let device = new_device(&store, &tenant, "d", &project, &model).await;
    let mut control = waiting(&tenant, &device, "c-1", 10, 1_000);
    (control.expires_time, control.context_id) = (None, Some("job-7".to_owned()));
    store
        .insert_event_log(&control, Some(5_000), Default::default())
        .await
        .unwrap();
    let reply = |id: &str| EventLog {
        classification: Classification::Response,
        status: EventLogStatus::Completed,
        expires_time: None,
        created_by: "DEVICE".to_owned(),
        ..waiting(&tenant, &device, id, 20, 0)
    };
    let ack = |correlation: &str, reply_id: &str| AckRecord {
        tenant: tenant.clone(),
        device: device.id.clone(),
        correlation_id: correlation.to_owned(),
        response: json!({"ok": correlation}),
        at: 20,
        webhooks: Default::default(),
        reply: Some(reply(reply_id)),
    };
    let outcomes = store
        .record_acks(&[ack("c-1", "r-1"), ack("nothing", "r-2")])
        .await
        .unwrap();

    let answered = outcomes[0].answered.as_ref().expect("c-1 answered");
    assert_eq!(
        (answered.status, answered.responses.len()),
        (EventLogStatus::Completed, 1)
    );
    let contexts: Vec<_> = outcomes
        .iter()
        .map(|o| o.reply.as_ref().unwrap().context_id.clone())
        .collect();
    assert_eq!(
        contexts,
        [Some("job-7".to_owned()), None],
        "a reply takes its control's context"
    );
    assert!(outcomes[1].answered.is_none());

    // As stored: the control completed, each reply with the context it was answered with.
    let query = EventLogQuery {
        project: project.id.clone(),
        device: Some(device.id.clone()),
        event_id: None,
        context_id: None,
        sort_by: EventLogSort::CreatedTime,
        sort_order: SortOrder::Asc,
    };
    let stored = store.list_event_logs(&tenant, &query, all()).await.unwrap().items;
    let seen: Vec<_> = stored
        .iter()
        .map(|l| (l.id.as_str(), l.classification, l.status, l.context_id.as_deref()))
        .collect();
    assert_eq!(
        seen,
        [
            (
                "c-1",
                Classification::DeviceControll,
                EventLogStatus::Completed,
                Some("job-7")
            ),
            (
                "r-1",
                Classification::Response,
                EventLogStatus::Completed,
                Some("job-7")
            ),
            ("r-2", Classification::Response, EventLogStatus::Completed, None),
        ]
    );

    // A reply that cannot be stored takes its ack with it: one transaction.
    let again = store.record_acks(&[ack("c-1", "r-1")]).await;
    assert!(again.is_err(), "r-1 is stored already");
    let control = store.get_event_log(&tenant, "c-1").await.unwrap().unwrap();
    assert_eq!(control.responses.len(), 1, "the failed ack's response is not appended");
}
