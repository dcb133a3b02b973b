//! Event logs: the record of a control message sent down and what became of it, or of a
//! device's response. A control that waits for its ack stays `processing` until the ack or its
//! deadline, whichever comes first.

use serde::{Deserialize, Serialize};

use crate::enums::{Classification, EventLogStatus};
use crate::ids::{DeviceId, ProjectId, TenantId};

/// An event log (`EventLog`): a control message and what became of it, or a device's response.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct EventLog {
    pub id: String,
    pub tenant_id: TenantId,
    pub project_id: ProjectId,
    pub status: EventLogStatus,
    pub classification: Classification,
    pub device_id: DeviceId,
    pub device_name: String,
    /// The message sent (DeviceControll) or received (Response).
    #[cfg_attr(feature = "openapi", schema(value_type = Object))]
    pub event_data: serde_json::Value,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub context_id: Option<String>,
    /// The device's acks to a control message, oldest first.
    #[cfg_attr(feature = "openapi", schema(value_type = Vec<Object>))]
    pub responses: Vec<serde_json::Value>,
    /// `meta.id` of the message the log records; the `eventId` filter matches it.
    pub event_id: String,
    pub created_by: String,
    pub created_time: i64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub updated_by: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub updated_time: Option<i64>,
    pub deleted: bool,
    /// For a control sent with a time to live to a device not connected: when it ends in
    /// `exception` (reason `expired`) unless it was delivered by then.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub expires_time: Option<i64>,
    /// For a control that waited: when it was published to the device; its ack deadline
    /// counts from then.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub delivered_time: Option<i64>,
    /// Why the log ended in `exception`, when Gantry knows: `expired`, `cancelled`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// Whose inbox gets the device's ack to this message (a route's caller); not shown.
    #[serde(skip)]
    pub reply_to: Option<String>,
}

impl EventLog {
    /// A control that waits in the store for its device to connect.
    pub fn is_waiting(&self) -> bool {
        self.status == EventLogStatus::Processing && self.expires_time.is_some() && self.delivered_time.is_none()
    }
}
