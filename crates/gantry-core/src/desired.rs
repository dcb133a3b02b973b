//! A device's desired state: the values operators want its writable attributes to hold, with a
//! version per document and per attribute, and what the device made of each (pending,
//! delivered, applied, rejected). The rules that need only these values live here: a patch,
//! the delta a device is sent, and which answers may mark a value applied.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::enums::DesiredStatus;
use crate::ids::{DeviceId, TenantId};

/// One desired attribute. `version` is the document's version at the attribute's last change,
/// so a message sent at document version V carries this value exactly when `version <= V`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct DesiredAttribute {
    #[cfg_attr(feature = "openapi", schema(value_type = serde_json::Value))]
    pub value: serde_json::Value,
    pub version: i64,
    pub status: DesiredStatus,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    pub updated_by: String,
    pub updated_time: i64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub delivered_time: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub applied_time: Option<i64>,
}

/// A device's desired state (`GET /devices/{id}/desired`). Version 0 is the empty document of
/// a device that never had one.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct DesiredState {
    pub device_id: DeviceId,
    #[serde(skip)]
    pub tenant_id: TenantId,
    pub version: i64,
    pub attributes: BTreeMap<String, DesiredAttribute>,
}

impl DesiredState {
    pub fn empty(tenant: TenantId, device: DeviceId) -> Self {
        Self {
            device_id: device,
            tenant_id: tenant,
            version: 0,
            attributes: BTreeMap::new(),
        }
    }

    /// Sets (`Some`) or removes (`None`) desired values as one change: the document's version
    /// rises by one and each changed attribute takes it. Setting the value an attribute holds
    /// already changes nothing of it. Returns whether anything changed.
    pub fn patch(&mut self, changes: &BTreeMap<String, Option<serde_json::Value>>, by: &str, now: i64) -> bool {
        let next = self.version + 1;
        let mut changed = false;
        for (code, value) in changes {
            match value {
                None => changed |= self.attributes.remove(code).is_some(),
                Some(value) if self.attributes.get(code).is_some_and(|a| &a.value == value) => {}
                Some(value) => {
                    changed = true;
                    self.attributes.insert(
                        code.clone(),
                        DesiredAttribute {
                            value: value.clone(),
                            version: next,
                            status: DesiredStatus::Pending,
                            reason: None,
                            updated_by: by.to_owned(),
                            updated_time: now,
                            delivered_time: None,
                            applied_time: None,
                        },
                    );
                }
            }
        }
        if changed {
            self.version = next;
        }
        changed
    }

    /// The attributes the device is sent: every one not applied, by code.
    pub fn delta(&self) -> Vec<(&str, &serde_json::Value)> {
        self.attributes
            .iter()
            .filter(|(_, a)| a.status != DesiredStatus::Applied)
            .map(|(code, a)| (code.as_str(), &a.value))
            .collect()
    }

    /// The delta of document version `sent` was sent: the attributes it carried (those not
    /// applied and unchanged since) are delivered. Returns whether anything changed.
    pub fn delivered(&mut self, sent: i64, now: i64) -> bool {
        let mut changed = false;
        for attribute in self.attributes.values_mut() {
            if attribute.version > sent || attribute.status == DesiredStatus::Applied {
                continue;
            }
            if attribute.status == DesiredStatus::Pending {
                attribute.status = DesiredStatus::Delivered;
            }
            attribute.delivered_time = Some(now);
            changed = true;
        }
        changed
    }

    /// The device acknowledged the delta sent at document version `sent_version` with
    /// `codes` in it, refusing `refused` (code, reason). Only attributes unchanged since that
    /// version are marked: an answer to an older delta never settles a newer value. Returns
    /// whether anything changed.
    pub fn acknowledged(
        &mut self,
        sent_version: i64,
        codes: &[String],
        refused: &[(String, String)],
        now: i64,
    ) -> bool {
        let mut changed = false;
        for code in codes {
            let Some(attribute) = self.attributes.get_mut(code) else {
                continue;
            };
            if attribute.version > sent_version || attribute.status == DesiredStatus::Applied {
                continue;
            }
            match refused.iter().find(|(c, _)| c == code) {
                Some((_, reason)) => {
                    if attribute.status == DesiredStatus::Rejected && attribute.reason.as_deref() == Some(reason) {
                        continue;
                    }
                    attribute.status = DesiredStatus::Rejected;
                    attribute.reason = Some(reason.clone());
                }
                None => {
                    attribute.status = DesiredStatus::Applied;
                    attribute.reason = None;
                    attribute.applied_time = Some(now);
                }
            }
            changed = true;
        }
        changed
    }

    /// The device reported `value` for `code`: the desired value is applied if it is that value.
    pub fn reported(&mut self, code: &str, value: &serde_json::Value, now: i64) -> bool {
        match self.attributes.get_mut(code) {
            Some(attribute) if attribute.status != DesiredStatus::Applied && &attribute.value == value => {
                attribute.status = DesiredStatus::Applied;
                attribute.reason = None;
                attribute.applied_time = Some(now);
                true
            }
            _ => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn state() -> DesiredState {
        DesiredState::empty(TenantId::default_tenant(), DeviceId::from_string("d"))
    }

    fn set(pairs: &[(&str, Option<serde_json::Value>)]) -> BTreeMap<String, Option<serde_json::Value>> {
        pairs.iter().map(|(c, v)| ((*c).to_owned(), v.clone())).collect()
    }

    #[test]
    fn a_patch_raises_the_document_and_the_changed_attributes() {
        let mut s = state();
        assert!(s.patch(&set(&[("limit", Some(json!(5))), ("mode", Some(json!("eco")))]), "a", 1));
        assert_eq!(s.version, 1);
        assert!(s.patch(&set(&[("limit", Some(json!(6))), ("mode", Some(json!("eco")))]), "a", 2));
        assert_eq!(
            (s.version, s.attributes["limit"].version, s.attributes["mode"].version),
            (2, 2, 1)
        );
        assert!(
            !s.patch(&set(&[("mode", Some(json!("eco")))]), "a", 3),
            "same value: no change"
        );
        assert!(s.patch(&set(&[("mode", None)]), "a", 4));
        assert_eq!((s.version, s.delta().len()), (3, 1));
    }

    #[test]
    fn an_answer_to_an_older_delta_never_settles_a_newer_value() {
        let mut s = state();
        s.patch(&set(&[("limit", Some(json!(5))), ("mode", Some(json!("eco")))]), "a", 1);
        s.delivered(1, 2);
        s.patch(&set(&[("limit", Some(json!(6)))]), "a", 3);
        let codes = vec!["limit".to_owned(), "mode".to_owned()];
        assert!(s.acknowledged(1, &codes, &[], 4));
        assert_eq!(s.attributes["mode"].status, DesiredStatus::Applied);
        assert_eq!(s.attributes["limit"].status, DesiredStatus::Pending);
        assert!(!s.reported("limit", &json!(5), 5), "a report of the old value");
        assert!(s.acknowledged(2, &codes[..1], &[("limit".into(), "too high".into())], 6));
        assert_eq!(s.attributes["limit"].status, DesiredStatus::Rejected);
        assert!(s.reported("limit", &json!(6), 7));
        assert_eq!(s.delta().len(), 0);
    }
}
