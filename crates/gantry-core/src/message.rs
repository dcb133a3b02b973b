//! The Message: what devices and the service exchange over MQTT, what a control sends and what
//! an event reads as over REST. Its serde shape is the wire format on both, so MQTT and REST
//! can never disagree on it.

use serde::{Deserialize, Serialize};

use crate::enums::{Channel, MessageType};
use crate::event::DeviceEvent;
use crate::ids::EventId;
use crate::records::JsonMap;
use crate::{Error, Result};

/// `meta` of a Message.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct MessageMeta {
    /// A device may leave it out; the service then assigns one (see `Message::from_device`).
    #[serde(default)]
    pub id: String,
    #[serde(rename = "type", default = "default_type")]
    pub message_type: MessageType,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub deviceid: Option<String>,
    /// The message format's version (`"1.0"`); in a desired-state delta (type c), the
    /// document's version as a number.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<serde_json::Value>))]
    pub version: Option<serde_json::Value>,
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
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct PayloadAttribute {
    pub code: String,
    #[cfg_attr(feature = "openapi", schema(value_type = serde_json::Value))]
    pub value: serde_json::Value,
    #[serde(default = "default_channel")]
    pub channel: Channel,
}

fn default_channel() -> Channel {
    Channel::M
}

/// An action call in a Message.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct PayloadAction {
    pub code: String,
    #[serde(default)]
    #[cfg_attr(feature = "openapi", schema(value_type = Object))]
    pub params: JsonMap,
}

/// `payload` of a Message.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
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
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Refusal {
    /// The attribute code, or empty when the whole message was refused.
    pub code: String,
    pub reason: String,
}

/// The Message: what devices and the service exchange, and what an event reads as.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
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
                version: Some(MESSAGE_VERSION.into()),
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::enums::DataType;
    use crate::ids::{DeviceId, ModelId, ProjectId, TenantId};
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
}
