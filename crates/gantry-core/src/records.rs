//! The stored records as the API shows them: field names and spellings are the specification's.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::enums::{Channel, DataType, DeviceStatus, DeviceType, ProjectStatus, Readable};
use crate::ids::{DeviceId, ModelId, ProjectId, TenantId};

/// A free-form JSON object (`metadata`, `mapInfo`), stored and returned as sent.
pub type JsonMap = serde_json::Map<String, serde_json::Value>;

/// The fields every stored record carries.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct RecordMeta {
    pub tenant_id: TenantId,
    /// Who created the record: `admin`, `application:<projectId>`, `DEVICE` or `system`.
    pub created_by: String,
    /// Epoch milliseconds.
    pub created_time: i64,
    /// Present after an update.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub updated_by: Option<String>,
    /// Present after an update; epoch milliseconds.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub updated_time: Option<i64>,
    pub deleted: bool,
}

impl RecordMeta {
    pub fn created(tenant_id: TenantId, by: &str, at: i64) -> Self {
        Self {
            tenant_id,
            created_by: by.to_owned(),
            created_time: at,
            updated_by: None,
            updated_time: None,
            deleted: false,
        }
    }

    pub fn touch(&mut self, by: &str, at: i64) {
        self.updated_by = Some(by.to_owned());
        self.updated_time = Some(at.max(self.created_time));
    }
}

/// A tenant: a customer with its own models, projects and devices.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct Tenant {
    pub id: TenantId,
    pub name: String,
    #[serde(flatten)]
    pub record: RecordMeta,
}

/// An attribute a device of the model reports or receives.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct ModelAttribute {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    pub code: String,
    pub data_type: DataType,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    pub readable: Readable,
    pub channel: Channel,
}

/// A parameter of an action.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct ActionParams {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    pub code: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// Whether the parameter must be passed; false when the request omitted it.
    pub required: bool,
    #[serde(rename = "type")]
    pub data_type: DataType,
}

/// An action a device of the model can execute.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct ModelAction {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    pub code: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub params_map: Option<BTreeMap<String, ActionParams>>,
}

/// A device model (`DeviceModel`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct DeviceModel {
    pub id: ModelId,
    pub name: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    pub device_type: DeviceType,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub image_url: Option<String>,
    pub attributes_map: BTreeMap<String, ModelAttribute>,
    pub actions_map: BTreeMap<String, ModelAction>,
    #[cfg_attr(feature = "openapi", schema(value_type = Object))]
    pub metadata: JsonMap,
    /// The gateway the model's devices report through, when there is one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gateway_id: Option<String>,
    #[serde(flatten)]
    pub record: RecordMeta,
}

impl DeviceModel {
    /// The codes of the attributes that report the device's position: Strings on channel `g`
    /// (`"lat,lng"`), in code order.
    pub fn position_codes(&self) -> Vec<String> {
        self.attributes_map
            .values()
            .filter(|a| a.channel == Channel::G && a.data_type == DataType::String)
            .map(|a| a.code.clone())
            .collect()
    }
}

/// A project (`Project`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct Project {
    pub id: ProjectId,
    pub name: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub image_url: Option<String>,
    pub status: ProjectStatus,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub address: Option<String>,
    /// Location information, free-form JSON.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<Object>))]
    pub map_info: Option<JsonMap>,
    /// Bearer token for the project's applications.
    /// Left out for a user who may not manage the project (OPERATOR, VIEWER).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub application_access_token: String,
    /// Address of this REST API, for applications.
    pub restful_api_addr: String,
    /// Address of the MQTT broker, for applications (`mqtt://host:port`).
    pub mq_api_addr: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub template_id: Option<String>,
    #[cfg_attr(feature = "openapi", schema(value_type = Object))]
    pub metadata: JsonMap,
    #[serde(flatten)]
    pub record: RecordMeta,
}

/// A device (`Device`), with the fields derived from its model and project.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct Device {
    pub id: DeviceId,
    pub device_name: String,
    pub project_id: ProjectId,
    pub model_id: ModelId,
    pub status: DeviceStatus,
    /// The device's own token: its MQTT password and its REST bearer token.
    /// Left out for a VIEWER user.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub access_token: String,
    pub is_virtual: bool,
    /// The same flag as `isVirtual`, under the name requests use.
    #[serde(rename = "virtual")]
    pub virtual_: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub comments: Option<String>,
    #[cfg_attr(feature = "openapi", schema(value_type = Object))]
    pub metadata: JsonMap,
    pub device_model_type: DeviceType,
    pub device_model_name: String,
    pub project_name: String,
    /// Whether the model defines any action.
    pub has_actions: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub device_model_url: Option<String>,
    #[serde(flatten)]
    pub record: RecordMeta,
}

/// A project's live devices, those of them connected now and those locked.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DeviceCounts {
    pub total: u64,
    pub connected: u64,
    pub locked: u64,
}
