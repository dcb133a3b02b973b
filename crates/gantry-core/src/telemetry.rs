//! Device events and shadows: validation of incoming values against the device's model, the
//! Message shape, listings and the shadow read. Writes go through the ingest pipeline.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::auth::Principal;
use crate::cache::TtlCache;
use crate::catalog::CatalogService;
use crate::control::ControlService;
use crate::enums::{Channel, DataType, DeviceStatus, EventSource, MessageType};
use crate::ids::{DeviceId, EventId, ModelId, ProjectId, TenantId};
use crate::ingest::Ingest;
use crate::names::Code;
use crate::paging::{Page, PageRequest};
use crate::records::{Device, DeviceModel, JsonMap, ModelAttribute};
use crate::store::Store;
use crate::time::{now_ms, parse_timestamp};
use crate::{Error, Result};

/// How long a shadow read stays cached. Writes in this process drop it at once; this bounds how
/// late a write through another node on the same database shows.
const SHADOW_CACHE_TTL: Duration = Duration::from_secs(2);

/// A stored device event (`DeviceEvent`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct DeviceEvent {
    pub id: EventId,
    pub tenant_id: TenantId,
    pub project_id: ProjectId,
    pub model_id: ModelId,
    pub device_id: DeviceId,
    pub attribute_code: String,
    /// The model's data type of the attribute.
    pub attribute_type: DataType,
    /// The value.
    #[schema(value_type = serde_json::Value)]
    pub attribute_data: serde_json::Value,
    pub channel: Channel,
    /// When the event arrived, epoch milliseconds.
    #[serde(rename = "ingressTimeStamp")]
    pub ingress_time_stamp: i64,
    /// When the device produced it, epoch milliseconds.
    pub device_timestamp: i64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub correlation_id: Option<String>,
    /// Additional attributes sent with the event (`context`), as sent.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Object>)]
    pub context: Option<JsonMap>,
    /// `DEVICE` for events a device sent; otherwise the REST caller.
    pub created_by: String,
    pub created_time: i64,
    pub deleted: bool,
}

/// `POST /api/v1/deviceEvents` body.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct EventInput {
    #[schema(required = true)]
    pub device_id: Option<DeviceId>,
    /// Display name; not stored (the model holds the attribute's name).
    pub attribute_name: Option<String>,
    #[schema(required = true)]
    pub attribute_code: Option<String>,
    /// The value; its type must be the model's dataType of the attribute.
    #[schema(value_type = serde_json::Value, required = true)]
    pub attribute_data: Option<serde_json::Value>,
    /// When given, must equal the model's dataType.
    pub attribute_data_type: Option<DataType>,
    /// yyyy-MM-dd'T'HH:mm:ss.SSS+HHmm; default: when the request arrives.
    #[schema(pattern = r"^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}\.[0-9]{3}[+-][0-9]{4}$")]
    pub ingress_time: Option<String>,
    /// yyyy-MM-dd'T'HH:mm:ss.SSS+HHmm; default: when the request arrives.
    #[schema(pattern = r"^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}\.[0-9]{3}[+-][0-9]{4}$")]
    pub device_time: Option<String>,
    pub source: Option<EventSource>,
    /// Default: the model's channel of the attribute.
    pub channel: Option<Channel>,
    #[schema(value_type = Option<Object>)]
    pub context: Option<JsonMap>,
    pub correlation_id: Option<String>,
}

/// `meta` of a Message.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct MessageMeta {
    /// A device may leave it out; the service then assigns one (see `Message::from_device`).
    #[serde(default)]
    pub id: String,
    #[serde(rename = "type", default = "default_type")]
    pub message_type: MessageType,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub deviceid: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    /// Unix time in seconds.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ts: Option<i64>,
    #[serde(default)]
    pub needack: bool,
    #[serde(rename = "correlationId", skip_serializing_if = "Option::is_none")]
    pub correlation_id: Option<String>,
}

fn default_type() -> MessageType {
    MessageType::M
}

/// An attribute value in a Message.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct PayloadAttribute {
    pub code: String,
    #[schema(value_type = serde_json::Value)]
    pub value: serde_json::Value,
    #[serde(default = "default_channel")]
    pub channel: Channel,
}

fn default_channel() -> Channel {
    Channel::M
}

/// An action call in a Message.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct PayloadAction {
    pub code: String,
    #[serde(default)]
    #[schema(value_type = Object)]
    pub params: JsonMap,
}

/// `payload` of a Message.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct Payload {
    #[serde(default)]
    pub attrs: Vec<PayloadAttribute>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub actions: Vec<PayloadAction>,
    /// In the service's acks to upstream messages only: the entries that were not stored, and why.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub refused: Vec<Refusal>,
}

/// An entry of an upstream message that was not stored.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct Refusal {
    /// The attribute code, or empty when the whole message was refused.
    pub code: String,
    pub reason: String,
}

/// The Message: what devices and the service exchange, and what an event reads as.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct Message {
    pub meta: MessageMeta,
    #[serde(default)]
    pub payload: Payload,
}

/// The version string of the Messages the service writes.
pub const MESSAGE_VERSION: &str = "1.0";

impl Message {
    /// An event as a Message: `meta.id` is the event id, `meta.ts` the device time in seconds.
    pub fn of_event(event: &DeviceEvent) -> Self {
        Message {
            meta: MessageMeta {
                id: event.id.to_string(),
                message_type: MessageType::M,
                deviceid: Some(event.device_id.to_string()),
                version: Some(MESSAGE_VERSION.to_owned()),
                ts: Some(event.device_timestamp.div_euclid(1000)),
                needack: false,
                correlation_id: None,
            },
            payload: Payload {
                attrs: vec![PayloadAttribute {
                    code: event.attribute_code.clone(),
                    value: event.attribute_data.clone(),
                    channel: event.channel,
                }],
                ..Payload::default()
            },
        }
    }
}

/// One attribute of a shadow.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct ShadowAttribute {
    pub code: String,
    #[schema(value_type = serde_json::Value)]
    pub value: serde_json::Value,
    /// Device time of the value, epoch milliseconds.
    pub timestamp: i64,
}

/// A device shadow: the latest value of each attribute, by device time.
#[derive(Debug, Clone, PartialEq, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct Shadow {
    /// The device id: a device has exactly one shadow.
    pub id: DeviceId,
    #[serde(rename = "attributeMap")]
    pub attribute_map: BTreeMap<String, ShadowAttribute>,
    #[schema(value_type = Object)]
    pub metadata: JsonMap,
    /// The same map under the name the specification's sample response uses.
    #[serde(rename = "metadataMap")]
    #[schema(value_type = Object)]
    pub metadata_map: JsonMap,
    pub tenant_id: TenantId,
    pub created_by: String,
    pub created_time: i64,
    /// When the shadow last changed (arrival time of the newest value it holds).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub updated_time: Option<i64>,
    pub deleted: bool,
}

/// Which time a listing's date range applies to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TimeField {
    Device,
    Ingress,
}

impl TimeField {
    pub fn parse(text: &str) -> Result<Self> {
        match text {
            "deviceTimestamp" => Ok(TimeField::Device),
            "ingressTimeStamp" => Ok(TimeField::Ingress),
            _ => Err(Error::invalid(
                "filterBy",
                format!("`{text}` is not one of deviceTimestamp, ingressTimeStamp"),
            )),
        }
    }
}

/// Filters of an event listing: one device, optionally one attribute, an inclusive time range.
#[derive(Debug, Clone)]
pub struct EventQuery {
    pub device: DeviceId,
    pub attribute_code: Option<String>,
    pub time_field: TimeField,
    pub start: Option<i64>,
    pub end: Option<i64>,
}

/// The raw listing parameters, as the API receives them.
#[derive(Debug, Clone, Default)]
pub struct EventFilter {
    pub attribute_code: Option<String>,
    pub start_date: Option<String>,
    pub end_date: Option<String>,
    pub filter_by: Option<String>,
}

pub struct TelemetryService {
    store: Arc<dyn Store>,
    catalog: Arc<CatalogService>,
    control: Arc<ControlService>,
    ingest: Ingest,
    /// Shadows read lately. Ingest drops a device's entry after each commit and bumps the epoch,
    /// so a read that raced a commit does not put back what it read before it.
    shadows: TtlCache<DeviceId, Arc<Vec<(ShadowAttribute, i64)>>>,
    shadow_epoch: AtomicU64,
    /// Most entries an upstream message may carry; a larger one is refused whole.
    max_attributes: usize,
}

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

impl Message {
    /// A message a device or a route caller sent: it must be a Message without NUL characters
    /// (which no store keeps); a missing `meta.id` is assigned, so its events and log records
    /// can be told apart and acked.
    pub fn from_device(bytes: &[u8]) -> Result<Message> {
        if crate::text::json_has_nul(bytes) {
            return Err(crate::text::nul_error(bytes));
        }
        let mut message: Message =
            serde_json::from_slice(bytes).map_err(|e| Error::invalid("payload", format!("not a Message: {e}")))?;
        if message.meta.id.is_empty() {
            message.meta.id = EventId::generate().to_string();
        }
        Ok(message)
    }
}

impl TelemetryService {
    pub fn new(
        store: Arc<dyn Store>,
        catalog: Arc<CatalogService>,
        control: Arc<ControlService>,
        ingest: Ingest,
    ) -> Self {
        Self {
            store,
            catalog,
            control,
            ingest,
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
        let message = match Message::from_device(bytes) {
            Ok(message) if message.payload.attrs.len() > self.max_attributes => {
                return Ok(Upstream {
                    refused: vec![refusal(
                        "",
                        format!(
                            "payload.attrs: {} entries, more than the {} a message may carry",
                            message.payload.attrs.len(),
                            self.max_attributes
                        ),
                    )],
                    rejected: Some(Rejection::Malformed),
                    ..Upstream::default()
                });
            }
            Ok(message) => message,
            Err(e) => {
                return Ok(Upstream {
                    refused: vec![refusal("", e.to_string())],
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
            MessageType::Ack => self.control.handle_ack(&device, &message).await?,
            MessageType::C => {
                outcome
                    .refused
                    .push(refusal("", "type c is sent to devices, not by them"));
                outcome.rejected = Some(Rejection::NotAuthorized);
            }
            MessageType::M | MessageType::Log => {
                let model = self.catalog.load_model(tenant, &device.model_id).await?;
                let device_time = message.meta.ts.map(|s| s.saturating_mul(1000)).unwrap_or(arrival);
                let correlation = Some(message.meta.id.clone()).filter(|id| !id.is_empty());
                let mut events = Vec::with_capacity(message.payload.attrs.len());
                for attr in &message.payload.attrs {
                    match attribute_of(&model, ("code", &attr.code), ("value", &attr.value)) {
                        Ok(defined) => events.push(DeviceEvent {
                            id: EventId::generate(),
                            tenant_id: tenant.clone(),
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
                self.ingest.submit(events).await?;
                self.shadow_changed(&device.id);
            }
        }
        if message.meta.needack {
            outcome.reply = Some(Message {
                meta: MessageMeta {
                    id: EventId::generate().to_string(),
                    message_type: MessageType::Ack,
                    deviceid: Some(device.id.to_string()),
                    version: Some(MESSAGE_VERSION.to_owned()),
                    ts: Some(now_ms().div_euclid(1000)),
                    needack: false,
                    correlation_id: Some(message.meta.id.clone()),
                },
                payload: Payload {
                    refused: outcome.refused.clone(),
                    ..Payload::default()
                },
            });
        }
        Ok(outcome)
    }

    pub fn ingest(&self) -> &Ingest {
        &self.ingest
    }

    /// Validates an event against the device's model, stores it durably (with the shadow
    /// update) and returns it as a Message.
    pub async fn post_event(&self, who: &Principal, input: EventInput) -> Result<Message> {
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
        self.ingest.submit(vec![event]).await?;
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

    /// The tenant of a device named only by its id (on an external broker's topic).
    pub async fn device_tenant(&self, device: &DeviceId) -> Result<Option<TenantId>> {
        self.store.device_tenant(device).await
    }

    /// Deletes the events that arrived more than `days` ago, in batches; returns how many.
    pub async fn apply_retention(&self, days: u32) -> Result<u64> {
        let cutoff = now_ms() - i64::from(days) * 86_400_000;
        let mut deleted = 0;
        loop {
            let n = self.store.delete_events_before(cutoff, 5_000).await?;
            deleted += n;
            if n < 5_000 {
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
    check_value(value_field, attribute.data_type, value)?;
    Ok(attribute)
}

/// Checks a value against a data type, naming `field`.
pub fn check_value(field: &str, data_type: DataType, value: &serde_json::Value) -> Result<()> {
    if data_type.accepts(value) {
        Ok(())
    } else {
        Err(Error::invalid(
            field,
            format!("`{value}` is not a value of type {data_type}"),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn message_of_event_has_the_event_id_and_seconds() {
        let event = DeviceEvent {
            id: EventId::from_string("e1"),
            tenant_id: TenantId::default_tenant(),
            project_id: ProjectId::from_string("p"),
            model_id: ModelId::from_string("m"),
            device_id: DeviceId::from_string("d"),
            attribute_code: "temp".into(),
            attribute_type: DataType::Float,
            attribute_data: json!(21.5),
            channel: Channel::W,
            ingress_time_stamp: 1_700_000_000_999,
            device_timestamp: 1_700_000_000_999,
            correlation_id: None,
            context: None,
            created_by: "DEVICE".into(),
            created_time: 0,
            deleted: false,
        };
        let m = serde_json::to_value(Message::of_event(&event)).unwrap();
        assert_eq!(m["meta"]["id"], "e1");
        assert_eq!(m["meta"]["ts"], 1_700_000_000);
        assert_eq!(m["meta"]["type"], "m");
        assert_eq!(
            m["payload"]["attrs"],
            json!([{"code": "temp", "value": 21.5, "channel": "w"}])
        );
        let listed = serde_json::to_value(&event).unwrap();
        assert_eq!(listed["ingressTimeStamp"], 1_700_000_000_999_i64);
        assert_eq!(listed["deviceTimestamp"], 1_700_000_000_999_i64);
    }

    #[test]
    fn numbers_read_back_as_sent() {
        // Found by fuzzing: an integer past u64 parsed to a double one unit off the nearest, so
        // the stored value changed when read back.
        let sent = br#"{"meta":{"id":"x"},"payload":{"attrs":[{"code":"h","value":180446744073709961121},{"code":"f","value":1e308},{"code":"g","value":0.30000000000000004}]}}"#;
        let message = Message::from_device(sent).unwrap();
        assert_eq!(message.payload.attrs[0].value.as_f64(), Some(180446744073709961121.0));
        let written = serde_json::to_vec(&message).unwrap();
        assert_eq!(Message::from_device(&written).unwrap(), message);
    }

    #[test]
    fn filter_by_names() {
        assert_eq!(TimeField::parse("ingressTimeStamp").unwrap(), TimeField::Ingress);
        assert!(
            TimeField::parse("whenever")
                .unwrap_err()
                .to_string()
                .starts_with("filterBy")
        );
    }
}
