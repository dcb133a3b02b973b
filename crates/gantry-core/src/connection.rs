//! A device's MQTT connection as applications see it (`GET /devices/{id}/connection`): whether
//! it is connected now, when it last came and went, when it was last heard from, and how it
//! connects. A `ConnectionChange` is the domain event of a connect or disconnect, published in
//! process to whoever follows the project (the push stream, webhooks).

use serde::{Deserialize, Serialize};

use crate::ids::{DeviceId, ProjectId, TenantId};

/// The transports a device connects over.
pub const TRANSPORTS: [&str; 4] = ["tcp", "tls", "ws", "wss"];

/// A device's connection record. Times are epoch milliseconds, absent when it never happened.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct Connection {
    pub device_id: DeviceId,
    /// Whether the device holds an MQTT session now. False after a restart of Gantry (embedded
    /// broker) until the device connects again.
    pub connected: bool,
    /// When its last (or current) session began.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub connected_time: Option<i64>,
    /// When its last session ended; absent while the first session is still on.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub disconnected_time: Option<i64>,
    /// The last packet (message or ping) from the device.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_seen_time: Option<i64>,
    /// The peer's address and port of the last session.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub client_address: Option<String>,
    /// `MQTT 3.1.1` or `MQTT 5` (`MQTT 3.1` for the old protocol level 3).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub protocol: Option<String>,
    /// `tcp`, `tls`, `ws` or `wss`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub transport: Option<String>,
}

impl Connection {
    /// The record of a device never seen connected.
    pub fn never(device_id: DeviceId) -> Self {
        Self {
            device_id,
            connected: false,
            connected_time: None,
            disconnected_time: None,
            last_seen_time: None,
            client_address: None,
            protocol: None,
            transport: None,
        }
    }
}

/// A session that began: who, and how it connects.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionStart {
    pub device: DeviceId,
    /// When the session began (epoch ms): it names the session, so that the end of an older
    /// session taken over by a newer one changes nothing.
    pub at: i64,
    pub client_address: Option<String>,
    pub protocol: Option<String>,
    pub transport: Option<String>,
}

/// A session that ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionEnd {
    pub device: DeviceId,
    /// The start of the session that ended, or an upper bound of it (the end itself, when the
    /// broker does not say): a record whose session began later is left as it is.
    pub started_by: i64,
    pub at: i64,
    /// The last packet from the device, when known.
    pub last_seen: Option<i64>,
}

/// A connect or disconnect, with the record as it is after it: what the push stream sends as
/// its `connection` event and webhooks deliver.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConnectionChange {
    pub tenant_id: TenantId,
    pub project_id: ProjectId,
    pub connection: Connection,
}
