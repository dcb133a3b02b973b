//! The request bodies of the API, and the one response that is not a stored record: the wire
//! types, with their serde names and OpenAPI schemas. Each becomes the core's form of the same
//! request (`gantry_core::fields`) before a service sees it; the services check the values.

use std::collections::BTreeMap;

use gantry_core::catalog::TenantAdmin;
use gantry_core::enums::{
    Channel, DataType, DeviceStatus, DeviceType, EventSource, MessageType, ProjectStatus, Readable, SourceType,
};
use gantry_core::fields::{
    ActionFields, AttributeFields, ControlFields, DeviceFields, EventFields, ModelFields, ParamFields, ProjectFields,
    RouteFields,
};
use gantry_core::ids::{DeviceId, ModelId, ProjectId};
use gantry_core::message::Payload;
use gantry_core::records::{JsonMap, Tenant};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::extract::{Body, UnknownFields};

/// The output-only fields every stored record has (`RecordMeta` and its id).
macro_rules! record_fields {
    ($($more:literal),* $(,)?) => {
        &["id", "tenantId", "createdBy", "createdTime", "updatedBy", "updatedTime", "deleted", $($more),*]
    };
}

/// A body refuses unknown fields but the record's output-only ones (`UnknownFields::Refused`).
macro_rules! body {
    ($ty:ty, $echoed:expr) => {
        impl Body for $ty {
            const UNKNOWN_FIELDS: UnknownFields = UnknownFields::Refused { echoed: $echoed };
        }
    };
}

body!(RotateInput, &[]);
body!(TenantInput, record_fields!());
body!(ModelInput, record_fields!());
body!(
    ProjectInput,
    record_fields!("applicationAccessToken", "restfulApiAddr", "mqApiAddr")
);
body!(
    DeviceInput,
    record_fields!(
        "accessToken",
        "deviceModelType",
        "deviceModelName",
        "projectName",
        "hasActions",
        "deviceModelUrl",
    )
);
// A stored event's listing form (`DeviceEvent`).
body!(
    EventInput,
    record_fields!(
        "projectId",
        "modelId",
        "attributeType",
        "ingressTimeStamp",
        "deviceTimestamp"
    )
);
body!(ControlInput, &[]);
body!(RouteInput, &[]);
body!(WebhookInput, record_fields!("projectId"));
body!(AlarmRuleInput, record_fields!("modelId", "status"));
body!(CommentInput, &[]);

/// Body of the rotation endpoints: how long the replaced token keeps working.
#[derive(Debug, Clone, Default, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct RotateInput {
    /// 0 (default: the old token stops at once) to 86400 seconds.
    #[schema(minimum = 0, maximum = 86400)]
    pub grace_seconds: Option<i64>,
}

/// `POST /api/v1/tenants` body.
#[derive(Debug, Clone, Deserialize, ToSchema)]
pub struct TenantInput {
    /// 1 to 128 characters, no control characters; trimmed.
    #[schema(min_length = 1, max_length = 128, pattern = r"^[^\u0000-\u001f\u007f-\u009f]*$")]
    pub name: String,
}

/// A tenant just created, with its administrator's token (shown this once).
#[derive(Debug, Clone, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct CreatedTenant {
    #[serde(flatten)]
    pub tenant: Tenant,
    pub admin_token: String,
}

/// An attribute as a request sends it.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct AttributeInput {
    pub name: Option<String>,
    /// Defaults to the map key; when given it must equal the key.
    pub code: Option<String>,
    pub data_type: DataType,
    pub description: Option<String>,
    /// Defaults to R.
    pub readable: Option<Readable>,
    /// Defaults to m.
    pub channel: Option<Channel>,
}

/// An action parameter as a request sends it.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ParamInput {
    pub name: Option<String>,
    pub code: Option<String>,
    pub description: Option<String>,
    pub required: Option<bool>,
    #[serde(rename = "type")]
    pub data_type: DataType,
}

/// An action as a request sends it.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ActionInput {
    pub name: Option<String>,
    pub code: Option<String>,
    pub description: Option<String>,
    pub params_map: Option<BTreeMap<String, ParamInput>>,
}

/// Body of model creation and update. On update, absent fields keep their stored values.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ModelInput {
    /// 1 to 128 characters, no control characters; trimmed. Required on creation.
    #[schema(min_length = 1, max_length = 128, pattern = r"^[^\u0000-\u001f\u007f-\u009f]*$")]
    pub name: Option<String>,
    pub description: Option<String>,
    /// Defaults to ROOT on creation.
    pub device_type: Option<DeviceType>,
    pub image_url: Option<String>,
    pub attributes_map: Option<BTreeMap<String, AttributeInput>>,
    pub actions_map: Option<BTreeMap<String, ActionInput>>,
    #[schema(value_type = Option<Object>)]
    pub metadata: Option<JsonMap>,
    pub gateway_id: Option<String>,
}

/// Body of project creation and update. On update, absent fields keep their stored values.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ProjectInput {
    /// 1 to 128 characters, no control characters; trimmed. Required on creation.
    #[schema(min_length = 1, max_length = 128, pattern = r"^[^\u0000-\u001f\u007f-\u009f]*$")]
    pub name: Option<String>,
    pub description: Option<String>,
    pub image_url: Option<String>,
    /// Defaults to development on creation.
    pub status: Option<ProjectStatus>,
    pub address: Option<String>,
    #[schema(value_type = Option<Object>)]
    pub map_info: Option<JsonMap>,
    #[schema(value_type = Option<Object>)]
    pub metadata: Option<JsonMap>,
    pub template_id: Option<String>,
}

/// Body of device creation and update. On update, absent fields keep their stored values and
/// `modelId` cannot change.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct DeviceInput {
    /// 1 to 128 characters, no control characters; trimmed. Required on creation.
    #[schema(min_length = 1, max_length = 128, pattern = r"^[^\u0000-\u001f\u007f-\u009f]*$")]
    pub device_name: Option<String>,
    pub project_id: Option<ProjectId>,
    pub model_id: Option<ModelId>,
    /// Defaults to Active on creation.
    pub status: Option<DeviceStatus>,
    pub comments: Option<String>,
    /// Defaults to false on creation.
    #[serde(rename = "virtual")]
    pub virtual_: Option<bool>,
    /// The name responses use for `virtual`, accepted too; when both are sent they must agree.
    pub is_virtual: Option<bool>,
    #[schema(value_type = Option<Object>)]
    pub metadata: Option<JsonMap>,
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

/// `PUT /api/v1/devices/{deviceId}/shadows` body.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ControlInput {
    /// m (default), ack or c.
    #[serde(rename = "type")]
    pub message_type: Option<MessageType>,
    #[serde(default)]
    pub needack: bool,
    /// Required for type ack: the id of the request message.
    pub correlation_id: Option<String>,
    pub context_id: Option<String>,
    pub payload: Option<Payload>,
    /// 0 (default) to 604800 seconds. With more than 0 and the device not connected, the
    /// control waits in the store (its event log `processing`, with `expiresTime`) and is
    /// delivered when the device connects, in the order controls were sent; the ack deadline
    /// counts from the delivery. Not delivered by `expiresTime`: `exception`, reason `expired`.
    #[schema(minimum = 0, maximum = 604800)]
    pub ttl_seconds: Option<i64>,
}

/// `POST /api/v1/devices/{deviceId}/routes` body.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct RouteInput {
    /// APP (application), WEB (web page) or DEVICE (another device).
    #[schema(required = true)]
    pub source_type: Option<SourceType>,
    /// Whether the target device's acks are forwarded to the caller's ack topic.
    #[serde(default)]
    pub need_resp: bool,
    /// Required for DEVICE: the device that will send.
    pub source_device_id: Option<DeviceId>,
    /// Required for DEVICE: that device's accessToken.
    pub source_device_key: Option<String>,
}

impl From<TenantAdmin> for CreatedTenant {
    fn from(created: TenantAdmin) -> Self {
        CreatedTenant {
            tenant: created.tenant,
            admin_token: created.admin_token,
        }
    }
}

impl From<AttributeInput> for AttributeFields {
    fn from(a: AttributeInput) -> Self {
        AttributeFields {
            name: a.name,
            code: a.code,
            data_type: a.data_type,
            description: a.description,
            readable: a.readable,
            channel: a.channel,
        }
    }
}

impl From<ParamInput> for ParamFields {
    fn from(p: ParamInput) -> Self {
        ParamFields {
            name: p.name,
            code: p.code,
            description: p.description,
            required: p.required,
            data_type: p.data_type,
        }
    }
}

impl From<ActionInput> for ActionFields {
    fn from(a: ActionInput) -> Self {
        ActionFields {
            name: a.name,
            code: a.code,
            description: a.description,
            params_map: a.params_map.map(into_map),
        }
    }
}

impl From<ModelInput> for ModelFields {
    fn from(m: ModelInput) -> Self {
        ModelFields {
            name: m.name,
            description: m.description,
            device_type: m.device_type,
            image_url: m.image_url,
            attributes_map: m.attributes_map.map(into_map),
            actions_map: m.actions_map.map(into_map),
            metadata: m.metadata,
            gateway_id: m.gateway_id,
        }
    }
}

impl From<ProjectInput> for ProjectFields {
    fn from(p: ProjectInput) -> Self {
        ProjectFields {
            name: p.name,
            description: p.description,
            image_url: p.image_url,
            status: p.status,
            address: p.address,
            map_info: p.map_info,
            metadata: p.metadata,
            template_id: p.template_id,
        }
    }
}

impl TryFrom<DeviceInput> for DeviceFields {
    type Error = gantry_core::Error;

    fn try_from(d: DeviceInput) -> Result<Self, Self::Error> {
        let is_virtual = match (d.virtual_, d.is_virtual) {
            (Some(a), Some(b)) if a != b => {
                return Err(gantry_core::Error::invalid(
                    "isVirtual",
                    "differs from virtual; send one of them",
                ));
            }
            (a, b) => a.or(b),
        };
        Ok(DeviceFields {
            device_name: d.device_name,
            project_id: d.project_id,
            model_id: d.model_id,
            status: d.status,
            comments: d.comments,
            is_virtual,
            metadata: d.metadata,
        })
    }
}

impl From<EventInput> for EventFields {
    fn from(e: EventInput) -> Self {
        EventFields {
            device_id: e.device_id,
            attribute_code: e.attribute_code,
            attribute_data: e.attribute_data,
            attribute_data_type: e.attribute_data_type,
            ingress_time: e.ingress_time,
            device_time: e.device_time,
            source: e.source,
            channel: e.channel,
            context: e.context,
            correlation_id: e.correlation_id,
        }
    }
}

impl From<ControlInput> for ControlFields {
    fn from(c: ControlInput) -> Self {
        ControlFields {
            message_type: c.message_type,
            needack: c.needack,
            correlation_id: c.correlation_id,
            context_id: c.context_id,
            payload: c.payload,
            ttl_seconds: c.ttl_seconds,
        }
    }
}

impl From<RouteInput> for RouteFields {
    fn from(r: RouteInput) -> Self {
        RouteFields {
            source_type: r.source_type,
            need_resp: r.need_resp,
            source_device_id: r.source_device_id,
            source_device_key: r.source_device_key,
        }
    }
}

fn into_map<A, B: From<A>>(map: BTreeMap<String, A>) -> BTreeMap<String, B> {
    map.into_iter().map(|(key, value)| (key, value.into())).collect()
}

/// `POST /api/v1/projects/{projectId}/webhooks` and `PUT /api/v1/webhooks/{webhookId}` body. On
/// a PUT every field is optional, and an absent one stays as it was.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct WebhookInput {
    /// Required on POST: where the deliveries are POSTed; http or https. Loopback, private,
    /// link-local and metadata addresses (also a name that resolves to one, checked before each
    /// delivery) are refused unless the server runs with `--webhook-allow-private`.
    #[schema(max_length = 2048)]
    pub url: Option<String>,
    /// Required on POST: the event types delivered, at least one of telemetry, shadow, eventLog,
    /// connection, alarm.
    #[schema(value_type = Option<Vec<gantry_core::stream::StreamType>>, min_items = 1)]
    pub types: Option<Vec<String>>,
    /// The HMAC key of `X-Gantry-Signature`, 16 to 256 printable ASCII characters; generated
    /// when absent on POST. It is shown in the POST's answer only.
    #[schema(min_length = 16, max_length = 256)]
    pub secret: Option<String>,
    /// Up to 1024 characters; empty removes it.
    #[schema(max_length = 1024)]
    pub description: Option<String>,
    /// Default true. A disabled webhook gets no events, and its deliveries wait.
    pub enabled: Option<bool>,
}

impl From<WebhookInput> for gantry_core::webhook::WebhookFields {
    fn from(w: WebhookInput) -> Self {
        gantry_core::webhook::WebhookFields {
            url: w.url,
            types: w.types,
            secret: w.secret,
            description: w.description,
            enabled: w.enabled,
        }
    }
}

/// `PATCH /api/v1/devices/{deviceId}/desired` body.
#[derive(Debug, Clone, Deserialize, ToSchema)]
pub struct DesiredInput {
    /// Per attribute code, its desired value (typed as the model's attribute), or null to
    /// remove it. Each must be a W or RW attribute of the device's model.
    #[schema(value_type = Object)]
    pub attributes: std::collections::BTreeMap<String, Option<serde_json::Value>>,
}

body!(DesiredInput, &[]);

/// Body of `POST /deviceModels/{modelId}/alarmRules` and `PUT /alarmRules/{ruleId}` (which
/// replaces the rule).
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct AlarmRuleInput {
    /// Required: the alarms' name, 1 to 128 characters.
    #[schema(min_length = 1, max_length = 128)]
    pub name: Option<String>,
    /// Required: an attribute of the model.
    pub attribute_code: Option<String>,
    /// Required: CRITICAL, MAJOR, MINOR or WARNING.
    #[schema(value_type = Option<gantry_core::enums::Severity>)]
    pub severity: Option<String>,
    /// Required unless `noDataSeconds` is given.
    pub condition: Option<gantry_core::alarm_rule::ConditionSpec>,
    /// 0 (default) to 604800: how long (device time) the condition must hold on every event.
    #[schema(minimum = 0, maximum = 604800)]
    pub for_seconds: Option<i64>,
    /// Higher severities, each above `severity`, with their own condition and `forSeconds`.
    pub escalations: Option<Vec<gantry_core::alarm_rule::EscalationSpec>>,
    /// What clears the alarm (default: `condition` no longer holds).
    pub clear_condition: Option<gantry_core::alarm_rule::ConditionSpec>,
    /// 0 (default) to 604800: how long the clear condition must hold.
    #[schema(minimum = 0, maximum = 604800)]
    pub clear_for_seconds: Option<i64>,
    /// 1 to 604800: raise when the device sends nothing for the attribute this long.
    #[schema(minimum = 1, maximum = 604800)]
    pub no_data_seconds: Option<i64>,
    #[schema(max_length = 1024)]
    pub description: Option<String>,
    /// Default true.
    pub enabled: Option<bool>,
}

impl From<AlarmRuleInput> for gantry_core::alarm_rule::AlarmRuleFields {
    fn from(r: AlarmRuleInput) -> Self {
        gantry_core::alarm_rule::AlarmRuleFields {
            name: r.name,
            attribute_code: r.attribute_code,
            severity: r.severity,
            condition: r.condition,
            for_seconds: r.for_seconds,
            escalations: r.escalations,
            clear_condition: r.clear_condition,
            clear_for_seconds: r.clear_for_seconds,
            no_data_seconds: r.no_data_seconds,
            description: r.description,
            enabled: r.enabled,
        }
    }
}

/// Body of `POST /alarms/{alarmId}/comments`.
#[derive(Debug, Clone, Deserialize, ToSchema)]
pub struct CommentInput {
    /// Required: 1 to 4096 characters.
    #[schema(min_length = 1, max_length = 4096)]
    pub text: Option<String>,
}
