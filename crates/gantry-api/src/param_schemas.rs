//! The schemas of query parameters whose values are a closed set of strings, named by the
//! handlers' `#[param(schema_with = ...)]`; apart from `openapi.rs`, which names the handlers.

use utoipa::openapi::schema::{Object, ObjectBuilder, Type};

fn string_enum(values: &[&str]) -> Object {
    ObjectBuilder::new()
        .schema_type(Type::String)
        .enum_values(Some(values.iter().copied()))
        .build()
}

/// `sortBy` of the project's device listing.
pub fn device_sort_by() -> Object {
    string_enum(&["updatedTime", "createdTime", "deviceName", "status"])
}

/// `sortBy` of the event-log listing.
pub fn log_sort_by() -> Object {
    string_enum(&["updatedTime", "createdTime"])
}

/// `filterBy` of the event listing.
pub fn filter_by() -> Object {
    string_enum(&["deviceTimestamp", "ingressTimeStamp"])
}

/// `interval` of a series.
pub fn series_interval() -> Object {
    string_enum(gantry_core::series::Interval::NAMES)
}
