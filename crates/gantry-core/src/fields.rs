//! What callers ask the services to create or change, as sent and not yet checked. The front
//! ends fill these from their wire types; the services check every field (names, codes, types)
//! before anything is stored, so a rule lives in one place whichever front end a value came by.
//! On an update, a field left `None` keeps its stored value.

use std::collections::BTreeMap;

use crate::enums::{
    Channel, DataType, DeviceStatus, DeviceType, EventSource, MessageType, ProjectStatus, Readable, SourceType,
};
use crate::ids::{DeviceId, ModelId, ProjectId};
use crate::message::Payload;
use crate::names::Code;
use crate::records::{ActionParams, JsonMap, ModelAction, ModelAttribute};
use crate::{Error, Result};

/// An attribute of a model, as sent.
#[derive(Debug, Clone)]
pub struct AttributeFields {
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

/// A parameter of a model's action, as sent.
#[derive(Debug, Clone)]
pub struct ParamFields {
    pub name: Option<String>,
    pub code: Option<String>,
    pub description: Option<String>,
    /// Defaults to false.
    pub required: Option<bool>,
    pub data_type: DataType,
}

/// An action of a model, as sent.
#[derive(Debug, Clone)]
pub struct ActionFields {
    pub name: Option<String>,
    pub code: Option<String>,
    pub description: Option<String>,
    pub params_map: Option<BTreeMap<String, ParamFields>>,
}

/// A device model to create or change. `name` is required on creation.
#[derive(Debug, Clone, Default)]
pub struct ModelFields {
    pub name: Option<String>,
    pub description: Option<String>,
    /// Defaults to ROOT on creation.
    pub device_type: Option<DeviceType>,
    pub image_url: Option<String>,
    pub attributes_map: Option<BTreeMap<String, AttributeFields>>,
    pub actions_map: Option<BTreeMap<String, ActionFields>>,
    pub metadata: Option<JsonMap>,
    pub gateway_id: Option<String>,
}

/// A project to create or change. `name` is required on creation.
#[derive(Debug, Clone, Default)]
pub struct ProjectFields {
    pub name: Option<String>,
    pub description: Option<String>,
    pub image_url: Option<String>,
    /// Defaults to development on creation.
    pub status: Option<ProjectStatus>,
    pub address: Option<String>,
    pub map_info: Option<JsonMap>,
    pub metadata: Option<JsonMap>,
    pub template_id: Option<String>,
}

/// A device to create or change. `device_name`, `project_id` and `model_id` are required on
/// creation; the model of a device never changes.
#[derive(Debug, Clone, Default)]
pub struct DeviceFields {
    pub device_name: Option<String>,
    pub project_id: Option<ProjectId>,
    pub model_id: Option<ModelId>,
    /// Defaults to Active on creation.
    pub status: Option<DeviceStatus>,
    pub comments: Option<String>,
    /// Defaults to false on creation.
    pub is_virtual: Option<bool>,
    pub metadata: Option<JsonMap>,
}

/// An event a REST caller posts. `device_id`, `attribute_code` and `attribute_data` are required.
#[derive(Debug, Clone, Default)]
pub struct EventFields {
    pub device_id: Option<DeviceId>,
    pub attribute_code: Option<String>,
    pub attribute_data: Option<serde_json::Value>,
    /// When given, must equal the model's data type of the attribute.
    pub attribute_data_type: Option<DataType>,
    /// Wire-format times (`time::parse_timestamp`); default: when the request arrives.
    pub ingress_time: Option<String>,
    pub device_time: Option<String>,
    pub source: Option<EventSource>,
    /// Default: the model's channel of the attribute.
    pub channel: Option<Channel>,
    pub context: Option<JsonMap>,
    pub correlation_id: Option<String>,
}

/// A control message to send to a device.
#[derive(Debug, Clone, Default)]
pub struct ControlFields {
    /// m (default), ack or c.
    pub message_type: Option<MessageType>,
    pub needack: bool,
    /// Required for type ack: the id of the request message.
    pub correlation_id: Option<String>,
    pub context_id: Option<String>,
    pub payload: Option<Payload>,
    /// 0 (default: sent at once) to 604800: how long the control may wait in the store for a
    /// device that is not connected.
    pub ttl_seconds: Option<i64>,
}

/// A route to create to a device.
#[derive(Debug, Clone, Default)]
pub struct RouteFields {
    /// Required: APP, WEB or DEVICE.
    pub source_type: Option<SourceType>,
    /// Whether the target device's acks are forwarded to the caller.
    pub need_resp: bool,
    /// Required for DEVICE: the device that will send, and its accessToken.
    pub source_device_id: Option<DeviceId>,
    pub source_device_key: Option<String>,
}

/// The code of a map entry: the key, which must follow the naming rule, and `code`, which
/// must equal it when given.
fn entry_code(field: &str, key: &str, code: Option<&str>) -> Result<String> {
    let key = Code::parse(field, key)?.into_inner();
    match code {
        Some(code) if code != key => Err(Error::invalid(
            format!("{field}.code"),
            format!("`{code}` differs from its key `{key}`"),
        )),
        _ => Ok(key),
    }
}

/// Parses an `attributesMap`: every key follows the naming rule and equals its entry's code.
pub fn parse_attributes(input: BTreeMap<String, AttributeFields>) -> Result<BTreeMap<String, ModelAttribute>> {
    input
        .into_iter()
        .map(|(key, a)| {
            let code = entry_code(&format!("attributesMap.{key}"), &key, a.code.as_deref())?;
            let attribute = ModelAttribute {
                name: a.name,
                code: code.clone(),
                data_type: a.data_type,
                description: a.description,
                readable: a.readable.unwrap_or(Readable::R),
                channel: a.channel.unwrap_or(Channel::M),
            };
            Ok((code, attribute))
        })
        .collect()
}

/// Parses an `actionsMap`: action and parameter keys follow the naming rule and equal their codes.
pub fn parse_actions(input: BTreeMap<String, ActionFields>) -> Result<BTreeMap<String, ModelAction>> {
    input
        .into_iter()
        .map(|(key, a)| {
            let field = format!("actionsMap.{key}");
            let code = entry_code(&field, &key, a.code.as_deref())?;
            let params = a
                .params_map
                .map(|params| {
                    params
                        .into_iter()
                        .map(|(pkey, p)| {
                            let pcode = entry_code(&format!("{field}.paramsMap.{pkey}"), &pkey, p.code.as_deref())?;
                            let param = ActionParams {
                                name: p.name,
                                code: pcode.clone(),
                                description: p.description,
                                required: p.required.unwrap_or(false),
                                data_type: p.data_type,
                            };
                            Ok((pcode, param))
                        })
                        .collect::<Result<BTreeMap<_, _>>>()
                })
                .transpose()?;
            Ok((
                code.clone(),
                ModelAction {
                    name: a.name,
                    code,
                    description: a.description,
                    params_map: params,
                },
            ))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn attr(code: Option<&str>) -> AttributeFields {
        AttributeFields {
            name: None,
            code: code.map(str::to_owned),
            data_type: DataType::Float,
            description: None,
            readable: None,
            channel: None,
        }
    }

    #[test]
    fn attribute_codes_come_from_keys() {
        let parsed = parse_attributes(BTreeMap::from([("temp".to_owned(), attr(None))])).unwrap();
        assert_eq!(parsed["temp"].code, "temp");
        assert_eq!(parsed["temp"].readable, Readable::R);
        assert_eq!(parsed["temp"].channel, Channel::M);
        let err = parse_attributes(BTreeMap::from([("temp".to_owned(), attr(Some("other")))])).unwrap_err();
        assert!(err.to_string().starts_with("attributesMap.temp.code"), "{err}");
        let err = parse_attributes(BTreeMap::from([("1bad".to_owned(), attr(None))])).unwrap_err();
        assert!(err.to_string().starts_with("attributesMap.1bad"), "{err}");
    }

    #[test]
    fn params_default_to_not_required() {
        let action = ActionFields {
            name: None,
            code: None,
            description: None,
            params_map: Some(BTreeMap::from([(
                "delay".to_owned(),
                ParamFields {
                    name: None,
                    code: None,
                    description: None,
                    required: None,
                    data_type: DataType::Integer,
                },
            )])),
        };
        let parsed = parse_actions(BTreeMap::from([("reboot".to_owned(), action)])).unwrap();
        assert!(!parsed["reboot"].params_map.as_ref().unwrap()["delay"].required);
    }
}
