//! The SQL both engines run as it is: tenants and tokens, device models, projects, devices,
//! device connections, routes, event logs, webhooks, alarm rules and alarms, users, their
//! sessions, the audit log and each project's events per minute. It reads through `SqlStore::pool` and writes through
//! `SqlStore::begin_write` / `writes`; what differs between the engines' dialects (text
//! collation, row locks) comes from `Dialect`, fixed at connect, never from a branch here.

mod alarm_plans;
mod alarm_reads;
mod alarm_rules;
mod alarm_states;
mod alarms;
mod audit;
mod connections;
mod desired;
mod devices;
mod event_logs;
mod event_rate;
mod models;
mod projects;
mod routes;
mod soft_delete;
mod tenants;
mod users;
mod webhooks;

pub use alarm_states::AnyQuery;

/// "1 device", "3 devices".
pub(crate) fn device_count(count: i64) -> String {
    if count == 1 {
        "1 device".to_owned()
    } else {
        format!("{count} devices")
    }
}
