//! Device events and shadows as stored and as listings show them. A shadow holds, per
//! attribute, the value with the newest device time.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::enums::{Channel, DataType};
use crate::ids::{DeviceId, EventId, ModelId, ProjectId, TenantId};
use crate::records::JsonMap;

/// How many events of a project were stored in one minute (`event_rate`): a row of the
/// per-minute counts the project overview charts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EventMinute {
    pub tenant_id: TenantId,
    pub project_id: ProjectId,
    /// The minute's start, epoch milliseconds (a multiple of 60,000).
    pub minute: i64,
    pub events: u64,
}

/// A stored device event (`DeviceEvent`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
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
    #[cfg_attr(feature = "openapi", schema(value_type = serde_json::Value))]
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
    #[cfg_attr(feature = "openapi", schema(value_type = Option<Object>))]
    pub context: Option<JsonMap>,
    /// `DEVICE` for events a device sent; otherwise the REST caller.
    pub created_by: String,
    pub created_time: i64,
    pub deleted: bool,
}

/// One attribute of a shadow.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ShadowAttribute {
    pub code: String,
    #[cfg_attr(feature = "openapi", schema(value_type = serde_json::Value))]
    pub value: serde_json::Value,
    /// Device time of the value, epoch milliseconds.
    pub timestamp: i64,
}

/// A device's newest position text as its shadow holds it (`EventStore::project_positions`):
/// the newest by device time of its model's position attributes (`DeviceModel::position_codes`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReportedPosition {
    pub device: DeviceId,
    pub device_name: String,
    /// The attribute's value, unparsed (`"lat,lng"` when the device follows the contract).
    pub value: String,
}

/// A device shadow: the latest value of each attribute, by device time.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct Shadow {
    /// The device id: a device has exactly one shadow.
    pub id: DeviceId,
    #[serde(rename = "attributeMap")]
    pub attribute_map: BTreeMap<String, ShadowAttribute>,
    #[cfg_attr(feature = "openapi", schema(value_type = Object))]
    pub metadata: JsonMap,
    /// The same map under the name the specification's sample response uses.
    #[serde(rename = "metadataMap")]
    #[cfg_attr(feature = "openapi", schema(value_type = Object))]
    pub metadata_map: JsonMap,
    pub tenant_id: TenantId,
    pub created_by: String,
    pub created_time: i64,
    /// When the shadow last changed (arrival time of the newest value it holds).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub updated_time: Option<i64>,
    pub deleted: bool,
}
