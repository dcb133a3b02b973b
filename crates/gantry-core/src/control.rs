//! Control messages sent down to devices, their acks, and the event logs that record both. A
//! control is recorded before it is published, so every message a device receives has its log.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::catalog::CatalogService;
use crate::downlink::Downlink;
use crate::enums::{Classification, DeviceStatus, EventLogStatus, MessageType};
use crate::event_log::EventLog;
use crate::feed::Feeds;
use crate::fields::ControlFields;
use crate::group_commit::GroupCommit;
use crate::ids::{DeviceId, EventId};
use crate::message::{MESSAGE_VERSION, Message, MessageMeta, Payload};
use crate::paging::{Page, PageRequest};
use crate::principal::Principal;
use crate::query::EventLogQuery;
use crate::records::{Device, DeviceModel};
use crate::store::{AckRecord, NewEventLog, Store};
use crate::stream::StreamType;
use crate::time::now_ms;
use crate::webhook::Audience;
use crate::webhooks::WebhookService;
use crate::{Error, Result};

pub struct ControlService {
    store: Arc<dyn Store>,
    catalog: Arc<CatalogService>,
    downlink: Arc<dyn Downlink>,
    ack_timeout: Duration,
    stats: ControlStats,
    /// Event logs go to their project's push stream.
    feeds: Arc<Feeds>,
    /// And to its webhooks, written with them.
    webhooks: Arc<WebhookService>,
    /// Controls one device may have waiting (`--waiting-controls-per-device`).
    max_waiting: AtomicU64,
    /// The event logs' inserts and the acks, each group-committed: a burst of connects and of
    /// their acks writes a transaction per batch, not per device.
    inserts: GroupCommit<NewEventLog, ()>,
    acks: GroupCommit<AckRecord, Option<EventLog>>,
}

/// Controls one device may have waiting unless configured otherwise.
pub const DEFAULT_WAITING_CONTROLS_PER_DEVICE: u64 = 100;

/// What became of the controls that wait for an ack, counted by this process (exported at
/// `/metrics`; how many are pending now is the store's figure, which every node shares).
#[derive(Debug, Default)]
pub struct ControlStats {
    /// Controls sent (or relayed along a route) that wait for an ack.
    pub awaiting_ack: AtomicU64,
    /// Controls completed by their first ack.
    pub completed: AtomicU64,
    /// Controls ended in `exception` by the ack sweep (or expired while waiting).
    pub exception: AtomicU64,
    /// Controls stored to wait for a device not connected.
    pub waiting: AtomicU64,
    /// Waiting controls delivered at a connect.
    pub delivered_waiting: AtomicU64,
}

/// The longest a control may wait for its device: a week.
pub const MAX_TTL_SECONDS: i64 = 604_800;

impl ControlService {
    pub fn new(
        store: Arc<dyn Store>,
        catalog: Arc<CatalogService>,
        downlink: Arc<dyn Downlink>,
        ack_timeout: Duration,
        (feeds, webhooks): (Arc<Feeds>, Arc<WebhookService>),
        writers: (&TaskTracker, &CancellationToken),
    ) -> Self {
        let inserts = GroupCommit::start(writers, {
            let store = store.clone();
            move |logs: Vec<NewEventLog>| {
                let store = store.clone();
                async move {
                    store.insert_event_logs(&logs).await?;
                    Ok(vec![(); logs.len()])
                }
            }
        });
        let acks = GroupCommit::start(writers, {
            let store = store.clone();
            move |acks: Vec<AckRecord>| {
                let store = store.clone();
                async move { store.record_acks(&acks).await }
            }
        });
        Self {
            store,
            catalog,
            downlink,
            ack_timeout,
            stats: ControlStats::default(),
            feeds,
            webhooks,
            max_waiting: AtomicU64::new(DEFAULT_WAITING_CONTROLS_PER_DEVICE),
            inserts,
            acks,
        }
    }

    /// Stores `log` (`EventLogStore::insert_event_logs`) with the others written meanwhile.
    async fn insert_log(&self, log: &EventLog, ack_deadline: Option<i64>, webhooks: Audience) -> Result<()> {
        let new = NewEventLog {
            log: log.clone(),
            ack_deadline,
            webhooks,
        };
        self.inserts.write(new).await
    }

    /// The webhooks of `project` that want event logs.
    async fn hooks(&self, project: &crate::ids::ProjectId) -> Result<Audience> {
        self.webhooks.subscribers(project, StreamType::EventLog).await
    }

    /// Sends a stored (or updated) event log to its project's push stream, and wakes the
    /// deliveries when webhooks got it.
    fn pushed(&self, log: &EventLog, hooks: Audience) {
        if !hooks.is_empty() {
            self.webhooks.wake();
        }
        self.push(log);
    }

    /// Sends a stored (or updated) event log to its project's push stream.
    fn push(&self, log: &EventLog) {
        self.feeds
            .publish(&log.project_id, StreamType::EventLog, &log.device_id, || {
                serde_json::to_string(log).unwrap_or_default()
            });
    }

    pub fn stats(&self) -> &ControlStats {
        &self.stats
    }

    /// Validates a control message against the device's model, records it as an event log and
    /// publishes it to the device's inbox with a new `meta.id`.
    /// Returns the message sent and the id of its event log, by which the caller follows it.
    pub async fn send_control(
        &self,
        who: &Principal,
        device_id: &DeviceId,
        input: ControlFields,
    ) -> Result<(Message, String)> {
        let device = self.catalog.load_device(who.tenant(), device_id).await?;
        who.require_device_control(&device.project_id)?;
        let message_type = input.message_type.unwrap_or(MessageType::M);
        if message_type == MessageType::Log {
            return Err(Error::invalid("type", "a control message is of type m, ack or c"));
        }
        if message_type == MessageType::Ack && input.correlation_id.as_deref().is_none_or(str::is_empty) {
            return Err(Error::invalid("correlationId", "is required for a message of type ack"));
        }
        let payload = input.payload.unwrap_or_default();
        let model = self.catalog.load_model(who.tenant(), &device.model_id).await?;
        validate_control(&model, &payload)?;
        if device.status == DeviceStatus::Locked {
            return Err(Error::Conflict(format!("device {} is Locked", device.id)));
        }
        let now = now_ms();
        let message = Message {
            meta: MessageMeta {
                id: EventId::generate().to_string(),
                message_type,
                deviceid: Some(device.id.to_string()),
                version: Some(MESSAGE_VERSION.into()),
                ts: Some(now.div_euclid(1000)),
                needack: input.needack,
                correlation_id: input.correlation_id,
            },
            payload: Payload {
                refused: Vec::new(),
                ..payload
            },
        };
        let ttl = input.ttl_seconds.unwrap_or(0);
        if !(0..=MAX_TTL_SECONDS).contains(&ttl) {
            return Err(Error::invalid("ttlSeconds", format!("must be 0 to {MAX_TTL_SECONDS}")));
        }
        let waits = ttl > 0 && !self.is_connected(&device.id).await?;
        let status = if input.needack || waits {
            EventLogStatus::Processing
        } else {
            EventLogStatus::Completed
        };
        let mut log = new_log(
            &device,
            Classification::DeviceControll,
            status,
            &message,
            input.context_id,
            &who.actor(),
            now,
        );
        if waits {
            log.expires_time = Some(now + ttl * 1000);
            self.wait(&device, &log).await?;
            return Ok((message, log.id));
        }
        let deadline = input.needack.then(|| now + self.ack_timeout.as_millis() as i64);
        let hooks = self.hooks(&log.project_id).await?;
        self.insert_log(&log, deadline, hooks).await?;
        self.pushed(&log, hooks);
        if input.needack {
            self.stats.awaiting_ack.fetch_add(1, Ordering::Relaxed);
        }
        // The log stays as stored: a control awaiting its ack ends in `exception` at its ack
        // timeout, as one the device never answered; the caller is told which log it is.
        if let Err(e) = self.downlink.send(device.id.as_str(), &message).await {
            return Err(e.for_stored_control(&log.id));
        }
        Ok((message, log.id))
    }

    /// Sets the bound on controls waiting per device (`--waiting-controls-per-device`).
    pub fn set_max_waiting(&self, max: u64) {
        self.max_waiting.store(max, Ordering::Relaxed);
    }

    /// Stores a control for a device not connected, to wait for its connect. A device that
    /// connected meanwhile may have looked for waiting controls before this one was stored:
    /// it is delivered now, by the same claim a connect makes.
    async fn wait(&self, device: &Device, log: &EventLog) -> Result<()> {
        // Counted before the write: concurrent sends may pass the bound by as many as are in
        // flight.
        let max = self.max_waiting.load(Ordering::Relaxed);
        let one = PageRequest::parse(None, Some(1), 1)?;
        let held = self
            .store
            .list_waiting_controls(&device.record.tenant_id, &device.id, one)
            .await?;
        crate::error::within_bound(
            held.total,
            max,
            "waiting controls per device",
            "waiting-controls-per-device",
        )?;
        let hooks = self.hooks(&log.project_id).await?;
        self.insert_log(log, None, hooks).await?;
        self.pushed(log, hooks);
        self.stats.waiting.fetch_add(1, Ordering::Relaxed);
        if self.is_connected(&device.id).await? {
            self.deliver_waiting(device).await?;
        }
        Ok(())
    }

    /// Whether the device holds an MQTT session now, as presence recorded it or, on a broker
    /// that tells no sessions, as its recent messages show (`Downlink::recently_heard`).
    pub async fn is_connected(&self, device: &DeviceId) -> Result<bool> {
        if self.downlink.recently_heard(device) {
            return Ok(true);
        }
        Ok(self.store.connection(device).await?.is_some_and(|c| c.connected))
    }

    /// Publishes the device's waiting controls, in the order they were sent: each is claimed
    /// in the store first, so that of two nodes seeing one connect only one sends it. Its ack
    /// deadline counts from now; one that asked no ack is completed once sent.
    pub async fn deliver_waiting(&self, device: &Device) -> Result<()> {
        let now = now_ms();
        let deadline = now + self.ack_timeout.as_millis() as i64;
        let claimed = self.store.claim_waiting_controls(&device.id, now, deadline).await?;
        for log in claimed {
            self.stats.delivered_waiting.fetch_add(1, Ordering::Relaxed);
            let message: Message = serde_json::from_value(log.event_data.clone()).map_err(Error::serialization)?;
            if let Err(e) = self.downlink.send(device.id.as_str(), &message).await {
                tracing::warn!(device = %device.id, event_log = %log.id, error = %e, "waiting control not published");
            }
            let log = if message.meta.needack {
                self.stats.awaiting_ack.fetch_add(1, Ordering::Relaxed);
                log
            } else {
                let hooks = self.hooks(&log.project_id).await?;
                let done = (EventLogStatus::Completed, None);
                match self
                    .store
                    .finish_waiting_control(&log.tenant_id, &log.id, done, now, hooks)
                    .await?
                {
                    Some(done) => done,
                    None => log,
                }
            };
            let hooks = self.hooks(&log.project_id).await?;
            self.pushed(&log, hooks);
        }
        Ok(())
    }

    /// Cancels a waiting control: its log turns `exception` with reason `cancelled`. One
    /// delivered already (or not waiting at all) is 409.
    pub async fn cancel_waiting(&self, who: &Principal, id: &str) -> Result<EventLog> {
        let log = self
            .store
            .get_event_log(who.tenant(), id)
            .await?
            .ok_or_else(|| Error::not_found("event log", id))?;
        who.require_device_control(&log.project_id)?;
        if !log.is_waiting() {
            return Err(Error::Conflict(format!(
                "event log {id} is not a control waiting for its device (delivered, finished, or sent at once)"
            )));
        }
        let hooks = self.hooks(&log.project_id).await?;
        let cancelled = (EventLogStatus::Exception, Some("cancelled"));
        let Some(log) = self
            .store
            .finish_waiting_control(who.tenant(), id, cancelled, now_ms(), hooks)
            .await?
        else {
            return Err(Error::Conflict(format!("event log {id} was delivered meanwhile")));
        };
        self.pushed(&log, hooks);
        Ok(log)
    }

    /// The controls waiting for the device, oldest first.
    pub async fn waiting_controls(
        &self,
        who: &Principal,
        device: &DeviceId,
        page: PageRequest,
    ) -> Result<Page<EventLog>> {
        let device = self.catalog.load_device(who.tenant(), device).await?;
        who.require_device_manage(&device.project_id)?;
        self.store.list_waiting_controls(who.tenant(), &device.id, page).await
    }

    /// Records a message Gantry itself sends the device (a desired-state delta) as a control
    /// waiting for its ack, and publishes it.
    pub async fn send_recorded(&self, device: &Device, message: &Message, by: &str) -> Result<EventLog> {
        let now = now_ms();
        let log = new_log(
            device,
            Classification::DeviceControll,
            EventLogStatus::Processing,
            message,
            None,
            by,
            now,
        );
        let deadline = now + self.ack_timeout.as_millis() as i64;
        let hooks = self.hooks(&log.project_id).await?;
        self.insert_log(&log, Some(deadline), hooks).await?;
        self.pushed(&log, hooks);
        self.stats.awaiting_ack.fetch_add(1, Ordering::Relaxed);
        if let Err(e) = self.downlink.send(device.id.as_str(), message).await {
            return Err(e.for_stored_control(&log.id));
        }
        Ok(log)
    }

    /// Records a message a route's caller sent to `device` (rmqtt delivers it): a DeviceControll
    /// log like a control's, whose ack goes back to `reply_to`'s inbox.
    pub async fn record_relayed(
        &self,
        device: &Device,
        message: &Message,
        by: &str,
        reply_to: Option<String>,
    ) -> Result<()> {
        let now = now_ms();
        let needack = message.meta.needack;
        let status = if needack {
            EventLogStatus::Processing
        } else {
            EventLogStatus::Completed
        };
        let mut log = new_log(device, Classification::DeviceControll, status, message, None, by, now);
        log.reply_to = reply_to;
        let deadline = needack.then(|| now + self.ack_timeout.as_millis() as i64);
        let hooks = self.hooks(&log.project_id).await?;
        self.insert_log(&log, deadline, hooks).await?;
        self.pushed(&log, hooks);
        if needack {
            self.stats.awaiting_ack.fetch_add(1, Ordering::Relaxed);
        }
        Ok(())
    }

    /// A device's ack (`type` ack with `correlationId`): completes the control it answers and
    /// records a Response log.
    /// Returns the control it answered, if any.
    pub async fn handle_ack(&self, device: &Device, ack: &Message) -> Result<Option<EventLog>> {
        let now = now_ms();
        let ack_json = serde_json::to_value(ack).map_err(Error::serialization)?;
        let hooks = self.hooks(&device.project_id).await?;
        let answered = match ack.meta.correlation_id.as_deref() {
            Some(correlation) => {
                let ack = AckRecord {
                    tenant: device.record.tenant_id.clone(),
                    device: device.id.clone(),
                    correlation_id: correlation.to_owned(),
                    response: ack_json,
                    at: now,
                    webhooks: hooks,
                };
                self.acks.write(ack).await?
            }
            None => None,
        };
        if let Some(log) = &answered {
            self.pushed(log, hooks);
        }
        // The first response completes a control still processing; a later one, or one after
        // the `exception`, leaves its status as it was.
        if let Some(log) = &answered
            && log.status == EventLogStatus::Completed
            && log.responses.len() == 1
        {
            self.stats.completed.fetch_add(1, Ordering::Relaxed);
        }
        if let Some(owner) = answered.as_ref().and_then(|log| log.reply_to.as_deref())
            && let Err(e) = self.downlink.send(owner, ack).await
        {
            tracing::warn!(error = %e, "could not forward an ack along its route");
        }
        let context = answered.as_ref().and_then(|log| log.context_id.clone());
        let response = new_log(
            device,
            Classification::Response,
            EventLogStatus::Completed,
            ack,
            context,
            "DEVICE",
            now,
        );
        self.insert_log(&response, None, hooks).await?;
        self.pushed(&response, hooks);
        Ok(answered)
    }

    /// Marks controls whose ack did not come in time as `exception`, hands them to their
    /// projects' webhooks (in the same transaction) and pushes them to their streams; returns
    /// how many.
    pub async fn expire_overdue(&self) -> Result<u64> {
        let hooks = self.webhooks.subscribers_by_project(StreamType::EventLog).await?;
        let expired = self.store.expire_event_logs(now_ms(), &hooks).await?;
        if expired.iter().any(|log| hooks.contains_key(&log.project_id)) {
            self.webhooks.wake();
        }
        for log in &expired {
            self.push(log);
        }
        let count = expired.len() as u64;
        self.stats.exception.fetch_add(count, Ordering::Relaxed);
        Ok(count)
    }

    pub fn ack_timeout(&self) -> Duration {
        self.ack_timeout
    }

    pub async fn list_logs(&self, who: &Principal, query: EventLogQuery, page: PageRequest) -> Result<Page<EventLog>> {
        self.catalog.get_project(who, &query.project).await?;
        self.store.list_event_logs(who.tenant(), &query, page).await
    }
}

fn new_log(
    device: &Device,
    classification: Classification,
    status: EventLogStatus,
    message: &Message,
    context_id: Option<String>,
    by: &str,
    now: i64,
) -> EventLog {
    EventLog {
        id: EventId::generate().to_string(),
        tenant_id: device.record.tenant_id.clone(),
        project_id: device.project_id.clone(),
        status,
        classification,
        device_id: device.id.clone(),
        device_name: device.device_name.clone(),
        event_data: serde_json::to_value(message).unwrap_or_default(),
        context_id,
        responses: Vec::new(),
        event_id: message.meta.id.clone(),
        created_by: by.to_owned(),
        created_time: now,
        updated_by: None,
        updated_time: None,
        deleted: false,
        expires_time: None,
        delivered_time: None,
        reason: None,
        reply_to: None,
    }
}

/// The rules of a control payload: not empty; attributes exist, may be written (W or RW) and
/// carry values of their type; actions exist, their params exist and are typed, required
/// params are present.
pub fn validate_control(model: &DeviceModel, payload: &Payload) -> Result<()> {
    if payload.attrs.is_empty() && payload.actions.is_empty() {
        return Err(Error::invalid("payload", "attrs and actions must not both be empty"));
    }
    for (i, attr) in payload.attrs.iter().enumerate() {
        let field = format!("payload.attrs[{i}]");
        let defined = model.attributes_map.get(&attr.code).ok_or_else(|| {
            Error::invalid(
                format!("{field}.code"),
                format!("`{}` is not an attribute of model {}", attr.code, model.name),
            )
        })?;
        if !defined.readable.writable() {
            return Err(Error::invalid(
                format!("{field}.code"),
                format!("`{}` is read-only (R): it cannot be sent down", attr.code),
            ));
        }
        defined.data_type.check(&format!("{field}.value"), &attr.value)?;
    }
    for (i, action) in payload.actions.iter().enumerate() {
        let field = format!("payload.actions[{i}]");
        let defined = model.actions_map.get(&action.code).ok_or_else(|| {
            Error::invalid(
                format!("{field}.code"),
                format!("`{}` is not an action of model {}", action.code, model.name),
            )
        })?;
        let params = defined.params_map.clone().unwrap_or_default();
        for (name, value) in &action.params {
            let param = params.get(name).ok_or_else(|| {
                Error::invalid(
                    format!("{field}.params.{name}"),
                    format!("`{name}` is not a parameter of action {}", action.code),
                )
            })?;
            param.data_type.check(&format!("{field}.params.{name}"), value)?;
        }
        if let Some(missing) = params
            .values()
            .find(|p| p.required && !action.params.contains_key(&p.code))
        {
            return Err(Error::invalid(
                format!("{field}.params.{}", missing.code),
                "is required",
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use serde_json::json;

    use super::*;
    use crate::enums::{Channel, DataType, DeviceType, Readable};
    use crate::ids::{ModelId, TenantId};
    use crate::message::{PayloadAction, PayloadAttribute};
    use crate::records::{ActionParams, ModelAction, ModelAttribute, RecordMeta};

    fn model() -> DeviceModel {
        let attr = |code: &str, data_type, readable| {
            (
                code.to_owned(),
                ModelAttribute {
                    name: None,
                    code: code.to_owned(),
                    data_type,
                    description: None,
                    readable,
                    channel: Channel::M,
                },
            )
        };
        let param = |code: &str, data_type, required| {
            (
                code.to_owned(),
                ActionParams {
                    name: None,
                    code: code.to_owned(),
                    description: None,
                    required,
                    data_type,
                },
            )
        };
        DeviceModel {
            id: ModelId::generate(),
            name: "crane".into(),
            description: None,
            device_type: DeviceType::TowerCrane,
            image_url: None,
            attributes_map: BTreeMap::from([
                attr("load", DataType::Float, Readable::R),
                attr("limit", DataType::Float, Readable::Rw),
                attr("mode", DataType::String, Readable::W),
            ]),
            actions_map: BTreeMap::from([(
                "halt".to_owned(),
                ModelAction {
                    name: None,
                    code: "halt".into(),
                    description: None,
                    params_map: Some(BTreeMap::from([
                        param("delay", DataType::Integer, true),
                        param("why", DataType::String, false),
                    ])),
                },
            )]),
            metadata: Default::default(),
            gateway_id: None,
            record: RecordMeta::created(TenantId::default_tenant(), "t", 0),
        }
    }

    fn attrs(list: &[(&str, serde_json::Value)]) -> Payload {
        Payload {
            attrs: list
                .iter()
                .map(|(c, v)| PayloadAttribute {
                    code: (*c).into(),
                    value: v.clone(),
                    channel: Channel::M,
                })
                .collect(),
            ..Default::default()
        }
    }

    fn action(params: serde_json::Value) -> Payload {
        Payload {
            actions: vec![PayloadAction {
                code: "halt".into(),
                params: params.as_object().unwrap().clone(),
            }],
            ..Default::default()
        }
    }

    fn field_of(result: Result<()>) -> String {
        match result {
            Err(Error::Invalid { field, .. }) => field,
            other => panic!("expected an invalid field, got {other:?}"),
        }
    }

    #[test]
    fn writable_typed_attributes_pass() {
        let m = model();
        assert!(validate_control(&m, &attrs(&[("limit", json!(3.5)), ("mode", json!("eco"))])).is_ok());
        assert_eq!(
            field_of(validate_control(&m, &attrs(&[("load", json!(1.0))]))),
            "payload.attrs[0].code"
        );
        assert_eq!(
            field_of(validate_control(&m, &attrs(&[("nosuch", json!(1.0))]))),
            "payload.attrs[0].code"
        );
        assert_eq!(
            field_of(validate_control(&m, &attrs(&[("limit", json!("high"))]))),
            "payload.attrs[0].value"
        );
        assert_eq!(field_of(validate_control(&m, &Payload::default())), "payload");
    }

    #[test]
    fn action_params_are_checked() {
        let m = model();
        assert!(validate_control(&m, &action(json!({"delay": 5}))).is_ok());
        assert!(validate_control(&m, &action(json!({"delay": 5, "why": "wind"}))).is_ok());
        assert_eq!(
            field_of(validate_control(&m, &action(json!({})))),
            "payload.actions[0].params.delay"
        );
        assert_eq!(
            field_of(validate_control(&m, &action(json!({"delay": "soon"})))),
            "payload.actions[0].params.delay"
        );
        assert_eq!(
            field_of(validate_control(&m, &action(json!({"delay": 1, "x": 1})))),
            "payload.actions[0].params.x"
        );
        let unknown = Payload {
            actions: vec![PayloadAction {
                code: "jump".into(),
                params: Default::default(),
            }],
            ..Default::default()
        };
        assert_eq!(field_of(validate_control(&m, &unknown)), "payload.actions[0].code");
    }
}
