//! The rules of a control's payload, checked against the device's model.

use crate::message::Payload;
use crate::records::DeviceModel;
use crate::{Error, Result};

/// The rules of a control payload: not empty; attributes exist, may be written (W or RW) and
/// carry values of their type; actions exist, their params exist and are typed, required
/// params are present.
pub fn validate_control(model: &DeviceModel, payload: &Payload) -> Result<()> {
    if payload.attrs.is_empty() && payload.actions.is_empty() {
        return Err(Error::invalid("payload", "attrs and actions must not both be empty"));
    }
    for (i, attr) in payload.attrs.iter().enumerate() {
        let field = format!("payload.attrs[{i}]");
        let defined = model.attributes_map.get(&attr.code).ok_or_else(|| {
            Error::invalid(
                format!("{field}.code"),
                format!("`{}` is not an attribute of model {}", attr.code, model.name),
            )
        })?;
        if !defined.readable.writable() {
            return Err(Error::invalid(
                format!("{field}.code"),
                format!("`{}` is read-only (R): it cannot be sent down", attr.code),
            ));
        }
        defined.data_type.check(&format!("{field}.value"), &attr.value)?;
    }
    for (i, action) in payload.actions.iter().enumerate() {
        let field = format!("payload.actions[{i}]");
        let defined = model.actions_map.get(&action.code).ok_or_else(|| {
            Error::invalid(
                format!("{field}.code"),
                format!("`{}` is not an action of model {}", action.code, model.name),
            )
        })?;
        let params = defined.params_map.clone().unwrap_or_default();
        for (name, value) in &action.params {
            let param = params.get(name).ok_or_else(|| {
                Error::invalid(
                    format!("{field}.params.{name}"),
                    format!("`{name}` is not a parameter of action {}", action.code),
                )
            })?;
            param.data_type.check(&format!("{field}.params.{name}"), value)?;
        }
        if let Some(missing) = params
            .values()
            .find(|p| p.required && !action.params.contains_key(&p.code))
        {
            return Err(Error::invalid(
                format!("{field}.params.{}", missing.code),
                "is required",
            ));
        }
    }
    Ok(())
}
