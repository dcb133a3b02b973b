//! UserStore and AuditStore: users unique by username in any case, scoped by tenant; sessions
//! found by hash while live and their user active; audit records listed newest first.

use gantry_core::audit::{AuditOutcome, AuditQuery, AuditRecord, PrincipalType};
use gantry_core::store::{AuditStore, UserStore};
use gantry_core::user::{Role, User, UserId, UserQuery, UserSession, UserStatus};

use super::*;

fn user_record(tenant: &TenantId, username: &str, role: Role, projects: Vec<ProjectId>) -> User {
    User {
        id: UserId::generate(),
        tenant_id: tenant.clone(),
        username: username.to_owned(),
        display_name: Some(format!("{username} shown")),
        email: None,
        role,
        project_ids: projects,
        status: UserStatus::Active,
        created_by: "admin".into(),
        created_time: 1_000,
        updated_by: None,
        updated_time: None,
        last_login_time: None,
    }
}

fn session_of(user: &User, hash: &str, expires: i64) -> UserSession {
    UserSession {
        token_hash: hash.to_owned(),
        user: user.id.clone(),
        tenant: user.tenant_id.clone(),
        created_time: 1_000,
        expires_time: expires,
        max_expires_time: expires + 10_000,
    }
}

pub(crate) async fn users_are_unique_scoped_and_filtered(store: SqlStore) {
    let t1 = new_tenant(&store, "users-t1").await;
    let t2 = new_tenant(&store, "users-t2").await;
    let p = new_project(&store, &t1, "users-p").await;
    let alice = user_record(&t1, "Alice", Role::Admin, vec![]);
    store.insert_user(&alice, "hash-a").await.unwrap();
    // Usernames are unique in the installation, in any case.
    let again = user_record(&t2, "ALICE", Role::Viewer, vec![]);
    assert!(matches!(store.insert_user(&again, "h").await, Err(Error::Duplicate(_))));
    let bob = user_record(&t1, "bob", Role::Operator, vec![p.id.clone()]);
    store.insert_user(&bob, "hash-b").await.unwrap();
    let carol = user_record(&t2, "carol", Role::Viewer, vec![]);
    store.insert_user(&carol, "hash-c").await.unwrap();

    assert_eq!(store.get_user(Some(&t1), &alice.id).await.unwrap(), Some(alice.clone()));
    assert_eq!(
        store.get_user(Some(&t2), &alice.id).await.unwrap(),
        None,
        "another tenant's user"
    );
    assert_eq!(store.get_user(None, &carol.id).await.unwrap(), Some(carol.clone()));
    let (found, hash) = store.user_by_username("aLiCe").await.unwrap().unwrap();
    assert_eq!((found.id, hash.as_str()), (alice.id.clone(), "hash-a"));
    assert_eq!(
        store.password_hash(&t1, &bob.id).await.unwrap().as_deref(),
        Some("hash-b")
    );

    let listed = |query: UserQuery| {
        let (store, t1) = (store.clone(), t1.clone());
        async move {
            let page = store.list_users(&t1, &query, all()).await.unwrap();
            page.items.into_iter().map(|u| u.username).collect::<Vec<_>>()
        }
    };
    assert_eq!(listed(UserQuery::default()).await, ["Alice", "bob"]);
    let by_role = UserQuery {
        role: Some(Role::Operator),
        ..UserQuery::default()
    };
    assert_eq!(listed(by_role).await, ["bob"]);
    let by_project = UserQuery {
        project: Some(p.id.clone()),
        ..UserQuery::default()
    };
    assert_eq!(listed(by_project).await, ["bob"]);
    let by_name = UserQuery {
        username: Some("LIC".into()),
        ..UserQuery::default()
    };
    assert_eq!(listed(by_name).await, ["Alice"]);

    let mut changed = bob.clone();
    changed.role = Role::Viewer;
    changed.status = UserStatus::Locked;
    changed.updated_time = Some(2_000);
    store.update_user(&changed, Some("hash-b2")).await.unwrap();
    assert_eq!(store.get_user(Some(&t1), &bob.id).await.unwrap(), Some(changed.clone()));
    assert_eq!(
        store.password_hash(&t1, &bob.id).await.unwrap().as_deref(),
        Some("hash-b2")
    );
    let renamed = User {
        username: "CAROL".into(),
        ..changed.clone()
    };
    assert!(matches!(
        store.update_user(&renamed, None).await,
        Err(Error::Duplicate(_))
    ));
    store.record_sign_in(&alice.id, 5_000).await.unwrap();
    let signed = store.get_user(Some(&t1), &alice.id).await.unwrap().unwrap();
    assert_eq!(signed.last_login_time, Some(5_000));
    assert_not_found(store.delete_user(&t2, &alice.id).await);
    store.delete_user(&t1, &alice.id).await.unwrap();
    assert_eq!(store.get_user(Some(&t1), &alice.id).await.unwrap(), None);
    // The name is free again.
    store
        .insert_user(&user_record(&t2, "alice", Role::Viewer, vec![]), "h")
        .await
        .unwrap();
}

pub(crate) async fn sessions_live_until_they_end(store: SqlStore) {
    let t = new_tenant(&store, "sessions-t").await;
    let user = user_record(&t, "sessions-user", Role::Viewer, vec![]);
    store.insert_user(&user, "h").await.unwrap();
    store.insert_session(&session_of(&user, "s1", 10_000)).await.unwrap();
    store.insert_session(&session_of(&user, "s2", 10_000)).await.unwrap();
    let (session, found) = store.session("s1", 9_999).await.unwrap().unwrap();
    assert_eq!((session.expires_time, found.id.clone()), (10_000, user.id.clone()));
    assert!(
        store.session("s1", 10_000).await.unwrap().is_none(),
        "ended at its expiry"
    );
    store.extend_session("s1", 15_000).await.unwrap();
    assert!(store.session("s1", 12_000).await.unwrap().is_some(), "extended by use");
    store.delete_session("s1").await.unwrap();
    assert!(store.session("s1", 0).await.unwrap().is_none(), "signed out");

    let mut locked = user.clone();
    locked.status = UserStatus::Locked;
    store.update_user(&locked, None).await.unwrap();
    assert!(
        store.session("s2", 0).await.unwrap().is_none(),
        "a locked user's session grants nothing"
    );
    store.update_user(&user, None).await.unwrap();
    assert!(store.session("s2", 0).await.unwrap().is_some());
    store.delete_user_sessions(&user.id).await.unwrap();
    assert!(
        store.session("s2", 0).await.unwrap().is_none(),
        "all the user's sessions ended"
    );

    store.insert_session(&session_of(&user, "old", 100)).await.unwrap();
    store.insert_session(&session_of(&user, "new", 100_000)).await.unwrap();
    assert_eq!(store.delete_expired_sessions(1_000).await.unwrap(), 1);
    store.delete_user(&t, &user.id).await.unwrap();
    assert!(
        store.session("new", 0).await.unwrap().is_none(),
        "a deleted user's session ended"
    );
}

fn audit_record(tenant: &TenantId, time: i64, action: &str) -> AuditRecord {
    AuditRecord {
        id: format!("{time:012}-{action}"),
        tenant_id: tenant.clone(),
        time,
        principal_type: PrincipalType::User,
        principal_id: "u1".into(),
        principal_name: "alice".into(),
        resource_type: "device".into(),
        resource_id: Some("d1".into()),
        action: action.into(),
        client_address: Some("127.0.0.1".into()),
        outcome: AuditOutcome::Success,
        status: Some(200),
        changed_fields: vec!["status".into(), "comments".into()],
    }
}

pub(crate) async fn audit_records_list_newest_first_per_tenant(store: SqlStore) {
    let t1 = new_tenant(&store, "audit-t1").await;
    let t2 = new_tenant(&store, "audit-t2").await;
    for (time, action) in [(1_000, "create"), (2_000, "update"), (3_000, "lock")] {
        store.insert_audit(&audit_record(&t1, time, action)).await.unwrap();
    }
    let mut foreign = audit_record(&t2, 2_500, "delete");
    foreign.outcome = AuditOutcome::Failure;
    foreign.status = None;
    foreign.resource_id = None;
    store.insert_audit(&foreign).await.unwrap();

    let actions = |query: AuditQuery, tenant: TenantId| {
        let store = store.clone();
        async move {
            let page = store.list_audit(&tenant, &query, all()).await.unwrap();
            page.items.into_iter().map(|r| r.action).collect::<Vec<_>>()
        }
    };
    assert_eq!(
        actions(AuditQuery::default(), t1.clone()).await,
        ["lock", "update", "create"]
    );
    assert_eq!(actions(AuditQuery::default(), t2.clone()).await, ["delete"]);
    let window = AuditQuery {
        start: Some(2_000),
        end: Some(3_000),
        ..AuditQuery::default()
    };
    assert_eq!(actions(window, t1.clone()).await, ["lock", "update"]);
    let by_action = AuditQuery {
        action: Some("create".into()),
        principal_id: Some("u1".into()),
        resource_type: Some("device".into()),
        resource_id: Some("d1".into()),
        ..AuditQuery::default()
    };
    assert_eq!(actions(by_action, t1.clone()).await, ["create"]);
    let listed = store.list_audit(&t2, &AuditQuery::default(), all()).await.unwrap();
    assert_eq!(listed.items, vec![foreign]);
    let first = store.list_audit(&t1, &AuditQuery::default(), page(1, 1)).await.unwrap();
    assert_eq!(
        (first.total, first.items[0].changed_fields.clone()),
        (3, vec!["status".to_owned(), "comments".to_owned()])
    );

    assert_eq!(store.delete_audit_before(2_000).await.unwrap(), 1);
    assert_eq!(actions(AuditQuery::default(), t1).await, ["lock", "update"]);
}
