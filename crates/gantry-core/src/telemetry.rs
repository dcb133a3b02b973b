//! Device events and shadows: upstream messages and REST events checked against the device's
//! model, listings and the shadow read. Every write goes through the ingest pipeline, so an
//! event is answered only once it is durable, and an entry the model refuses is never stored.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use crate::alarms::AlarmService;
use crate::cache::TtlCache;
use crate::catalog::CatalogService;
use crate::control::ControlService;
use crate::desired_state::DesiredStateService;
use crate::enums::{DeviceStatus, EventSource, MessageType};
use crate::event::{DeviceEvent, ReportedPosition, Shadow, ShadowAttribute};
use crate::fields::EventFields;
use crate::ids::{DeviceId, EventId, ModelId, ProjectId, TenantId};
use crate::ingest::Ingest;
use crate::message::{MESSAGE_VERSION, Message, MessageMeta, Payload, Refusal};
use crate::names::Code;
use crate::paging::{Page, PageRequest};
use crate::principal::Principal;
use crate::query::{EventFilter, EventQuery, TimeField};
use crate::records::{Device, DeviceModel, JsonMap, ModelAttribute};
use crate::series::{Aggregates, Interval, Series, SeriesFilter, SeriesPoint, SeriesQuery, parse_offset};
use crate::store::Store;
use crate::time::{format_timestamp_in, now_ms, parse_timestamp};
use crate::webhooks::WebhookService;
use crate::{Error, Result};

/// How long a shadow read stays cached. Writes in this process drop it at once; this bounds how
/// late a write through another node on the same database shows.
const SHADOW_CACHE_TTL: Duration = Duration::from_secs(2);

pub struct TelemetryService {
    store: Arc<dyn Store>,
    catalog: Arc<CatalogService>,
    control: Arc<ControlService>,
    /// Acks and reports settle desired values.
    desired: Arc<DesiredStateService>,
    ingest: Ingest,
    /// Committed events go to their project's webhooks, committed with them.
    webhooks: Arc<WebhookService>,
    /// Committed events go through their model's alarm rules.
    alarms: Arc<AlarmService>,
    /// Shadows read lately. Ingest drops a device's entry after each commit and bumps the epoch,
    /// so a read that raced a commit does not put back what it read before it.
    shadows: TtlCache<DeviceId, Arc<Vec<(ShadowAttribute, i64)>>>,
    shadow_epoch: AtomicU64,
    /// Most entries an upstream message may carry; a larger one is refused whole.
    max_attributes: usize,
}

/// Events one retention step deletes: each step is a short transaction, so ingest commits go on
/// between the steps of a long purge.
const RETENTION_BATCH: i64 = 5_000;

/// The default of `--mqtt-max-attributes`.
pub const MAX_ATTRIBUTES: usize = 1000;

/// What became of an upstream MQTT message.
#[derive(Debug, Default)]
pub struct Upstream {
    /// Events stored (durably) from it.
    pub stored: usize,
    /// Entries not stored, and why.
    pub refused: Vec<Refusal>,
    /// The ack to publish to the device's inbox, when the message asked for one.
    pub reply: Option<Message>,
    /// Set when nothing of the message was taken (an MQTT 5 PUBACK says why).
    pub rejected: Option<Rejection>,
}

/// Why a whole upstream message was not taken.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rejection {
    /// Not a Message, or holding text the store cannot keep.
    Malformed,
    /// The device may not send it now: it is Locked, or the type is one devices never send.
    NotAuthorized,
    /// A Message whose every entry the model refused.
    Refused,
}

impl TelemetryService {
    pub fn new(
        store: Arc<dyn Store>,
        catalog: Arc<CatalogService>,
        control: Arc<ControlService>,
        desired: Arc<DesiredStateService>,
        ingest: Ingest,
        webhooks: Arc<WebhookService>,
        alarms: Arc<AlarmService>,
    ) -> Self {
        Self {
            store,
            catalog,
            control,
            desired,
            ingest,
            webhooks,
            alarms,
            shadows: TtlCache::new(SHADOW_CACHE_TTL),
            shadow_epoch: AtomicU64::new(0),
            max_attributes: MAX_ATTRIBUTES,
        }
    }

    /// Sets the most entries an upstream message may carry.
    pub fn set_max_attributes(&mut self, max: usize) {
        self.max_attributes = max;
    }

    /// A message a device published to its upstream topic: type m and log become events (through
    /// the same validation and ingest path as REST), type ack completes a control. Entries that
    /// break the model are refused, not stored; a payload that is not a Message is refused whole.
    pub async fn handle_upstream(&self, tenant: &TenantId, device_id: &DeviceId, bytes: &[u8]) -> Result<Upstream> {
        let arrival = now_ms();
        let message = match self.parse_upstream(bytes) {
            Ok(message) => message,
            Err(reason) => {
                return Ok(Upstream {
                    refused: vec![refusal("", reason)],
                    rejected: Some(Rejection::Malformed),
                    ..Upstream::default()
                });
            }
        };
        let device = self.catalog.load_device(tenant, device_id).await?;
        let mut outcome = Upstream::default();
        match message.meta.message_type {
            _ if device.status == DeviceStatus::Locked => {
                outcome.refused.push(refusal("", "the device is Locked"));
                outcome.rejected = Some(Rejection::NotAuthorized);
            }
            MessageType::Ack => {
                if let Some(answered) = self.control.handle_ack(&device, &message).await? {
                    self.desired.acknowledged(&device, &answered, &message).await?;
                }
            }
            MessageType::C => {
                outcome
                    .refused
                    .push(refusal("", "type c is sent to devices, not by them"));
                outcome.rejected = Some(Rejection::NotAuthorized);
            }
            MessageType::M | MessageType::Log => outcome = self.telemetry(&device, &message, arrival).await?,
        }
        if message.meta.needack {
            outcome.reply = Some(reply_to(&message, &device, &outcome.refused));
        }
        Ok(outcome)
    }

    /// The Message of an upstream payload, or why the whole payload is refused: not a Message,
    /// or more entries than a message may carry.
    fn parse_upstream(&self, bytes: &[u8]) -> std::result::Result<Message, String> {
        match Message::from_device(bytes) {
            Ok(message) if message.payload.attrs.len() > self.max_attributes => Err(format!(
                "payload.attrs: {} entries, more than the {} a message may carry",
                message.payload.attrs.len(),
                self.max_attributes
            )),
            Ok(message) => Ok(message),
            Err(e) => Err(e.to_string()),
        }
    }

    /// A type m or log message: its entries that fit the model become events, committed with
    /// their webhook events and evaluated against the alarm rules; the others are refused.
    async fn telemetry(&self, device: &Device, message: &Message, arrival: i64) -> Result<Upstream> {
        let model = self
            .catalog
            .load_model(&device.record.tenant_id, &device.model_id)
            .await?;
        let device_time = message.meta.ts.map(|s| s.saturating_mul(1000)).unwrap_or(arrival);
        let correlation = Some(message.meta.id.clone()).filter(|id| !id.is_empty());
        let mut outcome = Upstream::default();
        let mut events = Vec::with_capacity(message.payload.attrs.len());
        for attr in &message.payload.attrs {
            match attribute_of(&model, ("code", &attr.code), ("value", &attr.value)) {
                Ok(defined) => events.push(DeviceEvent {
                    id: EventId::generate(),
                    tenant_id: device.record.tenant_id.clone(),
                    project_id: device.project_id.clone(),
                    model_id: device.model_id.clone(),
                    device_id: device.id.clone(),
                    attribute_code: attr.code.clone(),
                    attribute_type: defined.data_type,
                    attribute_data: attr.value.clone(),
                    channel: attr.channel,
                    ingress_time_stamp: arrival,
                    device_timestamp: device_time,
                    correlation_id: correlation.clone(),
                    context: None,
                    created_by: "DEVICE".to_owned(),
                    created_time: arrival,
                    deleted: false,
                }),
                Err(e) => outcome.refused.push(refusal(&attr.code, e.to_string())),
            }
        }
        outcome.stored = events.len();
        if events.is_empty() && !outcome.refused.is_empty() {
            outcome.rejected = Some(Rejection::Refused);
        }
        self.submit(events).await?;
        self.shadow_changed(&device.id);
        self.desired.reported(device, &model, &message.payload.attrs).await?;
        Ok(outcome)
    }

    /// Commits one device's events through ingest, with the webhook events they cause, then
    /// evaluates them against the alarm rules: an alarm is raised before the caller is answered
    /// (before the PUBACK), and a failed evaluation leaves the events committed.
    async fn submit(&self, events: Vec<DeviceEvent>) -> Result<()> {
        let outbox = self.webhooks.outbox_for(&events).await?;
        let woken = !outbox.is_empty();
        // A rule lookup that fails must not refuse the events: they are evaluated anyway, and
        // a failed evaluation is logged and counted.
        let Some(concern) = self.alarms.concerns(&events).await else {
            self.ingest.submit_with(events, outbox).await?;
            if woken {
                self.webhooks.wake();
            }
            return Ok(());
        };
        // The device's alarm writes wait from the evaluation's snapshot until what it computed
        // is durable; the steps that only count into open alarms go with the events.
        let mut evaluation = self
            .alarms
            .begin(&events, concern, self.store.keeps_alarms_with_events())
            .await;
        let keeps = evaluation.take_keeps();
        let evaluated = if evaluation.reads_events_again() {
            events.clone()
        } else {
            Vec::new()
        };
        self.ingest.submit_keeping(events, outbox, keeps).await?;
        if woken {
            self.webhooks.wake();
        }
        self.alarms.finish(evaluation, &evaluated).await;
        Ok(())
    }

    pub fn ingest(&self) -> &Ingest {
        &self.ingest
    }

    /// Validates an event against the device's model, stores it durably (with the shadow
    /// update) and returns it as a Message.
    pub async fn post_event(&self, who: &Principal, input: EventFields) -> Result<Message> {
        let arrival = now_ms();
        let device_id = input
            .device_id
            .ok_or_else(|| Error::invalid("deviceId", "is required"))?;
        let device = self.catalog.load_device(who.tenant(), &device_id).await?;
        who.require_device_write(&device.project_id, &device.id)?;
        if device.status == DeviceStatus::Locked {
            return Err(Error::Conflict(format!("device {} is Locked", device.id)));
        }
        let code = input
            .attribute_code
            .ok_or_else(|| Error::invalid("attributeCode", "is required"))?;
        let value = input
            .attribute_data
            .ok_or_else(|| Error::invalid("attributeData", "is required"))?;
        let model = self.catalog.load_model(who.tenant(), &device.model_id).await?;
        let attribute = attribute_of(&model, ("attributeCode", &code), ("attributeData", &value))?;
        if let Some(declared) = input.attribute_data_type
            && declared != attribute.data_type
        {
            return Err(Error::invalid(
                "attributeDataType",
                format!("`{declared}` differs from the model's dataType {}", attribute.data_type),
            ));
        }
        let device_time = input
            .device_time
            .as_deref()
            .map(|t| parse_timestamp("deviceTime", t))
            .transpose()?
            .unwrap_or(arrival);
        let ingress_time = input
            .ingress_time
            .as_deref()
            .map(|t| parse_timestamp("ingressTime", t))
            .transpose()?
            .unwrap_or(arrival);
        let from_device = matches!(who, Principal::Device { .. }) || input.source == Some(EventSource::SourceDevice);
        let event = DeviceEvent {
            id: EventId::generate(),
            tenant_id: device.record.tenant_id.clone(),
            project_id: device.project_id.clone(),
            model_id: device.model_id.clone(),
            device_id: device.id.clone(),
            attribute_code: code,
            attribute_type: attribute.data_type,
            attribute_data: value,
            channel: input.channel.unwrap_or(attribute.channel),
            ingress_time_stamp: ingress_time,
            device_timestamp: device_time,
            correlation_id: input.correlation_id,
            context: input.context,
            created_by: if from_device { "DEVICE".to_owned() } else { who.actor() },
            created_time: arrival,
            deleted: false,
        };
        let message = Message::of_event(&event);
        self.submit(vec![event]).await?;
        self.shadow_changed(&device.id);
        Ok(message)
    }

    pub async fn get_event(&self, who: &Principal, id: &EventId) -> Result<Message> {
        let event = self.load_event(who, id).await?;
        Ok(Message::of_event(&event))
    }

    pub async fn delete_event(&self, who: &Principal, id: &EventId) -> Result<()> {
        let event = self.load_event(who, id).await?;
        if let Principal::Device { .. } = who {
            return Err(Error::forbidden("a device token cannot delete events"));
        }
        who.require_device_write(&event.project_id, &event.device_id)?;
        if !self.store.delete_event(who.tenant(), &event.id).await? {
            return Err(Error::not_found("device event", id));
        }
        Ok(())
    }

    async fn load_event(&self, who: &Principal, id: &EventId) -> Result<DeviceEvent> {
        let event = self
            .store
            .get_event(who.tenant(), id)
            .await?
            .ok_or_else(|| Error::not_found("device event", id))?;
        who.require_device_read(&event.project_id, &event.device_id)?;
        Ok(event)
    }

    /// Events of a device, newest first by the filtered time, ties by id.
    pub async fn list_events(
        &self,
        who: &Principal,
        device: &DeviceId,
        filter: EventFilter,
        page: PageRequest,
    ) -> Result<Page<DeviceEvent>> {
        let device = self.readable_device(who, device).await?;
        let query = EventQuery {
            device: device.id.clone(),
            attribute_code: filter
                .attribute_code
                .map(|c| Code::parse("attributeCode", &c).map(Code::into_inner))
                .transpose()?,
            time_field: filter
                .filter_by
                .as_deref()
                .map(TimeField::parse)
                .transpose()?
                .unwrap_or(TimeField::Device),
            start: filter
                .start_date
                .as_deref()
                .map(|t| parse_timestamp("startDate", t))
                .transpose()?,
            end: filter
                .end_date
                .as_deref()
                .map(|t| parse_timestamp("endDate", t))
                .transpose()?,
        };
        if let (Some(start), Some(end)) = (query.start, query.end)
            && start > end
        {
            return Err(Error::invalid("endDate", "is before startDate"));
        }
        self.store.list_events(&query, page).await
    }

    /// One attribute's events of a device summed up per bucket, oldest bucket first. The window
    /// defaults to the 24 hours up to `endDate` (default now), the interval to 1h, the
    /// aggregates to avg, min, max and count, the zone to UTC; buckets go by device time unless
    /// `filterBy` picks the arrival time, as in the event listing.
    pub async fn series(&self, who: &Principal, device: &DeviceId, filter: SeriesFilter) -> Result<Series> {
        const DAY_MS: i64 = 86_400_000;
        let device = self.readable_device(who, device).await?;
        let code = filter
            .attribute_code
            .ok_or_else(|| Error::invalid("attributeCode", "is required"))?;
        let code = Code::parse("attributeCode", &code)?.into_inner();
        // A typo must not look like a quiet attribute: a code the model lacks is refused.
        let model = self.catalog.load_model(who.tenant(), &device.model_id).await?;
        if !model.attributes_map.contains_key(&code) {
            return Err(Error::invalid(
                "attributeCode",
                format!("`{code}` is not an attribute of model {}", model.name),
            ));
        }
        let clock = filter
            .filter_by
            .as_deref()
            .map(TimeField::parse)
            .transpose()?
            .unwrap_or(TimeField::Device);
        let time = |field: &str, text: Option<&str>| text.map(|t| parse_timestamp(field, t)).transpose();
        let start = time("startDate", filter.start_date.as_deref())?;
        let end = time("endDate", filter.end_date.as_deref())?.unwrap_or_else(now_ms);
        let start = start.unwrap_or(end - DAY_MS);
        let interval = filter
            .interval
            .as_deref()
            .map(Interval::parse)
            .transpose()?
            .unwrap_or(Interval::Hour);
        let aggregates = filter
            .aggregates
            .as_deref()
            .map(Aggregates::parse)
            .transpose()?
            .unwrap_or_default();
        let offset = filter.time_zone.as_deref().map(parse_offset).transpose()?.unwrap_or(0);
        let query = SeriesQuery::new(
            device.id.clone(),
            code,
            clock,
            (start, end),
            interval,
            offset,
            &aggregates,
        )?;
        let buckets = self.store.series(&query).await?;
        let aggregates = Arc::new(aggregates);
        Ok(Series {
            attribute_code: query.attribute_code,
            interval: interval.as_str(),
            start_date: format_timestamp_in(start, offset),
            end_date: format_timestamp_in(end, offset),
            points: buckets
                .into_iter()
                .map(|bucket| SeriesPoint {
                    bucket,
                    aggregates: aggregates.clone(),
                })
                .collect(),
        })
    }

    /// The tenant of a device named only by its id (on an external broker's topic).
    pub async fn device_tenant(&self, device: &DeviceId) -> Result<Option<TenantId>> {
        self.store.device_tenant(device).await
    }

    /// Deletes the events that arrived more than `days` ago, in batches; returns how many.
    pub async fn apply_retention(&self, days: u32) -> Result<u64> {
        let cutoff = now_ms() - i64::from(days) * 86_400_000;
        let mut deleted = 0;
        loop {
            let n = self.store.delete_events_before(cutoff, RETENTION_BATCH).await?;
            deleted += n;
            if n < RETENTION_BATCH as u64 {
                return Ok(deleted);
            }
        }
    }

    fn shadow_changed(&self, device: &DeviceId) {
        self.shadow_epoch.fetch_add(1, Ordering::SeqCst);
        self.shadows.remove(device);
    }

    pub async fn shadow(&self, who: &Principal, device: &DeviceId) -> Result<Shadow> {
        let device = self.readable_device(who, device).await?;
        let attributes = match self.shadows.get(&device.id) {
            Some(attributes) => attributes,
            None => {
                let epoch = self.shadow_epoch.load(Ordering::SeqCst);
                let attributes = Arc::new(self.store.shadow(who.tenant(), &device.id).await?);
                if self.shadow_epoch.load(Ordering::SeqCst) == epoch {
                    self.shadows.put(device.id.clone(), attributes.clone());
                }
                attributes
            }
        };
        let updated_time = attributes.iter().map(|(_, ingress)| *ingress).max();
        Ok(Shadow {
            id: device.id.clone(),
            attribute_map: attributes.iter().map(|(a, _)| (a.code.clone(), a.clone())).collect(),
            metadata: JsonMap::new(),
            metadata_map: JsonMap::new(),
            tenant_id: device.record.tenant_id.clone(),
            created_by: device.record.created_by.clone(),
            created_time: device.record.created_time,
            updated_time,
            deleted: false,
        })
    }

    /// The newest position text of each device of the project that reports one
    /// (`DeviceModel::position_codes`), in one read; a project the principal may not read is
    /// `NotFound`.
    pub async fn positions(&self, who: &Principal, project: &ProjectId) -> Result<Vec<ReportedPosition>> {
        let models = self.catalog.project_models(who, project).await?;
        let codes: Vec<(ModelId, Vec<String>)> = models
            .into_iter()
            .map(|model| (model.id.clone(), model.position_codes()))
            .filter(|(_, codes)| !codes.is_empty())
            .collect();
        if codes.is_empty() {
            return Ok(Vec::new());
        }
        self.store.project_positions(who.tenant(), project, &codes).await
    }

    async fn readable_device(&self, who: &Principal, id: &DeviceId) -> Result<Arc<Device>> {
        let device = self.catalog.load_device(who.tenant(), id).await?;
        who.require_device_read(&device.project_id, &device.id)?;
        Ok(device)
    }
}

fn refusal(code: &str, reason: impl Into<String>) -> Refusal {
    Refusal {
        code: code.to_owned(),
        reason: reason.into(),
    }
}

/// The model's attribute `code`, after checking that the code follows the naming rule, exists
/// in the model and that `value` is of its type. The pairs name the fields for errors.
fn attribute_of<'m>(
    model: &'m DeviceModel,
    (code_field, code): (&str, &str),
    (value_field, value): (&str, &serde_json::Value),
) -> Result<&'m ModelAttribute> {
    Code::parse(code_field, code)?;
    let attribute = model.attributes_map.get(code).ok_or_else(|| {
        Error::invalid(
            code_field,
            format!("`{code}` is not an attribute of model {}", model.name),
        )
    })?;
    attribute.data_type.check(value_field, value)?;
    Ok(attribute)
}

/// The ack a device asked for (`needack`), listing the entries that were refused.
fn reply_to(message: &Message, device: &Device, refused: &[Refusal]) -> Message {
    Message {
        meta: MessageMeta {
            id: EventId::generate().to_string(),
            message_type: MessageType::Ack,
            deviceid: Some(device.id.to_string()),
            version: Some(MESSAGE_VERSION.into()),
            ts: Some(now_ms().div_euclid(1000)),
            needack: false,
            correlation_id: Some(message.meta.id.clone()),
        },
        payload: Payload {
            refused: refused.to_vec(),
            ..Payload::default()
        },
    }
}
