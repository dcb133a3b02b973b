//! What the services need from storage: small traits per resource, combined into one `Store`.
//! Every read and write is scoped by tenant, so one tenant never sees another's records. The
//! traits speak only domain types, so a store knows nothing of the services.

use std::collections::HashMap;

use async_trait::async_trait;

use crate::Result;
use crate::audit::{AuditQuery, AuditRecord};
use crate::connection::{Connection, SessionEnd, SessionStart};
use crate::desired::DesiredState;
use crate::enums::EventLogStatus;
use crate::event::{DeviceEvent, EventMinute, ReportedPosition, ShadowAttribute};
use crate::event_log::EventLog;
use crate::ids::{DeviceId, EventId, ModelId, ProjectId, TenantId, WebhookId};
use crate::paging::{Page, PageRequest};
use crate::principal::{Principal, TokenOwner};
use crate::query::{DeviceQuery, EventLogQuery, EventQuery, ProjectQuery};
use crate::records::{Device, DeviceCounts, DeviceModel, JsonMap, Project, Tenant};
use crate::route::StoredRoute;
use crate::series::{Bucket, SeriesQuery};
use crate::user::{User, UserId, UserQuery, UserSession};
use crate::webhook::{Audience, Delivery, OutboxKey, Webhook, WebhookEvent};

mod alarms;

pub use alarms::{AlarmChange, AlarmKeep, AlarmPlan, AlarmStep, AlarmStore};

/// A commit on its way to disk (`EventStore::commit_events`): resolves once it is durable.
pub type Durable = std::pin::Pin<Box<dyn Future<Output = Result<()>> + Send + 'static>>;

#[async_trait]
pub trait TenantStore: Send + Sync {
    /// Creates the default tenant unless it exists.
    async fn ensure_default_tenant(&self, now: i64) -> Result<()>;
    /// Creates a tenant with its administrator's token hash. A taken name is `Duplicate`.
    async fn insert_tenant(&self, tenant: &Tenant, admin_token_hash: &str) -> Result<()>;
    /// Replaces the system administrator's token.
    async fn set_system_token(&self, tenant: &TenantId, token_hash: &str) -> Result<()>;
    async fn has_system_token(&self) -> Result<bool>;
    /// The principal a token hash stands for at `now`, if any (a deleted project's or device's
    /// is none, and so is a replaced token's past its grace period), with the token's end.
    async fn token_owner(&self, token_hash: &str, now: i64) -> Result<Option<TokenOwner>>;
    /// The principal a token hash stands for now.
    async fn principal_for_token(&self, token_hash: &str) -> Result<Option<Principal>> {
        let owner = self.token_owner(token_hash, crate::time::now_ms()).await?;
        Ok(owner.map(|o| o.principal))
    }
    /// A live tenant.
    async fn get_tenant(&self, id: &TenantId) -> Result<Option<Tenant>>;
    /// Live tenants (only `only`, when given), ordered by creation time, then id.
    async fn list_tenants(&self, only: Option<&TenantId>, page: PageRequest) -> Result<Page<Tenant>>;
    /// Replaces the tenant's administrator token (the system administrator's when `system`):
    /// the tokens it had keep working until `old_until` (epoch ms; at once when not after `at`).
    async fn rotate_admin_token(
        &self,
        tenant: &TenantId,
        system: bool,
        token_hash: &str,
        old_until: i64,
        at: i64,
    ) -> Result<()>;
}

#[async_trait]
pub trait ModelStore: Send + Sync {
    /// A taken name is `Duplicate`.
    async fn insert_model(&self, model: &DeviceModel) -> Result<()>;
    /// A taken name is `Duplicate`; a missing model `NotFound`.
    async fn update_model(&self, model: &DeviceModel) -> Result<()>;
    async fn get_model(&self, tenant: &TenantId, id: &ModelId) -> Result<Option<DeviceModel>>;
    /// Ordered by creation time, then id.
    async fn list_models(&self, tenant: &TenantId, page: PageRequest) -> Result<Page<DeviceModel>>;
    /// The distinct models of the project's devices, ordered by name.
    async fn project_models(&self, tenant: &TenantId, project: &ProjectId) -> Result<Vec<DeviceModel>>;
    /// Soft-deletes; `Conflict` while devices use the model.
    async fn delete_model(&self, tenant: &TenantId, id: &ModelId, by: &str, at: i64) -> Result<()>;
}

#[async_trait]
pub trait ProjectStore: Send + Sync {
    /// Stores the project and its application token's hash. A taken name is `Duplicate`.
    async fn insert_project(&self, project: &Project, app_token_hash: &str) -> Result<()>;
    async fn update_project(&self, project: &Project) -> Result<()>;
    async fn get_project(&self, tenant: &TenantId, id: &ProjectId) -> Result<Option<Project>>;
    /// Ordered by creation time, then id.
    async fn list_projects(&self, tenant: &TenantId, query: &ProjectQuery, page: PageRequest) -> Result<Page<Project>>;
    /// Stores the project's new `applicationAccessToken` and update fields, and its hash as its
    /// token; the tokens it had keep working until `old_until` (at once when not after the
    /// update time). A missing project is `NotFound`.
    async fn rotate_application_token(&self, project: &Project, token_hash: &str, old_until: i64) -> Result<()>;
    /// Soft-deletes and revokes the application token; `Conflict` while the project has devices.
    async fn delete_project(&self, tenant: &TenantId, id: &ProjectId, by: &str, at: i64) -> Result<()>;
}

#[async_trait]
pub trait DeviceStore: Send + Sync {
    /// Stores the device (its derived fields are ignored) and its token's hash. A taken name is `Duplicate`.
    async fn insert_device(&self, device: &Device, token_hash: &str) -> Result<()>;
    /// Stores name, project, status, comments, virtual flag, metadata and the update fields.
    async fn update_device(&self, device: &Device) -> Result<()>;
    /// The device with the fields derived from its model and project.
    async fn get_device(&self, tenant: &TenantId, id: &DeviceId) -> Result<Option<Device>>;
    /// The tenant of a live device, whatever tenant asks: for messages that arrive through an
    /// external broker, which names only the device.
    async fn device_tenant(&self, id: &DeviceId) -> Result<Option<TenantId>>;
    async fn list_devices(&self, tenant: &TenantId, query: &DeviceQuery, page: PageRequest) -> Result<Page<Device>>;
    /// The project's live devices, those connected now and those locked, in one read: the
    /// figures of a project's overview, without a listing's order and page.
    async fn count_project_devices(&self, tenant: &TenantId, project: &ProjectId) -> Result<DeviceCounts>;
    /// How many live devices the model has, and the `metadata` of those whose metadata is not
    /// empty: what an alarm rule's status reads, without the rest of each device.
    async fn model_device_metadata(&self, tenant: &TenantId, model: &ModelId) -> Result<(u64, Vec<JsonMap>)>;
    /// Stores the device's new `accessToken` and update fields, and its hash as its token; the
    /// tokens it had keep working until `old_until` (at once when not after the update time).
    /// A missing device is `NotFound`.
    async fn rotate_device_token(&self, device: &Device, token_hash: &str, old_until: i64) -> Result<()>;
    /// Soft-deletes and revokes the device's token.
    async fn delete_device(&self, tenant: &TenantId, id: &DeviceId, by: &str, at: i64) -> Result<()>;
}

/// Device events and shadows.
#[async_trait]
pub trait EventStore: Send + Sync {
    /// Stores the events and applies them to the shadows in one transaction: per device and
    /// attribute, the shadow keeps the value with the newest device time.
    async fn append_events(&self, events: &[DeviceEvent]) -> Result<()>;
    /// Commits the events as `append_events` does, with `outbox` (the webhook events they
    /// cause) in the same transaction, but returns once the commit is done, before it is on disk
    /// where the store can tell the two apart: the returned future resolves when the events are
    /// durable (or the flush failed), and only then do reads find them. Ingest commits its next
    /// batch meanwhile (ingest.rs).
    async fn commit_events(&self, events: &[DeviceEvent], outbox: &[WebhookEvent]) -> Result<Durable>;
    /// Whether the store counts events into open alarms in the events' own commit
    /// (`commit_events_keeping`), so that evaluation computes those keeps before the commit. A
    /// store that answers false writes every alarm step after the events, in a commit of its own.
    fn keeps_alarms_with_events(&self) -> bool {
        false
    }
    /// `commit_events`, with `keeps` (steps of these events' devices that only count events into
    /// open alarms or move a rule's timers) in the same commit, so that they are durable exactly
    /// when the events are. Only called with keeps where `keeps_alarms_with_events` says so.
    async fn commit_events_keeping(
        &self,
        events: &[DeviceEvent],
        outbox: &[WebhookEvent],
        keeps: &[AlarmKeep],
    ) -> Result<Durable> {
        debug_assert!(keeps.is_empty(), "this store writes no alarm keeps with events");
        self.commit_events(events, outbox).await
    }
    /// How many ingest writers commit at once (ingest.rs), each for its own share of the
    /// devices. The default is one: a store with a single writer (SQLite) gains nothing from more.
    fn ingest_writers(&self) -> usize {
        1
    }
    async fn get_event(&self, tenant: &TenantId, id: &EventId) -> Result<Option<DeviceEvent>>;
    /// Removes the event; false when there was none.
    async fn delete_event(&self, tenant: &TenantId, id: &EventId) -> Result<bool>;
    /// Newest first by the queried time, then by id (descending), with the exact total. The
    /// device id selects (ids are unique across tenants): the caller has checked its tenant.
    async fn list_events(&self, query: &EventQuery, page: PageRequest) -> Result<Page<DeviceEvent>>;
    /// Deletes up to `limit` events stored before `cutoff` (epoch ms); returns how many.
    async fn delete_events_before(&self, cutoff: i64, limit: i64) -> Result<u64>;
    /// The shadow attributes of a device with the arrival time of each value.
    async fn shadow(&self, tenant: &TenantId, device: &DeviceId) -> Result<Vec<(ShadowAttribute, i64)>>;
    /// Per live device of `project` whose model `codes` lists, the newest by device time of its
    /// shadow's attributes that `codes` names for its model, as `shadow` reads them, with the
    /// device's name; devices with none of them are left out. One read for the whole project.
    async fn project_positions(
        &self,
        tenant: &TenantId,
        project: &ProjectId,
        codes: &[(ModelId, Vec<String>)],
    ) -> Result<Vec<ReportedPosition>>;
    /// The non-empty buckets of the query's window, oldest first, summed up exactly as over the
    /// events stored now. The device id selects: the caller has checked its tenant.
    async fn series(&self, query: &SeriesQuery) -> Result<Vec<Bucket>>;
}

/// Event logs of control messages and responses.
#[async_trait]
pub trait EventLogStore: Send + Sync {
    /// Stores the logs in one transaction (`NewEventLog`), each with its webhook events.
    async fn insert_event_logs(&self, logs: &[NewEventLog]) -> Result<()>;
    /// Stores a log; `ack_deadline` (epoch ms) is set for a control that waits for its ack.
    /// `webhooks` get the log as an `eventLog` event, written in the same transaction.
    async fn insert_event_log(&self, log: &EventLog, ack_deadline: Option<i64>, webhooks: Audience) -> Result<()> {
        let new = NewEventLog {
            log: log.clone(),
            ack_deadline,
            webhooks,
            audit: None,
        };
        self.insert_event_logs(std::slice::from_ref(&new)).await
    }
    /// Records the acks in one transaction (`AckRecord`), each with its reply log; for each,
    /// what it answered and the reply as stored (`AckOutcome`).
    async fn record_acks(&self, acks: &[AckRecord]) -> Result<Vec<AckOutcome>>;
    /// Appends `response` to the device's control log whose `eventId` is `correlation_id` and
    /// completes it if it was still processing. Returns the updated log, or None if there is none.
    /// `webhooks` get the updated log, written in the same transaction.
    async fn record_ack(
        &self,
        tenant: &TenantId,
        device: &DeviceId,
        correlation_id: &str,
        response: &serde_json::Value,
        at: i64,
        webhooks: Audience,
    ) -> Result<Option<EventLog>> {
        let ack = AckRecord {
            tenant: tenant.clone(),
            device: device.clone(),
            correlation_id: correlation_id.to_owned(),
            response: response.clone(),
            at,
            webhooks,
            reply: None,
        };
        Ok(self
            .record_acks(std::slice::from_ref(&ack))
            .await?
            .pop()
            .and_then(|o| o.answered))
    }
    /// Controls still processing at `now` past their ack deadline, and waiting controls past
    /// their `expires_time` (reason `expired`), become `exception`; returns them
    /// as they are now. Each one enters the webhook outbox of its project's `webhooks` in the
    /// same transaction.
    async fn expire_event_logs(&self, now: i64, webhooks: &HashMap<ProjectId, Audience>) -> Result<Vec<EventLog>>;
    async fn list_event_logs(
        &self,
        tenant: &TenantId,
        query: &EventLogQuery,
        page: PageRequest,
    ) -> Result<Page<EventLog>>;
    async fn get_event_log(&self, tenant: &TenantId, id: &str) -> Result<Option<EventLog>>;
    /// Takes the device's waiting controls for delivery, as one node: each becomes delivered at
    /// `now` with its ack deadline `ack_deadline`, and no other caller gets it again. Returned
    /// in the order they were sent.
    async fn claim_waiting_controls(&self, device: &DeviceId, now: i64, ack_deadline: i64) -> Result<Vec<EventLog>>;
    /// Ends a waiting control (not yet delivered) with `status` and `reason`, or, with status
    /// `completed`, one delivered that asked no ack; None when the log is not such a control
    /// (any more). `webhooks` get the updated log, as for an ack.
    async fn finish_waiting_control(
        &self,
        tenant: &TenantId,
        id: &str,
        outcome: (EventLogStatus, Option<&str>),
        at: i64,
        webhooks: Audience,
    ) -> Result<Option<EventLog>>;
    /// The device's waiting controls, oldest first, then by id.
    async fn list_waiting_controls(
        &self,
        tenant: &TenantId,
        device: &DeviceId,
        page: PageRequest,
    ) -> Result<Page<EventLog>>;
}

/// Desired states, one document per device.
#[async_trait]
pub trait DesiredStore: Send + Sync {
    /// The device's document with the revision it was read at; None when it never had one.
    async fn desired_state(&self, tenant: &TenantId, device: &DeviceId) -> Result<Option<(DesiredState, i64)>>;
    /// Writes the documents in one transaction (`DesiredWrite`); for each, whether it was
    /// written. Of two writes of one document from the same revision, the first is written.
    async fn save_desired_states(&self, writes: &[DesiredWrite]) -> Result<Vec<bool>>;
    /// Writes the document if the stored one is still at `revision` (0: none stored yet);
    /// whether it did. The written one is at `revision + 1`. `webhooks` (of the device's
    /// `project`) get it as a `desired` event, written in the same transaction.
    async fn save_desired_state(
        &self,
        state: &DesiredState,
        project: &ProjectId,
        revision: i64,
        at: i64,
        webhooks: Audience,
    ) -> Result<bool> {
        let write = DesiredWrite {
            state: state.clone(),
            project: project.clone(),
            revision,
            at,
            webhooks,
        };
        Ok(self.save_desired_states(std::slice::from_ref(&write)).await? == [true])
    }
}

/// An event log to store, with the deadline of the ack it waits for (epoch ms), if any, and
/// the webhooks that get it as an `eventLog` event, written in the same transaction.
#[derive(Debug, Clone)]
pub struct NewEventLog {
    pub log: EventLog,
    pub ack_deadline: Option<i64>,
    pub webhooks: Audience,
    /// The audit record of the change that made the log (a control through the API), committed
    /// with it: the control then waits for one commit, not two.
    pub audit: Option<AuditRecord>,
}

/// A device's ack of a control: `response` is appended to the device's control log whose
/// `eventId` is `correlation_id`, which is completed if it was still processing; `webhooks`
/// get the updated log, written in the same transaction.
#[derive(Debug, Clone)]
pub struct AckRecord {
    pub tenant: TenantId,
    pub device: DeviceId,
    pub correlation_id: String,
    pub response: serde_json::Value,
    pub at: i64,
    pub webhooks: Audience,
    /// The ack's own Response log, stored in the same transaction (so that an ack waits for
    /// one commit, and is never recorded without it), with the `contextId` of the control it
    /// answered; `webhooks` get it too.
    pub reply: Option<EventLog>,
}

/// What recording an `AckRecord` did: the control it answered as it is now (None when there is
/// none), and its reply log as stored.
#[derive(Debug, Clone)]
pub struct AckOutcome {
    pub answered: Option<EventLog>,
    pub reply: Option<EventLog>,
}

/// A desired state to write if the stored one is still at `revision` (0: none stored yet); the
/// written one is at `revision + 1`. `webhooks` (of the device's `project`) get it as a
/// `desired` event, written in the same transaction.
#[derive(Debug, Clone)]
pub struct DesiredWrite {
    pub state: DesiredState,
    pub project: ProjectId,
    pub revision: i64,
    pub at: i64,
    pub webhooks: Audience,
}

/// Message routes.
#[async_trait]
pub trait RouteStore: Send + Sync {
    async fn insert_route(&self, route: &StoredRoute) -> Result<()>;
    /// Stores `expired_time` and the update fields.
    async fn update_route(&self, route: &StoredRoute) -> Result<()>;
    /// A route that was not revoked (expired or not).
    async fn get_route(&self, tenant: &TenantId, id: &str) -> Result<Option<StoredRoute>>;
    /// The device's routes live at `now` (not expired, not revoked), newest first, then by id.
    async fn list_device_routes(
        &self,
        tenant: &TenantId,
        device: &DeviceId,
        now: i64,
        page: PageRequest,
    ) -> Result<Page<StoredRoute>>;
    /// Marks the route revoked; `NotFound` when there is none or it was revoked already.
    async fn revoke_route(&self, tenant: &TenantId, id: &str, by: &str, at: i64) -> Result<()>;
    /// The WEB or APP route, not revoked, whose temporary identity has this client id.
    async fn route_by_client(&self, client_id: &str) -> Result<Option<StoredRoute>>;
    /// The DEVICE route from `source` to `target` that is live at `now` and expires last.
    async fn device_route(
        &self,
        tenant: &TenantId,
        source: &DeviceId,
        target: &DeviceId,
        now: i64,
    ) -> Result<Option<StoredRoute>>;
}

/// Device presence: the state of each device's MQTT session.
#[async_trait]
pub trait ConnectionStore: Send + Sync {
    /// Records the device connected by this session, unless a session that began later is
    /// recorded already. Its last session's `disconnectedTime` stays. When it records it,
    /// `webhooks` get the record as a `connection` event, written in the same transaction.
    async fn session_started(&self, tenant: &TenantId, start: &SessionStart, webhooks: Audience) -> Result<()> {
        self.sessions_started(&[(tenant.clone(), start.clone(), webhooks)])
            .await
    }
    /// `session_started` of each, in one transaction.
    async fn sessions_started(&self, starts: &[(TenantId, SessionStart, Audience)]) -> Result<()>;
    /// Records the device disconnected, unless its recorded session began after
    /// `end.started_by`; whether it did. When it did, `webhooks` get the record as for a start.
    async fn session_ended(&self, end: &SessionEnd, webhooks: Audience) -> Result<bool> {
        Ok(self.sessions_ended(&[(end.clone(), webhooks)]).await? == [true])
    }
    /// `session_ended` of each, in one transaction; for each, whether it recorded it.
    async fn sessions_ended(&self, ends: &[(SessionEnd, Audience)]) -> Result<Vec<bool>>;
    /// Moves each device's last-seen time forward (never back).
    async fn record_last_seen(&self, seen: &[(DeviceId, i64)]) -> Result<()>;
    /// The device's record; None for a device never connected. The device id selects: the
    /// caller has checked its tenant.
    async fn connection(&self, device: &DeviceId) -> Result<Option<Connection>>;
    /// The records of those of `devices` that belong to `project` (of `tenant`) and ever
    /// connected, in one read for a page of a device listing; in no particular order.
    async fn project_connections(
        &self,
        tenant: &TenantId,
        project: &ProjectId,
        devices: &[DeviceId],
    ) -> Result<Vec<Connection>>;
    /// Ends every session recorded as on, at its last-seen time: for a broker that has just
    /// started and holds none. Returns how many.
    async fn end_all_sessions(&self) -> Result<u64>;
}

/// Webhooks, the events waiting for them (the outbox) and their deliveries. The outbox is
/// written by the writes that cause its events (`commit_events`, `insert_event_log`, ...), in
/// their transactions, so a committed cause never loses its webhook events.
#[async_trait]
pub trait WebhookStore: Send + Sync {
    /// `LimitReached` when the project holds `max_per_project` webhooks already.
    async fn insert_webhook(&self, webhook: &Webhook, max_per_project: u64) -> Result<()>;
    /// Stores url, types, description, enabled, secret and the update fields; `NotFound` when missing.
    async fn update_webhook(&self, webhook: &Webhook) -> Result<()>;
    async fn get_webhook(&self, tenant: &TenantId, id: &WebhookId) -> Result<Option<Webhook>>;
    /// The project's webhooks, oldest first, then by id.
    async fn list_webhooks(&self, tenant: &TenantId, project: &ProjectId, page: PageRequest) -> Result<Page<Webhook>>;
    /// Deletes the webhook with its deliveries and the events waiting for it; `NotFound` when missing.
    async fn delete_webhook(&self, tenant: &TenantId, id: &WebhookId) -> Result<()>;
    /// Every enabled webhook of every tenant (with its secret).
    async fn enabled_webhooks(&self) -> Result<Vec<Webhook>>;
    /// Up to `limit` of the events waiting for the webhook (of its project), oldest first: a
    /// device's events of one type in the order they were committed. Events committed together
    /// may share a key (the store keeps them in one row): they are taken together, and the
    /// first of them is returned whole even beyond `limit`.
    async fn waiting_events(&self, webhook: &Webhook, limit: usize) -> Result<Vec<(OutboxKey, WebhookEvent)>>;
    /// Stores a new delivery, then takes the events it carries (`taken`) out of the outbox for
    /// its webhook (an event goes once no webhook waits for it): a crash between the two sends
    /// them again rather than never. `Conflict`, storing nothing, when some of them were taken
    /// already (by another node's delivery).
    async fn insert_delivery(&self, delivery: &Delivery, taken: &[OutboxKey]) -> Result<()>;
    /// Stores status, attempts, last status and error, and the attempt and finish times.
    async fn update_delivery(&self, delivery: &Delivery) -> Result<()>;
    /// The webhook's oldest pending delivery.
    async fn pending_delivery(&self, webhook: &WebhookId) -> Result<Option<Delivery>>;
    /// The webhook's deliveries, newest first, then by id (descending).
    async fn list_deliveries(
        &self,
        tenant: &TenantId,
        webhook: &WebhookId,
        page: PageRequest,
    ) -> Result<Page<Delivery>>;
    /// Deliveries pending, of every webhook.
    async fn count_pending_deliveries(&self) -> Result<u64>;
    /// Takes or renews the lease on the webhook's deliveries for `owner` (a node) until `until`,
    /// unless another owner holds it past `now`; whether `owner` holds it now. Only the holder
    /// works the webhook's deliveries, so that several nodes do not POST one delivery each. A
    /// store that one process opens at a time holds every lease for it.
    async fn lease_webhook(&self, webhook: &WebhookId, owner: &str, now: i64, until: i64) -> Result<bool>;
}

/// User accounts and their sign-in sessions. Usernames are unique in the installation by
/// their lower-case form; a session is found by its token's hash only.
#[async_trait]
pub trait UserStore: Send + Sync {
    /// Stores the user with its password hash. A taken username is `Duplicate`.
    async fn insert_user(&self, user: &User, password_hash: &str) -> Result<()>;
    /// Stores the user's fields, and its password hash when given. A taken username is
    /// `Duplicate`; a missing user `NotFound`.
    async fn update_user(&self, user: &User, password_hash: Option<&str>) -> Result<()>;
    /// The user; of any tenant when `tenant` is None (for the system administrator).
    async fn get_user(&self, tenant: Option<&TenantId>, id: &UserId) -> Result<Option<User>>;
    /// The user of any tenant with this username (compared in lower case), with its password hash.
    async fn user_by_username(&self, username: &str) -> Result<Option<(User, String)>>;
    /// The user's password hash.
    async fn password_hash(&self, tenant: &TenantId, id: &UserId) -> Result<Option<String>>;
    /// Ordered by username (lower case), then id.
    async fn list_users(&self, tenant: &TenantId, query: &UserQuery, page: PageRequest) -> Result<Page<User>>;
    /// Deletes the user and its sessions; `NotFound` when missing.
    async fn delete_user(&self, tenant: &TenantId, id: &UserId) -> Result<()>;
    async fn record_sign_in(&self, id: &UserId, at: i64) -> Result<()>;
    async fn insert_session(&self, session: &UserSession) -> Result<()>;
    /// The live session (expiring after `now`) of an ACTIVE user with this token hash.
    async fn session(&self, token_hash: &str, now: i64) -> Result<Option<(UserSession, User)>>;
    /// Moves the session's end to `expires_time`.
    async fn extend_session(&self, token_hash: &str, expires_time: i64) -> Result<()>;
    async fn delete_session(&self, token_hash: &str) -> Result<()>;
    /// Ends every session of the user.
    async fn delete_user_sessions(&self, id: &UserId) -> Result<()>;
    /// Deletes the sessions that ended before `now`; returns how many.
    async fn delete_expired_sessions(&self, now: i64) -> Result<u64>;
}

/// The audit log.
#[async_trait]
pub trait AuditStore: Send + Sync {
    /// Commits the record; it is durable when this returns.
    async fn insert_audit(&self, record: &AuditRecord) -> Result<()>;
    /// The tenant's records, newest first, then by id (descending).
    async fn list_audit(&self, tenant: &TenantId, query: &AuditQuery, page: PageRequest) -> Result<Page<AuditRecord>>;
    /// Deletes records older than `cutoff` (epoch ms); returns how many.
    async fn delete_audit_before(&self, cutoff: i64) -> Result<u64>;
}

/// Each project's events per minute (`event_rate`).
#[async_trait]
pub trait EventRateStore: Send + Sync {
    /// Adds each row's events to the stored count of its project and minute, creating the row
    /// when there is none: counts written by several nodes add up. A project and minute appear
    /// at most once in `rows`.
    async fn add_event_minutes(&self, rows: &[EventMinute]) -> Result<()>;
    /// The project's counted minutes from `since` (epoch ms, included), oldest first, as
    /// (minute start, events); a minute without a row had none.
    async fn event_minutes(&self, tenant: &TenantId, project: &ProjectId, since: i64) -> Result<Vec<(i64, u64)>>;
    /// Deletes the counts of the minutes that started before `cutoff` (epoch ms); returns how many rows.
    async fn delete_event_minutes_before(&self, cutoff: i64) -> Result<u64>;
}

/// All of storage, as the services see it.
pub trait Store:
    TenantStore
    + ModelStore
    + ProjectStore
    + DeviceStore
    + EventStore
    + EventLogStore
    + RouteStore
    + ConnectionStore
    + WebhookStore
    + DesiredStore
    + AlarmStore
    + UserStore
    + AuditStore
    + EventRateStore
{
}

impl<
    T: TenantStore
        + ModelStore
        + ProjectStore
        + DeviceStore
        + EventStore
        + EventLogStore
        + RouteStore
        + ConnectionStore
        + WebhookStore
        + DesiredStore
        + AlarmStore
        + UserStore
        + AuditStore
        + EventRateStore,
> Store for T
{
}
