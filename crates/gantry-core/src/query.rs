//! The filters and orders of the listings: the front ends parse query strings into these, the
//! services check the caller's scope against them and pass them to the store.

use crate::enums::{DeviceStatus, DeviceType, ProjectStatus, SortOrder};
use crate::ids::{DeviceId, ModelId, ProjectId};
use crate::{Error, Result};

/// Filters of the project listing.
#[derive(Debug, Clone, Default)]
pub struct ProjectQuery {
    pub status: Option<ProjectStatus>,
    /// Restricts the listing to these projects (an application sees only its own, a user its
    /// projects).
    pub only: Option<Vec<ProjectId>>,
}

/// Sort fields of device listings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeviceSort {
    UpdatedTime,
    CreatedTime,
    DeviceName,
    Status,
}

impl DeviceSort {
    pub const NAMES: &'static [&'static str] = &["updatedTime", "createdTime", "deviceName", "status"];

    pub fn parse(text: &str) -> Result<Self> {
        match text {
            "updatedTime" => Ok(Self::UpdatedTime),
            "createdTime" => Ok(Self::CreatedTime),
            "deviceName" => Ok(Self::DeviceName),
            "status" => Ok(Self::Status),
            _ => Err(Error::invalid(
                "sortBy",
                format!("`{text}` is not one of {}", Self::NAMES.join(", ")),
            )),
        }
    }
}

/// Filters and order of a device listing.
#[derive(Debug, Clone)]
pub struct DeviceQuery {
    pub project: Option<ProjectId>,
    /// Restricts the listing to the devices of these projects (the caller's scope).
    pub within: Option<Vec<ProjectId>>,
    pub model: Option<ModelId>,
    /// Case-insensitive substring of the device name.
    pub device_name: Option<String>,
    pub device_type: Option<DeviceType>,
    pub is_virtual: Option<bool>,
    pub status: Option<DeviceStatus>,
    /// Only devices connected now (true) or not (false).
    pub connected: Option<bool>,
    pub sort_by: DeviceSort,
    pub sort_order: SortOrder,
}

impl Default for DeviceQuery {
    fn default() -> Self {
        Self {
            project: None,
            within: None,
            model: None,
            device_name: None,
            device_type: None,
            is_virtual: None,
            status: None,
            connected: None,
            sort_by: DeviceSort::UpdatedTime,
            sort_order: SortOrder::Desc,
        }
    }
}

/// Which time a listing's date range applies to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TimeField {
    Device,
    Ingress,
}

impl TimeField {
    pub fn parse(text: &str) -> Result<Self> {
        match text {
            "deviceTimestamp" => Ok(TimeField::Device),
            "ingressTimeStamp" => Ok(TimeField::Ingress),
            _ => Err(Error::invalid(
                "filterBy",
                format!("`{text}` is not one of deviceTimestamp, ingressTimeStamp"),
            )),
        }
    }
}

/// Filters of an event listing: one device, optionally one attribute, an inclusive time range.
#[derive(Debug, Clone)]
pub struct EventQuery {
    pub device: DeviceId,
    pub attribute_code: Option<String>,
    pub time_field: TimeField,
    pub start: Option<i64>,
    pub end: Option<i64>,
}

/// The raw listing parameters, as the API receives them.
#[derive(Debug, Clone, Default)]
pub struct EventFilter {
    pub attribute_code: Option<String>,
    pub start_date: Option<String>,
    pub end_date: Option<String>,
    pub filter_by: Option<String>,
}

/// Sort fields of the event-log listing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventLogSort {
    UpdatedTime,
    CreatedTime,
}

impl EventLogSort {
    pub fn parse(text: &str) -> Result<Self> {
        match text {
            "updatedTime" => Ok(Self::UpdatedTime),
            "createdTime" => Ok(Self::CreatedTime),
            _ => Err(Error::invalid(
                "sortBy",
                format!("`{text}` is not one of updatedTime, createdTime"),
            )),
        }
    }
}

/// Filters of the event-log listing of a project.
#[derive(Debug, Clone)]
pub struct EventLogQuery {
    pub project: ProjectId,
    pub device: Option<DeviceId>,
    pub event_id: Option<String>,
    pub context_id: Option<String>,
    pub sort_by: EventLogSort,
    pub sort_order: SortOrder,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn filter_by_names() {
        assert_eq!(TimeField::parse("ingressTimeStamp").unwrap(), TimeField::Ingress);
        assert!(
            TimeField::parse("whenever")
                .unwrap_err()
                .to_string()
                .starts_with("filterBy")
        );
    }
}
