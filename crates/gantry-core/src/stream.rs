//! The project push stream's events (`GET /projects/{id}/stream`): each has a cursor (`id`)
//! increasing within the project, a type, the device it concerns and its data as JSON (a
//! DeviceEvent for `telemetry`, `{deviceId, attributeMap}` of the attributes that changed for
//! `shadow`, an EventLog for `eventLog`, the connection record for `connection`, the desired-state document
//! for `desired`, the Alarm for `alarm`).

use std::sync::Arc;

use crate::ids::DeviceId;
use crate::{Error, Result};

/// What a stream event reports; the same list is what a webhook may ask for (`webhook.rs`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub enum StreamType {
    /// A committed device event.
    Telemetry,
    /// Shadow attributes a commit changed.
    Shadow,
    /// An event log recorded or updated (an ack completing a control).
    EventLog,
    /// A device connected or disconnected.
    Connection,
    /// A device's desired state changed (set, delivered, applied, rejected).
    Desired,
    /// An alarm raised, escalated, de-escalated, acknowledged, commented or cleared (the alarm
    /// after the change).
    Alarm,
}

impl StreamType {
    pub const ALL: [StreamType; 6] = [
        Self::Telemetry,
        Self::Shadow,
        Self::EventLog,
        Self::Connection,
        Self::Desired,
        Self::Alarm,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Telemetry => "telemetry",
            Self::Shadow => "shadow",
            Self::EventLog => "eventLog",
            Self::Connection => "connection",
            Self::Desired => "desired",
            Self::Alarm => "alarm",
        }
    }

    /// A comma list (`telemetry,connection`); empty or absent means all.
    pub fn parse_list(text: Option<&str>) -> Result<Vec<StreamType>> {
        let Some(text) = text.filter(|t| !t.trim().is_empty()) else {
            return Ok(Self::ALL.to_vec());
        };
        text.split(',')
            .map(|name| Self::parse_field(name.trim(), "types"))
            .collect()
    }

    /// One type's name, naming `field` in the error.
    pub fn parse_field(name: &str, field: &str) -> Result<StreamType> {
        Self::ALL.into_iter().find(|t| t.as_str() == name).ok_or_else(|| {
            let names: Vec<&str> = Self::ALL.iter().map(|t| t.as_str()).collect();
            Error::invalid(field, format!("`{name}` is not one of {}", names.join(", ")))
        })
    }
}

/// One event of a project's stream.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StreamEvent {
    pub id: u64,
    pub kind: StreamType,
    pub device_id: DeviceId,
    /// The data, serialized once for every subscriber.
    pub data: Arc<str>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn type_lists() {
        assert_eq!(StreamType::parse_list(None).unwrap(), StreamType::ALL.to_vec());
        assert_eq!(StreamType::parse_list(Some("")).unwrap(), StreamType::ALL.to_vec());
        assert_eq!(
            StreamType::parse_list(Some("connection, telemetry")).unwrap(),
            vec![StreamType::Connection, StreamType::Telemetry]
        );
        let Err(Error::Invalid { field, .. }) = StreamType::parse_list(Some("telemetry,alarms")) else {
            panic!("alarms is not a type");
        };
        assert_eq!(field, "types");
    }
}
