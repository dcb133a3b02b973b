//! Alarms: what a rule or a device raised, its history, and the state a rule keeps per device.
//! `step` (in `step.rs`) is the one transition function. Its result is written only over the
//! state version it was computed from, and a new alarm only through the store's unique index of
//! open alarms, so two nodes or two paths evaluating one device never raise two alarms or lose
//! a count.

use serde::Serialize;
use serde_json::Value;

use crate::enums::{AlarmSource, AlarmStatus, AlarmTransition, Severity};
use crate::ids::{AlarmId, AlarmRuleId, DeviceId, ProjectId, TenantId};
use crate::records::{Device, JsonMap};

mod step;

pub use step::{AlarmState, AlarmWrite, MessageKey, Raiser, Transition, Trigger, fold, step};

/// Where an alarm is raised: the tenant, project and device, and the device's metadata, borrowed
/// from the device (an evaluation copies none of them; only an alarm raised does).
#[derive(Debug, Clone, Copy)]
pub struct Subject<'a> {
    pub tenant: &'a TenantId,
    pub project: &'a ProjectId,
    pub device: &'a DeviceId,
    pub device_name: &'a str,
    pub metadata: &'a JsonMap,
}

impl<'a> Subject<'a> {
    /// The subject of `device`, borrowed from it.
    pub fn of(device: &'a Device) -> Self {
        Subject {
            tenant: &device.record.tenant_id,
            project: &device.project_id,
            device: &device.id,
            device_name: &device.device_name,
            metadata: &device.metadata,
        }
    }
}

/// A subject's parts, owned: for a caller that holds no device to borrow them from (a test).
#[derive(Debug, Clone)]
pub struct SubjectParts {
    pub tenant: TenantId,
    pub project: ProjectId,
    pub device: DeviceId,
    pub device_name: String,
    pub metadata: JsonMap,
}

impl SubjectParts {
    pub fn subject(&self) -> Subject<'_> {
        Subject {
            tenant: &self.tenant,
            project: &self.project,
            device: &self.device,
            device_name: &self.device_name,
            metadata: &self.metadata,
        }
    }
}

/// An alarm, from its raise to its clear.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct Alarm {
    #[cfg_attr(feature = "openapi", schema(value_type = String))]
    pub id: AlarmId,
    #[cfg_attr(feature = "openapi", schema(value_type = String))]
    pub tenant_id: TenantId,
    #[cfg_attr(feature = "openapi", schema(value_type = String))]
    pub project_id: ProjectId,
    #[cfg_attr(feature = "openapi", schema(value_type = String))]
    pub device_id: DeviceId,
    pub device_name: String,
    /// The rule that raised it; absent for a device alarm.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<String>))]
    pub rule_id: Option<AlarmRuleId>,
    /// What it is raised for: `rule:<ruleId>` or `attribute:<code>`.
    #[serde(skip)]
    pub alarm_key: String,
    pub attribute_code: String,
    pub name: String,
    pub severity: Severity,
    pub status: AlarmStatus,
    pub source: AlarmSource,
    /// Device time (epoch ms) of the event that raised it.
    pub first_event_time: i64,
    /// Device time of the newest event that kept it raised.
    pub last_event_time: i64,
    /// That event's value (null for a no-data alarm).
    pub value: Value,
    /// Events that kept it raised, the raising one included.
    pub count: i64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub acknowledged_by: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub acknowledged_time: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cleared_by: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cleared_time: Option<i64>,
    pub created_time: i64,
    pub updated_time: i64,
}

/// One transition of an alarm: who, when, the value and the severity and status after it.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct AlarmHistoryEntry {
    pub id: String,
    #[cfg_attr(feature = "openapi", schema(value_type = String))]
    pub alarm_id: AlarmId,
    pub kind: AlarmTransition,
    pub severity: Severity,
    pub status: AlarmStatus,
    pub value: Value,
    /// `rule:<ruleId>`, `DEVICE`, or the caller (`admin`, `application:<projectId>`...).
    pub by: String,
    /// Epoch ms.
    pub time: i64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub text: Option<String>,
}

impl AlarmHistoryEntry {
    pub fn of(alarm: &Alarm, kind: AlarmTransition, by: &str, time: i64, text: Option<String>) -> Self {
        Self {
            id: uuid::Uuid::now_v7().to_string(),
            alarm_id: alarm.id.clone(),
            kind,
            severity: alarm.severity,
            status: alarm.status,
            value: alarm.value.clone(),
            by: by.to_owned(),
            time,
            text,
        }
    }
}

/// What an alarm listing may be sorted by (`sortBy`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AlarmSort {
    UpdatedTime,
    CreatedTime,
    FirstEventTime,
    LastEventTime,
    Count,
}

impl AlarmSort {
    const NAMES: [(&'static str, AlarmSort); 5] = [
        ("updatedTime", AlarmSort::UpdatedTime),
        ("createdTime", AlarmSort::CreatedTime),
        ("firstEventTime", AlarmSort::FirstEventTime),
        ("lastEventTime", AlarmSort::LastEventTime),
        ("count", AlarmSort::Count),
    ];

    pub fn parse(text: &str) -> crate::Result<Self> {
        Self::NAMES
            .iter()
            .find(|(n, _)| *n == text)
            .map(|(_, s)| *s)
            .ok_or_else(|| {
                let names: Vec<&str> = Self::NAMES.iter().map(|(n, _)| *n).collect();
                crate::Error::invalid("sortBy", format!("`{text}` is not one of {}", names.join(", ")))
            })
    }
}

/// A project's alarm listing, checked.
#[derive(Debug, Clone, PartialEq)]
pub struct AlarmQuery {
    pub project: ProjectId,
    pub device: Option<DeviceId>,
    /// Any of these (all when empty).
    pub statuses: Vec<AlarmStatus>,
    pub severities: Vec<Severity>,
    /// Bounds of `firstEventTime`, both inclusive.
    pub start: Option<i64>,
    pub end: Option<i64>,
    pub sort_by: AlarmSort,
    pub sort_order: crate::enums::SortOrder,
}

/// An alarm listing's query parameters, as sent.
#[derive(Debug, Clone, Default)]
pub struct AlarmFilter {
    pub status: Option<String>,
    pub severity: Option<String>,
    pub device_id: Option<String>,
    pub start_date: Option<String>,
    pub end_date: Option<String>,
    pub sort_by: Option<String>,
    pub sort_order: Option<String>,
}

#[cfg(test)]
mod tests;
